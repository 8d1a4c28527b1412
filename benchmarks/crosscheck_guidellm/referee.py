"""The server as referee: its own count of generated tokens at any instant, and its own TTFT per request.

Used by ``run.py``. Output throughput: :class:`ServerSampler` polls ``/metrics`` and ``/slots``.
TTFT: :func:`parse_server_log` reads each task's launch time and "prompt eval time" from the
``llama-server`` log, and :func:`log_clock_offset` puts that log's clock on the wall clock.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.request
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

SAMPLE_INTERVAL_S = 0.25
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
GENERATED = "llamacpp:tokens_predicted_total"
PROMPT = "llamacpp:prompt_tokens_total"
CACHED = "llamacpp:prompt_tokens_cached_total"
_LOG_TIME = r"(?P<m>\d+)\.(?P<s>\d{2})\.(?P<ms>\d{3})\.(?P<us>\d{3}) I slot "
LAUNCH_RE = re.compile(_LOG_TIME + r"launch_slot_: id\s+\d+ \| task (?P<task>\d+) \|")
PROMPT_EVAL_RE = re.compile(
    _LOG_TIME + r"print_timing: id\s+\d+ \| task (?P<task>\d+) \| prompt eval time =\s*(?P<eval>[\d.]+) ms"
)


class CrosscheckError(RuntimeError):
    """Something this benchmark needs is missing or a tool failed; the message says what to do."""


@dataclass(frozen=True)
class Sample:
    t: float  # epoch seconds
    generated: float  # tokens generated so far: finished requests' counter + in-flight slots' n_decoded
    prompt: float  # prompt tokens evaluated (cache hits excluded)
    cached: float  # prompt tokens served from the slot cache
    server_cpu: float  # CPU seconds the server process has used
    host_busy: float  # CPU seconds all processes on the host have used (/proc/stat, every core)
    host_steal: float  # CPU seconds the hypervisor gave to someone else while this VM wanted them


def _process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def _host_cpu_s() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole host so far, from the first line of /proc/stat."""
    cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in cpu[:8]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks[:7]) - ticks[3] - ticks[4]) / CLOCK_TICKS, ticks[7] / CLOCK_TICKS


def http_get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body


def _counters(base_url: str) -> dict[str, float]:
    text = http_get(base_url + "/metrics").decode()
    return {s.name: float(s.value) for fam in text_string_to_metric_families(text) for s in fam.samples}


class ServerSampler(threading.Thread):
    """Samples the server's generated-token count at token granularity, several times a second.

    ``llamacpp:tokens_predicted_total`` only grows when a request *ends* (by up to slots x output-len
    tokens at once when a batch finishes together), too coarse to rate a window of a few seconds. Adding
    the ``n_decoded`` of the slots still generating gives the count at the instant ``/slots`` was
    answered. ``/metrics`` is read before and after ``/slots``; when the counter moved in between, a
    request ended mid-sample and the sample is taken again.
    """

    def __init__(self, base_url: str, server_pid: int, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        super().__init__(name="server-sampler", daemon=True)
        self.base_url = base_url
        self.server_pid = server_pid
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self.failures = 0
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def sample_once(self) -> Sample | None:
        for _ in range(5):
            before = _counters(self.base_url)
            t0 = time.time()
            slots = json.loads(http_get(self.base_url + "/slots"))
            t1 = time.time()
            after = _counters(self.base_url)
            if before[GENERATED] != after[GENERATED]:
                continue
            in_flight = sum(
                int(s["next_token"][0]["n_decoded"]) for s in slots if s.get("is_processing") and s.get("next_token")
            )
            return Sample(
                (t0 + t1) / 2, after[GENERATED] + in_flight, after[PROMPT], after.get(CACHED, 0.0),
                _process_cpu_s(self.server_pid), *_host_cpu_s(),
            )  # fmt: skip
        return None

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                sample = self.sample_once()
            except (OSError, ValueError, KeyError):
                sample = None
            if sample is None:
                self.failures += 1
            else:
                with self._lock:
                    self.samples.append(sample)
            self._stop_event.wait(self.interval_s)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)

    def at(self, t: float) -> Sample:
        """The counters at epoch ``t``, interpolated linearly between the two samples around it."""
        with self._lock:
            samples = list(self.samples)
        times = [s.t for s in samples]
        i = bisect_left(times, t)
        if not samples or i == 0 or i == len(samples):
            raise CrosscheckError(f"no server samples around t={t:.3f} (have {len(samples)} samples)")
        a, b = samples[i - 1], samples[i]
        f = (t - a.t) / (b.t - a.t)

        def mix(x: float, y: float) -> float:
            return x + f * (y - x)

        return Sample(
            t, mix(a.generated, b.generated), mix(a.prompt, b.prompt), mix(a.cached, b.cached),
            mix(a.server_cpu, b.server_cpu), mix(a.host_busy, b.host_busy), mix(a.host_steal, b.host_steal),
        )  # fmt: skip

    def wait_past(self, t: float, timeout_s: float = 5.0) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            with self._lock:
                if self.samples and self.samples[-1].t > t:
                    return
            time.sleep(self.interval_s / 2)


@dataclass(frozen=True)
class ServerTask:
    task: int
    launched_s: float  # on the server log's clock (seconds since the server started)
    prompt_eval_ms: float | None  # slot start -> prompt done (= first token sampled); None if never printed


def parse_server_log(text: str) -> list[ServerTask]:
    """Each task's launch time and "prompt eval time" from llama-server's log, in launch order."""
    launched: dict[int, float] = {}
    prompt_ms: dict[int, float] = {}
    for line in text.splitlines():
        if (hit := LAUNCH_RE.match(line)) is not None:
            launched[int(hit["task"])] = _log_seconds(hit)
        elif (hit := PROMPT_EVAL_RE.match(line)) is not None:
            prompt_ms[int(hit["task"])] = float(hit["eval"])
    return [ServerTask(t, at, prompt_ms.get(t)) for t, at in sorted(launched.items(), key=lambda kv: kv[1])]


def _log_seconds(hit: re.Match[str]) -> float:
    return int(hit["m"]) * 60 + int(hit["s"]) + int(hit["ms"]) / 1e3 + int(hit["us"]) / 1e6


def log_clock_offset(tasks: list[ServerTask], warm_sent: list[float]) -> float:
    """epoch = log time + offset. A task is launched after it is sent, so each warm-up bounds the offset
    from below; the tightest bound is off by the send-to-launch delay of an idle server (< 1 ms)."""
    if len(tasks) < len(warm_sent):
        raise CrosscheckError(f"the server log shows {len(tasks)} tasks, fewer than the {len(warm_sent)} warm-ups")
    return max(sent - task.launched_s for sent, task in zip(warm_sent, tasks, strict=False))
