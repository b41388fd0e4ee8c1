"""bench/job_accuracy.py: whole jobs, predicted with constants fitted on the other sources' throughput rows."""

from __future__ import annotations

import csv

import pytest

from cheaptune.estimate.time import throughput as tp

TINY = {"e_max": (0.5, 0.8), "tokens_half": (300,), "hidden_half": (600,), "full": (0.001,), "adapter": (0.001,)}
ROW = {"train_tokens": "", "packing": "yes", "steps": "10", "micro_batch": "2", "grad_accum": "4",
       "gpus_per_node": "2", "nodes": "1", "seq_len": "1024", "train_examples": "", "epochs": "", "dataset": "",
       "padding": ""}
# a dataset whose rows are 100 or 300 tokens, half each
TWO = {"lengths": {"d": {"p": [0, 0.5, 0.5, 1], "x": [100, 100, 300, 300], "mean_tokens": "200",
                          "train_examples": "1000"}}}


def test_packed_tokens_are_stated_or_steps_x_batch_x_ga_x_gpus_x_length_or_examples_x_mean(bench):
    ja = bench("job_accuracy")
    assert ja.workload(ROW, {}).tokens == 10 * 2 * 4 * 2 * 1024
    assert ja.workload({**ROW, "train_tokens": "123"}, {}).tokens == 123
    w = ja.workload({**ROW, "steps": "", "train_examples": "50", "epochs": "3", "dataset": "d"}, TWO["lengths"])
    assert w.tokens == 50 * 3 * 200 and w.seq_len == 1024
    with pytest.raises(ValueError, match="not derivable"):
        ja.workload({**ROW, "steps": ""}, {})


def test_unpacked_rows_run_padded_tokens_max_length_or_the_longest_of_each_micro_batch(bench):
    ja = bench("job_accuracy")
    unpacked = {**ROW, "packing": "no", "dataset": "d", "padding": "longest"}
    # two draws: the longest is 100 only when both are 100 (1/4), so E = 100/4 + 300 x 3/4 = 250
    w = ja.workload(unpacked, TWO["lengths"])
    assert w.sequences == 10 * 2 * 4 * 2 and w.tokens == pytest.approx(160 * 250, rel=0.01)
    one = ja.workload({**unpacked, "micro_batch": "1"}, TWO["lengths"])
    assert one.tokens / one.sequences == pytest.approx(200, rel=0.01)  # batch of one: the mean, no padding
    capped = ja.workload({**unpacked, "micro_batch": "1", "seq_len": "150"}, TWO["lengths"])
    assert capped.tokens / capped.sequences == pytest.approx(125, rel=0.01)  # rows truncated at max length
    assert ja.workload({**unpacked, "padding": "max_length"}, TWO["lengths"]).tokens == 160 * 1024
    by_epochs = ja.workload({**unpacked, "steps": "", "epochs": "2"}, TWO["lengths"])
    assert by_epochs.sequences == 2 * 1000  # the dataset's train split when the row states no examples
    with pytest.raises(ValueError, match="not in dataset_lengths"):
        ja.workload({**unpacked, "dataset": "nope"}, TWO["lengths"])


def test_the_dataset_length_rows_are_sourced_and_consistent(bench):
    ja = bench("job_accuracy")
    for name, d in ja.load_lengths().items():
        assert d["url"].startswith("https://") and d["source_date"] and d["retrieved"], name
        assert d["p"][0] == 0 and d["p"][-1] == 1 and d["x"] == sorted(d["x"]), name
        assert d["x"][0] == float(d["min_tokens"]) and d["x"][-1] == float(d["max_tokens"]), name
        assert ja._quantile(d, 0.5) == pytest.approx(float(d["median_tokens"]), abs=1), name
        # the stated mean and the one the percentiles imply agree within 10%
        assert ja.padded_length(d, 1, 10**6) == pytest.approx(float(d["mean_tokens"]), rel=0.1), name
    used = {r["dataset"] for r in csv.DictReader(ja.JOBS.open()) if r["dataset"]}
    assert used and used <= set(ja.load_lengths())


def test_a_config_without_intermediate_size_takes_its_own_mlp_name_or_says_what_is_missing(bench):
    ja = bench("job_accuracy")
    falcon = {"model_type": "falcon", "hidden_size": 64, "num_attention_heads": 4, "multi_query": True}
    cfg = ja.ffn_config(falcon)
    assert cfg["intermediate_size"] == 256 and cfg["num_key_value_heads"] == 1
    assert ja.ffn_config({**falcon, "model_type": "opt", "ffn_dim": 100})["intermediate_size"] == 100
    with pytest.raises(ValueError, match="states no MLP width"):
        ja.ffn_config({**falcon, "model_type": "mystery"})


