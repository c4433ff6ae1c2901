"""Checks that an object is exactly an official OpenAI SDK type: it validates,
carries no field the type does not declare (at any depth) but the one
extension the router sends (`reasoning_content`, vLLM's field for reasoning
text, on a chat message or delta, a string), and dumps back to itself
unchanged."""

from __future__ import annotations

from typing import Any

import orjson
import pydantic
from openai.types.responses import ResponseStreamEvent

_EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)


# The fields beyond the OpenAI types the router may send, by type name.
EXTENSIONS = {"ChatCompletionMessage": {"reasoning_content"}, "ChoiceDelta": {"reasoning_content"}}


def no_extras(value: Any, path: str = "$") -> None:
    if isinstance(value, pydantic.BaseModel):
        extra = dict(value.model_extra or {})
        for name in EXTENSIONS.get(type(value).__name__, ()):
            if name in extra:
                assert isinstance(extra.pop(name), str), f"{path}.{name} is not a string"
        assert not extra, f"{path} carries fields the OpenAI type lacks: {sorted(extra)}"
        for name in type(value).model_fields:
            no_extras(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            no_extras(item, f"{path}[{i}]")


def exact(model: type[pydantic.BaseModel], data: dict) -> pydantic.BaseModel:
    obj = model.model_validate(data)
    no_extras(obj)
    dumped = obj.model_dump(mode="json", exclude_unset=True, by_alias=True)
    assert dumped == orjson.loads(orjson.dumps(data))
    return obj


def exact_event(data: dict) -> Any:
    event = _EVENTS.validate_python(data)
    assert event.type == data["type"]
    no_extras(event)
    dumped = event.model_dump(mode="json", exclude_unset=True, by_alias=True)
    assert dumped == orjson.loads(orjson.dumps(data))
    return event


def chat_sse(frames: list[bytes]) -> list[Any]:
    """`data: …` frames → parsed JSON (the `[DONE]` sentinel stays a string)."""
    out = []
    for frame in frames:
        assert frame.startswith(b"data: ") and frame.endswith(b"\n\n"), frame
        payload = frame[len(b"data: ") : -2]
        assert b"\n" not in payload
        out.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return out


def responses_sse(frames: list[bytes]) -> list[dict]:
    """`event: …\\ndata: …` frames → parsed JSON; the event name must match."""
    out = []
    for frame in frames:
        assert frame.endswith(b"\n\n"), frame
        head, data = frame[:-2].split(b"\n")
        assert head.startswith(b"event: ") and data.startswith(b"data: ")
        obj = orjson.loads(data[len(b"data: ") :])
        assert obj["type"] == head[len(b"event: ") :].decode()
        out.append(obj)
    return out
