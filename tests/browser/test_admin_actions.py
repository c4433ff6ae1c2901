"""The dashboard's actions in a real browser: each button calls the admin API
(/api/v1) with the staff session and its CSRF token. A key created on the
Keys page serves /v1 through the official SDK and stops when disabled,
rotated or deleted; a config edit is validated with its errors inline, shows
its diff before it applies, and a rollback restores it; the audit page lists
the actions; no secret is ever in a page."""

from __future__ import annotations

import re

import openai
import pytest
from playwright.sync_api import expect

from tests.browser.nodes import MODEL, Node, drop_redis_keys, node_config
from tests.support.routerproc import wait_until

UPSTREAM_SECRET = "sk-upstream-browser-0123456789abcdef"  # a backend's api_key in the YAML


@pytest.fixture(scope="module")
def node(backends):
    """The conftest's node, with an upstream api_key in its config file."""
    config = node_config(backends).replace(
        "models: [browser-chat]}", f"models: [browser-chat], api_key: '{UPSTREAM_SECRET}'}}", 1
    )
    assert UPSTREAM_SECRET in config
    started = Node.start(config)
    yield started
    started.stop()
    drop_redis_keys(started.redis_prefix)


def answer_dialogs(page, prompt_answer: str = "0") -> list[str]:
    """Accept every confirm() and answer every prompt(); the messages seen."""
    seen: list[str] = []

    def on_dialog(dialog) -> None:
        seen.append(dialog.message)
        dialog.accept(prompt_answer if dialog.type == "prompt" else None)

    page.on("dialog", on_dialog)
    return seen


def chat_status(node: Node, key: str) -> int:
    """200 when the key is served, else the HTTP status the SDK raised."""
    try:
        node.chat(key)
    except openai.APIStatusError as exc:
        return exc.status_code
    return 200


def key_row(page, name: str):
    return page.locator("section[data-live=keys] tbody tr", has=page.locator("td strong", has_text=name))


def create_key_on_page(page, node: Node, name: str) -> str:
    page.goto(node.url + "/dashboard/keys/")
    page.fill("#key-create input[name=name]", name)
    page.fill("#key-create input[name=models]", MODEL)
    page.click("#key-create button[type=submit]")
    secret_box = page.locator("#new-key-secret")
    expect(secret_box).to_be_visible()
    secret = secret_box.input_value()
    assert secret.startswith("sk-"), secret
    expect(key_row(page, name)).to_have_count(1)  # the live table refreshed at once
    return secret


def test_a_key_created_on_the_keys_page_serves_v1_and_each_button_stops_it(page, node):
    dialogs = answer_dialogs(page)
    secret = create_key_on_page(page, node, "dash-made")
    wait_until(lambda: chat_status(node, secret) == 200, 30, interval=0.3, what="the new key served")

    row = key_row(page, "dash-made")
    row.locator("button[data-key-action=disable]").click()
    expect(row.locator(".pill", has_text="disabled")).to_be_visible()
    wait_until(lambda: chat_status(node, secret) == 401, 30, interval=0.3, what="the disabled key refused")

    row.locator("button[data-key-action=enable]").click()
    expect(row.locator(".pill", has_text="active")).to_be_visible()
    wait_until(lambda: chat_status(node, secret) == 200, 30, interval=0.3, what="the enabled key served")

    row.locator("button[data-key-action=rotate]").click()  # the prompt answers 0: no grace
    expect(page.locator("#key-result")).to_contain_text("rotated")
    rotated = page.locator("#new-key-secret").input_value()
    assert rotated.startswith("sk-") and rotated != secret
    wait_until(lambda: chat_status(node, secret) == 401, 30, interval=0.3, what="the old secret refused")
    wait_until(lambda: chat_status(node, rotated) == 200, 30, interval=0.3, what="the rotated secret served")

    key_row(page, "dash-made").locator("button[data-key-action=delete]").click()
    expect(page.locator("#key-result")).to_contain_text("deleted")
    wait_until(lambda: chat_status(node, rotated) == 401, 30, interval=0.3, what="the deleted key refused")
    assert any("seconds the old secret keeps working" in d for d in dialogs), dialogs
    assert any(d.startswith("Delete key dash-made?") for d in dialogs), dialogs

    # Shown once: a reload of the page has neither secret.
    page.reload()
    expect(page.locator("section[data-live=keys] table")).to_be_visible()
    html = page.content()
    assert secret not in html and rotated not in html


