// The site in a real browser (Debian's Chromium, headless, driven by playwright-core): the demo
// page's engine against native `skyctl ask` on every golden case, with the SIMD128 and the scalar
// module; the Bench page against bench.json and manifest.json (and a bench.json of nulls); a
// missing and a corrupt model; the form's refusals, score bars, long options and small files;
// both pages at 390 and 1280 px. Screenshots: target/site-screenshots/*.png.
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
  // The same site with a wide spread on one timing (rounds 30% apart) and a narrow one on
  // another: the first must be marked noisy, the second not.
  fs.cpSync(RELEASE, path.join(dir, 'noisy'), { recursive: true });
  const noisy = structuredClone(bench);
  const first = Object.keys(noisy.models)[0];
  noisy.models[first].f32 = 1000;
  noisy.models[first].q8_0 = 1200;
  noisy.spread ??= {};
  for (const [name, modes] of Object.entries(noisy.models)) {
    noisy.spread[name] = {};
    for (const [mode, us] of Object.entries(modes)) {
      noisy.spread[name][mode] = us === null ? null : { min: us * 0.99, max: us * 1.01, rounds: 5 };
    }
  }
  noisy.spread[first].f32 = { min: 850, max: 1150, rounds: 5 };
  noisy.spread[first].q8_0 = { min: 1190, max: 1215, rounds: 5 };
  fs.writeFileSync(path.join(dir, 'noisy/bench.json'), JSON.stringify(noisy, null, 2));
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
    // The card opens before the engine answers: wait for the answer itself (the scalar
    // module can take longer than a glance).
    await page.waitForFunction(() => /^Choice: /.test(document.getElementById('answer-line').textContent));
    assert.equal(await page.locator('#bars .bar-row').count(), 3);
    assert.match(await page.textContent('#answer-line'), /Choice: (billing|shipping|technical)/);
    // Not the engine's first answer (the golden cases came before): no warm-up mark.
    assert.match(await page.textContent('#latency'), /^\d+\.\d\d ms in the browser · \d+ input tokens · f32$/);
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
    // The same through the form: no options for a choice question, said where the answer goes
    // and in the form's words (the person typed options, not `criteria`).
    await page.fill('#options', '');
    await page.click('#ask');
    await page.waitForSelector('#answer-error:not([hidden])');
    assert.equal(await page.textContent('#answer-error'), 'Options: a choice question needs at least two options, found 0');
    assert.equal(await page.locator('#error').isVisible(), false, 'the Model card shows no request error');
    await page.screenshot({ path: path.join(SHOTS, 'demo-bad-request.png'), fullPage: true });
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});

// The demo's form, and the answer card that shows what comes back.
async function askForm(page, { type = 'choice', instructions = 'Which team should handle this?', options }) {
  await page.selectOption('#qtype', type);
  await page.fill('#instructions', instructions);
  await page.fill('#options', options);
  // The answer area changes on every ask: wait for a different answer line or error text.
  const before = await page.evaluate(() => document.getElementById('result-card').textContent);
  await page.click('#ask');
  await page.waitForFunction((b) => {
    const card = document.getElementById('result-card');
    return !card.hidden && card.textContent !== b;
  }, before);
  return page.evaluate(() => ({
    error: document.getElementById('answer-error').hidden ? null : document.getElementById('answer-error').textContent,
    answerVisible: !document.getElementById('answer').hidden && document.getElementById('answer').offsetHeight > 0,
    line: document.getElementById('answer-line').textContent,
    bars: [...document.querySelectorAll('#bars .bar-label')].map((b) => b.textContent),
    response: document.getElementById('response').textContent,
    modelError: !document.getElementById('error').hidden,
  }));
}

