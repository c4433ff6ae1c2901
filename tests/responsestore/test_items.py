"""The pure item rules: what is stored, what an upstream is sent, list pages."""

from __future__ import annotations

from responsestore import items


def ids(page):
    return [item["id"] for item in page[0]], page[1]


def test_a_string_input_is_stored_as_one_user_message_with_an_id():
    (item,) = items.stored_items({"input": "hi"})
    assert item["type"] == "message" and item["role"] == "user"
    assert item["content"] == [{"type": "input_text", "text": "hi"}]
    assert item["id"].startswith("msg_")


def test_given_ids_are_kept_and_missing_ones_given():
    stored = items.stored_items({"input": [
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"type": "message", "id": "msg_mine", "role": "assistant", "content": "earlier"},
    ]})
    assert stored[0]["id"].startswith("fco_")
    assert stored[1]["id"] == "msg_mine"
    assert stored[1]["content"] == [{"type": "output_text", "text": "earlier"}]


def test_a_continuation_sends_earlier_items_then_its_own_without_the_id():
    earlier = [
        {"id": "msg_1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
        {"id": "msg_2", "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "b"}]},
    ]
    body = {"model": "m", "input": "c", "previous_response_id": "resp_1", "instructions": "new"}
    out = items.continued(body, earlier)
    assert "previous_response_id" not in out and out["instructions"] == "new"
    assert out["input"] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
        earlier[1],
        {"type": "message", "role": "user", "content": "c"},
    ]
    assert body["input"] == "c"  # the client's body is left as sent


def test_pages_follow_openai_cursor_rules():
    seq = [{"id": str(i)} for i in range(5)]
    assert ids(items.page(seq, limit=2, order="asc", after=None, before=None)) == (["0", "1"], True)
    assert ids(items.page(seq, limit=2, order="asc", after="1", before=None)) == (["2", "3"], True)
    assert ids(items.page(seq, limit=2, order="asc", after="3", before=None)) == (["4"], False)
    assert ids(items.page(seq, limit=2, order="desc", after=None, before=None)) == (["4", "3"], True)
    assert ids(items.page(seq, limit=2, order="asc", after=None, before="4")) == (["2", "3"], True)
    assert ids(items.page(seq, limit=9, order="asc", after="0", before="3")) == (["1", "2"], False)
    assert ids(items.page(seq, limit=9, order="asc", after="nope", before=None)) == (["0", "1", "2", "3", "4"], False)
