#!/usr/bin/env python3
"""Per-question latency of the Laya reference runtime: PyTorch eager and ONNX Runtime (f32 and
dynamic int8, one and two intra-op threads), on the same checkpoints and the same questions as
`cargo bench -p sky-infer --bench infer [--q8|--q8-fast] [--threads 2]`.

Not run in CI (torch is never installed there). On a developer machine:

    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install laya==0.4.15 torch transformers \
        safetensors onnxruntime onnx onnxscript numpy
    /tmp/tv/bin/python bench/torch_compare.py [--iters 1000] [--threads 1,2] [models/s1-pico ...]

The model is Laya's own: `laya.Agent(<model dir>)` loads the checkpoint with Laya's loader and
`agent.model` is Laya's `DecisionModel` (HF ModernBERT encoder + decision head), float32 on the
CPU. Questions are the 41 golden cases taken round-robin. Columns:

- forward: the model's forward on the golden input ids and markers (tokenization not timed), as
  the Rust bench's "forward" column. Its scores are checked against the goldens.
- predict: `agent.predict(state, {id: question})`, Laya's whole per-question path (tokenize,
  build the sequence, forward, temperature, softmax, answer), as the Rust bench's
  "per question" column.
- ORT: ONNX Runtime 1 intra-op / 1 inter-op thread, all graph optimisations, running the same
  DecisionModel exported with torch.onnx (the scores output only; the action head Laya also
  exports is dropped so ONNX Runtime does strictly less work than Laya's ONNXAgent). Its scores are
  checked against the goldens too.
- ORT int8: the same export through `onnxruntime.quantization.quantize_dynamic(...,
  weight_type=QuantType.QInt8)` (int8 weights per tensor, activations quantized per call, no
  calibration), the same session options. Its error is reported as the largest |Δp| of the
  option probabilities (softmax of scores / golden temperature) against the f32 goldens, the
  measure of the README's int8 table.
- ORT columns are repeated for every `--threads` count (default `1,2`): intra-op threads of one
  session, as `--threads` splits one forward in sky-infer. PyTorch eager stays on one thread.
"""
import argparse
import json
import os
import statistics
import sys
import time
import warnings

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
QTYPES = {"choice": 0, "score": 1, "noul": 2}
NAMES = ["input_ids", "attention_mask", "marker_pos", "marker_mask", "qtype"]


class ScoresOnly(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, marker_pos, marker_mask, qtype):
        return self.model(input_ids, attention_mask, marker_pos, marker_mask, qtype)[0]


def median_us(fn, items, iters):
    for x in items:  # warm-up: one pass over every case
        fn(x)
    times = []
    for i in range(iters):
        x = items[i % len(items)]
        t0 = time.perf_counter()
        fn(x)
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def softmax_t(scores, t):
    z = np.asarray(scores, dtype=np.float64) / t
    e = np.exp(z - z.max())
    return e / e.sum()


