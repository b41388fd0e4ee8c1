"""The verifiable rewards and a user's reward file: each scores what it promises, and a broken user file is one
line naming the file (and the dataset row)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cheaptune.errors import BadInput
from cheaptune.train import rewards
from cheaptune.train.config import validate


def turn(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize("completion, answer", [
    ("so the result is \\boxed{42}.", "42"),
    ("working...\n#### 17", "17"),
    ("The answer is Paris.", "Paris"),
    ("first line\nlast line", "last line"),
])
def test_final_answer(completion, answer):
    assert rewards.final_answer(completion) == answer


def test_exact_match_reads_the_column_and_both_completion_kinds():
    f = rewards.exact_match("answer")
    got = f(["p"] * 4, ["The answer is 4.", turn("the answer is  PARIS"), "The answer is 5", ""],
            answer=["4", "Paris", "4", "4"])
    assert got == [1.0, 1.0, 0.0, 0.0]


def test_numeric_tolerance():
    f = rewards.numeric("answer", tolerance=0.01)
    got = f(["p"] * 4, ["#### 3.14", "#### 3.2", "answer: 1,234.5", "no number"], answer=[3.141, "3.14", 1234.5, 1])
    assert got == [1.0, 0.0, 1.0, 0.0]


def test_regex_and_json_and_length():
    assert rewards.regex(r"^<think>.*</think>")(["p"] * 2, ["<think>a\nb</think> 4", "4"]) == [1.0, 0.0]
    j = rewards.json_valid(["city", "temperature"])
    assert j(["p"] * 4, ['{"city": "Oslo", "temperature": 3}', '```json\n{"city": "Oslo"}\n```', "[1]", "{oops"]) \
        == [1.0, 0.75, 0.5, 0.0]
    length = rewards.length_penalty(4)
    assert length(["p"] * 3, ["a", "b", "c"], completion_ids=[[1] * 4, [1] * 6, [1] * 20]) == [0.0, -0.5, -1.0]


def test_weighted_list_builds_in_order(tmp_path):
    user = tmp_path / "mine.py"
    user.write_text("def reward(prompts, completions, **columns):\n    return [float(len(columns)) for _ in completions]\n")
    cfg = validate({"objective": "grpo", "micro_batch_size": 8, "reward_pattern": "x",
                    "reward": ["exact_match", {"name": "regex", "weight": 0.5}, str(user)]})
    funcs, weights = rewards.build_rewards(cfg)
    assert [f.__name__ for f in funcs] == ["exact_match", "regex", "mine"] and weights == [1.0, 0.5, 1.0]
    # the user's function sees the data columns only, not trl's extras
    assert funcs[2](["p"], ["c"], answer=["1"], trainer_state=object(), log_metric=print,
                    completion_ids=[[1]], **{rewards.ROW: [0]}) == [1.0]


def _user(tmp_path: Path, body: str) -> str:
    path = tmp_path / "rewards.py"
    path.write_text(body)
    return str(path)


def test_user_reward_failures_are_one_line(tmp_path):
    with pytest.raises(BadInput, match="nope.py not found"):
        rewards.user_reward(str(tmp_path / "nope.py"))
    with pytest.raises(BadInput, match="failed to import: SyntaxError"):
        rewards.user_reward(_user(tmp_path, "def reward(:\n"))
    with pytest.raises(BadInput, match="defines no function reward"):
        rewards.user_reward(_user(tmp_path, "x = 1\n"))
    raising = rewards.user_reward(_user(tmp_path, "def reward(prompts, completions, answer, **kw):\n"
                                                  "    return [1.0 / int(a) for a in answer]\n"))
    with pytest.raises(BadInput, match=r"rewards.py: reward\(\) failed on training row 7: ZeroDivisionError"):
        raising(["p", "q"], ["a", "b"], answer=["2", "0"], **{rewards.ROW: [3, 7]})
    short = rewards.user_reward(_user(tmp_path, "def reward(prompts, completions, **kw):\n    return [1.0]\n"))
    with pytest.raises(BadInput, match="returned 1 scores for 2 completions"):
        short(["p", "q"], ["a", "b"])


@pytest.mark.parametrize("raw, problem", [
    ({}, "needs a reward"),
    ({"reward": "exactmatch"}, "did you mean exact_match"),
    ({"reward": "regex"}, "needs reward_pattern"),
    ({"reward": "regex", "reward_pattern": "("}, "not a valid regular expression"),
    ({"reward": "json", "micro_batch_size": 3, "num_generations": 2}, "multiple of num_generations"),
    ({"reward": "json", "generation_backend": "vllm-server"}, "needs vllm_server_url"),
])
def test_bad_grpo_settings_are_one_line(raw, problem):
    with pytest.raises(BadInput, match=problem):
        validate({"objective": "grpo", "micro_batch_size": 8, **raw})


def test_beta_defaults_per_objective():
    assert validate({"objective": "grpo", "reward": "json", "micro_batch_size": 8}).beta == 0.0
    assert validate({"objective": "dpo"}).beta == 0.1


def test_reward_files_are_read_from_the_config_folder(tmp_path, monkeypatch):
    from cheaptune.train.config import build

    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "mine.py").write_text("def reward(prompts, completions, **columns):\n    return [0.0]\n")
    (folder / "c.yaml").write_text("objective: grpo\nmicro_batch_size: 8\nreward:\n  - name: mine.py\n    weight: 2\n"
                                   "  - json\n")
    monkeypatch.chdir(tmp_path)  # not the config's folder
    cfg = build(folder / "c.yaml")
    assert [(s.name, s.weight) for s in cfg.reward_specs()] == [(str(folder / "mine.py"), 2.0), ("json", 1.0)]
    assert cfg.model_copy(update={"reward": "mine.py"}).reward_specs()[0].name == "mine.py"  # a flag: as typed


def test_demo_scores_held_out_prompts_with_the_run_rewards(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cheaptune.demo.grpo import mean_rewards

    cfg = validate({"objective": "grpo", "micro_batch_size": 8, "max_completion_length": 4,
                    "reward": [{"name": "length", "weight": 2.0}, "exact_match"], "reward_target_length": 2})
    rows = [{"prompt": [{"role": "user", "content": f"What is {i} plus {i}?"}], "answer": str(2 * i)} for i in range(2)]
    means = mean_rewards(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                         AutoTokenizer.from_pretrained(tiny_model_dir), rows, cfg)
    assert -1.0 <= means["length"] <= 0 and means["exact_match"] == 0.0  # a random tiny model answers nothing right
    assert means["total"] == pytest.approx(2 * means["length"])


@pytest.mark.parametrize("objective", ["grpo", "kto"])
def test_lm_head_adapter_is_refused_up_front(objective):
    with pytest.raises(BadInput, match=f"trl's {objective.upper()} reads log-probs from the LM head"):
        validate({"objective": objective, "reward": "json", "micro_batch_size": 8, "lora_targets": "qv,lm_head"})
