// onnxruntime-web (npm, wasm backend, SIMD, one thread) in headless Chromium on the ONNX export
// of each reference model, on the golden token ids: median ms per question over the 41 cases,
// measured as bench/web.mjs measures our engine. A benchmark, never run by .ci/run.
//
//   /tmp/tv/bin/python bench/ort_export.py target/ort          # torch: see bench/torch_compare.py
//   (cd bench/ort-web && npm install) && (cd site && npm ci)
//   node bench/ort_web.mjs target/ort [--passes 5] [--reps 10]
//
// ONNX Runtime times the model's forward alone (token ids in, scores out); our engine's figure
// (bench/web.mjs) also tokenizes and builds the JSON answer.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ROOT, serve, launch, openPage } from '../site/tests/harness.js';

const onnxDir = path.resolve(process.argv[2] || 'target/ort');
const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const PASSES = Number(arg('passes', 5));
const REPS = Number(arg('reps', 10));
const MODELS = ['s1-pico', 's1-nano', 's1-micro'];
const dist = path.join(ROOT, 'bench/ort-web/node_modules/onnxruntime-web/dist');
if (!fs.existsSync(dist)) throw new Error(`${dist} missing: (cd bench/ort-web && npm install)`);

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sky-ort-'));
fs.cpSync(dist, path.join(dir, 'ort'), { recursive: true });
fs.mkdirSync(path.join(dir, 'models'));
for (const m of MODELS) {
  for (const ext of ['onnx', 'feeds.json']) {
    fs.copyFileSync(path.join(onnxDir, `${m}.${ext}`), path.join(dir, 'models', `${m}.${ext}`));
  }
}
fs.writeFileSync(
  path.join(dir, 'ort.html'),
  `<!doctype html><meta charset="utf-8"><title>ort</title><script type="module">
import * as ort from './ort/ort.wasm.min.mjs';
ort.env.wasm.numThreads = 1;
ort.env.wasm.wasmPaths = new URL('./ort/', location.href).href;
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };
window.run = async (model, passes, reps) => {
  const sess = await ort.InferenceSession.create('models/' + model + '.onnx',
    { executionProviders: ['wasm'], graphOptimizationLevel: 'all' });
  const cases = await (await fetch('models/' + model + '.feeds.json')).json();
  const feeds = cases.map((c) => {
    const n = c.input_ids.length, k = c.markers.length;
    return {
      input_ids: new ort.Tensor('int64', BigInt64Array.from(c.input_ids.map(BigInt)), [1, n]),
      attention_mask: new ort.Tensor('int64', new BigInt64Array(n).fill(1n), [1, n]),
      marker_pos: new ort.Tensor('int64', BigInt64Array.from(c.markers.map(BigInt)), [1, k]),
      marker_mask: new ort.Tensor('bool', new Uint8Array(k).fill(1), [1, k]),
      qtype: new ort.Tensor('int64', BigInt64Array.from([BigInt(c.qtype)]), [1]),
    };
  });
  let maxErr = 0;
  for (let i = 0; i < feeds.length; i++) {
    const out = await sess.run(feeds[i]);
    const s = Object.values(out)[0].data;
    cases[i].scores.forEach((v, j) => { maxErr = Math.max(maxErr, Math.abs(v - s[j])); });
  }
  for (let w = 0; w < 2; w++) for (const f of feeds) await sess.run(f);
  const per = feeds.map(() => []);
  for (let p = 0; p < passes; p++) {
    for (let i = 0; i < feeds.length; i++) {
      const t0 = performance.now();
      for (let r = 0; r < reps; r++) await sess.run(feeds[i]);
      per[i].push((performance.now() - t0) / reps);
    }
  }
  return { ms: median(per.map(median)), maxErr, isolated: self.crossOriginIsolated };
};
window.ready = true;
</script>`,
);
const site = await serve(dir, { isolate: true });
const ctx = await launch();
const results = { passes: PASSES, reps: REPS, models: {} };
try {
  const page = await openPage(ctx, `${site.url}ort.html`);
  await page.waitForFunction(() => window.ready === true).catch((e) => {
    throw new Error(`${e.message}; page errors: ${page.errors.join('; ')}; console: ${page.consoleErrors.join('; ')}`);
  });
  for (const m of MODELS) {
    const r = await page.evaluate(([model, p, reps]) => window.run(model, p, reps), [m, PASSES, REPS]);
    results.models[m] = r;
    console.log(`${m} onnxruntime-web: ${r.ms.toFixed(3)} ms per question; max |score - golden| ${r.maxErr.toExponential(1)}`);
  }
  if (page.errors.length) console.error('page errors:', page.errors);
  await page.close();
} finally {
  await ctx.close();
  await site.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
console.log(JSON.stringify(results, null, 2));
