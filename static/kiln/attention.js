// The header's search shortcut and the in-page notifications of the attention list.
//
// "/" focuses the header's search box (unless the user is typing in a field already).
// Every page polls the attention feed; an item this tab has not seen before appears as a
// notice (a link to act on it, and a close button) and the header's "Needs you" count and
// the home page's card refresh. The first poll of a tab only learns what is there: a notice
// is for what is new while the page is open. Seen keys live in sessionStorage per tab.
(function () {
  "use strict";
  var POLL_MS = 10000;
  var SEEN = "kiln.attention.seen";

  document.addEventListener("keydown", function (event) {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) { return; }
    var target = event.target;
    var tag = target && target.tagName;
    if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable)) { return; }
    var box = document.getElementById("header-q");
    if (!box) { return; }
    event.preventDefault();
    box.focus();
    box.select();
  });

  function seenKeys() {
    try { return JSON.parse(sessionStorage.getItem(SEEN) || "null"); } catch (e) { return null; }
  }

  function remember(keys) {
    try { sessionStorage.setItem(SEEN, JSON.stringify(keys)); } catch (e) { /* private mode: no memory */ }
  }

  function notice(item) {
    var region = document.getElementById("notices");
    if (!region) { return; }
    var box = document.createElement("div");
    box.className = "notice";
    box.setAttribute("data-key", item.key);
    var link = document.createElement("a");
    link.href = item.url;
    link.textContent = item.title;
    var detail = document.createElement("span");
    detail.className = "small";
    detail.textContent = item.detail;
    var close = document.createElement("button");
    close.type = "button";
    close.className = "notice-close";
    close.setAttribute("aria-label", "Close notice: " + item.title);
    close.textContent = "×";
    close.addEventListener("click", function () { box.remove(); });
    box.appendChild(link);
    box.appendChild(detail);
    box.appendChild(close);
    region.appendChild(box);
  }

  function show(count) {
    var badge = document.getElementById("attention-bell-count");
    if (!badge) { return; }
    badge.textContent = String(count);
    badge.hidden = count === 0;
  }

  function poll(bell) {
    fetch(bell.getAttribute("data-feed"), {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (!body) { return; }
        var items = body.items || [];
        var keys = items.map(function (i) { return i.key; });
        var known = seenKeys();
        show(items.length);
        if (known !== null) {
          var fresh = items.filter(function (i) { return known.indexOf(i.key) < 0; });
          fresh.forEach(notice);
          if (fresh.length) { document.body.dispatchEvent(new Event("kiln-attention")); }
        }
        remember(keys.concat((known || []).filter(function (k) { return keys.indexOf(k) < 0; })));
      })
      .catch(function () { /* offline or signed out: try again at the next poll */ });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var bell = document.getElementById("attention-bell");
    if (!bell) { return; }
    poll(bell);
    window.setInterval(function () { if (!document.hidden) { poll(bell); } }, POLL_MS);
  });
})();
