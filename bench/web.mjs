// The browser engine in headless Chromium: median ms per question on the 41 golden cases for
// each model (s1-pico, s1-nano, s1-micro) and file type (`--types`: f16 by default; q8_0 and
// tuned files run the browser's int8 path, as native does), with the SIMD128 and the scalar
// module; module sizes (and gzip); time from navigation to sky.ready for s1-pico.
// A benchmark, not a test (BENCH.md has the numbers; never run by .ci/run).
//
//   cargo run --release -p skyctl -- build && (cd site && npm ci)
//   node bench/web.mjs [--passes 5] [--reps 10] [--models s1-pico,...] [--variants simd,scalar]
//                      [--types f16,q8_0] [--json OUT.json] [--native BIN]
//
// `--native BIN` (f16 files only: the infer bench executable, `cargo bench -p sky-infer --bench infer --no-run`
// prints its path) alternates the browser with native f32 on the same machine: after every
// browser pass BIN answers the 41 cases `reps` times, and each pass gives a WASM / native
// ratio of the same statistic (median over the cases of each case's time); reported: the
// median of those ratios.
//
// Each pass answers every case `reps` times in a row inside the worker (no message round trip
// per answer; the page is cross-origin isolated, so the timer resolves 5 µs); per case the
// median of the passes; reported: the median over the 41 cases.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { ROOT, RELEASE, serve, launch, openPage, goldenCases } from '../site/tests/harness.js';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const PASSES = Number(arg('passes', 5));
const REPS = Number(arg('reps', 10));
const JSON_OUT = arg('json', null);
const MODELS = arg('models', 's1-pico,s1-nano,s1-micro').split(',');
const VARIANTS = arg('variants', 'simd,scalar').split(',');
const TYPES = arg('types', 'f16').split(',');
const NATIVE = arg('native', null);

// One native f32 run of BIN over the 41 cases `reps` times: its median of case medians and its
// mean per question, µs (the last two columns of its table).
const nativeMicros = (model, cases) => {
  const out = execFileSync(NATIVE, [model, '--iters', String(cases * REPS)], { encoding: 'utf8' });
  const row = out.split('\n').find((l) => l.startsWith(`| ${model} |`));
  const cells = row ? row.split('|').map((c) => c.trim()).filter(Boolean) : [];
  const [mean, med] = cells.slice(-2).map(Number);
  if (!Number.isFinite(med) || !Number.isFinite(mean)) {
    throw new Error(`no mean and case-median columns in the output of ${NATIVE}:\n${out}`);
  }
  return { med, mean };
};
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sky-bench-'));
fs.cpSync(RELEASE, dir, { recursive: true });
// Each file under test, as `model.type` (the model's name alone for f16, as before types).
const files = [];
for (const m of MODELS) {
  for (const t of TYPES) {
    const src = path.join(ROOT, 'build', m, `${m}.${t}.gguf`);
    if (!fs.existsSync(src)) throw new Error(`${src} missing: run skyctl build first`);
    const name = t === 'f16' ? m : `${m}.${t}`;
    fs.copyFileSync(src, path.join(dir, 'models', `${name}.bench.gguf`));
    files.push({ name, model: m, type: t });
  }
}
const requests = goldenCases().map((c) => c.request);
const site = await serve(dir, { isolate: true });
const ctx = await launch();
const results = { passes: PASSES, reps: REPS, cases: requests.length, models: {}, modules: {} };
try {
  for (const v of ['simd', 'scalar']) {
    const bytes = fs.readFileSync(path.join(dir, `sky-web.${v}.wasm`));
    results.modules[v] = { bytes: bytes.length, gzip: zlib.gzipSync(bytes, { level: 9 }).length };
  }
  // Navigation to sky.ready, s1-pico, SIMD128, 5 fresh page loads (median).
  const ready = [];
  for (let i = 0; i < 5; i++) {
    const page = await openPage(ctx, `${site.url}index.html`);
    ready.push(await page.evaluate(() => window.sky.ready.then(() => performance.now())));
    await page.close();
  }
  results.ready_ms = median(ready);
  for (const { name: m, model, type } of files) {
    results.models[m] = {};
    for (const v of VARIANTS) {
      const page = await openPage(ctx, `${site.url}index.html?model=models/${m}.bench.gguf&simd=${v === 'simd' ? 1 : 0}`);
      const isolated = await page.evaluate(() => self.crossOriginIsolated);
      await page.evaluate(() => window.sky.ready);
      // Warm-up: two passes (the engine tiers the module up to its optimizing compiler).
      await page.evaluate((r) => window.sky.bench(r, 2), requests);
      const perCase = requests.map(() => []);
      const native = [];
      const ratios = [];
      const meanRatios = [];
      for (let p = 0; p < PASSES; p++) {
        const t = await page.evaluate(([r, reps]) => window.sky.bench(r, reps), [requests, REPS]);
        t.forEach((ms, i) => perCase[i].push(ms));
        if (NATIVE && type === 'f16') {
          const us = nativeMicros(model, requests.length);
          native.push(us);
          ratios.push((median(t) * 1000) / us.med);
          meanRatios.push((mean(t) * 1000) / us.mean);
        }
      }
      const ms = median(perCase.map(median));
      results.models[m][v] = {
        ms_per_question: Number(ms.toFixed(4)),
        mean_ms_per_question: Number(mean(perCase.map(mean)).toFixed(4)),
        isolated,
      };
      let line = `${m} ${v}: ${ms.toFixed(3)} ms per question (median of ${requests.length} cases)`;
      if (NATIVE && type === 'f16') {
        const r = results.models[m][v];
        r.native_ms_per_question = Number((median(native.map((u) => u.med)) / 1000).toFixed(4));
        r.native_mean_ms_per_question = Number((median(native.map((u) => u.mean)) / 1000).toFixed(4));
        r.wasm_over_native = Number(median(ratios).toFixed(3));
        r.wasm_over_native_means = Number(median(meanRatios).toFixed(3));
        r.pass_ratios = ratios.map((x) => Number(x.toFixed(3)));
        line += `; native f32 ${r.native_ms_per_question.toFixed(3)} ms; WASM / native ${r.wasm_over_native}x (median of ${PASSES} alternated passes: ${r.pass_ratios.join(', ')}); means ${r.mean_ms_per_question} / ${r.native_mean_ms_per_question} ms, ${r.wasm_over_native_means}x`;
      }
      console.log(line);
      await page.close();
    }
  }
} finally {
  await ctx.close();
  await site.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
console.log(JSON.stringify(results, null, 2));
if (JSON_OUT) fs.writeFileSync(JSON_OUT, JSON.stringify(results, null, 2) + '\n');
