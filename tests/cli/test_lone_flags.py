"""A flag that only means something beside another is refused when given alone, in one line with exit 2, never
accepted and ignored (`estimate --nodes 2` without `--gpu` printed the one-GPU estimate with exit 0)."""

from __future__ import annotations

import pytest

EST = ("estimate", "--model", "Llama-3.2-1B", "--method", "lora", "--micro-batch", "1", "--seq-len", "64")
PLAN = ("plan", "Llama-3.2-1B", "--tokens", "1e6")


@pytest.mark.parametrize(("args", "says"), [
    ((*EST, "--nodes", "2"), "--nodes needs --gpu: "),
    ((*EST, "--gpu-count", "8", "--nodes", "2"), "--gpu-count 16 shards over the same GPUs"),
    ((*EST, "--network", "infiniband"), "--network needs --gpu and --nodes 2 or more: "),
    ((*EST, "--gpu", "H100", "--network", "infiniband"), "--network needs --gpu and --nodes 2 or more: "),
    ((*EST, "--generations", "8"), "--generations needs --objective grpo: "),  # its default value, typed
    ((*EST, "--beta", "0.1", "--prompt-len", "64"), "--prompt-len, --beta need --objective grpo: "),
    (("estimate", "--model", "Llama-3.2-1B", "--method", "full", "--micro-batch", "1", "--seq-len", "64",
      "--lora-r", "8"), "--lora-r needs an adapter method"),
    ((*EST, "--json", "--headroom", "0.2"), "--headroom needs the GPU table (drop --json): "),
    ((*EST, "--json", "--no-calibration"), "--no-calibration needs the GPU table (drop --json): "),
    (("estimate", "--model", "Llama-3.2-1B", "--objective", "grpo", "--gpu", "H100", "--no-calibration"),
     "--no-calibration needs an SFT, DPO or ORPO step: "),
    ((*PLAN, "--steps", "10"), "--steps needs --objective grpo: "),
    ((*PLAN, "--generations", "4", "--completion-len", "64"), "--generations, --completion-len need --objective grpo"),
    ((*PLAN, "--avg-tokens", "100"), "--avg-tokens needs --examples N: "),
    ((*PLAN, "--skip-bad-rows"), "--skip-bad-rows needs a dataset file (--data): "),
    ((*PLAN, "--method", "full", "--lora-targets", "qv"), "--lora-targets needs an adapter method"),
    (("plan", "Llama-3.2-1B", "--objective", "grpo", "--prompts", "100", "--save", "p.yaml", "--deadline", "3"),
     "--deadline, --save are not planned for --objective grpo"),  # no plan file was written, with exit 0
    (("plan", "Llama-3.2-1B", "--objective", "grpo", "--prompts", "100", "--no-speedups"),
     "--no-speedups is not planned for --objective grpo"),
])
def test_a_flag_given_without_the_one_it_needs_is_one_line_exit_2(run_cli, args, says):
    code, out, err = run_cli(*args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1 and says in lines[0], err


def test_the_checks_let_the_flags_through_where_they_belong(run_cli):
    """With what they need, the same flags pass the check (the planner's own refusal comes later, or none)."""
    code, out, err = run_cli(*PLAN, "--method", "lora,full", "--lora-r", "8", "--top", "1", "--json")
    assert code == 0, err
    code, out, err = run_cli("plan", "Llama-3.2-1B", "--examples", "1000", "--avg-tokens", "100", "--top", "1", "--json")
    assert code == 0, err
