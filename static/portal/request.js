// Request form: the selected class's limits beside the fields they bound, updated as the class changes.
(function () {
  function show(limits) {
    var select = document.getElementById("id_env_class");
    var cls = select ? select.value : "";
    var limit = limits[cls];
    if (!limit) { return; }
    var ttl = document.querySelector("[data-limit=ttl_hours]");
    var gpu = document.querySelector("[data-limit=gpu]");
    var spot = document.querySelector("[data-limit=spot_node_pool]");
    var days = limit.ttl_hours >= 48 ? " (" + Math.round(limit.ttl_hours / 24) + " days)" : "";
    if (ttl) { ttl.textContent = cls + ": at most " + limit.ttl_hours + " h" + days + "."; }
    if (gpu) { gpu.textContent = cls + ": at most " + limit.gpu + " GPU" + (limit.gpu === 1 ? "" : "s") + "."; }
    if (spot) {
      // The policy's own words (deploy/policies/request/spot-classes.yaml), so the hint, the
      // live policy check and the API's denial say the same thing.
      var workload = document.getElementById("id_workload_class");
      var asked = document.getElementById("id_spot_node_pool");
      var latency = workload && workload.value === "latency-sensitive";
      var text, bad = false;
      if (!limit.spot) {
        text = "spot node pools are for ephemeral and dev, not " + cls + ".";
        bad = asked && asked.checked;
      } else if (latency) {
        text = "latency-sensitive workloads never run on spot capacity: with a spot pool, " +
          "choose standard or batch as the workload class (latency-sensitive is the default).";
        bad = asked && asked.checked;
      } else {
        text = cls + ": allowed for " + (workload ? workload.value : "standard and batch") + " workloads.";
      }
      spot.textContent = text;
      spot.classList.toggle("warn", !!bad || !limit.spot);
    }
    var ttlInput = document.getElementById("id_ttl_hours");
    var gpuInput = document.getElementById("id_gpu");
    if (ttlInput) { ttlInput.max = limit.ttl_hours; }
    if (gpuInput) { gpuInput.max = limit.gpu; }
  }
  document.addEventListener("DOMContentLoaded", function () {
    var node = document.getElementById("class-limits");
    if (!node) { return; }
    var limits = JSON.parse(node.textContent);
    ["id_env_class", "id_workload_class", "id_spot_node_pool"].forEach(function (id) {
      var input = document.getElementById(id);
      if (input) { input.addEventListener("change", function () { show(limits); }); }
    });
    show(limits);
  });
})();
