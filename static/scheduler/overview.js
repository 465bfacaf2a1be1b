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
  document.addEventListener("DOMContentLoaded", function () {
    var node = document.getElementById("replay-data");
    if (!node) { return; }
    var data = JSON.parse(node.textContent);
    draw("chart-latency", "latency_on_spot", data);
    draw("chart-cost", "cost", data);
  });
})();
