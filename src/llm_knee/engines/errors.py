"""Errors of the engines room. Each message says what went wrong and what to do about it."""

from __future__ import annotations


class EngineError(RuntimeError):
    """An inference engine could not be obtained, started or stopped."""


class EngineNotFoundError(EngineError):
    """No engine binary where one was asked for, and building one was not allowed or not possible."""


class EngineBuildError(EngineError):
    """Building the engine from source failed; the message carries the tail of the build log."""


class EngineStartError(EngineError):
    """The engine process exited or never became healthy; the message carries the tail of its log."""


class ModelWriteError(EngineError):
    """A model file could not be written as asked (bad shape, missing ``gguf`` package, bad vocabulary)."""
