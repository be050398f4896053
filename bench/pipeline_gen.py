#!/usr/bin/env python3
"""Generate one synthetic pipeline in four equivalent forms: pipeline.toml (skyctl),
Makefile (GNU make), build.ninja (ninja) and dvc.yaml (DVC).

Usage: pipeline_gen.py DIR SHAPE    SHAPE: "model30", "wide500" or "layersN" (N nodes)

Sources: in/s0..s9.txt (small), in/leaf.txt (read by exactly one node with no dependents,
so changing it re-runs one node) and in/big.bin (50 MB). Every node is a small `cat ... | cksum`
command writing one file under out/. "model30" is shaped like a model pipeline (5 models x
convert.f32, convert.f16, calibrate, quantize, bench; then manifest, bench summary and three
golden checks); "wide500" is 20 layers of 25 nodes, each reading two nodes of the layer before;
"layersN" (layers500, layers5000, layers20000) is N/50 layers of 50 nodes, likewise.
"""

import os
import sys


def model30():
    nodes = []  # (name, inputs)
    for m in range(5):
        src = [f"in/s{2 * m}.txt", f"in/s{2 * m + 1}.txt"] + (["in/big.bin"] if m == 0 else [])
        nodes.append((f"m{m}-convert-f32", src))
        nodes.append((f"m{m}-convert-f16", src))
        nodes.append((f"m{m}-calibrate", [f"out/m{m}-convert-f32", "in/s9.txt"]))
        nodes.append((f"m{m}-quantize", [f"out/m{m}-convert-f32", f"out/m{m}-calibrate"]))
        nodes.append((f"m{m}-bench", [f"out/m{m}-convert-f16", f"out/m{m}-quantize"]))
    nodes.append(("manifest", [f"out/m{m}-quantize" for m in range(5)] + [f"out/m{m}-convert-f16" for m in range(5)]))
    nodes.append(("bench-summary", [f"out/m{m}-bench" for m in range(5)]))
    for g in range(3):
        nodes.append((f"golden{g}", [f"out/m{g}-convert-f16", "in/leaf.txt" if g == 2 else "in/s8.txt"]))
    assert len(nodes) == 30
    return nodes


def wide500():
    nodes = []
    for layer in range(20):
        for i in range(25):
            if layer == 0:
                ins = [f"in/s{i % 10}.txt"] + (["in/big.bin"] if i == 0 else [])
            else:
                ins = [f"out/l{layer - 1}-{i}", f"out/l{layer - 1}-{(i + 1) % 25}"]
                if layer == 19 and i == 0:
                    ins.append("in/leaf.txt")
            nodes.append((f"l{layer}-{i}", ins))
    return nodes


def layers(n, width=50):
    """n // width layers of `width` nodes, each reading two nodes of the layer before; the
    last layer's first node also reads in/leaf.txt."""
    nodes = []
    depth = n // width
    for layer in range(depth):
        for i in range(width):
            if layer == 0:
                ins = [f"in/s{i % 10}.txt"]
            else:
                ins = [f"out/l{layer - 1}-{i}", f"out/l{layer - 1}-{(i + 1) % width}"]
                if layer == depth - 1 and i == 0:
                    ins.append("in/leaf.txt")
            nodes.append((f"l{layer}-{i}", ins))
    return nodes


def main():
    root, shape = sys.argv[1], sys.argv[2]
    if shape.startswith("layers"):
        nodes = layers(int(shape[len("layers"):]))
    else:
        nodes = {"model30": model30, "wide500": wide500}[shape]()
    os.makedirs(os.path.join(root, "in"), exist_ok=True)
    for i in range(10):
        with open(os.path.join(root, "in", f"s{i}.txt"), "w") as f:
            f.write(f"small input {i}\n")
    with open(os.path.join(root, "in", "leaf.txt"), "w") as f:
        f.write("leaf\n")
    big = os.path.join(root, "in", "big.bin")
    if not os.path.exists(big) or os.path.getsize(big) != 50 * 1024 * 1024:
        with open(big, "wb") as f:
            block = bytes(range(256)) * 4096  # 1 MiB, deterministic
            for _ in range(50):
                f.write(block)

    def cmd(name, ins):
        return f"mkdir -p out && cat {' '.join(ins)} | cksum > out/{name}"

    with open(os.path.join(root, "pipeline.toml"), "w") as f:
        for name, ins in nodes:
            f.write(f'[[command]]\nname = "{name}"\nrun = "{cmd(name, ins)}"\n')
            f.write("inputs = [" + ", ".join(f'"{i}"' for i in ins) + "]\n")
            f.write(f'outputs = ["out/{name}"]\n\n')
    with open(os.path.join(root, "Makefile"), "w") as f:
        f.write("all: " + " ".join(f"out/{n}" for n, _ in nodes) + "\n\n")
        for name, ins in nodes:
            f.write(f"out/{name}: {' '.join(ins)}\n\t{cmd(name, ins)}\n\n")
    with open(os.path.join(root, "build.ninja"), "w") as f:
        f.write("rule run\n  command = $cmd\n\n")
        for name, ins in nodes:
            f.write(f"build out/{name}: run {' '.join(ins)}\n  cmd = {cmd(name, ins)}\n")
    with open(os.path.join(root, "dvc.yaml"), "w") as f:
        f.write("stages:\n")
        for name, ins in nodes:
            f.write(f"  {name}:\n    cmd: {cmd(name, ins)}\n    deps:\n")
            for i in ins:
                f.write(f"      - {i}\n")
            f.write(f"    outs:\n      - out/{name}:\n          cache: true\n")


if __name__ == "__main__":
    main()