def test_the_wall_time_terms_are_the_ones_the_row_declares(bench):
    ja = bench("job_accuracy")
    assert ja.wall_terms({"wall_includes": "train,eval"}) == {"train", "eval"}
    assert ja.wall_terms({"wall_includes": "train,load,tokenize"}) == {"train", "load", "tokenize"}
    for bad in ("", "load", "train,upload"):  # undeclared, no training, or a term the bench cannot predict
        with pytest.raises(ValueError, match="wall_includes"):
            ja.wall_terms({"wall_includes": bad})
    table = {"stacks": {"litgpt": {"same_as": "torchtune"}, "torchtune": {}, "hf": {}}}
    assert ja.ta.row_stack({"source": "x", "stack": "litgpt"}, table).timed == "torchtune"
    assert ja.ta.row_stack({"source": "x", "stack": "trl"}, table).timed == "hf"


def test_a_job_is_not_predicted_by_its_own_sources_rows(bench, monkeypatch):
    ja, ta = bench("job_accuracy"), bench("throughput_accuracy")
    jobs = [r for r in csv.DictReader(ja.JOBS.open()) if r["source"] == "peft-method-comparison"][:2]
    jobs += [r for r in csv.DictReader(ja.JOBS.open()) if r["source"] == "litgpt-config-hub"][:1]
    through = [r for r in csv.DictReader(ta.ROWS.open()) if r.get("scope", "bench") != "note"]
    seen = []
    fit = ta.fit
    monkeypatch.setattr(ta, "fit", lambda rs, base, grid=ta.GRID: seen.append({r["source"] for r in rs}) or fit(rs, base, grid))
    results, skipped, _ = ja.evaluate(jobs, through, TINY)
    assert len(results) == 3 and not skipped
    assert seen and all("peft-method-comparison" not in s for s in seen[:2])
    for r in results:  # the wall time is training plus the terms the row's wall time covers, each shown
        assert r["loso"] == pytest.approx(r["train_s"] + sum(r["other_s"].values()), abs=0.2)
        assert r["interval_basis"]
    peft, lit = results[0], results[2]
    assert peft["other_s"] == {}  # PEFT's optimizer-step time: training only
    assert set(lit["other_s"]) == {"eval"} and 0 < lit["other_s"]["eval"] < lit["train_s"]


def test_a_row_states_the_network_between_its_nodes_and_a_faster_link_shortens_its_time(bench):
    ja = bench("job_accuracy")
    row = {**ROW, "model": "llama-2-70b", "method": "full", "lora_r": "", "lora_targets": "", "gpu": "A100-80GB",
           "gpus_per_node": "8", "nodes": "2", "sharding": "fsdp", "offload": "no", "grad_ckpt": "yes", "attn": "flash",
           "micro_batch": "1", "grad_accum": "1", "seq_len": "2048", "network": "infiniband"}
    assert ja.job_of(row, "hf", "ethernet")[2].network == "infiniband"  # the row's own link wins over the default
    assert ja.job_of({**row, "network": ""}, "hf", "ethernet")[2].network == "ethernet"
    table = tp.load_table()
    fast, slow = (tp.step_time(*ja.job_of({**row, "network": n}, "hf")[:3], table).tokens_per_s
                  for n in ("infiniband", "ethernet"))
    assert fast > slow  # FSDP gathers 140 GB of weights per micro-step across the two nodes


def test_a_serial_link_job_is_flagged_and_its_band_widens_where_no_row_shares_its_link(bench):
    """A10G x4 FSDP (no usable peer-to-peer) and H100 x2 nodes over ethernet are serial links (scaling.serial_link:
    transfers unhidden); the job's band is looked up for that link (estimate/time/intervals.py)."""
    from cheaptune.catalog.gpus import resolve_gpu
    from cheaptune.estimate.cost.cost import constants
    from cheaptune.estimate.time import intervals

    ja, ta = bench("job_accuracy"), bench("throughput_accuracy")
    base = tp.load_table()
    table = ta.with_constants(base, "fit", {"e_max": 0.6, "tokens_half": 0, "hidden_half": 300, "full": 0.002,
                                            "adapter": 0.0, "per_module": 0.0, "elementwise_bytes": 100})
    row = {**ROW, "model": "llama-2-7b", "method": "full", "lora_r": "", "lora_targets": "", "gpu": "A10G",
           "gpus_per_node": "4", "sharding": "fsdp", "offload": "no", "grad_ckpt": "yes", "attn": "flash",
           "network": "", "wall_includes": "train"}
    assert ja.predict(row, table, constants(), "ethernet")["serial_link"]
    assert not ja.predict({**row, "gpu": "A100-80GB"}, table, constants(), "ethernet")["serial_link"]
    assert ja.predict({**row, "gpu": "H100", "gpus_per_node": "8", "nodes": "2"}, table, constants(),
                      "ethernet")["serial_link"]
    a10g = resolve_gpu("A10G")  # a plan's band (no layout given) takes the board's own link
    assert intervals.time_band(a10g, "full", 4) == intervals.time_band(a10g, "full", 4, serial_link=True)


