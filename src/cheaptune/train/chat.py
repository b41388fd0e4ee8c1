"""Chat templates for training: a documented default when the tokenizer has none, and assistant-only loss
that works with any template.

trl masks assistant turns only when the template marks them with `{% generation %}`; most shipped templates
(Llama 2/3, Mistral, Qwen) do not. Rather than fail or silently train on the prompts, such data is turned
into prompt + last assistant reply, for which trl's completion-only loss needs no markers.
"""

from __future__ import annotations

import re
from typing import Any

# ChatML (the layout of SmolLM2 and Qwen), with generation markers; used when a tokenizer has no template.
DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}{{ message['content'] + '<|im_end|>' + '\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_GENERATION = re.compile(r"{%-?\s*generation\s*-?%}")


def has_generation_markers(template: str | None) -> bool:
    return bool(template and _GENERATION.search(template))


def prepare_chat(tokenizer: Any, train_ds: Any, eval_ds: Any, fmt: str) -> tuple[Any, Any, str]:
    """Give the tokenizer a template when it needs one and pick the loss masking its template supports."""
    conversational = fmt == "messages" or (
        "prompt" in train_ds.column_names and isinstance(train_ds[0]["prompt"], list)
    )
    if conversational and not tokenizer.chat_template:
        tokenizer.chat_template = DEFAULT_CHAT_TEMPLATE
        print("note: the tokenizer has no chat template; using cheaptune's default (ChatML)", flush=True)
    if fmt == "messages" and not has_generation_markers(tokenizer.chat_template):
        from cheaptune.data import last_turn_as_completion

        print("note: the chat template has no {% generation %} markers; training on the last assistant "
              "reply of each conversation (completion-only loss)", flush=True)
        train_ds = last_turn_as_completion(train_ds)
        eval_ds = last_turn_as_completion(eval_ds) if eval_ds is not None else None
        fmt = "prompt_completion"
    return train_ds, eval_ds, fmt
