"""cheaptune export: merged weights equal peft's merge, serve files, refusal to overwrite, hub offline."""

from __future__ import annotations

import json

import pytest
import torch


def test_merged_equals_peft_and_reloads(tiny_model_dir, tiny_adapter, tmp_path, run_cli):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "merged"
    code, stdout, err = run_cli("export", str(tiny_adapter), "--to", "merged", "--out", str(out),
                                "--base", str(tiny_model_dir), "--json")
    assert code == 0, err
    result = json.loads(stdout)
    assert result["verified"] == "reload + forward pass" and result["details"]["merged_weights"] == 6
    assert (out / "tokenizer.json").is_file() and (out / "config.json").is_file()
    # "merged 16-bit": the fp32 tiny base is written in bf16, and config.json says so
    assert result["details"]["dtypes"] == ["bfloat16"] and json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    ours = AutoModelForCausalLM.from_pretrained(out)
    assert ours.model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    theirs = PeftModel.from_pretrained(base, str(tiny_adapter)).merge_and_unload().to(torch.bfloat16)
    for (name, w), (_, v) in zip(ours.state_dict().items(), theirs.state_dict().items(), strict=True):
        assert torch.allclose(w.float(), v.float(), rtol=1e-2, atol=1e-3), name  # peft's merge, one bf16 rounding
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.allclose(ours(ids).logits.float(), theirs(ids).logits.float(), atol=2e-2)
    assert not torch.equal(ours.model.layers[0].self_attn.q_proj.weight,
                           AutoModelForCausalLM.from_pretrained(tiny_model_dir).model.layers[0].self_attn.q_proj.weight)

    # an existing export is kept unless --force
    before = (out / "model.safetensors").stat().st_mtime_ns
    code, _, err = run_cli("export", str(tiny_adapter), "--to", "merged", "--out", str(out), "--base", str(tiny_model_dir))
    assert code == 2 and "exists; pass --force" in err and (out / "model.safetensors").stat().st_mtime_ns == before
    code, _, err = run_cli("export", str(tiny_adapter), "--to", "merged", "--out", str(out), "--base",
                           str(tiny_model_dir), "--force")
    assert code == 0, err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_adapter_for_another_base_is_refused_without_output(tiny_model_dir, tiny_adapter, tmp_path, run_cli):
    from cheaptune.demo.tiny import build_tiny_llama

    other = build_tiny_llama(tmp_path / "other", num_hidden_layers=1)
    code, _, err = run_cli("export", str(tiny_adapter), "--to", "merged", "--out", str(tmp_path / "m"),
                           "--base", str(other))
    assert code == 2 and "trained on another base model" in err and err.count("error:") == 1 and "Traceback" not in err
    assert not (tmp_path / "m").exists()


def test_ollama_and_vllm_files(tiny_model_dir, tiny_adapter, tmp_path, run_cli):
    code, stdout, err = run_cli("export", str(tiny_adapter), "--to", "ollama", "--out", str(tmp_path / "o"),
                           "--base", str(tiny_model_dir))
    assert code == 0, err
    said = [ln for ln in stdout.splitlines() if "ollama create" in ln]
    assert said and said[0].endswith(f"-f {tmp_path / 'o' / 'Modelfile'}")  # the folder that exists, not the temporary one
    modelfile = (tmp_path / "o" / "Modelfile").read_text()
    assert f"FROM {tiny_model_dir.resolve()}" in modelfile and f"ADAPTER {tiny_adapter.resolve()}" in modelfile
    assert "<|im_start|>{{ .Role }}" in modelfile and 'PARAMETER stop "<|im_end|>"' in modelfile

    code, _, err = run_cli("export", str(tiny_adapter), "--to", "vllm", "--out", str(tmp_path / "v"),
                           "--base", str(tiny_model_dir))
    assert code == 0, err
    serve = (tmp_path / "v" / "serve.sh").read_text()
    assert f"vllm serve {tiny_model_dir} --enable-lora --lora-modules" in serve and "--max-lora-rank 8" in serve
    request = (tmp_path / "v" / "request.sh").read_text()
    assert "/v1/chat/completions" in request and tiny_adapter.name in request


def test_ollama_refuses_unsupported_architecture(tiny_adapter, tmp_path):
    from cheaptune.errors import BadInput
    from cheaptune.export.serve import ollama_modelfile

    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    with pytest.raises(BadInput, match="not qwen2; export --to merged"):
        ollama_modelfile(base, tiny_adapter)


def test_hub_offline_is_one_line_and_card_is_ready(tiny_model_dir, tiny_adapter, tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    out = tmp_path / "hub"
    code, _, err = run_cli("export", str(tiny_adapter), "--to", "hub", "--repo", "me/tiny", "--out", str(out),
                           "--base", str(tiny_model_dir))
    assert code == 2 and "push to the hub failed" in err and err.count("error:") == 1 and "Traceback" not in err
    card = (out / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: peft" in card and f"| base model | {tiny_model_dir} |" in card
    assert "base_model:" not in card  # a local folder is no hub id
    from cheaptune.export.hub import model_card

    assert "base_model: HuggingFaceTB/SmolLM2-135M" in model_card("HuggingFaceTB/SmolLM2-135M", None, None, False)
    assert (out / "adapter_model.safetensors").is_file()


def test_gguf_without_converter_says_how_to_get_it(tiny_model_dir, tiny_adapter, tmp_path, run_cli, monkeypatch):
    monkeypatch.delenv("LLAMA_CPP_DIR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = run_cli("export", str(tiny_adapter), "--to", "gguf", "--out", str(tmp_path / "g"),
                           "--base", str(tiny_model_dir))
    assert code == 2 and "LLAMA_CPP_DIR" in err and not (tmp_path / "g").exists()


def test_gguf_calls_llama_cpp_converter_on_the_merged_model(tiny_model_dir, tiny_adapter, tmp_path, run_cli,
                                                            monkeypatch):
    fake = tmp_path / "llama.cpp"
    fake.mkdir()
    # stands in for llama.cpp's script: checks it was given a merged model, writes the --outfile
    (fake / "convert_hf_to_gguf.py").write_text(
        "import sys, pathlib\nsrc = pathlib.Path(sys.argv[1])\n"
        "assert (src / 'config.json').is_file() and (src / 'model.safetensors').is_file()\n"
        "out = pathlib.Path(sys.argv[sys.argv.index('--outfile') + 1])\n"
        "out.write_text('GGUF ' + sys.argv[sys.argv.index('--outtype') + 1])\n")
    monkeypatch.setenv("LLAMA_CPP_DIR", str(fake))
    code, _, err = run_cli("export", str(tiny_adapter), "--to", "gguf", "--out", str(tmp_path / "g"),
                           "--base", str(tiny_model_dir))
    assert code == 0, err
    assert (tmp_path / "g" / "model-f16.gguf").read_text() == "GGUF f16"
    assert not (tmp_path / "g" / "merged").exists()
