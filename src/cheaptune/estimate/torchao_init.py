"""torchtune 0.1's QLoRA model init with torchao 0.1's NF4, replayed through the caching allocator.

Why: torchtune 0.1 reported 9.13 GB *reserved* after initialising Llama-2-7B QLoRA
(docs/source/tutorials/qlora_finetune.rst@0914d5cfb) with about 4.2 GB allocated; training never
frees that cache, so it is the floor of the run's peak reserved. The gap is fragmentation. The
recipe builds the model on the GPU in bf16 (recipes/lora_finetune_single_device.py L254-255), and
the builder makes one layer, then 32 copy.deepcopy of it (torchtune/modules/transformer.py L137,
L93). Deep-copying an NF4 weight runs torchtune's clone (utils/_register_nf4_dispatch_ops.py L11-19:
dequantize, then to_nf4 again) and then copies every inner tensor (torch Tensor.__deepcopy__:
wrapper subclasses clone, then `new_tensor.__dict__ = deepcopy(self.__dict__)`); load_state_dict
quantizes each fp16 checkpoint weight once more (L22-42 there: to_nf4(src.to(device))). torchao 0.1
(torchtune's pin, pyproject.toml@0914d5cfb) quantizes a whole weight at once through [numel, 16]
intermediates, so each step needs gigabyte blocks while small NF4 tensors settle in the cached ones.
The torchao 0.1 steps below re-express pytorch/ao v0.1 torchao/dtypes/nf4tensor.py (lines cited) as
the same tensor operations on meta tensors, keeping its function boundaries, where temporaries die.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import cache

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from cheaptune.estimate.allocator import replay

BF16 = torch.bfloat16
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")  # lora_llama2_self_attention's build order
MLP = ("gate_proj", "down_proj", "up_proj")  # lora_llama2_mlp's build order
NF4_ATTRS = ("quantized_scalers", "quantization_factor", "scaler_mean", "quantized_data", "nf4")  # __init__ order


class _Log(TorchDispatchMode):
    """Storage allocation (key, nbytes) and free (key, -1) events of the ops run under it."""

    def __init__(self, outside=()) -> None:
        super().__init__()
        self.events: list[tuple[int, int]] = []
        self.keys: dict[int, int] = {}  # id(UntypedStorage) -> key
        self.outside = {id(t.untyped_storage()) for t in outside}  # storages made before: views of them are not new

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            st = t.untyped_storage()
            if (sid := id(st)) not in self.keys and sid not in self.outside:
                self.keys[sid] = key = len(self.events)
                self.events.append((key, st.nbytes()))
                weakref.finalize(st, self._free, sid)
        return out

    def _free(self, sid: int) -> None:
        self.events.append((self.keys.pop(sid), -1))


def _block_absmax(flat: torch.Tensor, block: int) -> torch.Tensor:  # get_block_absmax L133-150
    return flat.view(-1, block).abs().max(dim=1).values


def _double_quantize_scalers(flat: torch.Tensor) -> tuple:  # L292-349
    scalers_1 = _block_absmax(flat, 64)
    mean = scalers_1.mean()
    scalers_1 = scalers_1 - mean
    scaler_blocks = scalers_1.view(-1, 256)
    scaler_absmax = _block_absmax(scalers_1, 256)
    scaler_absmax = scaler_absmax.unsqueeze(-1).expand(-1, 256)
    factor = 256 / (2 * scaler_absmax)  # a dense [n_blocks] tensor: expand's stride 0 is not kept
    quantized = scaler_blocks * factor
    quantized = quantized.round()
    quantized = quantized.clamp(-128, 127)
    factor = factor[:, 0]  # L343: a view, so the NF4 weight keeps all n_blocks bf16 of it
    return quantized.flatten().to(torch.int8), factor.view(-1), mean


def _quantize_nearest(value: torch.Tensor, nf4: torch.Tensor) -> torch.Tensor:  # L438-446
    value = value.unsqueeze(-1)
    diff = (value - nf4).abs()  # two [numel, 16] bf16 tensors at once
    return diff.min(dim=-1).indices


def _norm_float(w: torch.Tensor, nf4: torch.Tensor) -> torch.Tensor:  # convert_to_norm_float_weight L378-407
    blocks = w.flatten().view(-1, 64)
    scales = _block_absmax(w.flatten(), 64).unsqueeze(-1).expand(-1, 64)
    scaled_blocks = blocks / scales
    quantized = _quantize_nearest(scaled_blocks.flatten(), nf4)
    combined = quantized[::2] << 4 | quantized[1::2]
    return combined.to(torch.uint8)


def _to_nf4(tensor: torch.Tensor) -> dict[str, torch.Tensor]:  # to_nf4 L587-589, from_tensor L218-289
    w = tensor.to(BF16)
    nf4 = torch.empty(16, dtype=BF16, device=w.device)  # the lookup table, L237-258
    scalers, factor, mean = _double_quantize_scalers(w.flatten())
    data = _norm_float(w, nf4)
    return dict(zip(NF4_ATTRS, (scalers, factor, mean, data, nf4), strict=True))


def _original_weight(q: dict, shape: tuple[int, int]) -> torch.Tensor:  # get_original_weight L409-435
    first = (q["quantized_data"] >> 4).to(torch.long)
    second = (q["quantized_data"] & 0b1111).to(torch.long)
    deq_first, deq_second = q["nf4"][first], q["nf4"][second]
    scalers = (q["quantized_scalers"].view(-1, 256) / q["quantization_factor"].unsqueeze(-1)).flatten().to(BF16)
    scalers = scalers + q["scaler_mean"]  # dequantize_scalers L351-375
    repeated = scalers.unsqueeze(-1).expand(scalers.size(0), 32)
    scaled_first = (deq_first * repeated.flatten()).unsqueeze(-1).transpose(0, 1)
    scaled_second = (deq_second * repeated.flatten()).unsqueeze(-1).transpose(0, 1)
    return torch.stack([scaled_first, scaled_second], dim=-1).reshape(shape)


@dataclass(frozen=True)
class _Template:
    events: tuple[tuple[int, int], ...]
    outputs: tuple[tuple[str, int], ...]  # name -> key of a storage still alive at the end


@cache
def _template(kind: str, out_dim: int, in_dim: int) -> _Template:
    """Events of one step on meta tensors: build (nn.Linear then to_nf4), clone (deepcopy) or load."""
    shape = (out_dim, in_dim)
    source = _to_nf4(torch.empty(shape, dtype=BF16, device="meta")) if kind == "clone" else None
    with _Log(source.values() if source else ()) as log:
        if kind == "build":  # LoRALinear._create_weight_and_bias: the bf16 Linear weight dies after to_nf4
            result = _to_nf4(torch.empty(shape, dtype=BF16, device="meta"))
        elif kind == "clone":
            result = _to_nf4(_original_weight(source, shape))  # the clone dispatch, then __dict__ deep copies
            result = {n: torch.empty(source[n].untyped_storage().nbytes(), dtype=torch.uint8, device="meta")
                      for n in NF4_ATTRS}
        else:  # load_state_dict: to_nf4(src.to(device)) of the fp16 checkpoint weight
            result = _to_nf4(torch.empty(shape, dtype=torch.float16, device="meta"))
        outputs = tuple((n, log.keys[id(t.untyped_storage())]) for n, t in result.items())
    return _Template(tuple(log.events), outputs)


class _Trace:
    def __init__(self) -> None:
        self.events: list[tuple[int, int]] = []

    def alloc(self, nbytes: int) -> int:
        self.events.append((len(self.events), nbytes))
        return len(self.events) - 1

    def free(self, keys) -> None:
        self.events += [(k, -1) for k in keys]

    def run(self, t: _Template) -> dict[str, int]:
        local: dict[int, int] = {}
        for key, nbytes in t.events:
            if nbytes >= 0:
                local[key] = self.alloc(nbytes)
            else:
                self.free([local.pop(key)])
        return {name: local[key] for name, key in t.outputs}


@cache
def init_peaks(hidden: int, intermediate: int, vocab: int, layers: int, heads: int, kv_heads: int,
               head_dim: int, max_positions: int, quantized: frozenset[str], rank: int) -> tuple[int, int]:
    """(peak reserved, peak allocated) bytes of torchtune 0.1's QLoRA init (lora_llama2, builder order)."""
    shape = {"q_proj": (heads * head_dim, hidden), "k_proj": (kv_heads * head_dim, hidden),
             "v_proj": (kv_heads * head_dim, hidden), "o_proj": (hidden, heads * head_dim),
             "gate_proj": (intermediate, hidden), "down_proj": (hidden, intermediate), "up_proj": (intermediate, hidden)}
    rope = [4 * head_dim // 2, 4 * max_positions * head_dim]  # RotaryPositionalEmbeddings theta and cache, fp32
    t = _Trace()

    def linear(name: str) -> list[int]:  # LoRALinear (LoRA on every quantized linear) or a plain bf16 Linear
        out_dim, in_dim = shape[name]
        if name not in quantized:
            return [t.alloc(2 * out_dim * in_dim)]
        nf4 = list(t.run(_template("build", out_dim, in_dim)).values())
        return nf4 + [t.alloc(2 * rank * in_dim), t.alloc(2 * out_dim * rank)]

    one = [linear(n) for n in ATTENTION] + [[t.alloc(n) for n in rope]] + [linear(n) for n in MLP]
    one += [[t.alloc(2 * hidden)], [t.alloc(2 * hidden)]]  # sa_norm, mlp_norm
    for nbytes in (2 * vocab * hidden, 2 * vocab * hidden, 2 * hidden):  # tok_embeddings, output, norm
        t.alloc(nbytes)
    built = dict(zip([*ATTENTION, "rope", *MLP, "sa_norm", "mlp_norm"], one, strict=True))
    copies = []
    for _ in range(layers):  # _get_clones: copy.deepcopy of the one layer, in module registration order
        copy = {}
        for name in ("sa_norm", *ATTENTION, "rope", "mlp_norm", *MLP):
            tensors = built[name]
            if name in quantized:
                nf4 = t.run(_template("clone", *shape[name]))
                copy[name] = nf4
                t.alloc(t.events[tensors[-2]][1]), t.alloc(t.events[tensors[-1]][1])  # lora_a, lora_b
            else:
                [t.alloc(t.events[k][1]) for k in tensors]
        copies.append(copy)
    t.free(k for tensors in one for k in tensors)  # the builder's own layer dies with its frame
    for copy in copies:  # load_state_dict, module order; bf16 params take the fp16 values in place
        for name, nf4 in copy.items():
            t.run(_template("load", *shape[name]))
            t.free(nf4[n] for n in NF4_ATTRS)  # inplace_copy replaces the attributes one by one
    return replay(t.events)


def load_peaks(req, cfg: dict) -> tuple[int, int]:
    """(peak reserved, peak allocated) at init for requests run as torchtune 0.1 QLoRA with torchao 0.1; else (0, 0)."""
    if req.method != "qlora" or not getattr(req, "torchao_nf4_unchunked", False):
        return 0, 0
    from cheaptune.estimate.compute import hf_config
    from cheaptune.estimate.targets import resolve_targets

    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    quantized = frozenset(resolve_targets(hf_config(cfg), req.lora_targets)) & frozenset((*ATTENTION, *MLP))
    return init_peaks(hidden, int(cfg["intermediate_size"]), int(cfg["vocab_size"]), int(cfg["num_hidden_layers"]),
                      heads, int(cfg.get("num_key_value_heads") or heads), int(cfg.get("head_dim") or hidden // heads),
                      int(cfg.get("max_position_embeddings") or 4096), quantized, req.lora_r)
