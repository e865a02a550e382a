// The session page's latency chart: one operator's attempts by iteration, the best-so-far
// line, and failed attempts in a strip below, one row per outcome. New cases arrive as
// "kope:event" events from session-live.js; the chosen operator is kept in the URL.
(() => {
  "use strict";
  const holder = document.getElementById("latency-chart");
  const dataNode = document.getElementById("latency-data");
  // The chart in words, and every attempt it draws as a table (the server's, for readers
  // without JavaScript, moved out of the chart's place): for keyboard and screen-reader users.
  const summary = document.getElementById("latency-summary");
  const tableBox = document.getElementById("latency-table");
  const table = holder && holder.querySelector("table");
  if (!holder || !dataNode || !summary || !tableBox || !table || !window.Plotly) return;
  const data = JSON.parse(dataNode.textContent);
  const select = document.getElementById("chart-operator");
  let operator = data.operator;
  const FAILED = ["compile_error", "incorrect", "crashed", "timed_out", "rejected"];
  const COLOURS = {
    improved: "#2e7d32", no_change: "#757575", regressed: "#ef6c00",
    compile_error: "#6a1b9a", incorrect: "#c62828", crashed: "#ad1457",
    timed_out: "#4e342e", rejected: "#1565c0",
  };

  // Plotly reads tags in text it draws (<b>, <br>, <a href>): agent-written text goes in with
  // its markup characters as entities, which Plotly shows as the characters themselves.
  function plain(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

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
        y: timed.map((a) => a.latency_ms), text: timed.map((a) => `${a.outcome}: ${plain(a.strategy)}`),
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
        text: failed.map((a) => plain(a.strategy)),
        marker: { symbol: "x", size: 9, color: COLOURS[outcome] },
        hovertemplate: "#%{x} %{y}<br>%{text}<extra></extra>",
      });
    }
    return list;
  }

  const ms = (latency) => `${latency.toFixed(3)} ms`;

  function describe(attempts) {
    const n = attempts.length;
    if (!n) return `${operator}: no attempts yet.`;
    const parts = [`${operator}: ${n} attempt${n === 1 ? "" : "s"}`];
    const timed = attempts.filter((a) => a.correct && a.latency_ms);
    if (timed.length) {
      const first = timed[0];
      const best = timed.reduce((b, a) => (a.latency_ms < b.latency_ms ? a : b));
      parts.push(`the first correct one ${ms(first.latency_ms)} (iteration ${first.iteration}), `
        + `the fastest ${ms(best.latency_ms)} (iteration ${best.iteration})`);
    }
    const failed = FAILED.map((outcome) => [outcome, attempts.filter((a) => a.outcome === outcome)])
      .filter(([, same]) => same.length)
      .map(([outcome, same]) => `${same.length} ${outcome.replace("_", " ")}`);
    if (failed.length) parts.push(`failed: ${failed.join(", ")}`);
    return `${parts.join("; ")}. Every attempt is in the table below.`;
  }

  function cell(content) {
    const td = document.createElement("td");
    td.append(content);  // a string goes in as text: agent-written strategies stay inert
    return td;
  }

  function attemptRow(a) {
    const row = document.createElement("tr");
    const iteration = document.createElement(a.case ? "a" : "span");
    if (a.case) iteration.href = holder.dataset.caseUrl.replace(/0\/$/, `${a.case}/`);
    iteration.textContent = String(a.iteration);
    const outcome = document.createElement("span");
    outcome.className = `outcome outcome-${a.outcome}`;
    outcome.textContent = a.outcome;
    row.append(cell(iteration), cell(outcome), cell(a.latency_ms ? ms(a.latency_ms) : "-"),
      cell(a.strategy || ""));
    return row;
  }

  // The server's rows, drawn again from the data: for the chosen operator, and with the cases
  // that arrived live.
  function fillTable(attempts) {
    table.caption.textContent = `${operator}: every attempt the chart draws`;
    const rows = attempts.map(attemptRow);
    if (!rows.length) {
      const none = cell("No attempts yet.");
      none.colSpan = 4;
      rows.push(document.createElement("tr"));
      rows[0].append(none);
    }
    table.tBodies[0].replaceChildren(...rows);
  }

  function draw() {
    const attempts = data.attempts[operator] || [];
    const layout = {
      height: 360, margin: { l: 70, r: 20, t: 30, b: 40 }, title: { text: plain(operator), font: { size: 14 } },
      xaxis: { title: { text: "iteration" }, anchor: "y2", rangemode: "tozero", dtick: attempts.length > 20 ? 5 : 1 },
      yaxis: { title: { text: "latency (ms)" }, type: "log", domain: [0.3, 1] },
      yaxis2: { domain: [0, 0.2], type: "category", automargin: true },
      legend: { orientation: "h", y: -0.15 }, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
    };
    if (!holder.dataset.renderer) {
      tableBox.append(table);
      tableBox.hidden = false;
      holder.replaceChildren();
      holder.setAttribute("role", "img");
      holder.setAttribute("aria-describedby", summary.id);
    }
    holder.dataset.renderer = "plotly";
    holder.setAttribute("aria-label", `Latency per iteration of ${operator}`);
    summary.textContent = describe(attempts);
    summary.hidden = false;
    fillTable(attempts);
    Plotly.react(holder, traces(attempts), layout, { displayModeBar: false, responsive: true });
  }

  function addCase(event) {
    if (event.kind !== "case_recorded") return;
    const p = event.payload;
    const slug = data.versions[String(p.version_id)];
    if (!slug) return;
    (data.attempts[slug] = data.attempts[slug] || []).push({
      iteration: p.iteration, outcome: p.outcome, correct: p.correct,
      latency_ms: p.latency_ms, strategy: p.strategy, case: event.case,
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
