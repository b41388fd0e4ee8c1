"""End to end over the real catalogs and memory estimator: the guide's scenarios and the CLI contract.

Asserts structure and sane relations, and that a board's peak VRAM and micro-batch are what the worked
examples in docs/scenarios/ record (regenerate them with docs/scenarios/generate.sh when the estimator
changes). The estimate cache is shared by these tests (one folder per session) so each model is simulated once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheaptune.plan import planfile

GIB = 1024**3
SCENARIOS = Path(__file__).resolve().parents[2] / "docs" / "scenarios"
TEST_GPUS = "RTX4090,T4"
TWO_GPUS = "RTX4090,A100-80GB"  # fewer memory sizes: fewer cold simulations


@pytest.fixture(scope="module")
def shared_home(tmp_path_factory):
    return tmp_path_factory.mktemp("plan_home")


@pytest.fixture
def plan_json(run_cli, shared_home, monkeypatch):
    monkeypatch.setenv("CHEAPTUNE_HOME", str(shared_home))

    def _run(*args: str, gpus: str = TEST_GPUS) -> tuple[int, dict | None, str]:
        code, out, err = run_cli("plan", *args, "--gpu", gpus, "--json")
        return code, (json.loads(out) if out.strip() else None), err

    return _run


def recorded(scenario: str, method: str, gpu: str) -> tuple[float, str]:
    """(peak VRAM in GiB, "micro/accum/ckpt") of the first `method` row on one `gpu` in a scenario's plan table."""
    for line in (SCENARIOS / f"{scenario}.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) > 6 and cells[0] == method and cells[1] == f"{gpu} x1":
            vram = next(c for c in cells if c.endswith(" GiB"))
            return float(vram.split("/")[0]), cells[cells.index(vram) + 1]
    raise AssertionError(f"docs/scenarios/{scenario}.md has no {method} row on {gpu} x1")


def check_recorded(doc: dict, scenario: str, method: str, gpu: str) -> None:
    """The plan's peak and micro-batch on `gpu` are the scenario's, to the 0.1 GiB the table prints."""
    gib, batching = recorded(scenario, method, gpu)
    o = next(o for o in doc["options"] if o["method"] == method and o["gpu"] == gpu and o["gpu_count"] == 1)
    assert o["peak_vram_bytes"] / GIB == pytest.approx(gib, abs=0.05)
    assert batching.split("/")[0] == str(o["micro_batch"]) and batching.endswith("on" if o["grad_ckpt"] else "off")


def check_common(doc: dict) -> None:
    opts = doc["options"]
    assert opts and doc["recommended"] == opts[0] | {"details": doc["recommended"]["details"]}
    totals = [o["cost"]["total"] for o in opts]
    assert totals == sorted(totals) and doc["recommended"]["cost"]["total"] == min(totals)
    for o in opts:
        assert 0 < o["peak_vram_bytes"] <= 0.9 * o["gpu_memory_bytes"] + 1
        assert o["tokens_per_s"] > 0 and o["hours"] > 0
        gpus = o["gpu_count"] * o["num_nodes"]
        assert o["micro_batch"] * o["grad_accum"] * gpus >= doc["workload"]["effective_batch"]
        parts = sum(o["cost"][k] for k in ("compute", "storage", "egress", "spot_overhead"))
        assert o["cost"]["total"] == pytest.approx(parts, abs=1e-3)


def test_chatbot_persona_llama2_qlora(plan_json):
    code, doc, err = plan_json("meta-llama/Llama-2-7b-hf", "--examples", "3000", "--avg-tokens", "400",
                               "--epochs", "3", "--seq-len", "1024", "--method", "qlora", gpus="RTX4090,T4")
    assert code == 0, err
    check_common(doc)
    assert {o["method"] for o in doc["options"]} == {"qlora"}
    check_recorded(doc, "chatbot-persona", "qlora", "RTX4090")
    assert doc["workload"]["tokens"] == 3000 * 400


def test_domain_text_mistral_lora(plan_json):
    code, doc, err = plan_json("mistralai/Mistral-7B-v0.1", "--examples", "20000", "--avg-tokens", "700",
                               "--method", "lora", "--budget", "50", gpus="RTX4090,T4")
    assert code == 0, err
    check_common(doc)
    assert all(o["cost"]["total"] <= 50 for o in doc["options"])
    assert "no_budget" not in {w["code"] for w in doc["warnings"]}
    assert any("T4" in e["reason"] and "needs" in e["reason"] for e in doc["excluded"])
    check_recorded(doc, "domain-text", "lora", "RTX4090")


def test_code_completion_codellama_auto(plan_json):
    code, doc, err = plan_json("codellama/CodeLlama-7b-hf", "--tokens", "30000000", "--epochs", "2",
                               "--method", "lora,qlora", gpus=TWO_GPUS)
    assert code == 0, err
    check_common(doc)
    by = {}
    for o in doc["options"]:
        by.setdefault((o["method"], o["gpu"], o["provider"], o["region"], o["spot"]), o)
    for (m, g, p, r, s), o in by.items():  # QLoRA is slower than LoRA on the same offer
        twin = by.get(("lora", g, p, r, s))
        if m == "qlora" and twin is not None and twin["grad_ckpt"] == o["grad_ckpt"]:
            assert o["tokens_per_s"] < twin["tokens_per_s"]


def test_sentiment_small_model_larger_dataset(plan_json):
    code, doc, err = plan_json("TinyLlama/TinyLlama_v1.1", "--examples", "200000", "--avg-tokens", "128",
                               "--seq-len", "512", "--top", "30", gpus="RTX4090")
    assert code == 0, err
    check_common(doc)
    assert "full" in {o["method"] for o in doc["options"]}  # a 1.1B model full-fine-tunes on one GPU


BIG_GPUS = "A100-80GB,H200"  # two memory sizes: the 70B tests share their cold simulations


def test_infeasible_exit_3_with_advice(plan_json):
    code, doc, err = plan_json("meta-llama/Llama-2-70b-hf", "--tokens", "1000000", "--method", "full",
                               "--max-gpus", "1", gpus=BIG_GPUS)
    assert code == 3
    assert doc["options"] == [] and doc["advice"]
    reasons = [e["reason"] for e in doc["excluded"]]
    assert any(r.startswith("full fine-tune on A100-80GB: needs") and "has 80.0 GiB" in r for r in reasons)
    assert "QLoRA" in err and "--max-gpus 8" in err and "Traceback" not in err


def test_70b_full_fine_tune_goes_multi_gpu(plan_json):
    code, doc, err = plan_json("meta-llama/Llama-2-70b-hf", "--tokens", "1000000", "--method", "full", gpus=BIG_GPUS)
    assert code == 0, err
    check_common(doc)
    best = doc["recommended"]
    assert best["gpu_count"] == 8 and best["num_nodes"] == 1 and best["sharding"] in ("zero3", "fsdp")
    assert all(o["gpu_count"] * o["num_nodes"] > 1 for o in doc["options"])
    time = best["details"]["time"]
    assert time["gpus"] == 8 and time["parts"]["communication"] > 0 and 0 < time["mfu"] < 1
    # the step-time model's rate times the speed options the plan turned on (estimate.speedups)
    assert best["tokens_per_s"] == pytest.approx(time["tokens_per_s"] * best["details"]["speedups"]["factor"], rel=1e-4)
    train_h = best["details"]["train_hours"]
    assert best["cost"]["compute"] >= best["price_per_hour"] * train_h  # the instance price: all 8 GPUs
    assert any("fits no single GPU" in n for n in doc["notes"])
    assert any(line.startswith("full fine-tune on") and "it fits" in line for line in doc["why_not"])


def test_model_option_instead_of_positional(run_cli, shared_home, monkeypatch):
    monkeypatch.setenv("CHEAPTUNE_HOME", str(shared_home))
    args = ("--examples", "3e3", "--avg-tokens", "400", "--epochs", "3", "--seq-len", "1024", "--method", "qlora",
            "--gpu", "RTX4090,T4", "--json")
    code, out, err = run_cli("plan", "--model", "meta-llama/Llama-2-7b-hf", *args)
    assert code == 0, err
    code2, out2, _ = run_cli("plan", "meta-llama/Llama-2-7b-hf", *args)
    by_flag, by_arg = json.loads(out), json.loads(out2)
    assert by_flag["model"] == by_arg["model"] and by_flag["options"] == by_arg["options"]
    for twice in (("plan", "--tokens", "100"), ("plan", "llama-2-7b", "--model", "llama-2-7b", "--tokens", "100")):
        code, _, err = run_cli(*twice)
        assert code == 2 and "give the model once" in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1


def test_save_round_trip_and_markdown(run_cli, shared_home, monkeypatch, tmp_path):
    monkeypatch.setenv("CHEAPTUNE_HOME", str(shared_home))
    path = tmp_path / "plan.yaml"
    code, out, err = run_cli("plan", "meta-llama/Llama-2-7b-hf", "--examples", "3000", "--avg-tokens", "400",
                             "--epochs", "3", "--seq-len", "1024", "--method", "qlora", "--gpu", "RTX4090,T4",
                             "--markdown", "--save", str(path))
    assert code == 0, err
    assert "| method |" in out and "### Recommendation" in out
    plan = planfile.load(path)
    assert plan.train.method == "qlora" and plan.train.quant == "nf4-dq" and plan.model == "meta-llama/Llama-2-7b-hf"


def test_dataset_file_counted_with_local_tokenizer(run_cli, tiny_model_dir, tmp_path):
    data = tmp_path / "chat.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"hello {i}"}, {"role": "assistant", "content": "hi there"}]}
            for i in range(50)]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    code, out, err = run_cli("plan", str(tiny_model_dir), str(data), "--gpu", "T4", "--json", "--seq-len", "128")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["workload"]["tokens_exact"] is True and doc["workload"]["examples"] == 50


@pytest.mark.parametrize("args, needle", [
    (("--tokens", "100", "--objective", "fun"), "objective"),
    (("--tokens", "100", "--method", "sorcery"), "method"),
    (("--tokens", "100", "--gpu", "GTX9999"), "GTX9999"),
    (("--tokens", "-5",), "tokens"),
    (("--tokens", "1.5",), "whole number"),
    ((), "--tokens"),
])
def test_bad_input_exit_2(run_cli, args, needle):
    code, _, err = run_cli("plan", "meta-llama/Llama-2-7b-hf", *args)
    assert code == 2 and needle in err and "Traceback" not in err
