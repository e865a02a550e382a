// The page side of tests/browser/test_keyboard.py, injected through the DevTools protocol
// (which the page's CSP does not govern). `start()` notes how every element looks unfocused;
// after each Tab the test presses, `step()` checks the element that took focus; `finish()`
// names what the walk could not reach, and charts without a text alternative.
window.kopeKeyboard = (() => {
  "use strict";
  const LOOK = ["outlineStyle", "outlineWidth", "outlineColor", "boxShadow", "borderColor",
    "backgroundColor"];
  const OPERABLE = 'a[href], button, input:not([type="hidden"]), select, textarea, summary, '
    + '[tabindex="0"]';
  // Widgets walked with arrow keys: their items leave the tab order on purpose.
  const COMPOSITE = ["tree", "treegrid", "grid", "listbox", "menu", "menubar", "radiogroup",
    "tablist", "toolbar"].map((role) => `[role="${role}"]`).join(", ");
  const unfocused = new WeakMap();
  const reached = new Set();
  let first = null;
  let previous = null;
  let startedOnBody = true;
  let stops = 0;
  let onBody = 0;

  const look = (el) => {
    const style = getComputedStyle(el);
    return Object.fromEntries(LOOK.map((name) => [name, style[name]]));
  };

  function describe(el) {
    if (!el || el === document.body) return "the page body";
    const id = el.id ? `#${el.id}` : "";
    const classes = typeof el.className === "string" && el.className.trim()
      ? `.${el.className.trim().split(/\s+/).join(".")}` : "";
    const name = (el.getAttribute("aria-label") || el.innerText || el.value || "")
      .trim().replace(/\s+/g, " ").slice(0, 50);
    return `<${el.tagName.toLowerCase()}${id}${classes}> "${name}"`;
  }

  // A colour as [r, g, b, a] (0-255, alpha 0-1), whatever syntax the computed value uses.
  const canvas = document.createElement("canvas").getContext("2d", { willReadFrequently: true });
  function rgba(colour) {
    canvas.clearRect(0, 0, 1, 1);
    canvas.fillStyle = "#000";
    canvas.fillStyle = colour;
    canvas.fillRect(0, 0, 1, 1);
    const [r, g, b, a] = canvas.getImageData(0, 0, 1, 1).data;
    return [r, g, b, a / 255];
  }

  const over = ([r, g, b, a], [r2, g2, b2]) =>
    [r * a + r2 * (1 - a), g * a + g2 * (1 - a), b * a + b2 * (1 - a), 1];

  // What an outline drawn around `el` sits on: its ancestors' backgrounds, over the page's.
  function backgroundBehind(el) {
    const layers = [];
    for (let node = el.parentElement; node; node = node.parentElement) {
      const colour = rgba(getComputedStyle(node).backgroundColor);
      if (colour[3] > 0) layers.push(colour);
      if (colour[3] === 1) break;
    }
    let colour = [255, 255, 255, 1]; // the canvas, should nothing be opaque
    for (const layer of layers.reverse()) colour = over(layer, colour);
    return colour;
  }

  function luminance([r, g, b]) {
    const linear = (c) => (c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
    return 0.2126 * linear(r / 255) + 0.7152 * linear(g / 255) + 0.0722 * linear(b / 255);
  }

  function contrast(one, two) {
    const [light, dark] = [luminance(one), luminance(two)].sort((x, y) => y - x);
    return (light + 0.05) / (dark + 0.05);
  }

  // Why `el` cannot be seen, or "": not rendered (display, visibility, opacity 0, a closed
  // details), no size, outside the page (or, focused, the window), or cut off by a clip or an
  // ancestor's overflow.
  function unseen(el, inWindow) {
    const shown = { contentVisibilityAuto: true, opacityProperty: true, visibilityProperty: true };
    if (!el.checkVisibility(shown)) {
      return "is not rendered (display, visibility, opacity 0 or a closed details)";
    }
    const box = el.getBoundingClientRect();
    if (box.width < 1 || box.height < 1) return "has no size";
    const [left, top] = inWindow ? [0, 0] : [-scrollX, -scrollY];
    const [right, bottom] = inWindow ? [innerWidth, innerHeight] : [Infinity, Infinity];
    if (box.right <= left || box.bottom <= top || box.left >= right || box.top >= bottom) {
      return `is outside the ${inWindow ? "window" : "page"} (at ${Math.round(box.left)}, `
        + `${Math.round(box.top)})`;
    }
    for (let node = el; node && node !== document.documentElement; node = node.parentElement) {
      const style = getComputedStyle(node);
      if (style.clip === "rect(0px, 0px, 0px, 0px)" || style.clipPath === "inset(50%)") {
        return "is clipped away";
      }
      if (node !== el && (style.overflowX !== "visible" || style.overflowY !== "visible")) {
        const frame = node.getBoundingClientRect();
        if (box.right <= frame.left || box.bottom <= frame.top || box.left >= frame.right
            || box.top >= frame.bottom) {
          return `is cut off by ${describe(node)} (overflow)`;
        }
      }
    }
    return "";
  }

  function indicatorProblems(el) {
    const before = unfocused.get(el);
    const after = look(el);
    if (!before) return [`${describe(el)}: its unfocused look was not recorded (added later?)`];
    const changed = LOOK.filter((name) => before[name] !== after[name]);
    if (!changed.length) {
      const outline = after.outlineStyle === "none" ? "no outline"
        : `outline ${after.outlineStyle} ${after.outlineWidth}`;
      return [`${describe(el)}: no visible focus indicator (${outline}; box-shadow, border and `
        + "background as when unfocused)"];
    }
    const outline = after.outlineStyle !== "none" && parseFloat(after.outlineWidth) >= 1;
    const background = backgroundBehind(el);
    const shown = (c) => `rgb(${c.slice(0, 3).map(Math.round).join(", ")})`;
    if (!outline || !changed.some((name) => name.startsWith("outline"))) {
      return stateChangeProblems(el, before, after, background, shown);
    }
    const colour = over(rgba(after.outlineColor), background);
    const ratio = contrast(colour, background);
    if (ratio >= 3) return [];
    return [`${describe(el)}: focus outline ${after.outlineColor} has contrast `
      + `${ratio.toFixed(2)}:1 against the background ${shown(background)} (needs 3:1)`];
  }

  // Focus shown without an outline: a border, shadow or background whose colour changes. The
  // change itself must be seen: 3:1 between the focused and the unfocused colour (WCAG 2.2's
  // focus appearance), for at least one of them.
  const SHADOW_COLOUR = /rgba?\([^)]*\)/;
  function stateChangeProblems(el, before, after, background, shown) {
    const colourOf = {
      borderColor: (value) => value,
      backgroundColor: (value) => value,
      boxShadow: (value) => (value.match(SHADOW_COLOUR) || ["transparent"])[0],
    };
    const changes = Object.entries(colourOf)
      .filter(([name]) => before[name] !== after[name])
      .map(([name, colour]) => {
        const [from, to] = [before, after]
          .map((look) => over(rgba(colour(look[name])), background));
        return { name, from, to, ratio: contrast(from, to) };
      });
    if (!changes.length || changes.some((change) => change.ratio >= 3)) return [];
    const said = changes.map(({ name, from, to, ratio }) =>
      `${name} ${shown(from)} -> ${shown(to)} at ${ratio.toFixed(2)}:1`).join(", ");
    return [`${describe(el)}: focus is shown only by ${said} (needs 3:1 between the states)`];
  }

  function start() {
    const active = document.activeElement;
    startedOnBody = !active || active === document.body;
    if (!startedOnBody) active.blur(); // a script focused it on load (the review queue)
    for (const el of document.body.querySelectorAll("*")) {
      if (!el.closest("svg")) unfocused.set(el, look(el));
    }
    if (!startedOnBody) active.focus({ preventScroll: true });
  }

  // One Tab's result: {problems, done}; done when focus has gone round (back to the first
  // stop, or to the body when the walk began there) or is trapped.
  function step() {
    const el = document.activeElement;
    stops += 1;
    if (!el || el === document.body || el === document.documentElement) {
      previous = null;
      onBody += 1; // from a script-focused start, the body comes once in the middle of the round
      return { problems: [], done: startedOnBody || onBody > 1 };
    }
    if (el === first) return { problems: [], done: true };
    if (reached.has(el)) {
      const how = el === previous ? "Tab does not move focus on from" : "Tab comes back to";
      return { problems: [`focus trap: ${how} ${describe(el)} after ${stops} stops`], done: true };
    }
    if (first === null) first = el;
    reached.add(el);
    previous = el;
    const problems = indicatorProblems(el);
    const why = unseen(el, true);
    if (why) problems.push(`${describe(el)}: focused but ${why}`);
    return { problems, done: false };
  }

  function leftOutOnPurpose(el) {
    if (el.disabled || el.closest("[inert], fieldset[disabled]")) return true;
    if (el.tabIndex < 0 && el.closest(COMPOSITE)) return true;
    if (el.type === "radio") {
      const group = el.form ? el.form.elements.namedItem(el.name) : null;
      return Boolean(group && Array.from(group).some((radio) => reached.has(radio)));
    }
    return false;
  }

  // Problems the walk as a whole shows. `capped`: it stopped before going round, so an
  // element after its last stop may still be reachable and is not reported.
  function finish(capped) {
    const problems = [];
    const last = [...reached].at(-1);
    for (const el of document.body.querySelectorAll(OPERABLE)) {
      if (reached.has(el) || el.matches(".skip-link") || unseen(el, false)) continue;
      if (leftOutOnPurpose(el)) continue;
      if (capped && last && last.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING) {
        continue;
      }
      problems.push(`${describe(el)}: not reachable by Tab (tabindex ${el.tabIndex})`);
    }
    for (const chart of document.querySelectorAll(".js-plotly-plot")) {
      const name = (chart.getAttribute("aria-label") || "").trim();
      const described = (chart.getAttribute("aria-describedby") || "").split(/\s+/)
        .map((id) => document.getElementById(id)).filter(Boolean)
        .map((node) => node.textContent.trim()).join(" ");
      if (!["img", "figure"].includes(chart.getAttribute("role")) || !name || !described) {
        problems.push(`${describe(chart)}: a chart without a text alternative (role img with `
          + "an aria-label, and aria-describedby naming text that says what it plots)");
      }
    }
    return { problems, stops: reached.size };
  }

  return { start, step, finish };
})();
