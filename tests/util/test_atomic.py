import pytest

from cheaptune.util import atomic
from cheaptune.util.names import did_you_mean, suggest


def test_write_text_replaces(tmp_path):
    p = tmp_path / "a" / "f.txt"
    atomic.write_text(p, "one")
    atomic.write_text(p, "two")
    assert p.read_text() == "two"
    assert [x.name for x in p.parent.iterdir()] == ["f.txt"]


def test_atomic_dir_failure_leaves_old(tmp_path):
    target = tmp_path / "ckpt"
    with atomic.atomic_dir(target) as tmp:
        (tmp / "x").write_text("old")
    with pytest.raises(RuntimeError), atomic.atomic_dir(target) as tmp:
        (tmp / "x").write_text("new")
        raise RuntimeError("killed mid-write")
    assert (target / "x").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_suggest():
    assert suggest("lama-2-7b", ["llama-2-7b", "mistral-7b"])[0] == "llama-2-7b"
    assert did_you_mean("zzzz", ["llama"]) == ""


def test_write_refuses_folder_and_fifo(tmp_path):
    import os

    from cheaptune.errors import BadInput

    with pytest.raises(BadInput, match="is a folder; give a file name"):
        atomic.write_text(tmp_path, "x")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="not a regular file"):
        atomic.write_text(fifo, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_write_keeps_symlink_and_mode(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    atomic.write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    assert real.stat().st_mode & 0o777 == 0o640


def test_full_disk_leaves_old_file(tmp_path, monkeypatch):
    import errno

    from cheaptune.errors import BadInput

    p = tmp_path / "plan.yaml"
    p.write_text("old")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(BadInput, match=r"cannot write .*plan.yaml \(No space left on device\)"):
        atomic.write_text(p, "new")
    assert p.read_text() == "old" and [x.name for x in tmp_path.iterdir()] == ["plan.yaml"]
