// A session's live events: the socket sends the gap since the last seq this page has, then
// live events, each once and in order; after a drop it reconnects with the seq it has.
(() => {
  "use strict";
  const log = document.getElementById("event-log");
  if (!log) return;
  const live = document.getElementById("live-status");
  const status = document.getElementById("session-status");
  let last = Number(log.dataset.lastSeq || 0);
  let socket = null;
  let retryMs = 500;
  let holdUntil = 0;
  // Events after which the operators table (incumbents, speedups) is fetched again.
  const PROGRESS = new Set(["incumbent_replaced", "operator_finished", "session_finished"]);
  // Events after which the context composition is fetched again: a new one, its proposal, or
  // what ends an iteration with no proposal (its items then read "no proposal followed", not
  // "deciding…"; apps/runs/views.py's ENDS_AN_ITERATION).
  const CONTEXT = new Set(["context_assembled", "candidate_proposed", "operator_finished",
    "session_finished", "session_stopped", "session_paused"]);
  const CLOSED_OUT = 4403;  // the server's close code for a watcher no longer in the team
  const tokensUsed = document.getElementById("tokens-used");
  const tokensBar = document.getElementById("tokens-bar");

  function row(event) {
    const item = document.createElement("li");
    item.dataset.seq = String(event.seq);
    item.dataset.kind = event.kind;
    const seq = document.createElement("span");
    seq.className = "seq";
    seq.textContent = String(event.seq);
    const kind = document.createElement("code");
    kind.textContent = event.kind;
    const text = document.createElement("span");
    text.textContent = event.summary;  // text, never HTML: agent-written strings stay inert
    item.append(seq, " ", kind, " ", text);
    if (event.case) item.append(" ", caseLink(event.case));
    return item;
  }

  function caseLink(id) {
    const link = document.createElement("a");
    link.href = log.dataset.caseUrl.replace(/0\/$/, `${id}/`);
    link.textContent = `case ${id}`;
    return link;
  }

  function receive(message) {
    const event = JSON.parse(message.data);
    if (event.queue) {  // the line this queued session waits in moved: no journal event
      document.body.dispatchEvent(new Event("kope:queue"));
      return;
    }
    if (event.seq <= last) return;
    log.append(row(event));
    last = event.seq;
    document.body.dispatchEvent(new CustomEvent("kope:event", { detail: event }));
    if (PROGRESS.has(event.kind)) document.body.dispatchEvent(new Event("kope:progress"));
    if (CONTEXT.has(event.kind)) document.body.dispatchEvent(new Event("kope:context"));
    if (event.kind === "model_called" && tokensUsed) addTokens(event.payload.usage || {});
    if (event.kind.startsWith("session_")) {
      showStatus(event);
      document.body.dispatchEvent(new Event("kope:queue"));  // started: no longer in line
    }
  }

  // The status as a reload shows it, text and colour; `session_started` carries none: a
  // session starts when it goes from queued to running.
  function showStatus(event) {
    const value = event.kind === "session_started" ? "running" : event.payload.status;
    if (!value || !status) return;
    status.textContent = value;
    status.className = `status status-${value}`;
    for (const control of document.querySelectorAll("button[data-allowed-in]")) {
      control.disabled = !control.dataset.allowedIn.split(" ").includes(value);
    }
  }

  function addTokens(usage) {
    const spent = Object.values(usage).reduce((sum, n) => sum + Number(n || 0), 0);
    const total = Number(tokensUsed.textContent) + spent;
    tokensUsed.textContent = String(total);
    if (tokensBar) tokensBar.value = total;
  }

  function connect() {
    const wait = holdUntil - Date.now();
    if (wait > 0) {
      setTimeout(connect, wait);
      return;
    }
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}${log.dataset.socket}?after=${last}`);
    socket.onopen = () => { retryMs = 500; live.textContent = "live"; };
    socket.onmessage = receive;
    socket.onclose = (event) => {
      if (event.code === CLOSED_OUT) {  // not in the team any more: reconnecting cannot help
        live.textContent = "closed: you are no longer in this session's team (or signed out)";
        live.append(" · ", window.kopeLoginLink());  // request-errors.js
        return;
      }
      live.textContent = "reconnecting…";
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 10000);
    };
  }

  // The operators table is fetched again after progress: an incumbent kernel the reader
  // opened stays open (htmx gives focus back to the element it was on, by its id).
  const operators = document.getElementById("operators");
  let opened = [];
  operators?.addEventListener("htmx:beforeSwap", () => {
    opened = Array.from(operators.querySelectorAll("details[open]"), (details) => details.id);
  });
  operators?.addEventListener("htmx:afterSwap", () => {
    for (const id of opened) document.getElementById(id)?.setAttribute("open", "");
  });

  // For people debugging a connection, and for the browser tests: drop the socket and stay
  // away for `ms` before reconnecting.
  window.kopeSessionLive = {
    drop(ms) { holdUntil = Date.now() + (ms || 0); if (socket) socket.close(); },
    lastSeq() { return last; },
  };
  connect();
})();
