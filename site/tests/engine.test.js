// The engine modules of the release in Node (no browser): the int8 kernel paths of each module
// against the portable scalar path, bit for bit (`sky_int8_check`). The SIMD128 module runs
// its `i32x4.dot_i16x8_s` kernel, whose integer parts must be exact.
//
//   cargo run --release -p skyctl -- build && (cd site && npm ci && node --test tests/)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { RELEASE } from './harness.js';
import { SkyEngine } from '../src/sky-engine.js';

for (const [file, simd, paths] of [
  ['sky-web.simd.wasm', true, ['simd128', 'scalar']],
  ['sky-web.scalar.wasm', false, ['scalar']],
]) {
  test(`${file}: every int8 kernel path gives the scalar path's bits`, async (t) => {
    const engine = await SkyEngine.create(new Uint8Array(fs.readFileSync(path.join(RELEASE, file))));
    assert.equal(engine.simd, simd);
    const { ok, value } = engine.int8Check();
    assert.ok(ok, JSON.stringify(value));
    assert.deepEqual(value.paths, paths);
    assert.equal(value.products, 2 * paths.length);
    assert.equal(value.equal, true, JSON.stringify(value));
    t.diagnostic(`${file}: ${value.paths.join(', ')} over ${value.products} products: bit-identical`);
  });
}
