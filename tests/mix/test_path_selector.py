"""No client field chooses the execution path (seed 002 S06; MIX-2).

`metadata.iop_response_mode` and its equivalents are refused with 400
invalid_request_error while the envelope is parsed: before selection, so no
provider of any kind receives anything.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from router.request import path_selector
from tests.mix.conftest import observation, rid

SELECTORS = [
    ({"metadata": {"iop_response_mode": "passthrough"}}, "metadata.iop_response_mode"),
    ({"metadata": {"iop_response_mode": "normalized"}}, "metadata.iop_response_mode"),
    ({"metadata": {"iop_response_mode": "transformed", "workspace": "w"}}, "metadata.iop_response_mode"),
    ({"metadata": {"iop_response_mode": None}}, "metadata.iop_response_mode"),
    ({"metadata": {"response_mode": "passthrough"}}, "metadata.response_mode"),
    ({"metadata": {"execution_path": "normalized"}}, "metadata.execution_path"),
    ({"metadata": {"iop_execution_path": "normalized"}}, "metadata.iop_execution_path"),
    ({"iop_response_mode": "passthrough"}, "iop_response_mode"),
    ({"response_mode": "normalized"}, "response_mode"),
    ({"execution_path": "passthrough"}, "execution_path"),
]


def _body(endpoint: str, model: str, extra: dict, stream: bool) -> dict:
    if endpoint == "chat/completions":
        base = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    else:
        base = {"model": model, "input": "hi"}
    return {**base, **extra, "stream": stream}


@pytest.mark.parametrize("endpoint", ["chat/completions", "responses"])
@pytest.mark.parametrize("model", ["mix", "olla", "pass"])
def test_path_selector_is_rejected_before_dispatch(stack, endpoint, model):
    """S06: every selector spelling, on every kind of group, streamed or not: 400
    invalid_request_error naming the field, and no provider sees a request."""
    before = stack.arrived()
    with httpx.Client(base_url=stack.router.url, timeout=30) as http:
        for extra, field in SELECTORS:
            for stream in (False, True):
                r = http.post(f"/v1/{endpoint}", json=_body(endpoint, model, extra, stream))
                assert r.status_code == 400, (extra, r.text)
                assert r.headers["content-type"].startswith("application/json")
                error = r.json()["error"]
                assert error["type"] == "invalid_request_error"
                assert error["param"] == field
                assert field in error["message"]
    assert stack.arrived() == before


def test_sdk_sees_a_bad_request_and_the_rejection_is_observed(stack):
    client = stack.client()
    before = stack.arrived()
    request_id = rid()
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="mix",
            messages=[{"role": "user", "content": "hi"}],
            metadata={"iop_response_mode": "passthrough"},
            extra_headers={"x-request-id": request_id},
        )
    assert err.value.status_code == 400
    assert err.value.body["type"] == "invalid_request_error"
    assert err.value.body["param"] == "metadata.iop_response_mode"
    assert stack.arrived() == before
    obs = observation(stack.router, request_id)
    assert obs["status"] == 400 and obs["error"] == "invalid_request"
    # Refused while parsing: no provider was selected, no queue decision made.
    assert "provider" not in obs and "queue" not in obs and "path" not in obs


def test_ordinary_metadata_is_not_a_selector():
    """Routing/operation metadata (workspace, task_id) is not a path selector."""
    assert path_selector({"metadata": {"workspace": "w", "task_id": "t"}}) is None
    assert path_selector({"metadata": "not-an-object"}) is None
    assert path_selector({}) is None
