// The site in a real browser (Debian's Chromium, headless, driven by playwright-core): the demo
// page's engine against native `skyctl ask` on every golden case, with the SIMD128 and the scalar
// module; the Bench page against bench.json and manifest.json (and a bench.json of nulls); a
// missing and a corrupt model. Screenshots: target/site-screenshots/*.png.
//
//   cargo run --release -p skyctl -- build && (cd site && npm ci && node --test tests/)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import {
  ROOT,
  skyctlBin,
  RELEASE,
  SHOTS,
  serve,
  copyRelease,
  launch,
  openPage,
  goldenCases,
  nativeAnswers,
  diff,
  maxAbs,
} from './harness.js';

const TOL = 1e-5;
const DASH = '\u2014';
let site;
let dir;
let ctx;
let cases;
let native;
let manifest;
let bench;

before(async () => {
  dir = copyRelease();
  // A corrupt model: the real file with its tensor data cut off (the header still parses).
  const model = fs.readFileSync(path.join(dir, 'models/s1-pico.gguf'));
  fs.writeFileSync(path.join(dir, 'models/corrupt.gguf'), model.subarray(0, Math.floor(model.length / 2)));
  fs.writeFileSync(path.join(dir, 'models/garbage.gguf'), Buffer.from('this is not a GGUF file\n'));
  // The same site with every bench.json value null.
  fs.cpSync(RELEASE, path.join(dir, 'nulls'), { recursive: true });
  bench = JSON.parse(fs.readFileSync(path.join(dir, 'bench.json'), 'utf8'));
  manifest = JSON.parse(fs.readFileSync(path.join(dir, 'models/manifest.json'), 'utf8'));
  const nulls = structuredClone(bench);
  for (const modes of Object.values(nulls.models)) for (const k of Object.keys(modes)) modes[k] = null;
  fs.writeFileSync(path.join(dir, 'nulls/bench.json'), JSON.stringify(nulls, null, 2));
  fs.mkdirSync(SHOTS, { recursive: true });
  cases = goldenCases();
  native = nativeAnswers(path.join(RELEASE, 'models/s1-pico.gguf'), cases);
  // Another model for ?model=: s1-nano, converted by the native tool.
  fs.mkdirSync(path.join(dir, 'other'));
  execFileSync(skyctlBin(), ['convert', path.join(ROOT, 'models/s1-nano'), path.join(dir, 'other/s1-nano.gguf')], {
    stdio: 'ignore',
  });
  site = await serve(dir);
  ctx = await launch();
});

after(async () => {
  try {
    if (ctx) await ctx.close();
  } finally {
    if (site) await site.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  }
});

// Every golden case through sky.ask in the page; compared with the native answers.
async function checkAgainstNative(t, query, wantSimd, shot) {
  const page = await openPage(ctx, `${site.url}index.html${query}`);
  try {
    const info = await page.evaluate(() => window.sky.ready);
    assert.equal(info.simd, wantSimd, `module chosen for ${query}`);
    assert.equal(info.module_bytes, fs_size(`sky-web.${wantSimd ? 'simd' : 'scalar'}.wasm`));
    assert.equal(info.model_bytes, fs_size('models/s1-pico.gguf'));
    assert.ok(info.load_ms > 0);
    // The progress bar ended at the model's size.
    const bar = await page.evaluate(() => {
      const p = document.getElementById('progress');
      return { value: p.value, max: p.max };
    });
    assert.equal(bar.max, info.model_bytes);
    assert.equal(bar.value, bar.max);
    assert.equal(await page.evaluate(() => document.characterSet), 'UTF-8');

    const requests = cases.map((c) => c.request);
    const got = await page.evaluate(async (reqs) => {
      const out = [];
      for (const r of reqs) out.push(await window.sky.ask(r));
      return out;
    }, requests);
    assert.equal(got.length, cases.length);
    assert.equal(native.length, cases.length);
    assert.equal(cases.length, 41, 'golden/laya/cases.jsonl has 41 cases');
    let worst = 0;
    for (let i = 0; i < cases.length; i++) {
      const id = cases[i].id;
      const n = native[i];
      const b = got[i];
      const d = diff(n, b, TOL);
      assert.deepEqual(d, [], `case ${id}: browser differs from skyctl ask:\n${d.join('\n')}`);
      const na = n.answers[id];
      const ba = b.answers[id];
      assert.equal(ba.type, na.type, id);
      if (na.type === 'choice') assert.equal(ba.choice, na.choice, `${id}: choice`);
      assert.equal(b.usage.input_tokens, n.usage.input_tokens, `${id}: input_tokens`);
      if (na.probabilities) {
        assert.deepEqual(Object.keys(ba.probabilities), Object.keys(na.probabilities), id);
      }
      worst = Math.max(worst, maxAbs(n, b));
    }
    t.diagnostic(`${query || '(default)'}: ${cases.length} cases, max |browser - native| = ${worst.toExponential(2)}`);

    // The form: one question through the page's own controls.
    await page.fill('#state', 'I was charged twice for my order last week and nobody has replied.');
    await page.selectOption('#qtype', 'choice');
    await page.fill('#instructions', 'Which team should handle this?');
    await page.fill('#options', 'billing: payments and refunds\nshipping\ntechnical');
    await page.click('#ask');
    await page.waitForSelector('#result-card:not([hidden])');
    assert.equal(await page.locator('#bars .bar-row').count(), 3);
    assert.match(await page.textContent('#answer-line'), /Choice: (billing|shipping|technical)/);
    assert.match(await page.textContent('#latency'), /\d+\.\d\d ms in the browser · \d+ input tokens/);
    await page.screenshot({ path: path.join(SHOTS, shot), fullPage: true });
    // A score and a yes/no question through the form.
    await page.selectOption('#qtype', 'score');
    await page.fill('#instructions', 'How angry is the customer?');
    await page.fill('#options', 'calm\nannoyed\nangry\nfurious');
    await page.click('#ask');
    await page.waitForFunction(() => /^Score: /.test(document.getElementById('answer-line').textContent));
    assert.equal(await page.locator('#bars .bar-row').count(), 4);
    await page.selectOption('#qtype', 'noul');
    await page.fill('#instructions', 'Is the customer angry?');
    await page.fill('#options', '');
    await page.click('#ask');
    await page.waitForFunction(() => /^(Yes|No): P\(yes\) = /.test(document.getElementById('answer-line').textContent));
    assert.equal(await page.locator('#bars .bar-row').count(), 2);
    await page.screenshot({ path: path.join(SHOTS, shot.replace('.png', '-noul.png')), fullPage: true });
    assert.deepEqual(page.errors, [], 'page errors');
    assert.deepEqual(page.consoleErrors, [], 'console errors');
  } finally {
    await page.close();
  }
}

