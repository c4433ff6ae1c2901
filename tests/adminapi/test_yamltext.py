"""The config's YAML masked and unmasked in place (adminapi/yamltext.py):
comments and layout kept, the result always loading as the masked (or
restored) document, and a fallback to a plain dump where the text cannot be
edited in place."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from adminapi.masking import MASK, mask, unmask
from adminapi.yamltext import dump, masked_text, restored_text

TEXT = """\
# the team's router — keep this comment
backends:
  - name: a            # the big one
    url: http://user:hunter2@10.0.0.1:8000/v1
    api_key: "sk-literal-secret"
    headers: {X-Team: blue, Authorization: Bearer sk-h}
    models: [m1, m2]

  - {name: b, url: 'http://10.0.0.2:8000', api_key: '${B_KEY}'}
appproxy:
  jwt_secret: |
    line one
    line two
  api_port: 8080   # the coordinator's
"""


def test_secrets_are_masked_in_place_and_everything_else_is_kept():
    out = masked_text(TEXT)
    assert yaml.safe_load(out) == mask(yaml.safe_load(TEXT))
    for secret in ("hunter2", "sk-literal-secret", "sk-h", "line one"):
        assert secret not in out
    for kept in ("# the team's router — keep this comment", "# the big one", "# the coordinator's",
                 "models: [m1, m2]\n\n  - {name: b", "api_key: '${B_KEY}'", "X-Team: '***'"):
        assert kept in out
    assert "api_key: '***'" in out and "url: 'http://***@10.0.0.1:8000/v1'" in out
    assert "jwt_secret: '***'\n  api_port: 8080" in out


def test_a_masked_text_sent_back_gets_its_secrets_back_in_place():
    current = yaml.safe_load(TEXT)
    edited = masked_text(TEXT).replace("models: [m1, m2]", "models: [m1, m2, m3]  # m3 added")
    sent = yaml.safe_load(edited)
    restored = unmask(sent, current)
    out = restored_text(edited, restored)
    assert yaml.safe_load(out) == restored
    assert yaml.safe_load(out)["backends"][0]["api_key"] == "sk-literal-secret"
    assert yaml.safe_load(out)["appproxy"]["jwt_secret"] == "line one\nline two\n"
    assert "# the team's router — keep this comment" in out and "# m3 added" in out and "# the big one" in out
    assert MASK not in out


def test_what_cannot_be_edited_in_place_is_dumped_whole():
    # One anchor under a secret key and under a plain one: masking the
    # anchor's text would mask both; the check sees it and dumps instead.
    text = "shared: &s plain-value\napi_key: *s\n"
    out = masked_text(text)
    assert yaml.safe_load(out) == mask(yaml.safe_load(text)) and out == dump(mask(yaml.safe_load(text)))
    duplicate = "a: 1\na: 2\ntoken: x\n"
    assert yaml.safe_load(masked_text(duplicate)) == {"a": 2, "token": MASK}
    assert masked_text("") == dump({})


keys = st.sampled_from(["name", "url", "api_key", "token", "models", "headers", "note", "password"])
scalars = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
    st.integers(-5, 5),
    st.booleans(),
    st.none(),
    st.just("http://u:p@h:1/v1"),
    st.just("${VAR}"),
)
docs = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(keys, inner, max_size=4)), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(doc=st.dictionaries(keys, docs, min_size=1, max_size=5), flow=st.booleans())
def test_any_document_masks_to_what_mask_gives_and_back(doc, flow):
    text = "# kept\n" + yaml.safe_dump(doc, default_flow_style=flow, allow_unicode=True, sort_keys=False)
    doc = yaml.safe_load(text)  # (PyYAML's own dump does not round-trip every string: '\x85' loads as ' ')
    out = masked_text(text)
    assert yaml.safe_load(out) == mask(doc)
    restored = unmask(yaml.safe_load(out), doc)
    back = restored_text(out, restored)
    assert yaml.safe_load(back) == restored
