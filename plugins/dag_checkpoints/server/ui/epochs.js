// The Epochs page: reads the plugin's REST API with the Airflow session (same origin),
// draws the history charts as plain SVG (no CDN, works offline) and offers the actions.
"use strict";
const dagId = document.body.dataset.dagId;
const api = `/ckpt/api/dags/${encodeURIComponent(dagId)}`;
let epochs = [];
let selected = null;
// One page of the table (the charts and the lineage timeline show the same rows).
const PAGE = 50;
let offset = 0;

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
  td.title = String(text);  // whole on hover where the column cuts it
  tr.appendChild(td);
  return td;
}

// The Airflow page of a task instance (its log), opened in the top window.
function taskLogLink(td, runId, taskId, tryNumber) {
  if (!runId || !taskId) return;
  const a = document.createElement("a");
  a.href = `/dags/${encodeURIComponent(dagId)}/runs/${encodeURIComponent(runId)}` +
    `/tasks/${encodeURIComponent(taskId)}` + (tryNumber ? `?try_number=${tryNumber}` : "");
  a.target = "_top";
  a.textContent = td.textContent || "log";
  a.className = "log-link";
  td.replaceChildren(a);
}

// Follow Airflow's light/dark theme: the page is an iframe of the same origin, so the
// Airflow document's class ("dark") is readable; else its stored choice, else the OS's.
function airflowTheme() {
  try {
    const root = window.parent.document.documentElement;
    if (root.classList.contains("dark") || root.style.colorScheme === "dark") return "dark";
    if (root.classList.contains("light") || root.style.colorScheme === "light") return "light";
  } catch (e) { /* not embedded, or another origin */ }
  const stored = window.localStorage.getItem("theme");
  if (stored === "dark" || stored === "light") return stored;
  return window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}
function applyTheme() { document.documentElement.dataset.theme = airflowTheme(); }
applyTheme();
try {
  new MutationObserver(applyTheme).observe(window.parent.document.documentElement,
    {attributes: true, attributeFilter: ["class", "style"]});
} catch (e) { /* not embedded */ }
window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", applyTheme);

// The next data day: the logical date after the newest epoch's, as the schedule would.
function nextLogicalDate() {
  const dates = epochs.map((e) => e.logical_date).filter(Boolean).map((d) => d.slice(0, 10)).sort();
  if (!dates.length) return new Date().toISOString().slice(0, 10);
  const d = new Date(`${dates[dates.length - 1]}T00:00:00Z`);
  d.setUTCDate(d.getUTCDate() + 1);
  return d.toISOString().slice(0, 10);
}

const SVG = "http://www.w3.org/2000/svg";
function svgEl(parent, name, attrs, text) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text != null) el.textContent = text;
  parent.appendChild(el);
  return el;
}
function hover(el, text) { svgEl(el, "title", {}, text); }

// A bar per epoch, oldest left: y axis with its scale, epoch ids on the x axis, failed
// epochs as red bars (at full height when they have no value), details on hover.
function chart(id, values, unit) {
  const svg = document.getElementById(id);
  svg.replaceChildren();
  // The unit sits right of the axis's top, clear of the ticks ("KiB" never runs into "497").
  const w = 420, h = 136, left = 44, bottom = 18, top = 16;
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  const known = values.filter((v) => v.y != null).map((v) => v.y);
  const max = Math.max(0, ...known);
  const plotH = h - bottom - top, step = (w - left - 4) / Math.max(values.length, 1);
  const bw = Math.max(2, step - 2);
  svgEl(svg, "line", {x1: left, y1: top, x2: left, y2: h - bottom, class: "axis"});
  svgEl(svg, "line", {x1: left, y1: h - bottom, x2: w, y2: h - bottom, class: "axis"});
  // Ticks only where they say something: 0 alone on an empty or all-zero chart.
  for (const f of max > 0 ? [0, 0.5, 1] : [0]) {
    const y = h - bottom - plotH * f;
    const v = max * f;
    svgEl(svg, "text", {x: left - 4, y: y + 3, class: "tick", "text-anchor": "end"},
      v === 0 ? "0" : v.toFixed(v >= 10 ? 0 : 1));
  }
  svgEl(svg, "text", {x: left + 4, y: top - 4, class: "tick unit"}, unit);
  const labelEvery = Math.ceil(values.length / 8);
  values.forEach((v, i) => {
    const failed = v.status !== "completed" && v.status !== "pending";
    // A failed epoch without a value is a short red mark at the axis, not a full bar
    // that reads as the largest value of the chart.
    const bh = v.y == null || max === 0 ? (failed ? 4 : 0) : Math.max(1, plotH * v.y / max);
    const x = left + 2 + i * step;
    const r = svgEl(svg, "rect", {x, y: h - bottom - bh, width: bw, height: bh,
      class: `${v.status}${v.y == null ? " novalue" : ""}`});
    r.dataset.epochId = v.id;
    hover(r, `epoch ${v.id} · ${v.status}${v.reason ? ` (${v.reason})` : ""} · ${v.label}`);
    if (i % labelEvery === 0) {
      svgEl(svg, "text", {x: x + bw / 2, y: h - 5, class: "tick", "text-anchor": "middle"}, v.id);
    }
  });
  svg.dataset.points = String(values.length);
}

