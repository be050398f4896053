#!/usr/bin/env python3
"""PyTorch eager (and optionally ONNX Runtime) per-question latency of the Laya models, one thread,
for comparison with `cargo bench -p sky-infer --bench infer` (bench/results/infer.md).

Run on a developer machine with torch, transformers, safetensors (and onnxruntime for --onnx):

    python bench/torch_compare.py [--iters 1000] [--onnx] [models/s1-pico models/s1-nano ...]

It rebuilds Laya's DecisionModel (HF ModernBERT encoder + nn.TransformerEncoder head with
max(1, d // 64) heads, type embedding, scorer), loads model.safetensors, and times the forward of
the golden sequences (input ids and markers from golden/laya/<model>.expected.jsonl, so the
tokenizer is not part of the timing, as in the Rust forward column), median over --iters
questions taken round-robin from the 41 cases. It also checks the scores against the goldens.
Not run in CI; torch is never installed on the build machines.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn as nn
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel

QTYPES = {"choice": 0, "score": 1, "noul": 2}
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


class Decision(nn.Module):
    def __init__(self, encoder, head_layers):
        super().__init__()
        self.encoder = encoder
        d = encoder.config.hidden_size
        layer = nn.TransformerEncoderLayer(d, max(1, d // 64), 4 * d, 0.0, batch_first=True, norm_first=True)
        self.head = nn.TransformerEncoder(layer, head_layers, enable_nested_tensor=False)
        self.type_emb = nn.Embedding(3, d)
        self.scorer = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1))

    def forward(self, input_ids, markers, qtype):
        h = self.encoder(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).last_hidden_state
        h = h + self.type_emb(qtype)[:, None, :]
        for layer in self.head.layers:
            h = layer(h)
        return self.scorer(h[0, markers]).squeeze(-1)


def load(model_dir):
    cfg = json.load(open(os.path.join(model_dir, "rl_agent_config.json")))
    ecfg = AutoConfig.from_pretrained(os.path.join(model_dir, "encoder"))
    enc = AutoModel.from_config(ecfg, attn_implementation="sdpa")
    m = Decision(enc, cfg["head_layers"])
    sd = {k: v.float() for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
    missing, _unexpected = m.load_state_dict(sd, strict=False)
    assert not missing, missing
    return m.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=["models/s1-pico", "models/s1-nano", "models/s1-micro"])
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--onnx", action="store_true", help="also time ONNX Runtime (1 intra-op thread)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cases = [json.loads(l) for l in open(os.path.join(ROOT, "golden/laya/cases.jsonl"))]
    qtype = {c["id"]: QTYPES[c["type"]] for c in cases}
    print("| model | PyTorch eager median µs | ONNX Runtime median µs | median tokens | max |Δscore| vs golden |")
    print("|---|---|---|---|---|")
    for d in args.models:
        d = d if os.path.isabs(d) else os.path.join(ROOT, d)
        name = os.path.basename(os.path.normpath(d))
        m = load(d)
        gold = [json.loads(l) for l in open(os.path.join(ROOT, f"golden/laya/{name}.expected.jsonl"))]
        inputs = [(torch.tensor([g["input_ids"]]), torch.tensor(g["markers"]), torch.tensor([qtype[g["id"]]])) for g in gold]
        worst = 0.0
        with torch.inference_mode():
            for (ids, mk, qt), g in zip(inputs, gold):
                s = m(ids, mk, qt)
                worst = max(worst, max(abs(a - b) for a, b in zip(s.tolist(), g["scores"])))
            for x in inputs:  # warm-up
                m(*x)
            times = []
            for i in range(args.iters):
                x = inputs[i % len(inputs)]
                t0 = time.perf_counter()
                m(*x)
                times.append((time.perf_counter() - t0) * 1e6)
        ort_med = "-"
        if args.onnx:
            import onnxruntime as ort
            path = f"/tmp/{name}.onnx"
            ids, mk, qt = inputs[0]
            torch.onnx.export(m, (ids, mk, qt), path, input_names=["ids", "markers", "qtype"],
                              dynamic_axes={"ids": {1: "n"}, "markers": {0: "k"}}, opset_version=17)
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            feeds = [{"ids": a.numpy(), "markers": b.numpy(), "qtype": c.numpy()} for a, b, c in inputs]
            for f in feeds:
                sess.run(None, f)
            ot = []
            for i in range(args.iters):
                t0 = time.perf_counter()
                sess.run(None, feeds[i % len(feeds)])
                ot.append((time.perf_counter() - t0) * 1e6)
            ort_med = f"{statistics.median(ot):.0f}"
        toks = statistics.median(len(g["input_ids"]) for g in gold)
        print(f"| {name} | {statistics.median(times):.0f} | {ort_med} | {toks:.0f} | {worst:.1e} |")


if __name__ == "__main__":
    main()
