"""What eval shows a person: a progress bar that counts rows, prompts cut between words."""

from __future__ import annotations


def test_a_long_prompt_is_cut_between_words():
    from cheaptune.evaluate.run import tail  # here, so the bar test below collects without it

    text = "Convert this weather report to JSON: " * 10 + "Weather update for Tallinn, Thursday."
    cut = tail(text, 60)
    assert cut.startswith("...") and text.endswith(cut[3:]) and len(cut) <= 63
    assert text[len(text) - len(cut) + 2] == " "  # what precedes the kept text is a space: no half word
    assert tail("short prompt", 60) == "short prompt"


def test_the_report_shows_a_long_prompt_from_a_word_boundary():
    """What `eval --report` writes, through markdown() (the report's own code, before and after tail existed)."""
    import ast

    from cheaptune.evaluate.run import markdown

    prompt = "Convert this weather report to JSON: " * 10 + "Weather update for Tallinn, Thursday."
    side = {"loss": 1.0, "perplexity": 2.7}
    text = markdown({"rows": 1, "base": side, "tuned": side,
                     "examples": [{"prompt": prompt, "reference": "r", "base": "b", "tuned": "t"}]})
    shown = ast.literal_eval(text.split("- prompt: `")[1].split("`")[0])
    kept = shown.removeprefix("...")
    assert shown.startswith("...") and prompt.endswith(kept) and len(kept) < len(prompt)
    assert prompt[len(prompt) - len(kept) - 1].isspace()  # the word before it is whole and left out, not halved


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
