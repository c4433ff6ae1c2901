"""Embeddings ↔ Gemini `embedContent` (one string) / `batchEmbedContents` (a list).

Gemini embeds text and reports no token usage for it: `usage` is the
router's estimate (one token per 4 characters, rounded up, per input; the
same rule as `providers.estimate`). A base64 `encoding_format` is produced
here, as OpenAI does: little-endian float32.
"""

from __future__ import annotations

from router.core.errors import InvalidRequest
from router.providers.estimate import CHARS_PER_TOKEN
from router.providers.gemini.common import apply_policy
from router.providers.gemini.policy import EMBED_POLICY
from router.providers.gemini.wire import model_path
from router.providers.normalized import Conversion, Ledger, base64_vector, embed_input, integer, require_object


def embed_request(body: dict, served_model: str) -> tuple[str, Conversion]:
    """`/v1/embeddings` body → (Gemini method, its body)."""
    require_object(body)
    ledger = Ledger()
    apply_policy(body, EMBED_POLICY, ledger, extensions=frozenset())
    text = embed_input(body)
    dimensions = integer(body, "dimensions")
    if dimensions is not None and dimensions < 1:
        raise InvalidRequest("'dimensions' must be at least 1.", param="dimensions")

    def one(value: str) -> dict:
        request: dict = {"content": {"parts": [{"text": value}]}}
        if dimensions is not None:
            request["outputDimensionality"] = dimensions
        return request

    if isinstance(text, str):
        return "embedContent", ledger.done(one(text))
    model = model_path(served_model)
    return "batchEmbedContents", ledger.done({"requests": [{"model": model, **one(t)} for t in text]})


def estimated_tokens(body: dict) -> int:
    text = body.get("input")
    items = [text] if isinstance(text, str) else [t for t in text or () if isinstance(t, str)]
    return sum(-(-len(t) // CHARS_PER_TOKEN) for t in items)


def embeddings(resp: dict, *, model: str, request_body: dict) -> dict:
    """`{embedding: {values}}` or `{embeddings: [{values}]}` → an OpenAI embedding list."""
    if isinstance(resp.get("embedding"), dict):
        entries = [resp["embedding"]]
    else:
        entries = [e for e in resp.get("embeddings") or () if isinstance(e, dict)]
    vectors = [e.get("values") or [] for e in entries]
    expected = 1 if isinstance(request_body.get("input"), str) else len(request_body.get("input") or ())
    if len(vectors) != expected:
        raise ValueError(f"Gemini answered {len(vectors)} embeddings for {expected} inputs")
    as_base64 = request_body.get("encoding_format") == "base64"
    data = [
        {"object": "embedding", "index": i, "embedding": base64_vector(v) if as_base64 else v}
        for i, v in enumerate(vectors)
    ]
    tokens = estimated_tokens(request_body)
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
