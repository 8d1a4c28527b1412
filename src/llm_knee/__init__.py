"""llm-knee: find, judge, predict and hold the concurrency knee of LLM inference servers."""

__version__ = "0.1.0"
