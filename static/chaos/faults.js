// The create form shows the chosen fault's own fields (each says its kinds in data-kinds);
// every field stays in the form, so without this script all are shown and the server checks all.
(function () {
  "use strict";
  function sync(select) {
    var fault = select.value;
    document.querySelectorAll(".chaos-field[data-kinds]").forEach(function (row) {
      var kinds = row.getAttribute("data-kinds").split(" ");
      var errored = row.querySelector(".chaos-error") !== null;
      row.hidden = !errored && kinds.indexOf(fault) < 0;
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var select = document.getElementById("id_fault");
    if (!select) return;
    select.addEventListener("change", function () { sync(select); });
    sync(select);
  });
})();