// Flink's checkpoint details: one row per task, a bar from the acknowledged attempt's
// start to its acknowledgement (restore part darker), on a time axis from the barrier.
function timeline(tasks) {
  const svg = document.getElementById("timeline");
  svg.replaceChildren();
  // The right margin leaves room for the last tick's label ("12.3s"), centred on the end.
  const rowH = 20, left = 130, w = 860, top = 6, bottom = 18, right = 24;
  const h = top + bottom + rowH * Math.max(tasks.length, 1);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.style.height = `${h}px`;
  // Airflow's failed tries of each task (failed, up for retry) share its row, drawn before
  // the acknowledged attempt's bar.
  const tryEnds = tasks.flatMap((t) => (t.failed_tries || []).map((x) => (x.ended_delay_ms ?? 0) / 1000));
  const end = Math.max(1, ...tasks.map((t) => (t.ack_delay_ms ?? 0) / 1000), ...tryEnds);
  const x = (s) => left + (w - left - right) * s / end;
  svgEl(svg, "line", {x1: left, y1: h - bottom, x2: w - right, y2: h - bottom, class: "axis"});
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    svgEl(svg, "text", {x: x(end * f), y: h - 5, class: "tick", "text-anchor": "middle"},
      `${(end * f).toFixed(1)}s`);
  }
  tasks.forEach((t, i) => {
    const y = top + i * rowH;
    svgEl(svg, "text", {x: left - 6, y: y + 13, class: "tick", "text-anchor": "end"}, t.task_id);
    for (const x0 of t.failed_tries || []) {
      if (x0.started_delay_ms == null) continue;
      const from = Math.max(0, x0.started_delay_ms / 1000);
      const to = x0.ended_delay_ms == null ? end : Math.max(from, x0.ended_delay_ms / 1000);
      const bar = svgEl(svg, "rect", {x: x(from), y: y + 5, height: rowH - 10,
        width: Math.max(2, x(to) - x(from)), class: "failed-try"});
      bar.dataset.task = t.task_id;
      bar.dataset.attempt = String(x0.attempt);
      hover(bar, `${t.task_id} · attempt ${x0.attempt} · ${x0.state || "unknown"} · ` +
        `started ${from.toFixed(1)}s · ended ${x0.ended_delay_ms == null ? "–" : to.toFixed(1) + "s"}`);
    }
    if (t.ack_delay_ms == null) {
      svgEl(svg, "text", {x: left + 4, y: y + 13, class: "tick status-aborted"},
        `${t.status} (attempt ${t.attempts || "–"})`);
      return;
    }
    const ack = t.ack_delay_ms / 1000;
    const start = t.started_delay_ms == null ? ack : Math.max(0, t.started_delay_ms / 1000);
    const bar = svgEl(svg, "rect", {x: x(start), y: y + 3, height: rowH - 6,
      width: Math.max(2, x(ack) - x(start)), class: "completed"});
    bar.dataset.task = t.task_id;
    if (t.restore_ms) {
      svgEl(svg, "rect", {x: x(start), y: y + 3, height: rowH - 6, class: "restore",
        width: Math.max(1, x(start + t.restore_ms / 1000) - x(start))});
    }
    hover(bar, `${t.task_id} · attempt ${t.acked_attempt} · started ${start.toFixed(1)}s · ` +
      `acked ${ack.toFixed(1)}s · restore ${secs(t.restore_ms)} · run ${secs(t.run_ms)} · ` +
      `state ${size(t.state_bytes)}`);
  });
  svg.dataset.bars = String(tasks.filter((t) => t.ack_delay_ms != null).length);
  svg.dataset.failedTries = String(svg.querySelectorAll("rect.failed-try").length);
}

