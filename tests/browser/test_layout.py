"""The dashboard's layout at the widths operators use (1024, 1366, 1440 and
1920 px), on a plain node and on a ROUTER-mode node: no page scrolls
sideways, every nav item is visible and clickable, wide tables scroll inside
their own panel (never the page), and names stay on one line, cut with an
ellipsis and whole in their tooltip.

One node per mode (module scope); each page is measured at every width in
one browser page, resized with set_viewport_size. The data is what made the
layout break before: long backend, key and model names, a backend that is
down (its health, breaker and failure badges), keys named like "team-a".
"""

from __future__ import annotations

import os
import re
import uuid
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from fakes import openai_backend
from tests.appproxy.router_support import RouterManager
from tests.appproxy.support import API_SECRET, REDIS_URL, coordinator
from tests.browser.conftest import SCREENSHOTS, login, open_page
from tests.browser.nodes import MODEL, Node, drop_redis_keys
from tests.support.routerproc import free_port, wait_until

WIDTHS = (1024, 1366, 1440, 1920)
# Widths at which every table must fit its panel without a scrollbar (below
# them a wide table may scroll inside its panel).
ROOMY = 1440
LONG_BACKEND = "fake-backend-with-a-rather-long-name-in-eu-west-1"
DEAD_BACKEND = "dead-backend-nobody-listens-on-this-port"
LONG_KEY = "team-research-division-platform-batch-jobs"
LONG_MODEL = "browser-chat-published-model-with-a-long-name"
NAMES = [LONG_BACKEND, DEAD_BACKEND, LONG_KEY, "team-a", MODEL, LONG_MODEL]

# What the layout check reports, measured in the page: nav items hidden,
# cut or covered; the page wider than the viewport; tables wider than
# their panel (`roomy`: not even inside it); any of `names` wrapped over two
# lines, or cut without the whole name in its element's title.
MEASURE = """
([roomy, names]) => {
  const out = [];
  const doc = document.documentElement;
  if (doc.scrollWidth > doc.clientWidth) out.push(`page scrolls sideways: ${doc.scrollWidth} > ${doc.clientWidth}`);
  for (const a of document.querySelectorAll("header.top nav a")) {
    const r = a.getBoundingClientRect(), name = a.textContent.trim();
    if (r.width < 1 || r.left < 0 || r.right > doc.clientWidth) { out.push(`nav item ${name} is outside the viewport`); continue; }
    for (const x of [r.left + 2, r.left + r.width / 2, r.right - 2]) {
      const hit = document.elementFromPoint(x, r.top + r.height / 2);
      if (!a.contains(hit)) { out.push(`nav item ${name} is covered by ${hit ? hit.outerHTML.slice(0, 60) : "nothing"}`); break; }
    }
  }
  for (const table of document.querySelectorAll("main table")) {
    const box = table.parentElement;
    const scrolls = ["auto", "scroll"].includes(getComputedStyle(box).overflowX);
    const label = (box.querySelector("h2, h3") || table).textContent.trim().slice(0, 40);
    if (table.offsetWidth > box.clientWidth + 1 && (!scrolls || roomy)) {
      out.push(`table "${label}" (${table.offsetWidth} px) is wider than its panel (${box.clientWidth} px)`);
    }
  }
  const walk = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const text = walk.currentNode.textContent.trim(), el = walk.currentNode.parentElement;
    if (!names.includes(text) || !el.getClientRects().length) continue;
    const range = document.createRange();
    range.selectNodeContents(walk.currentNode);
    const lines = new Set(Array.from(range.getClientRects(), r => Math.round(r.top))).size;
    if (lines > 1) out.push(`name ${text} wraps over ${lines} lines`);
    if (el.scrollWidth > el.clientWidth + 1 && el.title !== text) out.push(`name ${text} is cut without its title`);
  }
  return out;
}
"""


def layout_problems(page, base_url: str, paths: list[str], mode: str) -> list[str]:
    """Every path at every width: what MEASURE reports, with a screenshot
    of each failing (path, width), or of each one with LAYOUT_SHOTS=1."""
    problems: list[str] = []
    for path in paths:
        page.set_viewport_size({"width": WIDTHS[-1], "height": 900})
        page.goto(base_url + path)
        expect(page.locator("main h1")).to_be_visible()
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            # A resize lays out again before the next evaluate's frame.
            found = page.evaluate(MEASURE, [width >= ROOMY, NAMES])
            if found or os.environ.get("LAYOUT_SHOTS"):  # LAYOUT_SHOTS=1: every page at every width, to look at
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                shot = SCREENSHOTS / f"layout-{mode}{re.sub(r'[^a-z0-9]+', '_', path)}-{width}.png"
                page.screenshot(path=str(shot), full_page=True)
                problems += [f"{path} at {width} px: {p} [{shot.name}]" for p in found]
    return problems


def nav_paths(page) -> list[str]:
    return page.eval_on_selector_all("header.top nav a", "els => els.map(a => a.getAttribute('href'))")


def with_detail_pages(page, base_url: str, paths: list[str]) -> list[str]:
    """The nav's pages plus a key's usage page (linked from the Keys page)."""
    page.goto(base_url + "/dashboard/keys/")
    link = page.locator("#keys-table a", has_text=LONG_KEY)
    expect(link).to_have_count(1)
    return [*paths, urlsplit(link.get_attribute("href") or "").path]


