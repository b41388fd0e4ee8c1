import pytest


@pytest.mark.parametrize(("model", "words"), [
    ("{tmp}/nowhere", "is no folder and no hub id (owner/name); pass a local folder holding config.json"),
    ("tinyllama", "is no folder (looked in"),
    ("{tmp}", "has no config.json"),
    ("nobody-here/not-cached-model", "not in the Hugging Face cache"),
    ("m" * 300, "is no folder (looked in"),
])
def test_missing_model_said_in_our_words(run_cli, tmp_path, model, words):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "hi"}\n')
    code, out, err = run_cli("train", "--model", model.format(tmp=tmp_path), "--data", str(data),
                             "-o", str(tmp_path / "out"))
    assert code == 2 and words in err and "huggingface.co" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
