#!/usr/bin/env python3
"""`skyctl embed` against upstream llama.cpp's `llama-embedding` on the same checkpoint.

For each model (s1-pico, s1-nano, s1-micro) and file type (F32, F16, Q8_0) this writes the
`--encoder-only` file with `skyctl convert`, embeds a few texts with `skyctl embed` (on the
checkpoint's f32 path, and on the whole file of the same type, whose encoder tensors hold the
same bytes) and with `llama-embedding`
(flash attention off and on, `--embd-normalize -1`: no normalization), pooled by mean and by
cls, and prints the largest absolute difference per row. The texts are NFC and hold no literal
`[MASK]` (upstream ignores `skycmd.tokenizer.nfc` and splits `[MASK]` as text).

    bash bench/llama_cpp_build.sh /tmp/llamacpp
    cargo build --release -p skyctl
    python3 bench/llama_embed.py --skyctl target/release/skyctl --llama /tmp/llamacpp/bin
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from llama_files import ROOT, converted, run
TEXTS = [
    "The harbour town lost its last cannery in 1998.",
    "White to move. Which plan is best?",
    "Accueil chaleureux et terrasse agréable, mais nous avons attendu presque une heure.",
    "Order numbers 88213 and 88540 still went to the old address.",
]



def skyctl_embed(skyctl, model, pooling):
    args = [skyctl, "embed", model, "--pooling", pooling]
    for t in TEXTS:
        args += ["--text", t]
    rows = [json.loads(l) for l in run(args).splitlines() if l.strip()]
    if len(rows) != len(TEXTS):
        sys.exit(f"skyctl embed gave {len(rows)} rows for {len(TEXTS)} texts")
    return [r["embedding"] for r in rows]


def llama_embed(llama, enc, pooling, fa):
    out = []
    for t in TEXTS:
        cmd = [os.path.join(llama, "llama-embedding"), "-m", enc, "-p", t, "--pooling", pooling,
               "--embd-normalize", "-1", "--embd-output-format", "json", "-fa", fa, "-t", "2"]
        # This build of llama-embedding sometimes exits (status 0) before its standard output
        # is flushed, leaving a cut or empty JSON: run it again until the JSON is whole.
        # Its log goes to the same pipe (it flushes more reliably so); the JSON is found in it.
        for _ in range(30):
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            start = r.stdout.find('{\n  "object": "list"')
            try:
                data = json.JSONDecoder().raw_decode(r.stdout[start:])[0]["data"]
                break
            except (json.JSONDecodeError, KeyError):
                continue
        else:
            sys.exit(f"llama-embedding never printed whole JSON: {' '.join(cmd)}")
        if len(data) != 1:
            sys.exit(f"llama-embedding gave {len(data)} vectors for one text")
        out.append(data[0]["embedding"])
    return out


def max_diff(a, b):
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b)):
        sys.exit("vectors of different lengths")
    return max(abs(p - q) for x, y in zip(a, b) for p, q in zip(x, y))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skyctl", required=True)
    ap.add_argument("--llama", required=True, help="folder with llama-embedding")
    ap.add_argument("--models", default="s1-pico,s1-nano,s1-micro")
    ap.add_argument("--types", default="f32,f16,q8_0")
    args = ap.parse_args()
    print("| model | file | pooling | skyctl (checkpoint, f32) vs llama.cpp, FA off | FA on | skyctl on the whole file of that type vs llama.cpp, FA off |")
    print("|---|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for ftype in args.types.split(","):
                ckpt, whole, enc = converted(args.skyctl, model, ftype, tmp)
                for pooling in ("mean", "cls"):
                    ref = skyctl_embed(args.skyctl, ckpt, pooling)
                    same = skyctl_embed(args.skyctl, whole, pooling)
                    off = llama_embed(args.llama, enc, pooling, "off")
                    on = llama_embed(args.llama, enc, pooling, "on")
                    print(f"| {model} | {ftype.upper()} | {pooling} | {max_diff(ref, off):.2e} "
                          f"| {max_diff(ref, on):.2e} | {max_diff(same, off):.2e} |", flush=True)


if __name__ == "__main__":
    main()
