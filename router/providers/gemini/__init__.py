"""The Gemini provider: OpenAI requests ↔ Google's Generative Language API (v1beta).

`provider.py` is the provider the registry lists (`GEMINI`: dispatch, probe,
model listing); it is the package's only module with I/O. The other modules,
re-exported here, are pure conversion — no Django, no network, no asyncio,
and this `__init__` does not import `provider`.

    /v1/chat/completions → models/{m}:generateContent, :streamGenerateContent?alt=sse
                                                  chat_request, chat_completion, ChatStream
    /v1/embeddings       → :embedContent / :batchEmbedContents   embed_request, embeddings
    count_tokens         → :countTokens           count_request, token_count
    /v1/models           ← GET models             listed_models
    errors                                        error_from_gemini, Blocked
    SSE framing                                   SseDecoder

The field policy tables (`CHAT_POLICY`, `EMBED_POLICY`) map each known
field to converted / conditional / ignored / unsupported.
"""

from router.providers.gemini.chat import chat_completion, chat_request, count_request, token_count
from router.providers.gemini.chat_stream import ChatStream
from router.providers.gemini.common import EXTENSION_FIELDS, finish_reason, usage
from router.providers.gemini.embed import embed_request, embeddings
from router.providers.gemini.policy import CHAT_POLICY, EMBED_POLICY
from router.providers.gemini.wire import (
    Blocked,
    SseDecoder,
    SseError,
    api_base,
    error_from_gemini,
    listed_models,
    model_path,
)

__all__ = [
    "CHAT_POLICY",
    "EMBED_POLICY",
    "EXTENSION_FIELDS",
    "Blocked",
    "ChatStream",
    "SseDecoder",
    "SseError",
    "api_base",
    "chat_completion",
    "chat_request",
    "count_request",
    "embed_request",
    "embeddings",
    "error_from_gemini",
    "finish_reason",
    "listed_models",
    "model_path",
    "token_count",
    "usage",
]
