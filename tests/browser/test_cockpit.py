"""The operator's cockpit in a real browser: plots drawn from requests sent with
the official SDK, a key's usage rising after its requests, and what a new
operator tripped over (tiles that clipped, the favicon), and a second node
joining the cluster view."""

from __future__ import annotations

import openai
import pytest
from playwright.sync_api import expect

from config.namespace import node_id
from tests.browser.nodes import MODEL
from tests.support.routerproc import wait_until

DRAWN_S = 30_000  # ms: the drainer writes every 0.25 s, a plot refreshes every 10 s


# Records the text every canvas draws, by the id of its plot (axis labels
# and tick values are drawn, not in the DOM).
CANVAS_TEXT = """
(() => {
  const fillText = CanvasRenderingContext2D.prototype.fillText;
  window.__canvasText = {};
  CanvasRenderingContext2D.prototype.fillText = function (text, ...rest) {
    const chart = this.canvas.closest(".chart");
    if (chart) (window.__canvasText[chart.id] = window.__canvasText[chart.id] || []).push(String(text));
    return fillText.call(this, text, ...rest);
  };
})();
"""


def _legend(page, selector: str) -> list[tuple[str, str, str]]:
    """(label, shown value, marker colour) of each legend row, the x row first."""
    return [
        tuple(row)
        for row in page.eval_on_selector_all(
            f"{selector} .u-legend .u-series",
            """rows => rows.map(r => [
                (r.querySelector('.u-label') || {}).textContent || '',
                (r.querySelector('.u-value') || {}).textContent || '',
                r.querySelector('.u-marker') ? getComputedStyle(r.querySelector('.u-marker')).borderColor : '',
            ])""",
        )
    ]


def _drawn_points(page, selector: str) -> int:
    chart = page.locator(selector)
    expect(chart).to_have_attribute("data-state", "drawn", timeout=DRAWN_S)
    return int(chart.get_attribute("data-points") or 0)


def test_the_charts_plot_the_requests_the_sdk_sent(page, node, backends):
    _, key = node.create_key()
    with node.client(key) as client:
        replies = [
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"plot {i}"}])
            for i in range(4)
        ]
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "plot stream"}], stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert all(r.usage and r.usage.completion_tokens > 0 for r in replies)
    # One refused before routing: a series of its own, last by volume on the
    # request plot and alone on the error plot, so its colour cannot follow
    # its position.
    with node.client("sk-not-a-key") as stranger, pytest.raises(openai.AuthenticationError):
        stranger.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "refused"}])

    page.add_init_script(CANVAS_TEXT)
    page.goto(node.url + "/dashboard/charts/?window=15m")
    for name in ("requests", "latency", "tokens"):
        assert _drawn_points(page, f"#chart-{name}") > 0, name
    # uPlot draws into a canvas.
    expect(page.locator("#chart-requests canvas").first).to_be_visible()
    # The header says the plots are live (they refresh), not "static".
    expect(page.locator("#live-status")).to_contain_text("live · plots", timeout=DRAWN_S)

    # Without a hover, the legend shows the newest values, with their unit.
    units = {"requests": ("req/s",), "latency": ("ms", "s"), "tokens": ("tokens/s",)}
    for name, allowed in units.items():
        legend = _legend(page, f"#chart-{name}")
        assert legend[0][1].endswith("(latest)"), legend
        assert legend[1:] and all(v != "–" and v.split(" ", 1)[1] in allowed for _, v, _ in legend[1:]), legend
        # The y axis names its unit: uPlot draws the label into the canvas.
        drawn = page.evaluate("id => window.__canvasText[id] || []", f"chart-{name}")
        unit = page.locator(f"#chart-{name}").get_attribute("data-unit")
        assert unit in allowed and unit in drawn, (name, unit, drawn)

    # Hovering shows the bucket under the cursor; leaving brings the newest back.
    page.hover("#chart-requests .u-over", position={"x": 5, "y": 5})
    expect(page.locator("#chart-requests .u-legend .u-series").first).not_to_contain_text("(latest)")
    page.mouse.move(0, 0)
    expect(page.locator("#chart-requests .u-legend .u-series").first).to_contain_text("(latest)")

    # Broken down per backend, the legend names the backends that served them
    # and the refused request readably, each in one colour on every plot and
    # no two alike on one plot.
    page.goto(node.url + "/dashboard/charts/?window=15m&by=backend")
    for name in ("requests", "latency", "errors"):
        assert _drawn_points(page, f"#chart-{name}") > 0, name
    rates = {label: colour for label, _, colour in _legend(page, "#chart-requests")[1:]}
    p95s = {label.removesuffix(" p95"): colour for label, _, colour in _legend(page, "#chart-latency")[1:]}
    errors = {label: colour for label, _, colour in _legend(page, "#chart-errors")[1:]}
    served = set(rates) & set(backends)
    assert served and set(rates) == served | {"not routed"} and set(errors) == {"not routed"}, (rates, errors)
    assert {b: rates[b] for b in rates} == {b: p95s[b] for b in rates}
    assert errors["not routed"] == rates["not routed"]
    assert len(set(rates.values())) == len(rates), rates


