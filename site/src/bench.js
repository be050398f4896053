// The Bench page: manifest.json + bench.json as a table and a chart, and this browser's latency.
import { startSky } from './sky.js';
import { DASH, showError } from './ui.js';

const $ = (id) => document.getElementById(id);
const MODES = [
  ['f32', 'native f32'],
  ['q8', 'native q8'],
  ['q8-fast', 'native q8-fast'],
  ['q8_0', 'native Q8_0 file'],
  ['tuned', 'native tuned file'],
];
const VARIANTS = ['f32', 'f16', 'q8_0', 'tuned'];
// Passes after the warm-up; ?iters=N changes it (the tests use 1).
const ITERS = Math.max(1, Number(new URLSearchParams(location.search).get('iters')) || 5);

// A number for people, or an em dash when there is none (null, absent, not finite).
export function fmt(v, digits = 1) {
  if (v === null || v === undefined || typeof v !== 'number' || !Number.isFinite(v)) return DASH;
  return v.toLocaleString('en-US', { maximumFractionDigits: digits });
}

// A spread ((max - min) / median over rounds) above which a figure is marked noisy: the
// rounds disagree by more than the differences the table is read for.
export const NOISY = 0.1;

// {min, max, spread, noisy} of a timing and its bench.json spread entry (null without one).
export function spreadOf(median, entry) {
  if (typeof median !== 'number' || !entry || typeof entry.min !== 'number' || typeof entry.max !== 'number' || !(median > 0)) {
    return null;
  }
  const spread = (entry.max - entry.min) / median;
  return { min: entry.min, max: entry.max, rounds: entry.rounds ?? null, spread, noisy: spread > NOISY };
}

// A native timing's cell: the median, under it the spread over rounds (±half of max - min, in
// % of the median), marked noisy when the rounds are more than 10% apart.
function timingCell(tr, col, median, sp) {
  const td = cell(tr, '', { col });
  const value = document.createElement('span');
  value.className = 'value';
  value.textContent = fmt(median);
  td.append(value);
  if (sp) {
    const note = document.createElement('span');
    note.className = 'spread';
    // Whole µs from 100 up: the spread line stays narrower than its median.
    const short = (v) => fmt(v, Math.abs(v) >= 100 ? 0 : 1);
    note.textContent = `${short(sp.min)}–${short(sp.max)}${sp.noisy ? ' noisy' : ''}`;
    td.append(note);
    td.dataset.min = sp.min;
    td.dataset.max = sp.max;
    td.dataset.spread = sp.spread.toFixed(3);
    td.title = `median of ${sp.rounds ?? 'the'} rounds; fastest round ${fmt(sp.min)} µs, slowest ${fmt(sp.max)} µs (${(sp.spread * 100).toFixed(1)}% apart)` +
      (sp.noisy ? ': noisy, the rounds disagree by more than 10%' : '');
    if (sp.noisy) {
      td.classList.add('noisy');
      td.dataset.noisy = 'true';
    }
  }
  return td;
}

function cell(tr, text, attrs = {}) {
  const td = document.createElement('td');
  td.textContent = text;
  for (const [k, v] of Object.entries(attrs)) td.dataset[k] = v;
  tr.append(td);
  return td;
}

async function getJson(url) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
  try {
    return await res.json();
  } catch (e) {
    throw new Error(`${url} is not valid JSON: ${e.message}`);
  }
}

const state = { rows: [], browser: {} };

function render() {
  const body = document.querySelector('#models-table tbody');
  body.replaceChildren();
  for (const r of state.rows) {
    const tr = document.createElement('tr');
    tr.dataset.model = r.name;
    cell(tr, r.name);
    cell(tr, fmt(r.parameters, 0), { col: 'parameters' });
    for (const v of VARIANTS) cell(tr, fmt(r.bytes[v], 0), { col: `bytes-${v}` });
    for (const [m] of MODES) timingCell(tr, `native-${m}`, r.native[m], r.spread[m]);
    cell(tr, fmt(state.browser[r.name]), { col: 'browser' });
    // Where the native figures come from: a timing means little without its CPU and path.
    const on = r.measured;
    const where = on ? `${on.isa ?? DASH}, ${on.threads ?? DASH} thread${on.threads === 1 ? '' : 's'}` : DASH;
    const td = cell(tr, where, { col: 'measured' });
    td.className = 'nowrap';
    if (on?.cpu) td.title = `${on.cpu}; int8 kernel ${on.int8_kernel ?? DASH}`;
    body.append(tr);
  }
  chart();
  scrollHint();
}

function scrollHint() {
  const wrap = document.querySelector('.table-wrap');
  $('scroll-hint').hidden = wrap.scrollWidth <= wrap.clientWidth;
}

