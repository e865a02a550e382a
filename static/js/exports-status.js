// The exports list is swapped in whole every 2 s while exports are made, and a list swapped
// in whole is not announced: an export that ends is said in a status that stays on the page.
(() => {
  "use strict";
  const status = document.getElementById("exports-status");
  if (!status) return;
  const ACTIVE = new Set(["queued", "running"]);
  const rows = (list) => Array.from(list.querySelectorAll("tr[data-export]"));
  let before = new Map();  // export id -> its status before the swap

  function ended(row) {
    const id = `Export #${row.dataset.export}`;
    if (row.dataset.status === "done") return `${id} is ready: ${row.querySelector("a[download]").textContent}.`;
    const why = row.querySelector("small");
    return row.dataset.status === "failed" && why ? `${id} failed: ${why.textContent}` : `${id} ${row.dataset.status}.`;
  }

  document.body.addEventListener("htmx:beforeSwap", (event) => {
    if (event.target.id !== "exports") return;
    before = new Map(rows(event.target).map((row) => [row.dataset.export, row.dataset.status]));
  });
  document.body.addEventListener("htmx:afterSwap", (event) => {
    if (event.target.id !== "exports") return;
    const said = rows(event.target)
      .filter((row) => ACTIVE.has(before.get(row.dataset.export)) && !ACTIVE.has(row.dataset.status))
      .map(ended);
    if (said.length) status.textContent = said.join(" ");
  });
})();
