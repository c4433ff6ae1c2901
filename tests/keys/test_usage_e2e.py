"""Usage per key end to end: the official openai SDK with two keys → a real
blocking-mode router process → the fake OpenAI backend; the router's drainer
buffers the usage in Redis, the fold task (keys.fold_usage, run with the
router's settings by `manage.py shell`) moves it into the router's DB, and
the DB rows, the detail page, the CSV export and `manage.py keyusage` all
equal the token counts the fake backend reported — before and after the fold.
"""

from __future__ import annotations

import csv
import io
import json
import re

import httpx
import openai
import pytest
import redis

from fakes import openai_backend
from tests.keys.e2e import create_key, sdk
from tests.support.routerproc import RouterProc, wait_until

CONFIG = """
backends:
  - {{name: a, url: '{url}', models: [m, other]}}
health: {{enabled: false}}
api_keys: {{mode: blocking}}
"""


@pytest.fixture(scope="module")
def backend():
    server = openai_backend.server_thread("a", ["m", "other"]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def router(backend):
    proc = RouterProc(CONFIG.format(url=backend.url)).start()
    yield proc
    proc.stop()
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    keys = list(client.scan_iter(match=proc.prefix + "*"))
    if keys:
        client.delete(*keys)


def shell(proc: RouterProc, code: str):
    out = proc.manage("shell", "-c", code)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def refs(proc: RouterProc) -> dict[str, str]:
    return shell(
        proc,
        "import json; from keys.models import ApiKey; from keys.selectors import record_id; "
        "print(json.dumps({k.name: record_id(k) for k in ApiKey.objects.all()}))",
    )


def db_rows(proc: RouterProc) -> dict[str, list[int]]:
    rows = shell(
        proc,
        "import json; from keys.models import KeyUsage; print(json.dumps(list(KeyUsage.objects.values("
        "'key_ref', 'requests', 'errors', 'prompt_tokens', 'completion_tokens'))))",
    )
    out: dict[str, list[int]] = {}
    for r in rows:
        t = out.setdefault(r["key_ref"], [0, 0, 0, 0])
        for i, col in enumerate(("requests", "errors", "prompt_tokens", "completion_tokens")):
            t[i] += r[col]
    return out


def keyusage_csv(proc: RouterProc, *args: str) -> dict[str, list[int]]:
    out = proc.manage("keyusage", "--csv", *args)
    assert out.returncode == 0, out.stderr
    totals: dict[str, list[int]] = {}
    for r in csv.DictReader(io.StringIO(out.stdout)):
        t = totals.setdefault(r["key_ref"], [0, 0, 0, 0])
        for i, col in enumerate(("requests", "errors", "prompt_tokens", "completion_tokens")):
            t[i] += int(r[col])
    return totals




def page_totals(client: httpx.Client, ref: str) -> list[int]:
    html = client.get(f"/dashboard/keys/{ref}/?days=1").text
    values = dict(re.findall(r'id="(usage-[a-z-]+)" data-value="([^"]*)"', html))
    return [
        int(values[k]) for k in ("usage-requests", "usage-errors", "usage-prompt-tokens", "usage-completion-tokens")
    ]


def csv_totals(client: httpx.Client, path: str) -> dict[str, list[int]]:
    response = client.get(path)
    assert response.status_code == 200 and response.headers["content-type"] == "text/csv"
    totals: dict[str, list[int]] = {}
    for r in csv.DictReader(io.StringIO(response.text)):
        t = totals.setdefault(r["key_ref"], [0, 0, 0, 0])
        for i, col in enumerate(("requests", "errors", "prompt_tokens", "completion_tokens")):
            t[i] += int(r[col])
    return totals


def test_usage_per_key_equals_what_the_backend_reported(router):
    key_a = create_key(router, "--models", "m", name="usage-a")
    key_b = create_key(router, "--rate-limit", "2", name="usage-b")
    ids = refs(router)
    a, b = ids["usage-a"], ids["usage-b"]
    expected = {a: [0, 0, 0, 0], b: [0, 0, 0, 0]}

    def count(ref: str, prompt: int, completion: int, error: bool = False) -> None:
        expected[ref][0] += 1
        expected[ref][1] += int(error)
        expected[ref][2] += prompt
        expected[ref][3] += completion

    client_a, client_b = sdk(router, key_a), sdk(router, key_b)
    for text in ("hi", "a longer question about the weather today", "x " * 40):
        out = client_a.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
        count(a, out.usage.prompt_tokens, out.usage.completion_tokens)
    stream = client_a.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "stream me"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    tail = [chunk.usage for chunk in stream if chunk.usage is not None]
    assert len(tail) == 1
    count(a, tail[0].prompt_tokens, tail[0].completion_tokens)
    resp = client_a.responses.create(model="m", input="input and output tokens")
    count(a, resp.usage.input_tokens, resp.usage.output_tokens)  # the Responses API's names
    with pytest.raises(openai.PermissionDeniedError) as denied:
        client_a.chat.completions.create(model="other", messages=[{"role": "user", "content": "no"}])
    assert denied.value.body["code"] == "model_not_allowed"
    count(a, 0, 0, error=True)

    for text in ("one", "two words"):
        out = client_b.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
        count(b, out.usage.prompt_tokens, out.usage.completion_tokens)
    with pytest.raises(openai.RateLimitError):
        client_b.chat.completions.create(model="m", messages=[{"role": "user", "content": "three"}])
    count(b, 0, 0, error=True)
    assert expected[a][2] > 0 and expected[a][3] > 0 and expected[b][2] > 0

    # Buffered in Redis (drained every 0.25 s): the CLI already sees it all.
    wait_until(lambda: keyusage_csv(router) == expected, 30, what="the drained usage")

    fold = shell(router, "import json; from keys.tasks import fold_usage; print(json.dumps(fold_usage()))")
    assert fold["folded"] >= 1
    assert db_rows(router) == expected  # all of it in the router's DB now ...
    left = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    assert not [k for k in left.scan_iter(match=router.prefix + "usage:*") if re.search(rb"usage:(\d+|fold:.*)$", k)]
    assert keyusage_csv(router) == expected  # ... and counted once
    assert keyusage_csv(router, "--key", "usage-b") == {b: expected[b]}

    table = router.manage("keyusage", "--days", "1").stdout
    line = next(li for li in table.splitlines() if li.startswith("usage-a "))
    assert line.split()[1:7] == [a, "operator", *map(str, expected[a])]

    web = router.staff_session()
    assert page_totals(web, a) == expected[a]
    assert page_totals(web, b) == expected[b]
    assert csv_totals(web, "/dashboard/keys/usage.csv?days=1") == expected
    assert csv_totals(web, f"/dashboard/keys/{b}/usage.csv?days=1") == {b: expected[b]}
    keys_page = web.get("/dashboard/keys/").text
    assert f'href="/dashboard/keys/{a}/"' in keys_page
    for plaintext in (key_a, key_b):
        assert plaintext not in keys_page and plaintext not in web.get(f"/dashboard/keys/{a}/").text

    # More traffic after the fold: DB row + buffer, still exact.
    out = client_a.chat.completions.create(model="m", messages=[{"role": "user", "content": "after the fold"}])
    count(a, out.usage.prompt_tokens, out.usage.completion_tokens)
    wait_until(lambda: page_totals(web, a) == expected[a], 30, what="the new request on the detail page")
    assert keyusage_csv(router) == expected

    # A restart of the web process loses none of it (DB rows + the Redis buffer).
    router.stop()
    router.start()
    assert keyusage_csv(router) == expected
    shell(router, "import json; from keys.tasks import fold_usage; print(json.dumps(fold_usage()))")
    assert db_rows(router) == expected
