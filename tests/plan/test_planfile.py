import pytest

from cheaptune.errors import BadInput
from cheaptune.plan import planfile


def _plan() -> planfile.PlanFile:
    return planfile.PlanFile(
        created="2026-11-30T00:00:00Z",
        cheaptune_version="0.1.0",
        model="llama-2-7b",
        train=planfile.TrainSettings(method="qlora", micro_batch=4, grad_accum=4),
        offer=planfile.Offer(provider="runpod", gpu="RTX4090", price_per_hour=0.69),
        prediction=planfile.Prediction(
            peak_vram_bytes=10 << 30,
            gpu_memory_bytes=24 << 30,
            tokens=1_000_000,
            tokens_per_s=2000.0,
            hours=0.5,
            cost=planfile.CostBreakdown(compute=0.35, total=0.4),
        ),
    )


def test_roundtrip(tmp_path):
    path = tmp_path / "plan.yaml"
    planfile.save(_plan(), path)
    assert planfile.load(path) == _plan()


def test_unknown_key_is_one_line(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text("version: 1\nbogus: 3\n")
    with pytest.raises(BadInput) as err:
        planfile.load(path)
    assert "\n" not in str(err.value)
