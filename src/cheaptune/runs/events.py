"""A run's registry events as lines a person reads (`report`): the probe's measurement, an eval's scores, a
preemption, an out-of-memory fallback, each in words; alerts by their own message. Never a raw dict."""

from __future__ import annotations

from typing import Any

GIB = 2**30


def pct(measured: float, predicted: float) -> str:
    return f"{100 * (measured / predicted - 1):+.0f}%"


def probe_line(r: dict[str, Any]) -> str:
    """'probe (3 steps, micro-batch 4 x 1): memory 20.1 GiB on the device (...) vs 21.5 predicted (-7%); speed ...'."""
    if r.get("peak_allocated") is None:
        mem = "memory not measured on this device"
    else:
        mem = (f"memory {r['device_used'] / GIB:.2f} GiB on the device ({r['peak_allocated'] / GIB:.2f} peak "
               f"allocated, {r['peak_reserved'] / GIB:.2f} reserved)")
        if r.get("predicted_peak"):
            mem += f" vs {r['predicted_peak'] / GIB:.2f} predicted ({pct(r['device_used'], r['predicted_peak'])})"
    speed = f"speed {r['tokens_per_s']:.0f} tok/s, {r['s_per_step']:.2f} s/step"
    if r.get("planned_gpu"):
        speed += f" (ran on {r.get('gpu') or 'the CPU'}, not the plan's {r['planned_gpu']}: not compared with its prediction)"
    elif r.get("predicted_tokens_per_s"):
        speed += f" vs {r['predicted_tokens_per_s']:.0f} predicted ({pct(r['tokens_per_s'], r['predicted_tokens_per_s'])})"
    else:
        speed += " (no prediction: train from a plan for one)"
    return f"probe ({r['steps']} steps, micro-batch {r['micro_batch']} x {r['grad_accum']}): {mem}; {speed}"


def _eval_line(d: dict[str, Any]) -> str:
    def side(name: str) -> str:
        s = d.get(name) or {}
        parts = [f"loss {s['loss']:.4g}"] if "loss" in s else []
        parts += [f"{k.replace('_', ' ')} {100 * s[k]:.1f}%" for k in ("accuracy", "exact_match", "json_valid",
                                                                    "schema_valid") if k in s]
        return f"{name} " + ", ".join(parts) if parts else ""

    sides = "; ".join(x for x in (side("base"), side("tuned")) if x)
    return f"eval on {d.get('data') or 'held-out rows'} ({d.get('rows', '?')} rows): {sides or 'no scores'}"


def _value(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _fields(d: dict[str, Any]) -> str:
    """Other events: their plain fields as 'name value' pairs (nested values left out)."""
    return ", ".join(f"{k.replace('_', ' ')} {_value(v)}" for k, v in d.items()
                     if v is not None and not isinstance(v, (dict, list)))


def event_line(event: dict[str, Any]) -> str:
    """One readable line for a registry event ({'kind', 'detail', ...})."""
    kind, d = event["kind"], event.get("detail")
    if not isinstance(d, dict):
        return kind if d in (None, "") else f"{kind}: {d}"
    if "message" in d:
        return f"{kind}: {d['message']}"
    try:
        if kind == "probe":
            return probe_line(d)
        if kind == "eval":
            return _eval_line(d)
        if kind == "preempted":
            saved = f"; checkpoint saved in {d['save_s']:.2f} s" if d.get("save_s") is not None else ""
            return f"preempted at step {d.get('step', '?')} ({d.get('reason') or d.get('signal') or 'signal'}){saved}"
        if kind == "oom_fallback":
            return f"out of memory at step {d.get('step', '?')}: {d.get('change') or d.get('fallback')}"
    except (KeyError, TypeError, ValueError):
        pass  # an older or partial record: its fields as they are
    return f"{kind}: {_fields(d)}" if _fields(d) else kind
