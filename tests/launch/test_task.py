"""Task YAML for several plans, validated by SkyPilot's own sky.Task.from_yaml, and its content checked."""

from __future__ import annotations

import shlex

import pytest
import yaml

from cheaptune.errors import BadInput, Infeasible
from cheaptune.launch import launcher
from cheaptune.launch.names import all_clouds, sky_gpu
from cheaptune.launch.options import LaunchOptions
from cheaptune.launch.stage import stage
from cheaptune.launch.task import select_offers

from .conftest import make_plan, offer

PLANS = {
    "spot": make_plan(offer("aws", "A100-80GB", 4.1, spot=True, region="us-east-1")),
    "on-demand": make_plan(offer("gcp", "L4", 0.7, region="us-central1")),
    "community-runpod": make_plan(offer("runpod", "RTX4090", 0.69, kind="community")),
    "community-vast": make_plan(offer("vast", "RTX3090", 0.25, spot=True, kind="community")),
    "multi-gpu": make_plan(offer("lambda", "H100", 11.9, count=4), method="full", total=15.0, budget=None),
    "alternatives": make_plan(
        offer("aws", "A10G", 1.0, spot=True, total=5.0),
        [offer("gcp", "L4", 0.7, spot=True, total=5.2), offer("azure", "A100", 3.7, total=5.4),
         offer("lambda", "RTXA6000", 0.8, total=5.6), offer("runpod", "H100", 2.4, total=9.0)],
    ),
}


def _entries(task: dict) -> list[dict]:
    res = task["resources"]
    return res.get("any_of", [res])


@pytest.mark.parametrize("kind", sorted(PLANS))
def test_task_yaml_validates_and_matches_plan(kind, tmp_path, recorder, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_sekrit_value")
    plan = PLANS[kind]
    prep = launcher.prepare(plan, LaunchOptions(checkpoint_dir="/mnt/ckpt"), recorder, tmp_path / "task.yaml")
    text = prep.yaml_path.read_text()
    task = yaml.safe_load(text)
    assert recorder.calls[0][0] == "validate"
    assert "hf_sekrit_value" not in text and task["secrets"] == {
        "HF_TOKEN": None, "WANDB_API_KEY": None, "CHEAPTUNE_WEBHOOK_URL": None}
    # the bucket is mounted exactly where train writes checkpoints, so a recovered job resumes
    assert task["file_mounts"]["/mnt/ckpt"]["mode"] == "MOUNT_CACHED"
    assert "--checkpoint-dir /mnt/ckpt" in task["run"] and "--resume auto" in task["run"]
    assert task["resources"]["job_recovery"]["recover_on_exit_codes"] == [143]
    chosen = prep.selection.offers
    entries = _entries(task)
    assert len(entries) == len(chosen)
    for e, o in zip(entries, chosen, strict=True):
        assert e["use_spot"] is o.spot
        assert e["accelerators"].endswith(f":{o.gpu_count}")
        assert e["infra"].split("/")[0] in all_clouds()
    if plan.budget_usd is not None:
        assert f"--budget {plan.budget_usd:g}" in task["run"]
        assert task["resources"]["max_hourly_cost"] >= max(o.price_per_hour for o in chosen)
    else:
        assert "--budget" not in task["run"] and "max_hourly_cost" not in task["resources"]
    assert ("torch.distributed.run" in task["run"]) is (max(o.gpu_count for o in chosen) > 1)
    assert ("--spot-notice" in task["run"]) is any(o.spot for o in chosen)


def test_alternatives_within_margin_become_any_of():
    plan = PLANS["alternatives"]
    sel = select_offers(plan, 0.10)
    assert [o.provider for o in sel.offers] == ["aws", "gcp", "azure"]  # 5.0, 5.2, 5.4 within 10% of 5.0
    assert any("lambda" in s for s in sel.skipped) and any("runpod" in s for s in sel.skipped)
    assert [o.provider for o in select_offers(plan, 0.0).offers] == ["aws"]
    assert len(select_offers(plan, 1.0).offers) == 5


def test_unsupported_provider_skipped_or_rejected():
    plan = make_plan(offer("aws", "L4", 0.8, total=5.0), [offer("tensordock", "L4", 0.5, total=4.9)])
    assert [o.provider for o in select_offers(plan, 0.1).offers] == ["aws"]
    with pytest.raises(BadInput, match="not a cloud SkyPilot"):
        select_offers(make_plan(offer("tensordock", "L4", 0.5)), 0.1)


def test_over_budget_plan_is_infeasible():
    with pytest.raises(Infeasible, match="over its budget"):
        select_offers(make_plan(offer("aws", "L4", 0.8), budget=2.0, total=5.0), 0.1)


def test_cluster_mode_autodowns_and_terminates(tmp_path, recorder):
    opts = LaunchOptions(mode="cluster", cluster="c1", idle_minutes=7)
    prep = launcher.prepare(PLANS["on-demand"], opts, recorder, tmp_path / "t.yaml")
    res = prep.task["resources"]
    assert res["autostop"] == {"idle_minutes": 7, "down": True} and "job_recovery" not in res
    assert yaml.safe_load((prep.staging_dir / "config.yaml").read_text())["on_finish"] == "terminate"
    job = launcher.prepare(PLANS["on-demand"], LaunchOptions(), recorder, tmp_path / "j.yaml")
    assert yaml.safe_load((job.staging_dir / "config.yaml").read_text())["on_finish"] == "nothing"


def test_dataset_uploaded_and_plan_rewritten(tmp_path, recorder):
    data = tmp_path / "rows.jsonl"
    data.write_text('{"text": "a"}\n')
    plan = make_plan(offer("runpod", "RTX4090", 0.69), dataset=str(data))
    prep = launcher.prepare(plan, LaunchOptions(), recorder, tmp_path / "t.yaml")
    assert prep.task["file_mounts"]["/cheaptune/data/rows.jsonl"] == str(data)
    assert yaml.safe_load((prep.staging_dir / "plan.yaml").read_text())["dataset"] == "/cheaptune/data/rows.jsonl"


def _config_beside(tmp_path, name: str, text: str):
    """A plan with a dataset, and a config in its own folder beside a file `name` it names (as train reads it)."""
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / name).write_text(text)
    data = tmp_path / "rows.jsonl"
    data.write_text('{"text": "a"}\n')
    return make_plan(offer("runpod", "RTX4090", 0.69), dataset=str(data)), folder / "cfg.yaml", folder / name


