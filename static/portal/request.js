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
      spot.textContent = limit.spot ? cls + ": allowed, except for latency-sensitive workloads."
        : "Not available for " + cls + ": spot pools are for ephemeral and dev only.";
      spot.classList.toggle("warn", !limit.spot);
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
    var select = document.getElementById("id_env_class");
    if (select) { select.addEventListener("change", function () { show(limits); }); }
    show(limits);
  });
})();
