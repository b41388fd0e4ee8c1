"""count_tokens: exact with a tokenizer (chat template applied), otherwise a labelled estimate."""

from __future__ import annotations

import pytest

from cheaptune.data import count_tokens
from cheaptune.errors import BadInput
from tests.data.conftest import ALPACA, MESSAGES, TEXT


def test_estimate_is_labelled_and_scales_with_characters(jsonl):
    short = count_tokens(jsonl([{"text": "a" * 400}], "s.jsonl"))
    long = count_tokens(jsonl([{"text": "a" * 4000}] * 3, "l.jsonl"))
    assert not short.exact and "estimate" in short.method and "OpenAI" in short.method
    assert short.tokens == 100 and long.tokens == 3000 and long.examples == 3


def test_estimate_adds_template_tokens_for_turns(jsonl):
    got = count_tokens(jsonl(MESSAGES))
    content_only = (len("user2+2?") + len("assistant4")) / 4
    assert got.tokens == round(content_only + 2 * 5)


def test_exact_text_matches_the_tokenizer(jsonl, tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    got = count_tokens(jsonl(TEXT), tokenizer=tok)
    assert got.exact and got.examples == 2
    assert got.tokens == sum(len(tok(r["text"])["input_ids"]) for r in TEXT)


def test_exact_messages_apply_the_chat_template(jsonl, tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    got = count_tokens(jsonl(MESSAGES), tokenizer=str(tiny_model_dir))  # a folder path works too
    want = len(tok.apply_chat_template(MESSAGES[0]["messages"], tokenize=True, return_dict=True)["input_ids"])
    assert got.exact and got.tokens == want
    assert want > len(tok("2+2?4")["input_ids"]) + 4  # the template's markers are counted


def test_exact_alpaca_counts_prompt_and_completion(jsonl, tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    got = count_tokens(jsonl(ALPACA[:1]), tokenizer=tok)
    turns = [{"role": "user", "content": "Add the numbers.\n\n2 and 3"}, {"role": "assistant", "content": "5"}]
    assert got.tokens == len(tok.apply_chat_template(turns, tokenize=True, return_dict=True)["input_ids"])


def test_sample_scales_and_is_not_exact(jsonl, tiny_model_dir):
    rows = [{"text": "x" * 40}] * 100
    full = count_tokens(jsonl(rows), tokenizer=str(tiny_model_dir))
    part = count_tokens(jsonl(rows), tokenizer=str(tiny_model_dir), sample=10)
    assert full.exact and not part.exact and "10 of 100 rows" in part.method
    assert part.tokens == full.tokens and part.examples == 100
    with pytest.raises(BadInput, match="sample must be at least 1"):
        count_tokens(jsonl(rows), sample=0)


def test_bad_tokenizer_path(jsonl, tmp_path):
    with pytest.raises(BadInput, match="cannot load a tokenizer"):
        count_tokens(jsonl(TEXT), tokenizer=tmp_path / "nothing")


def test_a_preference_pair_counts_both_rows_of_the_concatenated_forward(jsonl, tiny_model_dir):
    from transformers import AutoTokenizer

    pair = {"prompt": "Say hi.", "chosen": " Hello there!", "rejected": " No."}
    est = count_tokens(jsonl([pair]), objective="dpo")
    assert est.examples == 1 and est.tokens == round((7 + 13 + 7 + 3) / 4) and "per pair" in est.method
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    got = count_tokens(jsonl([pair] * 3), tokenizer=tok, objective="orpo")
    want = sum(len(tok(pair["prompt"] + pair[s])["input_ids"]) for s in ("chosen", "rejected"))
    assert got.exact and got.examples == 3 and got.tokens == 3 * want and got.lengths == (want,) * 3
    with pytest.raises(BadInput):
        count_tokens(jsonl([{"text": "not a pair"}]), objective="dpo")


def test_a_family_with_a_measured_tokenizer_scales_the_estimate(jsonl):
    """Llama 2's 32k SentencePiece vocabulary cuts English into more tokens than the rule's tokenizer;
    Llama 3's reads like the rule; a family nobody measured keeps the rule."""
    rows = jsonl([{"text": "word " * 800}])
    rule, llama2, llama3 = (count_tokens(rows, family=f) for f in (None, "llama-2", "llama-3"))
    other = count_tokens(rows, family="falcon")
    assert rule.tokens == other.tokens == 1000
    assert llama2.tokens > 1.1 * rule.tokens and abs(llama3.tokens - rule.tokens) <= 2
    assert "llama-2 tokenizer" in llama2.method and "rule of thumb" in other.method
    assert not llama2.exact


def _hub_cache(root, repo_id: str, files: dict[str, bytes]):
    """A Hugging Face cache holding some files of one model, laid out as huggingface_hub writes it."""
    commit = "0" * 40
    repo = root / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    for name, data in files.items():
        (snap / name).write_bytes(data)
    return snap


def test_a_hub_model_s_cached_tokenizer_counts_exactly(jsonl, tiny_model_dir, tmp_path, monkeypatch):
    """A user who has downloaded the model gets an exact count offline, not the estimate."""
    import huggingface_hub.constants as hf

    from cheaptune.catalog.models import resolve_model
    from cheaptune.data.tokens import cached_tokenizer
    from cheaptune.plan.sources import build_workload

    spec = resolve_model("meta-llama/Llama-2-7b-hf")
    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(tmp_path / "hub"))
    common = {"tokens": None, "examples": None, "avg_tokens": None, "epochs": 1, "seq_len": 512, "effective_batch": 1}
    data = str(jsonl(TEXT))
    assert cached_tokenizer(spec.id) is None
    assert not build_workload(spec, data, **common).tokens_exact  # nothing cached: the family's estimate
    files = {n: (tiny_model_dir / n).read_bytes() for n in ("tokenizer.json", "tokenizer_config.json")}
    snap = _hub_cache(tmp_path / "hub", spec.id, files)
    assert cached_tokenizer(spec.id) == snap
    got = build_workload(spec, data, **common)
    assert got.tokens_exact and got.tokens_basis.startswith("counted (tokenizer")


def test_cached_tokenizer_needs_both_files_and_a_repo_id(tiny_model_dir, tmp_path, monkeypatch):
    import huggingface_hub.constants as hf

    from cheaptune.data.tokens import cached_tokenizer

    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(tmp_path))
    _hub_cache(tmp_path, "org/half", {"tokenizer.json": (tiny_model_dir / "tokenizer.json").read_bytes()})
    assert cached_tokenizer("org/half") is None  # no tokenizer_config.json: AutoTokenizer could not load it
    assert cached_tokenizer("/not/a/repo id") is None


def test_every_mapped_family_is_a_catalog_family():
    """A family name the estimate maps to a tokenizer that no catalog model carries would never apply."""
    from cheaptune.catalog.models import list_models
    from cheaptune.data.tokens import _estimate_constants

    catalog = {m.family for m in list_models()}
    for name, t in _estimate_constants()["tokenizers"].items():
        assert set(t["families"]) <= catalog, name
        assert 0.5 < float(t["ratio"]) < 1.5
