"""Prompts made ahead of time, off the event loop.

Building a prompt of an exact token count with a real tokenizer costs milliseconds (an encode per
prompt, tens of ms for 4k-token prompts). Done inside the event loop that timestamps tokens, that would
delay every timestamp behind it, so a background thread keeps a buffer of ready prompts and the
drivers only pop from it. When the buffer runs dry the prompt is made inline and counted in ``stalls``.
"""

from __future__ import annotations

import threading
from collections import deque

from llm_knee.load.driver import PromptFeed
from llm_knee.workload.prompts import Prompt


class PrefetchedPrompts:
    def __init__(self, source: PromptFeed, depth: int) -> None:
        if depth < 1:
            raise ValueError(f"prefetch depth must be at least 1, got {depth}")
        self._source = source
        self._depth = depth
        self._ready: deque[Prompt] = deque()
        self._lock = threading.Lock()  # the source is not thread-safe: one maker at a time
        self._wanted = threading.Condition()
        self._stop = False
        self.stalls = 0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._fill, name="llm-knee-prompts", daemon=True)

    def start(self, prefill: bool = True) -> PrefetchedPrompts:
        if prefill:
            for _ in range(self._depth):
                self._ready.append(self._source.next())
        self._thread.start()
        return self

    def _fill(self) -> None:
        try:
            while True:
                with self._wanted:
                    while not self._stop and len(self._ready) >= self._depth:
                        self._wanted.wait()
                    if self._stop:
                        return
                # Made and queued under one lock, so that an inline make in next() cannot overtake it.
                with self._lock:
                    self._ready.append(self._source.next())
        except BaseException as exc:  # surfaced by next(), never lost in the thread
            self._error = exc

    def next(self) -> Prompt:
        if self._error is not None:
            raise self._error
        try:
            prompt = self._ready.popleft()
        except IndexError:
            with self._lock:  # waits for a prompt being made right now
                if self._ready:
                    prompt = self._ready.popleft()
                else:
                    self.stalls += 1
                    prompt = self._source.next()
        with self._wanted:
            self._wanted.notify()
        return prompt

    def close(self) -> None:
        with self._wanted:
            self._stop = True
            self._wanted.notify()
        self._thread.join(timeout=10)
