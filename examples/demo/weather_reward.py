"""The GRPO demo's shaping reward (`make demo-grpo`): the share of the weather object's keys that a completion
names as JSON keys ("city": ...), whether or not the whole completion parses yet.

The built-in `json` reward pays only for a completion that parses; a small model rarely writes one at first, so
every completion in a group would score the same and GRPO (which learns from differences within a group) would
have nothing to learn from. This reward tells the completions apart on the way there.
"""

import re

KEYS = ("city", "day", "temperature", "unit", "conditions")


def reward(prompts, completions, **columns):
    texts = [c if isinstance(c, str) else "".join(t["content"] for t in c) for c in completions]
    return [sum(bool(re.search(rf'"{k}"\s*:', t)) for k in KEYS) / len(KEYS) for t in texts]