def test_a_configs_eval_data_goes_up_with_the_datasets(tmp_path):
    """eval_after scores the adapter on `eval_data` once training ends (train.run): a local path that stayed
    local would be missing on the machine after the training was paid for, so it is uploaded and rewritten."""
    plan, config, held = _config_beside(tmp_path, "held.jsonl", '{"text": "b"}\n')
    config.write_text("eval_after: true\neval_data: held.jsonl\n")
    s = stage(plan, LaunchOptions(config=str(config)))
    remote = yaml.safe_load(s.config_text)["eval_data"]
    assert remote.startswith("/cheaptune/data/") and s.uploads[remote] == str(held)  # the task's file_mounts
    config.write_text("eval_data: nosuch.jsonl\n")
    with pytest.raises(BadInput, match="eval_data nosuch.jsonl not found"):
        stage(plan, LaunchOptions(config=str(config)))


def test_a_configs_reward_files_go_up_and_builtin_rewards_stay(tmp_path):
    """GRPO's reward files (train.rewards.user_reward) are loaded on the machine: uploaded and rewritten like the
    datasets; a built-in reward's name is left as it is."""
    plan, config, score = _config_beside(tmp_path, "score.py", "def reward(prompts, completions, **columns):\n"
                                                               "    return [0.0]\n")
    config.write_text("reward: [score.py, {name: score.py, weight: 0.5}, numeric]\n")
    s = stage(plan, LaunchOptions(config=str(config)))
    first, second, builtin = yaml.safe_load(s.config_text)["reward"]
    assert first.startswith("/cheaptune/") and s.uploads[first] == str(score)
    assert second == {"name": first, "weight": 0.5} and builtin == "numeric"
    config.write_text("reward: nosuch.py\n")
    with pytest.raises(BadInput, match="reward file nosuch.py not found"):
        stage(plan, LaunchOptions(config=str(config)))


def test_qlora_installs_bitsandbytes_extra(tmp_path, recorder):
    prep = launcher.prepare(make_plan(offer("aws", "A10G", 1.0), method="qlora"), LaunchOptions(), recorder,
                            tmp_path / "t.yaml")
    setup = prep.task["setup"]
    assert ".whl[qlora]'" in setup and "torch.cuda.is_available" in setup  # this checkout's wheel, with bitsandbytes
    wheel = next(dst for dst in prep.task["file_mounts"] if dst.startswith("/cheaptune/pkg/"))
    assert wheel.endswith(".whl") and f"-c /cheaptune/job/constraints.txt '{wheel}[qlora]'" in setup


