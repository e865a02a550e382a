// htmx swaps in only a 2xx answer and leaves the page as it was otherwise: a Check workers
// refused since the person became a viewer, an "expand" of a node deleted meanwhile, a server
// that is down all looked like a click that did nothing. Each failed htmx request is said in
// the page's one alert (base.html), with the server's own words where it gave some, as text:
// an error message may quote what a user wrote. A later failure replaces it; the request's
// element succeeding again (a poll after the server is back) or Dismiss clears it. A request
// sent after the session ended is not done either: it says so, and links to the login page.
(() => {
  "use strict";
  const region = document.getElementById("request-error");
  if (!region) return;
  const MAX_CHARS = 300;
  let failedElement = null;

  const squeeze = (text) => (text || "").replace(/\s+/g, " ").trim();

  // What the person did, as the page names it: the button or link pressed, if any.
  function action(detail) {
    const control = detail.requestConfig?.triggeringEvent?.submitter
      || detail.elt.closest("button, a, summary");
    const name = control ? squeeze(control.textContent) : "";
    return name ? `“${name}”` : "A request";
  }

  // The server's reason: the API's {"error": {"message"}}, or an error page's heading and
  // the paragraph after it; parsed inertly (DOMParser runs no script, loads nothing).
  function reason(xhr) {
    const type = xhr.getResponseHeader("Content-Type") || "";
    try {
      if (type.includes("json")) return squeeze(JSON.parse(xhr.responseText).error.message);
      if (type.includes("html")) {
        const page = new DOMParser().parseFromString(xhr.responseText, "text/html");
        const heading = squeeze(page.querySelector("h1")?.textContent);
        const paragraph = Array.from(page.querySelectorAll("h1 ~ p"), said).find(Boolean);
        return [heading, paragraph].filter(Boolean).join(". ");
      }
    } catch {
      // not what its Content-Type says: the status line is all there is to say
    }
    return "";
  }

  // A paragraph's words, but none from one that is only a link ("Back to the workbench").
  function said(paragraph) {
    const text = squeeze(paragraph.textContent);
    return text === squeeze(paragraph.querySelector("a")?.textContent) ? "" : text;
  }

  function shorten(text) {
    return text.length > MAX_CHARS ? `${text.slice(0, MAX_CHARS - 1)}…` : text;
  }

  function show(element, text, link) {
    failedElement = element;
    const message = document.createElement("p");
    message.textContent = text;
    if (link) message.append(" ", link);
    if (region.querySelector("p")?.textContent === message.textContent) return;  // a poll again
    const dismiss = document.createElement("button");
    dismiss.type = "button";
    dismiss.textContent = "Dismiss";
    dismiss.addEventListener("click", clear);
    const box = document.createElement("div");
    box.className = "request-error";
    box.append(message, dismiss);
    region.replaceChildren(box);
  }

  // A request made after the session ended is redirected to the login page, which the
  // browser follows: htmx gets a 200, and would put the whole login page inside this one.
  function toLogin(xhr) {
    return Boolean(xhr.responseURL) && new URL(xhr.responseURL).pathname === region.dataset.login;
  }

  function loginLink() {
    const link = document.createElement("a");
    const next = encodeURIComponent(location.pathname + location.search);
    link.href = `${region.dataset.login}?next=${next}`;
    link.textContent = "Log in again";
    return link;
  }

  // The live pages' sockets, closed for a reader who is signed out, offer the same link.
  window.kopeLoginLink = loginLink;

  function clear() {
    failedElement = null;
    region.replaceChildren();
  }

  document.body.addEventListener("htmx:responseError", (event) => {
    const { xhr } = event.detail;
    const status = `${xhr.status} ${xhr.statusText}`.trim();
    const what = xhr.status >= 500 ? "failed on the server" : "was refused";
    const why = reason(xhr);
    const text = `${action(event.detail)} ${what} (${status})${why ? `: ${why}` : "."}`;
    show(event.detail.elt, shorten(text));
  });
  document.body.addEventListener("htmx:sendError", (event) => {
    show(event.detail.elt, `${action(event.detail)} failed: the server could not be reached. `
      + "Check the connection, or whether the workbench is running, and try again.");
  });
  document.body.addEventListener("htmx:beforeSwap", (event) => {
    if (!toLogin(event.detail.xhr)) return;
    event.detail.shouldSwap = false;
    show(event.detail.elt, `${action(event.detail)} was not done: you are not logged in any more.`,
      loginLink());
  });
  document.body.addEventListener("htmx:afterRequest", (event) => {
    const { elt, successful, xhr } = event.detail;
    if (successful && elt === failedElement && !toLogin(xhr)) clear();
  });
})();