// Lineages as branches on one axis of epoch ids: a row per lineage (main first, then each
// backfill as it was requested), a dot per epoch, a curve from a backfill's origin (an
// epoch, or a savepoint's epoch) to its first epoch and, once promoted, a dashed one from
// its last epoch back to the main line, which continues from there.
function lineageTimeline(list, lin, sps) {
  const svg = document.getElementById("lineages");
  svg.replaceChildren();
  const names = ["main", ...lin.lineages.map((l) => l.lineage)];
  for (const e of list) if (!names.includes(e.lineage)) names.push(e.lineage);
  const rowH = 26, left = 200, w = 860, top = 8, bottom = 20;
  const h = top + bottom + rowH * names.length;
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.style.height = `${h}px`;
  const ids = list.map((e) => e.epoch_id);
  const lo = Math.min(...ids, 1), hi = Math.max(...ids, lo + 1);
  const x = (id) => left + 10 + (w - left - 30) * (id - lo) / (hi - lo);
  const y = (name) => top + rowH * names.indexOf(name) + rowH / 2;
  svgEl(svg, "line", {x1: left, y1: h - bottom, x2: w - 10, y2: h - bottom, class: "axis"});
  const every = Math.ceil((hi - lo + 1) / 12);
  for (let id = lo; id <= hi; id += every) {
    svgEl(svg, "text", {x: x(id), y: h - 5, class: "tick", "text-anchor": "middle"}, id);
  }
  const byId = Object.fromEntries(list.map((e) => [e.epoch_id, e]));
  const spEpoch = Object.fromEntries(sps.savepoints.map((sp) => [sp.name, sp.epoch_id]));
  const origins = Object.fromEntries(lin.lineages.map((l) => [l.lineage, l]));
  let branches = 0, promotions = 0;
  for (const name of names) {
    const mine = list.filter((e) => e.lineage === name).sort((a, b) => a.epoch_id - b.epoch_id);
    const o = origins[name];
    const label = svgEl(svg, "text", {x: left - 8, y: y(name) + 4, class: "tick", "text-anchor": "end"}, name);
    if (o) {
      hover(label, `${name}: data days ${o.start ? dataDay(o.start) : "?"}..${o.end ? dataDay(o.end) : "?"} from ` +
        `${o.from_savepoint ? "savepoint " + o.from_savepoint : "epoch " + o.from_epoch}` +
        `${o.requested_by ? ", requested by " + o.requested_by : ""}`);
    }
    if (mine.length > 1) {
      svgEl(svg, "line", {x1: x(mine[0].epoch_id), y1: y(name), x2: x(mine[mine.length - 1].epoch_id),
        y2: y(name), class: "chain"});
    }
    const originId = o ? (o.from_epoch ?? spEpoch[o.from_savepoint]) : null;
    if (o && mine.length && originId != null) {
      const from = byId[originId]?.lineage ?? "main";
      const x0 = x(originId), y0 = y(from), x1 = x(mine[0].epoch_id), y1 = y(name);
      const path = svgEl(svg, "path", {class: "branch",
        d: `M${x0},${y0} C${(x0 + x1) / 2},${y0} ${(x0 + x1) / 2},${y1} ${x1},${y1}`});
      hover(path, `${name} starts from ${o.from_savepoint ? `savepoint ${o.from_savepoint} (epoch ${originId})` : `epoch ${originId}`}`);
      branches++;
    }
    const p = o?.promotion;
    if (p && p.promoted) {
      const next = list.filter((e) => e.lineage === "main" && e.parent_epoch_id === p.epoch_id)
        .sort((a, b) => a.epoch_id - b.epoch_id)[0];
      const x0 = x(p.epoch_id), y0 = y(name), x1 = next ? x(next.epoch_id) : x0 + 14, y1 = y("main");
      const path = svgEl(svg, "path", {class: "promotion",
        d: `M${x0},${y0} C${(x0 + x1) / 2},${y0} ${(x0 + x1) / 2},${y1} ${x1},${y1}`});
      hover(path, `promoted at epoch ${p.epoch_id}: the main line continues from it` +
        `${p.superseded != null ? `; main's epoch ${p.superseded} superseded (kept)` : ""}` +
        `${p.input_until ? `; input through ${dataDay(p.input_until)}` : ""}`);
      promotions++;
    }
    for (const e of mine) {
      const dot = svgEl(svg, "circle", {cx: x(e.epoch_id), cy: y(name), r: 5, class: e.status});
      dot.dataset.epochId = e.epoch_id;
      hover(dot, `epoch ${e.epoch_id} · ${e.status}${e.reason ? ` (${e.reason})` : ""} · ${name}` +
        `${e.logical_date ? ` · data day ${dataDay(e.logical_date)}` : ""}` +
        `${e.parent_epoch_id != null ? ` · restored from ${e.parent_epoch_id}` : ""}`);
      dot.addEventListener("click", () => showEpoch(e.epoch_id));
    }
  }
  Object.assign(svg.dataset, {rows: String(names.length), branches: String(branches),
    promotions: String(promotions), dots: String(list.length)});
}
// The data day a logical date's run reads: the day before it.
function dataDay(logical) {
  const d = new Date(`${String(logical).slice(0, 10)}T00:00:00Z`);
  d.setUTCDate(d.getUTCDate() - 1);
  return d.toISOString().slice(0, 10);
}

