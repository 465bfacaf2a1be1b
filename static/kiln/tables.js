// Labels every data-table cell with its column's header (data-label), which the phone
// layout in kiln.css shows beside the value when a row is stacked into a small card.
// Tables swapped in later (htmx partials, the live rollout view) are labelled as they land.
(() => {
  "use strict";

  // The header text of each column, from the header's last row (rowspan and colspan counted).
  function columnNames(head) {
    const grid = [];
    Array.from(head.rows).forEach((row, r) => {
      grid[r] = grid[r] || [];
      let col = 0;
      for (const cell of row.cells) {
        while (grid[r][col] !== undefined) col += 1;
        const text = (cell.dataset.label || cell.textContent).replace(/\s+/g, " ").trim();
        for (let dr = 0; dr < (cell.rowSpan || 1); dr += 1) {
          grid[r + dr] = grid[r + dr] || [];
          for (let dc = 0; dc < (cell.colSpan || 1); dc += 1) grid[r + dr][col + dc] = text;
        }
        col += cell.colSpan || 1;
      }
    });
    return grid.length ? grid[grid.length - 1] : [];
  }

  function label(table) {
    if (!table.tHead) return;
    const names = columnNames(table.tHead);
    const sections = Array.from(table.tBodies).concat(table.tFoot ? [table.tFoot] : []);
    for (const section of sections) {
      for (const row of section.rows) {
        let col = 0;
        for (const cell of row.cells) {
          const name = names[col];
          if ((cell.colSpan || 1) === 1 && name && !cell.hasAttribute("data-label")) {
            cell.setAttribute("data-label", name);
          }
          col += cell.colSpan || 1;
        }
      }
    }
  }

  let queued = false;
  function labelAll() {
    queued = false;
    document.querySelectorAll("table.data").forEach(label);
  }
  function queue() {
    if (!queued) {
      queued = true;
      requestAnimationFrame(labelAll);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    labelAll();
    new MutationObserver(queue).observe(document.body, { childList: true, subtree: true });
  });
})();
