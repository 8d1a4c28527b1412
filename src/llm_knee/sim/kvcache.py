"""KV cache accounting in fixed-size blocks, as vLLM's paged attention allocates it.

Only counts are kept (which block holds what does not change any timing). The shared prefix of
prefix-cached requests is held once, reference-counted, while any request using it is running.
"""

from __future__ import annotations


class BlockPool:
    def __init__(self, total_blocks: int, block_size: int) -> None:
        if total_blocks < 1:
            raise ValueError(f"the KV cache must hold at least one block (got {total_blocks})")
        self.total = total_blocks
        self.block_size = block_size
        self.used = 0
        self._prefix_refs = 0
        self._prefix_blocks = 0  # blocks held by the shared prefix while referenced

    @property
    def free(self) -> int:
        return self.total - self.used

    @property
    def usage(self) -> float:
        return self.used / self.total

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def allocate(self, n: int) -> None:
        if n > self.total - self.used:
            raise RuntimeError(f"KV over-allocation: {n} blocks asked, {self.total - self.used} free")
        self.used += n

    def release(self, n: int) -> None:
        self.used -= n
        if self.used < 0:
            raise RuntimeError("KV accounting went negative: a request released blocks it did not hold")

    def prefix_cost(self, blocks: int) -> int:
        """Blocks a new user of the shared prefix would allocate now (0 while already held)."""
        return 0 if self._prefix_refs else blocks

    def acquire_prefix(self, blocks: int) -> None:
        if self._prefix_refs == 0:
            self.allocate(blocks)
            self._prefix_blocks = blocks
        self._prefix_refs += 1

    def release_prefix(self) -> None:
        self._prefix_refs -= 1
        if self._prefix_refs == 0:
            self.release(self._prefix_blocks)
            self._prefix_blocks = 0

    @property
    def prefix_blocks_held(self) -> int:
        return self._prefix_blocks
