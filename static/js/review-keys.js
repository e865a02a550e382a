// Keyboard review: j/k move between the rules on screen (the current filter's), a approves
// the selected one's latest version, v moves to its veto reason, Enter opens it. A card that
// gets focus some other way (Tab, a click) becomes the selected one, so a key never acts on a
// card other than the one the reviewer is on. The keys act only while focus is in the queue
// (WCAG 2.1.4): a letter typed elsewhere, or a speech command heard as one, approves nothing.
(() => {
  "use strict";
  const queue = document.getElementById("rule-queue");
  const cards = Array.from(document.querySelectorAll("#rule-queue .rule-card"));
  if (!cards.length) return;
  let index = 0;

  function mark(next) {
    index = Math.max(0, Math.min(cards.length - 1, next));
    cards.forEach((card, i) => card.classList.toggle("selected", i === index));
  }

  function select(next) {
    mark(next);
    cards[index].focus();
  }

  cards.forEach((card, i) => card.addEventListener("focusin", () => mark(i)));

  document.addEventListener("keydown", (event) => {
    const typing = event.target.closest && event.target.closest("input, textarea, select");
    const elsewhere = !queue.contains(event.target);
    if (elsewhere || typing || event.altKey || event.ctrlKey || event.metaKey) return;
    const card = cards[index];
    if (event.key === "j") select(index + 1);
    else if (event.key === "k") select(index - 1);
    else if (event.key === "a") {
      const form = card.querySelector("form.approve");
      if (form) form.requestSubmit();
    } else if (event.key === "v") {
      const reason = card.querySelector("form.veto input[name=reason]");
      if (reason) { event.preventDefault(); reason.focus(); }
    } else if (event.key === "Enter" && event.target === card) {
      card.querySelector("h2 a").click();
    } else return;
  });
  select(0);
})();
