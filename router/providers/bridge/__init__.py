"""The Responses bridge: `/v1/responses` for providers that speak only Chat Completions.

`provider.py` holds `bridged(inner)`, the wrapper the registry lists (the
package's only module with I/O; this `__init__` does not import it). The
other modules, re-exported here, are pure conversion — no Django, no
network, no asyncio:

    request   Responses body → Chat Completions body   responses_to_chat
    answer    ChatCompletion → Response object          chat_to_response
    stream    chat SSE bytes → Responses SSE events     ResponsesFromChat, SseDecoder

The field policy table (`RESPONSES_POLICY`) maps each known Responses field
to converted / conditional / ignored / unsupported (docs/providers/responses-bridge.md).
"""

from router.providers.bridge.answer import chat_to_response, usage_of
from router.providers.bridge.policy import RESPONSES_POLICY
from router.providers.bridge.request import responses_to_chat
from router.providers.bridge.stream import ResponsesFromChat, SseDecoder, SseError

__all__ = [
    "RESPONSES_POLICY",
    "ResponsesFromChat",
    "SseDecoder",
    "SseError",
    "chat_to_response",
    "responses_to_chat",
    "usage_of",
]