// What tells runs apart in a narrow cell: the kind of run as an icon (Airflow's run
// types: the prefix of its id) and its logical date, else the time in its id; the whole
// run id on hover and in the epoch's detail.
const RUN_KINDS = {manual: ["\u25B6", "manual"], scheduled: ["\u23F1", "scheduled"],
  backfill: ["\u21BA", "backfill"], asset_triggered: ["\u25C6", "asset-triggered"],
  dataset_triggered: ["\u25C6", "asset-triggered"]};
function runLabel(e) {
  const id = String(e.run_id || "");
  const [prefix, rest] = id.includes("__") ? id.split("__", 2) : ["", id];
  const [icon, kind] = RUN_KINDS[prefix] || ["\u2022", "run"];
  const when = e.logical_date ? String(e.logical_date).slice(0, 10)
    : (rest || id).replace("T", " ").slice(0, 19);
  return {text: `${icon} ${when}`, title: `${kind} run ${id}`};
}

// One row of the epochs table, from a list row or an epoch's detail (same fields).
function epochRow(e) {
  const tr = document.createElement("tr");
  tr.dataset.epochId = e.epoch_id;
  cell(tr, e.epoch_id);
  const run = runLabel(e);
  cell(tr, run.text, "long run").title = run.title;
  cell(tr, e.status, `status-${e.status}`);
  cell(tr, secs(e.duration_ms));
  cell(tr, size(e.state_bytes));
  cell(tr, `${e.tasks_acked}/${e.tasks_total}`);
  // The highest attempt of any task: a killed and retried epoch is not a clean one.
  const attempts = e.max_attempt ?? Math.max(0, ...(e.tasks || []).map((t) => t.attempts || 0));
  cell(tr, attempts || "–", attempts > 1 ? "attempts retried" : "attempts");
  // The task that failed it: the one that declined, else (a timeout, a lost runner) the
  // tasks that had not acknowledged.
  const failed = e.declined_by || (e.status === "aborted" ? (e.missing_tasks || []).join(", ") : "");
  const failedCell = cell(tr, failed, "long failed-task");
  if (e.declined_by || (e.missing_tasks || []).length === 1) {
    taskLogLink(failedCell, e.run_id, e.declined_by || e.missing_tasks[0]);
  }
  cell(tr, e.reason ? `${e.reason}${e.source === "history" ? " (files deleted)" : ""}` : "");
  cell(tr, e.lineage, "long");
  cell(tr, e.parent_epoch_id ?? "–");
  // "gold_route_stats v12": the table version each table output got from this epoch
  cell(tr, Object.entries(e.tables || {}).map(([t, v]) => `${t} v${v}`).join(", "), "tables");
  tr.addEventListener("click", () => showEpoch(e.epoch_id));
  return tr;
}

