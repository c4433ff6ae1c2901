"""The Ollama provider (MIX-5): OpenAI requests ↔ Ollama's native API.

`provider.py` is the provider the registry lists (`OLLAMA`: dispatch, probe,
model listing); it is the package's only module with I/O. The other modules,
re-exported here, are pure conversion — no Django, no network, no asyncio,
and this `__init__` does not import `provider`. The provider
sends `*_request(...).request` to Ollama, records `ignored_fields`/`notes` in
the observation, and turns Ollama's answers back into exact OpenAI shapes
with the functions and stream classes below.

    /v1/chat/completions → /api/chat   chat_request, chat_completion, ChatStream
    /v1/responses        → /api/chat   responses_request, response_object, ResponsesStream
    /v1/embeddings       → /api/embed  embed_request, embeddings
    /v1/models           ← /api/tags   models_from_tags
    errors                             error_from_ollama, ollama_error
    NDJSON framing                     NdjsonDecoder

The field policy tables (`CHAT_POLICY`, `RESPONSES_POLICY`, `EMBED_POLICY`)
map each known field to converted / conditional / ignored / unsupported.
"""

from router.providers.ollama.chat import chat_completion, chat_request
from router.providers.ollama.chat_stream import ChatStream
from router.providers.ollama.common import EXTENSION_OPTIONS, Conversion
from router.providers.ollama.embed import embed_request, embeddings
from router.providers.ollama.policy import CHAT_POLICY, EMBED_POLICY, RESPONSES_POLICY
from router.providers.ollama.response_object import response_object
from router.providers.ollama.responses import responses_request
from router.providers.ollama.responses_stream import ResponsesStream
from router.providers.ollama.wire import (
    NdjsonDecoder,
    NdjsonError,
    error_from_ollama,
    models_from_tags,
    ollama_error,
)

__all__ = [
    "CHAT_POLICY",
    "EMBED_POLICY",
    "EXTENSION_OPTIONS",
    "RESPONSES_POLICY",
    "ChatStream",
    "Conversion",
    "NdjsonDecoder",
    "NdjsonError",
    "ResponsesStream",
    "chat_completion",
    "chat_request",
    "embed_request",
    "embeddings",
    "error_from_ollama",
    "models_from_tags",
    "ollama_error",
    "response_object",
    "responses_request",
]