// What `skyctl ask --json` prints for one request: the answer, or the error object (printed
// on stdout, with a non-zero exit).
function cliAnswer(model, request) {
  const file = path.join(dir, 'cli-request.json');
  fs.writeFileSync(file, JSON.stringify(request));
  let out;
  try {
    out = execFileSync(skyctlBin(), ['ask', model, '--request', file, '--json'], { stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    assert.ok(e.status !== 0 && e.stdout.length > 0, `skyctl ask failed without an error object: ${e.stderr}`);
    out = e.stdout;
  }
  return JSON.parse(out.toString('utf8'));
}

test("the form refuses what skyctl ask refuses, with the CLI's message in the form's words", async () => {
  const model = path.join(dir, 'models/s1-pico.gguf');
  const page = await openPage(ctx, `${site.url}index.html`);
  try {
    await page.evaluate(() => window.sky.ready);
    // `null` as state: the JSON null, which the CLI refuses.
    const cliNull = cliAnswer(model, { state: null, questions: { q: { type: 'choice', instructions: 'Which?', criteria: ['a', 'b'] } } });
    assert.equal(cliNull.error.message, 'state: null (any JSON value except null)');
    await page.fill('#state', 'null');
    let got = await askForm(page, { options: 'billing\nshipping' });
    assert.equal(got.error, 'State: null (any JSON value except null)');
    assert.equal(got.answerVisible, false);
    // A state that starts like JSON but does not parse: refused, never sent as text.
    await page.fill('#state', '{"customer": "Ana", "message": ');
    got = await askForm(page, { options: 'billing\nshipping' });
    assert.equal(
      got.error,
      'State: starts like JSON but is not valid JSON (line 1, column 30: EOF while parsing a value); fix the JSON, or write the state as plain text',
    );
    // A noul question with options: sent as typed, so refused as the CLI refuses such criteria.
    await page.fill('#state', 'I was charged twice.');
    const cliNoul = cliAnswer(model, { state: 'x', questions: { q: { type: 'noul', instructions: 'Angry?', criteria: ['yes', 'no'] } } });
    const why = "a noul question takes criteria as an object with optional 'true' / 'false' descriptions, or omits it";
    assert.equal(cliNoul.error.message, `questions.q.criteria: ${why}`);
    got = await askForm(page, { type: 'noul', instructions: 'Is the customer angry?', options: 'yes\nno' });
    assert.equal(got.error, `Options: ${why.replace('criteria', 'options')}`);
    // true / false descriptions are a noul question's options, answered.
    got = await askForm(page, { type: 'noul', instructions: 'Is the customer angry?', options: 'true: angry\nfalse: calm' });
    assert.equal(got.error, null);
    assert.match(got.line, /^(Yes|No): P\(yes\) = /);
    // An empty question: the CLI answers it (Laya's golden case c2_empty does), so the form does.
    const empty = { state: 'I was charged twice.', questions: { q: { type: 'choice', instructions: '', criteria: ['billing', 'shipping'] } } };
    const cliEmpty = cliAnswer(model, empty);
    assert.ok(cliEmpty.answers, `the CLI answers an empty question: ${JSON.stringify(cliEmpty)}`);
    got = await askForm(page, { instructions: '', options: 'billing\nshipping' });
    assert.equal(got.error, null);
    assert.deepEqual(diff(cliEmpty, JSON.parse(got.response), TOL), []);
    await page.screenshot({ path: path.join(SHOTS, 'demo-refusals.png'), fullPage: true });
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});

test('the page title names the project, and the first answer is marked as including the warm-up', async () => {
  const page = await openPage(ctx, `${site.url}index.html`);
  try {
    await page.evaluate(() => window.sky.ready);
    assert.equal(await page.title(), 'skyctl · Laya in your browser');
    const first = await askForm(page, { options: 'billing\nshipping\ntechnical' });
    assert.equal(first.error, null);
    assert.match(await page.textContent('#latency'), /^\d+\.\d\d ms in the browser \(first answer: includes the warm-up\) · \d+ input tokens · f32$/);
    assert.equal(await page.getAttribute('#latency', 'data-first'), 'true');
    const second = await askForm(page, { options: 'billing\nshipping' });
    assert.equal(second.error, null);
    assert.match(await page.textContent('#latency'), /^\d+\.\d\d ms in the browser · \d+ input tokens · f32$/);
    assert.equal(await page.getAttribute('#latency', 'data-first'), 'false');
    const bench = await openPage(ctx, `${site.url}bench.html`);
    try {
      assert.equal(await bench.title(), 'skyctl · Bench');
    } finally {
      await bench.close();
    }
  } finally {
    await page.close();
  }
});

test('at 390 px the Question field is whole, inside its card', async () => {
  const page = await openPage(ctx, `${site.url}index.html`);
  try {
    await page.setViewportSize({ width: 390, height: 900 });
    await page.evaluate(() => window.sky.ready);
    const box = await page.evaluate(() => {
      const card = document.getElementById('ask-form').getBoundingClientRect();
      const q = document.getElementById('instructions');
      const r = q.getBoundingClientRect();
      return { left: r.left, right: r.right, width: r.width, cardLeft: card.left, cardRight: card.right, scroll: q.scrollWidth, client: q.clientWidth };
    });
    assert.ok(box.left >= box.cardLeft - 0.5 && box.right <= box.cardRight + 0.5, `inside the form: ${JSON.stringify(box)}`);
    // As wide as the form: the default question shows whole.
    assert.ok(box.width >= box.cardRight - box.cardLeft - 1, `full width: ${JSON.stringify(box)}`);
    assert.ok(box.scroll <= box.client, `the default question is not cut: ${JSON.stringify(box)}`);
    await page.screenshot({ path: path.join(SHOTS, 'demo-390-form.png'), fullPage: true });
  } finally {
    await page.close();
  }
});

test('?model= a file the release does not publish: the picker shows that file, not a published one', async () => {
  const page = await openPage(ctx, `${site.url}index.html?model=models/nope.gguf`);
  try {
    await page.evaluate(() => window.sky.ready.catch(() => null));
    await page.waitForFunction(() => document.querySelectorAll('#model-pick option').length > 0);
    const picked = await page.$eval('#model-pick', (s) => ({ value: s.value, text: s.selectedOptions[0]?.textContent, index: s.selectedIndex }));
    assert.deepEqual(picked, { value: 'models/nope.gguf', text: 'nope.gguf (not published here)', index: 0 });
    const published = await page.$$eval('#model-pick option:not([data-unpublished])', (os) => os.map((o) => o.selected));
    assert.ok(published.length > 0 && published.every((sel) => !sel), 'no published file shown as chosen');
    assert.match(await page.textContent('#error'), /HTTP 404/);
  } finally {
    await page.close();
  }
});

// An option whose text is ~70 tokens: over the 48 that fit, so the engine refuses it.
const LONG_BILLING = `billing: ${'payments, refunds, invoices and double charges on the card; '.repeat(6).trim()}`;

test('a refused request shows its error where the answer goes, in the words of the form, and clears the old answer', async () => {
  const page = await openPage(ctx, `${site.url}index.html`);
  try {
    await page.evaluate(() => window.sky.ready);
    const ok = await askForm(page, { options: 'billing: payments and refunds\nshipping\ntechnical' });
    assert.equal(ok.error, null);
    assert.equal(ok.bars.length, 3);
    assert.ok(ok.answerVisible);

    // The engine's own words name the request's field...
    const options = `shipping\n${LONG_BILLING}\ntechnical`;
    const raw = await page.evaluate(
      (crit) =>
        window.sky.ask({ state: 'x', questions: { q: { type: 'choice', instructions: 'Which team?', criteria: crit } } }).then(
          () => null,
          (e) => e.message,
        ),
      Object.fromEntries(options.split('\n').map((l) => [l.split(':')[0], l.includes(':') ? l.slice(l.indexOf(':') + 1).trim() : null])),
    );
    const m = /^questions\.q\.criteria: option `billing` is (\d+) tokens long; at most 48 tokens fit per option: shorten it$/.exec(raw);
    assert.ok(m, `the engine refuses the long option: ${raw}`);
    // ...the page speaks of the option the person typed, in the answer's place.
    const bad = await askForm(page, { options });
    assert.equal(bad.error, `Option 2 (\u201cbilling\u201d) is ${m[1]} tokens long; at most 48 fit: shorten it`);
    assert.equal(bad.answerVisible, false, 'the previous answer is hidden');
    assert.deepEqual(bad.bars, [], 'the previous bars are gone');
    assert.equal(bad.line, '');
    assert.equal(bad.response, '');
    assert.equal(bad.modelError, false, 'the Model card shows no request error');
    assert.ok(await page.locator('#answer-error').isVisible());
    // A repeated label names both lines.
    const twice = await askForm(page, { options: 'billing\nshipping\nbilling' });
    assert.equal(twice.error, 'Option 3 (\u201cbilling\u201d) is given twice (also option 1)');
    // The next good request replaces the error with its answer.
    const again = await askForm(page, { options: 'billing: payments and refunds\nshipping\ntechnical' });
    assert.equal(again.error, null);
    assert.equal(await page.locator('#answer-error').isVisible(), false);
    assert.ok(again.answerVisible);
    assert.equal(again.bars.length, 3);
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});

test('score bars carry the level texts as typed', async () => {
  const page = await openPage(ctx, `${site.url}index.html`);
  try {
    await page.evaluate(() => window.sky.ready);
    const levels = ['calm', 'annoyed', 'angry', 'furious'];
    const got = await askForm(page, { type: 'score', instructions: 'How angry is the customer?', options: levels.join('\n') });
    assert.equal(got.error, null);
    assert.match(got.line, /^Score: \d\.\d{3} on 0–3$/);
    assert.deepEqual(got.bars, levels);
    // The bars' values are the response's probabilities of levels 0..3, in order.
    const probs = Object.values(JSON.parse(got.response).answers.q.probabilities).map((p) => p.toFixed(3));
    const shown = await page.evaluate(() => [...document.querySelectorAll('#bars .bar-value')].map((b) => b.textContent));
    assert.deepEqual(shown, probs);
    await page.screenshot({ path: path.join(SHOTS, 'demo-score.png'), fullPage: true });
    // A level too long: the engine names it by index (`option `1``), the page by its text.
    const long = 'very '.repeat(60).trim();
    const bad = await askForm(page, { type: 'score', instructions: 'How angry?', options: `calm\n${long}\nfurious` });
    assert.match(bad.error, /^Option 2 \(\u201cvery very .*\u2026\u201d\) is \d+ tokens long; at most 48 fit: shorten it$/);
    assert.deepEqual(bad.bars, []);
  } finally {
    await page.close();
  }
});

// Nothing wider than the window: the page never scrolls sideways.
async function pageOverflow(page) {
  return page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, inner: window.innerWidth }));
}

for (const width of [390, 1280]) {
  test(`the demo at ${width} px: long options, refused or answered, stay inside the window`, async () => {
    const page = await openPage(ctx, `${site.url}index.html`);
    try {
      await page.setViewportSize({ width, height: 900 });
      await page.evaluate(() => window.sky.ready);
      let o = await pageOverflow(page);
      assert.ok(o.scroll <= o.inner, `the form fits: ${o.scroll} > ${o.inner}`);
      // 600 characters with no space to break at: refused (too many tokens), quoted shortly.
      const long = 'x'.repeat(600);
      const bad = await askForm(page, { options: `${long}\nshipping\ntechnical` });
      assert.match(bad.error, /^Option 1 \(\u201cx{59}\u2026\u201d\) is \d+ tokens long; at most 48 fit: shorten it$/);
      o = await pageOverflow(page);
      assert.ok(o.scroll <= o.inner, `with the refusal: ${o.scroll} > ${o.inner}`);
      await page.screenshot({ path: path.join(SHOTS, `demo-${width}-refused.png`), fullPage: true });
      // 600 characters that fit (600 dashes are a few dozen tokens), no space in them either:
      // answered, as a bar label and maybe as the choice.
      const label = '-'.repeat(600);
      const ok = await askForm(page, { options: `${label}\nshipping\ntechnical` });
      assert.equal(ok.error, null, `the long label fits: ${ok.error}`);
      assert.deepEqual(ok.bars, [label, 'shipping', 'technical']);
      o = await pageOverflow(page);
      assert.ok(o.scroll <= o.inner, `with the answer: ${o.scroll} > ${o.inner}`);
      const rows = await page.evaluate(() =>
        [...document.querySelectorAll('#bars .bar-row')].map((r) => {
          const box = r.getBoundingClientRect();
          const card = document.getElementById('result-card').getBoundingClientRect();
          const track = r.querySelector('.bar-track').getBoundingClientRect();
          return { left: box.left, right: box.right, height: box.height, cardLeft: card.left, cardRight: card.right, track: track.width };
        }),
      );
      for (const r of rows) {
        assert.ok(r.left >= r.cardLeft && r.right <= r.cardRight, `a bar row inside its card: ${JSON.stringify(r)}`);
        assert.ok(r.track >= 40, `the bar keeps room to show: ${r.track}`);
        // The label is clamped to three lines (the whole text is its title).
        assert.ok(r.height < 70, `a bar row stays a few lines high: ${r.height}`);
      }
      await page.screenshot({ path: path.join(SHOTS, `demo-${width}.png`), fullPage: true });
      assert.deepEqual(page.errors, []);
    } finally {
      await page.close();
    }
  });
}

test('a file under 1 KiB shows its bytes, not "0 KiB"', async () => {
  fs.writeFileSync(path.join(dir, 'models/tiny.gguf'), Buffer.alloc(454, 7));
  const page = await openPage(ctx, `${site.url}index.html?model=models/tiny.gguf`);
  try {
    await page.evaluate(() => window.sky.ready.catch(() => null));
    await page.waitForFunction(() => document.getElementById('model-size').textContent !== 'size unknown');
    assert.equal(await page.textContent('#model-size'), '454 bytes to download');
    const shown = await page.evaluate(async () => {
      const { formatBytes } = await import('./sky.js');
      return [0, 1, 454, 1023, 1024, 1536, 545280, 5 * 1024 * 1024].map(formatBytes);
    });
    assert.deepEqual(shown, [
      '0 bytes',
      '1 byte',
      '454 bytes',
      '1,023 bytes',
      '1,024 bytes (1.0 KiB)',
      '1,536 bytes (1.5 KiB)',
      '545,280 bytes (533 KiB)',
      '5,242,880 bytes (5.0 MiB)',
    ]);
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
      // A timing cell: its median (the spread is under it, in its own span).
      cells: Object.fromEntries([...tr.querySelectorAll('td[data-col]')].map((td) => [td.dataset.col, (td.querySelector('.value') ?? td).textContent])),
      spreads: Object.fromEntries([...tr.querySelectorAll('td[data-col] .spread')].map((sp) => [sp.parentElement.dataset.col, sp.textContent])),
      noisy: [...tr.querySelectorAll('td[data-noisy="true"]')].map((td) => td.dataset.col),
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
        // Every timing with its spread over rounds: the fastest and the slowest round.
        const sp = bench.spread[m.name][mode];
        if (us === null) assert.equal(sp, null, `${m.name} ${mode}: no spread without a timing`);
        else {
          assert.ok(sp.min <= us && us <= sp.max, `${m.name} ${mode}: ${sp.min} <= ${us} <= ${sp.max}`);
          const noisy = (sp.max - sp.min) / us > 0.1;
          const short = (v) => fmt(v, Math.abs(v) >= 100 ? 0 : 1);
          assert.equal(row.spreads[`native-${mode}`], `${short(sp.min)}–${short(sp.max)}${noisy ? ' noisy' : ''}`);
          assert.equal(row.noisy.includes(`native-${mode}`), noisy);
        }
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

test('the Bench page gives each timing its spread and marks a wide one noisy', async () => {
  const page = await openPage(ctx, `${site.url}noisy/bench.html`);
  try {
    await page.evaluate(() => window.benchReady);
    const rows = await tableCells(page);
    const [row] = rows;
    for (const r of rows.slice(1)) assert.deepEqual(r.noisy, [], `${r.model}: narrow spreads`);
    assert.equal(row.cells['native-f32'], '1,000');
    assert.equal(row.spreads['native-f32'], '850–1,150 noisy');
    assert.equal(row.cells['native-q8_0'], '1,200');
    assert.equal(row.spreads['native-q8_0'], '1,190–1,215');
    assert.deepEqual(row.noisy, ['native-f32']);
    const title = await page.getAttribute(`tr[data-model="${row.model}"] td[data-col="native-f32"]`, 'title');
    assert.match(title, /fastest round 850 µs, slowest 1,150 µs \(30\.0% apart\): noisy/);
    // In the chart: the noisy bar faded and labelled so, a whisker from fastest to slowest round.
    const chart = await page.evaluate(() => ({
      noisyBars: [...document.querySelectorAll('#chart rect[data-noisy="true"]')].map((r) => Number(r.dataset.value)),
      whiskers: [...document.querySelectorAll('#chart line.whisker')].map((l) => [Number(l.dataset.min), Number(l.dataset.max)]),
      labels: [...document.querySelectorAll('#chart text.noisy')].map((t) => t.textContent),
    }));
    assert.deepEqual(chart.noisyBars, [1000]);
    assert.ok(chart.whiskers.some(([a, b]) => a === 850 && b === 1150), JSON.stringify(chart.whiskers));
    assert.ok(chart.whiskers.some(([a, b]) => a === 1190 && b === 1215), JSON.stringify(chart.whiskers));
    assert.deepEqual(chart.labels, ['1,000 µs noisy']);
    await page.screenshot({ path: path.join(SHOTS, 'bench-noisy.png'), fullPage: true });
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});

for (const width of [390, 1280]) {
  test(`the Bench page at ${width} px: an axis under the chart, nothing cut off`, async () => {
    const page = await openPage(ctx, `${site.url}bench.html`);
    try {
      await page.setViewportSize({ width, height: 900 });
      await page.evaluate(() => window.benchReady);
      // The chart is redrawn at the new width.
      await page.waitForFunction(() => {
        const el = document.getElementById('chart');
        return Number(el.dataset.width) === Math.max(280, Math.floor(el.clientWidth));
      });
      const chart = await page.evaluate(() => {
        const svg = document.querySelector('#chart svg');
        const ticks = [...svg.querySelectorAll('.axis .tick')].map((t) => ({
          v: Number(t.dataset.value),
          x: Number(t.querySelector('line').getAttribute('x1')),
          label: t.querySelector('text')?.textContent ?? null,
        }));
        const bars = [...svg.querySelectorAll('rect[data-value]')].map((r) => ({
          v: Number(r.dataset.value),
          right: Number(r.getAttribute('x')) + Number(r.getAttribute('width')),
        }));
        const box = svg.getBoundingClientRect();
        const text = [...svg.querySelectorAll('text')].map((t) => t.getBoundingClientRect());
        return {
          ticks,
          bars,
          title: svg.querySelector('.axis-title')?.textContent,
          drawn: box.width,
          viewBox: svg.viewBox.baseVal.width,
          card: document.getElementById('chart').getBoundingClientRect().width,
          textOut: text.filter((r) => r.left < box.left - 0.5 || r.right > box.right + 0.5).length,
        };
      });
      // Ticks: labelled, increasing, evenly spaced in log10 (the scale the bars are drawn on).
      const labelled = chart.ticks.filter((t) => t.label !== null);
      assert.ok(labelled.length >= 2, `axis tick labels: ${JSON.stringify(chart.ticks)}`);
      for (const t of labelled) assert.equal(t.label, fmt(t.v, 2));
      assert.equal(chart.title, 'µs per question (log scale)');
      const [a, b] = [chart.ticks[0], chart.ticks[chart.ticks.length - 1]];
      assert.ok(b.v > a.v && b.x > a.x);
      const xOf = (v) => a.x + ((Math.log10(v) - Math.log10(a.v)) / (Math.log10(b.v) - Math.log10(a.v))) * (b.x - a.x);
      for (const t of chart.ticks) assert.ok(Math.abs(t.x - xOf(t.v)) < 0.5, `tick ${t.v} on the log scale`);
      // Each bar ends where the axis puts its value, inside the axis' range.
      assert.ok(chart.bars.length > 0);
      for (const r of chart.bars) {
        assert.ok(r.v >= a.v && r.v <= b.v, `${r.v} within the axis ${a.v}..${b.v}`);
        // (A bar is at least 2 px long, so one at the axis' start still shows.)
        assert.ok(Math.abs(r.right - Math.max(xOf(r.v), a.x + 2)) < 0.5, `bar of ${r.v} ends at its value`);
      }
      // Drawn at its own width (not a shrunken 820-wide picture: the text stays 12 px), all
      // text inside it.
      assert.ok(Math.abs(chart.drawn - chart.viewBox) < 1, `chart drawn at 1:1: ${chart.drawn} vs ${chart.viewBox}`);
      assert.ok(chart.drawn <= chart.card + 0.5);
      assert.equal(chart.textOut, 0, 'chart text inside the chart');

      // The page never scrolls sideways; the table fits or scrolls in its own box, whose last
      // column can be scrolled into view.
      const o = await pageOverflow(page);
      assert.ok(o.scroll <= o.inner, `page width ${o.scroll} > ${o.inner}`);
      const table = await page.evaluate(() => {
        const wrap = document.querySelector('.table-wrap');
        wrap.scrollLeft = wrap.scrollWidth;
        const w = wrap.getBoundingClientRect();
        const ths = [...document.querySelectorAll('#models-table thead th')];
        const lastTh = ths[ths.length - 1].getBoundingClientRect();
        return {
          fits: wrap.scrollWidth <= wrap.clientWidth,
          overflowX: getComputedStyle(wrap).overflowX,
          wrapRight: w.right,
          lastRight: lastTh.right,
          lastText: ths[ths.length - 1].textContent,
          inner: window.innerWidth,
        };
      });
      assert.ok(table.fits || ['auto', 'scroll'].includes(table.overflowX), `table cut off: ${JSON.stringify(table)}`);
      // On a laptop every column shows at once; on a phone a line says the table scrolls.
      if (width >= 1280) assert.ok(table.fits, `the table fits at ${width} px: ${JSON.stringify(table)}`);
      assert.equal(await page.locator('#scroll-hint').isVisible(), !table.fits);
      assert.ok(table.wrapRight <= table.inner, 'the table box inside the window');
      assert.ok(table.lastRight <= table.wrapRight + 0.5, `the last column reachable: ${JSON.stringify(table)}`);
      assert.equal(table.lastText, 'native measured on');
      await page.evaluate(() => {
        document.querySelector('.table-wrap').scrollLeft = 0;
      });
      // Which CPU and ISA made the native figures.
      for (const [name, on] of Object.entries(bench.measured)) {
        const note = await page.textContent('#machine-note');
        assert.ok(note.includes(`${on.cpu} (${on.isa}, int8 kernel ${on.int8_kernel})`), `${name}: ${note}`);
      }
      await page.screenshot({ path: path.join(SHOTS, `bench-${width}.png`), fullPage: true });
      assert.deepEqual(page.errors, []);
      assert.deepEqual(page.consoleErrors, []);
    } finally {
      await page.close();
    }
  });
}
