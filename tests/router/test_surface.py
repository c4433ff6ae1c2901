"""The surface's endpoint table, the registry's kind check and docs/endpoints.md agree."""

from __future__ import annotations

import re
from pathlib import Path

from router.frontends.surface import ENDPOINTS, PATHS
from router.providers import KINDS, SURFACE_BY_KIND, path_of, serves
from router.providers.openai import OPENAI

DOC = Path(__file__).resolve().parents[2] / "docs" / "endpoints.md"
# The matrix's surface columns and the endpoints each stands for.
COLUMNS = {
    "images": ("images/generations", "images/edits", "images/variations"),
    "audio": ("audio/transcriptions", "audio/translations", "audio/speech"),
    "moderations": ("moderations",),
    "rerank, score": ("rerank", "score"),
}


def matrix() -> tuple[list[str], list[list[str]]]:
    lines = [line for line in DOC.read_text().splitlines() if line.startswith("| kind |") or line.startswith("| `")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[1:] if line.count("|") == len(header) + 1]
    return header, rows


def test_the_door_and_the_passthrough_provider_name_the_same_endpoints():
    assert ENDPOINTS == OPENAI.surface
    assert set(ENDPOINTS) == {e for group in COLUMNS.values() for e in group}
    assert {p for p, s in PATHS.items() if s.endpoint == "rerank"} == {"/v1/rerank", "/rerank", "/v2/rerank"}


def test_every_passthrough_kind_serves_the_surface_and_no_other_kind_does():
    for kind in KINDS:
        expected = ENDPOINTS if path_of(kind) == "passthrough" else frozenset()
        assert SURFACE_BY_KIND[kind] == expected, kind
    assert serves("a-kind-no-provider-claims", "rerank")  # served as OpenAI-compatible, like every endpoint


def test_the_docs_matrix_says_what_the_registry_does():
    header, rows = matrix()
    assert sorted(re.sub(r"`", "", row[0]) for row in rows) == sorted(KINDS)
    for row in rows:
        kind = row[0].strip("`")
        for column, endpoints in COLUMNS.items():
            cell = row[header.index(column)]
            assert cell == ("yes" if all(serves(kind, e) for e in endpoints) else "400"), (kind, column)
            assert all(serves(kind, e) for e in endpoints) or not any(serves(kind, e) for e in endpoints)
