// Keyboard review: j/k move between the rules on screen (the current filter's), a approves
// the selected one's latest version, v moves to its veto reason, Enter opens it.
(() => {
  "use strict";
  const cards = Array.from(document.querySelectorAll("#rule-queue .rule-card"));
  if (!cards.length) return;
  let index = 0;

  function select(next) {
    index = Math.max(0, Math.min(cards.length - 1, next));
    cards.forEach((card, i) => card.classList.toggle("selected", i === index));
    cards[index].focus();
  }

  document.addEventListener("keydown", (event) => {
    const typing = event.target.closest && event.target.closest("input, textarea, select");
    if (typing || event.altKey || event.ctrlKey || event.metaKey) return;
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
