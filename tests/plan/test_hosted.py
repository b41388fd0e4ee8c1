"""The hosted alternative: the cheapest API that serves this size and method, the others, the break-even."""

from __future__ import annotations

from datetime import date

import pytest

from cheaptune.errors import BadInput
from cheaptune.plan import hosted
from cheaptune.plan.planner import make_plan
from cheaptune.plan.workload import Constraints, Workload
from tests.plan.fakes import GPUS, OFFERS, SHAPE_7B, fake_fit, offer

W = Workload(tokens=20_000_000, epochs=2, seq_len=2048, effective_batch=16)  # 40M training tokens


def plan(c=Constraints(methods=("lora",)), offers=OFFERS):
    return make_plan("test-7b", SHAPE_7B, 4096, W, c, GPUS, offers, fake_fit())


def test_at_least_four_open_model_providers_with_dated_sources():
    offers, sources = hosted.table()
    open_providers = {o.provider for o in offers if not o.own_models_only}
    assert {"fireworks", "together", "tinker", "prime-intellect"} <= open_providers
    assert sources["vertex"].source.startswith("https://cloud.google.com/vertex-ai")
    openai = [o for o in offers if o.provider == "openai"]
    assert openai and all(o.closes == "2027-01-06" and o.own_models_only for o in openai)


def test_the_cheapest_hosted_api_serving_this_size_and_method_and_the_others():
    r = plan()
    # 7B LoRA SFT, 40M tokens: Tinker's $0.44 (only its listed Qwen3-8B, and the line says so), then Together's
    # $0.48 (the low end of its range), Fireworks' $0.50 and Prime Intellect's 4.5-9.5B bracket at $0.60
    assert r.hosted.startswith("cheapest hosted API for this job: $17.60 at tinker (4-8.5B, lora sft, only Qwen3-8B")
    assert "price as of 2026-10-07" in r.hosted and "if it offers this model or an equivalent" in r.hosted
    assert "Also: together $19.20, fireworks $20.00, prime-intellect $24.00" in r.hosted
    together = hosted.compare(50e9, 40e6, r.recommended)  # past Tinker's and Prime Intellect's brackets
    assert together.startswith("cheapest hosted API for this job: $60.00 at together (16-69B, lora sft")
    assert "Also: fireworks $120.00" in together
    assert "range-low of the provider's range" in together and "price as of 2026-05-08" in together
    assert "openai tunes only its own models and takes no new jobs after 2027-01-06" in r.hosted
    full = plan(Constraints(methods=("full",)))
    assert "at fireworks (0-16B, full sft" in full.hosted or "at together (0-16B, full sft" in full.hosted
    assert "$40.00 at fireworks" in full.hosted  # $1.00/M beats Together's full-tune top of range $1.35


def test_the_break_even_job_size_and_the_setup_risk_in_words():
    best = plan().recommended
    even = hosted.break_even_tokens(best, 0.44)
    assert even is not None and 0 < even < 40e6  # renting wins well below this job's 40M tokens
    per_token_self = best.price_per_hour / (best.tokens_per_s * 3600)
    fixed = best.total - per_token_self * best.tokens_per_s * best.details["train_hours"] * 3600
    assert fixed / even + per_token_self == pytest.approx(0.44e-6)  # the two cost lines meet there
    r = plan()
    assert f"above {even / 1e6:,.1f}M training tokens renting GPUs costs less" in r.hosted
    assert "renting is cheaper" in r.hosted and "setup risk" in r.hosted and "out-of-memory" in r.hosted
    dear = plan(offers=[offer("dear", "A100-80GB", 400.0)])
    assert "never costs less per token" in dear.hosted


def test_the_objective_picks_the_bracket_s_price():
    dpo = make_plan("test-7b", SHAPE_7B, 4096, Workload(tokens=20_000_000, epochs=2, seq_len=2048, effective_batch=16,
                                                         objective="dpo"),
                    Constraints(methods=("lora",)), GPUS, OFFERS, fake_fit())
    assert " at fireworks (0-16B, lora dpo" in dpo.hosted and "$1.00/M training tokens" in dpo.hosted
    orpo = hosted.compare(7e9, 1e6, dpo.recommended, objective="orpo")
    assert orpo.startswith("no hosted fine-tuning price on file for a 7.0B lora orpo job")


def test_no_hosted_price_for_a_model_outside_every_bracket():
    line = hosted.compare(5000e9, 1e6, plan().recommended)
    assert line.startswith("no hosted fine-tuning price on file for a 5000.0B lora sft job")


def test_a_price_age_is_counted_from_the_source_date():
    line = hosted.compare(7e9, 1e6, plan().recommended, today=date(2026, 10, 17))
    assert "price as of 2026-10-07, 10 d old" in line


def test_a_hosted_file_without_a_source_for_a_provider_is_one_line(tmp_path):
    bad = tmp_path / "hosted.yaml"
    bad.write_text("offers:\n  - {provider: x, min_params_b: 0, max_params_b: 9, method: lora, usd_per_million_tokens: 1}\n"
                   "sources: {}\n")
    with pytest.raises(BadInput, match="no source for x"):
        hosted.table(bad)
