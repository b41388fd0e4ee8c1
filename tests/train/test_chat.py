"""Chat templates without generation markers, or with none, still train on the assistant reply only."""

from __future__ import annotations

import shutil

from transformers import AutoTokenizer

from cheaptune.train.chat import has_generation_markers, prepare_chat

from .conftest import chat_rows

# A template like most shipped ones: no {% generation %} markers.
PLAIN = ("{% for m in messages %}{{ '[' + m['role'] + '] ' + m['content'] + '\n' }}{% endfor %}"
         "{% if add_generation_prompt %}{{ '[assistant] ' }}{% endif %}")


def _dataset():
    from datasets import Dataset

    return Dataset.from_list(chat_rows(4))


def test_markers_detected(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert has_generation_markers(tok.chat_template)
    assert not has_generation_markers(PLAIN) and not has_generation_markers(None)


def test_template_with_markers_keeps_messages(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    train, _, fmt = prepare_chat(tok, _dataset(), None, "messages")
    assert fmt == "messages" and "messages" in train.column_names


def test_template_without_markers_trains_on_last_reply(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = PLAIN
    train, evals, fmt = prepare_chat(tok, _dataset(), _dataset(), "messages")
    assert fmt == "prompt_completion"
    row = train[1]
    assert row["prompt"] == [{"role": "user", "content": "What is 1 plus 1?"}]
    assert row["completion"] == [{"role": "assistant", "content": "The answer is 2."}]
    assert evals.column_names == train.column_names


def test_no_template_gets_default(tiny_model_dir, tmp_path):
    local = tmp_path / "model"
    shutil.copytree(tiny_model_dir, local)
    tok = AutoTokenizer.from_pretrained(local)
    tok.chat_template = None
    _, _, fmt = prepare_chat(tok, _dataset(), None, "messages")
    assert has_generation_markers(tok.chat_template) and fmt == "messages"


def test_cli_trains_with_plain_template(tiny_model_dir, chat_file, tmp_path, run_cli):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    tok = AutoTokenizer.from_pretrained(model)
    tok.chat_template = PLAIN
    tok.save_pretrained(model)
    code, out, err = run_cli("train", "--model", str(model), "--data", str(chat_file), "-o", str(tmp_path / "o"),
                             "--max-steps", "2", "--seq-len", "64", "--device", "cpu")
    assert code == 0, err
    assert "completion-only loss" in out
    assert (tmp_path / "o" / "adapter_model.safetensors").is_file()
