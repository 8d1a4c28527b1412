"""How to reach the target and what to ask of it: one frozen value, validated on construction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from yarl import URL

from llm_knee.client.errors import ClientConfigError

ApiKind = Literal["completions", "chat"]
API_KINDS: tuple[str, ...] = get_args(ApiKind)

# Keys the client owns in the request body: letting extra_body replace them would silently break the
# measurement (a non-streamed answer has no TTFT; another max_tokens breaks the token-count check).
RESERVED_BODY_KEYS = frozenset({"prompt", "messages", "stream", "max_tokens"})

_API_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Connection and request settings for one OpenAI-compatible target.

    ``base_url`` is the server root, with or without a trailing ``/v1`` (``http://127.0.0.1:8000`` and
    ``http://127.0.0.1:8000/v1/`` are the same target); it is stored normalised, without ``/v1``.
    ``ignore_eos`` asks for exactly the requested output length (``ignore_eos: true`` and
    ``min_tokens`` alongside ``max_tokens``): turn it off for servers that reject unknown fields.
    ``extra_body`` is merged into every JSON body (sampling settings, vendor options); ``headers`` are
    sent with every request. ``max_connections`` caps open connections (0 = no cap); the client never
    applies a cap below the concurrency it is built for.
    """

    base_url: str
    api: ApiKind = "completions"
    model: str | None = None
    api_key: str | None = None
    connect_timeout_s: float = 10.0
    first_token_timeout_s: float = 120.0
    total_timeout_s: float = 600.0
    ignore_eos: bool = True
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    max_connections: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", _normalise_base_url(self.base_url))
        if self.api not in API_KINDS:
            raise ClientConfigError(f"api must be one of {', '.join(API_KINDS)}; got {self.api!r}")
        for name in ("connect_timeout_s", "first_token_timeout_s", "total_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not value > 0:
                raise ClientConfigError(f"{name} must be a positive number of seconds; got {value!r}")
        if self.max_connections < 0:
            raise ClientConfigError(
                f"max_connections must be 0 (no cap) or a positive count; got {self.max_connections}"
            )
        clash = RESERVED_BODY_KEYS.intersection(self.extra_body)
        if clash:
            raise ClientConfigError(
                f"extra_body may not set {', '.join(sorted(clash))}: the client sets these itself "
                "(prompt/messages from the workload, max_tokens from the output length, stream always on)"
            )
        if self.model is not None and not self.model.strip():
            raise ClientConfigError("model must be a non-empty name or None (ask the server's /v1/models)")

    @property
    def endpoint_url(self) -> str:
        """The URL requests are POSTed to for this config's API family."""
        return self.base_url + _API_PATHS[self.api]

    @property
    def models_url(self) -> str:
        return self.base_url + "/v1/models"

    @property
    def health_url(self) -> str:
        return self.base_url + "/health"

    def connection_limit(self, concurrency: int) -> int:
        """The connector's limit for a client driven at ``concurrency`` requests in flight (0 = none).

        A cap below the concurrency would queue requests inside the client and report that queueing
        as server latency, so a configured cap is raised to the concurrency when it is lower.
        """
        if self.max_connections == 0:
            return 0
        return max(self.max_connections, concurrency)


def _normalise_base_url(raw: str) -> str:
    text = raw.strip()
    try:
        url = URL(text)
    except (ValueError, TypeError) as exc:
        raise ClientConfigError(f"base_url {raw!r} is not a URL: {exc}") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise ClientConfigError(
            f"base_url {raw!r} must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000"
        )
    if url.query_string or url.fragment:
        raise ClientConfigError(f"base_url {raw!r} must not carry a query or fragment")
    path = url.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return str(url.with_path(path or "/")).rstrip("/")
