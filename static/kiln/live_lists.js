// Live lists: an element with data-live-list="/ws/lists/<kind>/" has its contents replaced by
// what the server renders whenever the rows change (kiln/live_lists.py), for the page's own
// filters (its query string). The badge [data-live-state] says whether the list is live. The
// server closes with 4401 (signed out) or 4403 (access lost): then the list stops and says so.
(function () {
  "use strict";
  var box = document.querySelector("[data-live-list]");
  if (!box) { return; }
  var state = document.querySelector("[data-live-state]");
  var retry = 500;

  function say(text, cls) {
    if (!state) { return; }
    state.textContent = text;
    state.className = "badge " + cls;
  }

  function connect() {
    var proto = window.location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(proto + window.location.host + box.getAttribute("data-live-list") + window.location.search);
    ws.onopen = function () { retry = 500; say("live", "ok"); };
    ws.onmessage = function (event) {
      var message = JSON.parse(event.data);
      if (message.type !== "rows") { return; }
      // Rendered by the server from Kiln's own templates (autoescaped), as the page itself was.
      box.innerHTML = message.html;
      box.setAttribute("data-updated", String(Date.now()));
    };
    ws.onclose = function (event) {
      if (event.code === 4401) { say("signed out: reload to sign in", "bad"); return; }
      if (event.code === 4403) { say("access ended", "bad"); return; }
      say("reconnecting", "warn");
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 10000);
    };
  }
  connect();
})();
