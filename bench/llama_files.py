"""What bench/llama_side.py and bench/llama_embed.py share: running a command, and the pair of
files each compares (the whole GGUF skyctl answers with, the `--encoder-only` one upstream
llama.cpp loads), converted from a committed checkpoint."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    """`cmd`'s stdout; exits with the end of its stderr when it fails."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r.stdout


def converted(skyctl, model, ftype, tmp):
    """(checkpoint, whole file, encoder-only file) of `models/MODEL` as `ftype`, in `tmp`."""
    ckpt = os.path.join(ROOT, "models", model)
    whole = os.path.join(tmp, f"{model}.{ftype}.gguf")
    enc = os.path.join(tmp, f"{model}.{ftype}.encoder.gguf")
    run([skyctl, "convert", ckpt, whole, "--type", ftype])
    run([skyctl, "convert", ckpt, enc, "--type", ftype, "--encoder-only"])
    return ckpt, whole, enc
