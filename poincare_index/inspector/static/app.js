// The inspector page. Every number it shows comes from the server: positions, time weights at
// the slider's time (the decay policy is evaluated there, exactly as search(at_time=...) does),
// search results and their score breakdown. This script only draws and asks.
"use strict";

const state = { meta: null, n: 0, ids: [], xy: new Float32Array(0), logw: new Float32Array(0), gen: null,
                layout: "depth", mask: null, hits: new Set(), selected: null, tMin: 0, tMax: 0, query: "",
                pending: 0, searchTicket: 0 };
const canvas = document.getElementById("disk");
// Points are blended into the pixels by this script (see drawPoints): the canvas is read back on
// every draw, which the browser does without a GPU round trip when told so.
const ctx = canvas.getContext("2d", { willReadFrequently: true });
const $ = (id) => document.getElementById(id);
window.sliderTimings = [];
// Milliseconds after navigation: loading indicator drawn, first points drawn, everything usable.
window.inspectorTimings = {};

async function getJSON(path) {
  const res = await fetch(path);
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

async function getF32(path, onBytes) {
  // A binary array from the server, read as a stream so the indicator can show the bytes so far.
  const res = await fetch(path);
  if (!res.ok) throw new Error((await res.json()).error || res.statusText);
  const gen = res.headers.get("X-Generation"), size = res.headers.get("Content-Length");
  if (size === null) return { data: new Float32Array(await res.arrayBuffer()), gen };  // a proxy's re-encoding
  const buf = new Uint8Array(Number(size));
  const reader = res.body.getReader();
  for (let got = 0; ;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf.set(value, got);
    got += value.length;
    if (onBytes) onBytes(got);
  }
  return { data: new Float32Array(buf.buffer), gen };
}

function sliderTime() {
  const f = Number($("slider").value) / 1000;
  return new Date(state.tMin + f * (state.tMax - state.tMin));
}

function weightsPath(at) { return `/api/weights?format=f32&at=${encodeURIComponent(at.toISOString())}`; }

// ---- drawing -----------------------------------------------------------------------------------
// A point's look depends on its weight w = exp(log weight) only, through f = sqrt(w) (sqrt: long
// half-lives stay visible): colour from pale blue-grey (f = 0) to saturated orange (f = 1),
// radius 1.5 + 4 w px. LEVELS steps of f are invisible at these sizes and let the page draw
// 200,000 points by stamping a precomputed disc per level (~40 ms) instead of one canvas path
// per point (~800 ms).
const LEVELS = 32;
const SIZE = canvas.width;

function stamp(f, rgb, alpha) {
  const r = 1.5 + 4 * f * f, R = Math.ceil(r), offs = [], cover = [];
  for (let dy = -R; dy <= R; dy++) {
    for (let dx = -R; dx <= R; dx++) {
      const c = Math.min(1, r + 0.5 - Math.hypot(dx, dy));  // antialiased edge
      if (c > 0) { offs.push(4 * (dy * SIZE + dx)); cover.push(c * alpha); }
    }
  }
  return { R, rgb, offs: Int32Array.from(offs), cover: Float32Array.from(cover) };
}
// Stamps 0..LEVELS-1: points outside the filter (grey); LEVELS..2*LEVELS-1: the others.
const STAMPS = [];
for (let k = 0; k < LEVELS; k++) STAMPS.push(stamp(k / (LEVELS - 1), [200, 200, 200], 0.25));
for (let k = 0; k < LEVELS; k++) {
  const f = k / (LEVELS - 1);
  STAMPS.push(stamp(f, [120 + 120 * f, 140 - 30 * f, 170 - 140 * f], 0.25 + 0.7 * f));
}

function toCanvas(px, py) {
  const half = SIZE / 2, scale = half - 12;
  return [half + px * scale, half - py * scale];
}
function pointCanvas(i) { return toCanvas(state.xy[2 * i], state.xy[2 * i + 1]); }

function drawDisk() {
  const half = SIZE / 2;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, SIZE, SIZE);
  ctx.beginPath();
  ctx.arc(half, half, half - 12, 0, 2 * Math.PI);
  ctx.fillStyle = "#fbfcfe"; ctx.fill();
  ctx.strokeStyle = "#1d2f45"; ctx.lineWidth = 2; ctx.stroke();  // the disk's boundary
}

