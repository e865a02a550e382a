// The compare page: the code diff drawn by diff2html (which escapes the code), and both
// cases' per-call timing samples on one chart. Without JavaScript the server's tables stay.
(() => {
  "use strict";

  function json(id) {
    const node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  function drawDiff() {
    const holder = document.getElementById("code-diff");
    const text = json("diff-text");
    if (!holder || !text || !window.Diff2Html) return;
    const options = json("diff-options") || {};
    holder.innerHTML = Diff2Html.html(text, {
      drawFileList: false, matching: "lines", outputFormat: options.outputFormat || "side-by-side",
      colorScheme: "auto",  // the page's light or dark scheme, as the system says
    });
    holder.dataset.renderer = "diff2html";
  }

  function sampleTrace(side, colour) {
    return {
      name: `${side.label} (${side.samples_ms.length} calls)`, type: "scatter", mode: "lines+markers",
      x: side.samples_ms.map((_, i) => i + 1), y: side.samples_ms,
      marker: { size: 5, color: colour }, line: { width: 1, color: colour },
      hovertemplate: "call %{x}: %{y:.4f} ms<extra></extra>",
    };
  }

  function referenceLine(side, colour, calls) {
    return {
      name: `PyTorch eager median (${side.label})`, type: "scatter", mode: "lines",
      x: [1, Math.max(calls, 2)], y: [side.reference_median_ms, side.reference_median_ms],
      line: { dash: "dot", width: 1, color: colour }, hoverinfo: "skip",
    };
  }

  const ms = (value) => `${value.toFixed(4)} ms`;

  // One case's samples in words: what the chart shows of it, for the chart's description.
  function described(side) {
    const n = side.samples_ms.length;
    const eager = side.reference_median_ms
      ? `; PyTorch eager median ${ms(side.reference_median_ms)}` : "";
    if (!n) return `${side.label}: no timed calls${eager}.`;
    const sorted = [...side.samples_ms].sort((x, y) => x - y);
    const middle = Math.floor(n / 2);
    const median = n % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
    return `${side.label}: ${n} call${n === 1 ? "" : "s"} from ${ms(sorted[0])} to `
      + `${ms(sorted[n - 1])}, median ${ms(median)}${eager}.`;
  }

  function drawTimeline() {
    const holder = document.getElementById("timeline");
    const summary = document.getElementById("timeline-summary");
    const data = json("timeline-data");
    if (!holder || !summary || !data || !window.Plotly || !window.kopeCharts) return;
    const calls = Math.max(data.a.samples_ms.length, data.b.samples_ms.length);
    const traces = [sampleTrace(data.a, "#0a58ca"), sampleTrace(data.b, "#cf222e")];
    if (data.a.reference_median_ms) traces.push(referenceLine(data.a, "#0a58ca", calls));
    if (data.b.reference_median_ms) traces.push(referenceLine(data.b, "#cf222e", calls));
    if (!holder.dataset.renderer) holder.replaceChildren();  // the table drawn for no-JS readers
    holder.dataset.renderer = "plotly";
    holder.setAttribute("role", "img");
    holder.setAttribute("aria-label", `Per-call times of ${data.a.label} and ${data.b.label}`);
    holder.setAttribute("aria-describedby", summary.id);
    summary.textContent = `${described(data.a)} ${described(data.b)}`;
    summary.hidden = false;
    const layout = {
      height: 320, margin: { l: 70, r: 20, t: 20, b: 40 },
      xaxis: { title: { text: "timed call" } }, yaxis: { title: { text: "ms" }, rangemode: "tozero" },
      legend: { orientation: "h", y: -0.2 }, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
    };
    window.kopeCharts.inked(layout, holder, ["xaxis", "yaxis"]);
    Plotly.react(holder, traces, layout, { displayModeBar: false, responsive: true });
  }

  drawDiff();
  drawTimeline();
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", drawTimeline);
})();
