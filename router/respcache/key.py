"""What a cache entry is named by, and which requests may have one. Pure.

The name is a 16-byte BLAKE2b digest of the endpoint, the client-facing
model, the model routed to, the scope (the caller's key id under `scope:
key`, "" under `global`) and the request body in canonical form: orjson with
sorted keys, so key order and whitespace do not split entries, and without
the fields that only say how the answer travels (`stream`, `stream_options`),
so a streamed and a whole request share one entry.
"""

from __future__ import annotations

from hashlib import blake2b
from typing import Any

import orjson

# The endpoints an answer is cached for (the Anthropic door's is "messages").
ENDPOINTS = frozenset({"chat/completions", "completions", "embeddings", "responses", "messages"})

# How the answer travels, not what it says.
TRANSPORT_FIELDS = ("stream", "stream_options")

# Request Cache-Control directives (RFC 9111 §5.2.1).
NO_CACHE = "no-cache"  # do not answer from the cache, but store the answer
NO_STORE = "no-store"  # neither read nor write


def directive(cache_control: str | None) -> str:
    """The directive of a request's Cache-Control that concerns the cache:
    NO_STORE, NO_CACHE, or "" (no-store wins when both are given)."""
    if not cache_control:
        return ""
    value = cache_control.lower()
    if NO_STORE in value:
        return NO_STORE
    if NO_CACHE in value:
        return NO_CACHE
    return ""


def deterministic(endpoint: str, body: dict[str, Any]) -> bool:
    """Whether the request asks for an answer meant to repeat: one choice,
    at temperature 0, or with no temperature but a seed. Embeddings always are."""
    if endpoint == "embeddings":
        return True
    n = body.get("n")
    if n is not None and n != 1:
        return False
    temperature = body.get("temperature")
    if temperature is None:
        return body.get("seed") is not None
    return temperature == 0 and not isinstance(temperature, bool)


def digest(endpoint: str, model: str, target: str, scope: str, body: dict[str, Any]) -> bytes:
    """The entry's name (raises TypeError/orjson.JSONEncodeError for a body
    orjson cannot write back, which the caller treats as not cacheable)."""
    if "stream" in body or "stream_options" in body:
        body = {k: v for k, v in body.items() if k not in TRANSPORT_FIELDS}
    h = blake2b(digest_size=16)
    h.update(f"{endpoint}\0{model}\0{target}\0{scope}\0".encode("utf-8", "surrogatepass"))
    h.update(orjson.dumps(body, option=orjson.OPT_SORT_KEYS))
    return h.digest()


def model_tag(model: str) -> str:
    """The short name of a model in the Redis keys (purge by model scans it)."""
    return blake2b(model.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
