// A POST form is sent once: a second submit while the first is on its way (a double click,
// Enter pressed twice) is dropped, so it cannot launch a second session, make a second token
// or answer "already vetoed" to the person's own first click.
(() => {
  "use strict";
  const sent = new Map(); // form -> the button that sent it (or null)

  document.addEventListener("submit", (event) => {
    const form = event.target;
    // htmx cancels the submits it sends itself (hx-sync is its guard); GET forms only read.
    if (event.defaultPrevented || form.method !== "post") return;
    if (sent.has(form)) {
      event.preventDefault();
      return;
    }
    sent.set(form, event.submitter);
    // Not `disabled`: a disabled button would be left out of the form's data.
    if (event.submitter) event.submitter.setAttribute("aria-disabled", "true");
  });

  function unlock() {
    for (const button of sent.values()) if (button) button.removeAttribute("aria-disabled");
    sent.clear();
  }

  // A page the back button shows from the back/forward cache is as it was left, its forms
  // sent: they may be sent again.
  window.addEventListener("pageshow", (event) => {
    if (event.persisted) unlock();
  });
  // So may a form whose sending the person stopped (the Stop button, Esc): the page stays.
  // Without the Navigation API (older browsers) it stays locked until a reload.
  if (window.navigation) window.navigation.addEventListener("navigateerror", unlock);
})();