@pytest.fixture(scope="module")
def backends():
    servers = {name: openai_backend.server_thread(name, [MODEL]).start() for name in ("fake-a", LONG_BACKEND)}
    yield servers
    for server in servers.values():
        server.stop()


def _config(backends, extra: str = "") -> str:
    lines = ["api_keys: {mode: blocking}", "selection_strategy: weighted_round_robin", "backends:"]
    lines += [f"  - {{name: {name}, url: '{b.url}', models: [{MODEL}]}}" for name, b in backends.items()]
    # A backend nothing listens on: probe failing, breaker open, failures counted.
    lines.append(f"  - {{name: {DEAD_BACKEND}, url: 'http://127.0.0.1:9', models: [{MODEL}]}}")
    return "\n".join(lines) + "\n" + extra


def _traffic(node: Node) -> None:
    """Keys named like the ones that wrapped, requests on them (some fail
    over from the dead backend), the dead backend known as down."""
    _, key = node.create_key(LONG_KEY)
    node.create_key("team-a")
    node.chat(key, 6)
    wait_until(
        lambda: any(b["name"] == DEAD_BACKEND and not b["healthy"] for b in node.status()["backends"]),
        60,
        interval=0.5,
        what=f"{DEAD_BACKEND} marked down",
    )


@pytest.fixture(scope="module")
def plain_node(backends):
    node = Node.start(_config(backends))
    try:
        _traffic(node)
        yield node
    finally:
        node.stop()
        drop_redis_keys(node.redis_prefix)


@pytest.fixture(scope="module")
def router_node(backends):
    """A ROUTER-mode node registered with the fake coordinator, serving one
    published model (long name, aliases) from a deployment of two replicas."""
    fc = coordinator().start()
    authority = f"browser-router-{uuid.uuid4().hex[:8]}"
    port = free_port()
    section = f"""appproxy_router:
  enabled: true
  coordinator_url: "{fc.url}"
  api_secret: "${{APPPROXY_API_SECRET}}"
  redis_url: "{REDIS_URL}"
  channel: "{fc.channel}"
  authority: "{authority}"
  hostname: "127.0.0.1"
  api_port: {port}
  heartbeat_period: "2s"
  reconcile_interval: "2s"
"""
    node = None
    manager = RouterManager(fc, authority)
    try:
        node = Node.start(_config(backends, section), port=port, env={"APPPROXY_API_SECRET": API_SECRET})
        wait_until(
            lambda: fc.state.worker_by_authority(authority),
            60,
            interval=0.5,
            what="the node registered with the coordinator",
        )
        endpoint = manager.endpoint("a-deployment-with-a-long-service-name", *backends.values())
        manager.publish(LONG_MODEL, {endpoint: 1.0}, aliases=("chat-alias-one", "chat-alias-two"))
        _traffic(node)
        yield node
    finally:
        manager.http.close()
        if node is not None:
            node.stop()
            drop_redis_keys(node.redis_prefix)
        fc.stop()


def _session(browser, node, request):
    from tests.browser.conftest import PageLog

    log = PageLog()
    page, close = open_page(browser, log, request)
    login(page, node.url, node.admin_password)
    return page, close


# Pages a plain node answers but keeps out of its nav.
APPPROXY_PAGES = ["/dashboard/circuits/", "/dashboard/events/", "/dashboard/publications/"]


def test_no_page_of_a_plain_node_overflows_at_any_width(browser, plain_node, request):
    page, close = _session(browser, plain_node, request)
    try:
        paths = with_detail_pages(page, plain_node.url, nav_paths(page))
        problems = layout_problems(page, plain_node.url, paths + [p for p in APPPROXY_PAGES if p not in paths], "plain")
    finally:
        close()
    assert not problems, "\n".join(problems)


def test_no_page_of_a_router_node_overflows_at_any_width(browser, router_node, request):
    page, close = _session(browser, router_node, request)
    try:
        page.goto(router_node.url + "/dashboard/publications/")
        expect(page.locator("section[data-live=publications] .pill.ok", has_text="serving")).to_have_count(
            1, timeout=60_000
        )
        paths = nav_paths(page)
        assert set(APPPROXY_PAGES) <= set(paths), paths
        problems = layout_problems(page, router_node.url, with_detail_pages(page, router_node.url, paths), "router")
    finally:
        close()
    assert not problems, "\n".join(problems)


def test_the_overview_names_the_backend_that_is_down_and_counts_the_traffic(browser, plain_node, request):
    """The six chats the fixture sent (some tried the dead backend first and
    failed over) and the backend nothing listens on, without a reload."""
    page, close = _session(browser, plain_node, request)
    try:
        down = page.locator(f"#backends-down [data-backend='{DEAD_BACKEND}']")
        expect(down).to_contain_text(DEAD_BACKEND)
        expect(page.locator("#backends-down")).not_to_contain_text("fake-a")
        # The drainers write the aggregates within a second; the section refreshes every 2 s.
        expect(page.locator("#traffic-rate .sub")).to_have_text("6 requests answered", timeout=30_000)
        assert float(page.locator("#traffic-rate .value").get_attribute("data-value") or 0) > 0
        expect(page.locator("#traffic-errors .value")).to_have_text("0.0 %")
        assert float(page.locator("#traffic-latency .value").get_attribute("data-value") or 0) > 0
    finally:
        close()
