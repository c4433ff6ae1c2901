"""The Files page: every key's uploaded files by metadata (never content),
filtered by purpose and key, paged, with each key's stored bytes against the
per-key limit; the Batches page links a batch's files to it."""

from __future__ import annotations

import time

import pytest

from dashboard.files import PER_PAGE
from filestore.models import Batch, StoredFile

pytestmark = pytest.mark.django_db


def stored(file_id: str, *, owner="operator:1", name="eval-key", purpose="batch", size=100, created=None):
    return StoredFile.objects.create(
        id=file_id,
        owner=owner,
        owner_name=name,
        filename=f"{file_id}.jsonl",
        purpose=purpose,
        bytes=size,
        created_at=created or int(time.time()),
        storage_name=f"files/{file_id}",
    )


def row(html: str, attr: str, value: str) -> str:
    start = html.index(f'{attr}="{value}"')
    return html[start : html.index("</tr>", start)]


def test_the_page_lists_files_with_their_metadata_and_owner(staff):
    now = int(time.time())
    stored("file-a", size=2048, created=now - 10)
    stored("file-b", owner="", name="", purpose="vision", size=5, created=now)
    html = staff.get("/dashboard/files/").content.decode()
    assert html.index('data-file="file-b"') < html.index('data-file="file-a"')  # newest first
    a = row(html, "data-file", "file-a")
    assert "file-a.jsonl" in a and "batch" in a and 'data-bytes="2048"' in a and "eval-key" in a
    assert "anonymous" in row(html, "data-file", "file-b")  # an open router's shared pool
    assert "2 files" in html


def test_only_staff_see_the_page(client, django_user_model):
    assert client.get("/dashboard/files/").status_code == 302  # to the admin login
    user = django_user_model.objects.create_user("plain", "p@example.com", None)
    client.force_login(user)
    response = client.get("/dashboard/files/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_filters_by_purpose_and_by_key(staff):
    stored("file-batch", purpose="batch")
    stored("file-vision", purpose="vision")
    stored("file-other", owner="operator:2", name="other-key", purpose="batch")
    html = staff.get("/dashboard/files/?purpose=vision").content.decode()
    assert 'data-file="file-vision"' in html and 'data-file="file-batch"' not in html
    html = staff.get("/dashboard/files/?owner=operator:2").content.decode()
    assert 'data-file="file-other"' in html and 'data-file="file-batch"' not in html
    html = staff.get("/dashboard/files/?owner=operator:1&purpose=batch").content.decode()
    assert 'data-file="file-batch"' in html
    assert 'data-file="file-vision"' not in html and 'data-file="file-other"' not in html
    html = staff.get("/dashboard/files/?purpose=fine-tune").content.decode()
    assert "No files match." in html


def test_the_anonymous_pool_is_a_key_filter_of_its_own(staff):
    stored("file-open", owner="", name="")
    stored("file-keyed")
    html = staff.get("/dashboard/files/?owner=anonymous").content.decode()
    assert 'data-file="file-open"' in html and 'data-file="file-keyed"' not in html


def test_pages_through_many_files(staff):
    now = int(time.time())
    for i in range(PER_PAGE + 3):
        stored(f"file-{i:03d}", created=now - i)
    first = staff.get("/dashboard/files/").content.decode()
    assert first.count("<tr data-file=") == PER_PAGE and 'data-file="file-000"' in first
    assert "page 1 of 2" in first and 'rel="next"' in first
    second = staff.get("/dashboard/files/?page=2").content.decode()
    assert second.count("<tr data-file=") == 3 and f'data-file="file-{PER_PAGE + 2:03d}"' in second
    assert 'rel="prev"' in second
    assert staff.get("/dashboard/files/?page=nonsense").status_code == 200  # the first page, not a 500
    filtered = staff.get("/dashboard/files/?purpose=batch&page=1").content.decode()
    assert "purpose=batch&amp;page=2" in filtered  # the pager keeps the filters


def test_each_key_totals_against_the_per_key_limit(staff, settings):
    settings.ROUTER_FILES_MAX_BYTES_PER_KEY = 1000
    stored("file-1", size=600)
    stored("file-2", size=300)
    stored("file-3", owner="operator:2", name="full-key", size=1000)
    html = staff.get("/dashboard/files/").content.decode()
    one = row(html, "data-owner", "operator:1")
    assert 'data-bytes="900"' in one and "90 %" in one and "eval-key" in one
    full = row(html, "data-owner", "operator:2")
    assert "100 %" in full and 'class="pill bad"' in full
    assert html.index('data-owner="operator:2"') < html.index('data-owner="operator:1"')  # most bytes first
    assert "1000\xa0bytes" in html or "1000 bytes" in html  # the limit, as the header states it


def test_no_file_content_is_ever_read(staff):
    """The page needs no storage at all: rows whose bytes are gone still list."""
    stored("file-gone")
    html = staff.get("/dashboard/files/?file=file-gone").content.decode()
    assert 'data-file="file-gone"' in html and "/content" not in html


def test_the_batches_page_links_a_batchs_files(staff):
    now = int(time.time())
    stored("file-in")
    stored("file-out")
    Batch.objects.create(
        id="batch_x",
        owner="operator:1",
        owner_name="eval-key",
        endpoint="/v1/chat/completions",
        input_file_id="file-in",
        completion_window="24h",
        status="completed",
        created_at=now,
        expires_at=now + 86400,
        total=1,
        completed=1,
        output_file_id="file-out",
        error_file_id="file-err",
    )
    html = staff.get("/dashboard/batches/").content.decode()
    assert 'href="/dashboard/files/?file=file-in"' in html
    assert 'href="/dashboard/files/?file=file-out"' in html and 'href="/dashboard/files/?file=file-err"' in html
    one = staff.get("/dashboard/files/?file=file-out").content.decode()
    assert one.count("<tr data-file=") == 1 and 'data-file="file-out"' in one
    assert "No files match." in staff.get("/dashboard/files/?file=file-err").content.decode()


def test_the_nav_lists_the_page(staff):
    html = staff.get("/dashboard/batches/").content.decode()
    assert 'href="/dashboard/files/"' in html
