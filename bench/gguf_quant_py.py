"""gguf-py / numpy reference throughput on the same amount of data as the Rust bench:
Q8_0 via gguf.quants.quantize and f32->f16 via numpy astype (16 Mi f32 values, 64 MiB).
Prints `name value unit` lines. Run with the workspace venv's python.
"""
import os
import time
from importlib.metadata import version

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import gguf  # noqa: E402


def median_time(f, runs):
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]


rng = np.random.default_rng(0)
x = (rng.standard_normal((1 << 24) // 1024 * 1024) * 0.05).astype(np.float32).reshape(-1, 1024)
mb = x.nbytes / 1e6
d = median_time(lambda: gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0), 3)
print(f"py_q8_0_quantize {mb / d:.0f} MB/s of f32 input (gguf {version('gguf')}, numpy {np.__version__}, median of 3)")
d = median_time(lambda: x.astype(np.float16), 5)
print(f"py_f32_to_f16_astype {mb / d:.0f} MB/s of f32 input (numpy, median of 5)")
