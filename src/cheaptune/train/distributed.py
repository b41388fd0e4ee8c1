"""`cheaptune train --gpu-count N`: relaunch the same command under accelerate (DDP, FSDP or DeepSpeed).

We write no distributed runtime: accelerate launches the processes and wraps the model as its config
says, HF Trainer saves and resumes sharded state, SkyPilot provides the nodes. What we add: the
accelerate config file for a planned sharding, the argument lists that relaunch `python -m
cheaptune train ...` under `accelerate launch` or torchrun (never a shell string), one stop decision
shared by every rank, and a check that a sharded checkpoint holds every rank's files before resume
trusts it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cheaptune.errors import BadInput
from cheaptune.util import atomic

CONFIG_NAME = "accelerate_config.yaml"
DEFAULT_PORT = 29500
# Set by torchrun / accelerate in every child process: a child never relaunches itself.
CHILD_ENV = ("LOCAL_RANK", "ACCELERATE_LAUNCHED")
DISTRIBUTED_TYPE = {"ddp": "MULTI_GPU", "fsdp": "FSDP", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED"}


@dataclass(frozen=True)
class Nodes:
    """Where this process sits in a multi-node job."""

    num_nodes: int = 1
    node_rank: int = 0
    gpus_per_node: int = 1
    master_addr: str = "127.0.0.1"
    port: int = DEFAULT_PORT


def is_child(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return any(k in env for k in CHILD_ENV)


def accelerate_config(sharding: str, nodes: Nodes, offload: bool = False, mixed_precision: str = "no",
                      grad_ckpt: bool = False, cpu: bool = False) -> dict[str, Any]:
    """accelerate's config-file dict (keys as `accelerate config` writes them) for one planned layout.

    mixed_precision stays "no" by default: the trainer's TrainingArguments set bf16/fp16 themselves.
    """
    if sharding not in DISTRIBUTED_TYPE:
        raise BadInput(f"sharding {sharding!r} is not one of {', '.join(DISTRIBUTED_TYPE)}")
    if offload and sharding == "ddp":
        raise BadInput("offload needs sharding fsdp, zero2 or zero3")
    cfg: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "MULTI_CPU" if cpu else DISTRIBUTED_TYPE[sharding],
        "num_processes": nodes.num_nodes * nodes.gpus_per_node,
        "num_machines": nodes.num_nodes,
        "machine_rank": nodes.node_rank,
        "main_process_ip": nodes.master_addr,
        "main_process_port": nodes.port,
        "rdzv_backend": "static",
        "same_network": True,
        "mixed_precision": mixed_precision,
        "use_cpu": cpu,
        "gpu_ids": "all",
        "main_training_function": "main",
        "downcast_bf16": "no",
    }
    if sharding == "fsdp" and not cpu:
        cfg["fsdp_config"] = {
            "fsdp_version": 2,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_reshard_after_forward": True,
            "fsdp_offload_params": offload,
            # each rank saves its own shard (fast, no rank-0 gather OOM); resume reads them back
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_activation_checkpointing": grad_ckpt,
        }
    elif sharding.startswith("zero") and not cpu:
        cfg["deepspeed_config"] = {
            "zero_stage": int(sharding[-1]),
            "offload_optimizer_device": "cpu" if offload else "none",
            "offload_param_device": "cpu" if offload and sharding == "zero3" else "none",
            "zero3_init_flag": sharding == "zero3",
            "zero3_save_16bit_model": sharding == "zero3",
        }
    return cfg


def write_accelerate_config(output_dir: str | Path, config: Mapping[str, Any]) -> Path:
    path = Path(output_dir) / CONFIG_NAME
    atomic.write_text(path, yaml.safe_dump(dict(config), sort_keys=False))
    return path


def strip_option(argv: Sequence[str], option: str) -> list[str]:
    """argv without `option VALUE` / `option=VALUE` (the child must not relaunch itself)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out


def accelerate_argv(config_path: str | Path, train_args: Sequence[str], python: str = sys.executable) -> list[str]:
    """`accelerate launch --config_file CFG -m cheaptune train ARGS` as an argument list."""
    return [python, "-m", "accelerate.commands.launch", "--config_file", str(config_path),
            "-m", "cheaptune", "train", *train_args]


