"""Simulated inference engine: scheduler, KV blocks, preemption, and its OpenAI-compatible server."""