// Tick values of a log axis from 10^lo to 10^hi: every decade, with 2 and 5 between them when
// the span is short (one or two decades would otherwise get two or three ticks).
export function logTicks(lo, hi) {
  const steps = hi - lo <= 2 ? [1, 2, 5] : [1];
  const out = [];
  for (let e = lo; e <= hi; e++) {
    for (const s of steps) {
      const v = s * 10 ** e;
      if (v <= 10 ** hi * 1.0001) out.push(Number(v.toPrecision(12)));
    }
  }
  return out;
}

// Grouped horizontal bars, one group per model: every native mode with a number, and this
// browser's figure once measured. Log scale (the sizes differ by ~30x) with a labelled axis.
// Drawn at the chart's width in CSS pixels, so its text stays 12 px on a phone; below 560 px
// each label sits above its bar.
function chart() {
  const series = [...MODES.map(([m, label]) => [m, label]), ['browser', 'this browser (WASM)']];
  const colours = { f32: '#2f6fdf', q8: '#7aa1e8', 'q8-fast': '#a9c1ef', q8_0: '#5b7fae', tuned: '#3f9f6f', browser: '#e07b39' };
  const items = [];
  for (const r of state.rows) {
    for (const [k, label] of series) {
      const v = k === 'browser' ? state.browser[r.name] : r.native[k];
      const sp = k === 'browser' ? null : r.spread[k];
      if (typeof v === 'number' && Number.isFinite(v) && v > 0) items.push({ model: r.name, k, label, v, sp });
    }
  }
  const el = $('chart');
  el.replaceChildren();
  if (items.length === 0) {
    el.textContent = `${DASH} no latency measured yet`;
    return;
  }
  const max = Math.max(...items.map((i) => Math.max(i.v, i.sp?.max ?? 0)));
  const min = Math.min(...items.map((i) => Math.min(i.v, i.sp?.min > 0 ? i.sp.min : i.v)));
  // Whole decades, the smallest value a little inside, so the ticks read 10, 100, 1,000 µs.
  const lo = Math.floor(Math.log10(min) - 0.05);
  const hi = Math.max(lo + 1, Math.ceil(Math.log10(max)));
  const W = Math.max(280, Math.floor(el.clientWidth || 820));
  const narrow = W < 560;
  const left = narrow ? 14 : 230;
  // Room for the value label, and " noisy" after it where a figure is marked so.
  const right = items.some((i) => i.sp?.noisy) ? 132 : 84;
  const rowH = 18;
  const xOf = (v) => left + ((Math.log10(v) - lo) / (hi - lo)) * (W - left - right);
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  const add = (tag, attrs, text, parent = svg) => {
    const n = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    if (text !== undefined) n.textContent = text;
    parent.append(n);
    return n;
  };
  const grid = add('g', { class: 'grid' });
  let y = 4;
  let last = null;
  for (const it of items) {
    if (it.model !== last) {
      if (last !== null) y += 8;
      add('text', { x: 0, y: y + 13, class: 'group' }, it.model);
      y += rowH;
      last = it.model;
    }
    if (narrow) {
      add('text', { x: left, y: y + 13 }, it.label);
      y += rowH - 2;
    } else {
      add('text', { x: 12, y: y + 13 }, it.label);
    }
    const w = Math.max(2, xOf(it.v) - left);
    // A noisy figure is drawn faded and hatched-out: not a fact to compare bars by.
    const bar = { x: left, y: y + 2, width: w, height: rowH - 5, fill: colours[it.k], rx: 2, 'data-value': it.v };
    if (it.sp?.noisy) Object.assign(bar, { 'fill-opacity': 0.35, stroke: colours[it.k], 'stroke-dasharray': '3 2', 'data-noisy': 'true' });
    add('rect', bar);
    // The spread over rounds: a whisker from the fastest to the slowest round.
    if (it.sp && it.sp.max > it.sp.min) {
      const ym = y + 2 + (rowH - 5) / 2;
      add('line', { x1: xOf(it.sp.min), x2: xOf(it.sp.max), y1: ym, y2: ym, stroke: '#1d232a', 'stroke-width': 1.5, class: 'whisker', 'data-min': it.sp.min, 'data-max': it.sp.max });
    }
    const labelX = Math.max(left + w, it.sp ? xOf(it.sp.max) : 0) + 6;
    add('text', { x: labelX, y: y + 13, class: it.sp?.noisy ? 'noisy' : '' }, `${fmt(it.v)} µs${it.sp?.noisy ? ' noisy' : ''}`);
    y += rowH;
  }
  // The axis: a tick and a label at each value, grid lines through the bars.
  const top = 4;
  const axisY = y + 6;
  add('line', { x1: left, x2: W - right, y1: axisY, y2: axisY, stroke: '#5d6670' });
  const ticks = logTicks(lo, hi);
  const axis = add('g', { class: 'axis' });
  for (const v of ticks) {
    const x = xOf(v);
    add('line', { x1: x, x2: x, y1: top, y2: axisY, stroke: '#e3e6ea' }, undefined, grid);
    const t = add('g', { class: 'tick', 'data-value': v }, undefined, axis);
    add('line', { x1: x, x2: x, y1: axisY, y2: axisY + 5, stroke: '#5d6670' }, undefined, t);
    // Only the decades are labelled on a narrow chart: 2 and 5 would collide.
    const labelled = !narrow || ticks.length <= 4 || Math.log10(v) % 1 === 0;
    if (labelled) add('text', { x, y: axisY + 18, 'text-anchor': 'middle' }, fmt(v, 2), t);
  }
  add('text', { x: left + (W - left - right) / 2, y: axisY + 36, 'text-anchor': 'middle', class: 'axis-title' },
    'µs per question (log scale)');
  const H = axisY + 42;
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('width', W);
  svg.setAttribute('height', H);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', 'latency per question, µs, log scale');
  el.append(svg);
  el.dataset.width = W;
}

