"""The caching-allocator replay and torchao 0.1's NF4 steps it is fed (estimate/allocator.py, torchao_init.py)."""

from cheaptune.estimate.allocator import replay
from cheaptune.estimate.torchao_init import NF4_ATTRS, _template, init_peaks

MIB = 1 << 20


def _live(events) -> tuple[int, dict[int, int]]:
    """Peak live bytes, and what is live at the end."""
    live, peak, sizes = 0, 0, {}
    for key, nbytes in events:
        if nbytes >= 0:
            sizes[key] = nbytes
            live += nbytes
            peak = max(peak, live)
        else:
            live -= sizes.pop(key)
    return peak, sizes


def _peak_live(events) -> int:
    return _live(events)[0]


def test_sizes_round_to_the_allocators_segments():
    assert replay([(0, 1)]) == (2 * MIB, 512)  # small pool: 512-byte blocks in 2 MiB segments
    assert replay([(0, 3 * MIB)]) == (20 * MIB, 3 * MIB)  # 1-10 MiB: a 20 MiB segment
    assert replay([(0, 11 * MIB + 1)]) == (12 * MIB, 12 * MIB)  # rounded up to 2 MiB; a rest under 1 MiB stays in the block
    assert replay([(0, 5 * MIB), (1, 5 * MIB)]) == (20 * MIB, 10 * MIB)  # the second is split off the first's segment


def test_a_small_block_left_in_a_cached_segment_forces_a_new_one():
    """Best fit splits the cached 100 MiB block for 12 MiB; the next 100 MiB no longer fits there."""
    events = [(0, 100 * MIB), (0, -1), (1, 12 * MIB), (2, 100 * MIB)]
    assert replay(events) == (200 * MIB, 112 * MIB)


def test_freed_neighbours_merge_back_into_one_block():
    events = [(0, 100 * MIB), (0, -1), (1, 30 * MIB), (2, 30 * MIB), (1, -1), (2, -1), (3, 100 * MIB)]
    assert replay(events) == (100 * MIB, 100 * MIB)


def test_torchao_0_1_quantizes_a_weight_through_68_bytes_per_element():
    """Two [numel, 16] bf16 tensors at once (quantize_tensor_nearest) beside the weight and its scaled copy; what
    stays is the packed data (1/2 byte), int8 scalers (1/64) and, as a view, the whole per-block factor (2/64)."""
    n = 1024 * 4096
    build = _template("build", 1024, 4096)
    assert 68 * n < _peak_live(build.events) < 69 * n
    kept = dict(build.outputs)
    sizes = {key: nbytes for key, nbytes in build.events if nbytes >= 0}
    assert sizes[kept["quantized_data"]] == n // 2 and sizes[kept["quantized_scalers"]] == n // 64
    assert sizes[kept["quantization_factor"]] == 2 * n // 64
    clone = _template("clone", 1024, 4096)  # deepcopy: dequantize, quantize again, then copy every inner tensor
    assert [n for n, _ in clone.outputs] == list(NF4_ATTRS)
    assert _peak_live(clone.events) == _peak_live(build.events)  # the dequantized weight stands for the bf16 one
    peak, kept_at_end = _live(clone.events)
    assert sorted(kept_at_end) == sorted(k for _, k in clone.outputs)  # the clone's own tensors were replaced
    assert sum(kept_at_end.values()) == sum(sizes[k] for k in kept.values())
    assert _peak_live(_template("load", 1024, 4096).events) == _peak_live(build.events) + 2 * n  # fp16 source


def test_llama2_7b_qlora_init_reserves_what_torchtune_0_1_reported():
    """qlora_finetune.rst@0914d5cfb: 'Peak memory reserved, model init' 9.13 GB for llama2/7B_qlora_single_device
    (LoRA r 8 on q, k, v, output_proj and the MLP); most of it is fragmentation, not allocated bytes."""
    every_linear = frozenset(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
    reserved, allocated = init_peaks(4096, 11008, 32000, 32, 32, 32, 128, 4096, every_linear, 8)
    assert abs(reserved / 1e9 - 9.13) < 0.1
    assert reserved - allocated > 1.5e9
