"""Config secrets are masked in answers and restored from the current
document when a masked value comes back in a write."""

from __future__ import annotations

from adminapi.masking import MASK, mask, still_masked, unmask

DOC = {
    "backends": [
        {"name": "a", "url": "http://user:pw@host:8000/v1", "api_key": "sk-literal",
         "headers": {"X-Team": "t1", "Authorization": "Bearer abc"}},
        {"name": "b", "url": "http://host2", "api_key": "${B_KEY}"},
    ],
    "appproxy_router": {"api_secret": "s3cret", "coordinator_url": "http://c:1", "enabled": False},
    "api_keys": {"mode": "blocking"},
    "health": {"interval": 5},
}  # fmt: skip


def test_secrets_and_url_userinfo_are_masked_templates_are_not():
    m = mask(DOC)
    a, b = m["backends"]
    assert a["api_key"] == MASK and a["url"] == "http://***@host:8000/v1"
    assert a["headers"] == {"X-Team": MASK, "Authorization": MASK}
    assert b["api_key"] == "${B_KEY}" and b["url"] == "http://host2"
    assert m["appproxy_router"]["api_secret"] == MASK and m["appproxy_router"]["enabled"] is False
    assert m["api_keys"] == {"mode": "blocking"} and m["health"] == {"interval": 5}
    for secret in ("sk-literal", "user:pw", "Bearer abc", "s3cret", "t1"):
        assert secret not in repr(m)


def test_a_masked_document_written_back_keeps_every_secret():
    edited = mask(DOC)
    edited["backends"].reverse()  # matched by name, not position
    edited["health"]["interval"] = 7
    back = unmask(edited, DOC)
    assert back["backends"][1] == DOC["backends"][0]
    assert back["appproxy_router"]["api_secret"] == "s3cret" and back["health"]["interval"] == 7
    assert still_masked(back) == []


def test_a_new_secret_replaces_the_old_and_an_unmatched_mask_is_reported():
    edited = mask(DOC)
    edited["backends"][0]["api_key"] = "sk-new"
    edited["backends"].append({"name": "c", "url": "http://h", "api_key": MASK})
    back = unmask(edited, DOC)
    assert back["backends"][0]["api_key"] == "sk-new"
    assert still_masked(back) == ["backends[2].api_key"]
