"""Stored responses end to end: a real router process over two fake backends
— one serving the Responses API natively, one chat-only behind the bridge —
driven by the official openai SDK (`responses.create / retrieve / delete /
input_items.list`). What each backend was sent is read from its own log."""

from __future__ import annotations

import openai
import pytest

from fakes.openai_backend import server_thread
from tests.keys.e2e import create_key, sdk
from tests.support.routerproc import RouterProc, wait_until

CONFIG = """
backends:
  - {{name: native, url: '{native}', models: [a]}}
  - {{name: chat, url: '{chat}', models: [b], responses: bridge}}
health: {{enabled: false}}
retry: {{max_attempts: 1}}
api_keys: {{mode: blocking}}
"""


@pytest.fixture(scope="module")
def backends():
    native = server_thread("native", ["a"]).start()
    chat = server_thread("chat", ["b"], responses_status=404).start()
    yield native, chat
    native.stop()
    chat.stop()


@pytest.fixture(scope="module")
def router(backends):
    native, chat = backends
    proc = RouterProc(CONFIG.format(native=native.url, chat=chat.url)).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(router) -> openai.OpenAI:
    return sdk(router, create_key(router))


@pytest.fixture(scope="module")
def stranger(router) -> openai.OpenAI:
    return sdk(router, create_key(router))


def retrieved(client: openai.OpenAI, response_id: str):
    """The stored response, once its write (after the answer) has landed."""
    return wait_until(lambda: client.responses.retrieve(response_id), 30, what=f"{response_id} stored")


def texts(items) -> list[str]:
    out = []
    for item in items:
        content = item["content"] if isinstance(item, dict) else item.content
        part = content[0] if isinstance(content, list) else content
        out.append(part if isinstance(part, str) else part["text"] if isinstance(part, dict) else part.text)
    return out


def test_a_stored_response_is_retrieved_listed_and_deleted(client):
    made = client.responses.create(model="a", input="hello there", store=True)
    got = client.responses.retrieve(made.id)
    assert got.id == made.id
    assert got.output_text == made.output_text
    assert got.store is True
    items = client.responses.input_items.list(made.id)
    assert [i.role for i in items.data] == ["user"]
    assert texts(items.data) == ["hello there"]
    assert items.first_id == items.last_id == items.data[0].id
    assert items.has_more is False
    client.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.retrieve(made.id)
    assert made.id in err.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="a", input="go on", previous_response_id=made.id)
    assert err.value.body["code"] == "previous_response_not_found"


def test_store_is_the_default(client):
    made = client.responses.create(model="a", input="no store field")
    assert retrieved(client, made.id).id == made.id


def test_a_chain_continues_on_another_backend_with_the_whole_conversation(client, backends):
    """Turn 2 goes to the chat-only backend (through the bridge), turn 3 back
    to the native one: each is sent every earlier turn's input and output."""
    native, chat = backends
    first = client.responses.create(model="a", input="first question", instructions="be brief")
    second = client.responses.create(model="b", input="second question", previous_response_id=first.id)
    messages = chat.requests[-1].json["messages"]
    assert messages == [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "second question"},
    ]  # the first turn's instructions are not carried over, as at OpenAI
    assert second.output_text
    assert retrieved(client, second.id).previous_response_id == first.id

    third = client.responses.create(model="a", input="third question", previous_response_id=second.id)
    sent = native.requests[-1].json
    assert "previous_response_id" not in sent
    assert texts(sent["input"]) == [
        "first question", first.output_text, "second question", second.output_text, "third question"
    ]
    assert [i.get("role") for i in sent["input"]] == ["user", "assistant", "user", "assistant", "user"]
    assert sent["input"][1]["id"] == first.output[0].id  # an upstream's item goes back as it came
    assert "id" not in sent["input"][0]  # the router's own input ids do not
    listed = client.responses.input_items.list(third.id, order="asc")
    assert texts(listed.data) == texts(sent["input"])


def test_another_key_sees_nothing(client, stranger, backends):
    native, _ = backends
    made = client.responses.create(model="a", input="mine")
    retrieved(client, made.id)
    before = len(native.requests)
    with pytest.raises(openai.NotFoundError):
        stranger.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        stranger.responses.input_items.list(made.id)
    with pytest.raises(openai.NotFoundError):
        stranger.responses.delete(made.id)
    for response_id in (made.id, "resp_0123456789abcdef01234567"):
        with pytest.raises(openai.NotFoundError) as err:
            stranger.responses.create(model="a", input="go on", previous_response_id=response_id)
        assert err.value.body["code"] == "previous_response_not_found"
        assert err.value.body["param"] == "previous_response_id"
        assert response_id in err.value.body["message"]
    assert len(native.requests) == before  # refused before any upstream call
    assert client.responses.retrieve(made.id).id == made.id  # the owner's is still there


def test_store_false_is_not_stored(client):
    unstored = client.responses.create(model="a", input="forget me", store=False)
    stored = client.responses.create(model="a", input="keep me")
    retrieved(client, stored.id)  # written in order: the one before would be there by now
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="a", input="go on", previous_response_id=unstored.id)


@pytest.mark.parametrize("model", ["a", "b"])
def test_a_streamed_response_is_stored_from_its_completed_event(client, model):
    events = list(client.responses.create(model=model, input="stream it", stream=True))
    completed = [e for e in events if e.type == "response.completed"]
    assert len(completed) == 1
    final = completed[0].response
    got = retrieved(client, final.id)
    assert got.output_text == final.output_text != ""
    assert texts(client.responses.input_items.list(final.id).data) == ["stream it"]
    follow = client.responses.create(model="a", input="and now?", previous_response_id=final.id)
    assert texts(client.responses.input_items.list(follow.id, order="asc").data) == [
        "stream it", final.output_text, "and now?"
    ]


def test_input_items_are_paged(client):
    given = [{"role": "user", "content": f"part {i}"} for i in range(5)]
    made = client.responses.create(model="a", input=given)
    retrieved(client, made.id)
    first = client.responses.input_items.list(made.id, order="asc", limit=2)
    assert texts(first.data) == ["part 0", "part 1"] and first.has_more
    rest = client.responses.input_items.list(made.id, order="asc", limit=10, after=first.last_id)
    assert texts(rest.data) == ["part 2", "part 3", "part 4"] and not rest.has_more
    newest = client.responses.input_items.list(made.id, limit=2)  # desc by default
    assert texts(newest.data) == ["part 4", "part 3"]
    back = client.responses.input_items.list(made.id, order="asc", limit=2, extra_query={"before": rest.data[-1].id})
    assert texts(back.data) == ["part 2", "part 3"] and back.has_more
    every = [i.id for i in client.responses.input_items.list(made.id, order="asc", limit=2)]  # auto-paging
    assert len(every) == len(set(every)) == 5


def test_bad_list_parameters_are_400(client):
    made = client.responses.create(model="a", input="x")
    retrieved(client, made.id)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.input_items.list(made.id, limit=0)
    assert err.value.body["param"] == "limit"
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.input_items.list(made.id, extra_query={"order": "sideways"})
    assert err.value.body["param"] == "order"


def test_without_a_key_it_is_401(router):
    anonymous = sdk(router, "sk-not-a-key")
    with pytest.raises(openai.AuthenticationError):
        anonymous.responses.retrieve("resp_0123456789abcdef01234567")


def test_a_bad_previous_response_id_is_400(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="a", input="x", extra_body={"previous_response_id": 7})
    assert err.value.body["param"] == "previous_response_id"