C = {"e_max": 0.6, "tokens_half": 0, "hidden_half": 300, "full": 0.002, "adapter": 0.0, "per_module": 0.0,
     "elementwise_bytes": 100}


def _serial_jobs(ja, ta):
    jobs = [r for r in csv.DictReader(ja.JOBS.open()) if r.get("scope", "bench") != "note"]
    through = [r for r in csv.DictReader(ta.ROWS.open()) if r.get("scope", "bench") != "note"]
    return ja.overlap_rows(jobs, through), through


def test_the_serial_link_overlap_is_fitted_on_the_other_sources_jobs_only(bench, monkeypatch):
    """No held-out job is timed with an overlap chosen on it: each fold's value comes from the other sources'
    serial-link sharded jobs, the value a result carries is its fold's, and a fold with none takes the neutral
    steptime.yaml overlap.sharded and says so."""
    ja, ta = bench("job_accuracy"), bench("throughput_accuracy")
    monkeypatch.setattr(ta, "fitted_tables", lambda rows, base, grid: {"pooled": C})  # step-time fit: not tested here
    serial, through = _serial_jobs(ja, ta)
    assert len({r["source"] for r in serial}) >= 2 and all(r["sharding"] in ("fsdp", "zero3") for r in serial)
    results, skipped, folds = ja.evaluate(serial, through)
    by_id = {r["id"]: r["source"] for r in serial}
    for source, fold in folds.items():
        assert fold["rows"] and source not in {by_id[i] for i in fold["rows"]}
        assert fold["value"] in ja.OVERLAP_GRID
    assert not skipped and all(r["constants"]["serial_link_overlap"] == folds[r["source"]]["value"] for r in results)
    one = [r for r in serial if r["source"] == serial[0]["source"]]
    _, _, alone = ja.evaluate(one, through)
    assert alone[one[0]["source"]]["value"] == tp.load_table()["overlap"]["sharded"]["value"]
    assert "neutral" in alone[one[0]["source"]]["note"]


def test_the_overlap_fit_finds_the_value_the_jobs_ran_at(bench):
    """Jobs whose reported wall time is the model's at overlap 0.5 are fitted at 0.5 with score 0; at 0.25 the
    score is worse (the grid search is not a constant)."""
    from cheaptune.estimate.cost.cost import constants

    ja, ta = bench("job_accuracy"), bench("throughput_accuracy")
    serial, through = _serial_jobs(ja, ta)
    base, consts, tables = tp.load_table(), constants(), {"pooled": C}
    at = [{**r, "wall_s": str(ja.predict_with(r, ja.constants_of(r, tables, base, 0.5), base, consts, through)["wall_s"])}
          for r in serial]
    fit = ja.fit_overlap(at, tables, base, consts, through)
    assert fit["value"] == 0.5 and fit["score"] == pytest.approx(0, abs=1e-6)
    assert ja.fit_overlap(at, tables, base, consts, through, grid=(0.0, 0.25))["score"] > 0
    assert ja.fit_overlap([], tables, base, consts, through)["value"] is None


def test_write_data_replaces_only_the_overlap_block_and_names_its_rows(bench, tmp_path):
    import yaml

    from cheaptune.estimate.time.scaling import INTERCONNECT

    ja = bench("job_accuracy")
    path = tmp_path / "interconnect.yaml"
    path.write_text(INTERCONNECT.read_text())
    jobs = [{"id": "JR1", "source": "ray-deepspeed-template"}, {"id": "JL32", "source": "litgpt-config-hub"}]
    ja.write_overlap({"value": 0.25, "rows": ["JR1", "JL32"], "score": 0.3}, jobs, path)
    doc, before = yaml.safe_load(path.read_text()), yaml.safe_load(INTERCONNECT.read_text())
    entry = doc["serial_link_overlap"]
    assert entry["value"] == 0.25 and entry["label"] == "fitted"
    assert entry["rows"] == "JR1 (ray-deepspeed-template), JL32 (litgpt-config-hub)" and "neutral" in entry["source"]
    assert doc["no_peer_to_peer"] == before["no_peer_to_peer"]
    path.write_text("no_peer_to_peer: {}\n")
    with pytest.raises(ja.BadInput, match="no serial_link_overlap block"):
        ja.write_overlap({"value": 0.25, "rows": [], "score": 0.3}, jobs, path)


