"""GRPO through trl on the tiny Llama: every reward kind in one short run (weighted as configured), bad data and a
failing user reward are one line with exit 2, and the budget cap stops a GRPO run resumably."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from cheaptune.train.config import validate
from cheaptune.train.run import train
from tests.helpers import differences
from tests.train.conftest import prompt_rows, write_jsonl

ADAPTER = "adapter_model.safetensors"
# A reward that differs between the completions of a group (their text lengths), so advantages are not zero and
# the adapter trains even while the verifiable rewards of a random tiny model are all 0.
def grpo_args(model: Path, data: Path, out: Path, steps: int, *extra: str) -> list[str]:
    """CLI arguments the GRPO run tests share: 2 completions of 8 tokens for one prompt per step."""
    return ["train", "--model", str(model), "--data", str(data), "-o", str(out), "--objective", "grpo",
            "--max-steps", str(steps), "--micro-batch", "2", "--generations", "2", "--completion-len", "8",
            "--lr", "1e-2", "--device", "cpu", "--probe-steps", "0", *extra]


def logged(out: Path) -> dict[int, dict]:
    """Each step's last log line (a resumed run appends; its lines replace the killed run's)."""
    lines = (out / "train_log.jsonl").read_text().splitlines()
    return {row["step"]: row for row in map(json.loads, lines) if "reward" in row}


def test_every_reward_kind_in_one_run(tiny_model_dir, prompts_file, lengths_reward, tmp_path):
    out = tmp_path / "out"
    weights = {"exact_match": 1.0, "numeric": 0.5, "regex": 0.25, "json": 2.0, "length": 1.0, "lengths": 0.1}
    cfg = validate({
        "base_model": str(tiny_model_dir), "datasets": [{"path": str(prompts_file)}], "objective": "grpo",
        "reward": [{"name": n if n != "lengths" else str(lengths_reward), "weight": w} for n, w in weights.items()],
        "reward_pattern": "[a-z]", "reward_json_keys": ["city"], "reward_target_length": 4,
        "num_generations": 2, "max_completion_length": 8, "micro_batch_size": 2, "max_steps": 2, "save_steps": 1,
        "learning_rate": 1e-2, "output_dir": str(out), "device": "cpu", "probe_steps": 0,
    })
    s = train(cfg).summary
    assert s["steps"] == 2 and s["tokens"] > 0
    for step, row in logged(out).items():
        means = {n: row[f"rewards/{n}/mean"] for n in weights}
        assert means["length"] == -1.0  # 8 tokens generated against a target of 4
        assert row["reward"] == pytest.approx(sum(weights[n] * m for n, m in means.items()), abs=1e-5), step
    first, last = load_file(out / "checkpoint-1" / ADAPTER), load_file(out / "checkpoint-2" / ADAPTER)
    assert any(not first[k].equal(last[k]) for k in first), "no adapter weight changed"


def test_missing_reward_column_and_failing_user_reward_are_one_line(tiny_model_dir, prompts_file, tmp_path,
                                                                    run_cli):
    code, _, err = run_cli(*grpo_args(tiny_model_dir, prompts_file, tmp_path / "a", 1, "--reward", "numeric",
                                      "--answer-column", "solution"))
    assert code == 2 and "reads column 'solution', which the data does not have" in err, err
    broken = tmp_path / "broken.py"
    broken.write_text("def reward(prompts, completions, answer, **columns):\n"
                      "    return [1 / (int(a) - 6) for a in answer]\n")  # the second row (answer 6) divides by zero
    data = write_jsonl(tmp_path / "p.jsonl", prompt_rows(8)[2:4])
    code, _, err = run_cli(*grpo_args(tiny_model_dir, data, tmp_path / "b", 2, "--reward", str(broken)))
    assert code == 2 and f"reward file {broken}: reward() failed on training row 2: ZeroDivisionError" in err, err
    assert "Traceback" not in err


def test_budget_cap_stops_a_grpo_run_resumably(tiny_model_dir, prompts_file, lengths_reward, tmp_path, run_cli):
    from cheaptune.runs.registry import Registry

    out = tmp_path / "out"
    code, _, err = run_cli(*grpo_args(tiny_model_dir, prompts_file, out, 50, "--reward", str(lengths_reward),
                                      "--price-per-hour", "36000", "--budget", "2"))
    assert code == 10, err
    run = Registry().list_runs()[0]
    assert run["status"] == "budget-stopped" and any(p.name.startswith("checkpoint-") for p in out.iterdir())
    assert 0 < run["steps"] < 50


def test_a_grpo_plan_runs_as_planned(tiny_model_dir, prompts_file, tmp_path):
    """The RL settings a plan carries (TrainSettings.rl) become the config's keys and are what the built
    GRPOTrainer runs (read back from its GRPOConfig); the policy step's estimator request is an SFT step's."""
    from transformers import AutoTokenizer

    from cheaptune.estimate.rl_settings import RLSettings
    from cheaptune.estimate.settings import for_gpu
    from cheaptune.plan import planfile
    from cheaptune.train.config import build
    from cheaptune.train.grpo import build_grpo_trainer
    from cheaptune.train.methods import Precision, build_model
    from cheaptune.train.run import load_data
    from cheaptune.train.settings import read_back

    rl = RLSettings(num_generations=4, max_completion_length=16, beta=0.04, loss_type="grpo", temperature=0.7,
                    generation_backend="transformers")
    settings = for_gpu("lora", True, micro_batch=4, seq_len=64, lora_r=8, lora_alpha=16, objective="grpo", rl=rl)
    assert settings.request("x").objective == "sft"
    plan = tmp_path / "plan.yaml"
    planfile.save(planfile.PlanFile(
        created="2026-12-01T00:00:00Z", cheaptune_version="0", model=str(tiny_model_dir), train=settings,
        offer=planfile.Offer(provider="x", gpu="T4", gpu_count=1, price_per_hour=1.0),
        prediction=planfile.Prediction(peak_vram_bytes=1 << 30, gpu_memory_bytes=16 << 30, tokens=1000,
                                       tokens_per_s=100.0, hours=1.0, cost=planfile.CostBreakdown(compute=1.0,
                                                                                                  total=1.0))), plan)
    assert planfile.load(plan).train.rl == rl
    cfg = build(None, plan, {"device": "cpu", "output_dir": str(tmp_path / "o"), "reward": "json",
                             "datasets": [{"path": str(prompts_file)}]})
    assert (cfg.num_generations, cfg.beta, cfg.loss_type, cfg.generation_backend) == (4, 0.04, "grpo", "transformers")
    prec = Precision("cpu", cfg.precision)
    ds, _, fmt = load_data(cfg)
    trainer = build_grpo_trainer(cfg, prec, build_model(cfg, prec), AutoTokenizer.from_pretrained(tiny_model_dir),
                                 ds, None, fmt, [])
    ran = read_back(trainer)
    assert ran.rl == rl and ran.objective == "grpo"
    assert set(differences(ran, planfile.load(plan).train)) <= {"lora_targets"}  # all-linear, spelled out


def test_sft_rows_serve_as_prompts_whatever_the_template(tiny_model_dir, chat_file, tmp_path):
    """An SFT messages file trains GRPO: the replies are dropped, and a template without {% generation %}
    markers does not send the rows down SFT's prompt/completion split (they hold no reply any more)."""
    from transformers import AutoTokenizer

    from cheaptune.train.chat import prepare_chat
    from cheaptune.train.run import load_data

    cfg = validate({"base_model": str(tiny_model_dir), "datasets": [{"path": str(chat_file), "type": "messages"}],
                    "objective": "grpo", "reward": "length", "micro_batch_size": 8})
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    ds, _, fmt = prepare_chat(tok, *load_data(cfg))
    assert fmt == "conversation" and ds.column_names == ["prompt"]
    assert [t["role"] for t in ds[0]["prompt"]] == ["user"]
