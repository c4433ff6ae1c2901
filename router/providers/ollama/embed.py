"""Embeddings ↔ Ollama `/api/embed`.

Ollama embeds text only, so token-id inputs are unsupported. A base64
`encoding_format` is produced here, as OpenAI does: little-endian float32.
"""

from __future__ import annotations

import base64
import struct

from router.core.errors import InvalidRequest, UnsupportedParameter
from router.providers.ollama.common import (
    Conversion,
    Ledger,
    apply_policy,
    integer,
    require_object,
    token_counts,
)
from router.providers.ollama.policy import EMBED_POLICY


def embed_request(body: dict, served_model: str) -> Conversion:
    """`/v1/embeddings` body → Ollama `/api/embed` body."""
    require_object(body)
    ledger = Ledger()
    apply_policy(body, EMBED_POLICY, ledger, extensions=frozenset())
    text = body.get("input")
    if isinstance(text, list):
        if not text:
            raise InvalidRequest("'input' must not be empty.", param="input")
        if not all(isinstance(t, str) for t in text):
            if all(isinstance(t, int | list) for t in text):
                raise UnsupportedParameter(
                    "Token-id input is not supported by this model's provider; send text.",
                    param="input",
                )
            raise InvalidRequest("'input' must be a string or a list of strings.", param="input")
    elif not isinstance(text, str):
        raise InvalidRequest("'input' must be a string or a list of strings.", param="input")
    if body.get("encoding_format") not in (None, "float", "base64"):
        raise InvalidRequest("'encoding_format' must be 'float' or 'base64'.", param="encoding_format")
    request: dict = {"model": served_model, "input": text}
    dimensions = integer(body, "dimensions")
    if dimensions is not None:
        request["dimensions"] = dimensions
    return ledger.done(request)


def _base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def embeddings(resp: dict, *, model: str, encoding_format: str | None) -> dict:
    """Ollama `{embeddings: [[…]]}` → an OpenAI embedding list."""
    vectors = resp.get("embeddings") or []
    as_base64 = encoding_format == "base64"
    data = [
        {"object": "embedding", "index": i, "embedding": _base64(v) if as_base64 else v} for i, v in enumerate(vectors)
    ]
    prompt, _ = token_counts(resp)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
    }
