"""The Anthropic Messages surface (CORE-11): Anthropic ↔ OpenAI Chat Completions.

Pure conversion only — no Django, no network, no asyncio. `messages.py` runs
the converted request through the ordinary /v1 pipeline and converts back:

    request   parse, to_openai → Conversion           anthropic_request
              (system and messages: anthropic_content)
    answer    message_from_completion                 anthropic_response
    errors    error_body, error_from_openai, error_message, error_type
    stream    MessageStream (chunk SSE → Anthropic events), message_events
                                                      anthropic_stream
"""

from router.frontends.anthropic_request import IGNORED_FIELDS, Conversion, parse, to_openai
from router.frontends.anthropic_response import (
    ERROR_TYPES,
    STOP_REASONS,
    error_body,
    error_from_openai,
    error_message,
    error_type,
    message_from_completion,
    usage,
)
from router.frontends.anthropic_stream import MessageStream, error_frame, message_events

__all__ = [
    "ERROR_TYPES",
    "IGNORED_FIELDS",
    "STOP_REASONS",
    "Conversion",
    "MessageStream",
    "error_body",
    "error_frame",
    "error_from_openai",
    "error_message",
    "error_type",
    "message_events",
    "message_from_completion",
    "parse",
    "to_openai",
    "usage",
]
