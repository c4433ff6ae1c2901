"""The Batches page: every key's batches, the unfinished first, with their
progress, counts and files; refreshed through live.json like every section."""

from __future__ import annotations

import time

import orjson
import pytest

from filestore.models import Batch

pytestmark = pytest.mark.django_db


def batch(batch_id: str, status: str, created: int, **fields) -> Batch:
    return Batch.objects.create(
        id=batch_id, owner="operator:1", owner_name="eval-key", endpoint="/v1/chat/completions",
        input_file_id="file-in", completion_window="24h", status=status, created_at=created,
        expires_at=created + 86400, **fields,
    )


def test_the_page_lists_batches_with_progress_and_files(staff):
    now = int(time.time())
    batch("batch_done", "completed", now, total=4, completed=3, failed=1, model="m",
          output_file_id="file-out", error_file_id="file-err")
    batch("batch_running", "in_progress", now - 100, total=10, completed=2, failed=1, model="m")
    batch("batch_bad", "failed", now - 50, errors=[{"code": "invalid_json_line", "line": 2}] * 2)
    html = staff.get("/dashboard/batches/").content.decode()
    order = [html.index(f'data-batch="{b}"') for b in ("batch_running", "batch_done", "batch_bad")]
    assert order == sorted(order)  # the unfinished first, then the newest
    running = html[html.index('data-batch="batch_running"'):]
    assert "30 %" in running.split("</tr>")[0]  # 3 of 10 answered
    done = html[html.index('data-batch="batch_done"'):].split("</tr>")[0]
    assert "100 %" in done and "file-out" in done and "file-err" in done and "eval-key" in done
    bad = html[html.index('data-batch="batch_bad"'):].split("</tr>")[0]
    assert "2 invalid lines" in bad


def test_live_json_refreshes_the_section(staff):
    batch("batch_live", "in_progress", int(time.time()), total=8, completed=4)
    data = orjson.loads(staff.get("/dashboard/live.json?sections=batches").content)
    section = data["sections"]["batches"]
    assert [r["id"] for r in section["data"]["rows"]] == ["batch_live"]
    assert section["data"]["rows"][0]["progress"] == 0.5
    assert 'data-batch="batch_live"' in section["html"]


def test_no_batches_says_so(staff):
    assert "No batches." in staff.get("/dashboard/batches/").content.decode()


def test_the_admin_shows_batches_read_only(superuser):
    batch("batch_admin", "completed", int(time.time()), total=1, completed=1)
    listing = superuser.get("/admin/filestore/batch/")
    assert listing.status_code == 200 and "batch_admin" in listing.content.decode()
    assert superuser.get("/admin/filestore/batch/add/").status_code == 403
    detail = superuser.get("/admin/filestore/batch/batch_admin/change/")
    assert detail.status_code == 200 and 'name="_save"' not in detail.content.decode()
