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
from router.multipart import FIELD_MAX, HEAD_MAX, PARTS_MAX, FormReader, boundary_of, read_form

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
    start, end = form.spans["model"]
    rewritten = Form(content_type, body[:start] + model.encode() + body[end:])
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


@settings(max_examples=150, deadline=None)
@given(
    data=st.dictionaries(names, values, max_size=5),
    files=st.dictionaries(names.map(lambda n: "f_" + n), st.binary(max_size=3000), min_size=1, max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=20_000), max_size=12),
)
def test_a_form_fed_in_any_chunks_reads_as_the_whole(data, files, cuts):
    """The reader sees the body as the client's chunks come: wherever they are
    cut (a boundary or a part head split in two, one byte at a time), the
    form read is the one read from the whole body, spans included."""
    body, content_type = encoded({**data, "model": "m"}, {k: (k + ".bin", v) for k, v in files.items()})
    boundary = boundary_of(content_type) or ""
    whole = read_form(body, boundary)
    reader = FormReader(boundary)
    at = 0
    for cut in [*sorted({min(c, len(body)) for c in cuts}), len(body)]:
        reader.feed(body[at:cut])
        at = cut
    assert reader.finish() == whole


def test_the_reader_holds_a_few_bytes_of_a_file_whatever_its_size():
    boundary = "b0undary"
    reader = FormReader(boundary)
    reader.feed(f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nm\r\n'.encode())
    reader.feed(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\n'.encode())
    piece = b"\x00\r\n-" * 16_384  # 64 KiB, with near-boundaries in it
    held = 0
    for _ in range(256):  # 16 MiB of file
        reader.feed(piece)
        held = max(held, len(reader._buf))
    reader.feed(f"\r\n--{boundary}--\r\n".encode())
    form = reader.finish()
    assert form.fields == {"model": "m"} and form.files == ("file",)
    assert held <= len(piece) + 64  # one chunk plus the separator's tail, never the file


def test_a_text_field_past_the_limit_is_not_kept_while_it_arrives():
    reader = FormReader("zz")
    reader.feed(b'--zz\r\nContent-Disposition: form-data; name="prompt"\r\n\r\n')
    for _ in range(64):
        reader.feed(b"x" * 8192)
        assert len(reader._buf) <= FIELD_MAX + 64
    reader.feed(b'\r\n--zz\r\nContent-Disposition: form-data; name="model"\r\n\r\nm\r\n--zz--')
    assert reader.finish().fields == {"model": "m"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"no boundary here", "does not contain its boundary"),
        (b'--zz\r\nContent-Disposition: form-data; name="model"\r\n\r\nm', "cut short"),
        (b"--zz\r\nContent-Type: text/plain\r\n\r\nm\r\n--zz--", "no Content-Disposition name"),
        (b"--zz\r\nContent-Disposition: form-data\r\n\r\nm\r\n--zz--", "no Content-Disposition name"),
        (b"--zz\r\n" + b"X" * (HEAD_MAX + 10), "no end to its headers"),
        (b'--zz\r\nContent-Disposition: form-data; name="a"\r\n\r\n\r\n' * (PARTS_MAX + 1), "more than 1000 parts"),
    ],
)
def test_malformed_forms_are_400_naming_the_fault(body, message):
    with pytest.raises(InvalidRequest) as err:
        read_form(body, "zz")
    assert message in err.value.message
