"""What a prefill/decode protocol is: how its two legs' bodies are made."""

from __future__ import annotations

from typing import Any
from typing import Protocol as _Protocol

from ..core.backend import BackendSpec


class Protocol(_Protocol):
    name: str
    # True: prefill and decode are sent at once (SGLang: they meet in a
    # bootstrap room); False: the decode leg waits for the prefill's answer
    # (vLLM: it carries what the prefill returned).
    concurrent: bool

    def prefill_body(self, body: dict[str, Any], prefill: BackendSpec, room: int) -> dict[str, Any]:
        """The prefill leg's body, from the client's (never changed in place)."""
        ...

    def decode_body(self, body: dict[str, Any], prefill: BackendSpec, room: int, answer: Any) -> dict[str, Any]:
        """The decode leg's body; `answer` is the prefill's parsed JSON answer
        (None for a concurrent protocol, which needs none)."""
        ...

    def handoff(self, answer: Any) -> str | None:
        """Why a prefill's 2xx answer cannot be handed to a decode replica
        (None: it can)."""
        ...
