import pytest
import yaml

from cheaptune.errors import BadInput
from cheaptune.plan import planfile


def _plan() -> planfile.PlanFile:
    return planfile.PlanFile(
        created="2026-11-30T00:00:00Z",
        cheaptune_version="0.1.0",
        model="llama-2-7b",
        train=planfile.TrainSettings(method="qlora", precision="bf16-true", micro_batch=4, grad_accum=4),
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
    path.write_text("version: 2\nbogus: 3\n")
    with pytest.raises(BadInput) as err:
        planfile.load(path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("version", [1, 99, "two"])
def test_other_versions_are_refused_with_the_command_to_remake_the_plan(tmp_path, version):
    path = tmp_path / "plan.yaml"
    raw = _plan().model_dump(mode="json") | {"version": version}
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(BadInput, match="cheaptune plan .* --save") as err:
        planfile.load(path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("bad", [{"method": "banana"}, {"micro_batch": -3}, {"seq_len": 0}, {"quant": "int8"},
                                 {"precision": "fp8"}, {"method": "lora", "quant": "nf4"}])
def test_impossible_settings_are_refused(tmp_path, bad):
    path = tmp_path / "plan.yaml"
    raw = _plan().model_dump(mode="json")
    raw["train"].update(bad)
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(BadInput) as err:
        planfile.load(path)
    assert "\n" not in str(err.value) and "train" in str(err.value)
