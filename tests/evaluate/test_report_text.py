"""What eval shows a person: a progress bar that counts rows, prompts cut between words."""

from __future__ import annotations

from cheaptune.evaluate.run import tail


def test_a_long_prompt_is_cut_between_words():
    text = "Convert this weather report to JSON: " * 10 + "Weather update for Tallinn, Thursday."
    cut = tail(text, 60)
    assert cut.startswith("...") and text.endswith(cut[3:]) and len(cut) <= 63
    assert text[len(text) - len(cut) + 2] == " "  # what precedes the kept text is a space: no half word
    assert tail("short prompt", 60) == "short prompt"


def test_the_eval_bar_counts_rows(tiny_model_dir, tiny_adapter, monkeypatch):  # noqa: F811
    import tqdm
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cheaptune.evaluate.runner import Example, compare

    seen: list[tuple[str, int, int]] = []

    class Bar(tqdm.tqdm):
        def close(self):
            seen.append((self.desc, self.n, self.total))
            super().close()

        def reset(self, total=None):
            if self.n:
                seen.append((self.desc, self.n, self.total))
            super().reset(total)

    monkeypatch.setattr(tqdm, "tqdm", Bar)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), str(tiny_adapter))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = [Example(f"Question {i}:", " yes") for i in range(5)]
    compare(model, tok, rows, batch_size=2, max_new_tokens=2, progress=True)
    passes = list(dict.fromkeys((d.rstrip(": ").split()[-2:][0], d.rstrip(": ").split()[-1], n, t) for d, n, t in seen))
    assert [((a, b), n, t) for a, b, n, t in passes] == [
        (("base", "loss"), 5, 5), (("base", "answers"), 5, 5), (("tuned", "loss"), 5, 5), (("tuned", "answers"), 5, 5)]


from tests.export.conftest import tiny_adapter  # noqa: E402,F401 (the shared adapter fixture)