function ago(seconds) {
  if (seconds >= 2 * 86400) return `${(seconds / 86400).toFixed(1)} days`;
  if (seconds >= 2 * 3600) return `${(seconds / 3600).toFixed(1)} hours`;
  if (seconds >= 120) return `${Math.round(seconds / 60)} minutes`;
  return `${Math.round(seconds)} s`;
}

async function load() {
  const [list, sps, lin] = await Promise.all([
    call(`${api}/epochs?limit=${PAGE}&offset=${offset}`), call(`${api}/savepoints`), call(`${api}/lineages`)]);
  epochs = list.epochs;
  document.getElementById("page-info").textContent = list.total
    ? `epochs ${offset + 1}-${offset + epochs.length} of ${list.total}, newest first` : "";
  document.getElementById("newer").disabled = offset === 0;
  document.getElementById("older").disabled = offset + epochs.length >= list.total;
  document.getElementById("latest").textContent = list.latest_completed ?? "none";
  const counts = list.counts || {};
  document.getElementById("count-completed").textContent = counts.completed ?? 0;
  document.getElementById("count-failed").textContent = counts.aborted ?? 0;
  const age = list.last_completed_age_seconds;
  document.getElementById("latest-age").textContent = age == null ? "" : `${ago(age)} ago`;
  // A pipeline whose last completed epoch is older than its maximum age: since when, and
  // whether the alert went out (the page is where its on-call person looks first).
  const stale = document.getElementById("stale");
  stale.hidden = !list.stale;
  stale.textContent = list.stale ? `Stale since ${list.stale.since.replace("T", " ").slice(0, 16)} UTC` +
    ` (no epoch completed after ${list.stale.last_epoch_id} within ` +
    `${ago(list.stale.max_epoch_age_seconds)}; ${list.stale.alerted ? "alert sent" : "alert not sent yet"})` : "";
  document.getElementById("savepoints").textContent = sps.savepoints.map((s) => s.name).join(", ") || "none";
  const pub = lin.published;
  document.getElementById("published").textContent = pub ? `epoch ${pub.epoch_id} (${pub.lineage})` : "nothing yet";
  const body = document.querySelector("#epochs tbody");
  body.replaceChildren();
  for (const e of epochs) body.appendChild(epochRow(e));
  const history = [...epochs].reverse();
  chart("chart-duration", history.map((e) => ({id: e.epoch_id, reason: e.reason,
    y: e.duration_ms == null ? null : e.duration_ms / 1000, status: e.status,
    label: secs(e.duration_ms)})), "s");
  const dateInput = document.getElementById("trigger-date");
  if (!dateInput.dataset.touched && offset === 0) dateInput.value = nextLogicalDate();
  chart("chart-size", history.map((e) => ({id: e.epoch_id, reason: e.reason,
    y: e.source === "damaged" || e.state_bytes == null ? null : e.state_bytes / 1024, status: e.status,
    label: size(e.state_bytes)})), "KiB");
  lineageTimeline(epochs, lin, sps);
  const from = document.querySelector("#backfill-form select[name=from_savepoint]");
  const chosen = from.value;
  from.replaceChildren(new Option("this epoch", ""), ...sps.savepoints.map((sp) =>
    new Option(`savepoint ${sp.name} (epoch ${sp.epoch_id})`, sp.name)));
  from.value = chosen;
  if (selected != null) await showEpoch(selected);
}

