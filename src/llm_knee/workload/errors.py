"""Errors of the workload room. All are ``ValueError``s carrying a message meant for the user."""

from __future__ import annotations


class WorkloadError(ValueError):
    """A workload cannot be built as asked; the message says what was wrong and what to do."""


class TokenizerError(WorkloadError):
    """The tokenizer path is missing, unreadable, or the tokenizer cannot build the prompts asked for."""


class PromptFileError(WorkloadError):
    """A prompt file is missing, unreadable or has bad lines; the message names the file and lines."""
