"""The error catalogue: every class renders OpenAI's error shape with its status."""

import orjson
import pytest

from router.core.errors import RouterError, catalogue


@pytest.mark.parametrize("cls", catalogue(), ids=lambda c: c.__name__)
def test_every_error_renders_openai_shape(cls):
    exc = cls(param="p")
    body = orjson.loads(exc.to_body())
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"] and isinstance(body["error"]["message"], str)
    assert body["error"]["param"] == "p"
    assert 400 <= exc.status <= 599
    assert exc.to_sse().startswith(b"data: {") and exc.to_sse().endswith(b"\n\n")


def test_catalogue_statuses_are_the_documented_set():
    statuses = {cls.status for cls in catalogue()}
    assert statuses == {400, 401, 403, 404, 405, 409, 413, 415, 429, 500, 502, 503, 504}


def test_codes_are_unique_per_status():
    seen = {}
    for cls in catalogue():
        if cls is RouterError or cls.__name__ == "PathSelectorRejected":
            continue
        key = (cls.status, cls.code)
        assert key not in seen, f"{cls.__name__} repeats {seen.get(key)}"
        seen[key] = cls.__name__