@pytest.mark.parametrize(("fields", "want"), [
    ({}, ""),
    ({"liger_kernel": True, "torch_compile": True}, "[liger,compile]"),
    ({"liger_kernel": True, "optimizer": "adamw-8bit"}, "[qlora,liger]"),
    ({"torch_compile": True, "attn": "flash"}, "[compile,flash]"),
])
def test_setup_installs_exactly_the_extras_the_settings_use(fields, want, tmp_path, recorder):
    plan = make_plan(offer("aws", "A10G", 1.0))
    plan = plan.model_copy(update={"train": plan.train.model_copy(update=fields)})
    prep = launcher.prepare(plan, LaunchOptions(), recorder, tmp_path / "t.yaml")
    wheel = next(dst for dst in prep.task["file_mounts"] if dst.startswith("/cheaptune/pkg/"))
    assert f"constraints.txt {shlex.quote(wheel + want)}\n" in prep.task["setup"]  # pyproject's extras, nothing more
    assert yaml.safe_load((tmp_path / "t.yaml").read_text())["setup"] == prep.task["setup"]


def test_disk_grows_with_full_finetune_checkpoints():
    from cheaptune.launch.stage import disk_size_gb

    lora, full = make_plan(offer("aws", "L4", 1.0)), make_plan(offer("aws", "L4", 1.0), method="full")
    s = stage(lora, LaunchOptions())
    s.model_bytes = 14 * 10**9  # a 7B model in bf16
    assert disk_size_gb(full, s) > disk_size_gb(lora, s) >= 60


def test_skypilot_names():
    from sky.skylet import constants

    assert all_clouds() <= set(constants.ALL_CLOUDS)
    assert sky_gpu("RTXA6000", "lambda") == "A6000" and sky_gpu("RTX A6000", "vast") == "RTXA6000"
    assert sky_gpu("H100", "cudo") == "H100-SXM" and sky_gpu("h100 nvl", "vast") == "H100"


def test_skypilot_rejects_broken_yaml(tmp_path):
    from cheaptune.launch.backend import SkyBackend

    bad = tmp_path / "bad.yaml"
    bad.write_text("resources:\n  use_spot: maybe\nrun: echo\n")
    with pytest.raises(BadInput, match="SkyPilot rejects"):
        SkyBackend().validate(bad)


def test_two_node_plan_runs_torchrun_on_every_node_and_meters_both(tmp_path, recorder):
    import json
    import shlex

    plan = make_plan(offer("aws", "A100-80GB", 32.8, count=8, nodes=2, total=60.0),
                     [offer("gcp", "A100-80GB", 30.0, count=8, total=61.0)], method="full", total=60.0, budget=100.0)
    prep = launcher.prepare(plan, LaunchOptions(checkpoint_dir="/mnt/ckpt"), recorder, tmp_path / "task.yaml")
    task = yaml.safe_load(prep.yaml_path.read_text())  # validated by sky.Task.from_yaml in prepare
    assert recorder.calls[0][0] == "validate" and task["num_nodes"] == 2
    assert [o.provider for o in prep.selection.offers] == ["aws"]  # a 1-node alternative cannot share the task
    assert any("1 nodes" in s for s in prep.selection.skipped)
    assert json.loads(task["envs"]["CHEAPTUNE_OFFER_PRICES"]) == {"aws": pytest.approx(65.6)}
    line = task["run"].strip().splitlines()[-1]
    words = shlex.split(line.replace("$(", "").replace(")", ""))
    for flag in ("--nnodes=$SKYPILOT_NUM_NODES", "--node_rank=$SKYPILOT_NODE_RANK", "--master_port=29500",
                 "--nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE"):
        assert flag in words
    assert '--master_addr=$(echo "$SKYPILOT_NODE_IPS" | head -n1)' in line
    assert words[words.index("-m", 3) + 1:][:2] == ["cheaptune", "train"]
    assert "--checkpoint-dir /mnt/ckpt" in line and task["file_mounts"]["/mnt/ckpt"]["persistent"] is True
    from sky import Task

    assert Task.from_yaml(str(prep.yaml_path)).num_nodes == 2


