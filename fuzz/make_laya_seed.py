"""Write fuzz/seeds/laya_checkpoint/tiny.txt: a whole Laya checkpoint (hidden size 8, two
encoder layers, one head block, a 48-token vocabulary cut from s1-pico's tokenizer) that
every loader of the laya_checkpoint target accepts, so mutations start from a checkpoint
that loads (s1-pico.txt has the real configs but only the safetensors header, no data).
Tensors are F32, F16 and BF16 in turn; the act head is included (the loaders drop it).

The input format is the fuzz target's: the files separated by `\n--8<--\n`.
Run from the repository root with any Python 3: python3 fuzz/make_laya_seed.py
"""
import json
import os
import random
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
D, F, LAYERS, HEAD, VOCAB = 8, 8, 2, 1, 48

tok = json.load(open(os.path.join(ROOT, "models/s1-pico/tokenizer/tokenizer.json")))
vocab = {t: i for t, i in tok["model"]["vocab"].items() if i < VOCAB}
tok["model"]["vocab"] = vocab
tok["model"]["merges"] = [m for m in tok["model"]["merges"]
                          if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
tok["added_tokens"] = [a for a in tok["added_tokens"] if a["id"] < VOCAB]

enc = json.load(open(os.path.join(ROOT, "models/s1-pico/encoder/config.json")))
enc.update(hidden_size=D, intermediate_size=F, num_hidden_layers=LAYERS, vocab_size=VOCAB,
           num_attention_heads=1, max_position_embeddings=64, local_attention=16,
           layer_types=["full_attention", "sliding_attention"])
agent = json.load(open(os.path.join(ROOT, "models/s1-pico/rl_agent_config.json")))
agent.update(head_layers=HEAD, max_len=64, head_max_len=32)

shapes = {"encoder.embeddings.tok_embeddings.weight": [VOCAB, D],
          "encoder.embeddings.norm.weight": [D], "encoder.final_norm.weight": [D]}
for i in range(LAYERS):
    p = f"encoder.layers.{i}"
    if i > 0:
        shapes[f"{p}.attn_norm.weight"] = [D]
    shapes.update({f"{p}.attn.Wqkv.weight": [3 * D, D], f"{p}.attn.Wo.weight": [D, D],
                   f"{p}.mlp_norm.weight": [D], f"{p}.mlp.Wi.weight": [2 * F, D],
                   f"{p}.mlp.Wo.weight": [D, F]})
for k in range(HEAD):
    p = f"head.layers.{k}"
    shapes.update({f"{p}.self_attn.in_proj_weight": [3 * D, D],
                   f"{p}.self_attn.in_proj_bias": [3 * D],
                   f"{p}.self_attn.out_proj.weight": [D, D], f"{p}.self_attn.out_proj.bias": [D],
                   f"{p}.linear1.weight": [4 * D, D], f"{p}.linear1.bias": [4 * D],
                   f"{p}.linear2.weight": [D, 4 * D], f"{p}.linear2.bias": [D]})
    for n in ["norm1", "norm2"]:
        shapes.update({f"{p}.{n}.weight": [D], f"{p}.{n}.bias": [D]})
shapes.update({"type_emb.weight": [3, D], "scorer.0.weight": [D], "scorer.0.bias": [D],
               "scorer.1.weight": [D, D], "scorer.1.bias": [D], "scorer.3.weight": [1, D],
               "scorer.3.bias": [1], "act_head.0.weight": [4, D + 4], "act_head.0.bias": [4]})

rng = random.Random(13)


def encode(dtype, values):
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == "F16":
        return struct.pack(f"<{len(values)}e", *values)
    bits = struct.unpack(f"<{len(values)}I", struct.pack(f"<{len(values)}f", *values))
    return struct.pack(f"<{len(values)}H", *(b >> 16 for b in bits))


header, data = {}, b""
for n, name in enumerate(sorted(shapes)):
    count = 1
    for s in shapes[name]:
        count *= s
    dtype = ["F32", "F16", "BF16"][n % 3]
    norm = "norm" in name and name.endswith(".weight")
    values = [1.0 if norm else rng.uniform(-0.3, 0.3) for _ in range(count)]
    raw = encode(dtype, values)
    header[name] = {"dtype": dtype, "shape": shapes[name],
                    "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
weights = struct.pack("<Q", len(h)) + h + data

cut = b"\n--8<--\n"
files = [weights, json.dumps(enc).encode(), json.dumps(agent).encode(),
         json.dumps(tok, ensure_ascii=False, separators=(",", ":")).encode()]
seed = cut.join(files)
assert seed.count(cut) == len(files) - 1, "a file holds the separator"
out = os.path.join(ROOT, "fuzz/seeds/laya_checkpoint/tiny.txt")
open(out, "wb").write(seed)
print(os.path.relpath(out), sum(map(len, files)), "bytes")
