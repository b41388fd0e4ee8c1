"""A fake Trainer loop: calls the TrainerCallback hooks in the HF order, with real TrainerState/Control."""

from __future__ import annotations

from transformers import TrainerControl, TrainerState, TrainingArguments


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def run_loop(cb, clock: FakeClock, max_steps: int, step_s: float = 10.0, data_s: float = 0.0,
             save_s: float = 3.0, log_every: int = 5, start_step: int = 0, args=None):
    """Drive `cb` like Trainer._inner_training_loop; returns (state, control, saves)."""
    args = args or TrainingArguments(output_dir="/tmp/unused-fakeloop", report_to=[], use_cpu=True)
    state, control = TrainerState(), TrainerControl()
    state.max_steps, state.global_step = max_steps, start_step
    saves = []
    cb.on_train_begin(args, state, control)
    while state.global_step < max_steps:
        clock.advance(data_s)  # get_batch_samples happens before on_step_begin
        control.should_log = control.should_save = control.should_evaluate = False
        cb.on_step_begin(args, state, control)
        clock.advance(step_s)
        state.global_step += 1
        cb.on_step_end(args, state, control)
        if state.global_step % log_every == 0:
            cb.on_log(args, state, control, logs={"loss": 5.0 / state.global_step})
        if control.should_save:
            clock.advance(save_s)
            saves.append(state.global_step)
            cb.on_save(args, state, control)
        if control.should_training_stop:
            break
    cb.on_train_end(args, state, control)
    return state, control, saves
