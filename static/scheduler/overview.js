// Charts of the latest stored trace replay: latency-class tasks on spot and cost per spot fraction.
(function () {
  function draw(elementId, metric, data) {
    var target = document.getElementById(elementId);
    if (!target || typeof uPlot === "undefined") { return; }
    var names = Object.keys(data);
    if (!names.length) { return; }
    var xs = data[names[0]].fraction;
    var columns = [xs];
    var series = [{ label: "spot fraction" }];
    var palette = ["#2563eb", "#dc2626", "#16a34a", "#d97706"];
    names.forEach(function (name, i) {
      columns.push(data[name][metric]);
      series.push({ label: name, stroke: palette[i % palette.length], width: 2 });
    });
    new uPlot({ width: Math.max(target.clientWidth, 300), height: 220, series: series, scales: { x: { time: false } } }, columns, target);
  }
  // Workload Commitment over time: the ratio per resource, and pending demand beside it (dashed).
  function drawCommitment() {
    var target = document.getElementById("chart-commitment");
    var node = document.getElementById("commitment-data");
    if (!target || !node || typeof uPlot === "undefined") { return; }
    var data = JSON.parse(node.textContent);
    if (!data.t || !data.t.length) { return; }
    var palette = { cpu: "#2563eb", memory: "#16a34a", gpu: "#d97706" };
    var columns = [data.t];
    var series = [{ label: "time" }];
    // Ratios, shown as percentages as the table above shows them.
    var percent = function (u, v) { return v == null ? "–" : Math.round(v * 100) + "%"; };
    ["cpu", "memory", "gpu"].forEach(function (r) {
      columns.push(data[r]);
      series.push({ label: r + " committed", stroke: palette[r], width: 2, value: percent });
      columns.push(data[r + "_pending"]);
      series.push({ label: r + " pending", stroke: palette[r], width: 1, dash: [6, 4], value: percent });
    });
    // Away from the chart the legend shows the latest sample, not dashes: whenever the legend
    // is left on no point (the pointer left, new data came), it goes back to the last one.
    var latest = function (u) {
      if (u.legend.idx == null && u.data[0].length) { u.setLegend({ idx: u.data[0].length - 1 }); }
    };
    // One sample (a new cluster): uPlot pads a lone time by a thousand days, which drew the axis
    // over years with the point at its edge; show the hour around it instead.
    var span = function (u, min, max) {
      var t = u.data[0], lo = t[0], hi = t[t.length - 1];
      return lo === hi ? [lo - 1800, hi + 1800] : [min, max];
    };
    new uPlot({ width: Math.max(target.clientWidth, 300), height: 220, series: series,
                scales: { x: { time: true, range: span } },
                axes: [{}, { values: function (u, ticks) {
                  return ticks.map(function (v) { return Math.round(v * 100) + "%"; });
                } }],
                hooks: { ready: [latest], setLegend: [latest] } }, columns, target);
  }
  document.addEventListener("DOMContentLoaded", function () {
    drawCommitment();
    var node = document.getElementById("replay-data");
    if (!node) { return; }
    var data = JSON.parse(node.textContent);
    var drawReplays = function () {
      draw("chart-latency", "latency_on_spot", data);
      draw("chart-cost", "cost", data);
    };
    // A folded section has no width to draw in: draw its charts the first time it opens.
    var fold = node.closest("details");
    if (!fold || fold.open) { drawReplays(); return; }
    fold.addEventListener("toggle", function once() {
      if (!fold.open) { return; }
      fold.removeEventListener("toggle", once);
      drawReplays();
    });
  });
})();

// The score explainer's refusal (400) is its form's words for what to correct: shown where the
// answer would be, not dropped as htmx drops a 4xx by default.
document.addEventListener("htmx:beforeSwap", function (event) {
  if (event.detail.target.id === "explain" && event.detail.xhr.status === 400) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});
