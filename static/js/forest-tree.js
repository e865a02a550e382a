// The forest as a keyboard tree (the WAI-ARIA treeview pattern): the tree is one tab stop;
// Down/Up move between the nodes on screen, Right opens a branch (loading it the first time)
// or steps into it, Left closes it or steps out to the parent, Home/End go to the first and
// last node, Enter opens the node's case. Without this script the links work as before.
(() => {
  "use strict";
  const tree = document.querySelector(".forest[role=tree]");
  if (!tree) return;

  const ITEM = "li[role=treeitem]";
  const groupOf = (item) => item.querySelector(":scope > ul[role=group]");
  const parentOf = (item) => item.parentElement.closest(ITEM);
  const shownItems = () => Array.from(tree.querySelectorAll(ITEM))
    .filter((item) => !item.closest("ul[role=group][hidden]"));

  function focusItem(item) {
    if (!item) return;
    tree.querySelectorAll(`${ITEM}[tabindex="0"]`).forEach((other) => { other.tabIndex = -1; });
    item.tabIndex = 0;
    item.focus();
  }

  function open(item) {
    const group = groupOf(item);
    if (!group) {
      const expand = item.querySelector(":scope > a.expand");
      if (!expand) return;
      // htmx takes up links that came in a swap only at its settle, 20 ms on; clicked before
      // that, the link is followed as a plain one (a page load). Processing twice is a no-op.
      if (window.htmx) htmx.process(expand);
      expand.click(); // htmx puts the children in the link's place
    } else if (group.hidden) {
      group.hidden = false;
      item.setAttribute("aria-expanded", "true");
    } else {
      focusItem(group.querySelector(ITEM));
    }
  }

  function close(item) {
    const group = groupOf(item);
    if (group && !group.hidden) {
      group.hidden = true;
      item.setAttribute("aria-expanded", "false");
    } else {
      focusItem(parentOf(item));
    }
  }

  function step(item, offset) {
    const items = shownItems();
    focusItem(items[items.indexOf(item) + offset]);
  }

  const actions = {
    ArrowDown: (item) => step(item, 1),
    ArrowUp: (item) => step(item, -1),
    ArrowRight: open,
    ArrowLeft: close,
    Home: () => focusItem(shownItems()[0]),
    End: () => focusItem(shownItems().at(-1)),
    Enter: (item) => item.querySelector(":scope > a:not(.expand)").click(),
  };

  tree.addEventListener("keydown", (event) => {
    const action = actions[event.key];
    const modified = event.altKey || event.ctrlKey || event.metaKey;
    if (!action || modified || !event.target.matches(ITEM)) return;
    event.preventDefault();
    action(event.target);
  });

  // Links inside the tree leave the tab order (the tree is one stop), and a branch whose
  // children have arrived, by key or by a click on "expand", says it is open.
  function settle() {
    tree.querySelectorAll("a").forEach((link) => { link.tabIndex = -1; });
    tree.querySelectorAll(ITEM).forEach((item) => {
      if (item.tabIndex !== 0) item.tabIndex = -1;
      const group = groupOf(item);
      if (group && !group.hidden) item.setAttribute("aria-expanded", "true");
    });
    const first = tree.querySelector(ITEM);
    if (first && !tree.querySelector(`${ITEM}[tabindex="0"]`)) first.tabIndex = 0;
  }

  new MutationObserver(settle).observe(tree, { childList: true, subtree: true });
  settle();
})();
