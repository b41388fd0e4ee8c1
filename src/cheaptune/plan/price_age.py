"""How far to trust each price behind a plan: its own date, source and basis, where the choice is made.

Every offer row carries the date its source gives (or `undated`) and how the price was had (quoted,
derived from another figure, or the low end of a range). A price is trusted when it is quoted and at
most STALE_DAYS old; an untrusted one ranks after a trusted one within TRUST_TOLERANCE of its cost,
its risk rises a step, and the plan warns when the recommended or runner-up price is untrusted.
Pure over its arguments (the day to count ages from is passed in; pricing passes today).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import Any

from cheaptune.plan.doctor import Finding

STALE_DAYS = 30  # a quoted price older than this (or undated) is not trusted to still hold
# the ranking puts an untrusted price after a trusted one unless the trusted one costs more than this much
# more: it pays up to 10% for a price someone has offered recently, not for one that may have moved
TRUST_TOLERANCE = 0.10
RISK_STEPS = ("low", "medium", "high")
CHOICES = ("bundled", "cache", "live")  # plan --prices
REFRESH = ("`cheaptune prices refresh` (or plan --prices live), or put the quote you were given in a user CSV "
           "($CHEAPTUNE_PRICES or ~/.cheaptune/prices.csv)")


def age_days(as_of: str, today: date) -> int | None:
    """Days since the source's date; None when the source gives no date."""
    try:
        return (today - date.fromisoformat(as_of)).days
    except (TypeError, ValueError):
        return None


def price_facts(offer: Any, today: date) -> dict[str, Any]:
    """The price's provenance as a plan option carries it: as-of date, source, age in days, basis."""
    as_of = str(getattr(offer, "date", "") or "undated")
    return {"price_as_of": as_of, "price_source": str(getattr(offer, "source", "") or ""),
            "price_age_days": age_days(as_of, today), "price_basis": str(getattr(offer, "basis", "quoted"))}


def trusted(o: Any) -> bool:
    """A quoted price at most STALE_DAYS old (an option or an offer's price_facts)."""
    age = _get(o, "price_age_days")
    return _get(o, "price_basis", "quoted") == "quoted" and age is not None and age <= STALE_DAYS


def label(o: Any) -> str:
    """'12 d' (a quoted price's age), 'undated derived', '430 d range-low': the table's and recommendation's words."""
    if _get(o, "price_as_of") is None:
        return "not recorded"  # a plan saved before prices carried their dates
    age, basis = _get(o, "price_age_days"), _get(o, "price_basis", "quoted")
    return ("undated" if age is None else f"{age} d") + ("" if basis == "quoted" else f" {basis}")


def rank_factor(o: Any) -> float:
    """What an option's cost is multiplied by for ranking only: 1, or 1 + TRUST_TOLERANCE when untrusted."""
    return 1.0 if trusted(o) else 1.0 + TRUST_TOLERANCE


def aged_risk(risk: str, facts: dict[str, Any]) -> str:
    """The risk column rises one step when the price is undated or older than STALE_DAYS."""
    age = facts.get("price_age_days")
    if age is not None and age <= STALE_DAYS:
        return risk
    i = RISK_STEPS.index(risk) if risk in RISK_STEPS else 0
    return RISK_STEPS[min(i + 1, len(RISK_STEPS) - 1)]


def _get(o: Any, key: str, default: Any = None) -> Any:
    return o.get(key, default) if isinstance(o, dict) else getattr(o, key, default)


def _why(o: Any) -> str:
    age, basis = _get(o, "price_age_days"), _get(o, "price_basis", "quoted")
    parts = []
    if age is None:
        parts.append("undated")
    elif age > STALE_DAYS:
        parts.append(f"{age} days old")
    if basis != "quoted":
        parts.append({"derived": "derived from another price, not quoted",
                      "range-low": "the low end of a range (the cheapest zone or a 'from' price)"}.get(basis, basis))
    return ", ".join(parts)


def price_line(o: Any) -> str:
    """'price $1.87/h, 12 d old (as of 2026-11-19, quoted: <source>)': how old the recommendation's price is."""
    age = _get(o, "price_age_days")
    old = "undated" if age is None else f"{age} d old"
    return (f"price ${o.price_per_hour:.4g}/h, {old} (as of {_get(o, 'price_as_of')}, "
            f"{_get(o, 'price_basis', 'quoted')}: {_get(o, 'price_source')})")


def passed_over(best: Any, ranked: list[Any]) -> str:
    """Why a cheaper option ranks after the recommendation (its price is not trusted), or ''."""
    cheaper = [o for o in ranked if o.total < best.total and not trusted(o)]
    if not cheaper or not trusted(best):
        return ""
    o = min(cheaper, key=lambda x: x.total)
    return (f"ranked before {o.label()} at ${o.total:.2f}, whose price is {_why(o)}: a fresh quoted price within "
            f"{TRUST_TOLERANCE:.0%} of an untrusted one comes first")


def price_age(options: Iterable[Any], today: date, has_cache: bool, choice: str = "cache") -> tuple[list[str], list[Finding]]:
    """(notes, warnings): the age on `today` of the recommended and runner-up prices; a warning when either is
    untrusted (older than STALE_DAYS, undated or not quoted)."""
    shown = [o for o in options if getattr(o, "offer", None) is not None or _get(o, "price_as_of")]
    notes: list[str] = []
    if choice == "bundled":
        notes.append("prices: the bundled snapshot only (--prices bundled)")
    elif not has_cache:
        notes.append(f"prices: the bundled snapshot (and SkyPilot's catalogs where present); no live cache yet: {REFRESH}")
    if not shown:
        return notes, []
    top = []
    for role, o in zip(("recommended", "runner-up"), shown[:2], strict=False):
        as_of = _get(o, "price_as_of") or "undated"
        facts = {"price_as_of": as_of, "price_age_days": age_days(as_of, today),
                 "price_basis": _get(o, "price_basis", "quoted"), "price_source": _get(o, "price_source", "")}
        top.append((role, o, facts))
    notes.insert(0, "price ages: " + "; ".join(
        f"{role} {o.provider}/{o.gpu} price as of {f['price_as_of']} ({label(f)}; {f['price_source']})" for role, o, f in top))
    stale = [(role, o, f) for role, o, f in top if not trusted(f)]
    if not stale:
        return notes, []
    what = "; ".join(f"the {role} price ({o.provider}/{o.gpu}, ${o.price_per_hour:.4g}/h) is {_why(f)}" for role, o, f in stale)
    return notes, [Finding("stale-prices", f"{what}: it may no longer hold (more than {STALE_DAYS} days old, undated "
                           f"or not quoted counts); check it before renting: {REFRESH}")]
