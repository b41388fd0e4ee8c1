"""Model catalog: every entry builds and matches its published size; lookups, local configs, errors, CLI."""

from __future__ import annotations

import json
import math

import pytest

from cheaptune.catalog.models import count_params, list_models, resolve_model, to_hf_config
from cheaptune.errors import BadInput

# Published sizes (model cards / papers), in parameters; the analytic count must be within 3%.
PUBLISHED = {
    "meta-llama/Llama-2-7b-hf": 6.74e9, "meta-llama/Llama-2-13b-hf": 13.0e9, "meta-llama/Llama-2-70b-hf": 69.0e9,
    "codellama/CodeLlama-7b-hf": 6.74e9, "codellama/CodeLlama-13b-hf": 13.0e9, "codellama/CodeLlama-34b-hf": 33.7e9,
    "meta-llama/Meta-Llama-3-8B": 8.03e9, "meta-llama/Meta-Llama-3-70B": 70.6e9, "meta-llama/Llama-3.1-8B": 8.03e9,
    "meta-llama/Llama-3.1-70B": 70.6e9, "meta-llama/Llama-3.1-405B": 405.9e9, "meta-llama/Llama-3.2-1B": 1.24e9,
    "meta-llama/Llama-3.2-3B": 3.21e9, "meta-llama/Llama-3.3-70B-Instruct": 70.6e9,
    "mistralai/Mistral-7B-v0.1": 7.24e9, "mistralai/Mistral-7B-Instruct-v0.3": 7.25e9,
    "mistralai/Mixtral-8x7B-v0.1": 46.7e9, "mistralai/Mistral-Nemo-Base-2407": 12.2e9,
    "Qwen/Qwen2.5-0.5B": 0.49e9, "Qwen/Qwen2.5-1.5B": 1.54e9, "Qwen/Qwen2.5-3B": 3.09e9, "Qwen/Qwen2.5-7B": 7.61e9,
    "Qwen/Qwen2.5-14B": 14.7e9, "Qwen/Qwen2.5-32B": 32.5e9, "Qwen/Qwen2.5-72B": 72.7e9,
    "google/gemma-2b": 2.51e9, "google/gemma-7b": 8.54e9, "google/gemma-2-2b": 2.61e9, "google/gemma-2-9b": 9.24e9,
    "google/gemma-2-27b": 27.2e9, "microsoft/phi-1_5": 1.42e9, "microsoft/phi-2": 2.78e9,
    "microsoft/Phi-3-mini-4k-instruct": 3.82e9, "microsoft/Phi-3-medium-4k-instruct": 14.0e9,
    "tiiuae/falcon-7b": 7.0e9, "tiiuae/falcon-40b": 41.8e9, "stabilityai/stablelm-base-alpha-3b": 3.6e9,
    "stabilityai/stablelm-3b-4e1t": 2.8e9, "TinyLlama/TinyLlama_v1.1": 1.1e9,
    "HuggingFaceTB/SmolLM2-135M": 135e6, "HuggingFaceTB/SmolLM2-360M": 362e6, "HuggingFaceTB/SmolLM2-1.7B": 1.71e9,
    "EleutherAI/pythia-1b": 1.01e9,
    # exact counts in keras-team/keras-hub@71453d0 presets (mistral, qwen3, gemma, gpt_oss); phi-4 is its hub
    # safetensors total 14,659,507,200 (the card says "14B"); Phi-3.5-mini shares phi3_mini's 3,821,079,552; the
    # Qwen2-7B and Qwen2.5-Coder-14B shapes are those of Qwen2.5-7B and -14B above
    "unsloth/Mistral-7B-v0.2": 7.24e9, "mistralai/Mistral-7B-v0.3": 7.25e9, "Qwen/Qwen2.5-Coder-14B": 14.7e9,
    "Qwen/Qwen2-7B-Instruct": 7.61e9, "Qwen/Qwen2-7B": 7.61e9, "Qwen/Qwen3-14B": 14.77e9, "Qwen/Qwen3-32B": 32.76e9,
    "google/codegemma-7b-it": 8.54e9, "microsoft/Phi-3.5-mini-instruct": 3.82e9, "microsoft/phi-4": 14.66e9,
    "openai/gpt-oss-20b": 20.91e9, "openai/gpt-oss-120b": 116.83e9, "google/gemma-3-270m": 268.1e6,
    # unslothai/notebooks@bdda2ef run banner, total less LoRA: ERNIE 22,002,983,104 - 177,545,216; Mistral Small is
    # the "22B" of its release name; SantaCoder "1.1B" as the Cerebras model zoo page states
    "baidu/ERNIE-4.5-21B-A3B-PT": 21.83e9, "mistralai/Mistral-Small-Instruct-2409": 22.2e9,
    "bigcode/gpt_bigcode-santacoder": 1.1e9,
    # keras-hub@71453d0 qwen3, qwen3_moe and gemma3 presets (exact); the Coder and R1-Distill shapes are those of
    # Qwen2.5-7B/32B and Llama-3.1-8B above
    "Qwen/Qwen3-0.6B": 596.0e6, "Qwen/Qwen3-1.7B": 1.72e9, "Qwen/Qwen3-4B": 4.02e9, "Qwen/Qwen3-8B": 8.19e9,
    "Qwen/Qwen3-30B-A3B": 30.53e9, "google/gemma-3-1b-it": 999.9e6, "Qwen/Qwen2.5-Coder-7B": 7.61e9,
    "Qwen/Qwen2.5-Coder-32B": 32.5e9, "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": 8.03e9,
}
SPECS = list_models()


