"""The probe measures the first optimizer steps (the warm-up step apart) and reports against the plan."""

from __future__ import annotations

import io

from transformers import TrainerControl, TrainerState, TrainingArguments

from cheaptune.runs.registry import Registry
from cheaptune.train.probe import ProbeCallback
from tests.runs.fakeloop import FakeClock


def drive(probe: ProbeCallback, clock: FakeClock, steps: int, step_s: float = 1.0, tokens: int = 500) -> None:
    """A warm-up step of 5 s, then `step_s` steps of `tokens` tokens each."""
    args = TrainingArguments(output_dir="/tmp/unused-probe", report_to=[], per_device_train_batch_size=4,
                             gradient_accumulation_steps=2)
    state, control = TrainerState(), TrainerControl()
    state.num_input_tokens_seen = 0
    probe.on_train_begin(args, state, control)
    for i in range(steps):
        clock.advance(5.0 if i == 0 else step_s)
        state.global_step += 1
        state.num_input_tokens_seen += tokens
        probe.on_step_end(args, state, control)
    probe.on_train_end(args, state, control)


def test_probe_line_registry_and_slow_warning_with_its_cause():
    run = Registry().start_run(name="p", method="lora")
    out, clock = io.StringIO(), FakeClock()
    probe = ProbeCallback(3, predicted_peak=None, predicted_tokens_per_s=1000.0, run=run, stream=out, clock=clock)
    drive(probe, clock, steps=10)
    r = probe.result
    assert r["steps"] == 3 and r["s_per_step"] == 1.0 and r["tokens_per_s"] == 500.0  # warm-up step left out
    assert r["micro_batch"] == 4 and r["grad_accum"] == 2 and r["peak_allocated"] is None  # no CUDA here
    text = out.getvalue()
    assert text.startswith("probe (3 steps, micro-batch 4 x 2): memory not measured on this device; "
                           "speed 500 tok/s, 1.00 s/step vs 1000 predicted (-50%)")
    assert "warning: measured speed is -50%" in text and "a CPU shared with other work" in text  # no GPU here
    assert "nvidia-smi" not in text
    rec = Registry().get_run(run.id)
    assert [e["detail"]["tokens_per_s"] for e in rec["events"] if e["kind"] == "probe"] == [500.0]
    assert rec["tokens_per_s"] == 500.0


def test_data_starvation_is_named_and_a_short_run_is_still_measured():
    out, clock = io.StringIO(), FakeClock()
    probe = ProbeCallback(5, None, 1000.0, data_wait=lambda: 0.4, stream=out, clock=clock)
    drive(probe, clock, steps=2, step_s=2.0)  # fewer steps than the probe: measured at the end
    assert probe.result["steps"] == 2 and probe.result["tokens_per_s"] == 250.0
    assert "data starvation (40% of each step" in out.getvalue()


def test_no_probe_when_disabled_and_no_warning_on_pace():
    out, clock = io.StringIO(), FakeClock()
    drive(ProbeCallback(0, None, 1000.0, stream=out, clock=clock), clock, steps=4)
    assert out.getvalue() == ""
    on_pace = ProbeCallback(3, None, 520.0, stream=out, clock=clock)
    drive(on_pace, clock, steps=4)
    assert "(-4%)" in out.getvalue() and "warning" not in out.getvalue()


def test_a_probe_on_another_device_than_the_plans_gpu_is_not_held_against_its_prediction():
    out, clock = io.StringIO(), FakeClock()
    probe = ProbeCallback(3, None, 1000.0, stream=out, clock=clock, planned_gpu="L4")
    drive(probe, clock, steps=4)  # on this CPU: 500 tok/s would be -50% against the L4's 1000
    text = out.getvalue()
    assert "ran on the CPU, not the plan's L4: not compared with its prediction" in text
    assert "predicted (" not in text and "warning" not in text and "thermal" not in text
    assert probe.result["predicted_tokens_per_s"] is None and probe.result["planned_gpu"] == "L4"
    assert len(text.strip().splitlines()) == 1


def test_a_probe_on_the_cpu_a_plan_priced_is_held_against_its_prediction():
    """A plan for the CPU it runs on (demo.cpuplan: board "CPU") is this device's plan: its speed is compared."""
    out, clock = io.StringIO(), FakeClock()
    probe = ProbeCallback(3, None, 1000.0, stream=out, clock=clock, planned_gpu="CPU")
    drive(probe, clock, steps=4)
    assert probe.result["predicted_tokens_per_s"] == 1000.0 and probe.result["planned_gpu"] is None
    assert "vs 1000 predicted (-50%)" in out.getvalue() and "not the plan's" not in out.getvalue()


def test_a_slow_gpu_run_blames_the_gpu_and_a_slow_cpu_run_the_cpu():
    from cheaptune.train.probe import slow_cause

    assert "thermal or power cap" in slow_cause(None) and "nvidia-smi" in slow_cause(0.05, on_gpu=True)
    assert "CPU shared" in slow_cause(None, on_gpu=False) and "nvidia-smi" not in slow_cause(None, on_gpu=False)
    assert slow_cause(0.4, on_gpu=False).startswith("data starvation")
