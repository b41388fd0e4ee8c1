"""ZeRO-3 under gradient checkpointing gathers the stored weights three times a micro-step (forward, the recompute,
backward: scaling.gathers_per_micro), FSDP and ZeRO-3 without checkpointing twice."""

import pytest

from cheaptune.estimate.time import scaling
from cheaptune.estimate.time import throughput as tp
from tests.estimate.test_throughput import A100, LLAMA_8B, job

STORED = 16e9  # bytes of weights a test step gathers
GRADS = 16e9


@pytest.mark.parametrize(("sharding", "ckpt", "gathers"), [
    ("zero3", True, 3), ("zero3", False, 2), ("fsdp", True, 2), ("fsdp", False, 2)])
def test_gathers_per_micro_step(sharding, ckpt, gathers):
    assert scaling.gathers_per_micro(scaling.Layout(8, 1, sharding), ckpt) == gathers


def test_the_recompute_gather_is_one_more_gather_of_the_stored_weights():
    layout, table = scaling.Layout(1, 4, "zero3"), tp.load_table()
    comm = {g: scaling.communication(layout, A100, STORED, GRADS, table, g) for g in (2, 3)}
    one_gather = scaling.communication(layout, A100, STORED, 0.0, table, 1).per_micro_s
    assert one_gather > 0.0
    assert comm[3].per_micro_s - comm[2].per_micro_s == pytest.approx(one_gather)


def test_zero3_with_checkpointing_waits_longer_on_a_serial_link_than_without_the_recompute_gather():
    """On ethernet (no overlap) the step's exposed communication grows by the extra gather: 3 + 1 over 2 + 1
    gathers-and-scatters of equal bytes, since a full fine-tune's bf16 gradients are its bf16 weights' size."""
    layout, table = scaling.Layout(1, 4, "zero3"), {**tp.load_table(), "serial_link_overlap": {"value": 0.0}}
    st = tp.step_time(job(method="full", micro=1, seq=512, ckpt=True, trainable=LLAMA_8B.params), A100, layout, table)
    stored = 2.0 * LLAMA_8B.params
    two = scaling.communication(layout, A100, stored, stored, table, 2)
    three = scaling.communication(layout, A100, stored, stored, table, 3)
    assert three.per_micro_s / two.per_micro_s == pytest.approx(4 / 3)
    assert st.parts["communication"] == pytest.approx(three.per_micro_s * (1 + 1 / LLAMA_8B.layers))