def test_coordinator_keys_have_no_buttons_and_operator_keys_do(page, node):
    node.create_key("cli-made")
    page.goto(node.url + "/dashboard/keys/")
    expect(key_row(page, "cli-made").locator("button[data-key-action]")).to_have_count(3)
    # Every row with a button is an operator key.
    sources = page.eval_on_selector_all(
        "section[data-live=keys] tbody tr:has(button[data-key-action]) .pill[class*=src-]",
        "els => els.map(e => e.textContent.trim())",
    )
    assert sources and set(sources) == {"operator"}, sources


def editor_text(page) -> str:
    editor = page.locator("#config-text")
    expect(editor).to_have_value(re.compile(r"selection_strategy:"))
    return editor.input_value()


def current_version(page) -> int:
    facts = page.locator("#config-facts")
    expect(facts).to_have_text(re.compile(r"^version \d+ · "))
    return int(facts.inner_text().split()[1])


def expect_version(page, n: int) -> None:
    expect(page.locator("#config-facts")).to_have_text(re.compile(rf"^version {n} · "))


def test_an_invalid_config_edit_shows_its_error_inline_and_changes_nothing(page, node):
    config_file = node.var_dir / "router.yaml"
    page.goto(node.url + "/dashboard/config/")
    text = editor_text(page)
    before_version, before_file = current_version(page), config_file.read_text()
    page.fill("#config-text", text.replace("selection_strategy: weighted_round_robin", "selection_strategy: bogus"))

    page.click("#config-validate")
    error = page.locator("#config-errors li[data-path=selection_strategy]")
    expect(error).to_be_visible()
    expect(page.locator("#config-status")).to_contain_text("nothing was changed")

    page.click("#config-apply")  # the dry run before the diff refuses it too
    expect(error).to_be_visible()
    expect(page.locator("#config-review")).to_be_hidden()
    page.click("#config-reload")
    expect_version(page, before_version)
    assert config_file.read_text() == before_file


def test_a_valid_edit_applies_after_its_diff_and_a_rollback_restores_it(page, node):
    dialogs = answer_dialogs(page)
    config_file = node.var_dir / "router.yaml"
    page.goto(node.url + "/dashboard/config/")
    text = editor_text(page)
    assert UPSTREAM_SECRET not in text and "api_key: '***'" in text
    version = current_version(page)
    page.fill(
        "#config-text", text.replace("selection_strategy: weighted_round_robin", "selection_strategy: least_in_flight")
    )

    page.click("#config-apply")
    diff = page.locator("#config-diff")
    expect(diff.locator(".del")).to_have_text(["-selection_strategy: weighted_round_robin"])
    expect(diff.locator(".add")).to_have_text(["+selection_strategy: least_in_flight"])
    assert "least_in_flight" not in config_file.read_text()  # nothing applied before the confirm
    page.click("#config-confirm")
    expect(page.locator("#config-status")).to_contain_text(f"Applied: the config is now version {version + 1}.")
    expect_version(page, version + 1)
    written = config_file.read_text()
    assert "least_in_flight" in written and UPSTREAM_SECRET in written  # the masked secret was kept
    newest = page.locator("#versions-table tbody tr").first
    expect(newest).to_have_attribute("data-version", str(version + 1))
    expect(newest).to_contain_text("dashboard")
    expect(newest).to_contain_text("user:admin")

    page.locator(f"#versions-table tr[data-version='{version}'] button[data-version-action=rollback]").click()
    expect(page.locator("#history-status")).to_contain_text(
        f"Rolled back: version {version + 2} equals version {version}."
    )
    expect_version(page, version + 2)
    assert "selection_strategy: weighted_round_robin" in editor_text(page)
    assert "weighted_round_robin" in config_file.read_text() and UPSTREAM_SECRET in config_file.read_text()
    assert any(d.startswith(f"Roll back to version {version}?") for d in dialogs), dialogs

    # A diff between two versions, masked.
    page.fill("#version-diff-form input[name=from]", str(version))
    page.fill("#version-diff-form input[name=to]", str(version + 1))
    page.click("#version-diff-form button[type=submit]")
    expect(page.locator("#version-view-text .add")).to_have_text(["+selection_strategy: least_in_flight"])


