/* The dashboard's plots: one small layer over the vendored uPlot (1.6.32).

   A plot is an element with `data-chart-src="<url of a JSON series>"`:
     {"t": [epoch seconds, ...],
      "series": [{"label": "2xx", "key": "vllm-a"|null, "values": [number|null, ...]}, ...],
      "unit": "req/s"}
   `routerCharts.mountAll()` draws every such element on the page and
   refreshes it every `data-chart-refresh` ms (default 10 s). After each draw
   the element carries `data-points` = the number of non-null, non-zero values
   plotted (what a browser test waits on), `data-state` = "drawn",
   "empty" (no data in the window: a message is shown instead) or "error",
   and `data-unit` = the unit on its y axis. Each load dispatches
   `routercharts:load` on the document ({detail: {ok, error}}), which the
   page header shows as the plots' live state.

   What an operator reads without touching the plot: the y axis names its
   unit (durations switch from ms to s once a plot reaches a second); the
   legend shows the newest bucket that has data (hovering shows the bucket
   under the cursor); a series with a `key` (one backend, model or node)
   has the same colour on every plot of the page, picked by a hash of the
   key so it is mostly the same across reloads too. */
(function () {
  "use strict";
  // No red or amber here: those are the error classes' (a backend drawn red reads as failing).
  var PALETTE = ["#2f6fed", "#1b8a4a", "#6b3fc4", "#17777a", "#d9480f", "#b5179e",
                 "#3a86a8", "#6a994e", "#7f5539", "#495057", "#b08800", "#364fc7"];
  var OTHER = "#98a1b3";  // `other`: the values beyond the busiest, always grey
  // The totals' own series, one colour each wherever they appear.
  var FIXED = { "4xx": "#9a6700", "5xx": "#c0362c", p50: "#1b8a4a", p95: "#2f6fed", p99: "#6b3fc4" };
  var byKey = {}, owner = {};  // key → colour; palette index → key (this page's claims)

  function hash(text) {  // FNV-1a, 32 bit
    var h = 0x811c9dc5;
    for (var i = 0; i < text.length; i++) { h ^= text.charCodeAt(i); h = Math.imul(h, 0x01000193) >>> 0; }
    return h;
  }

  // A key's colour: its hash's slot in the palette, or the next one no other
  // key of this page holds; once given, it stays for the page's life.
  function colour(key) {
    if (key === "other") return OTHER;
    if (byKey[key]) return byKey[key];
    var start = hash(key) % PALETTE.length, i = start;
    for (var n = 0; n < PALETTE.length && owner[i] !== undefined; n++) i = (i + 1) % PALETTE.length;
    if (owner[i] !== undefined) i = start;  // more keys than colours: share the hashed one
    owner[i] = key;
    return (byKey[key] = PALETTE[i]);
  }

  // 0.005 → "0.005", 12.345 → "12.35": small rates keep their digits.
  function fmt(v) {
    if (v === null || v === undefined) return "–";
    return String(Math.abs(v) < 1 && v !== 0 ? +v.toPrecision(2) : +v.toFixed(2));
  }

  function stroke(s, i) {
    if (s.key) return colour(s.key);
    return FIXED[s.label] || PALETTE[i % PALETTE.length];
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

  // The newest bucket any series has a (non-zero) value in: what the legend
  // shows while the cursor is elsewhere.
  function newest(data) {
    for (var i = data.t.length - 1; i >= 0; i--) {
      for (var k = 0; k < data.series.length; k++) {
        var v = data.series[k].values[i];
        if (v !== null && v !== undefined && v !== 0) return i;
      }
    }
    return data.t.length - 1;
  }

  // Durations in ms read as seconds once a plot reaches a second.
  function scaleOf(unit, series) {
    if (unit !== "ms") return { unit: unit, by: 1 };
    var top = 0;
    series.forEach(function (s) { s.values.forEach(function (v) { if (v > top) top = v; }); });
    return top >= 1000 ? { unit: "s", by: 1000 } : { unit: "ms", by: 1 };
  }

  function withUnit(v, unit) {
    if (v === null || v === undefined) return "–";
    if (unit === "ms") return v >= 1000 ? fmt(v / 1000) + " s" : fmt(v) + " ms";
    return fmt(v) + (unit ? " " + unit : "");
  }

  function clock(t) {
    return new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
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
    var axis = scaleOf(unit, series);
    var rest = newest(data);
    el.dataset.unit = axis.unit;
    var resting = false;
    // The legend off the cursor: the newest bucket with data, said so.
    function atRest(u) {
      if (u.cursor.idx !== null && u.cursor.idx !== undefined) return;
      resting = true;
      try { u.setLegend({ idx: rest }, false); } finally { resting = false; }
    }
    var opts = {
      width: Math.max(280, el.clientWidth || 600),
      height: Number(el.dataset.chartHeight || 200),
      series: [{
        value: function (u, v) {
          if (v === null || v === undefined) return "–";
          return clock(v) + (resting ? " (latest)" : "");
        },
      }].concat(series.map(function (s, i) {
        return {
          label: s.label,
          stroke: stroke(s, i),
          width: 1.5,
          spanGaps: false,
          // A point where a line has no neighbour to join (one busy minute) still shows.
          points: { show: true, size: 4 },
          value: function (u, v) { return withUnit(v, unit); },
        };
      })),
      axes: [{}, {
        size: 60,
        label: axis.unit,
        labelSize: 20,
        values: function (u, vals) { return vals.map(function (v) { return fmt(v / axis.by); }); },
      }],
      scales: { x: { time: true } },
      legend: { live: true },
      hooks: { ready: [atRest], setCursor: [atRest] },
    };
    var columns = [data.t].concat(series.map(function (s) { return s.values; }));
    el._plot = new uPlot(opts, columns, el);
    el.dataset.state = "drawn";
  }

  function report(ok, error) {
    document.dispatchEvent(new CustomEvent("routercharts:load", { detail: { ok: ok, error: error || "" } }));
  }

  function load(el) {
    return fetch(el.dataset.chartSrc, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (data) { draw(el, data); report(true); })
      .catch(function (err) {
        el.dataset.state = "error";
        message(el, "Could not load this plot (" + err.message + ").");
        report(false, err.message);
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
