"""Run two real training steps of the built model on fake (or, for validation, real) CPU tensors.

Step 2 is the one reported: in step 1 the optimizer state does not exist yet during forward and
backward, which under-states the peak (7B at b=4, s=2048: 61 vs 86 GiB,
docs/sources.md#memory-simulation).

The step is our trainer's (trl 1.16 SFTTrainer.training_step): trl's chunked LM head (loss plus the
entropy/accuracy metrics it logs, computed per tile, never the full logits), gradient clipping, and
the optimizer HF Trainer builds from the policy's `optim` name. trl folds each logits tile with
in-place Triton kernels on a GPU; its CPU fallback allocates tile-sized temporaries instead, so by
default (`loss_kernels="gpu"`) those folds are stood in by no-ops that allocate nothing, like the
kernels. Left out: trl scores only the labelled positions on a GPU (hidden_states[mask]) where we
score all, erring high by at most one [tokens, hidden] copy.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from cheaptune.estimate.memory.build import ON_HOST, build_on_meta, meta_to_fake, quiet
from cheaptune.estimate.memory.layers import decoder_layers, layer_period
from cheaptune.estimate.memory.mechanisms import mechanism, profile_policy
from cheaptune.estimate.memory.moe_dispatch import grouped_mm_bf16_only
from cheaptune.estimate.memory.quiet import fake_tensor_log_muted
from cheaptune.estimate.memory.tracker import PeakTracker
from cheaptune.estimate.policy import HELD_MICRO_STEPS, hf_optim

PHASES = ("forward", "backward", "optimizer")
LR = 1e-4
MAX_GRAD_NORM = 1.0  # our TrainConfig default; the Trainer clips whenever it is > 0


@dataclass
class SimResult:
    phase_peaks: dict[str, int]
    breakdown: dict[str, int]  # category -> bytes at the overall peak
    peak_phase: str
    trainable_params: int
    total_params: int
    static: dict[str, int] = field(default_factory=dict)  # weights by category before step 1
    max_linear_elems: int = 0  # largest quantized Linear (out*in), for bnb's hidden dequant buffer
    backward_buckets: dict[str, int] = field(default_factory=dict)  # backward peak by stack position


class Adam8bitStandIn(torch.optim.Optimizer):
    """bitsandbytes 8-bit Adam's state layout (uint8 moments + fp32 block absmax; 32-bit for
    tensors under 4096 elements), since bnb's fused optimizer kernels have no fake implementation."""

    def __init__(self, params, lr=LR):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    if p.numel() >= 4096:
                        blocks = (p.numel() + 255) // 256
                        for k in ("state1", "state2"):
                            st[k] = torch.zeros_like(p, dtype=torch.uint8)
                        for k in ("absmax1", "absmax2"):
                            st[k] = torch.zeros(blocks, dtype=torch.float32)
                    else:
                        for k in ("state1", "state2"):
                            st[k] = torch.zeros_like(p, dtype=torch.float32)
                p.add_(p.grad, alpha=-group["lr"])


def trainer_optimizer(optim: str) -> tuple[type, dict]:
    """(class, kwargs) HF Trainer creates for an `optim` name: its own resolution, so they cannot drift.

    It reads only fields of TrainingArguments, so their defaults stand in for an instance: building a real
    one resets accelerate's global state, which would break a trainer running in the same process."""
    import dataclasses
    from types import SimpleNamespace

    from transformers import Trainer, TrainingArguments

    fields = {}
    for f in dataclasses.fields(TrainingArguments):
        factory = f.default_factory if f.default_factory is not dataclasses.MISSING else None
        fields[f.name] = factory() if factory else (None if f.default is dataclasses.MISSING else f.default)
    args = SimpleNamespace(**{**fields, "optim": optim, "learning_rate": LR})
    return Trainer.get_optimizer_cls_and_kwargs(args, None)


