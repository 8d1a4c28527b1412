"""The one error type of the catalog: an unknown or malformed hardware, model or dtype name."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import TypeVar

T = TypeVar("T")


class CatalogError(ValueError):
    """An item is not in the catalog (the message lists the closest known names) or a config is unusable."""


def normalize_name(name: str) -> str:
    """Case- and separator-insensitive key: "H100-SXM", "h100_sxm" and "h100 sxm" all become "h100sxm"."""
    return re.sub(r"[^a-z0-9.]", "", name.lower())


def resolve_name(key: str, by_key: Mapping[str, T], aliases: Mapping[str, str]) -> T | None:
    """The item a normalised ``key`` names, directly or through an alias (aliases map to display names)."""
    if key in by_key:
        return by_key[key]
    if key in aliases:
        return by_key[normalize_name(aliases[key])]
    return None


def unknown_item_error(kind: str, name: str, known: Iterable[str]) -> CatalogError:
    """The error for an unknown `kind` named `name`, suggesting the closest of `known` (display names)."""
    known_list = sorted(set(known))
    by_key = {normalize_name(k): k for k in known_list}
    close_keys = difflib.get_close_matches(normalize_name(name), list(by_key), n=5, cutoff=0.4)
    close = [by_key[k] for k in close_keys]
    # difflib misses prefixes ("a100" vs "a10080gsxm"); containment catches them.
    key = normalize_name(name)
    for k, display in by_key.items():
        if key and (key in k or k in key) and display not in close:
            close.append(display)
    hint = f"closest known: {', '.join(close[:6])}" if close else f"known: {', '.join(known_list)}"
    return CatalogError(f"unknown {kind} {name!r}; {hint}")
