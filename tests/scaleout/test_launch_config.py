"""accelerate config files, relaunch argument lists, sharded-checkpoint completeness."""

from __future__ import annotations

from dataclasses import replace

import pytest
from accelerate.commands.config.config_args import ClusterConfig
from accelerate.commands.launch import launch_command_parser

from cheaptune.errors import BadInput
from cheaptune.train import distributed as d

NODES = d.Nodes(num_nodes=2, node_rank=1, gpus_per_node=8, master_addr="10.0.0.4")  # node 1 of a 2 x 8-GPU job


def _launch_options() -> set[str]:
    return {o.lstrip("-") for a in launch_command_parser()._actions for o in a.option_strings}


@pytest.mark.parametrize("sharding,offload,kind", [("ddp", False, "MULTI_GPU"), ("fsdp", False, "FSDP"),
                                                   ("fsdp", True, "FSDP"), ("zero2", True, "DEEPSPEED"),
                                                   ("zero3", False, "DEEPSPEED")])
def test_config_loads_with_accelerates_own_loader(tmp_path, sharding, offload, kind):
    path = d.write_accelerate_config(tmp_path, d.accelerate_config(sharding, NODES, offload=offload))
    assert path.name == d.CONFIG_NAME and not list(tmp_path.glob(".*.tmp"))
    loaded = ClusterConfig.from_yaml_file(path)  # raises on unknown top-level keys
    assert loaded.distributed_type.value == kind
    assert (loaded.num_processes, loaded.num_machines, loaded.machine_rank) == (16, 2, 1)
    assert loaded.main_process_ip == "10.0.0.4"
    options = _launch_options()
    for key in {**loaded.fsdp_config, **loaded.deepspeed_config}:  # each becomes an `accelerate launch` option
        assert key in options, key
    if sharding == "fsdp":
        assert loaded.fsdp_config["fsdp_offload_params"] is offload
        assert loaded.fsdp_config["fsdp_state_dict_type"] == "SHARDED_STATE_DICT"
    if sharding.startswith("zero"):
        assert loaded.deepspeed_config["zero_stage"] == int(sharding[-1])
        assert loaded.deepspeed_config["offload_optimizer_device"] == ("cpu" if offload else "none")


def test_bad_sharding_is_one_line():
    for call in (lambda: d.accelerate_config("tp", d.Nodes()), lambda: d.accelerate_config("ddp", d.Nodes(), True)):
        with pytest.raises(BadInput) as err:
            call()
        assert "\n" not in str(err.value)


def test_torchrun_args_for_a_two_node_layout():
    argv = d.torchrun_argv(replace(NODES, port=29555), ["--model", "m", "-o", "out dir"], python="/py")
    assert argv[:3] == ["/py", "-m", "torch.distributed.run"]
    for flag in ("--nnodes=2", "--nproc_per_node=8", "--node_rank=1", "--master_addr=10.0.0.4",
                 "--master_port=29555"):
        assert flag in argv
    assert argv[-7:] == ["-m", "cheaptune", "train", "--model", "m", "-o", "out dir"]  # no shell quoting needed


def test_relaunch_drops_gpus_and_children_do_not_relaunch(tmp_path):
    args = d.strip_option(["--model", "m", "--gpus", "4", "--gpus=2", "--max-steps", "3"], "--gpus")
    assert args == ["--model", "m", "--max-steps", "3"]
    argv = d.accelerate_argv(tmp_path / "a.yaml", args, python="/py")
    assert argv[:5] == ["/py", "-m", "accelerate.commands.launch", "--config_file", str(tmp_path / "a.yaml")]
    assert argv[5:8] == ["-m", "cheaptune", "train"]
    assert d.is_child({"LOCAL_RANK": "0"}) and not d.is_child({})


def test_sharded_checkpoint_needs_every_ranks_files(tmp_path):
    ck = tmp_path / "checkpoint-4"
    (ck / "pytorch_model_fsdp_0").mkdir(parents=True)
    (ck / "rng_state_0.pth").write_bytes(b"x")
    assert d.sharded_checkpoint_problem(ck, 1) is None
    assert "rng_state_1" in d.sharded_checkpoint_problem(ck, 2)
    (ck / "rng_state_1.pth").write_bytes(b"x")
    assert ".metadata" in d.sharded_checkpoint_problem(ck, 2)
    (ck / "pytorch_model_fsdp_0" / ".metadata").write_bytes(b"x")
    assert d.sharded_checkpoint_problem(ck, 2) is None


