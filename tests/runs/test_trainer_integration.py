"""One real (tiny) HF Trainer run: the guard stops it at the budget with a checkpoint; report_to sees the costs."""

import torch
from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

from cheaptune.runs.guard import GuardCallback, GuardSettings, attach
from cheaptune.runs.registry import Registry


class TickClock:
    """Each reading is one second later: $1 a reading at $3600/h, whatever the machine's speed."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 1.0
        return self.t


class Reporter(TrainerCallback):
    """Stands in for a report_to integration: records what on_log hands it."""

    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


def test_real_trainer_stops_at_budget(tiny_model_dir, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.randint(0, model.config.vocab_size, (16,))
    data = [{"input_ids": ids, "labels": ids} for _ in range(64)]
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=40, per_device_train_batch_size=1,
                             logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                             disable_tqdm=True)
    reporter = Reporter()
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[reporter])
    run = Registry().start_run(name="it", model="tiny", price_per_hour=3600.0, budget_usd=30.0)
    guard = GuardCallback(GuardSettings(price_per_hour=3600.0, budget_usd=30.0, checkpoint_s=0), run, clock=TickClock())
    attach(trainer, guard)
    trainer.train()
    assert guard.stop_reason == "budget"
    assert 0 < trainer.state.global_step < 40
    assert (tmp_path / "out" / f"checkpoint-{trainer.state.global_step}").is_dir()
    assert any("cost_usd" in logs and "budget_used" in logs for logs in reporter.logs)
    rec = Registry().get_run(run.id)
    assert rec["steps"] == trainer.state.global_step and rec["stop_reason"] == "budget"
    assert rec["series"] and any(p["loss"] is not None for p in rec["series"])
