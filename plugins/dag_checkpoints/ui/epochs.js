// The Epochs page: reads the plugin's REST API with the Airflow session (same origin),
// draws the history charts as plain SVG (no CDN, works offline) and offers the actions.
"use strict";
const dagId = document.body.dataset.dagId;
const api = `/ckpt/api/dags/${encodeURIComponent(dagId)}`;
let epochs = [];
let selected = null;

function say(text, isError = false) {
  const m = document.getElementById("message");
  m.textContent = text;
  m.className = isError ? "error" : "";
}

async function call(url, options = {}) {
  const r = await fetch(url, {credentials: "same-origin",
    headers: {"Content-Type": "application/json"}, ...options});
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail || body);
    throw new Error(`${r.status}: ${detail}`);
  }
  return body;
}

const secs = (ms) => (ms == null ? "–" : (ms / 1000).toFixed(1) + " s");
function size(bytes) {
  if (bytes == null) return "–";
  const units = ["B", "KiB", "MiB", "GiB"];
  let v = bytes, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}
function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
}

function chart(id, values) {
  const svg = document.getElementById(id);
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const w = 420, h = 110, pad = 4;
  const max = Math.max(1e-9, ...values.map((v) => v.y));
  const bw = Math.max(2, (w - pad * 2) / Math.max(values.length, 1) - 2);
  values.forEach((v, i) => {
    const r = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    const bh = Math.max(1, (h - pad * 2) * v.y / max);
    r.setAttribute("x", pad + i * (bw + 2));
    r.setAttribute("y", h - pad - bh);
    r.setAttribute("width", bw);
    r.setAttribute("height", bh);
    r.setAttribute("class", v.status);
    const t = document.createElementNS("http://www.w3.org/2000/svg", "title");
    t.textContent = `epoch ${v.id}: ${v.label}`;
    r.appendChild(t);
    svg.appendChild(r);
  });
  svg.dataset.points = String(values.length);
}

async function load() {
  const [list, sps, lin] = await Promise.all([
    call(`${api}/epochs?limit=200`), call(`${api}/savepoints`), call(`${api}/lineages`)]);
  epochs = list.epochs;
  document.getElementById("latest").textContent = list.latest_completed ?? "none";
  document.getElementById("savepoints").textContent = sps.savepoints.map((s) => s.name).join(", ") || "none";
  const pub = lin.published;
  document.getElementById("published").textContent = pub ? `epoch ${pub.epoch_id} (${pub.lineage})` : "nothing yet";
  const body = document.querySelector("#epochs tbody");
  body.replaceChildren();
  for (const e of epochs) {
    const tr = document.createElement("tr");
    tr.dataset.epochId = e.epoch_id;
    cell(tr, e.epoch_id);
    cell(tr, e.run_id);
    cell(tr, e.status, `status-${e.status}`);
    cell(tr, secs(e.duration_ms));
    cell(tr, size(e.state_bytes));
    cell(tr, `${e.tasks_acked}/${e.tasks_total}`);
    cell(tr, e.lineage);
    cell(tr, e.parent_epoch_id ?? "–");
    tr.addEventListener("click", () => showEpoch(e.epoch_id));
    body.appendChild(tr);
  }
  const history = [...epochs].reverse();
  chart("chart-duration", history.filter((e) => e.duration_ms != null).map((e) => (
    {id: e.epoch_id, y: e.duration_ms / 1000, status: e.status, label: secs(e.duration_ms)})));
  chart("chart-size", history.map((e) => (
    {id: e.epoch_id, y: e.state_bytes / 1024, status: e.status, label: size(e.state_bytes)})));
  if (selected != null) await showEpoch(selected);
}

async function showEpoch(id) {
  selected = id;
  const e = await call(`${api}/epochs/${id}`);
  document.querySelectorAll("#epochs tbody tr").forEach((tr) =>
    tr.classList.toggle("selected", Number(tr.dataset.epochId) === id));
  document.getElementById("detail").hidden = false;
  document.getElementById("detail-id").textContent = id;
  document.getElementById("detail-status").textContent = `${e.status} · run ${e.run_id} · lineage ${e.lineage}`;
  document.getElementById("detail-reason").textContent = e.reason
    ? `${e.reason}: ${e.detail || ""}${e.alert ? " (alert sent)" : ""}` : "";
  const body = document.querySelector("#tasks tbody");
  body.replaceChildren();
  for (const t of e.tasks) {
    const tr = document.createElement("tr");
    tr.dataset.task = t.task_id;
    cell(tr, t.task_id);
    cell(tr, t.status, `status-${t.status === "acked" ? "completed" : t.status === "pending" ? "pending" : "aborted"}`);
    cell(tr, t.acked_attempt ?? t.attempts);
    cell(tr, secs(t.ack_delay_ms));
    cell(tr, t.sync_ms == null ? "–" : `${secs(t.sync_ms)} / ${secs(t.async_ms)}`);
    cell(tr, size(t.state_bytes));
    cell(tr, size(t.bytes_written));
    cell(tr, Object.entries(t.row_counts || {}).map(([k, v]) => `${k}=${v}`).join(" "));
    body.appendChild(tr);
  }
  const form = document.getElementById("backfill-form");
  form.hidden = e.status !== "completed";
}

document.getElementById("dag-id").textContent = dagId;
document.getElementById("refresh").addEventListener("click", () => load().catch((e) => say(e.message, true)));
document.getElementById("trigger-run").addEventListener("click", async () => {
  try {
    const r = await call(`/api/v2/dags/${encodeURIComponent(dagId)}/dagRuns`, {
      method: "POST", body: JSON.stringify({logical_date: null})});
    say(`triggered run ${r.dag_run_id}`);
  } catch (e) { say(`trigger failed: ${e.message}`, true); }
});
document.getElementById("take-savepoint").addEventListener("click", async () => {
  const name = `sp-${new Date().toISOString().replace(/[^0-9]/g, "").slice(0, 14)}`;
  try {
    const body = {name};
    if (selected != null) body.epoch_id = selected;
    const r = await call(`${api}/savepoints`, {method: "POST", body: JSON.stringify(body)});
    say(`savepoint ${r.name} of epoch ${r.epoch_id} taken`);
    await load();
  } catch (e) { say(`savepoint failed: ${e.message}`, true); }
});
document.getElementById("backfill-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = new FormData(ev.target);
  try {
    const r = await call(`${api}/backfills`, {method: "POST", body: JSON.stringify(
      {from_epoch: selected, start: f.get("start"), end: f.get("end")})});
    say(`backfill ${r.backfill_id} started: lineage ${r.lineage}, ${r.runs} run(s), from epoch ${selected}`);
  } catch (e) { say(`backfill failed: ${e.message}`, true); }
});
load().catch((e) => say(`cannot load epochs: ${e.message}`, true));
setInterval(() => load().catch(() => {}), 15000);
