#!/usr/bin/env python3
"""Write a model golden suite's expected file from the PyTorch Laya runtime: the reference the
committed `golden/laya/<model>.expected.jsonl` files come from, for a checkpoint and a cases
file of your own.

Not run in CI (torch is never installed there). On a developer machine:

    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install laya==0.4.15 torch transformers safetensors numpy
    /tmp/tv/bin/python bench/laya_expected.py models/s1-pico golden/laya/cases.jsonl > s1-pico.expected.jsonl

One JSON line per case, in case order, with the fields `skyctl golden record` writes and a
`[[golden]] kind = "model"` suite reads: id, input_ids, markers (Laya's own `_encode_state`,
i.e. its tokenizer, state serialization and sequence builder), scores (its `DecisionModel`
forward in float32 on those ids), temperature and probabilities (its `_decode_answers`
arithmetic: the agent's clamped temperature for the question type and option count, then a
float32 softmax; `system_one` itself rounds probabilities to 4 places, too coarse for a
1e-3 suite).
The 41 committed cases and the three committed checkpoints reproduce `golden/laya/` bit for
bit (the provenance is in fixtures/laya-ref/README.md); laya 0.4.15's public API refuses empty
or whitespace-only instructions (cases c2_empty and c3_whitespace), which this script reports
and skips.
"""

import json
import sys
import warnings

QTYPES = {"choice": 0, "score": 1, "noul": 2}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model_dir, cases_path = sys.argv[1], sys.argv[2]
    import numpy as np
    import torch
    import laya
    from laya.common import temp_bucket

    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = laya.Agent(model_dir)
    model = agent.model.float().eval()
    for line in open(cases_path, encoding="utf-8"):
        if not line.strip():
            continue
        case = json.loads(line)
        qid = case["id"]
        qdef = {k: case[k] for k in ("type", "instructions", "criteria") if k in case}
        try:
            agent._check_question(qid, qdef)
        except ValueError as e:
            print(f"skipped {qid}: {e}", file=sys.stderr)
            continue
        internal = {qid: agent._to_internal(qdef)}
        item = agent._encode_state(case["state"], [qid], internal)[0]
        ids, markers = item["ids"], item["markers"]
        with torch.inference_mode():
            scores = model(
                torch.tensor([ids]),
                torch.ones(1, len(ids), dtype=torch.long),
                torch.tensor([markers]),
                torch.ones(1, len(markers), dtype=torch.bool),
                torch.tensor([QTYPES[case["type"]]]),
            )[0][0].tolist()
        qt = QTYPES[case["type"]]
        t = agent.temperature_by_options.get(temp_bucket(qt, len(markers)), agent.temperature[qt])
        z = np.asarray(scores, dtype=np.float32) / np.float32(t)
        p = np.exp(z - z.max())
        p /= p.sum()
        print(json.dumps({"id": qid, "input_ids": ids, "markers": markers, "scores": scores,
                          "temperature": float(t), "probabilities": [float(x) for x in p]},
                         ensure_ascii=False))


if __name__ == "__main__":
    main()
