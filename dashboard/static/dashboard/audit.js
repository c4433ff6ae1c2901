/* The Audit page: the admin API's audit log (/api/v1/audit), a page at a
   time, newest first, filtered by action, actor or target. Needs api.js. */
(function () {
  "use strict";
  var api = window.routerApi;
  var $ = function (id) { return document.getElementById(id); };
  var LIMIT = 50;
  var offset = 0, total = 0, filters = {};

  function cell(text, cls) { return api.el("td", cls ? {"class": cls} : {}, text); }

  function digest(value) {
    var td = cell(value ? value.slice(0, 12) : "—", "mono");
    if (value) { td.title = value; }
    return td;
  }

  function row(e) {
    var tr = api.el("tr", {"data-action": e.action});
    tr.appendChild(cell(e.at.replace("T", " ").slice(0, 19) + " UTC", "nowrap"));
    tr.appendChild(cell(e.actor));
    tr.appendChild(cell(e.action, "mono"));
    tr.appendChild(cell(e.target, "mono"));
    tr.appendChild(digest(e.before));
    tr.appendChild(digest(e.after));
    var keys = Object.keys(e.detail || {});
    tr.appendChild(cell(keys.map(function (k) { return k + ": " + JSON.stringify(e.detail[k]); }).join(" · "), "mono"));
    return tr;
  }

  function load() {
    var query = {limit: LIMIT, offset: offset};
    Object.keys(filters).forEach(function (k) { query[k] = filters[k]; });
    api.call("GET", "/audit", {query: query}).then(function (res) {
      if (!res.ok) { api.notify($("audit-status"), "bad", api.message(res)); return; }
      api.notify($("audit-status"), "", "");
      total = res.body.total;
      var body = $("audit-table").tBodies[0];
      body.innerHTML = "";
      res.body.data.forEach(function (e) { body.appendChild(row(e)); });
      if (!res.body.data.length) {
        var empty = api.el("td", {"colspan": "7", "class": "empty"}, "No entries.");
        body.appendChild(api.el("tr")).appendChild(empty);
      }
      $("audit-range").textContent = total ? (offset + 1) + "–" + (offset + res.body.data.length) + " of " + total : "0 entries";
      $("audit-prev").disabled = offset === 0;
      $("audit-next").disabled = offset + LIMIT >= total;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    $("audit-prev").addEventListener("click", function () { offset = Math.max(0, offset - LIMIT); load(); });
    $("audit-next").addEventListener("click", function () { offset += LIMIT; load(); });
    $("audit-filter").addEventListener("submit", function (event) {
      event.preventDefault();
      var f = event.target.elements;
      filters = {action: f.action.value.trim(), actor: f.actor.value.trim(), target: f.target.value.trim()};
      offset = 0;
      load();
    });
    load();
  });
})();