def test_catalog_covers_the_published_list():
    assert set(PUBLISHED) == {s.id for s in SPECS}
    for s in SPECS:
        assert s.source == f"https://huggingface.co/{s.id}/blob/main/config.json"
        assert s.checked and s.read and s.source_date and s.context_length > 0


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_param_count_matches_published_size(spec):
    assert spec.params == pytest.approx(PUBLISHED[spec.id], rel=0.03)


def _meta_count(spec, layers: int) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(to_hf_config(spec, num_hidden_layers=layers))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_entry_builds_and_analytic_count_is_exact(spec):
    """Meta-device builds with 1 and 2 layers extrapolate to the full model (counts are linear in depth)."""
    one, two = _meta_count(spec, 1), _meta_count(spec, 2)
    full = one + (two - one) * (spec.config["num_hidden_layers"] - 1)
    assert count_params(spec.config) == full


@pytest.mark.parametrize(("name", "expected"), [
    ("llama-2-7b", "meta-llama/Llama-2-7b-hf"), ("META-LLAMA/LLAMA-2-7B-HF", "meta-llama/Llama-2-7b-hf"),
    ("Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf"), ("mistral-7b", "mistralai/Mistral-7B-v0.1"),
    ("qwen2.5-7b", "Qwen/Qwen2.5-7B"), ("SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M"),
    ("tinyllama", "TinyLlama/TinyLlama_v1.1"), ("phi-2", "microsoft/phi-2"), (" mixtral-8x7b ", "mistralai/Mixtral-8x7B-v0.1"),
    # hub ids the public benchmark rows name, declared as aliases of the entry whose config was read
    ("mistralai/Mistral-7B-v0.2", "unsloth/Mistral-7B-v0.2"), ("Qwen/Qwen3-14B-Base", "Qwen/Qwen3-14B"),
    ("Qwen/Qwen2.5-Coder-14B-Instruct", "Qwen/Qwen2.5-Coder-14B"), ("qwen2-7b", "Qwen/Qwen2-7B"),
    ("google/codegemma-7b", "google/codegemma-7b-it"),
    ("TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", "TinyLlama/TinyLlama_v1.1"),
    ("google/gemma-3-270m-it", "google/gemma-3-270m"), ("santacoder", "bigcode/gpt_bigcode-santacoder"),
    ("unsloth/tinyllama-bnb-4bit", "TinyLlama/TinyLlama_v1.1"),
])
def test_lookup_by_alias_and_case(name, expected):
    assert resolve_model(name).id == expected


