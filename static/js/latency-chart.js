// The session page's latency chart: one operator's attempts by iteration, the incumbent's
// line, and failed attempts in a strip below, one row per outcome. New cases and incumbents
// arrive as "kope:event" events from session-live.js; the chosen operator is kept in the URL.
(() => {
  "use strict";
  const holder = document.getElementById("latency-chart");
  const dataNode = document.getElementById("latency-data");
  // The chart in words, and every attempt it draws as a table (the server's, for readers
  // without JavaScript, moved out of the chart's place): for keyboard and screen-reader users.
  const summary = document.getElementById("latency-summary");
  const tableBox = document.getElementById("latency-table");
  const table = holder && holder.querySelector("table");
  if (!holder || !dataNode || !summary || !tableBox || !table || !window.Plotly || !window.kopeCharts) return;
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

  // The incumbent after each attempt, as the journal named it: not the lowest latency, since
  // a candidate replaces it only when timed faster beside it (attempts timed minutes apart
  // differ with the host's load).
  function incumbentLine(attempts) {
    const xs = [], ys = [];
    let incumbent = null;
    for (const a of attempts) {
      if (a.incumbent) incumbent = a;
      if (incumbent) { xs.push(a.iteration); ys.push(incumbent.latency_ms); }
    }
    return { xs, ys, incumbent };
  }

  const versusParent = (a) => (a.vs_parent ? `${a.vs_parent.toFixed(2)}x` : "-");

  function traces(attempts) {
    const timed = attempts.filter((a) => a.correct && a.latency_ms);
    const line = incumbentLine(attempts);
    const list = [
      {
        name: "correct attempt", type: "scatter", mode: "markers", x: timed.map((a) => a.iteration),
        y: timed.map((a) => a.latency_ms), text: timed.map((a) => `${a.outcome}, ${versusParent(a)} vs its parent: ${plain(a.strategy)}`),
        marker: { size: 8, color: timed.map((a) => COLOURS[a.outcome] || "#757575") },
        hovertemplate: "#%{x}: %{y:.3f} ms<br>%{text}<extra></extra>",
      },
      {
        name: "incumbent", type: "scatter", mode: "lines", x: line.xs, y: line.ys,
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
      const { incumbent } = incumbentLine(attempts);
      parts.push(`the first correct one ${ms(first.latency_ms)} (iteration ${first.iteration})`
        + (incumbent ? `, the incumbent ${ms(incumbent.latency_ms)} (iteration ${incumbent.iteration})` : ""));
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
    const latency = a.latency_ms ? ms(a.latency_ms) + (a.incumbent ? " (new incumbent)" : "") : "-";
    row.append(cell(iteration), cell(outcome), cell(latency), cell(versusParent(a)),
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
      none.colSpan = 5;
      rows.push(document.createElement("tr"));
      rows[0].append(none);
    }
    // A reader on a row's link keeps their place when the rows are drawn again.
    const focused = table.contains(document.activeElement) && document.activeElement.getAttribute("href");
    table.tBodies[0].replaceChildren(...rows);
    if (focused) table.querySelector(`a[href="${CSS.escape(focused)}"]`)?.focus();
  }

  function draw() {
    const attempts = data.attempts[operator] || [];
    const layout = {
      height: 360, margin: { l: 70, r: 20, t: 30, b: 40 }, title: { text: plain(operator), font: { size: 14 } },
      xaxis: { title: { text: "iteration" }, anchor: "y2", rangemode: "tozero", dtick: attempts.length > 20 ? 5 : 1 },
      yaxis: { title: { text: "latency (ms)" }, domain: [0.3, 1],
               ...window.kopeCharts.logAxis(attempts.map((a) => (a.correct ? a.latency_ms : 0))) },
      yaxis2: { domain: [0, 0.2], type: "category", automargin: true },
      legend: { orientation: "h", y: -0.15 }, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
    };
    window.kopeCharts.inked(layout, holder, ["xaxis", "yaxis", "yaxis2"]);
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

  function addCase(p, caseId) {
    const slug = data.versions[String(p.version_id)];
    if (!slug) return;
    (data.attempts[slug] = data.attempts[slug] || []).push({
      iteration: p.iteration, outcome: p.outcome, correct: p.correct, latency_ms: p.latency_ms,
      vs_parent: p.speedup_vs_parent, incumbent: false, strategy: p.strategy, case: caseId,
    });
    if (select && slug !== operator && !userChose) {
      operator = slug;
      select.value = slug;
    }
    if (slug === operator) draw();
  }

  // Recorded in the same transaction as its case, after it: the case is already here.
  function markIncumbent(p) {
    const attempt = (data.attempts[p.operator] || []).find((a) => a.case === p.case_id);
    if (!attempt) return;
    attempt.incumbent = true;
    if (p.operator === operator) draw();
  }

  function follow(event) {
    if (event.kind === "case_recorded") addCase(event.payload, event.case);
    else if (event.kind === "incumbent_replaced") markIncumbent(event.payload);
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
  document.body.addEventListener("kope:event", (e) => follow(e.detail));
  draw();
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", draw);
})();
