#!/usr/bin/env python3
"""Summarise bench/pipeline.sh's hyperfine JSON as a markdown table (medians)."""

import json
import os
import sys

out, skyctl = sys.argv[1], sys.argv[2]


def median(shape, tool, case):
    p = os.path.join(out, f"{shape}-{tool}-{case}.json")
    if not os.path.exists(p):
        return None
    r = json.load(open(p))["results"][0]
    return r["median"], r["command"]


for shape in ["model30", "wide500"]:
    print(f"\n### {shape}\n")
    print("| tool | cold (ms) | no-op (ms) | one leaf changed (ms) |")
    print("| --- | ---: | ---: | ---: |")
    for tool in ["skyctl", "ninja", "make", "dvc"]:
        cells = []
        for case in ["cold", "noop", "leaf"]:
            m = median(shape, tool, case)
            cells.append("n/a" if m is None else f"{m[0] * 1000:.1f}")
        if all(c == "n/a" for c in cells):
            continue
        print(f"| {tool} | " + " | ".join(cells) + " |")
    print()
    for tool in ["skyctl", "ninja", "make", "dvc"]:
        m = median(shape, tool, "noop")
        if m:
            print(f"- {tool}: `{m[1]}`")
