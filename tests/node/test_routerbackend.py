"""`manage.py routerbackend list`: a header row, then one aligned row per
backend; a URL's userinfo is never shown."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from router.models import Backend, Source

pytestmark = pytest.mark.django_db


def listing() -> list[str]:
    out = io.StringIO()
    call_command("routerbackend", "list", stdout=out)
    return out.getvalue().splitlines()


def test_list_starts_with_a_header_row_naming_each_column():
    Backend.objects.create(name="vllm-a", source=Source.CONFIG, url="http://10.0.0.5:8000", kind="vllm",
                           models=["llama-3-8b", "llama"], weight=100)
    Backend.objects.create(name="b", source=Source.ADMIN, url="http://user:pw@h:1", models=["m"], weight=7)
    header, *rows = listing()
    assert header.split() == ["NAME", "SOURCE", "KIND", "URL", "MODELS", "WEIGHT"]
    assert [row.split() for row in rows] == [
        ["b", "admin", "openai_compat", "http://***@h:1", "m", "7"],
        ["vllm-a", "config", "vllm", "http://10.0.0.5:8000", "llama-3-8b,llama", "100"],
    ]


def test_each_column_starts_under_its_header():
    Backend.objects.create(name="a-long-backend-name", url="http://127.0.0.1:1", models=["m"])
    Backend.objects.create(name="b", url="http://127.0.0.1:2", models=["a-long-model-name", "m"])
    header, *rows = listing()
    for column in ("SOURCE", "KIND", "URL", "MODELS", "WEIGHT"):
        at = header.index(column)
        assert all(row[at - 2 : at] == "  " and row[at] != " " for row in rows), (column, header, rows)


def test_no_backends_says_so():
    assert listing() == ["No backends."]