@pytest.mark.parametrize("change,needle", [
    ({"dataset": "nowhere/rows.jsonl"}, "not found"),
    ({"dataset": None}, "no dataset.*--data FILE"),
    ({"model": "nosuch/model-xyz"}, "nosuch/model-xyz"),
    ({"model": "llama-9000-unknown"}, "unknown model"),
    ({"model": "/no/such/model"}, "no such file"),
])
def test_missing_inputs_fail_before_anything_is_written(change, needle, tmp_path, recorder):
    plan = make_plan(offer("runpod", "RTX4090", 0.69)).model_copy(update=change)
    with pytest.raises(BadInput, match=needle):
        launcher.prepare(plan, LaunchOptions(), recorder, tmp_path / "t.yaml")
    assert not (tmp_path / "t.yaml").exists() and not (tmp_path / "t.files").exists() and not recorder.calls


def test_alias_becomes_hub_id_and_config_paths_are_rewritten(tmp_path, recorder, monkeypatch):
    from .conftest import DEMO_DATA

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text('{"text": "a"}\n')
    (tmp_path / "train.yaml").write_text(f"datasets:\n  - path: rows.jsonl\n  - path: {DEMO_DATA}\nmax_steps: 5\n")
    plan = make_plan(offer("runpod", "RTX4090", 0.69)).model_copy(update={"model": "smollm2-135m"})
    prep = launcher.prepare(plan, LaunchOptions(config=tmp_path / "train.yaml"), recorder, tmp_path / "t.yaml")
    remote_plan = yaml.safe_load((prep.staging_dir / "plan.yaml").read_text())
    remote_config = yaml.safe_load((prep.staging_dir / "config.yaml").read_text())
    assert remote_plan["model"] == "HuggingFaceTB/SmolLM2-135M"
    assert [d["path"] for d in remote_config["datasets"]] == ["/cheaptune/data/rows.jsonl", "/cheaptune/data/train.jsonl"]
    assert prep.task["file_mounts"]["/cheaptune/data/rows.jsonl"] == str(tmp_path / "rows.jsonl")


@pytest.mark.parametrize("config,needle", [
    ("lerning_rate: 0.1\n", "unknown key 'lerning_rate'"),
    ("micro_batch_size: 0\n", "micro_batch_size"),
])
def test_config_the_trainer_would_refuse_fails_the_dry_run(config, needle, tmp_path, recorder):
    (tmp_path / "c.yaml").write_text(config)
    with pytest.raises(BadInput, match=needle):
        launcher.prepare(make_plan(offer("runpod", "RTX4090", 0.69)), LaunchOptions(config=tmp_path / "c.yaml"),
                         recorder, tmp_path / "t.yaml")
    assert not (tmp_path / "t.yaml").exists()


def test_estimate_that_does_not_fit_an_overridden_gpu_is_refused(tmp_path, recorder):
    plan = make_plan(offer("aws", "T4", 0.5))  # the plan's estimate: 8 GiB ... on a 16 GB T4 it fits
    big = plan.model_copy(update={"prediction": plan.prediction.model_copy(update={"peak_vram_bytes": 40 * 2**30})})
    with pytest.raises(BadInput, match="does not fit T4"):
        launcher.prepare(big, LaunchOptions(), recorder, tmp_path / "t.yaml")


def test_setup_installs_the_lock_into_a_venv_and_runs_from_it(tmp_path, recorder):
    from pathlib import Path

    prep = launcher.prepare(make_plan(offer("aws", "A10G", 1.0)), LaunchOptions(), recorder, tmp_path / "t.yaml")
    setup, run = prep.task["setup"], prep.task["run"]
    assert "python3 -m venv /cheaptune/venv" in setup and "python3-venv" in setup  # PEP 668 images
    assert "/cheaptune/venv/bin/python -m pip install -c /cheaptune/job/constraints.txt" in setup
    assert "python3 -m pip install" not in setup  # never the system pip
    assert run.strip().splitlines()[-1].startswith("exec /cheaptune/venv/bin/cheaptune train")
    lock = (Path(__file__).resolve().parents[2] / "requirements" / "lock.txt").read_text()
    pins = (prep.staging_dir / "constraints.txt").read_text()
    assert pins == lock and "transformers==" in pins and "torch==" in pins  # the tested lock, not open ranges