function drawPoints() {
  // Counting sort by stamp: grey first, then by weight, so heavier points land on top.
  const n = Math.min(state.n, state.logw.length), group = new Uint8Array(n);
  const start = new Uint32Array(STAMPS.length + 1);
  for (let i = 0; i < n; i++) {
    const f = Math.sqrt(Math.exp(Math.max(state.logw[i], -30)));
    const g = Math.round(f * (LEVELS - 1)) + (state.mask && !state.mask[i] ? 0 : LEVELS);
    group[i] = g; start[g + 1]++;
  }
  for (let g = 0; g < STAMPS.length; g++) start[g + 1] += start[g];
  const order = new Uint32Array(n), next = start.slice(0, STAMPS.length);
  for (let i = 0; i < n; i++) order[next[group[i]]++] = i;
  const img = ctx.getImageData(0, 0, SIZE, SIZE), px = img.data;
  for (let g = 0; g < STAMPS.length; g++) {
    const { R, rgb: [sr, sg, sb], offs, cover } = STAMPS[g], m = offs.length;
    for (let j = start[g]; j < start[g + 1]; j++) {
      const [x, y] = pointCanvas(order[j]), cx = Math.round(x), cy = Math.round(y);
      if (cx < R || cy < R || cx >= SIZE - R || cy >= SIZE - R) continue;
      const base = 4 * (cy * SIZE + cx);
      for (let q = 0; q < m; q++) {  // "source over" on an opaque backdrop
        const p = base + offs[q], a = cover[q];
        px[p] += (sr - px[p]) * a; px[p + 1] += (sg - px[p + 1]) * a; px[p + 2] += (sb - px[p + 2]) * a;
      }
    }
  }
  ctx.putImageData(img, 0, 0);
}

function timeRingRadius(at) {
  // data.time_radius's rule, for the slider's time; after the newest memory it rests on the rim.
  const [r0, r1] = state.meta.time_radii;
  const lo = Date.parse(state.meta.t_min), hi = Date.parse(state.meta.t_max);
  const r = hi > lo ? r0 + (r1 - r0) * (at.getTime() - lo) / (hi - lo) : (r0 + r1) / 2;
  return Math.max(0, Math.min(1, r));
}

function drawOverlay() {
  const half = SIZE / 2, scale = half - 12;
  if (state.layout === "time" && state.meta && state.meta.t_min) {
    ctx.beginPath();
    ctx.arc(half, half, timeRingRadius(sliderTime()) * scale, 0, 2 * Math.PI);
    ctx.setLineDash([6, 5]); ctx.strokeStyle = "#b05a00"; ctx.lineWidth = 1.5; ctx.stroke(); ctx.setLineDash([]);
  }
  for (let i = 0; i < state.ids.length && i < state.n; i++) {
    if (!state.hits.has(state.ids[i]) && state.selected !== state.ids[i]) continue;
    const [cx, cy] = pointCanvas(i);
    ctx.beginPath();
    ctx.arc(cx, cy, 8, 0, 2 * Math.PI);
    ctx.strokeStyle = state.selected === state.ids[i] ? "#b00020" : "#1d2f45";
    ctx.lineWidth = 2; ctx.stroke();
  }
  // The layout is named on the picture itself, so a screenshot of the time layout says so too.
  ctx.font = "13px system-ui, sans-serif"; ctx.fillStyle = "#1d2f45";
  ctx.fillText(state.layout === "time" ? "radius = time (not hyperbolic distance)"
    : "Poincaré disk: radius = hyperbolic depth", 8, 18);
}

function draw() {
  drawDisk();
  if (state.n) drawPoints();
  drawOverlay();
}

// ---- loading -----------------------------------------------------------------------------------
function showLoading(text, fraction) {
  $("loading").hidden = false;
  $("loading-text").textContent = text;
  if (fraction === undefined) $("loading-bar").removeAttribute("value");  // indeterminate
  else $("loading-bar").value = fraction;
}

async function loadPoints() {
  // Positions and weights (binary) first: enough to draw. The ids (JSON, needed only to click,
  // search and filter) follow while the first picture is drawn. All three must come from one
  // state of the store (one X-Generation): a store written meanwhile makes the page ask again.
  for (;;) {
    const n = state.meta.count, got = [0, 0];
    showLoading(`Loading ${n.toLocaleString()} points…`, 0);
    const progress = (k) => (bytes) => {
      got[k] = bytes;
      $("loading-bar").value = (got[0] + got[1]) / Math.max(1, 12 * n);
    };
    const [pos, w] = await Promise.all([
      getF32(`/api/points?format=f32&layout=${state.layout}`, progress(0)),
      getF32(weightsPath(sliderTime()), progress(1)),
    ]);
    if (pos.gen !== w.gen) { state.meta = await getJSON("/api/meta"); continue; }
    const ids = fetch("/api/ids");
    Object.assign(state, { n: pos.data.length / 2, xy: pos.data, logw: w.data, gen: pos.gen, ids: [] });
    showLoading(`Loading the ids of ${state.n.toLocaleString()} points…`);
    draw();
    window.inspectorTimings.firstPoints ??= performance.now();
    const res = await ids;
    if (!res.ok) throw new Error((await res.json()).error || res.statusText);
    if (res.headers.get("X-Generation") !== state.gen) { state.meta = await getJSON("/api/meta"); continue; }
    state.ids = (await res.json()).ids;
    $("loading").hidden = true;
    return;
  }
}