def test_checkpoint_saves_inside_the_timed_loop_are_the_plans_checkpoint_at_the_disk_rate(bench):
    from cheaptune.estimate.cost.cost import artifact_sizes, constants

    ja = bench("job_accuracy")
    with pytest.raises(ValueError, match="save_every"):
        ja.wall_terms({"wall_includes": "train,save", "save_every": ""})
    assert ja.wall_terms({"wall_includes": "train,save", "save_every": "50"}) == {"train", "save"}
    shape = tp.ModelShape(params=1_000_000_000, hidden=2048, layers=16, vocab=32000, tied_embeddings=False)
    job = tp.Job(shape, "full", 512, 2, grad_accum=4)
    layout = ja.Layout(2, 1, "fsdp")
    work = ja.Workload(tokens=0.0, seq_len=512, sequences=2 * 4 * 2 * 125, basis="x")  # 125 optimizer steps
    consts = constants()
    mixed = ja.save_seconds({"save_every": "50", "precision": "bf16"}, work, job, layout, consts)
    # two saves (steps 50 and 100; 125 is not a multiple), each fp32 weights + two fp32 AdamW moments
    assert mixed == pytest.approx(2 * 12e9 / consts["disk_write_bytes_per_s"])
    assert mixed == pytest.approx(2 * artifact_sizes("full", 10**9, 10**9, "bf16").checkpoint_bytes
                                  / consts["disk_write_bytes_per_s"])
    true16 = ja.save_seconds({"save_every": "50", "precision": "bf16-true"}, work, job, layout, consts)
    assert true16 == pytest.approx(mixed / 2)  # bf16 weights and moments
    assert ja.save_seconds({"save_every": "200", "precision": ""}, work, job, layout, consts) == 0.0
    adapter = tp.Job(shape, "lora", 512, 2, trainable_params=10_000_000, grad_accum=4)
    assert ja.save_seconds({"save_every": "50"}, work, adapter, layout, consts) < mixed / 50  # adapter only


def test_the_rows_that_time_saves_state_their_interval_and_the_source_says_so(bench):
    ja = bench("job_accuracy")
    saving = [r for r in csv.DictReader(ja.JOBS.open()) if "save" in (r["wall_includes"] or "")]
    assert {r["id"] for r in saving} >= {"JT1", "JT2", "JL36"}
    for r in saving:
        assert int(r["save_every"]) > 0 and "save" in r["conditions"], r["id"]


def test_a_stated_trainable_count_is_read_as_a_count_not_as_module_names(bench):
    ja = bench("job_accuracy")
    cfg = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 1000}
    row = {"method": "prompt_tuning", "lora_r": "", "lora_targets": "", "trainable_extra": ""}
    assert ja.trainable(cfg, {**row, "trainable_extra": "200 virtual tokens (614,400 trainable parameters)"}) == 614_400
    assert ja.trainable(cfg, {**row, "trainable_extra": "200 virtual tokens (11.5M trainable parameters)"}) == 11_500_000
    # whole modules (peft modules_to_save) are no adapter weights: vocab x hidden each, only the head a matmul
    whole = {**row, "method": "lora", "lora_r": "0", "trainable_extra": "embed_tokens,lm_head"}
    assert ja.trainable(cfg, whole) == 0
    assert ja.saved_modules(cfg, whole) == (2 * 1000 * 64, 1000 * 64)
    assert ja.saved_modules(cfg, {**row, "trainable_extra": "200 virtual tokens (614,400 trainable parameters)"}) == (0, 0)


def test_prompt_tuning_runs_its_virtual_tokens_in_every_sequence(bench):
    ja = bench("job_accuracy")
    row = {**ROW, "method": "prompt_tuning", "trainable_extra": "20 virtual tokens (40,960 trainable parameters)"}
    plain, prompted = ja.workload({**row, "method": "lora"}, {}), ja.workload(row, {})
    assert prompted.seq_len == plain.seq_len + 20 and prompted.sequences == plain.sequences
    assert prompted.tokens == plain.tokens + 20 * plain.sequences
    prefix = ja.workload({**row, "method": "prefix_tuning"}, {})  # a prefix is keys and values, not sequence positions
    assert prefix == plain
