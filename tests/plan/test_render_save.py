"""JSON keys, Markdown, and --save round-trip through planfile.load (hand-made catalogs, fake fit)."""

from __future__ import annotations

import pytest

from cheaptune.errors import BadInput
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


def test_saved_settings_are_the_ones_the_option_was_fitted_with():
    """Precision resolved for the chosen board (a T4 trains fp16-mixed), QLoRA's quantization, the plan's
    rank, GPUs and sharding; never the old '-mixed' for everything."""
    from cheaptune.plan.candidates import run_precision
    from tests.plan.fakes import gpu, offer

    for method in ("full", "lora", "qlora"):
        r = make_plan("test-7b", SHAPE_7B, 4096, Workload(tokens=1_000_000, epochs=1), Constraints(methods=(method,)),
                      [gpu("T4", 16, arch="turing", bf16=False), gpu("A100-80GB", 80)],
                      [offer("aws", "T4", 0.5), offer("aws", "A100-80GB", 3.0)], fake_fit())
        best = r.recommended
        s = to_planfile(r, "org/test-7b", None).train
        assert s.precision == run_precision(method, best.spec)
        assert s.quant == ("nf4-dq" if method == "qlora" else None)
        assert (s.lora_r, s.gpus, s.sharding) == ((None if method == "full" else 16), best.total_gpus, best.sharding)


def test_the_plan_stores_what_from_pretrained_loads(tmp_path):
    from cheaptune.catalog.models import loadable_name, resolve_model

    alias = resolve_model("llama-2-7b")
    assert loadable_name("llama-2-7b", alias) == "meta-llama/Llama-2-7b-hf"
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json_config())
    assert loadable_name(str(tmp_path / "m"), resolve_model(tmp_path / "m")) == str((tmp_path / "m").resolve())
    r = result()
    saved = to_planfile(r, "meta-llama/Llama-2-7b-hf", None, label="llama-2-7b")
    assert (saved.model, saved.model_label) == ("meta-llama/Llama-2-7b-hf", "llama-2-7b")


def json_config() -> str:
    import json

    return json.dumps({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                       "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256,
                       "max_position_embeddings": 512})


def test_a_plan_too_big_for_a_plan_file_is_one_line_at_save():
    """1e15 tokens x 1000 epochs: dollars and hours past what a plan file holds (train and launch would refuse
    it) are said as one BadInput naming the fields, not a pydantic traceback."""
    w = Workload(tokens=10**15, epochs=1000, seq_len=2048, effective_batch=16)
    r = make_plan("test", SHAPE_7B, 4096, w, Constraints(methods=("lora",), max_gpus=1), GPUS, OFFERS, fake_fit())
    with pytest.raises(BadInput, match=r"^--save: the recommended option's figures are beyond what a plan file "
                                       r"holds \(.*total: Input should be less than or equal to 1000000000 "):
        to_planfile(r, "test")
