"""What to watch alongside: GPU, host, server /metrics and client self-check samplers.

Modules: ``source`` (the Sampler protocol, SourceStatus), ``gpu`` (NVML through NvmlBackend: real and
replay), ``host`` (/proc), ``server`` (Prometheus /metrics of vLLM, SGLang, TGI, llama.cpp), ``client``
(event-loop lag), ``sampler`` (TelemetryCollector, default_samplers), ``summarize`` (per-level
summaries, pure), ``names`` (our normalised metric names).
"""
