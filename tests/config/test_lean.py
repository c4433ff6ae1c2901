"""config/lean.py leans on Django's handler internals: pin each one.

`LeanASGIHandler` copies parts of Django's `BaseHandler`/`ASGIHandler` and
calls others. These tests fail, saying what to re-read, when a Django upgrade
changes any of them; they also check the handler's own promise: an empty
middleware chain for itself, `settings.MIDDLEWARE` untouched.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import textwrap

import django
import pytest
from django.conf import LazySettings, settings
from django.core.handlers import asgi as django_asgi
from django.core.handlers import base as django_base
from django.core.handlers import exception as django_exception
from django.test import override_settings
from django.urls import path

from config.lean import DJANGO_CHECKED, LeanASGIHandler

HANDLERS = "django/core/handlers/"

# Django code that config/lean.py copies or replaces, as of Django 5.2.19:
# (owner, name) -> sha256 of its dedented source, first 16 hex digits.
COPIED = {
    (django_base.BaseHandler, "load_middleware"): "892801349dd63900",
    (django_asgi.ASGIHandler, "__init__"): "4d30812e5ed7767d",
    (django_asgi.ASGIHandler, "__call__"): "fd60e60793c4542e",
    (django_asgi.ASGIHandler, "handle"): "ab2236e287c805bf",
    (django_asgi.ASGIHandler, "read_body"): "0a30b6b3ac2775ba",
}

# Django code that config/lean.py calls unchanged: name -> parameters.
CALLED = {
    "create_request": ["self", "scope", "body_file"],
    "run_get_response": ["self", "request"],
    "send_response": ["self", "response", "send"],
    "listen_for_disconnect": ["self", "receive"],
    "get_response_async": ["self", "request"],
    "_get_response_async": ["self", "request"],
    "_get_response": ["self", "request"],
}

# What BaseHandler.load_middleware assigns; LeanASGIHandler assigns the same.
CHAIN_ATTRIBUTES = (
    "_view_middleware",
    "_template_response_middleware",
    "_exception_middleware",
    "_middleware_chain",
)


def _digest(func) -> str:
    source = textwrap.dedent(inspect.getsource(func))
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def test_django_is_a_version_the_lean_handler_was_checked_against():
    low, high = DJANGO_CHECKED
    assert low <= django.VERSION[:2] < high, (
        f"config/lean.py was checked against Django {low} up to (not incl.) {high}, "
        f"but Django {django.get_version()} is installed: re-read {HANDLERS}base.py "
        "and asgi.py, port any change into LeanASGIHandler, then widen DJANGO_CHECKED."
    )


@pytest.mark.parametrize(("owner", "name"), list(COPIED), ids=lambda v: getattr(v, "__name__", v))
def test_the_django_code_the_lean_handler_copies_is_unchanged(owner, name):
    got = _digest(getattr(owner, name))
    assert got == COPIED[(owner, name)], (
        f"Django {django.get_version()} changed {owner.__qualname__}.{name} "
        f"({inspect.getsourcefile(owner)}), which config/lean.py copies or replaces. "
        "Read the change, port it into LeanASGIHandler if it applies to the lean "
        f"path, then set its digest in this test to {got!r}."
    )


@pytest.mark.parametrize("name", list(CALLED))
def test_the_django_methods_the_lean_handler_calls_keep_their_signature(name):
    method = getattr(django_asgi.ASGIHandler, name, None)
    assert method is not None, f"Django {django.get_version()} removed ASGIHandler.{name}, used by config/lean.py."
    params = list(inspect.signature(method).parameters)
    assert params == CALLED[name], (
        f"Django {django.get_version()} changed ASGIHandler.{name}{inspect.signature(method)}; "
        f"config/lean.py calls it as {CALLED[name]}."
    )


def test_the_module_functions_the_lean_handler_calls_keep_their_signature():
    assert list(inspect.signature(django_asgi.get_script_prefix).parameters) == ["scope"]
    assert list(inspect.signature(django_exception.convert_exception_to_response).parameters) == ["get_response"]


def test_django_declares_the_chain_attributes_the_lean_handler_assigns():
    for name in CHAIN_ATTRIBUTES:
        assert hasattr(django_base.BaseHandler, name), (
            f"Django {django.get_version()} no longer has BaseHandler.{name}, "
            "which LeanASGIHandler.load_middleware assigns."
        )


def test_the_lean_chain_is_what_django_builds_for_no_middleware():
    """Same attributes, same (empty) lists, the view call wrapped once."""
    lean = LeanASGIHandler()
    with override_settings(MIDDLEWARE=[]):
        stock = django_asgi.ASGIHandler()
    assert set(vars(lean)) == set(vars(stock)) == set(CHAIN_ATTRIBUTES)
    for name in CHAIN_ATTRIBUTES[:3]:
        assert getattr(lean, name) == getattr(stock, name) == []
    for handler in (lean, stock):
        chain = handler._middleware_chain
        assert inspect.iscoroutinefunction(chain)
        assert chain.__wrapped__ == handler._get_response_async
        assert chain.__code__ is lean._middleware_chain.__code__


class _Explodes:
    def __init__(self, get_response):
        raise AssertionError("LeanASGIHandler loaded a middleware from settings.MIDDLEWARE")


@override_settings(MIDDLEWARE=["tests.config.test_lean._Explodes"])
def test_the_lean_handler_never_loads_or_assigns_settings_middleware(monkeypatch):
    assigned: list[str] = []
    real_setattr = LazySettings.__setattr__

    def recording_setattr(self, name, value):
        assigned.append(name)
        real_setattr(self, name, value)

    before = settings.MIDDLEWARE
    monkeypatch.setattr(LazySettings, "__setattr__", recording_setattr)
    LeanASGIHandler()
    monkeypatch.undo()
    assert assigned == [] and settings.MIDDLEWARE is before


def _scope(path: str) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


async def _sent(app, path: str) -> list[dict]:
    """Every message `app` sent for a GET of `path`."""
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict:
        if messages:
            return messages.pop(0)
        # After the body: block until cancelled, as a live connection does.
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: dict) -> None:
        sent.append(message)

    await app(_scope(path), receive, send)
    return sent


async def _get(app, path: str) -> tuple[int, dict[bytes, bytes], bytes]:
    start, *rest = await _sent(app, path)
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in rest)


async def test_a_lean_request_runs_no_middleware_while_stock_django_keeps_it():
    """The full-Django app built after the lean one still has every middleware."""
    lean = LeanASGIHandler()
    stock = django_asgi.ASGIHandler()
    status, headers, body = await _get(lean, "/livez")
    assert status == 200 and body == b'{"status":"ok"}'
    # XFrameOptionsMiddleware and SecurityMiddleware headers: absent on the lean path…
    assert b"X-Frame-Options" not in headers and b"X-Content-Type-Options" not in headers
    status, headers, _ = await _get(stock, "/livez")
    # …and present on the stock one.
    assert status == 200 and headers[b"X-Frame-Options"] == b"DENY"


def _big(request):
    from django.http import HttpResponse

    return HttpResponse(b"0123456789" * 20_000, content_type="application/json")


def _streamed(request):
    from django.http import StreamingHttpResponse

    async def parts():
        for i in range(3):
            yield b"part %d\n" % i

    return StreamingHttpResponse(parts())


urlpatterns = [path("big", _big), path("streamed", _streamed)]


@override_settings(ROOT_URLCONF=__name__)
async def test_a_whole_body_goes_out_in_one_message_with_its_length():
    """A 200 kB answer (a 2,000-model /v1/models list is ~150 kB) is one body
    message with a Content-Length (the server frames nothing: no chunked
    encoding), as Django's full path with CommonMiddleware would say it."""
    start, *body = await _sent(LeanASGIHandler(), "/big")
    assert start["status"] == 200
    assert dict(start["headers"])[b"Content-Length"] == b"200000"
    assert [len(m["body"]) for m in body] == [200_000] and not body[0].get("more_body")