function fs_size(rel) {
  return fs.statSync(path.join(dir, rel)).size;
}

test('the SIMD128 module answers every golden case as skyctl ask does', async (t) => {
  await checkAgainstNative(t, '', true, 'demo-simd.png');
});

test('the scalar module answers every golden case as skyctl ask does', async (t) => {
  await checkAgainstNative(t, '?simd=0', false, 'demo-scalar.png');
});

test('the page shows the model name and size before fetching, and refuses a bad request in words', async () => {
  const page = await openPage(ctx, `${site.url}index.html`);
  try {
    await page.evaluate(() => window.sky.ready);
    // From models/manifest.json: the model, its variant and its file.
    assert.equal(await page.textContent('#model-name'), 's1-pico (F16, s1-pico.gguf)');
    const size = fs_size('models/s1-pico.gguf').toLocaleString('en-US');
    assert.match(await page.textContent('#model-size'), new RegExp(`${size} bytes`));
    // sky.ask rejects with the spec's error object, as skyctl ask --json prints it.
    const err = await page.evaluate(() =>
      window.sky.ask({ state: 'x', questions: { q: { type: 'choice', instructions: 'which?' } } }).then(
        () => null,
        (e) => ({ message: e.message, response: e.response }),
      ),
    );
    assert.ok(err, 'a choice without criteria is refused');
    assert.equal(err.response.error.code, 400);
    assert.equal(err.response.error.type, 'invalid_request_error');
    // The same through the form: no options for a choice question.
    await page.fill('#options', '');
    await page.click('#ask');
    await page.waitForSelector('#error:not([hidden])');
    assert.match(await page.textContent('#error'), /criteria/);
    await page.screenshot({ path: path.join(SHOTS, 'demo-bad-request.png'), fullPage: true });
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});

test('?model=URL loads another GGUF, and answers as skyctl ask does on it', async () => {
  const file = path.join(dir, 'other/s1-nano.gguf');
  const page = await openPage(ctx, `${site.url}index.html?model=${encodeURIComponent(`${site.url}other/s1-nano.gguf`)}`);
  try {
    const info = await page.evaluate(() => window.sky.ready);
    assert.equal(info.model, 's1-nano.gguf');
    assert.equal(info.model_bytes, fs.statSync(file).size);
    assert.match(await page.textContent('#model-name'), /s1-nano\.gguf/);
    assert.match(await page.textContent('#model-size'), new RegExp(`${info.model_bytes.toLocaleString('en-US')} bytes`));
    const some = cases.slice(0, 5);
    const want = nativeAnswers(file, some);
    const got = await page.evaluate(async (reqs) => Promise.all(reqs.map((r) => window.sky.ask(r))), some.map((c) => c.request));
    assert.equal(got.length, want.length);
    for (let i = 0; i < some.length; i++) assert.deepEqual(diff(want[i], got[i], TOL), [], some[i].id);
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});

for (const [label, model, pattern] of [
  ['a missing model', 'models/missing.gguf', /HTTP 404/],
  ['a corrupt model', 'models/corrupt.gguf', /could not be loaded/],
  ['a file that is not GGUF', 'models/garbage.gguf', /could not be loaded/],
]) {
  test(`${label} shows a visible error and rejects sky.ready`, async () => {
    const page = await openPage(ctx, `${site.url}index.html?model=${encodeURIComponent(model)}`);
    try {
      const outcome = await page.evaluate(() =>
        window.sky.ready.then(
          () => ({ ok: true }),
          (e) => ({ ok: false, message: e.message }),
        ),
      );
      assert.equal(outcome.ok, false, 'sky.ready rejected');
      assert.match(outcome.message, pattern);
      const error = page.locator('#error');
      await error.waitFor({ state: 'visible' });
      assert.match(await error.textContent(), pattern);
      assert.ok(await error.isVisible());
      assert.equal(await page.locator('#ask').isDisabled(), true);
      await page.screenshot({ path: path.join(SHOTS, `demo-${path.basename(model, '.gguf')}.png`), fullPage: true });
      assert.deepEqual(page.errors, [], 'no uncaught page errors');
    } finally {
      await page.close();
    }
  });
}

function fmt(v, digits = 1) {
  if (v === null || v === undefined || typeof v !== 'number' || !Number.isFinite(v)) return DASH;
  return v.toLocaleString('en-US', { maximumFractionDigits: digits });
}

async function tableCells(page) {
  return page.evaluate(() =>
    [...document.querySelectorAll('#models-table tbody tr')].map((tr) => ({
      model: tr.dataset.model,
      cells: Object.fromEntries([...tr.querySelectorAll('td[data-col]')].map((td) => [td.dataset.col, td.textContent])),
      text: tr.textContent,
    })),
  );
}

test('the Bench page shows bench.json and manifest.json, and measures this browser', async () => {
  const page = await openPage(ctx, `${site.url}bench.html?iters=1`);
  try {
    await page.evaluate(() => window.benchReady);
    assert.equal(await page.evaluate(() => document.characterSet), 'UTF-8');
    const rows = await tableCells(page);
    assert.deepEqual(
      rows.map((r) => r.model),
      manifest.models.map((m) => m.name),
    );
    for (const m of manifest.models) {
      const row = rows.find((r) => r.model === m.name);
      assert.equal(row.cells.parameters, fmt(m.parameters, 0), `${m.name} parameters`);
      assert.ok(m.parameters > 0);
      for (const v of m.variants) assert.equal(row.cells[`bytes-${v.variant}`], fmt(v.bytes, 0), `${m.name} ${v.variant}`);
      for (const [mode, us] of Object.entries(bench.models[m.name])) {
        assert.equal(row.cells[`native-${mode}`], fmt(us), `${m.name} ${mode}`);
      }
      assert.equal(row.cells.browser, DASH);
      // Every native timing names the CPU, the instruction set and the threads that made it.
      const on = bench.measured[m.name];
      assert.ok(on && typeof on.cpu === 'string' && on.cpu.length > 0, `${m.name}: measured on`);
      assert.match(on.isa, /^(scalar|avx2|avx-vnni|avx512)$/, `${m.name}: isa`);
      assert.ok(Number.isInteger(on.threads) && on.threads >= 1, `${m.name}: threads`);
      assert.equal(row.cells.measured, `${on.isa}, ${on.threads} thread${on.threads === 1 ? '' : 's'}`);
      assert.ok((await page.textContent('#machine-note')).includes(on.cpu), `${m.name}: the CPU on the page`);
    }
    assert.ok((await page.locator('#chart svg rect').count()) > 0, 'a chart');
    await page.click('#measure');
    await page.waitForSelector('body[data-measured="true"]', { timeout: 120_000 });
    const after = await tableCells(page);
    for (const m of manifest.models) {
      const cell = after.find((r) => r.model === m.name).cells.browser;
      if (m.files.length > 0) assert.match(cell, /^[\d,]+(\.\d)?$/, `${m.name}: browser latency`);
      else assert.equal(cell, DASH, `${m.name}: not published, not measured`);
    }
    await page.screenshot({ path: path.join(SHOTS, 'bench.png'), fullPage: true });
    assert.deepEqual(page.errors, []);
    assert.deepEqual(page.consoleErrors, []);
  } finally {
    await page.close();
  }
});

test('the Bench page shows an em dash for every null of bench.json', async () => {
  const page = await openPage(ctx, `${site.url}nulls/bench.html`);
  try {
    await page.evaluate(() => window.benchReady);
    const rows = await tableCells(page);
    assert.equal(rows.length, manifest.models.length);
    for (const r of rows) {
      for (const [col, text] of Object.entries(r.cells)) {
        if (col.startsWith('native-') || col === 'browser') assert.equal(text, DASH, `${r.model} ${col}`);
      }
      assert.doesNotMatch(r.text, /null|NaN|undefined/);
    }
    const table = await page.textContent('#models-table');
    assert.doesNotMatch(table, /null|NaN|undefined/);
    assert.match(await page.textContent('#chart'), new RegExp(DASH));
    await page.screenshot({ path: path.join(SHOTS, 'bench-nulls.png'), fullPage: true });
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});
