// Test and bench harness: a static HTTP server on 127.0.0.1 and Debian's Chromium through
// playwright-core (never a downloaded browser), plus the native `skyctl ask` it compares with.
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const RELEASE = path.resolve(ROOT, process.env.SKY_SITE_DIR || 'site/public');
export const CHROMIUM = process.env.SKY_CHROMIUM || '/usr/bin/chromium';
export const SHOTS = path.join(ROOT, 'target', 'site-screenshots');

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.gguf': 'application/octet-stream',
  '.png': 'image/png',
};

// Serve `root` on a free port of 127.0.0.1. Returns {url, close()}.
// `isolate`: send COOP/COEP headers, so the page is cross-origin isolated and performance.now()
// has its fine resolution (5 µs rather than 100 µs); the benchmark uses it.
export async function serve(root, { isolate = false } = {}) {
  const extra = isolate
    ? { 'cross-origin-opener-policy': 'same-origin', 'cross-origin-embedder-policy': 'require-corp' }
    : {};
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://127.0.0.1');
    const rel = decodeURIComponent(url.pathname).replace(/^\/+/, '') || 'index.html';
    const file = path.resolve(root, rel);
    if (!file.startsWith(path.resolve(root) + path.sep)) {
      res.writeHead(403).end('forbidden');
      return;
    }
    fs.stat(file, (err, st) => {
      if (err || !st.isFile()) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
        return;
      }
      res.writeHead(200, {
        'content-type': TYPES[path.extname(file)] || 'application/octet-stream',
        'content-length': st.size,
        'cache-control': 'no-store',
        ...extra,
      });
      if (req.method === 'HEAD') {
        res.end();
        return;
      }
      fs.createReadStream(file).pipe(res);
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}/`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}

// A copy of the release tree in a fresh temp dir (the tests add files to it).
export function copyRelease() {
  if (!fs.existsSync(path.join(RELEASE, 'index.html'))) {
    throw new Error(`${RELEASE} has no index.html: run \`cargo run --release -p skyctl -- build\` first`);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sky-site-'));
  fs.cpSync(RELEASE, dir, { recursive: true });
  return dir;
}

// Chromium, headless, in a fresh profile. Returns a persistent context; close it in `finally`.
export async function launch() {
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(`no Chromium at ${CHROMIUM} (apt-get install -y chromium, or set SKY_CHROMIUM)`);
  }
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'sky-chromium-'));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1000, height: 900 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  const close = ctx.close.bind(ctx);
  ctx.close = async () => {
    try {
      await close();
    } finally {
      fs.rmSync(profile, { recursive: true, force: true });
    }
  };
  return ctx;
}

// A page that records its errors (uncaught exceptions; console errors too).
export async function openPage(ctx, url) {
  const page = await ctx.newPage();
  page.errors = [];
  page.consoleErrors = [];
  page.on('pageerror', (e) => page.errors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error') page.consoleErrors.push(m.text());
  });
  await page.goto(url);
  return page;
}

// The native binary: SKYCTL_BIN, else target/release/skyctl.
export function skyctlBin() {
  const bin = path.resolve(ROOT, process.env.SKYCTL_BIN || 'target/release/skyctl');
  if (!fs.existsSync(bin)) throw new Error(`no skyctl binary at ${bin} (cargo build --release -p skyctl, or set SKYCTL_BIN)`);
  return bin;
}

// golden/laya/cases.jsonl as /v1/systemone requests: [{id, request}]. Some cases have options
// that Laya's layout cuts (over 48 tokens, or too many for the head window): the requests ask
// for that cut (`cut_options`), which the goldens record, instead of the default refusal.
export function goldenCases() {
  const text = fs.readFileSync(path.join(ROOT, 'golden/laya/cases.jsonl'), 'utf8');
  return text
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => {
      const c = JSON.parse(l);
      const q = { type: c.type, instructions: c.instructions };
      if ('criteria' in c) q.criteria = c.criteria;
      return { id: c.id, request: { state: c.state, cut_options: true, questions: { [c.id]: q } } };
    });
}

// What `skyctl ask MODEL --request FILE --json` prints for each request.
export function nativeAnswers(model, cases) {
  const bin = skyctlBin();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sky-ask-'));
  try {
    return cases.map(({ id, request }) => {
      const file = path.join(dir, `${id}.json`);
      fs.writeFileSync(file, JSON.stringify(request));
      const out = execFileSync(bin, ['ask', model, '--request', file, '--json'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      return JSON.parse(out.toString('utf8'));
    });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// Differences between two JSON values: numbers within `tol`, everything else exact, object keys
// equal and in the same order. Returns a list of "path: a vs b" strings (empty when equal).
export function diff(a, b, tol, at = '$', out = []) {
  if (typeof a === 'number' && typeof b === 'number') {
    if (!(Math.abs(a - b) <= tol)) out.push(`${at}: ${a} vs ${b}`);
  } else if (Array.isArray(a) && Array.isArray(b)) {
    if (a.length !== b.length) out.push(`${at}: length ${a.length} vs ${b.length}`);
    else a.forEach((v, i) => diff(v, b[i], tol, `${at}[${i}]`, out));
  } else if (a && b && typeof a === 'object' && typeof b === 'object') {
    const ka = Object.keys(a);
    const kb = Object.keys(b);
    if (ka.join('\u0000') !== kb.join('\u0000')) out.push(`${at}: keys ${ka} vs ${kb}`);
    else ka.forEach((k) => diff(a[k], b[k], tol, `${at}.${k}`, out));
  } else if (a !== b) {
    out.push(`${at}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
  }
  return out;
}

// Largest |a - b| over the numbers of two JSON values of the same shape.
export function maxAbs(a, b) {
  if (typeof a === 'number' && typeof b === 'number') return Math.abs(a - b);
  if (a && b && typeof a === 'object' && typeof b === 'object') {
    return Math.max(0, ...Object.keys(a).map((k) => maxAbs(a[k], b[k])));
  }
  return 0;
}
