import pytest

from cheaptune.errors import BadInput
from cheaptune.util.yamlfile import read_mapping


@pytest.mark.parametrize("text, word", [("a: [1,\n", "line 2"), ("- 1\n- 2\n", "mapping")])
def test_bad_yaml_is_one_line(tmp_path, text, word):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(BadInput) as err:
        read_mapping(p, "config file", "see the docs")
    assert word in str(err.value) and "\n" not in str(err.value)


def test_missing_and_empty(tmp_path):
    with pytest.raises(BadInput, match="not found; see the docs"):
        read_mapping(tmp_path / "nope.yaml", "plan file", "see the docs")
    (tmp_path / "e.yaml").write_text("")
    assert read_mapping(tmp_path / "e.yaml", "config file", "x") == {}
