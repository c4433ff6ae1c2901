/* The Config page: the routing document (masked) in an editor, validated
   and applied through the admin API, and its history with diffs and
   rollback. Every write is conditional on the version the editor loaded
   (If-Match), so a change made meanwhile by someone else is a 409 here,
   never silently overwritten. Needs api.js (window.routerApi). */
(function () {
  "use strict";
  var api = window.routerApi;
  var $ = function (id) { return document.getElementById(id); };
  var loaded = null;  /* the version number the editor's text is based on */
  var versionsOffset = 0;
  var PAGE = 50;

  function tag(n) { return '"' + n + '"'; }

  function showErrors(list) {
    var ul = $("config-errors");
    ul.innerHTML = "";
    ul.hidden = !list.length;
    list.forEach(function (e) {
      var li = api.el("li", {"data-path": e.path || ""});
      li.appendChild(api.el("code", {}, e.path || "<document>"));
      li.appendChild(document.createTextNode(" " + e.message));
      ul.appendChild(li);
    });
  }

  function closeReview() { $("config-review").hidden = true; }

  /* A refusal of a write: inline errors, a conflict with a reload, or the message. */
  function refused(res) {
    var err = (res.body && res.body.error) || {};
    if (err.code === "invalid_config" || err.code === "invalid_request") {
      showErrors(err.errors || [{path: err.param, message: err.message}]);
      api.notify($("config-status"), "bad", "Not valid: nothing was changed.");
      return;
    }
    if (err.code === "version_conflict") {
      var box = $("config-status");
      api.notify(box, "bad", "Someone else changed the config meanwhile (it is now version " + err.current_version +
        "); your edit was not applied. Reload to see their change, then apply yours again.");
      var reload = api.el("button", {"type": "button", "id": "config-conflict-reload"}, "Reload");
      reload.addEventListener("click", load);
      box.firstChild.appendChild(document.createTextNode(" "));
      box.firstChild.appendChild(reload);
      return;
    }
    api.notify($("config-status"), "bad", api.message(res));
  }

  function load() {
    closeReview(); showErrors([]);
    return Promise.all([api.call("GET", "/config"), api.call("GET", "/config", {query: {format: "yaml"}})])
      .then(function (both) {
        var meta = both[0], text = both[1];
        if (!meta.ok || !text.ok) { api.notify($("config-status"), "bad", api.message(meta.ok ? text : meta)); return; }
        var etag = text.headers.get("ETag");
        loaded = etag ? parseInt(etag.replace(/"/g, ""), 10) : null;
        $("config-text").value = text.body;
        $("config-facts").textContent = "version " + (loaded === null ? "—" : loaded) + " · " + meta.body.path;
        api.notify($("config-status"), "", "");
      });
  }

  function put(dryRun) {
    var headers = loaded === null ? {} : {"If-Match": tag(loaded)};
    return api.call("PUT", "/config", {yaml: $("config-text").value, headers: headers,
                                       query: dryRun ? {dry_run: "true"} : {}});
  }

  function validate() {
    closeReview();
    put(true).then(function (res) {
      if (!res.ok) { refused(res); return; }
      showErrors([]);
      api.notify($("config-status"), "ok", res.body.changed ? "Valid: it can be applied." : "Valid, and the same as the current config.");
    });
  }

  function review() {
    put(true).then(function (res) {
      if (!res.ok) { closeReview(); refused(res); return; }
      showErrors([]);
      if (!res.body.changed) { closeReview(); api.notify($("config-status"), "", "No change to apply."); return; }
      api.notify($("config-status"), "", "");
      $("config-review-facts").textContent = "version " + res.body.version + " → new version (secrets masked)";
      api.showDiff($("config-diff"), res.body.diff);
      $("config-review").hidden = false;
    });
  }

  function apply() {
    $("config-confirm").disabled = true;
    put(false).then(function (res) {
      $("config-confirm").disabled = false;
      closeReview();
      if (!res.ok) { refused(res); return; }
      load().then(function () {
        api.notify($("config-status"), "ok", "Applied: the config is now version " + res.body.version + ".");
        loadVersions(0);
      });
    });
  }

  /* History */

  function when(iso) { return iso ? iso.replace("T", " ").slice(0, 19) + " UTC" : ""; }

  function versionRow(v) {
    var tr = api.el("tr", {"data-version": String(v.number)});
    tr.appendChild(api.el("td", {"class": "num"}, String(v.number)));
    tr.appendChild(api.el("td", {"class": "nowrap"}, when(v.created_at)));
    var src = api.el("td");
    src.appendChild(api.el("span", {"class": "pill"}, v.source));
    if (v.current) { src.appendChild(document.createTextNode(" ")); src.appendChild(api.el("span", {"class": "pill ok"}, "current")); }
    tr.appendChild(src);
    tr.appendChild(api.el("td", {}, v.actor || "—"));
    tr.appendChild(api.el("td", {}, v.note));
    tr.appendChild(api.el("td", {"class": "mono", "title": v.digest}, v.digest.slice(0, 12)));
    var actions = api.el("td", {"class": "actions"});
    actions.appendChild(api.el("button", {"type": "button", "data-version-action": "view", "data-version": v.number}, "View"));
    if (v.number > 1) {
      actions.appendChild(document.createTextNode(" "));
      actions.appendChild(api.el("button", {"type": "button", "data-version-action": "diff", "data-version": v.number},
                                 "Diff with " + (v.number - 1)));
    }
    if (!v.current) {
      actions.appendChild(document.createTextNode(" "));
      actions.appendChild(api.el("button", {"type": "button", "class": "danger", "data-version-action": "rollback",
                                            "data-version": v.number}, "Roll back to this"));
    }
    tr.appendChild(actions);
    return tr;
  }

  function loadVersions(offset) {
    versionsOffset = offset;
    return api.call("GET", "/config/versions", {query: {limit: PAGE, offset: offset}}).then(function (res) {
      if (!res.ok) { api.notify($("history-status"), "bad", api.message(res)); return; }
      var body = $("versions-table").tBodies[0];
      if (offset === 0) { body.innerHTML = ""; }
      res.body.data.forEach(function (v) { body.appendChild(versionRow(v)); });
      $("versions-more").hidden = offset + res.body.data.length >= res.body.total;
    });
  }

  function view(title, text) {
    $("version-view-title").textContent = title;
    api.showDiff($("version-view-text"), text);
    $("version-view").hidden = false;
    $("version-view").scrollIntoView({block: "nearest"});
  }

  function showVersion(n) {
    api.call("GET", "/config/versions/" + n, {query: {format: "yaml"}}).then(function (res) {
      if (!res.ok) { api.notify($("history-status"), "bad", api.message(res)); return; }
      view("Version " + n + " (secrets masked)", res.body);
    });
  }

  function diffVersions(a, b) {
    api.call("GET", "/config/versions/" + a + "/diff/" + b).then(function (res) {
      if (!res.ok) { api.notify($("history-status"), "bad", api.message(res)); return; }
      api.notify($("history-status"), "", "");
      view("Version " + a + " → version " + b, res.body.diff);
    });
  }

  function rollback(n) {
    if (!window.confirm("Roll back to version " + n + "? It becomes a new version and is applied at once.")) { return; }
    var headers = loaded === null ? {} : {"If-Match": tag(loaded)};
    api.call("POST", "/config/versions/" + n + "/rollback", {headers: headers}).then(function (res) {
      if (!res.ok) {
        var err = (res.body && res.body.error) || {};
        api.notify($("history-status"), "bad", err.code === "version_conflict"
          ? "The config changed meanwhile (now version " + err.current_version + "); the list is reloaded, try again."
          : api.message(res));
        load(); loadVersions(0);
        return;
      }
      api.notify($("history-status"), "ok", res.body.changed
        ? "Rolled back: version " + res.body.version + " equals version " + n + "."
        : "Version " + n + " is the current config already.");
      load(); loadVersions(0);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    $("config-validate").addEventListener("click", validate);
    $("config-apply").addEventListener("click", review);
    $("config-confirm").addEventListener("click", apply);
    $("config-cancel").addEventListener("click", closeReview);
    $("config-reload").addEventListener("click", load);
    $("versions-more").addEventListener("click", function () { loadVersions(versionsOffset + PAGE); });
    $("versions-table").addEventListener("click", function (event) {
      var button = event.target.closest("button[data-version-action]");
      if (!button) { return; }
      var n = parseInt(button.getAttribute("data-version"), 10), action = button.getAttribute("data-version-action");
      if (action === "view") { showVersion(n); }
      else if (action === "diff") { diffVersions(n - 1, n); }
      else { rollback(n); }
    });
    $("version-diff-form").addEventListener("submit", function (event) {
      event.preventDefault();
      diffVersions(event.target.elements.from.value, event.target.elements.to.value);
    });
    load();
    loadVersions(0);
  });
})();
