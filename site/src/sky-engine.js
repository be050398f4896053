// The browser engine's loader: a raw WebAssembly module (stages/web) with a byte-buffer ABI.
// Used by the Web Worker (sky-worker.js) and by Node (bench and tests); no DOM, no fetch.
//
//   const engine = await SkyEngine.create(moduleBytes);
//   const ptr = engine.reserveModel(n);  engine.writeModel(offset, chunk) ...;  engine.load(name)
//   const { ok, value } = engine.ask(request);
//
// Every result crosses the boundary as UTF-8 JSON: `ok` is true for an answer, false for the
// spec's error object ({"error": {"code", "message", "type"}}), as `skyctl ask --json` prints it.

// The smallest module that uses a SIMD128 instruction (i8x16.popcnt): it validates exactly where
// the engine runs SIMD128, which is how onnxruntime-web and wasm-feature-detect choose a build.
const SIMD_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10, 1, 8, 0, 65, 0, 253, 15,
  253, 98, 11,
]);

export function simdSupported() {
  return WebAssembly.validate(SIMD_PROBE);
}

// The module file for this engine: `prefer` is "auto" (SIMD128 when it validates), "simd" or
// "scalar".
export function moduleName(prefer = 'auto') {
  if (prefer === 'scalar') return 'sky-web.scalar.wasm';
  if (prefer === 'simd') return 'sky-web.simd.wasm';
  return simdSupported() ? 'sky-web.simd.wasm' : 'sky-web.scalar.wasm';
}

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: false });

export class SkyEngine {
  constructor(instance, moduleBytes) {
    this.x = instance.exports;
    this.moduleBytes = moduleBytes;
    this.simd = this.x.sky_simd() === 1;
    this.modelPtr = 0;
    this.modelLen = 0;
    this.broken = null;
  }

  static async create(bytes) {
    if (!WebAssembly.validate(bytes)) {
      throw new Error('the engine module is not valid WebAssembly for this browser');
    }
    const { instance } = await WebAssembly.instantiate(bytes, {});
    return new SkyEngine(instance, bytes.byteLength);
  }

  // Views are made per access: linear memory can grow during any call into the module, which
  // detaches earlier ArrayBuffers.
  bytes(ptr, len) {
    return new Uint8Array(this.x.memory.buffer, ptr, len);
  }

  call(name) {
    if (this.broken) throw this.broken;
    try {
      return this.x[name]();
    } catch (e) {
      // A trap (out of memory, a bug) leaves the module's state unknown: refuse later calls.
      this.broken = new Error(`the engine stopped (${name}): ${e.message}`);
      throw this.broken;
    }
  }

  writeText(text) {
    const b = encoder.encode(text);
    const ptr = this.x.sky_reserve(1, b.length);
    this.bytes(ptr, b.length).set(b);
  }

  result(status) {
    const ptr = this.x.sky_out_ptr();
    const len = this.x.sky_out_len();
    const value = JSON.parse(decoder.decode(this.bytes(ptr, len)));
    return { ok: status === 0, value };
  }

  // Make room for the model's `len` bytes in the module's memory (the download is written
  // straight there, chunk by chunk: the file is never held twice).
  reserveModel(len) {
    this.modelPtr = this.x.sky_reserve(0, len);
    this.modelLen = len;
    return this.modelPtr;
  }

  writeModel(offset, chunk) {
    if (offset + chunk.length > this.modelLen) {
      throw new Error(`model data past the announced ${this.modelLen} bytes`);
    }
    this.bytes(this.modelPtr + offset, chunk.length).set(chunk);
  }

  // Parse the reserved model bytes and build the engine. Returns { ok, value: info | error }.
  load(name) {
    this.writeText(name);
    return this.result(this.call('sky_load'));
  }

  loadBytes(bytes, name) {
    this.reserveModel(bytes.length);
    this.writeModel(0, bytes);
    return this.load(name);
  }

  // Answer a /v1/systemone request (an object, or JSON text sent as is).
  ask(request) {
    this.writeText(typeof request === 'string' ? request : JSON.stringify(request));
    return this.result(this.call('sky_ask'));
  }

  // The demo form's fields as typed ({state, type, instructions, options}) as the request they
  // send, checked as `skyctl ask` checks a request: {ok, value: {request, options} | error}.
  form(fields) {
    this.writeText(JSON.stringify(fields));
    return this.result(this.call('sky_form'));
  }

  // The built-in benchmark questions: [{id, request}], the prompts `skyctl bench` times.
  questions() {
    return this.result(this.call('sky_questions'));
  }

  // The int8 kernel paths of this module, each checked bit for bit against the portable
  // scalar path: {paths, products, equal}.
  int8Check() {
    return this.result(this.call('sky_int8_check'));
  }

  info() {
    return this.result(this.call('sky_info'));
  }
}
