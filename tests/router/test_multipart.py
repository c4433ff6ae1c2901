"""The form reader (router/multipart.py) against independent encoders and parsers:
bodies built by httpx's multipart encoder, read back by the standard library's
MIME parser (fakes.media.Form)."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes.media import Form
from router.core.errors import InvalidRequest
from router.multipart import FIELD_MAX, boundary_of, read_form

names = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=12)
values = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), max_size=200)


def encoded(data: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    request = httpx.Request("POST", "http://x/", data=data, files=files)
    return request.read(), request.headers["content-type"]


@settings(max_examples=150, deadline=None)
@given(
    data=st.dictionaries(names, values, max_size=6),
    files=st.dictionaries(names.map(lambda n: "f_" + n), st.binary(max_size=3000), min_size=1, max_size=3),
    model=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), min_size=1, max_size=40),
)
def test_fields_and_files_are_read_and_the_model_replaced_in_place(data, files, model):
    """Every text field is read as sent, every file is named, and replacing the
    model leaves a body whose every other part is byte for byte the same."""
    data = {**data, "model": "original"}
    body, content_type = encoded(data, {k: (k + ".bin", v) for k, v in files.items()})
    boundary = boundary_of(content_type)
    assert boundary is not None
    form = read_form(body, boundary)
    assert form.fields == data
    assert sorted(form.files) == sorted(files)
    rewritten = Form(content_type, form.with_value("model", model))
    assert rewritten.fields == {**data, "model": model}
    assert rewritten.files == {k: [(k + ".bin", v)] for k, v in files.items()}


def test_a_file_that_contains_field_like_bytes_is_not_read_as_fields():
    trap = b'\r\n--not-it\r\nContent-Disposition: form-data; name="model"\r\n\r\nevil'
    body, content_type = encoded({"model": "m"}, {"file": ("a", trap)})
    form = read_form(body, boundary_of(content_type) or "")
    assert form.fields == {"model": "m"} and form.files == ("file",)


def test_an_unquoted_name_is_read_too():
    body = b"--zz\r\nContent-Disposition: form-data; name=model\r\n\r\nm\r\n--zz--\r\n"
    assert read_form(body, "zz").fields == {"model": "m"}


def test_repeated_fields_and_large_ones():
    body, content_type = encoded(
        {"model": "m", "timestamp_granularities[]": ["word", "segment"], "prompt": "x" * (FIELD_MAX + 1)},
        {"file": ("a", b"")},
    )
    form = read_form(body, boundary_of(content_type) or "")
    assert form.fields == {"model": "m", "timestamp_granularities[]": "word"}
    assert form.repeated == frozenset({"timestamp_granularities[]"})


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("multipart/form-data; boundary=abc", "abc"),
        ('Multipart/Form-Data; charset=utf-8; boundary="a b;c"', "a b;c"),
        ("application/json", None),
        ("", None),
    ],
)
def test_boundary_of(content_type, expected):
    assert boundary_of(content_type) == expected


def test_a_form_type_without_boundary_is_refused():
    with pytest.raises(InvalidRequest):
        boundary_of("multipart/form-data")


@pytest.mark.parametrize(
    "body",
    [
        b"no boundary here",
        b"--zz\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm",  # never closed
        b"--zz\r\nContent-Disposition: form-data\r\n\r\nm\r\n--zz--",  # no name
        b"--zz\r\nContent-Disposition: form-data; name=\"model\"" + b"x" * 20000 + b"\r\n\r\nm\r\n--zz--",
    ],
)
def test_malformed_forms_are_400(body):
    with pytest.raises(InvalidRequest):
        read_form(body, "zz")
