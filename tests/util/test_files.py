import pytest

from cheaptune.errors import BadInput
from cheaptune.util.files import check_file, read_bytes, read_text


def _fails(path, match, **kw):
    with pytest.raises(BadInput, match=match) as err:
        read_text(path, "plan file", "make one with `cheaptune plan --save`", **kw)
    assert "\n" not in str(err.value) and "plan file" in str(err.value)


def test_each_file_level_defect_is_one_line(tmp_path):
    _fails(tmp_path / "missing.yaml", "not found; make one")
    _fails(tmp_path, "is a folder, not a file")
    _fails("/dev/null", "not a regular file")
    (tmp_path / "empty.yaml").write_text("")
    _fails(tmp_path / "empty.yaml", "is empty")
    (tmp_path / "bin.yaml").write_bytes(b"ok\n\xff\xfe\x00garbage")
    _fails(tmp_path / "bin.yaml", r"not UTF-8 text \(line 2, byte 3\)")
    (tmp_path / "big.yaml").write_text("x" * 100)
    _fails(tmp_path / "big.yaml", "more than the", max_bytes=10)
    _fails(tmp_path / ("n" * 300), "name too long")
    (tmp_path / "f").write_text("x")
    _fails(tmp_path / "f" / "under.yaml", "a part of the path is a file")


def test_good_files_and_bom(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"\xef\xbb\xbfa,b\n")
    assert read_text(tmp_path / "a.csv", "price file") == "a,b\n"
    assert read_bytes(tmp_path / "a.csv", "price file")[:3] == b"\xef\xbb\xbf"
    (tmp_path / "e").write_text("")
    assert read_text(tmp_path / "e", "config", allow_empty=True) == ""
    assert check_file(tmp_path / "a.csv", "x") == tmp_path / "a.csv"


def test_long_path_in_message_is_cut(tmp_path):
    with pytest.raises(BadInput) as err:
        read_text(tmp_path / ("d" * 250) / "x", "config")
    assert len(str(err.value)) < 250
