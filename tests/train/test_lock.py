import pytest

from cheaptune.errors import BadInput
from cheaptune.train.lock import output_lock


def test_second_trainer_on_one_folder_refuses(run_cli, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "hi"}\n')
    out = tmp_path / "out"
    with output_lock(out):
        code, _, err = run_cli("train", "--model", str(model), "--data", str(data), "-o", str(out))
    assert code == 2 and "another `cheaptune train` is writing to" in err
    assert list(out.iterdir()) == []


def test_lock_is_released_and_a_file_in_the_way_is_one_line(tmp_path):
    with output_lock(tmp_path / "o"):
        pass
    with output_lock(tmp_path / "o"):  # released on exit
        pass
    (tmp_path / "f").write_text("x")
    with pytest.raises(BadInput, match="a file is in the way"), output_lock(tmp_path / "f"):
        pass
