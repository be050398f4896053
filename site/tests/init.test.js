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
let site;
let ctx;
let cases;

before(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sky-init-site-'));
  const bin = skyctlBin();
  // Only the binary: PATH without cargo or rustc, so nothing could build the engine.
  const env = { PATH: '/usr/bin:/bin', HOME: tmp };
  execFileSync(bin, ['init', 'proj'], { cwd: tmp, env, stdio: 'ignore' });
  const proj = path.join(tmp, 'proj');
  execFileSync(bin, ['build'], { cwd: proj, env, stdio: 'ignore' });
  release = path.join(proj, 'site/public');
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
  site = await serve(release);
  ctx = await launch();
});

after(async () => {
  try {
    if (ctx) await ctx.close();
  } finally {
    if (site) await site.close();
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
    await Promise.all([page.waitForURL(/model=models%2Fs1-pico\.q8_0\.gguf/), page.selectOption('#model-pick', 'models/s1-pico.q8_0.gguf')]);
    const info = await page.evaluate(() => window.sky.ready);
    assert.equal(info.model, 's1-pico.q8_0.gguf');
    assert.equal(info.model_bytes, fs.statSync(path.join(release, 'models/s1-pico.q8_0.gguf')).size);
    assert.equal(await page.$eval('#model-pick', (s) => s.value), 'models/s1-pico.q8_0.gguf');
    // Natively a Q8_0 file runs its matrix products in int8; the browser engine decodes it to
    // f32. So the answer has the native one's shape, with probabilities within int8's error.
    const [c] = cases;
    const [want] = nativeAnswers(path.join(release, 'models/s1-pico.q8_0.gguf'), [c]);
    const got = await page.evaluate((r) => window.sky.ask(r), c.request);
    assert.deepEqual(diff(want.answers[c.id].probabilities, got.answers[c.id].probabilities, 0.02), [], `case ${c.id} on the Q8_0 file`);
    assert.deepEqual(Object.keys(got.answers[c.id]), Object.keys(want.answers[c.id]));
    assert.equal(got.usage.input_tokens, want.usage.input_tokens);
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});

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
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});
