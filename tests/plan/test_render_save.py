"""JSON keys, Markdown, and --save round-trip through planfile.load (hand-made catalogs, fake fit)."""

from __future__ import annotations

from cheaptune.plan import planfile, render
from cheaptune.plan.planner import make_plan
from cheaptune.plan.save import to_planfile
from cheaptune.plan.workload import Constraints, Workload
from tests.plan.fakes import GPUS, OFFERS, SHAPE_7B, fake_fit

OPTION_KEYS = {"method", "gpu", "gpu_count", "provider", "region", "spot", "peak_vram_bytes", "gpu_memory_bytes",
               "micro_batch", "grad_accum", "grad_ckpt", "tokens_per_s", "hours", "cost"}
COST_KEYS = {"compute", "storage", "egress", "spot_overhead", "total"}


def result(c=Constraints()):
    return make_plan("test-7b", SHAPE_7B, 4096, Workload(tokens=20_000_000, epochs=2), c, GPUS, OFFERS, fake_fit())


def test_json_has_the_contract_keys():
    doc = render.to_json(result())
    assert {"options", "recommended", "excluded", "warnings"} <= set(doc)
    for o in doc["options"] + [doc["recommended"]]:
        assert set(o) >= OPTION_KEYS and set(o["cost"]) >= COST_KEYS
    assert doc["recommended"]["cost"] == doc["options"][0]["cost"]
    assert all({"option", "reason"} <= set(e) for e in doc["excluded"])
    assert all({"code", "message"} <= set(w) for w in doc["warnings"])
    import json

    json.dumps(doc)  # serialisable as is


def test_markdown_has_table_and_recommendation():
    md = render.to_markdown(result())
    assert "| method |" in md and "### Recommendation" in md


def test_save_round_trip(tmp_path):
    r = result()
    path = tmp_path / "plan.yaml"
    planfile.save(to_planfile(r, "test-7b", "data.jsonl"), path)
    back = planfile.load(path)
    best = r.recommended
    assert back.train.method == best.method and back.offer.gpu == best.gpu and back.offer.provider == best.provider
    assert back.train.micro_batch == best.micro_batch and back.train.grad_accum == best.grad_accum
    assert back.prediction.cost.total == best.total
    assert back.prediction.peak_vram_bytes == best.peak_vram_bytes
    assert all(a.gpu == best.gpu for a in back.alternatives)
    if best.spot:
        assert back.train.checkpoint_minutes and back.prediction.cost.pessimistic_total > best.total
