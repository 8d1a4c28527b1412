"""serve-sim's /metrics, with vLLM's metric names, in a registry owned by one app.

Values are read from the engine and from plain counters at scrape time (a custom collector), so the
per-token path costs one list increment, not a locked prometheus-client call.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

# vLLM's bucket boundaries (vllm/v1/metrics/loggers.py), in seconds.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)


class Histogram:
    """Cumulative-on-export histogram: observe() is a bisect and an increment."""

    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # last: above every bound (+Inf only)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def family(self, name: str, doc: str, labels: dict[str, str]) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(name, doc, labels=list(labels))
        running = 0
        buckets: list[tuple[str, float]] = []
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            buckets.append((repr(float(bound)), running))
        buckets.append(("+Inf", self.count))
        fam.add_metric(list(labels.values()), buckets, self.total)
        return fam


@dataclass
class ServerMetrics:
    """Everything /metrics shows that the engine does not already count."""

    ttft: Histogram
    itl: Histogram
    e2e: Histogram
    loop_lag: Histogram
    requests_success: int = 0
    requests_failed: int = 0  # faults injected, aborted by the client
    prompt_tokens: int = 0
    generation_tokens: int = 0

    @classmethod
    def new(cls) -> ServerMetrics:
        return cls(Histogram(TTFT_BUCKETS), Histogram(ITL_BUCKETS), Histogram(E2E_BUCKETS), Histogram(LAG_BUCKETS))


@dataclass(frozen=True)
class EngineGauges:
    running: Callable[[], int]
    waiting: Callable[[], int]
    kv_usage: Callable[[], float]
    preemptions: Callable[[], int]


class VllmCollector(Collector):
    def __init__(self, model_name: str, gauges: EngineGauges, metrics: ServerMetrics) -> None:
        self._labels = {"model_name": model_name, "engine": "0"}
        self._g = gauges
        self._m = metrics

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        fam = GaugeMetricFamily(name, doc, labels=list(self._labels))
        fam.add_metric(list(self._labels.values()), value)
        return fam

    def _counter(self, name: str, doc: str, value: float, extra: dict[str, str] | None = None) -> CounterMetricFamily:
        labels = {**self._labels, **(extra or {})}
        fam = CounterMetricFamily(name, doc, labels=list(labels))
        fam.add_metric(list(labels.values()), value)
        return fam

    def collect(self) -> Iterator[Metric]:
        g, m, lab = self._g, self._m, self._labels
        usage = g.kv_usage()
        yield self._gauge("vllm:num_requests_running", "Number of requests in model execution batches.", g.running())
        yield self._gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", g.waiting())
        yield self._gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", usage)
        yield self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage)
        yield self._counter("vllm:num_preemptions", "Cumulative number of preemptions.", g.preemptions())
        yield self._counter("vllm:prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens)
        yield self._counter("vllm:generation_tokens", "Number of generation tokens processed.", m.generation_tokens)
        yield self._counter(
            "vllm:request_success", "Count of successfully processed requests.", m.requests_success,
            {"finished_reason": "length"},
        )  # fmt: skip
        yield m.ttft.family("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lab)
        yield m.itl.family("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", lab)
        yield m.itl.family("vllm:time_per_output_token_seconds", "Histogram of time per output token.", lab)
        yield m.e2e.family("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", lab)
        yield m.loop_lag.family(
            "sim_event_loop_lag_seconds", "serve-sim's own event-loop lag (timer lateness), seconds.", lab
        )
        yield self._counter(
            "sim_requests_failed", "Requests ended by an injected fault or by the client.", m.requests_failed
        )


def build_registry(model_name: str, gauges: EngineGauges, metrics: ServerMetrics) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(VllmCollector(model_name, gauges, metrics))
    return registry
