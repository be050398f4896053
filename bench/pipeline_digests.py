"""The pipeline's artifacts from another CPU against golden/artifacts.blake3 (this machine's
bytes), for the scripts that build them under emulation (bench/aarch64-pipeline.sh,
bench/avx2_only.sh).

    python bench/pipeline_digests.py prepare WS     a scratch workspace: the model part of
                                                    pipeline.toml (above the browser engine's
                                                    marker, as the remote-cache test builds it),
                                                    models/ and golden/
    python bench/pipeline_digests.py check WS [--built-only]
                                                    blake3 of WS's non-volatile artifacts against
                                                    the committed digests; --built-only compares
                                                    the artifacts WS has (a build of some targets)
                                                    instead of asking for all of them

Run from the repository root; needs the `blake3` package. Exit 1 if any digest differs.
"""

import argparse
import os
import shutil
import sys

import blake3

MARKER = "# The browser engine (stages/web)"
DIGESTS = "golden/artifacts.blake3"


def prepare(ws):
    text = open("pipeline.toml").read()
    models = text.split(MARKER)[0]
    if len(models) == len(text):
        sys.exit(f"pipeline.toml: the web section marker {MARKER!r} moved")
    with open(os.path.join(ws, "pipeline.toml"), "w") as f:
        f.write(models)
    for d in ["models", "golden"]:
        shutil.copytree(d, os.path.join(ws, d))


def check(ws, built_only):
    got = set()
    for top in ["build", "site/public/models"]:
        for d, _, files in os.walk(os.path.join(ws, top)):
            for name in files:
                p = os.path.join(d, name)
                rel = os.path.relpath(p, ws)
                # Timings are the one volatile artifact.
                if rel.endswith("bench.json") or os.path.islink(p) or not os.path.isfile(p):
                    continue
                with open(p, "rb") as f:
                    got.add(f"{blake3.blake3(f.read()).hexdigest()}  {rel}")
    with open(DIGESTS) as f:
        want = {l for l in f.read().splitlines() if l and not l.startswith("#")}
    if built_only:
        built = {l.split("  ", 1)[1] for l in got}
        want = {l for l in want if l.split("  ", 1)[1] in built}
    for l in sorted(want - got):
        print("missing or different:", l)
    for l in sorted(got - want):
        print("built:               ", l)
    print(f"{len(want & got)} of {len(want)} committed digests reproduced")
    return 0 if got == want and want else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare", help="make a scratch workspace").add_argument("ws")
    check_p = sub.add_parser("check", help="compare its artifacts with the committed digests")
    check_p.add_argument("ws")
    check_p.add_argument("--built-only", action="store_true")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.ws)
        return 0
    return check(args.ws, args.built_only)


if __name__ == "__main__":
    sys.exit(main())
