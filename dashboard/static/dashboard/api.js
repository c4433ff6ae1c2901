/* The dashboard's actions: every one is a call of the admin API (/api/v1)
   with the staff session and its CSRF token, so the dashboard and a script
   do the same operations, audited the same way. Plain JS, no dependencies.

   window.routerApi.call(method, path, {body, query, headers, yaml})
     → Promise of {status, ok, body, headers}; never rejects on an HTTP
     error (the caller shows body.error.message).
   Keys page: the create form and the per-row buttons (delegated: the live
   table is re-rendered every 2 s). Backends page: drain / undrain. */
(function () {
  "use strict";
  var BASE = "/api/v1";

  function csrf() {
    var meta = document.querySelector("meta[name=csrf-token]");
    return meta ? meta.getAttribute("content") : "";
  }

  function call(method, path, opts) {
    opts = opts || {};
    var headers = {"Accept": "application/json", "X-CSRFToken": csrf()};
    Object.keys(opts.headers || {}).forEach(function (k) { headers[k] = opts.headers[k]; });
    var init = {method: method, credentials: "same-origin", cache: "no-store", headers: headers};
    if (opts.yaml !== undefined) {
      headers["Content-Type"] = "application/yaml";
      init.body = opts.yaml;
    } else if (opts.body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
    var url = BASE + path;
    if (opts.query) {
      var q = Object.keys(opts.query).filter(function (k) { return opts.query[k] !== undefined && opts.query[k] !== ""; })
        .map(function (k) { return encodeURIComponent(k) + "=" + encodeURIComponent(opts.query[k]); });
      if (q.length) { url += "?" + q.join("&"); }
    }
    return fetch(url, init).then(function (r) {
      var type = r.headers.get("content-type") || "";
      return r.text().then(function (text) {
        var body = text && type.indexOf("json") >= 0 ? JSON.parse(text) : text || null;  /* a 204 has no body */
        return {status: r.status, ok: r.ok, body: body, headers: r.headers};
      });
    });
  }

  function message(res) {
    var e = res.body && res.body.error;
    return e ? e.message : "HTTP " + res.status;
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  /* A notice in `box`: kind ok | bad | "" (warn). */
  function notify(box, kind, text) {
    box.innerHTML = "";
    if (text) { box.appendChild(el("div", {"class": "notice" + (kind ? " " + kind : "")}, text)); }
  }

  /* Lines of a unified diff into `pre`, coloured by their first character. */
  function showDiff(pre, diff) {
    pre.innerHTML = "";
    if (!diff) { pre.textContent = "(no difference)"; return; }
    diff.split("\n").forEach(function (line) {
      var c = line.charAt(0), kind = "";
      if (line.indexOf("@@") === 0) { kind = "hunk"; }
      else if (c === "+" && line.indexOf("+++") !== 0) { kind = "add"; }
      else if (c === "-" && line.indexOf("---") !== 0) { kind = "del"; }
      pre.appendChild(kind ? el("span", {"class": kind}, line) : document.createTextNode(line + "\n"));
    });
  }

  function refresh() { document.dispatchEvent(new CustomEvent("routerlive:refresh")); }

  window.routerApi = {call: call, message: message, el: el, notify: notify, showDiff: showDiff, refresh: refresh};

  /* The plaintext of a created or rotated key, shown this once. */
  function showSecret(box, title, secret) {
    box.innerHTML = "";
    var wrap = el("div", {"class": "notice ok"});
    wrap.appendChild(el("strong", {}, title));
    wrap.appendChild(el("span", {"class": "sub"}, "Copy it now: it is shown this once and never again."));
    var row = el("div", {"class": "secret-box"});
    var input = el("input", {"type": "text", "readonly": "", "id": "new-key-secret", "aria-label": "the new key"});
    input.value = secret;
    var copy = el("button", {"type": "button"}, "Copy");
    copy.addEventListener("click", function () {
      input.select();
      var done = function () { copy.textContent = "Copied"; };
      if (navigator.clipboard) { navigator.clipboard.writeText(secret).then(done, function () { document.execCommand("copy"); done(); }); }
      else { document.execCommand("copy"); done(); }
    });
    row.appendChild(input); row.appendChild(copy);
    wrap.appendChild(row);
    box.appendChild(wrap);
  }

  function keyResultBox() { return document.getElementById("key-result"); }

  function list(text) {
    return text.split(",").map(function (s) { return s.trim(); }).filter(Boolean);
  }

  function onCreate(event) {
    event.preventDefault();
    var form = event.target, box = keyResultBox();
    var body = {name: form.elements.name.value.trim(), owner: form.elements.owner.value.trim(),
                allowed_models: list(form.elements.models.value)};
    var rate = form.elements.rate_limit.value.trim();
    if (rate) { body.rate_limit = parseInt(rate, 10); }
    call("POST", "/keys", {body: body}).then(function (res) {
      if (!res.ok) { notify(box, "bad", "Not created: " + message(res)); return; }
      form.reset();
      showSecret(box, "Key " + res.body.key.name + " created (" + res.body.key.hint + ").", res.body.secret);
      refresh();
    });
  }

  var KEY_ACTIONS = {
    disable: function (id) { return call("PATCH", "/keys/" + id, {body: {enabled: false}}); },
    enable: function (id) { return call("PATCH", "/keys/" + id, {body: {enabled: true}}); },
    delete: function (id) { return call("DELETE", "/keys/" + id); },
    rotate: function (id, grace) { return call("POST", "/keys/" + id + "/rotate", {query: {grace_seconds: grace}}); }
  };

  function onKeyButton(button) {
    var action = button.getAttribute("data-key-action"), id = button.getAttribute("data-key-id");
    var name = button.getAttribute("data-key-name"), box = keyResultBox(), grace = 0;
    if (action === "delete" && !window.confirm("Delete key " + name + "? It stops working at once.")) { return; }
    if (action === "rotate") {
      var answer = window.prompt("Rotate key " + name + ": seconds the old secret keeps working (0: it stops at once)", "0");
      if (answer === null) { return; }
      grace = parseInt(answer, 10);
      if (isNaN(grace) || grace < 0) { notify(box, "bad", "Not rotated: the grace is a number of seconds."); return; }
    }
    button.disabled = true;
    KEY_ACTIONS[action](id, grace).then(function (res) {
      button.disabled = false;
      if (!res.ok) { notify(box, "bad", "Key " + name + ": " + message(res)); return; }
      if (action === "rotate") { showSecret(box, "Key " + name + " rotated (" + res.body.key.hint + ").", res.body.secret); }
      else { notify(box, "ok", "Key " + name + ({disable: " disabled.", enable: " enabled.", delete: " deleted."})[action]); }
      refresh();
    });
  }

  function onBackendButton(button) {
    var action = button.getAttribute("data-backend-action"), name = button.getAttribute("data-backend");
    button.disabled = true;
    call("POST", "/backends/" + encodeURIComponent(name) + "/" + action).then(function (res) {
      if (!res.ok) { button.disabled = false; window.alert(name + ": " + message(res)); return; }
      refresh();
    });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button") : null;
    if (!button) { return; }
    if (button.hasAttribute("data-key-action")) { onKeyButton(button); }
    else if (button.hasAttribute("data-backend-action")) { onBackendButton(button); }
  });
  document.addEventListener("submit", function (event) {
    if (event.target.id === "key-create") { onCreate(event); }
  });
})();
