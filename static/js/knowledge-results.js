// The knowledge base's results arrive by htmx in place of the old ones. A live region swapped
// in whole is not announced (a screen reader hears changes only in one that was already
// there), so what was found is said in a status that stays on the page.
(() => {
  "use strict";
  const status = document.getElementById("results-status");
  if (!status) return;
  document.body.addEventListener("htmx:afterSwap", (event) => {
    if (event.target.id !== "results") return;
    const found = event.target.querySelector(":scope > p, :scope > .empty");
    if (!found) return;
    const parts = found.matches("p") ? [found] : found.querySelectorAll("h2, p");
    const text = (part) => part.textContent.replace(/\s+/g, " ").trim();
    status.textContent = Array.from(parts, text).join(": ");  // "No hits: Nothing … near …"
  });
})();