def test_store_is_the_offers_cloud_or_said(tmp_path, recorder):
    aws = launcher.prepare(make_plan(offer("aws", "A10G", 1.0)), LaunchOptions(), recorder, tmp_path / "a.yaml")
    assert aws.task["file_mounts"]["/cheaptune/checkpoints"]["store"] == "s3" and not aws.selection.notes
    vast = launcher.prepare(PLANS["community-vast"], LaunchOptions(), recorder, tmp_path / "v.yaml")
    assert "store" not in vast.task["file_mounts"]["/cheaptune/checkpoints"]
    assert any("--store" in n for n in vast.selection.notes)
    chosen = launcher.prepare(PLANS["community-vast"], LaunchOptions(store="r2"), recorder, tmp_path / "r.yaml")
    assert chosen.task["file_mounts"]["/cheaptune/checkpoints"]["store"] == "r2"
    with pytest.raises(BadInput, match="--store"):
        LaunchOptions(store="dropbox").check()


# Region cells as SkyPilot's catalog spells them (skypilot-catalog catalogs/v8/vast/vms.csv, aws/vms.csv).
SKY_ROWS = {"vast": ["Texas, US, NA", "Quebec, CA, NA"], "aws": ["us-east-1", "ap-south-1"]}


@pytest.fixture
def sky_catalog(tmp_path):
    root = tmp_path / "sky-catalog"
    for cloud, regions in SKY_ROWS.items():
        (root / cloud).mkdir(parents=True)
        rows = "".join(f'x,GPU,1,1.0,"{r}"\n' for r in regions)
        (root / cloud / "vms.csv").write_text("InstanceType,AcceleratorName,AcceleratorCount,Price,Region\n" + rows)
    return root


def test_marketplace_location_in_skypilot_spelling_with_anywhere_as_alternative(tmp_path, recorder, sky_catalog):
    plan = make_plan(offer("vast", "RTX3090", 0.33, count=2, region="Texas US"))
    prep = launcher.prepare(plan, LaunchOptions(sky_catalog=sky_catalog), recorder, tmp_path / "t.yaml")
    entries = _entries(yaml.safe_load(prep.yaml_path.read_text()))  # validated by SkyPilot in prepare
    assert [e["infra"] for e in entries] == ["vast/Texas, US, NA", "vast"]
    assert {e["accelerators"] for e in entries} == {"RTX3090:2"}
    assert any("'Texas, US, NA'" in n for n in prep.selection.notes)


def test_marketplace_location_gets_an_anywhere_alternative_with_default_options(tmp_path, recorder):
    """The same through LaunchOptions() as `launch` builds them (SkyPilot's cached catalog if there is one, else
    the price catalog and the Region pattern): the plan's one Vast location, in our spelling, is never the only
    place the task may run; any Vast location is among its alternatives."""
    plan = make_plan(offer("vast", "RTX3090", 0.33, count=2, region="Texas US"))
    prep = launcher.prepare(plan, LaunchOptions(), recorder, tmp_path / "t.yaml")
    infra = [e.get("infra") for e in _entries(yaml.safe_load(prep.yaml_path.read_text()))]
    assert "vast" in infra and "vast/Texas US" not in infra, infra


@pytest.mark.parametrize("provider,with_catalog", [("aws", False), ("aws", True), ("runpod", False)])
def test_unknown_region_is_refused_before_anything_is_written(provider, with_catalog, tmp_path, recorder, sky_catalog):
    plan = make_plan(offer(provider, "RTX4090" if provider == "runpod" else "A10G", 1.0, region="mars-1"))
    opts = LaunchOptions(sky_catalog=sky_catalog if with_catalog else tmp_path / "no-catalog")
    with pytest.raises(BadInput, match="region 'mars-1'") as err:
        launcher.prepare(plan, opts, recorder, tmp_path / "t.yaml")
    assert "--region" in str(err.value) and not (tmp_path / "t.files").exists() and not recorder.calls


def test_gated_model_without_hf_token_is_refused_before_launch(tmp_path, recorder):
    plan = make_plan(offer("aws", "A10G", 1.0)).model_copy(update={"model": "meta-llama/Llama-2-7b-hf"})
    with pytest.raises(BadInput, match="gated .* HF_TOKEN"):
        launcher.prepare(plan, LaunchOptions(), recorder, tmp_path / "t.yaml", env={})
    assert not recorder.calls
    prep = launcher.prepare(plan, LaunchOptions(), recorder, tmp_path / "t.yaml", env={"HF_TOKEN": "hf_x"})
    assert prep.checked.secrets_set == ["HF_TOKEN"]


