"""Scheduling policies: the order of the waiting queue and who is preempted when KV runs out.

The one extension point is ``SCHEDULING_POLICIES`` at the bottom: a name -> factory dict.
Both policies follow vLLM's V1 scheduler: FCFS admits in arrival order and preempts the most recently
admitted running request; priority admits by (priority, arrival) and preempts the running request
with the largest (priority, arrival). A preempted request goes back ahead of later arrivals.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Protocol

from llm_knee.sim.request import SimRequest


class SchedulingPolicy(Protocol):
    """A waiting queue plus the rule for picking a preemption victim."""

    def __len__(self) -> int: ...

    def push(self, req: SimRequest) -> None:
        """A new arrival."""

    def push_preempted(self, req: SimRequest) -> None:
        """A request that was running and lost its KV: it goes back ahead of later arrivals."""

    def peek(self) -> SimRequest | None: ...

    def pop(self) -> SimRequest: ...

    def remove(self, req: SimRequest) -> bool:
        """Drop a waiting request (aborted by its client). False when it was not waiting."""

    def victim(self, running: dict[str, SimRequest]) -> SimRequest:
        """The running request to preempt (``running`` is in admission order, never empty)."""


class FcfsPolicy:
    def __init__(self) -> None:
        self._queue: deque[SimRequest] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def push(self, req: SimRequest) -> None:
        self._queue.append(req)

    def push_preempted(self, req: SimRequest) -> None:
        self._queue.appendleft(req)

    def peek(self) -> SimRequest | None:
        return self._queue[0] if self._queue else None

    def pop(self) -> SimRequest:
        return self._queue.popleft()

    def remove(self, req: SimRequest) -> bool:
        try:
            self._queue.remove(req)
        except ValueError:
            return False
        return True

    def victim(self, running: dict[str, SimRequest]) -> SimRequest:
        return next(reversed(running.values()))


class PriorityPolicy:
    """Lower ``priority`` first, then earlier arrival. Removal is lazy (heap entries marked dead)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, SimRequest]] = []
        self._live: dict[str, tuple[int, int, SimRequest]] = {}

    def __len__(self) -> int:
        return len(self._live)

    def push(self, req: SimRequest) -> None:
        entry = (req.priority, req.seqno, req)
        self._live[req.id] = entry
        heapq.heappush(self._heap, entry)

    def push_preempted(self, req: SimRequest) -> None:
        # Its (priority, arrival) key already puts it ahead of every later arrival of equal priority.
        self.push(req)

    def _drop_dead(self) -> None:
        heap = self._heap
        while heap and self._live.get(heap[0][2].id) is not heap[0]:
            heapq.heappop(heap)

    def peek(self) -> SimRequest | None:
        self._drop_dead()
        return self._heap[0][2] if self._heap else None

    def pop(self) -> SimRequest:
        self._drop_dead()
        entry = heapq.heappop(self._heap)
        del self._live[entry[2].id]
        return entry[2]

    def remove(self, req: SimRequest) -> bool:
        return self._live.pop(req.id, None) is not None

    def victim(self, running: dict[str, SimRequest]) -> SimRequest:
        return max(running.values(), key=lambda r: (r.priority, r.seqno))


SCHEDULING_POLICIES: dict[str, Callable[[], SchedulingPolicy]] = {
    "fcfs": FcfsPolicy,
    "priority": PriorityPolicy,
}
