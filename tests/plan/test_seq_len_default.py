"""`plan` without --seq-len sizes 2048 tokens, or the model's whole context when that is shorter; an
explicit --seq-len beyond the context stays an error."""

from __future__ import annotations

import json

COMMON = ("--gpu", "T4", "--method", "lora", "--tokens", "20000", "--prices", "bundled")


def test_default_seq_len_is_capped_at_the_models_context(run_cli, tiny_model_dir):
    code, out, err = run_cli("plan", str(tiny_model_dir), *COMMON, "--json")
    assert code == 0, err
    assert json.loads(out)["workload"]["seq_len"] == 512  # the tiny Llama's max_position_embeddings


def test_explicit_seq_len_beyond_the_context_is_refused(run_cli, tiny_model_dir):
    code, _, err = run_cli("plan", str(tiny_model_dir), *COMMON, "--seq-len", "2048")
    assert code == 2 and "--seq-len 2048 is beyond" in err and "512" in err, err
