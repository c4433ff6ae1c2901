"""The Keys page's usage columns and top users, the per-key detail page, its
plot JSON and the CSV exports, against the real Redis buffer and the test DB.

Usage gets into Redis the way the drainer writes it (`router.usage.add` on a
real pipeline); half of it is folded into KeyUsage so every read is shown to
add the DB rows and the buffer.
"""

from __future__ import annotations

import csv
import io
import re
import time

import pytest
from django.contrib.auth.models import User

from keys import usage
from keys.keyring import hash_key
from keys.models import ApiKey, KeySource
from keys.selectors import record_id
from keys.services import key_create
from tests.support.redisns import drained_usage

pytestmark = pytest.mark.django_db

FORMULA = '=HYPERLINK("http://evil")'


push = drained_usage  # one drainer batch (tests/support/redisns.py)


def obs(key: ApiKey, status: int = 200, ts: float | None = None, **tokens) -> dict:
    return {
        "key_id": record_id(key),
        "key": key.name,
        "key_source": key.source,
        "status": status,
        "usage": tokens or None,
        "ts": time.time() if ts is None else ts,
    }


@pytest.fixture
def used(db):
    """Two keys with usage: `a` partly folded into the DB, partly buffered;
    `b` (a coordinator key whose id has a slash) buffered only."""
    a, plaintext = key_create(name="team-a", owner="alice")
    b = ApiKey.objects.create(source=KeySource.COORDINATOR, key_id="org/b-1", name=FORMULA, key_hash=hash_key("tok-b"))
    push(
        obs(a, prompt_tokens=10, completion_tokens=4),
        obs(a, status=429),
        obs(a, ts=time.time() - 3600, prompt_tokens=1, completion_tokens=1),
    )
    usage.fold()
    push(obs(a, prompt_tokens=3, completion_tokens=2), obs(b, status=403), obs(b, input_tokens=8, output_tokens=9))
    return {"a": a, "b": b, "plaintext": plaintext}


def test_past_the_cap_the_keys_used_today_are_listed_first(staff, used, monkeypatch):
    """At 100,000 keys the table is capped (selectors.KEYS_SHOWN): the keys
    used in the last 24 hours first, then the table's order."""
    from dashboard import selectors as dash_selectors

    for name in ("aa-idle", "ab-idle", "ac-idle"):  # before team-a in the table's order
        key_create(name=name)
    monkeypatch.setattr(dash_selectors, "KEYS_SHOWN", 3)
    live = staff.get("/dashboard/live.json?sections=keys").json()["sections"]["keys"]
    data = live["data"]
    # Both used keys, then the first idle one, each in the table's order
    # (source, name): coordinator before operator.
    assert [k["ref"] for k in data["rows"]] == [
        "coordinator:org/b-1",
        f"operator:{ApiKey.objects.get(name='aa-idle').pk}",
        f"operator:{used['a'].pk}",
    ]
    assert data["rows"][2]["requests_24h"] == 4 and data["rows"][2]["last_used_at"] is not None
    assert (data["hidden"], data["total"]) == (2, 5)
    assert "2 more of 5 keys not shown" in live["html"]


def detail_url(key: ApiKey) -> str:
    return f"/dashboard/keys/{record_id(key)}/"


@pytest.mark.parametrize(
    "path",
    [
        "/dashboard/keys/operator:1/",
        "/dashboard/keys/operator:1/usage.json",
        "/dashboard/keys/operator:1/usage.csv",
        "/dashboard/keys/usage.csv",
    ],
)
def test_usage_pages_are_staff_only(client, path):
    assert client.get(path)["Location"].startswith("/admin/login/")
    client.force_login(User.objects.create_user("plain", "p@example.com", None))
    assert client.get(path)["Location"].startswith("/admin/login/")