def ort_session(ort, path, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def export_onnx(model, example, path):
    wrapper = ScoresOnly(model).eval()
    dyn = {"input_ids": {1: "n"}, "attention_mask": {1: "n"}, "marker_pos": {1: "k"}, "marker_mask": {1: "k"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(wrapper, example, path, input_names=NAMES, output_names=["logits"],
                              dynamic_axes=dyn, opset_version=17, dynamo=False)
        except Exception as e:  # the legacy exporter is gone in some torch versions
            print(f"note: TorchScript export failed ({e}); using the dynamo exporter", file=sys.stderr)
            n, k = torch.export.Dim("n", max=4096), torch.export.Dim("k", max=64)
            shapes = {"input_ids": {1: n}, "attention_mask": {1: n}, "marker_pos": {1: k}, "marker_mask": {1: k},
                      "qtype": None}
            torch.onnx.export(wrapper, example, path, input_names=NAMES, output_names=["logits"],
                              dynamic_shapes=shapes, dynamo=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=["models/s1-pico", "models/s1-nano", "models/s1-micro"])
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--no-onnx", action="store_true")
    ap.add_argument("--threads", default="1,2", help="ORT intra-op thread counts, comma-separated")
    args = ap.parse_args()
    thread_counts = [int(t) for t in args.threads.split(",") if t.strip()]
    if not thread_counts or min(thread_counts) < 1:
        ap.error("--threads: a comma-separated list of counts >= 1")
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    import laya
    import onnxruntime as ort

    cases = {c["id"]: c for c in map(json.loads, open(os.path.join(ROOT, "golden/laya/cases.jsonl")))}
    print(f"torch {torch.__version__}, onnxruntime {ort.__version__}, laya {getattr(laya, '__version__', '?')}, "
          f"{args.iters} questions per column", flush=True)
    ort_cols = "".join(f" ORT f32 {t}T µs | ORT int8 {t}T µs |" for t in thread_counts)
    print(f"| model | PyTorch eager forward µs | PyTorch eager predict µs |{ort_cols} median tokens "
          "| max |Δscore| eager / ORT f32 vs f32 golden | max |Δp| ORT f32 / ORT int8 vs f32 golden |")
    print("|---|---:|---:|" + "---:|---:|" * len(thread_counts) + "---:|---|---|")
    for d in args.models:
        d = d if os.path.isabs(d) else os.path.join(ROOT, d)
        name = os.path.basename(os.path.normpath(d))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            agent = laya.Agent(d)
        model = agent.model.float().eval()
        gold = [json.loads(l) for l in open(os.path.join(ROOT, f"golden/laya/{name}.expected.jsonl"))]
        feeds = []
        for g in gold:
            n, k = len(g["input_ids"]), len(g["markers"])
            feeds.append((
                torch.tensor([g["input_ids"]]), torch.ones(1, n, dtype=torch.long),
                torch.tensor([g["markers"]]), torch.ones(1, k, dtype=torch.bool),
                torch.tensor([QTYPES[cases[g["id"]]["type"]]]),
            ))
        with torch.inference_mode():
            eager_err = max(float(np.abs(model(*f)[0][0].numpy() - np.array(g["scores"])).max())
                            for f, g in zip(feeds, gold))
            forward = median_us(lambda f: model(*f), feeds, args.iters)
        questions = [(cases[g["id"]]["state"], {g["id"]: {k: cases[g["id"]][k] for k in
                                                          ("type", "instructions", "criteria")}}) for g in gold]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Laya's public predict refuses a few edge cases its lower layer (the goldens) accepts,
            # such as empty instructions; time the questions it takes.
            accepted = []
            for q in questions:
                try:
                    agent.predict(*q)
                    accepted.append(q)
                except ValueError:
                    pass
            questions = accepted
            predict = median_us(lambda q: agent.predict(*q), questions, args.iters)
        ort_meds = ["-", "-"] * len(thread_counts)
        ort_err, ort_dp, q8_dp = "-", "-", "-"
        if not args.no_onnx:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            path = f"/tmp/skyctl-bench-{name}.onnx"
            qpath = f"/tmp/skyctl-bench-{name}.int8.onnx"
            export_onnx(model, feeds[0], path)
            quantize_dynamic(path, qpath, weight_type=QuantType.QInt8)
            np_feeds = [dict(zip(NAMES, (t.numpy() for t in f))) for f in feeds]

            def max_dp(sess):
                return max(float(np.abs(softmax_t(sess.run(None, f)[0][0], g["temperature"])
                                        - np.array(g["probabilities"])).max())
                           for f, g in zip(np_feeds, gold))

            ort_meds = []
            for t in thread_counts:
                sess, qsess = ort_session(ort, path, t), ort_session(ort, qpath, t)
                if t == thread_counts[0]:
                    ort_err = max(float(np.abs(sess.run(None, f)[0][0] - np.array(g["scores"])).max())
                                  for f, g in zip(np_feeds, gold))
                    ort_err = f"{ort_err:.1e}"
                    ort_dp, q8_dp = f"{max_dp(sess):.1e}", f"{max_dp(qsess):.2f}"
                # Alternating f32 and int8 runs of the same length, medians of each.
                ort_meds.append(f"{median_us(lambda f: sess.run(None, f), np_feeds, args.iters):.0f}")
                ort_meds.append(f"{median_us(lambda f: qsess.run(None, f), np_feeds, args.iters):.0f}")
        toks = statistics.median(len(g["input_ids"]) for g in gold)
        cols = "".join(f" {m} |" for m in ort_meds)
        print(f"| {name} | {forward:.0f} | {predict:.0f} ({len(questions)} cases) |{cols} {toks:.0f} "
              f"| {eager_err:.1e} / {ort_err} | {ort_dp} / {q8_dp} |", flush=True)


if __name__ == "__main__":
    main()
