"""Replay of allocation events through a model of PyTorch's CUDA caching allocator.

Why: a peak of *reserved* memory can exceed the peak of allocated memory by gigabytes when small
long-lived tensors land inside cached blocks a later large request needed (fragmentation). The
replay follows pytorch v2.2.2 c10/cuda/CUDACachingAllocator.cpp with its defaults (expandable
segments off, no max_split_size, no garbage-collection threshold, one stream): round_size,
get_allocation_size, get_free_block (best fit by size, then address), should_split and
free_block/try_merge_blocks (a freed block merges with free neighbours of its own segment; cached
segments are never returned, as no empty_cache or OOM retry happens in the runs replayed).
"""

from __future__ import annotations

import bisect

MIN_BLOCK = 512  # kMinBlockSize: every size is rounded up to a multiple of 512 bytes
SMALL_SIZE = 1 << 20  # kSmallSize: requests up to 1 MiB come from the small pool
SMALL_BUFFER = 2 << 20  # kSmallBuffer: small-pool segments are 2 MiB
LARGE_BUFFER = 20 << 20  # kLargeBuffer: requests under kMinLargeAlloc get a 20 MiB segment
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
ROUND_LARGE = 2 << 20  # kRoundLarge: larger segments are rounded up to 2 MiB


def _segment_size(size: int) -> int:
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class CachingAllocator:
    """Blocks are [size, allocated, segment start, small pool]; addresses of different segments are never adjacent."""

    def __init__(self) -> None:
        self.blocks: dict[int, list] = {}  # start address -> [size, allocated, segment, small]
        self.ends: dict[int, int] = {}  # end address -> start address, to find a block's left neighbour
        self.free: dict[bool, list[tuple[int, int]]] = {True: [], False: []}  # small pool? -> sorted (size, addr)
        self.next_segment = 0
        self.reserved = self.allocated = self.peak_reserved = self.peak_allocated = 0

    def _put(self, addr: int, size: int, allocated: bool, segment: int, small: bool) -> None:
        self.blocks[addr] = [size, allocated, segment, small]
        self.ends[addr + size] = addr

    def malloc(self, nbytes: int) -> int:
        size = max(MIN_BLOCK, -(-nbytes // MIN_BLOCK) * MIN_BLOCK)
        small = size <= SMALL_SIZE
        pool = self.free[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):  # get_free_block: the smallest cached block that fits
            block_size, addr = pool.pop(i)
            segment = self.blocks[addr][2]
        else:  # cudaMalloc a new segment
            block_size = _segment_size(size)
            addr = segment = self.next_segment
            self.next_segment += block_size + (1 << 40)
            self.reserved += block_size
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        remaining = block_size - size
        if remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE:  # should_split
            self._put(addr + size, remaining, False, segment, small)
            bisect.insort(pool, (remaining, addr + size))
            block_size = size
        self._put(addr, block_size, True, segment, small)
        self.allocated += block_size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return addr

    def release(self, addr: int) -> None:
        size, _, segment, small = self.blocks.pop(addr)
        del self.ends[addr + size]
        self.allocated -= size
        pool = self.free[small]
        nxt = self.blocks.get(addr + size)
        if nxt is not None and not nxt[1] and nxt[2] == segment:  # merge with the free block after
            pool.remove((nxt[0], addr + size))
            del self.blocks[addr + size], self.ends[addr + size + nxt[0]]
            size += nxt[0]
        prev = self.ends.get(addr) if addr != segment else None
        if prev is not None and not self.blocks[prev][1]:  # and with the free block before
            pool.remove((self.blocks[prev][0], prev))
            del self.ends[addr]
            addr, size = prev, self.blocks.pop(prev)[0] + size
        self._put(addr, size, False, segment, small)
        bisect.insort(pool, (size, addr))


def replay(events: list[tuple[int, int]]) -> tuple[int, int]:
    """(peak reserved, peak allocated) bytes for events (key, nbytes) allocating and (key, -1) freeing."""
    alloc = CachingAllocator()
    addr: dict[int, int] = {}
    for key, nbytes in events:
        if nbytes >= 0:
            addr[key] = alloc.malloc(nbytes)
        else:
            alloc.release(addr.pop(key))
    return alloc.peak_reserved, alloc.peak_allocated
