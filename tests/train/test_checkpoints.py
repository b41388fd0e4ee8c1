"""Checkpoint manifests, verification, publishing and retention (no training needed)."""

from __future__ import annotations

import json

import pytest

from cheaptune.train import checkpoints as ck
from cheaptune.train import resume


def _fake(root, step, eval_loss=None):
    staged = ck.staging_dir(root) / f"checkpoint-{step}"
    staged.mkdir(parents=True)
    (staged / "adapter_model.safetensors").write_bytes(bytes([step]) * 100)
    history = [{"step": step, "loss": 1.0}] + ([{"step": step, "eval_loss": eval_loss}] if eval_loss else [])
    (staged / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    return ck.publish(staged, root)


def test_publish_verify_and_detect_corruption(tmp_path):
    c = _fake(tmp_path, 3)
    assert c == tmp_path / "checkpoint-3" and ck.verify(c) is None
    (c / "adapter_model.safetensors").write_bytes(b"x" * 100)  # same size, other bytes
    assert "checksum" in ck.verify(c)
    (c / "adapter_model.safetensors").write_bytes(bytes([3]) * 100)
    assert ck.verify(c) is None
    (c / "trainer_state.json").unlink()
    assert "missing" in ck.verify(c)


def test_resume_auto_skips_corrupt_and_unmanifested(tmp_path, capsys):
    _fake(tmp_path, 2)
    _fake(tmp_path, 4)
    (tmp_path / "checkpoint-4" / ck.MANIFEST).write_text("{")  # torn manifest
    (tmp_path / "checkpoint-6").mkdir()  # a folder some other tool left, no manifest
    assert resume.choose("auto", tmp_path) == tmp_path / "checkpoint-2"
    warnings = capsys.readouterr().out.splitlines()
    assert len(warnings) == 2 and "checkpoint-6" in warnings[0] and "checkpoint-4" in warnings[1]


def test_republish_same_step_replaces(tmp_path):
    _fake(tmp_path, 5)
    staged = ck.staging_dir(tmp_path) / "checkpoint-5"
    staged.mkdir(parents=True)
    (staged / "x.bin").write_bytes(b"new")
    ck.publish(staged, tmp_path)
    assert sorted(p.name for p in (tmp_path / "checkpoint-5").iterdir()) == [ck.MANIFEST, "x.bin"]


def test_retention_keeps_last_k_and_best(tmp_path):
    for step, loss in [(1, 2.0), (2, 0.5), (3, 1.5), (4, 1.8), (5, None)]:
        _fake(tmp_path, step, loss)
    deleted = ck.apply_retention(tmp_path, ck.Retention(keep_last=2))
    assert sorted(ck.step_of(p) for p in ck.list_checkpoints(tmp_path)) == [2, 4, 5]
    assert sorted(ck.step_of(p) for p in deleted) == [1, 3]
    assert not list(tmp_path.glob(".*deleting"))


def test_resume_skips_a_checkpoint_missing_a_ranks_state(tmp_path, monkeypatch):
    from cheaptune.errors import BadInput
    from cheaptune.train import resume as rs

    for step, ranks in ((2, (0, 1)), (4, (0,))):  # step 4: rank 1 was killed before its rng state
        staged = tmp_path / ".staging" / f"checkpoint-{step}"
        staged.mkdir(parents=True)
        for r in ranks:
            (staged / f"rng_state_{r}.pth").write_bytes(b"x")
        ck.publish(staged, tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert rs.choose("auto", tmp_path) == tmp_path / "checkpoint-2"
    with pytest.raises(BadInput, match="rng_state_1.pth is missing"):
        rs.choose(str(tmp_path / "checkpoint-4"), tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert rs.choose("auto", tmp_path) == tmp_path / "checkpoint-4"


def test_full_disk_during_a_save_keeps_the_last_checkpoint_and_stops_in_one_line(tmp_path):
    import errno

    from cheaptune.errors import BadInput

    done = tmp_path / "checkpoint-4"
    done.mkdir()
    (done / "adapter.safetensors").write_bytes(b"weights")
    ck.write_manifest(done, 4)
    staged = ck.staging_dir(tmp_path) / "checkpoint-8"
    staged.mkdir(parents=True)
    full = "disk full while saving the checkpoint of step 8 .*checkpoint-4 is intact"
    with pytest.raises(BadInput, match=full), ck.no_space_stops(tmp_path, 8):
        (staged / "adapter.safetensors").write_bytes(b"half")
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as err:
            raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed") from err
    assert not ck.staging_dir(tmp_path).exists() and ck.verify(done) is None
    with pytest.raises(ValueError, match="other"), ck.no_space_stops(tmp_path, 9):
        raise ValueError("other errors pass through")
