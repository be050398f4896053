// window.sky: the page's engine for scripts and tests.
//
//   await sky.ready            // resolves with sky.info when the model is loaded, rejects otherwise
//   await sky.ask(request)     // the /v1/systemone response, as `skyctl ask --json` prints it
//   sky.info                   // {simd, compute, module_bytes, model_bytes, load_ms, model, ...}
//   await sky.form(fields)     // the demo form as its request, checked as `skyctl ask` checks it
//
// `compute` says which path answers: "f32" (a float file), "int8, outlier-aware" (a Q8_0 file
// with its outlier columns, as `skyctl ask` runs it) or "int8" (plain Q8_0).
//
// A request the engine refuses rejects with an Error whose `response` is the spec's error object
// ({"error": {"code", "message", "type"}}, what `skyctl ask --json` prints for it) and whose
// `ms` is the latency. Inference runs in a Web Worker (sky-worker.js).
//
// URL parameters: ?model=URL loads another GGUF (default: the release's first published F16
// file, else its first published file, from models/manifest.json); ?simd=0 forces the scalar
// module, ?simd=1 the SIMD128 one (default: SIMD128 where WebAssembly.validate accepts it).

// What a published file is called on the page: the variant's name, except that the policy
// variant (`f16`) says its encoder's type (a bf16 policy makes BF16 tensors, not F16).
export function label(f) {
  const typed = f.variant === 'f16' && f.policy && f.policy.encoder;
  return typed || f.variant.toUpperCase();
}

// The files the release publishes, from models/manifest.json, in its order:
// [{model, variant, type, path, bytes, url}] (empty when there is no manifest).
export async function publishedModels(base = location.href) {
  let manifest;
  try {
    const res = await fetch(new URL('models/manifest.json', base));
    if (!res.ok) return [];
    manifest = await res.json();
  } catch {
    return [];
  }
  const out = [];
  for (const m of manifest.models || []) {
    for (const f of m.files || []) {
      // Paths in the manifest are relative to the release root (this page's folder).
      out.push({ model: m.name, variant: f.variant, type: label(f), path: f.path, bytes: f.bytes, url: new URL(f.path, base).href });
    }
  }
  return out;
}

// The page's options; `published` (from publishedModels) picks the model when ?model= is absent.
export function pageOptions(search = location.search, published = []) {
  const q = new URLSearchParams(search);
  const simd = q.get('simd');
  const first = published.find((f) => f.variant === 'f16') || published[0];
  const model = q.get('model') || first?.path || null;
  return {
    modelUrl: model ? new URL(model, location.href).href : null,
    prefer: simd === '0' ? 'scalar' : simd === '1' ? 'simd' : 'auto',
  };
}

// `modelUrl`: the GGUF's URL, or a promise of it.
export function startSky({ modelUrl, prefer = 'auto', onProgress = () => {} }) {
  const t0 = performance.now();
  const worker = new Worker(new URL('./sky-worker.js', import.meta.url), { type: 'module' });
  const pending = new Map();
  let nextId = 1;
  let settle;
  const ready = new Promise((resolve, reject) => {
    settle = { resolve, reject };
  });
  // Scripts await sky.ready themselves; this keeps a failed load from also being reported as an
  // unhandled rejection (the page shows the error in words).
  ready.catch(() => {});
  const sky = {
    ready,
    info: null,
    error: null,
    ask(request) {
      return sky.timed(request).then((r) => r.value);
    },
    // {value, ms, first}: the response and the engine's latency for it (ms, measured in the
    // worker); `first` when it was the engine's first answer (its latency includes the warm-up).
    timed(request, op = 'ask') {
      return ready.then(
        () =>
          new Promise((resolve, reject) => {
            const id = nextId++;
            pending.set(id, { resolve, reject });
            worker.postMessage({ type: 'ask', id, op, request });
          }),
      );
    },
    // ms per answer of each request, each answered `reps` times in a row in the worker.
    bench(requests, reps = 10) {
      return sky.timed({ requests, reps }, 'bench').then((r) => r.value);
    },
    // The demo form's fields as typed ({state, type, instructions, options}) as the request they
    // send, {request, options}; rejects with the refusal `skyctl ask` gives that request.
    form(fields) {
      return sky.timed(fields, 'form').then((r) => r.value);
    },
    // The built-in benchmark questions, [{id, request}].
    questions() {
      return sky.timed(null, 'questions').then((r) => r.value);
    },
  };
  const fail = (message) => {
    const err = new Error(message);
    sky.error = err;
    settle.reject(err);
    for (const p of pending.values()) p.reject(err);
    pending.clear();
  };
  worker.onmessage = (ev) => {
    const m = ev.data;
    if (m.type === 'progress') {
      onProgress(m.loaded, m.total);
    } else if (m.type === 'ready') {
      sky.info = { ...m.info, load_ms: performance.now() - t0 };
      settle.resolve(sky.info);
    } else if (m.type === 'failed') {
      fail(m.message);
    } else if (m.type === 'answer') {
      const p = pending.get(m.id);
      if (!p) return;
      pending.delete(m.id);
      sky.lastMs = m.ms;
      if (m.ok) {
        p.resolve({ value: m.value, ms: m.ms, first: m.first === true });
      } else {
        const err = new Error(m.value?.error?.message || 'the engine refused the request');
        err.response = m.value;
        err.ms = m.ms;
        p.reject(err);
      }
    }
  };
  worker.onerror = (ev) => {
    ev.preventDefault();
    fail(`the engine worker failed: ${ev.message || 'could not start'}`);
  };
  // `modelUrl` may be a promise (the page reads models/manifest.json to pick the model).
  Promise.resolve(modelUrl).then((url) => {
    if (!url) {
      worker.terminate();
      fail('no model to load: models/manifest.json lists no published file (open the page with ?model=URL)');
      return;
    }
    worker.postMessage({ type: 'init', base: new URL('./', import.meta.url).href, modelUrl: url, prefer });
  });
  return sky;
}

// Bytes as people read them: 545,280 bytes (533 KiB); under 1 KiB the bytes alone (454 bytes,
// never "0 KiB"); 1 byte singular.
export function formatBytes(n) {
  if (n === null || n === undefined || n === '' || !Number.isFinite(Number(n))) return '\u2014';
  n = Number(n);
  const exact = `${n.toLocaleString('en-US')} byte${n === 1 ? '' : 's'}`;
  if (Math.abs(n) < 1024) return exact;
  const kib = n / 1024;
  // One decimal below 10 KiB, so 1.5 KiB does not read as 2 KiB.
  const human = kib < 10 ? `${kib.toFixed(1)} KiB` : kib < 1024 ? `${kib.toFixed(0)} KiB` : `${(kib / 1024).toFixed(1)} MiB`;
  return `${exact} (${human})`;
}