def test_keys_page_shows_24h_usage_columns_and_top_users(staff, used):
    html = staff.get("/dashboard/keys/").content.decode()
    table = re.search(r'<table id="keys-table">(.*?)</table>', html, re.S).group(1)
    row = re.search(rf'<tr data-key-ref="operator:{used["a"].pk}">(.*?)</tr>', table, re.S).group(1)
    assert '<td class="num" data-usage="requests">4</td>' in row
    assert '<td class="num" data-usage="tokens">21</td>' in row
    assert '<td class="num" data-usage="errors">1</td>' in row
    assert f'href="/dashboard/keys/operator:{used["a"].pk}/"' in row
    top = re.search(r'<table id="top-keys">(.*?)</table>', html, re.S).group(1)
    refs = re.findall(r'<tr data-key-ref="([^"]+)">', top)
    assert refs == [f"operator:{used['a'].pk}", "coordinator:org/b-1"]  # most requests first
    assert '<td class="num" data-usage="prompt">8</td>' in top
    assert "&quot;http://evil&quot;" in top  # the name is escaped, not markup
    live = staff.get("/dashboard/live.json?sections=top_keys,keys").json()["sections"]
    assert live["top_keys"]["data"]["total_requests"] == 6
    assert {k["ref"]: k["requests_24h"] for k in live["keys"]["data"]["rows"]} == {
        f"operator:{used['a'].pk}": 4,
        "coordinator:org/b-1": 2,
    }


def test_detail_page_totals_table_and_plot_equal_db_plus_buffer(staff, used):
    a = used["a"]
    html = staff.get(detail_url(a) + "?days=1").content.decode()
    values = dict(re.findall(r'<span class="value" id="(usage-[a-z-]+)" data-value="([^"]*)"', html))
    assert {
        k: values[k] for k in ("usage-requests", "usage-errors", "usage-prompt-tokens", "usage-completion-tokens")
    } == {"usage-requests": "4", "usage-errors": "1", "usage-prompt-tokens": "14", "usage-completion-tokens": "7"}
    assert values["usage-last"].endswith("Z")
    assert f'data-chart-src="/dashboard/keys/operator:{a.pk}/usage.json?days=1"' in html
    hours = re.findall(r'<tr data-hour="[^"]+">.*?data-usage="requests">(\d+)<', html, re.S)
    assert sum(map(int, hours)) == 4 and len(hours) == 2
    assert a.key_hash not in html and used["plaintext"] not in html
    chart = staff.get(f"/dashboard/keys/operator:{a.pk}/usage.json?days=1").json()
    assert len(chart["t"]) == 24 and chart["unit"] == "per hour"
    assert {s["label"]: sum(s["values"]) for s in chart["series"]} == {
        "requests": 4,
        "prompt tokens": 14,
        "completion tokens": 7,
    }
    coord = staff.get("/dashboard/keys/coordinator:org/b-1/").content.decode()
    assert 'id="usage-requests" data-value="2"' in coord and 'id="usage-errors" data-value="1"' in coord


def test_unknown_key_without_usage_is_404(staff, db):
    assert staff.get("/dashboard/keys/operator:999/").status_code == 404
    assert staff.get("/dashboard/keys/nothing/usage.csv").status_code == 404


def rows_of(response) -> list[dict[str, str]]:
    assert response["Content-Type"] == "text/csv"
    assert "attachment" in response["Content-Disposition"]
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_csv_exports_equal_the_page_and_escape_formulas(staff, used):
    rows = rows_of(staff.get("/dashboard/keys/usage.csv?days=1"))
    by_key: dict[str, list[int]] = {}
    for r in rows:
        t = by_key.setdefault(r["key_ref"], [0, 0, 0, 0])
        for i, col in enumerate(("requests", "errors", "prompt_tokens", "completion_tokens")):
            t[i] += int(r[col])
    assert by_key == {f"operator:{used['a'].pk}": [4, 1, 14, 7], "coordinator:org/b-1": [2, 1, 8, 9]}
    names = {r["key_ref"]: r["name"] for r in rows}
    assert names["coordinator:org/b-1"] == "'" + FORMULA  # never starts with =
    assert all(not v.startswith(("=", "+", "-", "@")) for r in rows for v in r.values())
    one = rows_of(staff.get("/dashboard/keys/coordinator:org/b-1/usage.csv?days=1"))
    assert [(r["requests"], r["errors"], r["prompt_tokens"], r["completion_tokens"]) for r in one] == [
        ("2", "1", "8", "9")
    ]


@pytest.mark.parametrize("text", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "plain", ""])
def test_csv_cell_escaping(text):
    cell = usage.csv_cell(text)
    assert cell == ("'" + text if text[:1] in "=+-@\t" and text else text)
