"""A model every candidate refuses (a config.json transformers will not build) is bad input, exit 2 in one line,
not 'no feasible option' with exit 3: no GPU, budget or deadline would change it."""

from __future__ import annotations

import json

import pytest

from cheaptune.errors import BadInput, Infeasible
from cheaptune.plan.planner import make_plan
from cheaptune.plan.workload import Constraints, Workload
from tests.plan.fakes import GPUS, OFFERS, SHAPE_7B, fake_fit

W = Workload(tokens=10_000_000, epochs=1, seq_len=2048, effective_batch=16)
WRONG = "model 'x': transformers refuses its config (hidden size 30 is not a multiple of 4 heads); fix config.json"


def _plan(fit, c=Constraints()):
    return make_plan("test-7b", SHAPE_7B, 4096, W, c, GPUS, OFFERS, fit)


def test_every_candidate_refused_by_the_model_is_bad_input_with_the_reason_once():
    def fit(method, mem, precision):
        raise BadInput(WRONG)

    with pytest.raises(BadInput) as err:
        _plan(fit)
    assert str(err.value) == WRONG  # said once, not once per method and GPU


def test_a_model_refusal_beside_a_memory_one_stays_infeasible():
    """lora refused by the model, full too big for every board: a bigger GPU would plan full, so exit 3."""
    too_big = fake_fit(needs={"full": 10**15})

    def fit(method, mem, precision):
        if method != "full":
            raise BadInput(WRONG)
        return too_big(method, mem, precision)

    with pytest.raises(Infeasible):
        _plan(fit, Constraints(methods=("full", "lora")))


def test_plan_on_a_local_config_transformers_refuses_exits_2(run_cli, tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 30, "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 64, "vocab_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, out, err = run_cli("plan", str(tmp_path), "--tokens", "1e6", "--max-gpus", "1", "--json")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1, err
    assert "not a multiple of the number of attention heads" in lines[0] and lines[0].count("refuses") == 1
    assert f"model {str(tmp_path)!r}" in lines[0]  # the folder named, not 'config'
