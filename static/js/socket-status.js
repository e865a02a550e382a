// A part of a page fed over a websocket by htmx's ws extension, which opens it and, after an
// abnormal close, reopens it by itself: the line its `data-live-status` names says whether it
// is up. What the part misses while it is down, and says once back, its data attributes tell
// (the Workers page's answers are not sent again; an evaluated kernel's page gets its whole
// state again on each connection, so it misses nothing).
(() => {
  "use strict";
  const RECONNECTED_BY_HTMX = new Set([1006, 1011, 1012, 1013]);  // ws.js's own list
  const CLOSED_OUT = 4403;  // apps/core/consumers.py: not (or no longer) in the team, or signed out

  function follow(section) {
    const status = document.getElementById(section.dataset.liveStatus);
    if (!status) return;
    const { liveName, liveLost = "", liveBack = "connected.", liveReload } = section.dataset;
    let dropped = false;
    const say = (text) => { status.textContent = `${liveName}: ${text}`; };

    say("connecting…");
    section.addEventListener("htmx:wsOpen", () => {
      say(dropped ? liveBack : "connected.");
      dropped = false;
    });
    section.addEventListener("htmx:wsClose", (event) => {
      const code = event.detail.event.code;
      if (RECONNECTED_BY_HTMX.has(code)) {
        dropped = true;
        say(`connection lost, reconnecting…${liveLost}`);
      } else if (code === CLOSED_OUT) {
        say("closed: you are no longer in this team (or signed out).");
        status.append(" ", window.kopeLoginLink());  // request-errors.js
      } else {
        say(`closed (code ${code}); reload the page to see ${liveReload}.`);
      }
    });
  }

  document.querySelectorAll("[data-live-status]").forEach(follow);
})();