def make_optimizer(name: str, params, foreach: bool = False):
    """The optimizer the trainer creates; bitsandbytes' 8-bit ones by a stand-in with their state layout.
    `foreach`: torch's AdamW as built without fused=True, whose CUDA default is the multi-tensor step; it does not
    apply to "adamw-fused", the run that asks for the fused kernel itself."""
    if name in ("adamw-8bit", "paged-adamw-8bit"):
        return Adam8bitStandIn(params)
    cls, kwargs = trainer_optimizer(hf_optim(name))
    if foreach and name == "adamw" and kwargs.get("fused"):
        kwargs = {**kwargs, "fused": False, "foreach": True}
    return cls(params, **kwargs)


def _count_params(model) -> tuple[int, int]:
    seen: set[int] = set()
    total = trainable = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        n = p.numel()
        if getattr(p, "quant_state", None) is not None or type(p).__name__ == "Params4bit":
            n = int(torch.Size(getattr(p, "quant_shape", p.shape)).numel())
        total += n
        trainable += n if p.requires_grad else 0
    return trainable, total


def _max_quant_linear(model) -> int:
    best = 0
    for m in model.modules():
        if type(m).__name__ == "Linear4bit":
            best = max(best, m.in_features * m.out_features)
    return best


def simulate(req, cfg, real: bool = False, steps: int = 2, loss_kernels: str = "gpu", replay: bool = False) -> SimResult:
    """Peak memory of `steps` training steps (the last one reported) for `req` on model config `cfg`.

    `loss_kernels`: "gpu" allocates what trl's Triton loss kernels do (nothing); "cpu" runs trl's
    CPU fallback as is, to compare with a real CPU run of the trainer. `replay`: run the earlier steps' forward
    and backward too (by default only the optimizer state they leave is made), to check both give the same bytes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    policy = profile_policy(req)
    checkpoint_dtype = getattr(cfg, "dtype", None)  # the config.json's torch_dtype, before the build sets its own
    with quiet(), fake_tensor_log_muted(), grouped_mm_bf16_only(), _bnb_qmap_restored():
        built = build_on_meta(req, policy, cfg)
        model = built.model
        model.checkpoint_dtype = checkpoint_dtype
        trainable, total = _count_params(model)
        max_lin = _max_quant_linear(model)
        mode = contextlib.nullcontext() if real else FakeTensorMode(allow_non_fake_inputs=True)
        if real:
            _materialize_real(model, req, built.quantized)
        else:
            meta_to_fake(model, mode, req, built.quantized)
        model.train()
        if built.quantized and mechanism(req, "bnb_keeps_input"):
            _keep_4bit_inputs(model)
        kernels = _gpu_loss_kernels() if loss_kernels == "gpu" else contextlib.nullcontext()
        with mode, kernels, (contextlib.nullcontext() if real else _real_mask_decision()), \
                _math_sdpa_16bit(mechanism(req, "math_sdpa_16bit")), _host_offload():
            return _run_steps(model, req, policy, cfg, steps, trainable, total, max_lin, replay)


@contextlib.contextmanager
def _bnb_qmap_restored():
    """meta_to_fake puts a fake tensor in bitsandbytes' global code-table cache (pitfall A); a real QLoRA run
    later in the same process (plan, then train) would read it and fail, so the cache is put back."""
    import sys

    bf = sys.modules.get("bitsandbytes.functional")
    before = dict(bf.name2qmap) if bf is not None else None
    try:
        yield
    finally:
        bf = sys.modules.get("bitsandbytes.functional")
        if bf is not None:
            bf.name2qmap.clear()
            bf.name2qmap.update(before or {})


@contextlib.contextmanager
def _math_sdpa_16bit(on: bool):
    """torch < 2.5 ran SDPA's math path (no flash kernel for the shapes, e.g. one kv head not repeated) in the
    inputs' 16-bit dtype; from 2.5 it upcasts them to fp32, doubling the T x T probabilities it keeps
    (pytorch#128922, #135964: torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp turns it back off)."""
    before = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(on or before)
    try:
        yield
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(before)


@contextlib.contextmanager
def _host_offload():
    """transformers' offloaded checkpointing packs each saved block input into host RAM (torch save_on_cpu);
    here every tensor is on the CPU, so the pack keeps only shape and dtype (nothing held on the 'GPU') and
    the unpack allocates the copy brought back for the block's recompute."""
    from unittest import mock

    from transformers import modeling_utils

    def offloaded(**_kwargs):
        return torch.autograd.graph.saved_tensors_hooks(
            lambda t: (t.shape, t.dtype, t.requires_grad),
            lambda m: torch.empty(m[0], dtype=m[1]).requires_grad_(m[2]))

    with mock.patch.object(modeling_utils, "save_on_cpu", offloaded):
        yield


def _noop(*_args, **_kwargs) -> None:
    return None


@contextlib.contextmanager
def _gpu_loss_kernels():
    """trl's per-tile folds and fp32 accumulation are in-place Triton/cuBLAS calls on a GPU (no new
    tensors); on CPU they are torch ops with tile-sized temporaries. Memory-wise a no-op is the kernel."""
    from unittest import mock

    from trl.kernels import chunked_logprob as cl

    with mock.patch.object(cl, "_forward_tile", _noop), mock.patch.object(cl, "_backward_tile", _noop), \
            mock.patch.object(cl, "_addmm_fp32", _noop):
        yield


@contextlib.contextmanager
def _real_mask_decision():
    """HF cannot test fake position ids for packed sequences, so it builds a full [b,1,s,s] mask that a
    real unpacked run skips (the note's pitfall 3). Our inputs are never packed-by-position: say so."""
    from unittest import mock

    from transformers import masking_utils

    with mock.patch.object(masking_utils, "find_packed_sequence_indices", lambda *a, **k: None):
        yield


def _materialize_real(model, req, quantized: bool) -> None:
    meta_to_fake(model, contextlib.nullcontext(), req, quantized)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.normal_(0, 0.02)


def _run_steps(model, req, policy, cfg, steps, trainable, total, max_lin, replay=False) -> SimResult:
    params = [p for p in model.parameters() if p.requires_grad]
    tracker = PeakTracker()
    tracker.inside_op = _dequant_inside(req)
    seen: set[int] = {id(p) for m in model.modules() if getattr(m, ON_HOST, False) for p in m.parameters()}
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            tracker.track([p], "trainable_weights" if p.requires_grad else "weights")
    tracker.track(list(model.buffers()), "weights")
    _track_quant_states(model, tracker)
    reference = []  # trl's frozen copy of the model (DPO, full fine-tuning), alive for the whole run
    if req.objective == "dpo" and req.method == "full" and not req.precompute_ref:
        reference = [torch.empty_like(p, requires_grad=False) for p in model.parameters()]
        tracker.track(reference, "reference_model")
    static = dict(tracker.cur)
    for p in params:
        p.register_post_accumulate_grad_hook(lambda t: tracker.retag(t.grad, "gradients"))
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    # trl's fused head uses the head's weight, not the module: everything after the backbone is the loss
    base.base_model.register_forward_hook(lambda *_: setattr(tracker, "forward_category", "logits_loss"))
    after_backward = _install_bucket_hooks(model, tracker, cfg)
    from cheaptune.estimate.memory.profiles import get_profile

    opt = make_optimizer(req.optimizer, params, get_profile(req.trainer).foreach_adamw or mechanism(req, "foreach_adamw"))
    vocab = cfg.vocab_size
    autocast = (torch.autocast("cpu", dtype=policy.autocast_dtype) if policy.autocast
                else contextlib.nullcontext())
    # with accumulation, micro-steps after the first run forward and backward over the gradients the ones before
    # left in .grad (zero_grad only after the optimizer step); the second is like every later one
    micro_steps = min(req.grad_accum, HELD_MICRO_STEPS)
    carried = _carries_last_outputs(req)
    last: list = []  # what the loop still holds of the micro-step before (litgpt: its logits list)
    for step in range(steps):
        tracker.reset_peaks()
        if step == steps - 1 and micro_steps > 1 and not replay:  # the micro-steps before the last leave only
            for p in params:  # their gradients, made from zero as step 1's are: the last runs over them and sets
                p.grad = torch.zeros_like(p)  # every peak (the same bytes as `replay`, in ~60% of the time)
                tracker.retag(p.grad, "gradients")
            tracker.phase, tracker.bucket = "backward", after_backward  # as the skipped backward leaves them
            micro_steps = 1
        with tracker:
            if step < steps - 1 and not replay:  # an earlier step leaves its optimizer state: made from zero
                for p in params:  # gradients, the same bytes as `replay`ing its forward and backward in ~55% of the time
                    p.grad = torch.zeros_like(p)
                if carried:  # the next forward meets this step's last micro-step's outputs, still alive
                    last = _micro_step(model, req, tracker, autocast, vocab, last)
            else:
                for _ in range(micro_steps):
                    last = _micro_step(model, req, tracker, autocast, vocab, last)
                    if not carried:
                        last = []
            tracker.phase = "optimizer"
            torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
            opt.step()
            for st in opt.state.values():
                for v in st.values():
                    if isinstance(v, torch.Tensor) and v.dim() > 0:
                        tracker.retag(v, "optimizer_state")
            opt.zero_grad(set_to_none=True)
    peaks = {ph: int(tracker.phase_peaks.get(ph, 0)) for ph in PHASES}
    return SimResult(peaks, dict(tracker.peak_breakdown), tracker.peak_phase, trainable, total,
                     static, max_lin, dict(tracker.bucket_peaks))


def _dequant_inside(req):
    """bitsandbytes' gemm_4bit dequantizes its whole weight inside the op (docs/sources.md#qlora-dequantisation-buffer;
    dequant_copies of it), which its fake implementation does not show: those bytes, while that op runs only."""
    if req.method != "qlora":
        return None
    import math

    import bitsandbytes  # noqa: F401 - registers torch.ops.bitsandbytes

    from cheaptune.estimate.memory import overheads

    gemm = torch.ops.bitsandbytes.gemm_4bit.default
    per_weight = overheads.constants()["bnb_dequant_bytes_per_weight"] * overheads.dequant_copies(req)
    return lambda func, args: int(per_weight * math.prod(args[2])) if func is gemm else 0


def _carries_last_outputs(req) -> bool:
    """Does the trainer's loop keep the last micro-step's outputs alive through the next forward? litgpt binds the
    logits list to `logits` and rebinds it only when the next forward returns (finetune/lora.py L276 at 5895df10,
    L355 at v0.5.13; full.py L282 there), so the previous micro-step's logits, and the autograd graph they reference,
    live until then; lit-gpt before 0.2.0 ran the longest batch first (data/versions.yaml longest_batch_first), so
    the step at the estimate's length had no micro-step before it."""
    from cheaptune.estimate.memory.profiles import get_profile

    return get_profile(req.trainer).holds_last_outputs and not mechanism(req, "longest_batch_first")


def _micro_step(model, req, tracker, autocast, vocab: int, previous: list) -> list:
    """One forward and backward of the trainer's loss on a fake batch; returns what the trainer's loop still holds
    after it. `previous` (what it held of the micro-step before) is emptied where the loop lets go of it."""
    rows = req.micro_batch * (1 if req.objective == "sft" else 2)  # preference: chosen and rejected rows
    ids = torch.randint(0, vocab, (rows, req.seq_len))
    pos = torch.arange(req.seq_len).expand(rows, -1)  # trl's padding-free collator sends these
    tracker.phase, tracker.forward_category = "forward", None
    with autocast:
        loss, held = _forward_loss(model, ids, pos, req, previous)
    previous.clear()
    del ids, pos
    tracker.phase, tracker.forward_category, tracker.bucket = "backward", None, "head"
    loss.backward()
    del loss
    return list(held)


def _keep_4bit_inputs(model) -> None:
    """bitsandbytes < 0.43.2: MatMul4Bit kept its input A for backward whenever A needed a gradient
    (ctx.tensors = (A, B), outside save_for_backward, so checkpointing did not free it either); the input
    is held by the output's autograd node until the graph is freed, exactly as long as ctx held it."""
    def keep(_mod, args, out):
        if args and isinstance(args[0], torch.Tensor) and args[0].requires_grad and out.grad_fn is not None:
            out.grad_fn.metadata["bnb_kept_input"] = args[0]

    for m in model.modules():
        if type(m).__name__ == "Linear4bit":
            m.register_forward_hook(keep)


def _forward_loss(model, ids, pos, req, previous: list) -> tuple[torch.Tensor, tuple]:
    """The trainer's forward and loss: (loss, tensors its training loop holds until backward is done)."""
    if req.objective != "sft":
        return preference_forward(model, ids, pos, req), ()
    if req.loss == "hf":  # a plain Trainer: the model's own loss over full fp32 logits
        return model(input_ids=ids, labels=ids, position_ids=pos, use_cache=False).loss, ()
    if req.loss == "chunked":
        return _chunked_loss(model, ids, pos, req, previous)
    out = model(input_ids=ids, labels=ids, position_ids=pos, use_cache=False, fused_lm_head=True)
    # trl's compute_loss: summed NLL over labelled tokens, plus its logged metrics (computed, then dropped)
    out.entropy.detach().sum(), out.is_top1.sum()
    return -out.log_probs.sum() / out.label_mask.sum().clamp(min=1), ()


def preference_forward(model, ids, pos, req) -> torch.Tensor:
    """trl 1.16's preference step on the concatenated [chosen; rejected] batch.

    DPOTrainer._compute_loss: the policy through the fused head (per-token log-probs, entropy, top-1), then,
    under no_grad while the policy's activations are held, the reference: the same weights with adapters
    disabled for PEFT, the frozen copy (counted as reference_model) for full fine-tuning, nothing when its
    log-probs were precomputed. ORPOTrainer.concatenated_forward: full logits, NLL over the chosen half and
    the log-softmax of every row (trl's selective_log_softmax, here in fp32: errs high)."""
    half = ids.size(0) // 2
    if req.objective == "orpo":
        logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits
        nll = torch.nn.functional.cross_entropy(logits[:half].flatten(0, 1), ids[:half].flatten())
        logps = torch.log_softmax(logits.float(), -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1).mean(-1)
        return nll - torch.nn.functional.logsigmoid(logps[:half] - logps[half:]).mean()
    out = model(input_ids=ids, labels=ids, position_ids=pos, use_cache=False, fused_lm_head=True)
    out.entropy.detach().sum(), out.is_top1.sum()
    logps = out.log_probs.sum(-1)
    if req.precompute_ref:
        ref = torch.zeros_like(logps)
    else:
        off = model.disable_adapter() if hasattr(model, "disable_adapter") else contextlib.nullcontext()
        with torch.no_grad(), off:
            ref = model(input_ids=ids, labels=ids, position_ids=pos, use_cache=False,
                        fused_lm_head=True).log_probs.sum(-1)
    ratio = (logps - ref)
    return -torch.nn.functional.logsigmoid(ratio[:half] - ratio[half:]).mean()


def _chunked_loss(model, ids, pos, req, previous: list) -> tuple[torch.Tensor, tuple]:
    """litgpt's and torchtune's loss: the head projects chunk by chunk and cross-entropy runs per chunk
    (fp32 per chunk for torchtune). litgpt's model returns the list of every chunk's logits (cast to fp32 by Fabric)
    before the loss starts, its loop then lets go of the previous list (`previous`) and keeps this one until
    backward ends: litgpt/lora.py L547-549 and finetune/lora.py L276-278 at 5895df10."""
    from cheaptune.estimate.memory.profiles import get_profile

    prof = get_profile(req.trainer)
    size = prof.loss_chunk_tokens or -(-req.seq_len // (prof.loss_chunks or 1))
    if req.method in ("prompt_tuning", "prefix_tuning"):  # peft's wrapper adds the virtual tokens
        chunks = model(input_ids=ids, position_ids=pos, use_cache=False).logits[:, -req.seq_len:].split(size, 1)
    else:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        hidden = base.base_model(input_ids=ids, position_ids=pos, use_cache=False).last_hidden_state
        head = base.get_output_embeddings()
        chunks = (head(h) for h in hidden.split(size, dim=1))
    held, total = [], None
    fp32_out = prof.fp32_outputs  # the trainer casts the model's outputs (the logits chunks) to fp32
    if prof.loss_full_logits:  # the whole list first (in litgpt's order: autograd's backward order follows it)
        chunks = list(chunks)
        if fp32_out:
            chunks, fp32_out = [c.float() for c in chunks], False
        previous.clear()
    # the trainer casts the logits to the checkpoint's config dtype (not known for a catalog model: bf16, the dtype
    # most current checkpoints ship in); a copy, and its gradient one more, where the run computes in another dtype
    cast = (getattr(model, "checkpoint_dtype", None) or torch.bfloat16) if prof.logits_config_dtype else None
    for logits, labels in zip(chunks, ids.split(size, dim=1), strict=True):
        logits = logits.float() if fp32_out else logits
        logits = logits.to(cast) if cast is not None and logits.dtype != cast else logits
        if prof.loss_full_logits:
            held.append(logits)
        logits = logits.float() if prof.loss_fp32 else logits
        flat = logits.reshape(-1, logits.size(-1))
        part = (_InplaceCrossEntropy.apply(flat) if prof.loss_inplace
                else torch.nn.functional.cross_entropy(flat, labels.reshape(-1), reduction="sum"))
        total = part if total is None else total + part
    return total / ids.numel(), tuple(held)


class _InplaceCrossEntropy(torch.autograd.Function):
    """A fused cross-entropy kernel that keeps the logits and a per-row fp32 logsumexp and writes its gradient into
    the logits (Unsloth's Fast_CrossEntropyLoss): no log-softmax, no second [rows, vocab] tensor."""

    @staticmethod
    def forward(ctx, logits):
        lse = torch.empty(logits.size(0), dtype=torch.float32, device=logits.device)
        ctx.save_for_backward(logits, lse)
        return torch.empty(logits.size(0), dtype=torch.float32, device=logits.device).sum()

    @staticmethod
    def backward(ctx, _grad):
        logits, _lse = ctx.saved_tensors
        return logits


def _install_bucket_hooks(model, tracker, cfg) -> str:
    """Label backward by position in the stack: the backward peak of a block stack is reached at its
    top or its bottom (grads grow as saved activations shrink), each affine in the block count.
    Returns the label a backward ends in (the first block's, else the head's)."""
    n = int(cfg.num_hidden_layers)
    layers = decoder_layers(model, n)
    if layers is None:
        return "head"
    prefix, period = layer_period(cfg)

    def bucket(i: int) -> str:
        return "top" if i >= n - period else ("bottom" if i < prefix + period else "mid")

    for i, layer in enumerate(layers):
        def hook(_mod, _args, output, label=bucket(i)):
            out = output[0] if isinstance(output, tuple) else output
            if tracker.phase == "forward" and isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(lambda g: setattr(tracker, "bucket", label))
        layer.register_forward_hook(hook)
    return bucket(0)


def _track_quant_states(model, tracker) -> None:
    """bnb QuantState tensors (absmax, nested absmax, code) are weights too, held outside parameters."""
    for m in model.modules():
        qs = getattr(m, "quant_state", None)
        if qs is None:
            continue
        stack = [qs]
        while stack:
            s = stack.pop()
            for v in vars(s).values():
                if isinstance(v, torch.Tensor):
                    tracker.track([v], "weights")
                elif type(v).__name__ == "QuantState":
                    stack.append(v)
