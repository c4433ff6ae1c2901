/* The dashboard's plots: one small layer over the vendored uPlot (1.6.32).

   A plot is an element with `data-chart-src="<url of a JSON series>"`:
     {"t": [epoch seconds, ...],
      "series": [{"label": "2xx", "values": [number|null, ...]}, ...],
      "unit": "req/s"}
   `routerCharts.mountAll()` draws every such element on the page and
   refreshes it every `data-chart-refresh` ms (default 10 s). After each draw
   the element carries `data-points` = the number of non-null, non-zero values
   plotted (what a browser test waits on) and `data-state` = "drawn",
   "empty" (no data in the window: a message is shown instead) or "error". */
(function () {
  "use strict";
  var PALETTE = ["#2f6fed", "#1b8a4a", "#c0362c", "#9a6700", "#6b3fc4", "#17777a", "#d9480f", "#5c677d"];

  // 0.005 → "0.005", 12.345 → "12.35": small rates keep their digits.
  function fmt(v) {
    if (v === null || v === undefined) return "–";
    return String(Math.abs(v) < 1 && v !== 0 ? +v.toPrecision(2) : +v.toFixed(2));
  }

  function count(series) {
    var n = 0;
    series.forEach(function (s) {
      s.values.forEach(function (v) { if (v !== null && v !== 0) n++; });
    });
    return n;
  }

  function message(el, text) {
    var box = el.querySelector(".chart-empty");
    if (!box) {
      box = document.createElement("div");
      box.className = "chart-empty muted";
      el.appendChild(box);
    }
    box.textContent = text;
    box.hidden = !text;
  }

  function draw(el, data) {
    var series = data.series || [];
    var points = count(series);
    el.dataset.points = String(points);
    if (el._plot) { el._plot.destroy(); el._plot = null; }
    if (!data.t || !data.t.length || !points) {
      el.dataset.state = "empty";
      message(el, el.dataset.chartEmpty || "No requests in this window yet.");
      return;
    }
    message(el, "");
    var unit = data.unit || "";
    var opts = {
      width: Math.max(280, el.clientWidth || 600),
      height: Number(el.dataset.chartHeight || 200),
      series: [{}].concat(series.map(function (s, i) {
        return {
          label: s.label,
          stroke: PALETTE[i % PALETTE.length],
          width: 1.5,
          spanGaps: false,
          // A point where a line has no neighbour to join (one busy minute) still shows.
          points: { show: true, size: 4 },
          value: function (u, v) { return v === null || v === undefined ? "–" : fmt(v) + (unit ? " " + unit : ""); },
        };
      })),
      axes: [{}, { size: 60, values: function (u, vals) { return vals.map(fmt); } }],
      scales: { x: { time: true } },
      legend: { live: true },
    };
    var columns = [data.t].concat(series.map(function (s) { return s.values; }));
    el._plot = new uPlot(opts, columns, el);
    el.dataset.state = "drawn";
  }

  function load(el) {
    return fetch(el.dataset.chartSrc, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (data) { draw(el, data); })
      .catch(function (err) {
        el.dataset.state = "error";
        message(el, "Could not load this plot (" + err.message + ").");
      });
  }

  function mount(el) {
    if (el._mounted) return;
    el._mounted = true;
    load(el);
    var every = Number(el.dataset.chartRefresh || 10000);
    if (every > 0) setInterval(function () { if (!document.hidden) load(el); }, every);
  }

  function mountAll(root) {
    (root || document).querySelectorAll("[data-chart-src]").forEach(mount);
  }

  window.routerCharts = { draw: draw, load: load, mount: mount, mountAll: mountAll };
  document.addEventListener("DOMContentLoaded", function () { mountAll(); });
})();
