"""The dashboard in a real browser: every page of the nav renders and goes
live, and requests sent with the official SDK appear on the Requests page
without a reload."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from playwright.sync_api import expect

from tests.browser.conftest import SCREENSHOTS, login
from tests.browser.nodes import MODEL
from tests.support.routerproc import wait_until

LIVE = re.compile(r"^live · revision \d+ · \d\d:\d\d:\d\d UTC$")  # set only after a poll of live.json answered
PLOTS = re.compile(r"^live · plots · \d\d:\d\d:\d\d UTC$")  # set only after a plot loaded


def nav_links(page) -> list[tuple[str, str]]:
    """(title, href) of the dashboard's nav, as the page shows it."""
    pairs = page.eval_on_selector_all(
        "header.top nav a", "els => els.map(a => [a.textContent.trim(), a.getAttribute('href')])"
    )
    return [(title, href) for title, href in pairs]


def expect_live(page) -> None:
    """A page with live regions shows "live · revision N · hh:mm:ss UTC" once
    a poll answered; one with plots only, "live · plots · hh:mm:ss UTC" once
    a plot loaded (they refresh); one with neither says "static"."""
    status = page.locator("#live-status")
    if page.locator("[data-live]").count():
        expect(status).to_have_text(LIVE, timeout=20_000)
        expect(status).to_have_class("live")
    elif page.locator("[data-chart-src]").count():
        expect(status).to_have_text(PLOTS, timeout=20_000)
        expect(status).to_have_class("live")
    else:
        expect(status).to_have_text("static")


def test_every_page_in_the_nav_renders_and_goes_live(page, page_log, node):
    links = nav_links(page)
    assert ("Overview", "/dashboard/") in links and ("Requests", "/dashboard/requests/") in links, links
    problems: list[str] = []
    checked = 0  # JS errors up to here are reported; a late one lands in the next page's (its URL says where)
    for title, href in links:
        page_log.responses.clear()
        page_log.failed.clear()
        page.goto(node.url + href)
        try:
            assert urlsplit(page.url).path == href, f"landed on {page.url}"
            expect(page).to_have_title(f"{title} · LLM router")
            expect(page.locator("main h1")).to_have_text(title)
            expect(page.locator(f"header.top nav a[href='{href}']")).to_have_class("active")
            expect_live(page)
            static = [url for url, status in page_log.responses if "/static/" in url and status == 200]
            assert static, f"no /static/ asset loaded: {page_log.responses}"
            assert not page_log.bad("/static/"), f"static assets failed: {page_log.bad('/static/')}"
            errors = page_log.js_errors[checked:]
            assert not errors, f"JS errors: {errors}"
        except AssertionError as exc:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shot = SCREENSHOTS / f"test_every_page_in_the_nav_renders_and_goes_live-{title}.png"
            page.screenshot(path=str(shot), full_page=True)
            problems.append(f"{title} ({href}): {exc} [screenshot {shot}]")
        finally:
            checked = len(page_log.js_errors)
    del page_log.js_errors[:checked]  # reported above; any later one fails the test at teardown
    assert not problems, "\n".join(problems)


def test_requests_sent_with_the_sdk_appear_on_the_requests_page_without_a_reload(page, page_log, node, backends):
    name, key = node.create_key()
    page.goto(node.url + "/dashboard/requests/")
    expect_live(page)
    rows = page.locator("section[data-live=recent] tbody tr", has_text=f"key {name}")
    expect(rows).to_have_count(0)
    page.evaluate("window.__sameDocument = true")

    replies = node.chat(key, 2) + node.chat(key, 1, stream=True)
    assert all(r.startswith("Hello from fake-") for r in replies), replies

    expect(rows).to_have_count(3, timeout=20_000)
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
    for i in range(3):
        row = rows.nth(i)
        expect(row.locator("td").nth(1)).to_contain_text(MODEL)
        expect(row.locator(".pill.ok")).to_have_text("200")
        assert row.locator("td").nth(2).inner_text().split("\n")[0] in backends
    assert page_log.bad("/static/") == []


def test_a_second_node_of_the_deployment_shares_login_keys_and_recent_requests(page, node, join_node):
    """join_node: same database (the admin login, the key), same Redis prefix
    (a request served by the second node shows on the first's Requests page)."""
    second = join_node()
    assert second.url != node.url and second.redis_prefix == node.redis_prefix
    name, key = node.create_key()
    wait_until(lambda: second.status()["revision"] == node.status()["revision"], 30, what="second node caught up")
    page.goto(node.url + "/dashboard/requests/")
    expect_live(page)
    rows = page.locator("section[data-live=recent] tbody tr", has_text=f"key {name}")
    assert second.chat(key)[0].startswith("Hello from fake-")
    expect(rows).to_have_count(1, timeout=20_000)

    assert not (second.var_dir / "admin-password").exists()  # the admin was found in the shared DB
    other = page.context.browser.new_context()
    try:
        login(other.new_page(), second.url, second.admin_password)
    finally:
        other.close()
