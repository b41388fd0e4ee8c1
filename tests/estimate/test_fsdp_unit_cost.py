"""FSDP's fixed cost per wrapped layer per micro-step (steptime.yaml fixed_per_layer_s.sharded): it is paid by FSDP
on two or more GPUs only, every micro-step, per decoder layer, and the product stacks carry a fitted value."""

import copy

import pytest

from cheaptune.estimate.time import scaling
from cheaptune.estimate.time import throughput as tp
from tests.estimate.test_throughput import A100, LLAMA_8B, job

COST = 0.01  # s per layer per micro-step, a test value


def with_sharded(value: float) -> dict:
    """The packaged table with every product stack's sharded cost set to `value`."""
    table = copy.deepcopy(tp.load_table())
    for entry in table["stacks"].values():
        if "fixed_per_layer_s" in entry:
            entry["fixed_per_layer_s"]["sharded"] = {"value": value, "label": "fitted"}
    return table


@pytest.mark.parametrize(("layout", "gathers"), [
    (scaling.Layout(2, 1, "fsdp"), True), (scaling.Layout(1, 4, "fsdp"), True),
    (scaling.Layout(1, 1, "fsdp"), False),  # one GPU: nothing is gathered
    (scaling.Layout(8, 1, "ddp"), False), (scaling.Layout(8, 1, "zero3"), False),  # no FSDP rows measure these
])
def test_only_fsdp_across_gpus_pays_the_unit_cost(layout, gathers):
    assert scaling.gathers_per_unit(layout) is gathers
    fixed = {v: tp.step_time(job(method="full", micro=1, seq=256, grad_accum=4), A100, layout, with_sharded(v))
             .parts["fixed"] for v in (0.0, COST)}
    assert fixed[COST] - fixed[0.0] == pytest.approx(4 * LLAMA_8B.layers * COST if gathers else 0.0)


def test_the_cost_is_per_micro_step_and_layer_not_per_token():
    layout = scaling.Layout(8, 1, "fsdp")
    extra = []
    for seq in (128, 4096):
        st = {v: tp.step_time(job(method="lora", micro=1, seq=seq, trainable=20_000_000), A100, layout,
                              with_sharded(v)) for v in (0.0, COST)}
        extra.append(st[COST].step_seconds - st[0.0].step_seconds)
    assert extra[0] == pytest.approx(extra[1]) == pytest.approx(LLAMA_8B.layers * COST)


def test_few_token_fsdp_micro_steps_read_slower_than_many_token_ones_at_a_positive_cost():
    layout = scaling.Layout(8, 1, "fsdp")
    small = [tp.step_time(job(method="full", micro=1, seq=128), A100, layout, with_sharded(v)).tokens_per_s
             for v in (0.0, COST)]
    big = [tp.step_time(job(method="full", micro=8, seq=4096), A100, layout, with_sharded(v)).tokens_per_s
           for v in (0.0, COST)]
    assert small[1] / small[0] < big[1] / big[0] < 1.0  # the fixed cost weighs on short micro-steps most


def test_product_stacks_carry_a_fitted_non_negative_unit_cost():
    table = tp.load_table()
    for stack in ("hf", "torchtune", "unsloth"):
        entry = tp.stack_constants(table, stack)["fixed_per_layer_s"]["sharded"]
        assert entry["label"] == "fitted"
        assert 0.0 <= entry["value"] <= 0.03  # the bench's search range (throughput_accuracy.GRID)
