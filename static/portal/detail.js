// Environment page: copy buttons, YAML keys highlighted, and the teardown button enabled only
// once the environment's name is typed (the server checks the same).
(function () {
  function highlight(pre) {
    var lines = pre.textContent.split("\n");
    pre.textContent = "";
    lines.forEach(function (line, i) {
      var match = /^(\s*(?:- )?)([^:\s][^:]*)(:)(.*)$/.exec(line);
      if (match) {
        pre.appendChild(document.createTextNode(match[1]));
        var key = document.createElement("span");
        key.className = "y-key";
        key.textContent = match[2];
        pre.appendChild(key);
        pre.appendChild(document.createTextNode(match[3]));
        if (match[4]) {
          var value = document.createElement("span");
          value.className = "y-value";
          value.textContent = match[4];
          pre.appendChild(value);
        }
      } else {
        pre.appendChild(document.createTextNode(line));
      }
      if (i < lines.length - 1) { pre.appendChild(document.createTextNode("\n")); }
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("pre.yaml").forEach(highlight);
    document.querySelectorAll("button[data-copy]").forEach(function (button) {
      button.addEventListener("click", function () {
        var source = document.getElementById(button.getAttribute("data-copy"));
        if (!source || !navigator.clipboard) { return; }
        navigator.clipboard.writeText(source.textContent).then(function () {
          button.textContent = "Copied";
        });
      });
    });
    document.querySelectorAll("form[data-confirm-name]").forEach(function (form) {
      var input = form.querySelector("input[name=confirm]");
      var button = form.querySelector("button[type=submit]");
      var name = form.getAttribute("data-confirm-name");
      function sync() { button.disabled = input.value.trim() !== name; }
      input.addEventListener("input", sync);
      sync();
    });
  });
})();

// The Resources tab is read again every few seconds: the events a person opened stay open.
(function () {
  var open = [];
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.target.id !== "resource-tree") { return; }
    open = Array.prototype.map.call(
      event.detail.target.querySelectorAll("details.tree-events[open]"),
      function (d) { return d.getAttribute("data-ref"); }
    );
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.detail.target.id !== "resource-tree") { return; }
    event.detail.target.querySelectorAll("details.tree-events").forEach(function (d) {
      if (open.indexOf(d.getAttribute("data-ref")) >= 0) { d.open = true; }
    });
  });
})();
