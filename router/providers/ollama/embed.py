"""Embeddings ↔ Ollama `/api/embed`.

Ollama embeds text only, so token-id inputs are unsupported. A base64
`encoding_format` is produced here, as OpenAI does: little-endian float32.
"""

from __future__ import annotations

from router.providers.normalized import base64_vector, embed_input
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
    text = embed_input(body)
    request: dict = {"model": served_model, "input": text}
    dimensions = integer(body, "dimensions")
    if dimensions is not None:
        request["dimensions"] = dimensions
    return ledger.done(request)


def embeddings(resp: dict, *, model: str, encoding_format: str | None) -> dict:
    """Ollama `{embeddings: [[…]]}` → an OpenAI embedding list."""
    vectors = resp.get("embeddings") or []
    as_base64 = encoding_format == "base64"
    data = [
        {"object": "embedding", "index": i, "embedding": base64_vector(v) if as_base64 else v}
        for i, v in enumerate(vectors)
    ]
    prompt, _ = token_counts(resp)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
    }
