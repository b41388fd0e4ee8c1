"""Argument check the accuracy benches share: they take a few bare flags, and an unknown one (`--help`, a typo)
must not start a run of many minutes that rewrites bench/results/*.json."""

from __future__ import annotations


def refuse_unknown(argv: list[str], allowed: tuple[str, ...], doc: str | None) -> int | None:
    """Exit code 2 (after one line naming the flag and the usage) when argv holds anything but `allowed`, else None.
    `--help`/`-h` print the script's docstring and exit 0."""
    if any(a in ("--help", "-h") for a in argv):
        print(doc or "")
        return 0
    unknown = [a for a in argv if a not in allowed]
    if not unknown:
        return None
    print(f"unknown argument {unknown[0]!r}: this bench takes {' '.join(f'[{a}]' for a in allowed)}")
    return 2
