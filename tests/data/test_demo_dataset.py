"""The shipped demo dataset is valid, loads as messages, and is what the seeded generator writes."""

from __future__ import annotations

import importlib.util
import json

from cheaptune.data import load_dataset_rows
from tests.conftest import REPO

DEMO = REPO / "examples" / "demo"


def _generator():
    spec = importlib.util.spec_from_file_location("make_dataset", REPO / "examples" / "make_dataset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_dataset_loads_and_answers_are_json():
    got = load_dataset_rows(DEMO / "train.jsonl")
    assert got.fmt == "messages" and got.n_bad == 0 and got.n_rows >= 200
    for row in got.dataset.select(range(20)):
        record = json.loads(row["messages"][-1]["content"])
        assert set(record) == {"city", "day", "temperature", "unit", "conditions"}
        assert record["city"] in row["messages"][0]["content"]


def test_heldout_cities_never_appear_in_training():
    train = (DEMO / "train.jsonl").read_text()
    heldout = load_dataset_rows(DEMO / "heldout.jsonl").dataset
    cities = {json.loads(r["messages"][-1]["content"])["city"] for r in heldout}
    assert cities and not any(c in train for c in cities)


def test_generator_is_reproducible(tmp_path):
    _generator().main(["--out", str(tmp_path)])
    for name in ("train.jsonl", "heldout.jsonl"):
        assert (tmp_path / name).read_bytes() == (DEMO / name).read_bytes()


def test_demo_config_is_valid_for_the_trainer():
    from cheaptune.train.config import build

    cfg = build(DEMO / "config.yaml")
    assert cfg.method == "lora" and cfg.datasets[0].path.endswith("train.jsonl")
