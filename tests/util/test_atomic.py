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
