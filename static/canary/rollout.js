/* Live rollout dashboard: four uPlot charts and the decision list, fed by /ws/rollouts/<id>/. */
(function () {
  "use strict";
  var root = document.getElementById("rollout");
  if (!root || typeof uPlot === "undefined") { return; }

  var ticks = [];           // tick points, ordered by tick number
  var seenDecisions = {};   // decision id -> true
  var charts = {};

  function col(name) { return ticks.map(function (t) { return t[name]; }); }
  function xs() { return col("tick"); }

  var defs = {
    weight: { el: "chart-weight", series: [{ label: "canary %", stroke: "#2563eb", key: "weight" }] },
    errors: { el: "chart-errors", series: [
      { label: "baseline", stroke: "#6b7280", key: "baseline_error_rate" },
      { label: "canary", stroke: "#dc2626", key: "canary_error_rate" }] },
    sprt: { el: "chart-sprt", series: [
      { label: "LLR", stroke: "#7c3aed", key: "llr" },
      { label: "roll back at", stroke: "#dc2626", dash: [6, 4], key: "llr_upper" },
      { label: "accept at", stroke: "#16a34a", dash: [6, 4], key: "llr_lower" }] },
    cusum: { el: "chart-cusum", series: [
      { label: "CUSUM", stroke: "#ea580c", key: "cusum" },
      { label: "threshold", stroke: "#dc2626", dash: [6, 4], key: "cusum_threshold" }] }
  };

  function data(def) {
    return [xs()].concat(def.series.map(function (s) { return col(s.key); }));
  }

  function build() {
    Object.keys(defs).forEach(function (name) {
      var def = defs[name];
      var el = document.getElementById(def.el);
      var opts = {
        width: Math.max(240, el.clientWidth || 420),
        height: 200,
        scales: { x: { time: false } },
        axes: [{ label: "tick" }, {}],
        series: [{ label: "tick" }].concat(def.series.map(function (s) {
          return { label: s.label, stroke: s.stroke, width: 2, dash: s.dash, points: { show: false } };
        }))
      };
      charts[name] = new uPlot(opts, data(def), el);
    });
  }

  function redraw() {
    Object.keys(defs).forEach(function (name) { charts[name].setData(data(defs[name])); });
    root.dataset.points = String(ticks.length);
  }

  function addTick(t) {
    if (!t) { return; }
    for (var i = 0; i < ticks.length; i++) {
      if (ticks[i].tick === t.tick) { ticks[i] = t; return; }
    }
    ticks.push(t);
    ticks.sort(function (a, b) { return a.tick - b.tick; });
  }

  function cell(row, text) { var td = document.createElement("td"); td.textContent = text; row.appendChild(td); }

  function addDecisions(list) {
    var body = document.querySelector("#decisions tbody");
    document.querySelectorAll("#decisions tr[data-decision-id]").forEach(function (tr) {
      seenDecisions[tr.getAttribute("data-decision-id")] = true;
    });
    (list || []).forEach(function (d) {
      if (seenDecisions[String(d.id)]) { return; }
      seenDecisions[String(d.id)] = true;
      var tr = document.createElement("tr");
      tr.setAttribute("data-decision-id", String(d.id));
      tr.className = "fresh";
      cell(tr, String(d.tick)); cell(tr, d.kind); cell(tr, d.from_weight + "% → " + d.to_weight + "%");
      cell(tr, d.actor); cell(tr, d.reason);
      body.appendChild(tr);
    });
  }

  var STATUS_CLASS = { promoted: "ok", rolled_back: "bad", failed: "bad", running: "warn", inconclusive: "held" };
  var finished = root.dataset.finished === "true";
  var leaving = false;  // a decision is being submitted: its own response redraws the page
  document.querySelectorAll("form").forEach(function (f) {
    f.addEventListener("submit", function () { leaving = true; });
  });

  function showRollout(r) {
    if (!r) { return; }
    var was = root.dataset.status;
    if (leaving) { return; }
    if (r.status !== was && (r.status === "inconclusive" || r.finished || was === "inconclusive")) {
      // Held or finished brings other controls and an explanation: render the page afresh.
      root.dataset.status = r.status;
      window.location.reload();
      return;
    }
    root.dataset.status = r.status;
    if (r.finished) { finished = true; setStream("finished", "muted"); }
    var needed = document.getElementById("rollout-needed");
    if (needed && r.requests_needed) {
      needed.textContent = "Requests still needed to promote: about " + Math.round(r.requests_needed) +
        " canary requests (~" + r.minutes_needed + " min at current traffic).";
    }
    var badge = document.querySelector("#rollout-status .badge");
    badge.textContent = r.status.replace("_", " ");
    badge.className = "badge " + (STATUS_CLASS[r.status] || "muted");
    badge.setAttribute("data-status", r.status);
    document.getElementById("rollout-weight").textContent = r.weight + "%";
    document.getElementById("rollout-ticks").textContent = String(r.ticks_done);
    document.getElementById("rollout-reason").textContent = r.reason || "—";
  }

  function setStream(text, cls) {
    var el = document.getElementById("stream-state");
    if (finished && text !== "finished") { return; }
    if (text === "finished" && el.dataset.finished === "true") { return; }
    el.textContent = text;
    el.className = "badge " + cls;
  }

  function handle(msg) {
    if (msg.type === "snapshot") {
      ticks = [];
      (msg.ticks || []).forEach(addTick);
    } else if (msg.type === "update") {
      addTick(msg.tick);
    }
    showRollout(msg.rollout);
    addDecisions(msg.decisions);
    redraw();
  }

  var retry = 500;
  function connect() {
    var proto = window.location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(proto + window.location.host + root.dataset.wsPath);
    ws.onopen = function () { retry = 500; if (!finished) { setStream("live", "ok"); } };
    ws.onmessage = function (ev) { handle(JSON.parse(ev.data)); };
    ws.onclose = function () {
      if (finished) { return; }  // nothing more will happen: no reconnecting
      setStream("reconnecting", "warn");
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 10000);
    };
  }

  function fit() {
    Object.keys(defs).forEach(function (name) {
      var el = document.getElementById(defs[name].el);
      charts[name].setSize({ width: Math.max(240, el.clientWidth || 320), height: 200 });
    });
  }

  build();
  window.addEventListener("resize", fit);
  connect();
})();
