// The gotrain dashboard: polls /api/state once a second and redraws the
// curves as SVG polylines. No libraries: the launcher serves this file
// from its binary and the page must work offline.
"use strict";

const colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
const NS = "http://www.w3.org/2000/svg";
let lastVersion = -1;

function el(name, attrs, text) {
  const e = document.createElementNS(NS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

function fmt(v) {
  if (v === null) return "NaN"; // JSON's null: a number that was not finite
  if (!isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
  if (a >= 100) return v.toFixed(0);
  if (a >= 1) return v.toFixed(2);
  return v.toPrecision(2);
}

// plot draws lines (each {pts: [[x, y]...], color}) into the svg with
// id, with axes and min/max labels, and records how many points it drew.
// robust scales y to the 98th percentile, so that one slow first step
// does not flatten everything else (higher points are drawn at the top).
function plot(id, lines, robust) {
  const svg = document.getElementById(id);
  const w = svg.clientWidth || 420, h = svg.clientHeight || 220;
  const L = 48, R = 8, T = 8, B = 20;
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  let xs = [], ys = [], n = 0;
  for (const l of lines) for (const p of l.pts) { if (isFinite(p[1])) { xs.push(p[0]); ys.push(p[1]); } }
  svg.appendChild(el("line", {class: "axis", x1: L, y1: h - B, x2: w - R, y2: h - B}));
  svg.appendChild(el("line", {class: "axis", x1: L, y1: T, x2: L, y2: h - B}));
  if (xs.length === 0) { svg.dataset.points = "0"; return; }
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(0, ...ys), y1 = Math.max(...ys);
  if (robust && ys.length > 20) {
    const sorted = ys.slice().sort((a, b) => a - b);
    y1 = Math.min(y1, 1.2 * sorted[Math.floor(0.98 * (sorted.length - 1))]);
  }
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) y1 = y0 + 1;
  const sx = x => L + (x - x0) / (x1 - x0) * (w - L - R);
  const sy = y => h - B - (Math.min(y, y1) - y0) / (y1 - y0) * (h - T - B);
  for (const l of lines) {
    const d = l.pts.filter(p => isFinite(p[1])).map(p => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ");
    if (!d) continue;
    n += l.pts.length;
    svg.appendChild(el("polyline", {points: d, fill: "none", stroke: l.color, "stroke-width": 1.5, class: "curve " + (l.cls || ""), "data-rank": l.rank}));
  }
  svg.appendChild(el("text", {x: 2, y: T + 10}, fmt(y1)));
  svg.appendChild(el("text", {x: 2, y: h - B}, fmt(y0)));
  svg.appendChild(el("text", {x: L, y: h - 4}, "step " + Math.round(x0)));
  svg.appendChild(el("text", {x: w - R - 60, y: h - 4}, "step " + Math.round(x1)));
  svg.dataset.points = String(n);
}

// throughput sums the ranks' samples/s at each step all ranks reported.
function throughput(series) {
  const by = new Map(), count = new Map(), n = Object.keys(series).length;
  for (const r in series) for (const p of series[r]) {
    by.set(p[0], (by.get(p[0]) || 0) + p[3]);
    count.set(p[0], (count.get(p[0]) || 0) + 1);
  }
  return [...by.entries()].filter(e => count.get(e[0]) === n).sort((a, b) => a[0] - b[0]);
}

// recent is the mean of field i over a rank's last 20 points.
function recent(pts, i) {
  const tail = (pts || []).slice(-20);
  return tail.length ? tail.reduce((s, p) => s + p[i], 0) / tail.length : NaN;
}

// clock formats seconds as m:ss or h:mm:ss.
function clock(sec) {
  const s = Math.round(sec), pad = n => String(n).padStart(2, "0");
  if (s >= 3600) return Math.floor(s / 3600) + ":" + pad(Math.floor(s / 60) % 60) + ":" + pad(s % 60);
  return Math.floor(s / 60) + ":" + pad(s % 60);
}

// num formats a loss or a metric as the console does.
function num(v) {
  if (v === null || !isFinite(v)) return String(v === null ? NaN : v); // JSON's null is a NaN
  const a = Math.abs(v);
  return a !== 0 && a < 0.01 ? v.toPrecision(3) : v.toFixed(4);
}

// isLoss says which evaluation metrics are drawn with the losses.
const isLoss = name => /loss$/.test(name);

// renderProgress shows the run's step of its total, its epoch or
// evaluation interval, the ETA of the whole run, the rate in the job's
// unit, and the last evaluation's figures.
function renderProgress(st) {
  const p = st.progress || {};
  const unit = p.unit || "samples";
  for (const e of document.querySelectorAll(".unit")) e.textContent = unit;
  document.getElementById("step").textContent = p.steps > 0 ? "step " + p.step + "/" + p.steps : "step " + (p.step || "–");
  document.getElementById("period").textContent = p.epoch ? p.label + " " + p.epoch + "/" + p.epochs : "";
  document.getElementById("eta").textContent = st.ended ? "ended" : (p.eta_s > 0 ? "ETA " + clock(p.eta_s) : "ETA –");
  document.getElementById("rate").textContent = p.rate > 0 ? fmt(p.rate) + " " + unit + "/s" : "";
  const evals = p.evals || [];
  const ev = document.getElementById("evaluation");
  if (!evals.length) { ev.textContent = "no evaluation yet"; return; }
  const last = evals[evals.length - 1];
  const parts = [p.label + " " + last.epoch + (last.step ? " (step " + last.step + ")" : "")];
  if (last.train_loss !== undefined) parts.push("train_loss " + num(last.train_loss));
  for (const k of last.names || Object.keys(last.metrics || {}).sort()) parts.push(k + " " + num(last.metrics[k]));
  ev.textContent = parts.join(" · ");
}

// renderReplicas shows a fault-tolerant job's replicas (those in the
// latest quorum, of those it started with) and its last changes, newest
// first; nothing until one changed.
function renderReplicas(st) {
  const r = st.replicas;
  const div = document.getElementById("replicas");
  div.hidden = !r;
  if (!r) return;
  document.getElementById("replica-count").textContent = "replicas " + r.live + "/" + r.of;
  const ul = document.getElementById("replica-changes");
  ul.innerHTML = "";
  for (const c of (r.changes || []).slice(-10).reverse()) {
    const li = document.createElement("li");
    li.className = "replica-" + c.change;
    li.textContent = "step " + c.step + ": " + c.replica + " " + c.change + (c.source ? " from " + c.source : "") + " (" + c.replicas + "/" + c.of + ")";
    ul.appendChild(li);
  }
}

function render(st) {
  document.getElementById("run").textContent = "run " + (st.run_id || "–") + (st.node ? " · node " + st.node : "");
  const s = document.getElementById("state");
  s.textContent = "state " + st.state + (st.ended ? " (its final state, served until the launcher exits)" : "");
  s.className = "state-" + st.state;
  renderProgress(st);
  renderReplicas(st);
  const workers = st.workers || [];
  const hosts = [...new Set(workers.map(w => w.host).filter(h => h))];
  document.getElementById("ranks").textContent = "ranks " + workers.length + "/" + st.ranks + " on " + (hosts.join(", ") || "–");
  document.getElementById("restarts").textContent = "restarts " + Math.max(0, ...workers.map(w => w.restart));
  document.getElementById("uptime").textContent = (st.ended ? "ran " : "up ") + clock(st.uptime_s);

  const ranks = Object.keys(st.series).map(Number).sort((a, b) => a - b);
  const col = r => colors[r % colors.length];
  const lossLines = ranks.map(r => ({rank: r, color: col(r), pts: st.series[r].map(p => [p[0], p[2] === null ? NaN : p[2]])}));
  const evals = (st.progress && st.progress.evals) || [];
  const evalNames = [...new Set(evals.flatMap(e => Object.keys(e.metrics || {})).filter(isLoss))].sort();
  for (const [i, name] of evalNames.entries()) {
    lossLines.push({rank: name, color: i ? "#555" : "#000", cls: "eval",
      pts: evals.filter(e => e.metrics && name in e.metrics && e.step > 0).map(e => [e.step, e.metrics[name] === null ? NaN : e.metrics[name]])});
  }
  plot("loss", lossLines);
  const lead = ranks.length ? ranks[0] : undefined;
  plot("lr", lead === undefined ? [] : [{rank: lead, color: "#333", pts: st.series[lead].map(p => [p[0], p[6]])}]);
  plot("throughput", [{rank: "all", color: "#333", pts: throughput(st.series)}]);
  plot("steptime", ranks.map(r => ({rank: r, color: col(r), pts: st.series[r].map(p => [p[0], p[4]])})), true);
  plot("exposed", ranks.map(r => ({rank: r, color: col(r), pts: st.series[r].map(p => [p[0], p[4] > 0 ? 100 * p[5] / p[4] : 0])})));
  const legend = document.getElementById("legend");
  legend.innerHTML = "";
  for (const r of ranks) {
    const sp = document.createElement("span");
    sp.style.color = col(r);
    sp.textContent = "■ rank " + r;
    legend.appendChild(sp);
  }

  // A straggler: a rank whose recent step time is 25% over the typical
  // rank's (the lower median, so that one of two ranks can stand out).
  const stepMS = r => recent(st.series[r], 4);
  const times = workers.map(w => stepMS(w.rank)).filter(isFinite).sort((a, b) => a - b);
  const median = times.length ? times[Math.floor((times.length - 1) / 2)] : 0;
  const tbody = document.querySelector("#workers tbody");
  tbody.innerHTML = "";
  for (const w of workers) {
    const tr = document.createElement("tr");
    const l = w.last || {};
    const ms = stepMS(w.rank), exp = recent(st.series[w.rank], 5);
    const cells = [w.rank, w.host || "–", w.pid || "–", l.step ?? "–", fmt(ms), ms > 0 ? fmt(100 * exp / ms) : "–",
      fmt(recent(st.series[w.rank], 3)), fmt(l.loss), w.restart];
    for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.appendChild(td); }
    if (ms && median && ms > 1.25 * median) tr.className = "slow";
    tbody.appendChild(tr);
  }
}

async function poll() {
  try {
    const res = await fetch("api/state", {cache: "no-store"});
    const st = await res.json();
    if (st.version !== lastVersion) {
      lastVersion = st.version;
      render(st);
      document.body.dataset.version = String(st.version);
    }
  } catch (e) {
    // The last state drawn stays on the page.
    document.getElementById("state").textContent = "state unreachable (the launcher has exited?)";
  }
  setTimeout(poll, 1000);
}
poll();
