#!/usr/bin/env python3
"""skyctl against upstream llama.cpp, side by side, on the committed models.

For each model (s1-pico, s1-nano, s1-micro) and file type (F32, Q8_0) this converts the Laya
checkpoint twice with `skyctl convert`: the whole file (encoder + decision head, what `skyctl
bench` answers with) and the `--encoder-only` file that upstream llama.cpp loads. It then times,
alternated round by round so that both see the same machine, at 1 and 2 threads:

- skyctl, whole question: `skyctl bench FILE --questions 12`, one frame = the 12 built-in
  questions (stages/quant/src/prompts.rs), whole questions from text to answer, head included;
  the figure is the mean time per question (frame time / 12), median of the frames;
- skyctl, encoder alone: the same with `--encoder-only` (each question tokenized and its
  sequence run through the embeddings, the encoder layers and the final norm: no decision head,
  scorer or answer), on the same whole file: the work llama.cpp does, plus the tokenization;
- llama.cpp: `llama-bench -embd 1 -n 0 -p L1,...,L12` on the encoder-only file, where L1..L12
  are the token counts of the same 12 questions (from `skyctl ask --requests --json`), so the
  figure is llama.cpp's mean forward time over the same lengths (tokenization not included).

The three run in turn within a round, their order rotated from round to round; the ratios
skyctl / llama.cpp (whole question, and encoder alone) are taken per round, and the table
gives their medians and ranges.

    bash bench/llama_cpp_build.sh /tmp/llamacpp
    cargo build --release -p skyctl
    python3 bench/llama_side.py --skyctl target/release/skyctl --llama /tmp/llamacpp/bin \
        [--rounds 5] [--models s1-pico,s1-nano,s1-micro] [--types f32,q8_0] [--threads 1,2]
"""

import argparse
import json
import os
import re
import statistics
import sys
import tempfile

from llama_files import ROOT, converted, run


def builtin_questions():
    text = open(os.path.join(ROOT, "stages/quant/src/prompts.rs"), encoding="utf-8").read()
    block = text.split("pub const CALIBRATION_PROMPTS", 1)[-1].split("];", 1)[0]
    lines = re.findall(r'r#"(\{.*?\})"#', block)
    if len(lines) != 12:
        sys.exit(f"expected the 12 built-in questions in prompts.rs, found {len(lines)}")
    return [json.loads(l) for l in lines]



def token_counts(skyctl, model_file, questions, tmp):
    path = os.path.join(tmp, "questions.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for q in questions:
            f.write(json.dumps(q) + "\n")
    out = run([skyctl, "ask", "--requests", path, "--json", model_file])
    counts = [len(json.loads(l)["input_ids"]) for l in out.splitlines() if l.strip()]
    if len(counts) != len(questions):
        sys.exit(f"skyctl ask answered {len(counts)} of {len(questions)} questions")
    return counts


def skyctl_us(skyctl, model_file, threads, iters, encoder_only=False):
    cmd = [skyctl, "bench", model_file, "--questions", "12", "--iters", str(iters),
           "--rounds", "1", "--threads", str(threads), "--json"]
    if encoder_only:
        cmd.append("--encoder-only")
    return json.loads(run(cmd))["us_per_question"]


def llama_us(llama_bench, enc_file, counts, threads, reps):
    out = run([llama_bench, "-m", enc_file, "-embd", "1", "-n", "0", "-t", str(threads),
               "-r", str(reps), "-p", ",".join(str(c) for c in counts), "-o", "json"])
    rows = json.loads(out)
    by_p = {r["n_prompt"]: r["avg_ns"] / 1e3 for r in rows}
    missing = [c for c in counts if c not in by_p]
    if missing:
        sys.exit(f"llama-bench gave no row for prompt lengths {missing}")
    return statistics.fmean(by_p[c] for c in counts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skyctl", required=True)
    ap.add_argument("--llama", required=True, help="folder with llama-bench")
    ap.add_argument("--models", default="s1-pico,s1-nano,s1-micro")
    ap.add_argument("--types", default="f32,q8_0")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10, help="skyctl frames per round")
    ap.add_argument("--reps", type=int, default=5, help="llama-bench repetitions per round")
    args = ap.parse_args()
    llama_bench = os.path.join(args.llama, "llama-bench")
    questions = builtin_questions()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for ftype in args.types.split(","):
                _, whole, enc = converted(args.skyctl, model, ftype, tmp)
                counts = token_counts(args.skyctl, whole, questions, tmp)
                for threads in (int(t) for t in args.threads.split(",")):
                    sides = {
                        "whole": lambda: skyctl_us(args.skyctl, whole, threads, args.iters),
                        "encoder": lambda: skyctl_us(args.skyctl, whole, threads, args.iters,
                                                     encoder_only=True),
                        "llama": lambda: llama_us(llama_bench, enc, counts, threads, args.reps),
                    }
                    order = list(sides)
                    times = {k: [] for k in sides}
                    ratios = {"whole": [], "encoder": []}
                    for r in range(args.rounds):
                        # Rotate which side goes first, so none always meets a warm cache.
                        t = {}
                        for k in order[r % 3:] + order[:r % 3]:
                            t[k] = sides[k]()
                        for k in sides:
                            times[k].append(t[k])
                        for k in ratios:
                            ratios[k].append(t[k] / t["llama"])
                    row = {
                        "model": model, "type": ftype.upper(), "threads": threads,
                        "tokens": f"{min(counts)}-{max(counts)}",
                        "skyctl_us": statistics.median(times["whole"]),
                        "skyctl_encoder_us": statistics.median(times["encoder"]),
                        "llama_us": statistics.median(times["llama"]),
                    }
                    for k, name in (("whole", "ratio"), ("encoder", "encoder_ratio")):
                        row[name] = statistics.median(ratios[k])
                        row[name + "_min"] = min(ratios[k])
                        row[name + "_max"] = max(ratios[k])
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    print()
    print("| model | type | threads | tokens | skyctl us/question (whole) | skyctl encoder alone | "
          "llama.cpp us | whole / llama.cpp (median, range) | encoder / llama.cpp |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['type']} | {r['threads']} | {r['tokens']} | {r['skyctl_us']:.0f} "
              f"| {r['skyctl_encoder_us']:.0f} | {r['llama_us']:.0f} "
              f"| {r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) "
              f"| {r['encoder_ratio']:.2f} ({r['encoder_ratio_min']:.2f}-{r['encoder_ratio_max']:.2f}) |")


if __name__ == "__main__":
    main()
