"""Plans built directly from the plan-file models, and a recording double for the SkyPilot seam."""

from __future__ import annotations

from pathlib import Path

import pytest

from cheaptune.launch.backend import LaunchedPrice, LaunchResult, SkyBackend
from cheaptune.plan.planfile import CostBreakdown, Offer, PlanFile, Prediction, TrainSettings, save

DEMO_DATA = str(Path(__file__).resolve().parents[2] / "examples" / "demo" / "train.jsonl")


def make_plan(offer: Offer, alternatives: list[Offer] | None = None, *, method: str = "lora",
              dataset: str | None = DEMO_DATA, budget: float | None = 20.0, total: float = 5.0) -> PlanFile:
    return PlanFile(
        created="2026-12-01T00:00:00Z", cheaptune_version="0.1.0", model="HuggingFaceTB/SmolLM2-135M",
        dataset=dataset,
        train=TrainSettings(method=method, precision="bf16-true" if method in ("full", "qlora") else "bf16-mixed"), offer=offer,
        prediction=Prediction(peak_vram_bytes=8 * 2**30, gpu_memory_bytes=24 * 2**30, tokens=10_000_000,
                              tokens_per_s=5000.0, hours=0.6, cost=CostBreakdown(compute=total, total=total)),
        budget_usd=budget, alternatives=alternatives or [],
    )


def offer(provider: str, gpu: str, price: float, *, count: int = 1, spot: bool = False, region: str = "any",
          total: float | None = None, kind: str | None = None, nodes: int = 1) -> Offer:
    return Offer(provider=provider, gpu=gpu, gpu_count=count, num_nodes=nodes, region=region, spot=spot,
                 kind=kind or ("spot" if spot else "on-demand"), price_per_hour=price, total_cost=total)


class RecordingBackend:
    """Validates with real SkyPilot (offline) and records every launch/status/cancel call instead of running it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self._real = SkyBackend()
        self.price: LaunchedPrice | None = None

    def validate(self, yaml_path: Path) -> None:
        self.calls.append(("validate", {"yaml_path": yaml_path}))
        self._real.validate(yaml_path)

    def launch_job(self, task: dict, secrets: dict[str, str], name: str) -> LaunchResult:
        self.calls.append(("launch_job", {"task": task, "secrets": secrets, "name": name}))
        return LaunchResult(job_id=42)

    def launch_cluster(self, task: dict, secrets: dict[str, str], cluster: str, idle_minutes: int) -> LaunchResult:
        self.calls.append(("launch_cluster", {"task": task, "secrets": secrets, "cluster": cluster,
                                              "idle_minutes": idle_minutes}))
        return LaunchResult(job_id=1, cluster=cluster)

    def exec_cluster(self, task: dict, secrets: dict[str, str], cluster: str) -> LaunchResult:
        self.calls.append(("exec_cluster", {"task": task, "secrets": secrets, "cluster": cluster}))
        return LaunchResult(job_id=2, cluster=cluster)

    def launched_price(self, result: LaunchResult) -> LaunchedPrice | None:
        """What SkyPilot would say the launched instance costs: `self.price` (None: it says nothing)."""
        self.calls.append(("launched_price", {"result": result}))
        return self.price

    def status(self, job_id: int | None) -> list[dict]:
        self.calls.append(("status", {"job_id": job_id}))
        return []

    def cancel(self, job_id: int) -> None:
        self.calls.append(("cancel", {"job_id": job_id}))


@pytest.fixture
def recorder() -> RecordingBackend:
    return RecordingBackend()


@pytest.fixture
def plan_file(tmp_path) -> Path:
    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "hello"}\n')
    p = tmp_path / "plan.yaml"
    save(make_plan(offer("runpod", "RTX4090", 0.69, total=3.0), dataset=str(data), total=3.0), p)
    return p