def test_qwen2_7b_base_keeps_its_own_context_length():
    """The base config says 131072 positions where the Instruct one says 32768 (Unsloth's RoPE cache follows it)."""
    base, chat = resolve_model("Qwen/Qwen2-7B"), resolve_model("Qwen/Qwen2-7B-Instruct")
    assert (base.config["max_position_embeddings"], chat.config["max_position_embeddings"]) == (131072, 32768)


def test_unknown_name_suggests():
    with pytest.raises(BadInput, match=r"unknown model 'llama-2-8b' \(did you mean .*llama-2-7b"):
        resolve_model("llama-2-8b")


def test_unknown_hub_id_offline_names_close_entries(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BadInput, match=r"not in the catalog and HF_HUB_OFFLINE.*close catalog entries: .*Qwen2.5-7B"):
        resolve_model("Qwen/Qwen2.5-7B-Math")


def test_unknown_hub_id_online_fetches_config_only(monkeypatch, tmp_path):
    import socket

    import huggingface_hub

    from cheaptune.catalog import models

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(_TINY))
    calls = []

    def download(repo, name, local_files_only=False):
        calls.append((repo, name, local_files_only))
        if local_files_only:
            raise FileNotFoundError("not in the local cache")
        return str(cfg)

    class _Conn:
        def close(self):
            pass

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(socket, "create_connection", lambda addr, timeout: _Conn())
    spec = resolve_model("someone/tiny-llama")
    assert calls == [("someone/tiny-llama", "config.json", True), ("someone/tiny-llama", "config.json", False)]
    assert spec.id == "someone/tiny-llama" and spec.params == count_params(_TINY)

    def unreachable(addr, timeout):
        assert timeout == models.HUB_PROBE_TIMEOUT_S
        raise OSError("Name or service not known")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    with pytest.raises(BadInput, match=r"cannot fetch config.json \(ConnectionError\)"):
        resolve_model("someone/other-model")


def test_cached_config_is_used_without_network(monkeypatch, tmp_path):
    import socket

    import huggingface_hub

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(_TINY))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo, name, local_files_only=False: str(cfg))
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("went online"))
    assert resolve_model("someone/cached").params == count_params(_TINY)


def test_instruct_variant_offline_uses_base_architecture(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    base = resolve_model("HuggingFaceTB/SmolLM2-135M")
    assert spec.id == "HuggingFaceTB/SmolLM2-135M-Instruct" and spec.config == base.config
    assert "architecture of HuggingFaceTB/SmolLM2-135M" in spec.source
    assert resolve_model("meta-llama/Llama-2-7b-chat-hf").params == resolve_model("llama-2-7b").params


_TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 256}


def test_local_config_file_and_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_TINY))
    by_file = resolve_model(tmp_path / "config.json")
    by_dir = resolve_model(str(tmp_path))
    assert by_file.source == by_dir.source == "local" and by_dir.id == str(tmp_path)
    assert by_dir.family == "llama" and by_dir.context_length == 256
    assert by_dir.params == 100 * 64 * 2 + 2 * (64 * 16 * 12 + 3 * 64 * 128 + 2 * 64) + 64


def test_tiny_model_dir_count_matches_its_weights(tiny_model_dir):
    from safetensors import safe_open

    spec = resolve_model(tiny_model_dir)
    total = 0
    for f in tiny_model_dir.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            names = st.keys()
            total += sum(math.prod(st.get_slice(k).get_shape()) for k in names)
    assert total > 0 and spec.params == total


@pytest.mark.parametrize(("body", "message"), [
    ("{not json", r"config.json: not valid JSON"),
    ("[1, 2]", r"config.json: expected a JSON object"),
    (json.dumps({k: v for k, v in _TINY.items() if k != "model_type"}), r"config.json: config lacks model_type"),
    (json.dumps({k: v for k, v in _TINY.items() if k != "hidden_size"}), r"config.json: config lacks hidden_size"),
])
def test_malformed_config_is_one_line(tmp_path, body, message):
    (tmp_path / "config.json").write_text(body)
    with pytest.raises(BadInput, match=message) as err:
        resolve_model(tmp_path)
    assert "\n" not in str(err.value)


def test_missing_paths(tmp_path):
    with pytest.raises(BadInput, match="no config.json in this folder"):
        resolve_model(tmp_path)
    with pytest.raises(BadInput, match="no such file"):
        resolve_model(str(tmp_path / "nope" / "config.json"))


