"""How to send it: one adapter per API family, each turning one request into one RequestRecord."""

from llm_knee.client.config import ApiKind, ClientConfig
from llm_knee.client.errors import (
    ClientConfigError,
    KneeClientError,
    TargetAuthError,
    TargetError,
    TargetHTTPError,
    TargetProtocolError,
    TargetUnreachable,
)
from llm_knee.client.openai import OpenAIClient
from llm_knee.client.stream import TokenCounter

__all__ = [
    "ApiKind",
    "ClientConfig",
    "ClientConfigError",
    "KneeClientError",
    "OpenAIClient",
    "TargetAuthError",
    "TargetError",
    "TargetHTTPError",
    "TargetProtocolError",
    "TargetUnreachable",
    "TokenCounter",
]
