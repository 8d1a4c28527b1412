"""What the client raises to its caller.

Request-level faults (refused, reset, timeouts, HTTP errors, short or malformed streams) never raise:
``OpenAIClient.send`` classifies them into the request's ``RequestRecord`` (``ErrorClass``) and the run
goes on. Only problems that make a run pointless before it starts, or a misconfigured client, raise —
all from one hierarchy::

    KneeClientError                 base of everything this package raises
    ├── ClientConfigError           the ClientConfig is invalid (also a ValueError)
    └── TargetError                 the target server cannot be used for a run
        ├── TargetUnreachable       no TCP connection: refused, unknown host, connect timeout
        ├── TargetHTTPError         it answered with an HTTP error status (``status``, ``detail``)
        │   └── TargetAuthError     401/403: the API key is missing or rejected
        └── TargetProtocolError     it answered, but not like an OpenAI-compatible server

aiohttp and ``OSError`` exceptions are translated into these once, in ``openai.py``; nothing above the
client sees a library exception. Every message says what was wrong and what to do about it.
"""

from __future__ import annotations


class KneeClientError(Exception):
    """Base of every exception the client package raises."""


class ClientConfigError(KneeClientError, ValueError):
    """The client configuration is invalid; the message names the field and the accepted values."""


class TargetError(KneeClientError):
    """The target server cannot be used for a run."""


class TargetUnreachable(TargetError):
    """No TCP connection could be made to the target."""


class TargetHTTPError(TargetError):
    """The target answered with an HTTP error status."""

    def __init__(self, message: str, *, status: int, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class TargetAuthError(TargetHTTPError):
    """The target rejected the request for lack of a valid API key (HTTP 401/403)."""


class TargetProtocolError(TargetError):
    """The target answered, but not in the shape an OpenAI-compatible server uses."""