// Redrawn when the chart's width changes (a phone turned, a window resized); the hint shows
// while the table is wider than its box (scroll bars are hidden on phones).
const resized = new ResizeObserver(() => {
  const el = $('chart');
  if (state.rows.length && Number(el.dataset.width) !== Math.max(280, Math.floor(el.clientWidth))) chart();
  scrollHint();
});
resized.observe($('chart'));
resized.observe(document.querySelector('.table-wrap'));

async function main() {
  try {
    const [manifest, bench] = await Promise.all([getJson('models/manifest.json'), getJson('bench.json')]);
    if (bench.unit) $('bench-note').textContent = `Unit of bench.json: ${bench.unit}.`;
    const names = new Set([...(manifest.models || []).map((m) => m.name), ...Object.keys(bench.models || {})]);
    for (const name of names) {
      const m = (manifest.models || []).find((x) => x.name === name) || {};
      const bytes = {};
      for (const v of m.variants || []) bytes[v.variant] = v.bytes;
      const native = {};
      const spread = {};
      for (const [k] of MODES) {
        native[k] = bench.models?.[name]?.[k] ?? null;
        spread[k] = spreadOf(native[k], bench.spread?.[name]?.[k]);
      }
      const published = (m.files || []).find((f) => f.variant === 'f16') || (m.files || [])[0] || null;
      const measured = bench.measured?.[name] ?? null;
      state.rows.push({ name, parameters: m.parameters ?? null, bytes, native, spread, measured, file: published?.path ?? null });
    }
    const machines = new Set(
      Object.values(bench.measured || {})
        .filter((on) => on && on.cpu)
        .map((on) => `${on.cpu} (${on.isa}, int8 kernel ${on.int8_kernel})`),
    );
    if (machines.size) $('machine-note').textContent = `Native figures measured on ${[...machines].join('; ')}.`;
    render();
  } catch (e) {
    showError($('error'), `The bench data could not be loaded: ${e.message}`);
  }
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

// Median µs per question over ITERS passes of the built-in questions, after one warm-up pass.
export async function measure(modelPath, iters = ITERS) {
  const sky = startSky({ modelUrl: new URL(modelPath, location.href).href });
  await sky.ready;
  const requests = (await sky.questions()).map((q) => q.request);
  await sky.bench(requests, 1);
  const times = [];
  for (let pass = 0; pass < iters; pass++) {
    for (const ms of await sky.bench(requests, 4)) times.push(ms * 1000);
  }
  return { us: Math.round(median(times) * 10) / 10, simd: sky.info.simd };
}

$('iters').textContent = ITERS === 1 ? '1 pass' : `${ITERS} passes`;
$('measure').addEventListener('click', async () => {
  const btn = $('measure');
  btn.disabled = true;
  $('measure-status').textContent = 'Measuring…';
  try {
    const done = [];
    for (const r of state.rows) {
      if (!r.file) continue;
      const { us, simd } = await measure(r.file);
      state.browser[r.name] = us;
      done.push(`${r.name}: ${fmt(us)} µs (${simd ? 'SIMD128' : 'scalar'})`);
      render();
    }
    $('measure-status').textContent = done.length ? `Measured ${done.join(', ')}.` : 'No published model to measure.';
    document.body.dataset.measured = 'true';
  } catch (e) {
    showError($('error'), `Measuring failed: ${e.message}`);
  } finally {
    btn.disabled = false;
  }
});

window.benchReady = main();