// What the epoch read: each table input's pinned version, and the range each task
// consumed of it (its handle's metrics.table_inputs); a view task's refresh and why
// (metrics.view); then each task's own metrics.
function reads(e) {
  const parts = Object.entries(e.table_pins || {}).map(([n, p]) => `${n} pinned at v${p.version}`);
  for (const t of e.tasks || []) {
    const m = {...(t.metrics || {})};
    for (const [n, r] of Object.entries(m.table_inputs || {})) {
      parts.push(`${t.task_id} read ${n} (${r.from_version == null ? "start" : "v" + r.from_version}, v${r.to_version}]`);
    }
    delete m.table_inputs;
    if (m.view && typeof m.view === "object") {
      parts.push(`${t.task_id}: ${m.view.refresh} refresh of view ${m.view.output}: ${m.view.reason}`);
    }
    delete m.view;
    const own = Object.entries(m).filter(([, v]) => typeof v !== "object" || v === null);
    if (own.length) parts.push(`${t.task_id}: ${own.map(([k, v]) => `${k}=${v}`).join(" ")}`);
  }
  return parts.join(" · ");
}

async function showEpoch(id) {
  selected = id;
  const e = await call(`${api}/epochs/${id}`);
  // The detail is the newer read: while an epoch runs its row (listed earlier, possibly
  // from the server's cache) is redrawn from it, so the row and the detail agree.
  const listed = document.querySelector(`#epochs tbody tr[data-epoch-id="${id}"]`);
  if (listed) listed.replaceWith(epochRow(e));
  document.querySelectorAll("#epochs tbody tr").forEach((tr) =>
    tr.classList.toggle("selected", Number(tr.dataset.epochId) === id));
  document.getElementById("detail").hidden = false;
  document.getElementById("detail-id").textContent = id;
  document.getElementById("detail-status").textContent = `${e.status} · run ${e.run_id} · lineage ${e.lineage}`;
  // What the row's narrow cells cut: the task that failed it and the tables it published.
  const failed = e.declined_by || (e.status === "aborted" ? (e.missing_tasks || []).join(", ") : "");
  const tables = Object.entries(e.tables || {}).map(([t, v]) => `${t} v${v}`).join(", ");
  document.getElementById("detail-outcome").textContent = [
    failed ? `failed task: ${failed}` : "", tables ? `tables published: ${tables}` : ""]
    .filter(Boolean).join(" · ");
  // Flink's incremental vs full checkpoint size: the state the epoch uploaded / its whole
  // state; the outputs it staged for publication are a figure of their own (each handle's
  // metrics.outputs_staged_bytes, the part of bytes_written that is not state).
  const staged = (e.tasks || []).reduce((n, t) => n + ((t.metrics || {}).outputs_staged_bytes || 0), 0);
  document.getElementById("detail-sizes").textContent =
    `state uploaded ${size(Math.max(0, e.bytes_written - staged))} of ${size(e.state_bytes)}` +
    (e.parent_epoch_id == null ? " (from empty state)" : ` (incremental on epoch ${e.parent_epoch_id})`) +
    ` · outputs staged ${size(staged)}`;
  document.getElementById("detail-reason").textContent = e.reason
    ? `${e.reason}: ${e.detail || ""}${e.alert ? " (alert sent)" : ""}` : "";
  document.getElementById("detail-reads").textContent = reads(e);
  const body = document.querySelector("#tasks tbody");
  body.replaceChildren();
  for (const t of e.tasks) {
    const tr = document.createElement("tr");
    tr.dataset.task = t.task_id;
    cell(tr, t.task_id);
    cell(tr, t.status, `status-${t.status === "acked" ? "completed" : t.status === "pending" ? "pending" : "aborted"}`);
    taskLogLink(cell(tr, "log"), e.run_id, t.task_id, t.acked_attempt ?? t.attempts);
    cell(tr, t.acked_attempt ?? t.attempts);
    cell(tr, secs(t.started_delay_ms));
    cell(tr, secs(t.ack_delay_ms));
    cell(tr, t.run_ms == null ? "–" : `${secs(t.restore_ms)} / ${secs(t.run_ms)}`);
    cell(tr, t.sync_ms == null ? "–" : `${secs(t.sync_ms)} / ${secs(t.async_ms)}`, "snapshot");
    cell(tr, size(t.state_bytes));
    cell(tr, size(t.bytes_written));
    cell(tr, t.restored_from == null ? (t.status === "acked" ? "empty state" : "–")
      : `epoch ${t.restored_from}`, "restored-from");
    cell(tr, Object.entries(t.row_counts || {}).map(([k, v]) => `${k}=${v}`).join(" "), "long");
    body.appendChild(tr);
  }
  timeline(e.tasks);
  const form = document.getElementById("backfill-form");
  form.hidden = e.status !== "completed";
}

