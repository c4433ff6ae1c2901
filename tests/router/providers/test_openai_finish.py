"""A whole OpenAI answer is parsed only when its model name must be rewritten (issue 12, defect 3)."""

from __future__ import annotations

import orjson
import pytest

from router.core.backend import BackendSpec
from router.providers.base import Exchange
from router.providers.openai import OPENAI, tail_usage
from router.request import Envelope

USAGE = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8, "prompt_tokens_details": {"cached": 0}}


def env() -> Envelope:
    return Envelope(endpoint="chat/completions", raw=b"{}", body={}, model="m", stream=False, headers={},
                    client_ip="127.0.0.1", host="h", request_id="r")


def exchange(body: bytes, *, rewrite: bool) -> Exchange:
    spec = BackendSpec(name="b", url="http://h:1", models=("m",))
    return Exchange(spec, 200, [], "application/json", body, info={"served": "m-served", "rewrite": rewrite})


def answer(model: str) -> bytes:
    return orjson.dumps({"id": "c", "model": model, "choices": [{"message": {"content": "usage"}}], "usage": USAGE})


def test_an_answer_without_rewrite_is_relayed_as_the_same_bytes():
    body = answer("m")
    out, info = OPENAI.finish(exchange(body, rewrite=False), env())
    assert out is body  # no parse, no dump, no copy
    assert info["usage"] == USAGE


def test_a_rewritten_answer_gets_the_clients_name_once():
    out, info = OPENAI.finish(exchange(answer("m-served"), rewrite=True), env())
    assert orjson.loads(out)["model"] == "m"
    assert info["usage"] == USAGE


@pytest.mark.parametrize(
    "body, usage",
    [
        (b'{"usage": null}', None),
        (b'{"a": 1}', None),
        (b'{"usage":{"p":1},"data":[{"x":"usage"}]}', {"p": 1}),
        (b'{"usage" :\n {"p": {"q": {"r": 1}}, "s": 2}}', {"p": {"q": {"r": 1}}, "s": 2}),
        (b'{"usage": {"p": 1', None),
    ],
)
def test_tail_usage(body, usage):
    assert tail_usage(body) == usage
