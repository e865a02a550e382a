// A profile's page: the timed calls as a timeline (laid end to end, as Perfetto shows the
// Chrome trace) and each function's instructions as bars. The server's tables stay beside
// them for readers without JavaScript or sight of the charts; each chart is described in words.
(() => {
  "use strict";
  const dataNode = document.getElementById("profile-data");
  if (!dataNode || !window.Plotly || !window.kopeCharts) return;
  const data = JSON.parse(dataNode.textContent);
  const CALL_COLOURS = ["#0a58ca", "#6ea8fe"];  // alternate, so each call's ends show
  const ms = (value) => `${value.toFixed(4)} ms`;

  // Plotly reads tags in text it draws: function names (the kernel's, agent-written) go in
  // with their markup characters as entities, shown as the characters themselves.
  function plain(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function median(values) {
    const sorted = [...values].sort((x, y) => x - y);
    const middle = Math.floor(sorted.length / 2);
    return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
  }

  function chartOf(holder, summary, label, description) {
    holder.dataset.renderer = "plotly";
    holder.setAttribute("role", "img");
    holder.setAttribute("aria-label", label);
    holder.setAttribute("aria-describedby", summary.id);
    summary.textContent = description;
    summary.hidden = false;
  }

  function drawCalls() {
    const holder = document.getElementById("profile-calls");
    const summary = document.getElementById("profile-calls-summary");
    const samples = data.samples_ms;
    if (!holder || !summary || !samples.length) return;
    const starts = [];
    let clock = 0;
    for (const sample of samples) { starts.push(clock); clock += sample; }
    chartOf(holder, summary, `Timeline of the ${samples.length} timed calls of ${data.label}`,
      `${samples.length} timed calls over ${ms(clock)}: from ${ms(Math.min(...samples))} to `
      + `${ms(Math.max(...samples))}, median ${ms(median(samples))}. Every call is in the table below.`);
    const trace = {
      type: "bar", orientation: "h", y: samples.map(() => "calls"), x: samples, base: starts,
      marker: { color: samples.map((_, i) => CALL_COLOURS[i % 2]) },
      customdata: samples.map((_, i) => i + 1),
      hovertemplate: "call %{customdata}: %{x:.4f} ms<extra></extra>",
    };
    const layout = {
      height: 160, margin: { l: 60, r: 20, t: 10, b: 45 }, showlegend: false, bargap: 0.3,
      xaxis: { title: { text: "ms since the first timed call" }, rangemode: "tozero" },
      yaxis: { fixedrange: true }, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
    };
    window.kopeCharts.inked(layout, holder, ["xaxis", "yaxis"]);
    Plotly.react(holder, [trace], layout, { displayModeBar: false, responsive: true });
  }

  function drawFunctions() {
    const holder = document.getElementById("profile-functions");
    const summary = document.getElementById("profile-functions-summary");
    const rows = data.functions;
    if (!holder || !summary || !rows.length) return;
    const names = rows.map((row) => (row.in_kernel ? plain(row.function) : "other (outside the kernel)"));
    const costliest = rows.find((row) => row.in_kernel);
    chartOf(holder, summary, `Instructions per function of ${data.label}`,
      costliest ? `The costliest kernel function is ${costliest.function}, with `
        + `${costliest.ir.toLocaleString("en")} instructions; every function is in the table below.`
        : "No kernel function was counted; every row is in the table below.");
    const trace = {
      type: "bar", orientation: "h", y: names, x: rows.map((row) => row.ir),
      marker: { color: rows.map((row) => (row.in_kernel ? "#2e7d32" : "#757575")) },
      hovertemplate: "%{y}: %{x:,} instructions<extra></extra>",
    };
    const layout = {
      height: 90 + 32 * rows.length, margin: { l: 20, r: 20, t: 10, b: 45 }, showlegend: false,
      xaxis: { title: { text: "instructions (Ir)" }, tickformat: "~s" },
      yaxis: { automargin: true, autorange: "reversed" },
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
    };
    window.kopeCharts.inked(layout, holder, ["xaxis", "yaxis"]);
    Plotly.react(holder, [trace], layout, { displayModeBar: false, responsive: true });
  }

  function draw() {
    drawCalls();
    drawFunctions();
  }

  draw();
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", draw);
})();
