"""Browser tests: Playwright (Python) driving Debian's Chromium against a real
node (`manage.py runnode`, fake backends on loopback).

Fixtures:
- `node` (module): a started Node (tests/browser/nodes.py) — `url`,
  `status_token`, `create_key()`, `chat()`, `redis_prefix`; `backends`
  (module) are its fake backends by name.
- `join_node` (module): factory starting a second node of the same
  deployment (same DB and ROUTER_REDIS_PREFIX); stopped with the module.
- `browser` (module): headless Chromium, /usr/bin/chromium. Missing
  browser = a failed test with the fix in its message, never a skip.
- `page` (function): a fresh context logged in through the admin login
  form, landed on /dashboard/. `page_log` holds what the page reported:
  JS errors (uncaught exceptions, console errors) fail the test at
  teardown; every response and failed request is listed for the test to
  assert on (`page_log.bad("/static/")`). On failure a screenshot goes to
  var/browser-screenshots/<test name>.png.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.browser.nodes import ADMIN_USER, Node, drop_redis_keys, node_config, start_backends
from tests.support.routerproc import ROOT

try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError as exc:  # a clear failure, not a skip
    raise pytest.UsageError(f"the browser tests need playwright ({exc}); run `make setup-dev`") from exc

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = ROOT / "var" / "browser-screenshots"
TIMEOUT_MS = 30_000  # a busy 2-core machine: generous, the waits return as soon as they can


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="module")
def browser() -> Browser:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests drive Debian's Chromium. Run `make setup-dev` "
            "(as root it installs the `chromium` package) or `apt-get install chromium`.",
            pytrace=False,
        )
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def backends():
    servers = start_backends("fake-a", "fake-b")
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="module")
def node(backends):
    started = Node.start(node_config(backends))
    yield started
    started.stop()
    drop_redis_keys(started.redis_prefix)


@pytest.fixture(scope="module")
def join_node(node, backends):
    """Factory: another node of `node`'s deployment, on its own port."""
    nodes: list[Node] = []

    def start(**kwargs) -> Node:
        nodes.append(Node.start(node_config(backends), join=node, **kwargs))
        return nodes[-1]

    yield start
    for other in nodes:
        other.stop()


@dataclass
class PageLog:
    js_errors: list[str] = field(default_factory=list)
    responses: list[tuple[str, int]] = field(default_factory=list)  # (URL, HTTP status)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (URL, why) of requests that got no response

    def bad(self, part: str = "") -> list[str]:
        """Failed requests and responses >= 400 whose path contains `part`."""
        return [f"{url}: {why}" for url, why in self.failed if part in urlsplit(url).path] + [
            f"{url}: HTTP {status}" for url, status in self.responses if status >= 400 and part in urlsplit(url).path
        ]

    def clear(self) -> None:
        self.js_errors.clear()
        self.responses.clear()
        self.failed.clear()


@pytest.fixture
def page_log() -> PageLog:
    return PageLog()


def login(page: Page, base_url: str, password: str, next_path: str = "/dashboard/") -> None:
    """Log in through the real admin login form and land on `next_path`."""
    page.goto(f"{base_url}/admin/login/?next={next_path}")
    page.fill("#id_username", ADMIN_USER)
    page.fill("#id_password", password)
    with page.expect_navigation(url=re.compile(re.escape(base_url + next_path) + r"$")):
        page.click("input[type=submit]")


def _shot_name(item) -> str:
    return re.sub(r"[^\w.\[\]-]+", "_", item.name)[:150] + ".png"


def _failed(item) -> bool:
    return any(getattr(getattr(item, f"rep_{when}", None), "failed", False) for when in ("setup", "call"))


def open_page(browser: Browser, log: PageLog, request) -> tuple[Page, Callable[[], None]]:
    """A new context's page with the collectors wired; the returned close()
    screenshots a failed test, closes the context and fails on JS errors."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.on("pageerror", lambda exc: log.js_errors.append(f"{page.url}: uncaught {exc.name}: {exc.message}"))
    page.on("console", lambda msg: _console(page, msg, log))
    page.on("requestfailed", lambda r: log.failed.append((r.url, r.failure or "failed")))
    page.on("response", lambda r: log.responses.append((r.url, r.status)))

    def close() -> None:
        try:
            if _failed(request.node) or log.js_errors:
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                target: Path = SCREENSHOTS / _shot_name(request.node)
                page.screenshot(path=str(target), full_page=True)
                print(f"screenshot: {target}")
        finally:
            context.close()
        if log.js_errors:
            pytest.fail("the page logged JS errors:\n" + "\n".join(log.js_errors), pytrace=False)

    return page, close


def _console(page: Page, msg, log: PageLog) -> None:
    # "Failed to load resource" is a failed request: PageLog.bad() has it with its URL.
    if msg.type == "error" and not msg.text.startswith("Failed to load resource"):
        log.js_errors.append(f"{page.url}: console.error: {msg.text}")


@pytest.fixture
def page(browser, node, page_log, request) -> Page:
    """Logged in as the node's admin, on /dashboard/."""
    page, close = open_page(browser, page_log, request)
    try:
        login(page, node.url, node.admin_password)
        yield page
    finally:
        close()
