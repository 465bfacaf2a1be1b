/* The showback page's budget charts: spend so far, the forecast to the month's end (dashed) and
   the budget, one uPlot chart per team, read from the JSON the page carries beside its table. */
(function () {
  function draw(target) {
    var node = document.getElementById(target.dataset.chart);
    if (!node || typeof uPlot === "undefined") { return; }
    var data = JSON.parse(node.textContent);
    var money = function (u, v) { return v == null ? "–" : data.currency + " " + v.toFixed(2); };
    var today = function (u) {
      if (u.legend.idx != null || !u.data[0].length) { return; }
      var spend = u.data[1], i = spend.length - 1;
      while (i > 0 && spend[i] == null) { i--; }
      u.setLegend({ idx: i });
    };
    var opts = {
      width: Math.max(target.clientWidth, 280),
      height: 220,
      // Days are UTC days (the table's): drawn and named in UTC whatever the browser's zone.
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
      scales: { x: { time: true }, y: { range: function (u, min, max) { return [0, Math.max(max, 1) * 1.08]; } } },
      axes: [{}, { size: 64, values: function (u, vals) { return vals.map(function (v) { return v.toFixed(0); }); } }],
      series: [
        { label: "day (UTC)", value: "{YYYY}-{MM}-{DD}" },
        { label: "spent", stroke: "#2563eb", width: 2, fill: "rgba(37, 99, 235, 0.08)", value: money },
        { label: "forecast", stroke: "#d97706", width: 2, dash: [6, 4], value: money },
        { label: "budget", stroke: "#dc2626", width: 1.5, points: { show: false }, value: money }
      ],
      // Away from the chart the legend shows today (the last day with spend), not dashes.
      hooks: { ready: [today], setLegend: [today] }
    };
    target.textContent = "";
    var chart = new uPlot(opts, [data.days, data.spend, data.forecast, data.budget], target);
    var resize = function () { chart.setSize({ width: Math.max(target.clientWidth, 280), height: 220 }); };
    window.addEventListener("resize", resize);
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".budget-chart[data-chart]").forEach(draw);
  });
})();