document.getElementById("dag-id").textContent = dagId;
document.getElementById("trigger-date").addEventListener("change", (ev) => {
  ev.target.dataset.touched = "1";
});
document.getElementById("refresh").addEventListener("click", () => load().catch((e) => say(e.message, true)));
document.getElementById("newer").addEventListener("click", () => {
  offset = Math.max(0, offset - PAGE);
  load().catch((e) => say(e.message, true));
});
document.getElementById("older").addEventListener("click", () => {
  offset += PAGE;
  load().catch((e) => say(e.message, true));
});
document.getElementById("trigger-run").addEventListener("click", async () => {
  try {
    const day = document.getElementById("trigger-date").value;
    if (!day) { say("choose the logical date of the run first", true); return; }
    const text = document.getElementById("trigger-conf").value.trim();
    let conf = {};
    if (text) {
      try { conf = JSON.parse(text); } catch (e) {
        say("the run conf is not JSON: write it as {\"checkpoint\": {...}}", true); return;
      }
      if (conf === null || typeof conf !== "object" || Array.isArray(conf)) {
        say("the run conf must be a JSON object", true); return;
      }
    }
    const r = await call(`/api/v2/dags/${encodeURIComponent(dagId)}/dagRuns`, {
      method: "POST", body: JSON.stringify({logical_date: `${day}T00:00:00Z`, conf})});
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
function backfillBody(dryRun) {
  const f = new FormData(document.getElementById("backfill-form"));
  const sp = f.get("from_savepoint");
  return JSON.stringify({...(sp ? {from_savepoint: sp} : {from_epoch: selected}), first_day: f.get("first_day"),
    last_day: f.get("last_day"), rewind: f.get("rewind") === "on", dry_run: dryRun});
}
// The preview comes first: what runs, which data day each reads, what gets published.
function describePreview(p) {
  const now = p.published_now;
  const lines = [
    `origin: ${p.origin.from_savepoint ? "savepoint " + p.origin.from_savepoint : "epoch " + p.origin.epoch_id}` +
      `, its input through ${p.origin.frontier ?? "(unknown)"}`,
    ...p.runs.map((r) => `run ${r.logical_date} reads data day ${r.data_day}`),
    `published now: ${now ? `epoch ${now.epoch_id} (${now.lineage}), input through ${now.frontier ?? "(unknown)"}, rows ` +
      Object.entries(now.rows).map(([k, v]) => `${k}=${v}`).join(" ") : "nothing"}`,
    ...(now && Object.keys(now.tables || {}).length ? [`tables replaced by one commit each when it publishes: ` +
      Object.entries(now.tables).map(([t, v]) => `${t} v${v}`).join(", ")] : []),
    `published after: input through ${p.published_after.frontier}${p.rewinds ? " (a rewind)" : ""}`,
    ...p.notes.map((n) => `note: ${n}`),
    ...p.conflicts.map((c) => `conflict: ${c}`),
  ];
  return lines.join("\n");
}
const submit = document.getElementById("backfill-submit");
document.getElementById("backfill-form").addEventListener("input", () => { submit.disabled = true; });
document.getElementById("backfill-preview").addEventListener("click", async () => {
  const out = document.getElementById("backfill-preview-out");
  try {
    const p = await call(`${api}/backfills`, {method: "POST", body: backfillBody(true)});
    out.textContent = describePreview(p);
    submit.disabled = p.conflicts.length > 0;
  } catch (e) { out.textContent = ""; say(`preview failed: ${e.message}`, true); }
});
document.getElementById("backfill-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    const r = await call(`${api}/backfills`, {method: "POST", body: backfillBody(false)});
    say(`backfill ${r.backfill_id} started: lineage ${r.lineage}, ${r.runs.length} run(s) for data days ` +
      `${r.first_day}..${r.last_day}, from ${r.origin.from_savepoint ? "savepoint " + r.origin.from_savepoint : "epoch " + selected}`);
    submit.disabled = true;
  } catch (e) { say(`backfill failed: ${e.message}`, true); }
});
load().catch((e) => say(`cannot load epochs: ${e.message}`, true));
setInterval(() => load().catch(() => {}), 15000);
