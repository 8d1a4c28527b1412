"""Capacity arithmetic: memory, KV cache, roofline step times, fleet sizing, edge devices."""
