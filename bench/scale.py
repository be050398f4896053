#!/usr/bin/env python3
"""skyctl against ninja and make at scale: no-op and one-leaf rebuilds of the "layersN"
pipelines of bench/pipeline_gen.py (layers of 50 command nodes, each reading two of the layer
before), runs alternated between the tools so that all see the same load; medians in ms. Also
the cold build (per-node wall time) and skyctl's max RSS.

Usage: python3 bench/scale.py SKYCTL [SIZES...] [--runs N] [--vs OTHER_SKYCTL] [--no-make]
       (SIZES default: 500 5000 20000; needs ninja and make on PATH; --vs adds a second skyctl
       binary, e.g. an older build, alternated with the others in the same rounds)
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, cwd):
    t = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - t) * 1000


def max_rss_kb(cmd, cwd):
    out = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, cwd=cwd, check=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return int(out.stderr.strip().splitlines()[-1])


def main():
    argv = sys.argv[1:]
    runs = 10
    vs = None
    if "--runs" in argv:
        i = argv.index("--runs")
        runs = int(argv[i + 1])
        del argv[i:i + 2]
    if "--vs" in argv:
        i = argv.index("--vs")
        vs = os.path.abspath(argv[i + 1])
        del argv[i:i + 2]
    no_make = "--no-make" in argv
    args = [a for a in argv if not a.startswith("--")]
    skyctl = os.path.abspath(args[0])
    sizes = [int(s) for s in args[1:]] or [500, 5000, 20000]
    tools = {"skyctl": [skyctl, "build", "-j", "2"]}
    if vs:
        tools["skyctl-vs"] = [vs, "build", "-j", "2"]
    tools["ninja"] = ["ninja", "-j", "2"]
    if not no_make:
        tools["make"] = ["make", "-j", "2", "-s"]
    print(f"| nodes | tool | cold s (per node ms) | no-op ms | one leaf ms | no-op vs ninja | one leaf vs ninja |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for n in sizes:
        base = tempfile.mkdtemp(prefix=f"scale{n}-")
        subprocess.run([sys.executable, os.path.join(HERE, "pipeline_gen.py"), base, f"layers{n}"], check=True)
        dirs = {}
        for t in tools:
            d = os.path.join(base, t)
            os.makedirs(d)
            for name in ["in", "pipeline.toml", "Makefile", "build.ninja"]:
                src = os.path.join(base, name)
                if os.path.isdir(src):
                    shutil.copytree(src, os.path.join(d, name))
                else:
                    shutil.copy(src, d)
            dirs[t] = d
        cold = {t: run(cmd, dirs[t]) for t, cmd in tools.items()}
        noop = {t: [] for t in tools}
        leaf = {t: [] for t in tools}
        for i in range(runs):
            for t, cmd in tools.items():
                noop[t].append(run(cmd, dirs[t]))
            for t, cmd in tools.items():
                with open(os.path.join(dirs[t], "in", "leaf.txt"), "w") as f:
                    f.write(f"leaf {i}\n")
                leaf[t].append(run(cmd, dirs[t]))
        rss = {t: max_rss_kb(cmd, dirs[t]) for t, cmd in tools.items() if t.startswith("skyctl")}
        med = lambda v: statistics.median(v)
        for t in tools:
            print(f"| {n} | {t} | {cold[t] / 1000:.2f} ({cold[t] / n:.2f}) | {med(noop[t]):.1f} | {med(leaf[t]):.1f} "
                  f"| {med(noop[t]) / med(noop['ninja']):.2f}x | {med(leaf[t]) / med(leaf['ninja']):.2f}x |")
        for t, kb in rss.items():
            print(f"| {n} | {t} max RSS (no-op) | {kb / 1024:.1f} MiB | | | | |")
        sys.stdout.flush()
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