function describeLayout() {
  const m = state.meta, time = state.layout === "time";
  const why = m.layout === "time"
    ? ` Every point lies at the same hyperbolic depth (spread ${m.depth_spread.toPrecision(2)}): ` +
      "the Poincaré layout would be a single ring, so the time layout is shown first."
    : "";
  $("legend").textContent = time
    ? "Radius: time, not hyperbolic depth (oldest inside, newest at the rim; dashed: the slider's time)."
    : "Radius: hyperbolic depth (the true Poincaré disk).";
  $("projection").textContent = (time ? "" : "Projection: ") + m.layouts[state.layout] + why;
}

async function setLayout(layout) {
  state.layout = layout;
  describeLayout();
  const pos = await getF32(`/api/points?format=f32&layout=${layout}`);
  if (pos.gen !== state.gen) { await reload(); return; }
  state.xy = pos.data;
  draw();
}

async function reload() {
  // The store changed under the page: new points, so new positions, ids and weights.
  state.meta = await getJSON("/api/meta");
  await loadPoints();
  if (state.mask) await applyFilter();
  draw();
}

// ---- weights, search, details -------------------------------------------------------------------
async function fetchWeights() {
  const at = sliderTime();
  $("time-label").textContent = at.toISOString().replace(".000Z", "Z");
  return getF32(weightsPath(at));
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
  const [w] = await Promise.all([fetchWeights(), runSearch()]);
  if (ticket !== state.pending) return;  // a newer move superseded this one
  if (w.gen !== state.gen) await reload();
  else state.logw = w.data;
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
  for (let i = 0; i < state.ids.length && i < state.n; i++) {
    const [cx, cy] = pointCanvas(i);
    const d = (cx - mx) ** 2 + (cy - my) ** 2;
    if (d < bestD) { bestD = d; best = i; }
  }
  if (best >= 0) showPoint(state.ids[best]);
});

async function init() {
  // The empty disk and the indicator (already in the page's HTML) show before any data.
  drawDisk();
  window.inspectorTimings.indicator = performance.now();
  try {
    state.meta = await getJSON("/api/meta");
    const now = Date.now();
    state.tMin = state.meta.t_min ? Date.parse(state.meta.t_min) : now - 86400e3;
    state.tMax = Math.max(state.meta.t_max ? Date.parse(state.meta.t_max) : now, now);
    state.layout = state.meta.layout;
    $("layout").value = state.layout;
    $("t-min").textContent = new Date(state.tMin).toISOString().slice(0, 10);
    $("t-max").textContent = new Date(state.tMax).toISOString().slice(0, 10);
    $("time-label").textContent = sliderTime().toISOString().replace(".000Z", "Z");
    $("summary").textContent = `${state.meta.count.toLocaleString()} ${state.meta.kind === "memory" ? "memories" : "points"}` +
      (state.meta.touch ? " · searches count accesses" : " · read-only");
    $("decay").textContent = `decay: ${state.meta.decay}; colour and size: time weight at the slider's time`;
    describeLayout();
    $("query").placeholder = `search by ${state.meta.searchable} at the slider's time`;
    for (const f of Object.keys(state.meta.fields)) {
      const o = document.createElement("option"); o.value = f; o.textContent = f; $("field").append(o);
    }
    await loadPoints();
    $("layout").disabled = false;  // not before: a layout asked for mid-load would race the load
    window.inspectorReady = window.inspectorTimings.full = performance.now();
    document.body.dataset.ready = "1";
  } catch (err) {
    $("loading").hidden = true;
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
$("layout").addEventListener("change", () => {
  setLayout($("layout").value).then(() => { document.body.dataset.layout = state.layout; });
});
// For tests and scripts: move the slider to a time (ISO-8601) and wait for the page to update.
window.inspector = {
  setTime(iso) {
    const f = (Date.parse(iso) - state.tMin) / (state.tMax - state.tMin);
    $("slider").value = String(Math.round(Math.max(0, Math.min(1, f)) * 1000));
    $("slider").dispatchEvent(new Event("input"));
  },
};
init();
