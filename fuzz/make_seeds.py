"""Write the seed corpus (fuzz/seeds/gguf_reader, committed; fuzz/corpus/ is the ignored
working corpus) of the gguf_reader fuzz target: small files from gguf-py.

Run once with the workspace venv: .venv/bin/python fuzz/make_seeds.py
"""
import os
import sys

import numpy as np
import gguf

out = os.path.join(os.path.dirname(__file__), "seeds", "gguf_reader")
os.makedirs(out, exist_ok=True)
Q = gguf.GGMLQuantizationType
VT = gguf.GGUFValueType


def write(name, build, alignment=None):
    path = os.path.join(out, name)
    w = gguf.GGUFWriter(path, "modern-bert")
    if alignment:
        w.add_custom_alignment(alignment)
    build(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def all_values(w):
    w.add_uint8("a.u8", 7)
    w.add_int8("a.i8", -7)
    w.add_uint16("a.u16", 700)
    w.add_int16("a.i16", -700)
    w.add_uint32("a.u32", 70000)
    w.add_int32("a.i32", -70000)
    w.add_float32("a.f32", 1.5)
    w.add_bool("a.bool", True)
    w.add_string("a.str", "h\u00e9llo")
    w.add_uint64("a.u64", 2**40)
    w.add_int64("a.i64", -(2**40))
    w.add_float64("a.f64", 0.1)
    w.add_array("a.strs", ["x", "yy", ""])
    w.add_array("a.ints", [1, 2, 3])
    w.add_array("a.nested", [[1, 2], [3]])


def tensors(w):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 32)).astype(np.float32)
    w.add_tensor("t.f32", x)
    w.add_tensor("t.f16", x.astype(np.float16))
    w.add_tensor("t.bf16", gguf.quants.quantize(x, Q.BF16), raw_dtype=Q.BF16)
    w.add_tensor("t.q8_0", gguf.quants.quantize(x, Q.Q8_0), raw_dtype=Q.Q8_0)
    w.add_tensor("t.q4_0", np.zeros((1, 18), dtype=np.uint8), raw_dtype=Q.Q4_0)


write("values.gguf", all_values)
write("tensors.gguf", tensors)
write("both-align64.gguf", lambda w: (all_values(w), tensors(w)), alignment=64)
write("empty.gguf", lambda w: None)
# Version 2 has the same layout: patch the version field of a copy.
data = bytearray(open(os.path.join(out, "both-align64.gguf"), "rb").read())
data[4:8] = (2).to_bytes(4, "little")
open(os.path.join(out, "v2.gguf"), "wb").write(bytes(data))
print("seeds in", out, file=sys.stderr)
