// A project of one's own, as a new user makes it: `skyctl init` then `skyctl build` in a temp
// folder, with nothing but the skyctl binary. Its release carries the site (both pages, both
// engine modules); in headless Chromium the demo answers a golden case of the project as
// `skyctl ask` does (within 1e-5) with either module, its picker offers every published file and
// loads the one chosen, and the Bench page shows the project's model.
//
//   cargo build --release -p skyctl && (cd site && npm ci && node --test tests/)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { skyctlBin, serve, launch, openPage, nativeAnswers, diff, maxAbs } from './harness.js';

const TOL = 1e-5;
let tmp;
let release;
let proj;
let tunedProj;
let expected;
let tunedSite;
let site;
let ctx;
let cases;

before(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sky-init-site-'));
  const bin = skyctlBin();
  // Only the binary: PATH without cargo or rustc, so nothing could build the engine.
  const env = { PATH: '/usr/bin:/bin', HOME: tmp };
  execFileSync(bin, ['init', 'proj'], { cwd: tmp, env, stdio: 'ignore' });
  proj = path.join(tmp, 'proj');
  execFileSync(bin, ['build'], { cwd: proj, env, stdio: 'ignore' });
  release = path.join(proj, 'site/public');
  // The same project with a tuned variant published too (the smallest policy within 0.03 of
  // f32 on the project's cases): a file that mixes Q8_0 and float matrices.
  execFileSync(bin, ['init', 'tuned'], { cwd: tmp, env, stdio: 'ignore' });
  tunedProj = path.join(tmp, 'tuned');
  const toml = path.join(tunedProj, 'pipeline.toml');
  const text = fs
    .readFileSync(toml, 'utf8')
    .replace('variants = ["f16", "q8_0"]', 'variants = ["f16", "q8_0", "tuned"]')
    .replace('# tune = { cases = "golden/s1-pico/cases.jsonl", tolerance = 0.03 }', 'tune = { cases = "golden/s1-pico/cases.jsonl", tolerance = 0.03 }')
    .replace('publish = ["f16", "q8_0"]', 'publish = ["f16", "q8_0", "tuned"]');
  assert.match(text, /publish = \["f16", "q8_0", "tuned"\]/);
  assert.match(text, /^tune = /m);
  fs.writeFileSync(toml, text);
  execFileSync(bin, ['build'], { cwd: tunedProj, env, stdio: 'ignore' });
  tunedSite = await serve(path.join(tunedProj, 'site/public'));
  // The project's own golden cases as /v1/systemone requests.
  cases = fs
    .readFileSync(path.join(proj, 'golden/s1-pico/cases.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => {
      const c = JSON.parse(l);
      const q = { type: c.type, instructions: c.instructions };
      if ('criteria' in c) q.criteria = c.criteria;
      return { id: c.id, request: { state: c.state, questions: { [c.id]: q } } };
    });
  // The recorded f32 answers of those cases (golden/s1-pico/expected.jsonl).
  expected = new Map(
    fs
      .readFileSync(path.join(proj, 'golden/s1-pico/expected.jsonl'), 'utf8')
      .split('\n')
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l))
      .map((e) => [e.id, e.probabilities]),
  );
  site = await serve(release);
  ctx = await launch();
});

