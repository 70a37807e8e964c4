// The inspector page. Every number it shows comes from the server: positions, time weights at
// the slider's time (the decay policy is evaluated there, exactly as search(at_time=...) does),
// search results and their score breakdown. This script only draws and asks.
"use strict";

const state = { meta: null, ids: [], x: [], y: [], logw: [], mask: null, hits: new Set(), selected: null,
                tMin: 0, tMax: 0, query: "", pending: 0, searchTicket: 0 };
const canvas = document.getElementById("disk");
const ctx = canvas.getContext("2d");
const $ = (id) => document.getElementById(id);
window.sliderTimings = [];

async function getJSON(path) {
  const res = await fetch(path);
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function sliderTime() {
  const f = Number($("slider").value) / 1000;
  return new Date(state.tMin + f * (state.tMax - state.tMin));
}

function colour(logw) {
  // weight 1 -> saturated orange; weight near 0 -> pale blue-grey (sqrt: half-lives stay visible).
  const f = Math.sqrt(Math.exp(Math.max(logw, -30)));
  const r = Math.round(120 + 120 * f), g = Math.round(140 - 30 * f), b = Math.round(170 - 140 * f);
  return `rgba(${r},${g},${b},${0.25 + 0.7 * f})`;
}

function toCanvas(px, py) {
  const half = canvas.width / 2, scale = half - 12;
  return [half + px * scale, half - py * scale];
}

function draw() {
  const w = canvas.width, half = w / 2;
  ctx.clearRect(0, 0, w, w);
  ctx.beginPath();
  ctx.arc(half, half, half - 12, 0, 2 * Math.PI);
  ctx.fillStyle = "#fbfcfe"; ctx.fill();
  ctx.strokeStyle = "#1d2f45"; ctx.lineWidth = 2; ctx.stroke();  // the disk's boundary
  const order = state.ids.map((_, i) => i).sort((a, b) => (state.logw[a] ?? -1e9) - (state.logw[b] ?? -1e9));
  for (const i of order) {
    const lw = state.logw[i] ?? -1e9;
    const dim = state.mask && !state.mask[i];
    const [cx, cy] = toCanvas(state.x[i], state.y[i]);
    const radius = 1.5 + 4 * Math.exp(Math.max(lw, -20));
    ctx.beginPath();
    ctx.arc(cx, cy, radius, 0, 2 * Math.PI);
    ctx.fillStyle = dim ? "rgba(200,200,200,0.25)" : colour(lw);
    ctx.fill();
  }
  for (const i of state.ids.keys()) {
    if (!state.hits.has(state.ids[i]) && state.selected !== state.ids[i]) continue;
    const [cx, cy] = toCanvas(state.x[i], state.y[i]);
    ctx.beginPath();
    ctx.arc(cx, cy, 8, 0, 2 * Math.PI);
    ctx.strokeStyle = state.selected === state.ids[i] ? "#b00020" : "#1d2f45";
    ctx.lineWidth = 2; ctx.stroke();
  }
}

async function fetchWeights() {
  const at = sliderTime();
  $("time-label").textContent = at.toISOString().replace(".000Z", "Z");
  const data = await getJSON(`/api/weights?at=${encodeURIComponent(at.toISOString())}`);
  return data.log_weight.map((v) => (v === null ? -1e9 : v));
}

function fmt(v) { return v === null || v === undefined ? "-inf" : Number(v).toFixed(4); }

function showError(parent, message) {
  const li = document.createElement("li");
  li.className = "error";
  li.textContent = message;  // text, never markup: messages quote user input
  parent.replaceChildren(li);
}

async function runSearch() {
  const list = $("results");
  const ticket = ++state.searchTicket;
  if (!state.query) { list.replaceChildren(); delete list.dataset.order; state.hits = new Set(); return; }
  const at = sliderTime().toISOString();
  const field = $("field").value, value = $("value").value;
  const params = new URLSearchParams({ q: state.query, at, k: "10" });
  if (field) { params.set("field", field); params.set("value", value); }
  try {
    const data = await getJSON(`/api/search?${params}`);
    if (ticket !== state.searchTicket) return;  // a newer search (or slider move) answers instead
    list.replaceChildren();
    state.hits = new Set(data.results.map((r) => r.id));
    for (const r of data.results) {
      const li = document.createElement("li");
      li.dataset.id = r.id;
      const text = document.createElement("span");
      text.className = "text";
      text.textContent = `${r.id}: ${r.text}`;
      const terms = document.createElement("span");
      terms.className = "terms";
      terms.textContent = `score ${fmt(r.score)} = distance ${fmt(r.distance_term)} + depth ${fmt(r.depth_term)}` +
        ` + time ${fmt(r.time_term)} (weight ${Number(r.time_weight).toPrecision(3)})`;
      li.append(text, terms);
      li.addEventListener("click", () => showPoint(r.id));
      list.append(li);
    }
    list.dataset.order = data.results.map((r) => r.id).join(",");
  } catch (err) {
    if (ticket === state.searchTicket) showError(list, err.message);
  }
}

async function showPoint(id) {
  state.selected = id;
  const fields = await getJSON(`/api/point?id=${encodeURIComponent(id)}`);
  const dl = $("details");
  dl.replaceChildren();
  for (const [k, v] of Object.entries(fields)) {
    const dt = document.createElement("dt"); dt.textContent = k;
    const dd = document.createElement("dd"); dd.textContent = v === null ? "(open)" : String(v);
    dl.append(dt, dd);
  }
  dl.dataset.id = id;
  draw();
}

async function update() {
  // Slider moved: weights (and the ranking, when a query is active) at the new time.
  const t0 = performance.now();
  const ticket = ++state.pending;
  const [logw] = await Promise.all([fetchWeights(), runSearch()]);
  if (ticket !== state.pending) return;  // a newer move superseded this one
  state.logw = logw;
  draw();
  window.sliderTimings.push(performance.now() - t0);
  document.body.dataset.updates = String(window.sliderTimings.length);
}

function applyFilter() {
  const field = $("field").value, value = $("value").value;
  state.mask = null;
  return field ? fetchMask(field, value) : Promise.resolve();
}

async function fetchMask(field, value) {
  // The mask is the search filter applied to every point: ask for the matching ids.
  const params = new URLSearchParams({ field, value });
  const data = await getJSON(`/api/points?${params}`);
  const allowed = new Set(data.ids);
  state.mask = state.ids.map((id) => allowed.has(id));
}

function fillValues() {
  const field = $("field").value, sel = $("value");
  sel.replaceChildren();
  for (const v of field ? state.meta.fields[field] : []) {
    const o = document.createElement("option"); o.value = String(v); o.textContent = String(v); sel.append(o);
  }
}

canvas.addEventListener("click", (ev) => {
  const rect = canvas.getBoundingClientRect();
  const mx = (ev.clientX - rect.left) * (canvas.width / rect.width);
  const my = (ev.clientY - rect.top) * (canvas.height / rect.height);
  let best = -1, bestD = 100;
  for (let i = 0; i < state.ids.length; i++) {
    const [cx, cy] = toCanvas(state.x[i], state.y[i]);
    const d = (cx - mx) ** 2 + (cy - my) ** 2;
    if (d < bestD) { bestD = d; best = i; }
  }
  if (best >= 0) showPoint(state.ids[best]);
});

async function init() {
  try {
    state.meta = await getJSON("/api/meta");
    const pts = await getJSON("/api/points");
    Object.assign(state, { ids: pts.ids, x: pts.x, y: pts.y });
    const now = Date.now();
    state.tMin = state.meta.t_min ? Date.parse(state.meta.t_min) : now - 86400e3;
    state.tMax = Math.max(state.meta.t_max ? Date.parse(state.meta.t_max) : now, now);
    $("t-min").textContent = new Date(state.tMin).toISOString().slice(0, 10);
    $("t-max").textContent = new Date(state.tMax).toISOString().slice(0, 10);
    $("summary").textContent = `${state.meta.count.toLocaleString()} ${state.meta.kind === "memory" ? "memories" : "points"}` +
      (state.meta.touch ? " · searches count accesses" : " · read-only");
    $("decay").textContent = `decay: ${state.meta.decay}; colour and size: time weight at the slider's time`;
    $("projection").textContent = `Projection: ${state.meta.projection}`;
    $("query").placeholder = `search by ${state.meta.searchable} at the slider's time`;
    for (const f of Object.keys(state.meta.fields)) {
      const o = document.createElement("option"); o.value = f; o.textContent = f; $("field").append(o);
    }
    state.logw = await fetchWeights();
    draw();
    window.inspectorReady = performance.now();
    document.body.dataset.ready = "1";
  } catch (err) {
    $("summary").textContent = `error: ${err.message}`;
    $("summary").className = "error";
  }
}

let scheduled = false;
$("slider").addEventListener("input", () => {
  if (scheduled) return;
  scheduled = true;
  requestAnimationFrame(() => { scheduled = false; update(); });
});
$("search-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  state.query = $("query").value.trim();
  runSearch().then(draw);
});
$("field").addEventListener("change", () => { fillValues(); applyFilter().then(() => runSearch()).then(draw); });
$("value").addEventListener("change", () => { applyFilter().then(() => runSearch()).then(draw); });
// For tests and scripts: move the slider to a time (ISO-8601) and wait for the page to update.
window.inspector = {
  setTime(iso) {
    const f = (Date.parse(iso) - state.tMin) / (state.tMax - state.tMin);
    $("slider").value = String(Math.round(Math.max(0, Math.min(1, f)) * 1000));
    $("slider").dispatchEvent(new Event("input"));
  },
};
init();
