// Tabs: [role=tablist] buttons show one [role=tabpanel] at a time; the URL's #hash names the tab.
// Without this script every panel shows, one under the other.
(function () {
  function select(tablist, tab, focus) {
    tablist.querySelectorAll("[role=tab]").forEach(function (other) {
      var on = other === tab;
      other.setAttribute("aria-selected", on ? "true" : "false");
      other.tabIndex = on ? 0 : -1;
      var panel = document.getElementById(other.getAttribute("aria-controls"));
      if (panel) { panel.hidden = !on; }
    });
    if (focus) { tab.focus(); }
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[role=tablist]").forEach(function (tablist) {
      var tabs = Array.prototype.slice.call(tablist.querySelectorAll("[role=tab]"));
      if (!tabs.length) { return; }
      var wanted = tabs.filter(function (t) { return "#" + t.id === window.location.hash; })[0];
      select(tablist, wanted || tabs[0], false);
      tabs.forEach(function (tab, i) {
        tab.addEventListener("click", function () {
          select(tablist, tab, false);
          history.replaceState(null, "", "#" + tab.id);
        });
        tab.addEventListener("keydown", function (event) {
          var step = event.key === "ArrowRight" ? 1 : event.key === "ArrowLeft" ? -1 : 0;
          if (!step) { return; }
          event.preventDefault();
          select(tablist, tabs[(i + step + tabs.length) % tabs.length], true);
        });
      });
    });
  });
})();
