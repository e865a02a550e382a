// A box that scrolls sideways (a wide table on a phone, a diff, a block of code) takes the
// keyboard's focus when nothing in it can, so a keyboard reader can scroll it too. Boxes come
// and go with the width and with htmx's swaps: they are looked at again then.
(() => {
  "use strict";
  const BOXES = "main table, main pre, .d2h-file-side-diff, .d2h-file-diff";
  const FOCUSABLE = "a[href], button, input, select, textarea, [tabindex]";

  function reachable() {
    for (const box of document.querySelectorAll(BOXES)) {
      const scrolls = box.scrollWidth > box.clientWidth;
      if (scrolls && !box.hasAttribute("tabindex") && !box.querySelector(FOCUSABLE)) {
        box.tabIndex = 0;
        box.dataset.scrollBox = "";
      } else if (!scrolls && "scrollBox" in box.dataset) {
        box.removeAttribute("tabindex");
        delete box.dataset.scrollBox;
      }
    }
  }

  // On load: after the page's own scripts have drawn (compare.js's diff).
  window.addEventListener("load", reachable);
  window.addEventListener("resize", reachable);
  document.body.addEventListener("htmx:afterSettle", reachable);
})();
