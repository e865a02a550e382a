// The Workers page's answers come over the team's socket, which htmx's ws extension opens
// and, after an abnormal close, reopens by itself. Answers sent while it is down are not
// sent again, so the page says when it is down and, once back, that a check may miss some.
(() => {
  "use strict";
  const section = document.querySelector("[data-live-answers]");
  const status = document.getElementById("live-status");
  if (!section || !status) return;
  const RECONNECTED_BY_HTMX = new Set([1006, 1011, 1012, 1013]);  // ws.js's own list
  const CLOSED_OUT = 4403;  // apps/core/consumers.py: not (or no longer) in the team, or signed out
  let dropped = false;
  const say = (text) => { status.textContent = `Live answers: ${text}`; };

  say("connecting…");
  section.addEventListener("htmx:wsOpen", () => {
    say(dropped ? "reconnected. Answers sent while the connection was down are not shown: "
                  + "check again to see every worker's." : "connected.");
    dropped = false;
  });
  section.addEventListener("htmx:wsClose", (event) => {
    const code = event.detail.event.code;
    if (RECONNECTED_BY_HTMX.has(code)) {
      dropped = true;
      say("connection lost, reconnecting… Answers that come meanwhile are not shown.");
    } else if (code === CLOSED_OUT) {
      say("closed: you are no longer in this team (or signed out).");
      status.append(" ", window.kopeLoginLink());  // request-errors.js
    } else {
      say(`closed (code ${code}); reload the page to see answers live.`);
    }
  });
})();
