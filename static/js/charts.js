// What every Plotly chart of the workbench shares: text in the page's own colour (Plotly's
// dark default is unreadable on the dark scheme) and log-axis ticks that never overlap.
// Loaded before the chart scripts, which read window.kopeCharts.
(() => {
  "use strict";

  const GRID = { gridcolor: "rgba(128,128,128,0.3)", zerolinecolor: "rgba(128,128,128,0.6)" };

  function inked(layout, element, axes) {
    layout.font = { ...(layout.font || {}), color: getComputedStyle(element).color };
    for (const axis of axes) Object.assign(layout[axis], GRID);
    return layout;
  }

  // Plotly's own log ticks label the minor steps too ("2 3 4 5 …") and, on a short axis,
  // print them on top of each other: at most MAX_TICKS labels here, at 1-2-5 steps or, for a
  // range within one step, at even linear steps.
  const MAX_TICKS = 6;
  const MANTISSAS = [[1, 2, 5], [1, 2, 3, 4, 5, 6, 7, 8, 9]];

  function label(value) {
    return String(Number(value.toPrecision(3)));
  }

  function decadeTicks(low, high, mantissas, everyDecades) {
    const ticks = [];
    const first = Math.floor(Math.log10(low));
    for (let exponent = first; exponent <= Math.ceil(Math.log10(high)); exponent += everyDecades) {
      for (const m of mantissas) {
        const value = m * 10 ** exponent;
        if (value >= low && value <= high) ticks.push(Number(value.toPrecision(12)));
      }
    }
    return ticks;
  }

  function linearTicks(low, high) {
    const rough = (high - low) / (MAX_TICKS - 1);
    const power = 10 ** Math.floor(Math.log10(rough));
    const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= rough);
    const ticks = [];
    for (let value = Math.ceil(low / step) * step; value <= high; value += step) {
      ticks.push(Number(value.toPrecision(12)));
    }
    return ticks;
  }

  // The axis's range (log10 of ms, a little past the data) and its ticks.
  function logAxis(values) {
    const positive = values.filter((v) => v > 0);
    if (!positive.length) return {};
    const low = Math.min(...positive), high = Math.max(...positive);
    const span = Math.log10(high / low);
    const pad = Math.max(0.05, span * 0.08);
    const range = [Math.log10(low) - pad, Math.log10(high) + pad];
    const [bottom, top] = range.map((r) => 10 ** r);
    let ticks = decadeTicks(bottom, top, MANTISSAS[0], 1);
    if (ticks.length > MAX_TICKS) {
      const every = Math.ceil(Math.ceil(span + 1) / MAX_TICKS);
      ticks = decadeTicks(bottom, top, [1], every);
    } else if (ticks.length < 3) {
      const dense = decadeTicks(bottom, top, MANTISSAS[1], 1);
      ticks = dense.length >= 3 && dense.length <= MAX_TICKS ? dense : linearTicks(bottom, top);
    }
    return { type: "log", range, tickmode: "array", tickvals: ticks, ticktext: ticks.map(label) };
  }

  window.kopeCharts = { inked, logAxis };
})();
