"""The Anthropic provider: OpenAI requests ↔ Anthropic's Messages API.

`provider.py` is the provider the registry lists (`ANTHROPIC`: dispatch,
probe, model listing); with `door.py` (the Anthropic door's own requests, sent
and answered as is) and `upstream.py` (URL, headers) it is the I/O side. The
other modules, re-exported here, are pure conversion — no Django, no network,
no asyncio, and this `__init__` imports none of the three.

    /v1/chat/completions → /v1/messages   chat_request, chat_completion, ChatStream
    count_tokens         → /v1/messages/count_tokens   count_request
    /v1/models           ← /v1/models     listed_models
    errors                                error_from_anthropic, anthropic_error, event_error
    SSE framing                           SseDecoder; UsageWatch (an untranslated stream's usage)

The field policy table (`CHAT_POLICY`) maps each known field to converted /
conditional / ignored / unsupported.
"""

from router.providers.anthropic.answer import FINISH, chat_completion, finish_reason, usage_of
from router.providers.anthropic.common import Conversion, new_id
from router.providers.anthropic.messages import image_source
from router.providers.anthropic.policy import CHAT_POLICY, EXTENSIONS
from router.providers.anthropic.request import DEFAULT_MAX_TOKENS, chat_request, count_request
from router.providers.anthropic.stream import ChatStream, UsageWatch
from router.providers.anthropic.wire import (
    SseDecoder,
    SseError,
    anthropic_error,
    error_event,
    error_from_anthropic,
    error_parts,
    event_error,
    listed_models,
)

__all__ = [
    "CHAT_POLICY",
    "DEFAULT_MAX_TOKENS",
    "EXTENSIONS",
    "FINISH",
    "ChatStream",
    "Conversion",
    "SseDecoder",
    "SseError",
    "UsageWatch",
    "anthropic_error",
    "chat_completion",
    "chat_request",
    "count_request",
    "error_event",
    "error_from_anthropic",
    "error_parts",
    "event_error",
    "finish_reason",
    "image_source",
    "listed_models",
    "new_id",
    "usage_of",
]