def test_any_rank_without_a_process_group_is_the_local_flag():
    assert d.any_rank(True) is True and d.any_rank(False) is False


def test_launch_argv_cpu_uses_torchrun_and_gpu_checks_the_count(tmp_path, monkeypatch):
    args = ["--model", "m", "--gpus", "2", "--sharding", "ddp", "--device", "cpu"]
    argv = d.launch_argv(args, 2, "ddp", tmp_path, device="cpu")
    assert argv[1:3] == ["-m", "torch.distributed.run"] and "--nproc_per_node=2" in argv
    assert argv[-6:] == ["cheaptune", "train", "--model", "m", "--device", "cpu"]
    port = int(next(a for a in argv if a.startswith("--master_port=")).split("=")[1])
    assert 0 < port < 65536
    with pytest.raises(BadInput, match="--device cpu use --sharding ddp"):
        d.launch_argv(args, 2, "fsdp", tmp_path, device="cpu")
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(BadInput, match="has 1 CUDA GPU") as err:
        d.launch_argv(args, 4, "zero3", tmp_path)
    assert "\n" not in str(err.value) and not (tmp_path / d.CONFIG_NAME).exists()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    argv = d.launch_argv(args, 4, "zero3", tmp_path)
    assert argv[2] == "accelerate.commands.launch" and "--gpus" not in argv and "--sharding" not in argv
    assert "zero_stage: 3" in (tmp_path / d.CONFIG_NAME).read_text()


def test_a_childs_exit_code_survives_the_launcher(tmp_path):
    assert d.children_exit(tmp_path, 1) == 1  # nothing recorded: the launcher's code
    d.record_exit(tmp_path, 143)
    assert d.children_exit(tmp_path, 1) == 143
    assert not (tmp_path / d.EXIT_FILE).exists()


def test_train_gpus_without_gpus_is_one_line(run_cli, tmp_path, tiny_model_dir):
    """A real model folder and dataset, so the one line is about the GPUs this machine lacks (both are checked
    first)."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "hello"}\n')
    code, _, err = run_cli("train", "--gpu-count", "2", "--model", str(tiny_model_dir), "--data", str(data),
                           "-o", str(tmp_path / "o"))
    assert code == 2 and "--gpu-count 2" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli("train", "--gpu-count", "2", "--on-finish", "explode", "--model", "m", "--data", str(data))
    assert code == 2 and "--on-finish" in err and len(err.strip().splitlines()) == 1


def test_planned_fsdp_offload_reaches_accelerate(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    d.launch_argv(["--model", "m"], 8, "fsdp+offload", tmp_path)
    text = (tmp_path / d.CONFIG_NAME).read_text()
    assert "FSDP" in text and "offload_params: true" in text.lower().replace("fsdp_", "")
    with pytest.raises(BadInput, match="optionally \\+offload"):
        d.launch_argv(["--model", "m"], 8, "fsdp+magic", tmp_path)


def test_train_takes_gpus_and_sharding_from_a_single_node_plan(tmp_path):
    from cheaptune.cli.train import _gpus_and_sharding
    from cheaptune.plan import planfile

    plan = planfile.PlanFile(
        created="2026-11-30T00:00:00Z", cheaptune_version="0", model="llama-2-70b",
        train=planfile.TrainSettings(method="full", precision="bf16-true", gpus=8, sharding="fsdp"),
        offer=planfile.Offer(provider="lambda", gpu="H100", gpu_count=8, price_per_hour=24.0),
        prediction=planfile.Prediction(peak_vram_bytes=1, gpu_memory_bytes=2, tokens=1, tokens_per_s=1.0, hours=1.0,
                                       cost=planfile.CostBreakdown(compute=1.0, total=1.0)))
    path = tmp_path / "plan.yaml"
    planfile.save(plan, path)
    assert _gpus_and_sharding(path, None, None) == (8, "fsdp")
    assert _gpus_and_sharding(path, 2, "ddp") == (2, "ddp")
    assert _gpus_and_sharding(None, None, None) == (1, "ddp")
    planfile.save(plan.model_copy(update={"offer": plan.offer.model_copy(update={"num_nodes": 2})}), path)
    assert _gpus_and_sharding(path, None, None) == (1, "fsdp")
