// The session page's latency chart: one operator's attempts by iteration, the best-so-far
// line, and failed attempts in a strip below, one row per outcome. New cases arrive as
// "kope:event" events from session-live.js; the chosen operator is kept in the URL.
(() => {
  "use strict";
  const holder = document.getElementById("latency-chart");
  const dataNode = document.getElementById("latency-data");
  if (!holder || !dataNode || !window.Plotly) return;
  const data = JSON.parse(dataNode.textContent);
  const select = document.getElementById("chart-operator");
  let operator = data.operator;
  const FAILED = ["compile_error", "incorrect", "crashed", "timed_out", "rejected"];
  const COLOURS = {
    improved: "#2e7d32", no_change: "#757575", regressed: "#ef6c00",
    compile_error: "#6a1b9a", incorrect: "#c62828", crashed: "#ad1457",
    timed_out: "#4e342e", rejected: "#1565c0",
  };

  function bestSoFar(attempts) {
    const xs = [], ys = [];
    let best = Infinity;
    for (const a of attempts) {
      if (a.correct && a.latency_ms && a.latency_ms < best) best = a.latency_ms;
      if (best < Infinity) { xs.push(a.iteration); ys.push(best); }
    }
    return { xs, ys };
  }

  function traces(attempts) {
    const timed = attempts.filter((a) => a.correct && a.latency_ms);
    const best = bestSoFar(attempts);
    const list = [
      {
        name: "correct attempt", type: "scatter", mode: "markers", x: timed.map((a) => a.iteration),
        y: timed.map((a) => a.latency_ms), text: timed.map((a) => `${a.outcome}: ${a.strategy}`),
        marker: { size: 8, color: timed.map((a) => COLOURS[a.outcome] || "#757575") },
        hovertemplate: "#%{x}: %{y:.3f} ms<br>%{text}<extra></extra>",
      },
      {
        name: "best so far", type: "scatter", mode: "lines", x: best.xs, y: best.ys,
        line: { shape: "hv", color: "#2e7d32" }, hoverinfo: "skip",
      },
    ];
    for (const outcome of FAILED) {
      const failed = attempts.filter((a) => a.outcome === outcome);
      if (!failed.length) continue;
      list.push({
        name: outcome.replace("_", " "), type: "scatter", mode: "markers", yaxis: "y2",
        x: failed.map((a) => a.iteration), y: failed.map(() => outcome.replace("_", " ")),
        text: failed.map((a) => a.strategy),
        marker: { symbol: "x", size: 9, color: COLOURS[outcome] },
        hovertemplate: "#%{x} %{y}<br>%{text}<extra></extra>",
      });
    }
    return list;
  }

  function draw() {
    const attempts = data.attempts[operator] || [];
    const layout = {
      height: 360, margin: { l: 70, r: 20, t: 30, b: 40 }, title: { text: operator, font: { size: 14 } },
      xaxis: { title: { text: "iteration" }, anchor: "y2", rangemode: "tozero", dtick: attempts.length > 20 ? 5 : 1 },
      yaxis: { title: { text: "latency (ms)" }, type: "log", domain: [0.3, 1] },
      yaxis2: { domain: [0, 0.2], type: "category", automargin: true },
      legend: { orientation: "h", y: -0.15 }, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
    };
    if (!holder.dataset.renderer) holder.replaceChildren();  // the table drawn for no-JS readers
    holder.dataset.renderer = "plotly";
    Plotly.react(holder, traces(attempts), layout, { displayModeBar: false, responsive: true });
  }

  function addCase(event) {
    if (event.kind !== "case_recorded") return;
    const p = event.payload;
    const slug = data.versions[String(p.version_id)];
    if (!slug) return;
    (data.attempts[slug] = data.attempts[slug] || []).push({
      iteration: p.iteration, outcome: p.outcome, correct: p.correct,
      latency_ms: p.latency_ms, strategy: p.strategy,
    });
    if (select && slug !== operator && !userChose) {
      operator = slug;
      select.value = slug;
    }
    if (slug === operator) draw();
  }

  let userChose = new URLSearchParams(location.search).has("operator");
  if (select) {
    select.addEventListener("change", () => {
      operator = select.value;
      userChose = true;
      const url = new URL(location.href);
      url.searchParams.set("operator", operator);
      history.replaceState(null, "", url);
      draw();
    });
  }
  document.body.addEventListener("kope:event", (e) => addCase(e.detail));
  draw();
})();