def test_a_config_changed_meanwhile_is_a_conflict_with_a_reload(page, node, browser):
    page.goto(node.url + "/dashboard/config/")
    text = editor_text(page)
    version = current_version(page)
    other = page.context.new_page()  # the same operator in a second tab applies first
    other.goto(node.url + "/dashboard/config/")
    other.fill("#config-text", editor_text(other).replace("weighted_round_robin", "least_latency"))
    other.click("#config-apply")
    other.click("#config-confirm")
    expect(other.locator("#config-status")).to_contain_text(f"version {version + 1}")

    page.fill("#config-text", text.replace("weighted_round_robin", "least_in_flight"))
    page.click("#config-apply")
    expect(page.locator("#config-status")).to_contain_text("Someone else changed the config")
    page.click("#config-conflict-reload")
    expect_version(page, version + 1)
    assert "least_latency" in editor_text(page)


def test_drain_buttons_and_the_audit_page_list_the_actions(page, node, backends):
    create_key_on_page(page, node, "audited-key")
    page.goto(node.url + "/dashboard/backends/")
    name = next(iter(backends))
    row = page.locator("section[data-live=backends] tbody tr", has=page.locator("td.name strong", has_text=name))
    row.locator("button[data-backend-action=drain]").click()
    expect(row.locator(".pill", has_text="drained")).to_be_visible()
    row.locator("button[data-backend-action=undrain]").click()
    expect(row.locator("button[data-backend-action=drain]")).to_be_visible()

    page.goto(node.url + "/dashboard/audit/")
    table = page.locator("#audit-table tbody")
    expect(table.locator("tr[data-action='key.create']").first).to_be_visible()
    expect(table.locator("tr[data-action='backend.drain']", has_text=f"backend:{name}")).to_have_count(1)
    expect(table.locator("tr[data-action='backend.undrain']", has_text=f"backend:{name}")).to_have_count(1)
    expect(table.locator("tr").first).to_contain_text("user:admin")
    page.fill("#audit-filter input[name=action]", "backend.")
    page.click("#audit-filter button[type=submit]")
    expect(table.locator("tr")).to_have_count(2)
    expect(page.locator("#audit-range")).to_have_text("1–2 of 2")


@pytest.mark.parametrize(
    "path", ["/dashboard/config/", "/dashboard/keys/", "/dashboard/backends/", "/dashboard/audit/"]
)
def test_no_secret_in_any_page(page, node, path):
    """Neither the upstream api_key of the YAML nor a key's plaintext is in
    the HTML, nor in what the page's scripts loaded into it."""
    _, plaintext = node.create_key()
    page.goto(node.url + path)
    if path == "/dashboard/config/":
        editor_text(page)
        expect(page.locator("#versions-table tbody tr").first).to_be_visible()
        page.locator("#versions-table button[data-version-action=view]").first.click()
        expect(page.locator("#version-view-text")).to_contain_text("***")
    page.wait_for_load_state("networkidle")
    seen = page.content() + page.evaluate(
        "Array.from(document.querySelectorAll('textarea, input')).map(e => e.value).join('\\n')"
    )
    assert UPSTREAM_SECRET not in seen and plaintext not in seen
