#!/usr/bin/env python3
"""Summarise bench/pipeline.sh's hyperfine JSON as a markdown table: wall medians, and CPU
(user + system, mean over the runs, children included) for the cold and no-op cases."""

import json
import os
import sys

out, skyctl = sys.argv[1], sys.argv[2]


def result(shape, tool, case):
    p = os.path.join(out, f"{shape}-{tool}-{case}.json")
    if not os.path.exists(p):
        return None
    return json.load(open(p))["results"][0]


def ms(r, what):
    if r is None:
        return "n/a"
    v = r["median"] if what == "wall" else r["user"] + r["system"]
    return f"{v * 1000:.1f}"


for shape in ["model30", "wide500"]:
    print(f"\n### {shape}\n")
    print("| tool | cold (ms) | no-op (ms) | one leaf changed (ms) | cold CPU (ms) | no-op CPU (ms) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for tool in ["skyctl", "ninja", "make", "dvc"]:
        rs = {c: result(shape, tool, c) for c in ["cold", "noop", "leaf"]}
        if all(r is None for r in rs.values()):
            continue
        cells = [ms(rs[c], "wall") for c in ["cold", "noop", "leaf"]]
        cells += [ms(rs["cold"], "cpu"), ms(rs["noop"], "cpu")]
        print(f"| {tool} | " + " | ".join(cells) + " |")
    print()
    for tool in ["skyctl", "ninja", "make", "dvc"]:
        r = result(shape, tool, "noop")
        if r:
            print(f"- {tool}: `{r['command']}`")
    sky, nin = result(shape, "skyctl", "cold"), result(shape, "ninja", "cold")
    if sky and nin:
        n = 30 if shape == "model30" else 500
        wall = (sky["median"] - nin["median"]) / n * 1000
        cpu = ((sky["user"] + sky["system"]) - (nin["user"] + nin["system"])) / n * 1000
        print(f"\nPer executed node, (skyctl cold - ninja cold) / {n}: {wall:.2f} ms wall, {cpu:.2f} ms CPU")
