"""Files that hand an adapter to a server: an Ollama Modelfile, a vLLM command line, a GGUF via llama.cpp.

We write the inputs these tools document and leave serving to them (no converter or server of ours).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from cheaptune.errors import BadInput

# Ollama imports safetensors LoRA adapters for these architectures (its docs, "Importing a model").
OLLAMA_ADAPTER_TYPES = ("llama", "mistral", "gemma", "gemma2")
# vLLM's --max-lora-rank takes one of these values.
VLLM_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
CHATML = """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""


def model_type(base_dir: Path) -> str:
    return str(json.loads((base_dir / "config.json").read_text()).get("model_type", "unknown"))


def _chat_template(adapter_dir: Path) -> str:
    jinja = adapter_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    cfg = adapter_dir / "tokenizer_config.json"
    return str(json.loads(cfg.read_text()).get("chat_template") or "") if cfg.is_file() else ""


def ollama_modelfile(base_dir: Path, adapter_dir: Path) -> str:
    """FROM the base folder, ADAPTER the adapter folder; ChatML templates are spelled out for Ollama."""
    kind = model_type(base_dir)
    if kind not in OLLAMA_ADAPTER_TYPES:
        raise BadInput(f"Ollama imports safetensors adapters only for {', '.join(OLLAMA_ADAPTER_TYPES)} models, "
                       f"not {kind}; export --to merged (then --to gguf) and import that instead")
    lines = [f"FROM {base_dir.resolve()}", f"ADAPTER {adapter_dir.resolve()}"]
    if "<|im_start|>" in _chat_template(adapter_dir):
        lines += [f'TEMPLATE """{CHATML}"""', 'PARAMETER stop "<|im_end|>"']
    else:
        lines.append("# chat template: Ollama derives it from the base's tokenizer_config.json")
    return "\n".join(lines) + "\n"


def vllm_files(base: str, adapter_dir: Path, rank: int, name: str) -> dict[str, str]:
    """serve.sh (vllm serve with the LoRA module) and request.sh (an OpenAI-style chat request)."""
    max_rank = next((r for r in VLLM_RANKS if r >= rank), None)
    if max_rank is None:
        raise BadInput(f"vLLM serves LoRA ranks up to {VLLM_RANKS[-1]}, this adapter has r={rank}; export --to merged")
    serve = ["vllm", "serve", base, "--enable-lora", "--lora-modules", f"{name}={adapter_dir.resolve()}",
             "--max-lora-rank", str(max_rank)]
    body = {"model": name, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 64}
    request = ["curl", "-s", "http://localhost:8000/v1/chat/completions", "-H", "Content-Type: application/json",
               "-d", json.dumps(body)]
    head = "#!/usr/bin/env bash\nset -euo pipefail\n"
    return {"serve.sh": head + shlex.join(serve) + "\n", "request.sh": head + shlex.join(request) + "\n"}


def find_gguf_converter() -> Path | None:
    """llama.cpp's convert_hf_to_gguf.py: in $LLAMA_CPP_DIR, or on PATH."""
    where = os.environ.get("LLAMA_CPP_DIR")
    if where and (Path(where) / "convert_hf_to_gguf.py").is_file():
        return Path(where) / "convert_hf_to_gguf.py"
    found = shutil.which("convert_hf_to_gguf.py")
    return Path(found) if found else None


def convert_gguf(merged_dir: Path, out_file: Path, outtype: str = "f16") -> None:
    """Run llama.cpp's converter on a merged model; BadInput saying how to get it when it is absent."""
    script = find_gguf_converter()
    if script is None:
        raise BadInput("GGUF needs llama.cpp's converter: clone github.com/ggml-org/llama.cpp, pip install its "
                       "requirements, and set LLAMA_CPP_DIR to the clone (or put convert_hf_to_gguf.py on PATH)")
    done = subprocess.run([sys.executable, str(script), str(merged_dir), "--outfile", str(out_file),
                           "--outtype", outtype], capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise BadInput(f"llama.cpp's converter failed: {tail[0]}")