def test_a_cap_from_a_derived_price_is_said(tmp_path, recorder):
    spot = offer("aws", "A10G", 0.5, spot=True).model_copy(update={"price_basis": "derived"})
    prep = launcher.prepare(make_plan(spot), LaunchOptions(), recorder, tmp_path / "t.yaml")
    assert prep.task["resources"]["max_hourly_cost"] == 0.55
    assert any("1.1x a derived price" in n and "--max-hourly-cost" in n for n in prep.selection.notes)
    quoted = launcher.prepare(make_plan(offer("aws", "A10G", 0.5)), LaunchOptions(), recorder, tmp_path / "q.yaml")
    assert not any("derived" in n for n in quoted.selection.notes)


def test_region_patterns_match_every_region_of_skypilots_catalogs(shared_data):
    """Each cloud's Region pattern (launch/data/skypilot_names.yaml) against the Region column of the real
    catalog files, so a region SkyPilot lists is never refused when its catalog is not on the machine."""
    import re

    from cheaptune.launch.names import _table
    from cheaptune.launch.regions import catalog_regions

    patterns = _table()["regions"]  # the whole table: every cloud that has a pattern
    seen = set()
    for version in sorted((shared_data / "skypilot-catalog" / "catalogs").iterdir()):
        for cloud, pattern in patterns.items():
            for region in catalog_regions(cloud, version) or ():
                seen.add(cloud)
                if region.startswith(", "):  # vast hosts with no city: ", US, NA"
                    continue
                assert re.match(pattern, region), (cloud, region, pattern)
    assert seen == set(patterns)  # every pattern was checked against some catalog


def test_bundled_vast_locations_respelled_from_skypilots_catalog(shared_data):
    from cheaptune.catalog.sources import load_offers
    from cheaptune.launch.regions import sky_region

    root = shared_data / "skypilot-catalog" / "catalogs" / "v8"
    hits = {o.region: sky_region("vast", "vast", o.region, root) for o in load_offers() if o.provider == "vast"}
    assert hits["Texas US"].sky == "Texas, US, NA"
    assert all(r.sky is None or r.sky.count(",") == 2 for r in hits.values())  # "City, CC, CONTINENT" or anywhere


@pytest.mark.parametrize("board", ["CPU", "cpu", "Cpu "])
def test_a_plan_for_the_cpu_it_was_made_on_is_not_launched(tmp_path, recorder, board):
    """demo.cpuplan's plan ($0/h on this machine's CPU) names its own command, not 'provider local is not a cloud',
    however a hand edit spells the board: launch reads it as train's probe does (one helper, is_cpu_board)."""
    from cheaptune.train.probe import on_planned_board

    assert on_planned_board(None, board)  # train runs it here as this device's plan ...
    plan = make_plan(offer("local", board, 0.0))
    with pytest.raises(BadInput, match=r"for the CPU it was made on \(local, \$0/h\).*cheaptune train --plan"):
        launcher.prepare(plan, LaunchOptions(), recorder, tmp_path / "t.yaml")
    assert not (tmp_path / "t.yaml").exists() and not recorder.calls


@pytest.mark.parametrize(("config_budget", "runs_at"), [(8.0, "8"), (50.0, "20"), (None, "20")])
def test_the_machines_cap_is_the_lower_of_the_plans_and_the_configs(config_budget, runs_at, tmp_path, recorder):
    """The task's `--budget` wins over the config's own budget_usd in train, so it must be the lower of the two: a
    config asking for a $1 cap under a $20 plan ran at $20 before (a cap under the plan's $5 prediction is now refused
    before launch: test_budget_rule)."""
    plan, config, _ = _config_beside(tmp_path, "x.jsonl", '{"text": "a"}\n')  # the plan's budget: $20
    config.write_text("" if config_budget is None else f"budget_usd: {config_budget}\n")
    prep = launcher.prepare(plan, LaunchOptions(config=str(config), checkpoint_dir="/mnt/ckpt"), recorder,
                            tmp_path / "task.yaml")
    run = yaml.safe_load(prep.yaml_path.read_text())["run"]
    assert f"--budget {runs_at} " in run
