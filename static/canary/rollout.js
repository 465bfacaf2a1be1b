/* Live rollout dashboard: four uPlot charts with their data tables, the per-channel evidence and the decision list, fed by /ws/rollouts/<id>/. */
(function () {
  "use strict";
  var root = document.getElementById("rollout");
  if (!root || typeof uPlot === "undefined") { return; }

  var ticks = [];           // tick points, ordered by tick number
  var seenDecisions = {};   // decision id -> true
  var charts = {};

  // Each chart's series come from its data table's header (canary/charts.py defines them);
  // only the line styles live here.
  var STYLE = {
    weight: { stroke: "#2563eb" },
    baseline_error_rate: { stroke: "#6b7280" },
    canary_error_rate: { stroke: "#dc2626" },
    llr: { stroke: "#7c3aed" },
    llr_upper: { stroke: "#dc2626", dash: [6, 4] },
    llr_lower: { stroke: "#16a34a", dash: [6, 4] },
    cusum: { stroke: "#ea580c" },
    cusum_threshold: { stroke: "#dc2626", dash: [6, 4] }
  };
  var NO_EVIDENCE = "\u2014";

  var defs = {};
  document.querySelectorAll("table.chart-table").forEach(function (table) {
    var series = [];
    table.querySelectorAll("thead th[data-key]").forEach(function (th) {
      var key = th.getAttribute("data-key");
      if (key === "tick") { return; }
      var style = STYLE[key] || { stroke: "#374151" };
      series.push({ key: key, label: th.textContent, stroke: style.stroke, dash: style.dash,
        scale: Number(th.getAttribute("data-scale") || 1),
        decimals: Number(th.getAttribute("data-decimals") || 0) });
    });
    var name = table.getAttribute("data-chart");
    defs[name] = { el: "chart-" + name, table: table, series: series };
  });

  function col(name, scale) {
    return ticks.map(function (t) {
      var v = t[name];
      return v === null || v === undefined ? null : v * (scale || 1);
    });
  }
  function xs() { return col("tick"); }

  // As canary.charts.cell: null is no evidence, else scaled to fixed decimals.
  function cell(v, s) {
    return v === null || v === undefined ? NO_EVIDENCE : (v * s.scale).toFixed(s.decimals);
  }

  // The traffic the rollout moved to after its last analysed tick (promoted to 100%, rolled
  // back to 0%, the next step) is no tick of its own: the weight chart draws it as one more
  // point, so its line ends where the header's "Canary traffic" says.
  function moved(def) {
    var now = Number(root.dataset.weight);
    var last = ticks.length ? ticks[ticks.length - 1] : null;
    var hasWeight = def.series.some(function (s) { return s.key === "weight"; });
    return hasWeight && last && root.dataset.weight !== undefined && last.weight !== now
      ? { tick: last.tick + 1, weight: now } : null;
  }
  function data(def) {
    var out = [xs()].concat(def.series.map(function (s) { return col(s.key, s.scale); }));
    var point = moved(def);
    if (point) {
      out[0] = out[0].concat([point.tick]);
      def.series.forEach(function (s, i) {
        out[i + 1] = out[i + 1].concat([s.key === "weight" ? point.weight * s.scale : null]);
      });
    }
    return out;
  }

  // The per-channel evidence table and the bounds, from the rollout's latest analysis
  // (the same cells the page renders: canary/rollouts/detail.html).
  var channelTable = document.getElementById("channels");
  function badgeCell(row, accepted, held) {
    var cellEl = document.createElement("td");
    var b = document.createElement("span");
    b.className = accepted ? "badge ok" : held ? "badge warn" : "badge muted";
    b.textContent = accepted ? "yes" : held ? "held: buckets too wide" : "not yet";
    cellEl.appendChild(b);
    row.appendChild(cellEl);
  }
  // The resolution cell (canary.selectors.channel_resolution_cell renders the page's).
  function resolutionCell(c, res) {
    if (!res) { return c.resolved === false ? "buckets too wide" : "exact"; }
    var lo = res.bucket_ms[0], hi = res.bucket_ms[1];
    var bucket = hi === null ? "> " + lo + " ms" : lo + "\u2013" + hi + " ms";
    return bucket + " bucket: " + (c.resolved === false ? "can hide" : "resolves") + " \u00d7" + res.shift;
  }
  function fixed(v, digits) { return v === null || v === undefined ? NO_EVIDENCE : Number(v).toFixed(digits); }
  function showChannels(a) {
    if (!channelTable || !a || !a.channels) { return; }
    var rows = document.createDocumentFragment();
    Object.keys(a.channels).forEach(function (ch) {
      var c = a.channels[ch];
      var tr = document.createElement("tr");
      tr.setAttribute("data-channel", ch);
      td(tr, channelTable.getAttribute("data-label-" + ch) || ch);
      td(tr, fixed(c.llr, 2));
      badgeCell(tr, c.accepted, c.held);
      td(tr, fixed(c.cusum, 2));
      td(tr, "\u00d7" + c.ratio);
      td(tr, c.accepted ? "0" : (c.requests_needed === null || c.requests_needed === undefined)
        ? "no traffic yet" : String(Math.round(c.requests_needed)));
      td(tr, c.accepted ? "0" : (c.minutes_needed === null || c.minutes_needed === undefined)
        ? NO_EVIDENCE : String(c.minutes_needed));
      td(tr, resolutionCell(c, c.resolution));
      rows.appendChild(tr);
    });
    channelTable.tBodies[0].replaceChildren(rows);
    var unresolved = document.getElementById("resolution");
    if (unresolved) {
      var items = document.createDocumentFragment();
      Object.keys(a.channels).forEach(function (ch) {
        var res = a.channels[ch].resolution;
        if (res && a.channels[ch].resolved === false) {
          var li = document.createElement("li");
          li.textContent = res.text || "";
          items.appendChild(li);
        }
      });
      unresolved.replaceChildren(items);
      unresolved.hidden = !unresolved.children.length;
    }
    var bounds = document.getElementById("rollout-bounds");
    if (bounds && a.llr_lower !== null && a.llr_lower !== undefined) {
      bounds.textContent = "Accept bound " + fixed(a.llr_lower, 2) + " \u00b7 rollback bound " +
        fixed(a.llr_upper, 2) + (a.cusum_threshold ? " \u00b7 CUSUM threshold " + fixed(a.cusum_threshold, 1) : "");
    }
  }

  function fillTable(def) {
    var body = def.table.tBodies[0];
    if (!ticks.length) { return; }  // keep "No analysed tick yet."
    var rows = document.createDocumentFragment();
    ticks.forEach(function (t) {
      var tr = document.createElement("tr");
      tr.setAttribute("data-tick", String(t.tick));
      var th = document.createElement("th");
      th.setAttribute("scope", "row");
      th.textContent = String(t.tick);
      tr.appendChild(th);
      def.series.forEach(function (s) { td(tr, cell(t[s.key], s)); });
      rows.appendChild(tr);
    });
    // The chart's "now" point is the table's "now" row (canary.charts.chart_tables).
    var point = moved(def);
    if (point) {
      var nowRow = document.createElement("tr");
      nowRow.setAttribute("data-tick", "now");
      var nowTh = document.createElement("th");
      nowTh.setAttribute("scope", "row");
      nowTh.textContent = "now";
      nowRow.appendChild(nowTh);
      def.series.forEach(function (s) { td(nowRow, cell(s.key === "weight" ? point.weight : null, s)); });
      rows.appendChild(nowRow);
    }
    body.replaceChildren(rows);
  }

  // Whenever the legend is left on no tick (the pointer left, a tick arrived), it shows the last.
  function latestTick(u) {
    if (u.legend.idx == null && u.data[0].length) { u.setLegend({ idx: u.data[0].length - 1 }); }
  }

  // The traffic chart's point after the last analysed tick is where traffic is now, no tick:
  // its legend and axis say "now" rather than count a tick that was never analysed.
  function tickWords(v) {
    var last = ticks.length ? ticks[ticks.length - 1].tick : null;
    if (v === null || v === undefined) { return "--"; }
    return last !== null && v === last + 1 ? "now" : String(v);
  }

  function build() {
    Object.keys(defs).forEach(function (name) {
      var def = defs[name];
      var el = document.getElementById(def.el);
      var opts = {
        width: Math.max(240, el.clientWidth || 420),
        height: 200,
        scales: { x: { time: false } },
        axes: [{ label: "tick", values: function (u, splits) { return splits.map(tickWords); } }, {}],
        series: [{ label: "tick", value: function (u, v) { return tickWords(v); } }].concat(def.series.map(function (s) {
          return { label: s.label, stroke: s.stroke, width: 2, dash: s.dash, points: { show: false } };
        })),
        // Away from the chart the legend shows the latest tick, not dashes.
        hooks: { ready: [latestTick], setLegend: [latestTick] }
      };
      charts[name] = new uPlot(opts, data(def), el);
    });
  }

  function redraw() {
    Object.keys(defs).forEach(function (name) {
      var drawn = data(defs[name]);
      charts[name].setData(drawn);
      // A chart built before its first tick has no legend index, and setData fires no
      // setLegend hook while the pointer is away: the latest tick is shown here too.
      latestTick(charts[name]);
      fillTable(defs[name]);
      defs[name].series.forEach(function (s, i) {
        var ys = drawn[i + 1];
        if (s.key === "weight" && ys.length) { root.dataset.drawnWeight = String(ys[ys.length - 1]); }
      });
    });
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

  function td(row, text) { var el = document.createElement("td"); el.textContent = text; row.appendChild(el); }

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
      td(tr, String(d.tick)); td(tr, String(d.kind).replace(/_/g, " ")); td(tr, d.from_weight + "% → " + d.to_weight + "%");
      td(tr, d.actor); td(tr, d.reason);
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
    root.dataset.weight = String(r.weight);
    // The steering card (promote, abort) is on the page from the start, hidden while the
    // rollout is pending: it shows the moment the rollout can be steered, without a reload.
    var steer = document.getElementById("steer");
    if (steer) { steer.hidden = r.status === "pending" || !!r.finished; }
    if (r.finished) { finished = true; setStream("finished", "muted"); }
    showChannels(r.analysis);
    var needed = document.getElementById("rollout-needed");
    if (needed && r.requests_needed && !r.finished) {
      needed.className = "small";
      needed.textContent = "Requests still needed to promote: about " + Math.round(r.requests_needed) +
        " canary requests (" + (r.minutes_needed < 0.5 ? "under a minute" : "~" + r.minutes_needed + " min") + " at current traffic).";
    }
    var badge = document.querySelector("#rollout-status .badge");
    var words = r.status.replace("_", " ");  // as the server writes it: "Rolled back"
    badge.textContent = words.charAt(0).toUpperCase() + words.slice(1);
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
    ws.onclose = function (ev) {
      if (finished) { return; }  // nothing more will happen: no reconnecting
      // The server closed it because the sign-in ended (4401) or access was lost (4403):
      // reconnecting would be refused, so say so and stop (docs/api.md, websocket close codes).
      if (ev.code === 4401) { setStream("signed out: reload to sign in", "bad"); return; }
      if (ev.code === 4403) { setStream("access ended", "bad"); return; }
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