after(async () => {
  try {
    if (ctx) await ctx.close();
  } finally {
    if (site) await site.close();
    if (tunedSite) await tunedSite.close();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test('the release of an init project carries both pages and both engine modules', () => {
  for (const f of ['index.html', 'bench.html', 'sky-web.simd.wasm', 'sky-web.scalar.wasm', 'models/manifest.json', 'bench.json']) {
    assert.ok(fs.statSync(path.join(release, f)).size > 0, f);
  }
});

for (const [query, simd] of [['', true], ['?simd=0', false]]) {
  test(`the demo answers a golden case of the project as skyctl ask does (${simd ? 'SIMD128' : 'scalar'})`, async (t) => {
    const page = await openPage(ctx, `${site.url}index.html${query}`);
    try {
      const info = await page.evaluate(() => window.sky.ready);
      assert.equal(info.simd, simd);
      assert.equal(info.model, 's1-pico.gguf');
      const [c] = cases;
      const [want] = nativeAnswers(path.join(release, 'models/s1-pico.gguf'), [c]);
      const got = await page.evaluate((r) => window.sky.ask(r), c.request);
      assert.deepEqual(diff(want, got, TOL), [], `case ${c.id}`);
      t.diagnostic(`case ${c.id}: max |browser - native| = ${maxAbs(want, got).toExponential(2)}`);
      assert.deepEqual(page.errors, []);
      assert.deepEqual(page.consoleErrors, []);
    } finally {
      await page.close();
    }
  });
}

test('the demo offers every published file and loads the one picked', async () => {
  const page = await openPage(ctx, `${site.url}index.html`);
  try {
    await page.evaluate(() => window.sky.ready);
    const options = await page.$$eval('#model-pick option', (os) => os.map((o) => ({ value: o.value, selected: o.selected, text: o.textContent })));
    assert.deepEqual(
      options.map((o) => [o.value, o.selected]),
      [
        ['models/s1-pico.gguf', true],
        ['models/s1-pico.q8_0.gguf', false],
      ],
    );
    assert.match(options[1].text, /^s1-pico \(Q8_0, [\d,]+ bytes/);
    assert.equal(await page.textContent('#model-name'), 's1-pico (F16, s1-pico.gguf)');
    assert.equal(await page.textContent('#compute'), 'Answers computed in f32.');
    await Promise.all([page.waitForURL(/model=models%2Fs1-pico\.q8_0\.gguf/), page.selectOption('#model-pick', 'models/s1-pico.q8_0.gguf')]);
    const info = await page.evaluate(() => window.sky.ready);
    assert.equal(info.model, 's1-pico.q8_0.gguf');
    assert.equal(info.model_bytes, fs.statSync(path.join(release, 'models/s1-pico.q8_0.gguf')).size);
    assert.equal(await page.$eval('#model-pick', (s) => s.value), 'models/s1-pico.q8_0.gguf');
    // The page says which path answers: the file's own int8 path, as `skyctl ask` runs it.
    assert.equal(info.compute, 'int8, outlier-aware');
    assert.equal(await page.textContent('#compute'), 'Answers computed in int8, outlier-aware.');
    assert.match(await page.textContent('#engine-line'), /int8, outlier-aware compute \(\d+ matrices in int8, \d+ outlier columns in f32/);
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});

// A few requests besides the golden cases: a score, a yes/no with descriptions, JSON state.
const FREE = [
  { id: 'free_score', request: { state: 'The parcel arrived broken and support hung up on me.', questions: { free_score: { type: 'score', instructions: 'How angry is the customer?', criteria: ['calm', 'annoyed', 'angry', 'furious'] } } } },
  { id: 'free_noul', request: { state: { customer: 'Ana', message: 'Where is my refund?' }, questions: { free_noul: { type: 'noul', instructions: 'Is this about money?', criteria: { true: 'about payments', false: 'about something else' } } } } },
  { id: 'free_choice', request: { state: ['hi', 'my login fails since the update'], questions: { free_choice: { type: 'choice', instructions: 'Which team?', criteria: { billing: 'payments and refunds', technical: 'apps and logins', shipping: null } } } } },
];

// Every published file of a project that publishes a tuned variant too, at both modules: the
// browser answers every golden case of the project and the free requests as `skyctl ask` does
// on the same file: within 1e-3 for an int8 file
// (its integer parts are exact, the f32 parts differ by the order of operations), within 1e-5
// for a float file.
for (const [query, simd] of [['', true], ['&simd=0', false]]) {
  test(`every published file answers as skyctl ask does on it (${simd ? 'SIMD128' : 'scalar'})`, async (t) => {
    const tunedRelease = path.join(tunedProj, 'site/public');
    const manifest = JSON.parse(fs.readFileSync(path.join(tunedRelease, 'models/manifest.json'), 'utf8'));
    const files = manifest.models.flatMap((m) => m.files);
    assert.deepEqual(files.map((f) => f.variant), ['f16', 'q8_0', 'tuned']);
    const all = [...cases, ...FREE];
    for (const f of files) {
      // Q8_0 matrices run in int8 (a Q8_0 token embedding is read as f32 at load).
      const int8 = (f.types.Q8_0 ?? 0) - (f.policy.token_embd === 'Q8_0' ? 1 : 0) > 0;
      const tol = int8 ? 1e-3 : TOL;
      const page = await openPage(ctx, `${tunedSite.url}index.html?model=${encodeURIComponent(f.path)}${query}`);
      try {
        const info = await page.evaluate(() => window.sky.ready);
        assert.equal(info.simd, simd);
        assert.equal(info.compute, int8 ? (f.policy.tensors_with_outliers > 0 ? 'int8, outlier-aware' : 'int8') : 'f32', f.path);
        const want = nativeAnswers(path.join(tunedRelease, f.path), all);
        const got = await page.evaluate(async (reqs) => {
          const out = [];
          for (const r of reqs) out.push(await window.sky.ask(r));
          return out;
        }, all.map((c) => c.request));
        let worst = 0;
        for (let i = 0; i < all.length; i++) {
          const d = diff(want[i], got[i], tol);
          assert.deepEqual(d, [], `${f.path}, ${all[i].id}:\n${d.join('\n')}`);
          worst = Math.max(worst, maxAbs(want[i], got[i]));
        }
        t.diagnostic(`${f.path} (${info.compute}, ${simd ? 'SIMD128' : 'scalar'}): ${all.length} requests, max |browser - native| = ${worst.toExponential(2)} (bound ${tol})`);
        // The file keeps its promise in the browser too: its golden suite's tolerance against
        // the recorded f32 answers (F16: 1e-3, Q8_0: 0.05; tuned: the tolerance it was tuned to).
        const promise = { f16: 1e-3, q8_0: 0.05, tuned: f.tune?.tolerance }[f.variant];
        assert.ok(promise > 0, `${f.path}: a tolerance to keep`);
        let fromGolden = 0;
        for (let i = 0; i < cases.length; i++) {
          const a = got[i].answers[cases[i].id];
          const probs = a.probabilities ? Object.values(a.probabilities) : [1 - a.noul, a.noul];
          const want = expected.get(cases[i].id);
          assert.equal(probs.length, want.length, `${f.path}, ${cases[i].id}: options`);
          probs.forEach((p, j) => (fromGolden = Math.max(fromGolden, Math.abs(p - want[j]))));
        }
        assert.ok(fromGolden <= promise, `${f.path}: ${fromGolden} from the recorded f32 answers, above ${promise}`);
        t.diagnostic(`${f.path}: max |browser - recorded f32| = ${fromGolden.toExponential(2)} (tolerance ${promise})`);
        assert.deepEqual(page.errors, []);
      } finally {
        await page.close();
      }
    }
  });
}

test("the Bench page shows the project's model", async () => {
  const page = await openPage(ctx, `${site.url}bench.html`);
  try {
    await page.evaluate(() => window.benchReady);
    const rows = await page.$$eval('#models-table tbody tr', (trs) => trs.map((tr) => tr.dataset.model));
    assert.deepEqual(rows, ['s1-pico']);
    const manifest = JSON.parse(fs.readFileSync(path.join(release, 'models/manifest.json'), 'utf8'));
    const params = manifest.models[0].parameters;
    assert.ok(params > 0);
    assert.match(await page.textContent('#models-table'), new RegExp(params.toLocaleString('en-US')));
    // The F32 reference the build makes (the Q8_0 file is quantized from it) has its size.
    const f32 = fs.statSync(path.join(proj, 'build/s1-pico/s1-pico.f32.gguf')).size;
    assert.equal(await page.textContent('#models-table td[data-col="bytes-f32"]'), f32.toLocaleString('en-US'));
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});
