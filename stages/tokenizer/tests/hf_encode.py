#!/usr/bin/env python3
"""Reference side of the parity tests: encode texts with HF `tokenizers`.

    hf_encode.py REQUEST.json RESPONSE.json

REQUEST: {"tokenizers": [path, ...], "texts": [str, ...], "decode": bool}
RESPONSE: {"version": str, "results": {path: {"ids": [[int]], "decoded": [str] | null}}}
ids are tokenizer.encode(text, add_special_tokens=False).ids; decoded is
tokenizer.decode(ids) (skip_special_tokens=True) when "decode" is set.
"""
import json
import sys

import tokenizers


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: hf_encode.py REQUEST.json RESPONSE.json")
    with open(sys.argv[1], encoding="utf-8") as f:
        req = json.load(f)
    results = {}
    for path in req["tokenizers"]:
        tok = tokenizers.Tokenizer.from_file(path)
        encs = tok.encode_batch(req["texts"], add_special_tokens=False)
        ids = [e.ids for e in encs]
        decoded = [tok.decode(i) for i in ids] if req.get("decode") else None
        results[path] = {"ids": ids, "decoded": decoded}
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump({"version": tokenizers.__version__, "results": results}, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
