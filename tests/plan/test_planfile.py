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


@pytest.mark.parametrize(("section", "key", "value", "needle"), [
    ("offer", "price_per_hour", float("nan"), "finite"),
    ("offer", "price_per_hour", float("inf"), "finite"),
    ("offer", "price_per_hour", -0.5, "greater than or equal to 0"),
    ("offer", "price_per_hour", "cheap", "valid number"),
    ("offer", "gpu_count", 0, "greater than or equal to 1"),
    ("offer", "gpu_count", True, "valid integer"),  # YAML `true` is not a GPU count
    ("offer", "kind", "banana", "on-demand"),
    ("offer", "provider", "", "at least 1 character"),
    (None, "budget_usd", -5.0, "greater than 0"),
    (None, "budget_usd", 0.0, "greater than 0"),
    (None, "deadline_hours", float("nan"), "finite"),
    ("prediction", "tokens_per_s", 0.0, "greater than 0"),
    ("prediction", "hours", -1.0, "greater than or equal to 0"),
    ("train", "checkpoint_minutes", float("inf"), "finite"),  # the nested settings are held to it too
    ("train", "micro_batch", True, "valid integer"),
])
def test_every_number_is_range_checked_as_flags_are(tmp_path, section, key, value, needle):
    path = tmp_path / "plan.yaml"
    raw = _plan().model_dump(mode="json")
    (raw[section] if section else raw)[key] = value
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(BadInput) as err:
        planfile.load(path)
    msg = str(err.value)
    assert "\n" not in msg and key in msg and needle in msg and "--save" in msg, msg


def test_cost_breakdown_refuses_negative_totals(tmp_path):
    path = tmp_path / "plan.yaml"
    raw = _plan().model_dump(mode="json")
    raw["prediction"]["cost"]["total"] = -1.0
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(BadInput, match=r"prediction\.cost\.total"):
        planfile.load(path)


def test_price_basis_round_trips_and_is_checked(tmp_path):
    path = tmp_path / "plan.yaml"
    raw = _plan().model_dump(mode="json")
    assert raw["offer"]["price_basis"] == "quoted" and raw["offer"]["price_as_of"] == "undated"
    raw["offer"]["price_basis"] = "guessed"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(BadInput, match="offer.price_basis.*quoted, derived, range-low"):
        planfile.load(path)
