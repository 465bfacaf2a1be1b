/* The audit explorer: a folded part of a card the status refresh swaps in anew (the checkpoint
   note, the witness keys) stays open when the person opened it. */
(function () {
  "use strict";
  var opened = {};
  document.addEventListener("toggle", function (event) {
    var el = event.target;
    if (el.tagName === "DETAILS" && el.id) { opened[el.id] = el.open; }
  }, true);  // toggle does not bubble: caught on its way down
  document.body.addEventListener("htmx:afterSettle", function () {
    Object.keys(opened).forEach(function (id) {
      var el = document.getElementById(id);
      if (el && opened[id] && !el.open) { el.open = true; }
    });
  });
})();
