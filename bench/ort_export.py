#!/usr/bin/env python3
"""Export Laya's DecisionModel of each reference checkpoint to ONNX for bench/ort_web.mjs
(onnxruntime-web in headless Chromium), with the golden token ids as feeds.

Not run in CI (torch is never installed there). In the venv of bench/torch_compare.py:

    /tmp/tv/bin/python bench/ort_export.py OUT_DIR [models/s1-pico ...]

writes OUT_DIR/<model>.onnx (the scores output only, as torch_compare.py exports it) and
OUT_DIR/<model>.feeds.json: per golden case its id, input_ids, markers, qtype and the float32
PyTorch scores (golden/laya/<model>.expected.jsonl), so the browser run can check its output.
"""
import json
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_compare import QTYPES, ROOT, export_onnx  # noqa: E402


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: ort_export.py OUT_DIR [models/s1-pico ...]")
    out = sys.argv[1]
    models = sys.argv[2:] or ["models/s1-pico", "models/s1-nano", "models/s1-micro"]
    os.makedirs(out, exist_ok=True)
    import laya

    cases = {c["id"]: c for c in map(json.loads, open(os.path.join(ROOT, "golden/laya/cases.jsonl")))}
    for d in models:
        d = d if os.path.isabs(d) else os.path.join(ROOT, d)
        name = os.path.basename(os.path.normpath(d))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            agent = laya.Agent(d)
        model = agent.model.float().eval()
        gold = [json.loads(l) for l in open(os.path.join(ROOT, f"golden/laya/{name}.expected.jsonl"))]
        feeds = []
        for g in gold:
            feeds.append({"id": g["id"], "input_ids": g["input_ids"], "markers": g["markers"],
                          "qtype": QTYPES[cases[g["id"]]["type"]], "scores": g["scores"]})
        g = gold[0]
        n, k = len(g["input_ids"]), len(g["markers"])
        example = (torch.tensor([g["input_ids"]]), torch.ones(1, n, dtype=torch.long),
                   torch.tensor([g["markers"]]), torch.ones(1, k, dtype=torch.bool),
                   torch.tensor([feeds[0]["qtype"]]))
        export_onnx(model, example, os.path.join(out, f"{name}.onnx"))
        with open(os.path.join(out, f"{name}.feeds.json"), "w") as f:
            json.dump(feeds, f)
        print(f"{name}: {os.path.getsize(os.path.join(out, name + '.onnx'))} bytes of ONNX, {len(feeds)} cases",
              flush=True)


if __name__ == "__main__":
    main()