@override_settings(ROOT_URLCONF=__name__)
async def test_a_streamed_body_has_no_length_and_goes_out_as_it_comes():
    start, *body = await _sent(LeanASGIHandler(), "/streamed")
    assert start["status"] == 200 and b"Content-Length" not in dict(start["headers"])
    assert b"".join(m.get("body", b"") for m in body) == b"part 0\npart 1\npart 2\n"
    assert len(body) == 4 and body[-1] == {"type": "http.response.body"}


# -- the body as the lean handler reads it ------------------------------------


def _messages(*chunks: bytes):
    queue = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive():
        return queue.pop(0)

    return receive


@override_settings(FILE_UPLOAD_MAX_MEMORY_SIZE=1024)
async def test_a_body_within_the_memory_size_is_read_whole_into_memory():
    body = await LeanASGIHandler().read_body(_messages(b'{"model":', b'"m"}'), limit=10_000)
    assert not hasattr(body, "_rolled")  # a plain in-memory file, no spooled wrapper
    assert body.read() == b'{"model":"m"}'


@override_settings(FILE_UPLOAD_MAX_MEMORY_SIZE=1024)
async def test_a_body_past_the_memory_size_spills_as_django_s_does():
    chunks = [bytes([65 + i]) * 700 for i in range(3)]
    body = await LeanASGIHandler().read_body(_messages(*chunks), limit=10_000)
    assert body._rolled  # SpooledTemporaryFile moved to disk past max_size
    assert body.read() == b"".join(chunks)
    body.close()


@override_settings(FILE_UPLOAD_MAX_MEMORY_SIZE=1024)
async def test_a_body_past_the_limit_is_refused_in_memory_or_spilled():
    from config.lean import _TooLarge

    for size, limit in ((300, 500), (2000, 3000)):  # still in memory / already spilled
        with pytest.raises(_TooLarge):
            await LeanASGIHandler().read_body(_messages(b"x" * size, b"x" * size), limit=limit)


def test_settle_gc_moves_what_is_alive_into_the_permanent_generation():
    import gc

    from config import server

    kept = [object() for _ in range(10)]  # alive now: frozen, never walked again
    server.settle_gc()
    assert gc.get_freeze_count() >= len(kept)
