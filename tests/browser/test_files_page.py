"""The Files page in a real browser: files uploaded with the official SDK
are listed under their key, and the purpose filter narrows the list."""

from __future__ import annotations

import io

from playwright.sync_api import expect


def test_files_uploaded_with_the_sdk_are_listed_and_filtered_by_purpose(page, page_log, node):
    name, key = node.create_key()
    client = node.client(key)
    batch = client.files.create(file=("lines.jsonl", io.BytesIO(b"{}\n")), purpose="batch")
    data = client.files.create(file=("notes.txt", io.BytesIO(b"x" * 1234)), purpose="user_data")

    page.goto(node.url + "/dashboard/files/")
    expect(page.locator("main h1")).to_have_text("Files")
    owner_rows = page.locator("#file-owners-table tbody tr", has_text=name)
    expect(owner_rows).to_have_count(1)
    mine = page.locator(f"#files-table tr[data-file='{data.id}']")
    expect(mine).to_contain_text("notes.txt")
    expect(mine.locator("td[data-bytes]")).to_have_attribute("data-bytes", "1234")
    expect(mine).to_contain_text(name)

    page.select_option("#files-filter select[name=purpose]", "batch")
    page.click("#files-filter button[type=submit]")
    expect(page.locator(f"#files-table tr[data-file='{batch.id}']")).to_have_count(1)
    expect(page.locator(f"#files-table tr[data-file='{data.id}']")).to_have_count(0)
    assert "purpose=batch" in page.url
    assert not page_log.js_errors, page_log.js_errors
