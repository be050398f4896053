#!/usr/bin/env python3
"""What the AVX2 path's int8 tile and f32 tile could do on cores we cannot run on.

Takes the two inner loops out of a release `skyctl` as compiled (the f32 product's FMA loop in
`sky_infer::kernels::avx2::gemm`, the int8 tile's chunk loop in
`sky_quant::kernels::avx2::dot_wide`) and the int8 tile's whole block (16 chunks and the
per-block scale steps), and asks llvm-mca's scheduling model of each CPU for their steady-state
cycles. Prints products per cycle and int8 / f32 per CPU: a model, not a measurement (BENCH.md,
"The AVX2 tiles under llvm-mca's CPU models", compares it with the measured cores).

Usage: python3 bench/mca_tiles.py [SKYCTL] [--mca LLVM_MCA] [--cpus a,b,...]
SKYCTL defaults to target/release/skyctl (`cargo build --release -p skyctl`; an x86_64 build).
Needs objdump (binutils) and llvm-mca; LLVM 19's (Debian package llvm-19) models Zen 3's
256-bit FMAs at two a cycle, LLVM 14's at one.
"""

import argparse
import re
import shutil
import subprocess
import sys
import tempfile

GEMM = "sky_infer::kernels::avx2::gemm"
DOT = "sky_quant::kernels::avx2::dot_wide"
# `tiles_256!` in stages/quant/src/kernels/avx2.rs: `chunks: 16` a block of 32 values.
CHUNKS_PER_BLOCK = 16
CPUS = "haswell,skylake,icelake-server,sapphirerapids,znver2,znver3,znver4,znver5"


def fail(message):
    print(f"mca_tiles: {message}", file=sys.stderr)
    sys.exit(2)


def run(args):
    try:
        return subprocess.run(args, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        fail(f"{args[0]}: {e}")


def function(binary, name):
    """(address, instruction text) of one function, from objdump."""
    for line in run(["nm", "-C", "-S", binary]).splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4 and parts[3] == name:
            start, size = int(parts[0], 16), int(parts[1], 16)
            break
    else:
        fail(f"{binary}: no symbol {name} (a release build of skyctl for x86_64?)")
    text = run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={start}",
                f"--stop-address={start + size}", binary])
    out = []
    for line in text.splitlines():
        m = re.match(r"\s+([0-9a-f]+):\s+(\S.*)$", line)
        if m:
            out.append((int(m.group(1), 16), re.sub(r"\s*<.*>$", "", m.group(2)).strip()))
    return out


def loops(code):
    """(first, last) index pairs of every backward branch's body."""
    index = {a: i for i, (a, _) in enumerate(code)}
    found = []
    for i, (a, ins) in enumerate(code):
        m = re.match(r"j\w+\s+([0-9a-f]+)$", ins)
        target = int(m.group(1), 16) if m else a
        if target < a and target in index:
            found.append((index[target], i))
    return found


def count(code, span, mnemonic):
    return sum(ins.startswith(mnemonic) for _, ins in code[span[0]:span[1] + 1])


def innermost(spans):
    """The spans that hold no other span."""
    return [s for s in spans
            if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]


def body(code, span):
    """The span's instructions as assembler input: branches and calls dropped."""
    return [ins for _, ins in code[span[0]:span[1] + 1] if not re.match(r"(j\w+|call)\s", ins)]


def cycles(mca, cpu, lines, iterations):
    with tempfile.NamedTemporaryFile("w", suffix=".s") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        report = run([mca, "-mtriple=x86_64", f"-mcpu={cpu}", f"-iterations={iterations}", f.name])
    m = re.search(r"Total Cycles:\s+(\d+)", report)
    if not m:
        fail(f"{mca}: no cycle count for {cpu}")
    return int(m.group(1)) / iterations


def main():
    p = argparse.ArgumentParser()
    p.add_argument("skyctl", nargs="?", default="target/release/skyctl")
    p.add_argument("--mca", default=None)
    p.add_argument("--cpus", default=CPUS)
    a = p.parse_args()
    mca = a.mca or next((c for c in ("llvm-mca-19", "/usr/lib/llvm-19/bin/llvm-mca", "llvm-mca")
                         if shutil.which(c)), None)
    if mca is None:
        fail("no llvm-mca (apt-get install llvm-19, or --mca PATH)")

    gemm = function(a.skyctl, GEMM)
    f32_loops = [s for s in innermost(loops(gemm)) if count(gemm, s, "vfmadd") > 0]
    if not f32_loops:
        fail(f"{GEMM}: no FMA loop")
    f32 = max(f32_loops, key=lambda s: count(gemm, s, "vfmadd"))
    f32_products = 8 * count(gemm, f32, "vfmadd")

    dot = function(a.skyctl, DOT)
    dot_loops = loops(dot)
    chunk_loops = [s for s in innermost(dot_loops)
                   if count(dot, s, "vpmaddwd") > 0 and count(dot, s, "vmulps") == 0]
    if not chunk_loops:
        fail(f"{DOT}: no chunk loop")
    chunk = max(chunk_loops, key=lambda s: count(dot, s, "vpmaddwd"))
    chunk_products = 16 * count(dot, chunk, "vpmaddwd")
    # The block: the smallest loop around the chunk loop, the chunk loop written out.
    around = [s for s in dot_loops if s[0] < chunk[0] and chunk[1] < s[1]]
    if not around:
        fail(f"{DOT}: no block loop around the chunk loop")
    block = min(around, key=lambda s: s[1] - s[0])
    steps = body(dot, (block[0], chunk[0] - 1)) + body(dot, (chunk[1] + 1, block[1]))
    block_lines = steps + body(dot, chunk) * CHUNKS_PER_BLOCK
    block_products = chunk_products * CHUNKS_PER_BLOCK

    version = re.search(r"LLVM version \S+", run([mca, "--version"]))
    print(f"{mca} ({version.group(0) if version else 'version unknown'}); {a.skyctl}")
    print(f"f32 loop: {f32_products} products ({count(gemm, f32, 'vfmadd')} FMAs, "
          f"{f32[1] - f32[0] + 1} instructions); int8 chunk loop: {chunk_products} products "
          f"({count(dot, chunk, 'vpmaddwd')} vpmaddwd, {chunk[1] - chunk[0] + 1} instructions); "
          f"block: {CHUNKS_PER_BLOCK} chunks + {len(steps)} instructions of per-block steps")
    print()
    print("| -mcpu | f32 products/cycle | int8 chunk products/cycle | chunk ÷ f32 "
          "| int8 block products/cycle | block ÷ f32 |")
    print("|---|---:|---:|---:|---:|---:|")
    for cpu in a.cpus.split(","):
        f = f32_products / cycles(mca, cpu, body(gemm, f32), 1000)
        c = chunk_products / cycles(mca, cpu, body(dot, chunk), 1000)
        b = block_products / cycles(mca, cpu, block_lines, 200)
        print(f"| {cpu} | {f:.2f} | {c:.2f} | {c / f:.2f}x | {b:.2f} | {b / f:.2f}x |")


if __name__ == "__main__":
    main()
