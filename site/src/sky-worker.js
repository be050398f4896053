// The engine's Web Worker: fetches the module and the model, answers questions off the page's
// thread. Messages in: {type: "init", base, modelUrl, prefer} then {type: "ask", id, request} (or
// {type: "ask", id, op: "questions"}: the built-in benchmark questions; {type: "ask", id,
// op: "form", request: fields}: the demo form as its request (engine.form); {type: "ask", id,
// op: "bench", request: {requests, reps}}: ms per answer of each request, answered reps times).
// Messages out: {type: "progress", loaded, total}, {type: "ready", info} or
// {type: "failed", message}, {type: "answer", id, ok, value, ms, first} (`first`: the engine's
// first answer, which includes its warm-up).
import { SkyEngine, moduleName } from './sky-engine.js';

let engine = null;
// Whether an answer has been given yet: the first one includes the engine's warm-up (memory
// grown, caches filled), so its latency is not the engine's speed.
let warm = false;

function post(msg) {
  self.postMessage(msg);
}

async function fetchOk(url, what) {
  let res;
  try {
    res = await fetch(url);
  } catch (e) {
    throw new Error(`could not fetch the ${what} ${url}: ${e.message}`);
  }
  if (!res.ok) {
    throw new Error(`the ${what} ${url} could not be loaded: HTTP ${res.status} ${res.statusText}`.trim());
  }
  return res;
}

// Stream the model into the module's memory. With a Content-Length (and no content coding) the
// bytes go straight into the reserved buffer; otherwise they are gathered first.
async function fetchModel(url) {
  const res = await fetchOk(url, 'model');
  const announced = Number(res.headers.get('content-length'));
  const direct = Number.isFinite(announced) && announced > 0 && !res.headers.get('content-encoding');
  const total = direct ? announced : 0;
  post({ type: 'progress', loaded: 0, total });
  if (!res.body) {
    const bytes = new Uint8Array(await res.arrayBuffer());
    post({ type: 'progress', loaded: bytes.length, total: bytes.length });
    return { bytes };
  }
  const reader = res.body.getReader();
  let loaded = 0;
  const chunks = [];
  if (direct) engine.reserveModel(total);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (direct && loaded + value.length <= total) {
      engine.writeModel(loaded, value);
    } else {
      if (direct) throw new Error(`the model ${url} is longer than its Content-Length (${total} bytes)`);
      chunks.push(value);
    }
    loaded += value.length;
    post({ type: 'progress', loaded, total });
  }
  if (direct) {
    if (loaded !== total) throw new Error(`the model ${url} ended after ${loaded} of ${total} bytes`);
    post({ type: 'progress', loaded, total: loaded });
    return { bytes: null, size: loaded };
  }
  const bytes = new Uint8Array(loaded);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.length;
  }
  post({ type: 'progress', loaded, total: loaded });
  return { bytes };
}

async function init({ base, modelUrl, prefer }) {
  const t0 = performance.now();
  const wasmUrl = new URL(moduleName(prefer), base).href;
  const wasmRes = await fetchOk(wasmUrl, 'engine module');
  const wasmBytes = new Uint8Array(await wasmRes.arrayBuffer());
  engine = await SkyEngine.create(wasmBytes);
  const tModule = performance.now();
  const { bytes, size } = await fetchModel(modelUrl);
  const tFetched = performance.now();
  const name = decodeURIComponent(new URL(modelUrl).pathname.split('/').pop() || 'model.gguf');
  const r = bytes ? engine.loadBytes(bytes, name) : engine.load(name);
  const tLoaded = performance.now();
  if (!r.ok) {
    throw new Error(`the model ${modelUrl} could not be loaded: ${r.value.error.message}`);
  }
  return {
    ...r.value,
    simd: engine.simd,
    module: wasmUrl,
    module_bytes: wasmBytes.length,
    model_url: modelUrl,
    model_bytes: bytes ? bytes.length : size,
    module_ms: tModule - t0,
    fetch_ms: tFetched - tModule,
    parse_ms: tLoaded - tFetched,
  };
}

// Latency per question without the message round trip or the timer's coarse resolution:
// each request answered `reps` times in a row, in ms per answer. {requests, reps} -> [ms].
function benchRun({ requests, reps = 10 }) {
  const times = [];
  for (const req of requests) {
    const text = JSON.stringify(req);
    const t0 = performance.now();
    for (let i = 0; i < reps; i++) {
      const r = engine.ask(text);
      if (!r.ok) return r;
    }
    times.push((performance.now() - t0) / reps);
  }
  return { ok: true, value: times };
}

self.onmessage = async (ev) => {
  const msg = ev.data;
  if (msg.type === 'init') {
    try {
      post({ type: 'ready', info: await init(msg) });
    } catch (e) {
      post({ type: 'failed', message: e.message || String(e) });
    }
  } else if (msg.type === 'ask') {
    try {
      if (!engine) throw new Error('the engine is not loaded');
      const t0 = performance.now();
      const r =
        msg.op === 'questions'
          ? engine.questions()
          : msg.op === 'form'
            ? engine.form(msg.request)
          : msg.op === 'bench'
            ? benchRun(msg.request)
            : engine.ask(msg.request);
      const ms = performance.now() - t0;
      const asked = !msg.op || msg.op === 'ask';
      const first = asked && r.ok && !warm;
      if (asked && r.ok) warm = true;
      post({ type: 'answer', id: msg.id, ok: r.ok, value: r.value, ms, first });
    } catch (e) {
      post({
        type: 'answer',
        id: msg.id,
        ok: false,
        value: { error: { code: 500, message: e.message || String(e), type: 'server_error' } },
        ms: 0,
      });
    }
  }
};