def torchrun_argv(nodes: Nodes, train_args: Sequence[str], python: str = sys.executable) -> list[str]:
    """torchrun with a static rendezvous on node 0 (DDP; FSDP/DeepSpeed go through accelerate_argv)."""
    return [python, "-m", "torch.distributed.run", f"--nnodes={nodes.num_nodes}",
            f"--nproc_per_node={nodes.gpus_per_node}", f"--node_rank={nodes.node_rank}",
            f"--master_addr={nodes.master_addr}", f"--master_port={nodes.port}",
            "-m", "cheaptune", "train", *train_args]


def free_port() -> int:
    """A free local TCP port for a single-node rendezvous (two runs on one machine must not collide)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_argv(train_args: Sequence[str], gpus: int, sharding: str, output_dir: str | Path,
                device: str = "auto") -> list[str]:
    """The command that runs `cheaptune train ARGS` as `gpus` local processes.

    On GPUs: `accelerate launch` with a config written into output_dir (DDP, FSDP or DeepSpeed).
    With --device cpu (tests, gloo): torchrun DDP, because accelerate's CPU launcher starts one
    process unless MPI is set up. BadInput when this machine has fewer GPUs than asked for.
    """
    asked = sharding
    sharding, _, offload = sharding.partition("+")  # the planner writes "fsdp+offload"
    if sharding not in DISTRIBUTED_TYPE or offload not in ("", "offload"):
        raise BadInput(f"--sharding {asked!r} is not one of {', '.join(DISTRIBUTED_TYPE)} (optionally +offload)")
    args = strip_option(strip_option(strip_option(train_args, "--gpu-count"), "--gpus"), "--sharding")
    nodes = Nodes(gpus_per_node=gpus, port=free_port())
    if device == "cpu":
        if sharding != "ddp":
            raise BadInput(f"--sharding {sharding} needs GPUs; with --device cpu use --sharding ddp (gloo)")
        return torchrun_argv(nodes, args)
    import torch

    have = torch.cuda.device_count()
    if have < gpus:
        raise BadInput(f"--gpu-count {gpus}: this machine has {have} CUDA GPU(s); lower --gpu-count or use a bigger "
                       "instance")
    config = accelerate_config(sharding, nodes, offload=bool(offload))
    return accelerate_argv(write_accelerate_config(output_dir, config), args)


EXIT_FILE = ".cheaptune_exit_code"


def record_exit(output_dir: str | Path, code: int) -> None:
    """A child's exit code for the launching process: torchrun/accelerate exit 1 whatever a worker
    returned, and SkyPilot recovery needs 143 (preempted) and 10 (budget) to survive the relaunch."""
    atomic.write_text(Path(output_dir) / EXIT_FILE, str(code))


def children_exit(output_dir: str | Path, returncode: int) -> int:
    """The exit code to report after the children ended: theirs when one recorded it, else the launcher's."""
    path = Path(output_dir) / EXIT_FILE
    try:
        recorded = int(path.read_text().strip())
    except (OSError, ValueError):
        return returncode
    path.unlink(missing_ok=True)
    return recorded if returncode != 0 else returncode


def sharded_checkpoint_problem(ckpt: Path, world_size: int) -> str | None:
    """None when a checkpoint holds every rank's state; else what is missing.

    HF Trainer writes rng_state_{rank}.pth per rank when world_size > 1, and under FSDP with
    SHARDED_STATE_DICT a torch.distributed.checkpoint folder (pytorch_model_fsdp_0/ with .metadata,
    optimizer_0/); a save killed between ranks leaves some of them out.
    """
    if world_size <= 1:
        return None
    for rank in range(world_size):
        if not (ckpt / f"rng_state_{rank}.pth").is_file():
            return f"rng_state_{rank}.pth is missing"
    for shard_dir in ckpt.glob("pytorch_model_fsdp_*"):
        if shard_dir.is_dir() and not (shard_dir / ".metadata").is_file():
            return f"{shard_dir.name}/.metadata is missing"
    return None


def any_rank(flag: bool) -> bool:
    """True on every rank when it is True on any rank (one all-reduce; plain value when not distributed)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    t = torch.tensor([1 if flag else 0], dtype=torch.int32,
                     device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def sync_stop_callback():
    """A TrainerCallback that makes a stop/save decided on one rank (budget on rank 0, a spot notice on
    one node) the decision of all ranks at the same step; otherwise the others hang in the next
    collective. Add it after the guard and preemption callbacks."""
    from transformers import TrainerCallback

    class SyncStop(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            stop = any_rank(bool(control.should_training_stop))
            control.should_save = any_rank(bool(control.should_save)) or stop
            control.should_training_stop = stop
            return control

    return SyncStop()