def test_unknown_model_type_is_bad_input(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(dict(_TINY, model_type="no_such_arch")))
    with pytest.raises(BadInput, match="transformers cannot build model_type 'no_such_arch'"):
        _ = resolve_model(tmp_path).params


GOOD = """models:
  - id: org/tiny
    family: tiny
    aliases: [tiny]
    source: https://huggingface.co/org/tiny/blob/main/config.json
    checked: a test row
    source_date: undated
    read: '2026-01-01'
    config: {model_type: llama, hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 4, vocab_size: 100}
"""


@pytest.mark.parametrize(("edit", "message"), [
    (("hidden_size: 64, ", ""), r"entry 'org/tiny': field 'config': .*config lacks hidden_size"),
    (("hidden_size: 64", "hidden_size: -1"), r"entry 'org/tiny': field 'config': .*positive integer"),
    (("id: org/tiny", "id: tiny"), r"entry 'tiny': field 'id'"),
    (("    checked: a test row\n", ""), r"entry 'org/tiny': field 'checked': Field required"),
    (("    read: '2026-01-01'\n", ""), r"entry 'org/tiny': field 'read': Field required"),
    (("source_date: undated", "source_date: last year"), r"entry 'org/tiny': field 'source_date': String should match"),
    (("family: tiny", "family: tiny\n    colour: red"), r"field 'colour': Extra inputs"),
])
def test_bad_catalog_row_is_one_line(tmp_path, edit, message):
    p = tmp_path / "models.yaml"
    p.write_text(GOOD.replace(*edit))
    with pytest.raises(BadInput, match=message) as err:
        list_models(path=p)
    assert str(p) in str(err.value) and "\n" not in str(err.value)


def test_custom_catalog_and_duplicate_names(tmp_path):
    p = tmp_path / "models.yaml"
    p.write_text(GOOD)
    assert resolve_model("TINY", path=p).id == "org/tiny"
    p.write_text(GOOD + GOOD.split("models:\n")[1].replace("org/tiny", "org/tiny2"))
    with pytest.raises(BadInput, match=r"entry 'org/tiny2': name 'tiny' is already used by 'org/tiny'"):
        list_models(path=p)


def test_cli_table_json_and_family(run_cli):
    code, out, _ = run_cli("models")
    assert code == 0 and "meta-llama/Llama-2-7b-hf" in out and "6.74B" in out
    code, out, _ = run_cli("models", "--json", "--family", "SmolLM2")
    rows = json.loads(out)
    assert code == 0 and [r["id"] for r in rows] == [f"HuggingFaceTB/SmolLM2-{s}" for s in ("135M", "360M", "1.7B")]
    assert rows[0]["params"] == count_params(resolve_model("smollm2-135m").config) and rows[0]["context_length"] == 8192
    code, _, err = run_cli("models", "--family", "lama")
    assert code == 2 and "did you mean" in err


def test_building_a_config_leaves_the_catalog_entry_unchanged():
    """transformers adds rope_theta into rope_scaling in place; cache keys hash the entry, so it must not change."""
    import copy

    from cheaptune.catalog.models import to_hf_config
    from cheaptune.estimate.memory.compute import hf_config

    spec = resolve_model("Llama-3.1-8B")
    before = copy.deepcopy(spec.config)
    to_hf_config(spec)
    hf_config(spec.config)
    assert spec.config == before


def test_building_an_entrys_config_keeps_transformers_checks_off_the_terminal(monkeypatch):
    """A config built only to size a model (`cheaptune models`, plans): transformers' field checks (santacoder's
    default bos id past its 49,280-token vocabulary) printed four lines under `models`; its verbosity is back after."""
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    seen = []
    real = AutoConfig.for_model
    monkeypatch.setattr(AutoConfig, "for_model", lambda *a, **k: seen.append(hf_logging.get_verbosity()) or real(*a, **k))
    before = hf_logging.get_verbosity()
    to_hf_config(resolve_model("santacoder"))
    assert seen == [hf_logging.ERROR] and hf_logging.get_verbosity() == before
