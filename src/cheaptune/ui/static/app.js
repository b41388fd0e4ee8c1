// cheaptune ui: polls the JSON endpoints and redraws; every value goes in as text, never as HTML.
"use strict";
const POLL_MS = 2000;
const LIVE = new Set(["running", "launched"]);

async function getJSON(url) {
  const res = await fetch(url, {cache: "no-store", credentials: "same-origin"});
  return {ok: res.ok, status: res.status, body: await res.json()};
}

function cell(tr, text) {
  const td = document.createElement("td");
  td.textContent = text;
  tr.appendChild(td);
  return td;
}

function plot(id, traces, layout) {
  const el = document.getElementById(id);
  if (!el) return;
  if (typeof Plotly === "undefined") { el.textContent = "charts need plotly: pip install 'cheaptune[ui]'"; return; }
  Plotly.react(el, traces, Object.assign({margin: {t: 40, r: 20}}, layout), {displaylogo: false, displayModeBar: false, responsive: true});
}

async function pollRuns() {
  const {body} = await getJSON("/api/runs" + location.search);
  const tbody = document.getElementById("runs-body");
  const checked = new Set([...tbody.querySelectorAll("input:checked")].map((b) => b.value));
  const msg = document.getElementById("message");
  msg.hidden = !body.message;
  msg.textContent = body.message || "";
  const rows = body.rows.map((row) => {
    const tr = document.createElement("tr");
    tr.dataset.id = row.id;
    tr.className = "status-" + row.status;
    const box = document.createElement("input");
    Object.assign(box, {type: "checkbox", name: "ids", value: row.id, checked: checked.has(row.id)});
    cell(tr, "").appendChild(box);
    const link = document.createElement("a");
    link.href = "/runs/" + encodeURIComponent(row.id);
    link.textContent = row.cells[0];
    const first = cell(tr, "");
    first.appendChild(link);
    if (row.problem) { const s = document.createElement("span"); s.className = "problem"; s.textContent = " (" + row.problem + ")"; first.appendChild(s); }
    row.cells.slice(1).forEach((c) => cell(tr, c));
    return tr;
  });
  tbody.replaceChildren(...rows);
  document.getElementById("empty").hidden = rows.length > 0;
}

function runCharts(run) {
  const s = run.series;
  const loss = s.filter((p) => p.loss !== null), evals = s.filter((p) => p.eval_loss !== null);
  plot("loss-chart", [
    {x: loss.map((p) => p.step), y: loss.map((p) => p.loss), name: "train loss", mode: "lines+markers"},
    {x: evals.map((p) => p.step), y: evals.map((p) => p.eval_loss), name: "eval loss", mode: "lines+markers"},
  ], {title: {text: "Loss"}, xaxis: {title: {text: "step"}}});
  const cost = s.filter((p) => p.cost_usd !== null && p.elapsed_s !== null);
  const hours = cost.map((p) => p.elapsed_s / 3600);
  const traces = [{x: hours, y: cost.map((p) => p.cost_usd), name: "$ spent", mode: "lines+markers"}];
  const span = hours.length ? [0, Math.max(...hours)] : [0, 1];
  if (run.budget_usd !== null) traces.push({x: span, y: [run.budget_usd, run.budget_usd], name: "budget", mode: "lines", line: {dash: "dash", color: "red"}});
  if (run.cost_predicted_usd !== null) traces.push({x: span, y: [run.cost_predicted_usd, run.cost_predicted_usd], name: "predicted", mode: "lines", line: {dash: "dot", color: "gray"}});
  plot("cost-chart", traces, {title: {text: "$ over time"}, xaxis: {title: {text: "hours"}}, yaxis: {title: {text: "USD"}}});
}

async function pollRun() {
  const id = document.getElementById("run-title").dataset.id;
  const {ok, body} = await getJSON("/api/runs/" + encodeURIComponent(id));
  if (!ok) return false;
  const status = document.getElementById("status");
  status.textContent = body.status;
  status.className = "status-" + body.status;
  body.money.forEach(([label, value]) => { const el = document.querySelector(`[data-money="${label}"]`); if (el) el.textContent = value; });
  body.facts.forEach(([label, value]) => { const el = document.querySelector(`[data-fact="${label}"]`); if (el) el.textContent = value; });
  runCharts(body);
  return LIVE.has(body.status);
}

async function drawCompare() {
  const {body} = await getJSON("/api/compare" + location.search);
  const pts = body.runs.filter((r) => r.cost_usd !== null && r.eval_loss !== null);
  plot("compare-chart", [{x: pts.map((r) => r.cost_usd), y: pts.map((r) => r.eval_loss), text: pts.map((r) => r.name || r.id),
    mode: "markers+text", textposition: "top center", marker: {size: 10, color: pts.map((r) => (r.pareto ? "green" : "gray"))}}],
  {title: {text: "$ against eval loss (green: not beaten on both)"}, xaxis: {title: {text: "USD"}}, yaxis: {title: {text: "eval loss"}}});
}

async function drawPlan() {
  const id = document.getElementById("plan-title").dataset.id;
  const {ok, body} = await getJSON("/api/plans/" + encodeURIComponent(id));
  if (!ok || !body.bars) return;
  const labels = body.bars.map((b) => b.label);
  const part = (key, name) => ({type: "bar", name, x: labels, y: body.bars.map((b) => b[key] ?? null)});
  plot("plan-chart", [part("compute", "compute"), part("storage_egress", "storage + egress"), part("spot_loss", "spot loss"),
    part("unsplit", "total (not split in a saved plan)")], {barmode: "stack", title: {text: "$ per option"}, yaxis: {title: {text: "USD"}}});
}

function every(fn) {
  const tick = async () => { let again = true; try { again = (await fn()) !== false; } catch (e) { /* next tick retries */ } if (again) setTimeout(tick, POLL_MS); };
  tick();
}

const page = document.body.dataset.page;
if (page === "runs") every(pollRuns);
if (page === "run") every(pollRun);
if (page === "compare") drawCompare();
if (page === "plan") drawPlan();