def test_a_keys_usage_rises_after_its_requests(page, node):
    name, key = node.create_key()
    page.goto(node.url + "/dashboard/keys/")
    row = page.locator("#keys-table tr[data-key-ref]", has_text=name)
    expect(row).to_have_count(1, timeout=20_000)
    ref = row.get_attribute("data-key-ref")
    assert ref and ref.startswith("operator:")

    detail = f"{node.url}/dashboard/keys/{ref}/?days=1"
    page.goto(detail)
    expect(page.locator("h1")).to_contain_text(name)
    assert int(page.locator("#usage-requests").get_attribute("data-value") or 0) == 0

    with node.client(key) as client:
        replies = [
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"usage {i}"}])
            for i in range(3)
        ]
    prompt = sum(r.usage.prompt_tokens for r in replies)
    completion = sum(r.usage.completion_tokens for r in replies)

    def totals() -> tuple[int, int, int]:
        page.goto(detail)
        return tuple(
            int(page.locator(sel).get_attribute("data-value") or 0)
            for sel in ("#usage-requests", "#usage-prompt-tokens", "#usage-completion-tokens")
        )

    wait_until(lambda: totals() == (3, prompt, completion), 30, interval=1.0, what=f"usage of {name}")
    assert _drawn_points(page, "#usage-chart") > 0


def test_overview_tiles_fit_and_the_favicon_is_served(page, page_log, node):
    page.goto(node.url + "/dashboard/")
    tiles = page.locator(".fact")
    expect(tiles.first).to_be_visible()
    clipped = page.eval_on_selector_all(
        ".fact .value",
        """els => els.filter(e => {
            const tile = e.closest('.fact').getBoundingClientRect();
            const text = document.createRange(); text.selectNodeContents(e);
            return text.getBoundingClientRect().right > tile.right - 1;
        }).map(e => e.textContent.trim())""",
    )
    assert clipped == [], f"tile values wider than their tile: {clipped}"
    favicon = page.request.get(node.url + "/favicon.ico")
    assert favicon.ok and favicon.headers["content-type"].startswith("image/svg")
    # The page's own icon request (a navigation may abort it; it must never be an error status).
    assert [status for url, status in page_log.responses if "favicon" in url and status >= 400] == []


def test_a_second_node_appears_in_the_cluster_view_without_a_reload(page, node, join_node):
    page.goto(node.url + "/dashboard/cluster/")
    first = node_id(node.var_dir)
    expect(page.locator(f"section[data-live=cluster] tr[data-role=web][data-process^='{first}/']")).to_have_count(
        1, timeout=20_000
    )
    page.evaluate("window.__sameDocument = true")

    second = join_node()
    joined = node_id(second.var_dir)
    assert joined != first
    expect(page.locator(f"section[data-live=cluster] tr[data-role=web][data-process^='{joined}/']")).to_have_count(
        1, timeout=30_000
    )
    expect(page.locator(f"section[data-live=cluster] tr[data-role=tasks][data-process^='{joined}/']")).to_have_count(
        1, timeout=30_000
    )
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
