"""The docs say what the response cache has: every config key with its
default, every metric, the purge command."""

from __future__ import annotations

from pathlib import Path

import pytest

from router import observe
from router.config_schema import ResponseCacheConfig

DOCS = Path(__file__).resolve().parents[3] / "docs"


@pytest.mark.parametrize("key", sorted(ResponseCacheConfig.model_fields))
def test_every_key_is_in_the_configuration_reference(key):
    text = (DOCS / "configuration.md").read_text()
    section = text[text.index("### `response_cache`") :].split("\n### ", 1)[0]
    default = ResponseCacheConfig.model_fields[key].default
    rows = [line for line in section.splitlines() if line.startswith(f"| `{key}` |")]
    assert len(rows) == 1, key
    cell = rows[0].split("|")[2].strip().strip("`")
    assert cell in {str(default).lower(), f"{default:g}" if isinstance(default, float) else "", "64MiB", "1MiB"}, cell


@pytest.mark.parametrize("metric", [observe.CACHE, observe.CACHE_BYTES, observe.CACHE_MEMORY_BYTES])
def test_every_metric_is_documented(metric):
    name = metric._name + ("_total" if metric._type == "counter" else "")
    assert f"`{name}`" in (DOCS / "metrics.md").read_text()


def test_the_purge_command_is_in_operations():
    assert "manage.py purgeresponsecache" in (DOCS / "operations.md").read_text()
