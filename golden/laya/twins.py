#!/usr/bin/env python3
"""Write golden/laya/tune.jsonl: one twin of every case of golden/laya/cases.jsonl, of the same
kind (type, option count, state shape and length, scripts and normalisation) with other token
sequences: the words of every string in reverse order, numbers changed, choice options rotated
by one. `skyctl tune` tunes on the twins and reports the golden cases as held out.

    python3 golden/laya/twins.py   # deterministic: the same file every time
"""
import json
import pathlib

HERE = pathlib.Path(__file__).parent


def words_reversed(s):
    # keep leading/trailing whitespace as it is (whitespace-only states stay whitespace)
    core = s.strip()
    if not core:
        return s
    lead = s[: len(s) - len(s.lstrip())]
    trail = s[len(s.rstrip()):]
    return lead + " ".join(reversed(core.split(" "))) + trail


def twin_value(v):
    if isinstance(v, str):
        return words_reversed(v)
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return v + 7
    if isinstance(v, float):
        return round(v * 1.5 + 0.25, 3)
    if isinstance(v, list):
        return [twin_value(x) for x in v]
    if isinstance(v, dict):
        return {k: twin_value(x) for k, x in v.items()}
    return v


def rotate(criteria):
    if isinstance(criteria, list) and len(criteria) > 1:
        return criteria[1:] + criteria[:1]
    if isinstance(criteria, dict) and len(criteria) > 1:
        items = list(criteria.items())
        return dict(items[1:] + items[:1])
    return criteria


def twin(case):
    out = dict(case)
    out["id"] = "twin_" + case["id"]
    out["instructions"] = twin_value(case["instructions"])
    out["state"] = twin_value(case["state"])
    # score options are ordered levels: keep their order
    if case["type"] == "choice":
        out["criteria"] = rotate(case["criteria"])
    return out


def main():
    lines = (HERE / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    cases = [json.loads(l) for l in lines if l.strip()]
    with open(HERE / "tune.jsonl", "w", encoding="utf-8") as f:
        for c in cases:
            f.write(json.dumps(twin(c), ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
