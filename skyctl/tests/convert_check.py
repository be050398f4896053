"""Independent check of a GGUF written by `skyctl convert`, with gguf-py, numpy and HF tokenizers.

usage: convert_check.py LAYA_DIR OUT.gguf FTYPE HEAD_TYPE [--keys-s1-pico]

Reads the safetensors source with numpy only (8-byte LE header length, JSON header, raw data),
re-derives every tensor's GGUF name, order, dims and type from the spec (sections 2.3-2.5 and
the seed's type policy), and compares the bytes: F32 exactly, F16 as numpy's float16 rounding,
BF16 and Q8_0 as gguf.quants.quantize of the f32 source. With --keys-s1-pico, every metadata
key is compared (name, type, value, order) with the list below. Prints OK or raises.
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V
from tokenizers import Tokenizer


def read_safetensors(path):
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[8 + n + a:8 + n + b]
        dt = info["dtype"]
        if dt == "F32":
            arr = np.frombuffer(buf, dtype="<f4")
        elif dt == "F16":
            arr = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif dt == "BF16":
            arr = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{name}: dtype {dt}")
        out[name] = arr.reshape(info["shape"])
    return out


def gguf_name(name, n_enc):
    fixed = {
        "encoder.embeddings.tok_embeddings.weight": "token_embd.weight",
        "encoder.embeddings.norm.weight": "token_embd_norm.weight",
        "encoder.final_norm.weight": "output_norm.weight",
        "type_emb.weight": "token_types.weight",
        "scorer.0.weight": "cls.norm.weight", "scorer.0.bias": "cls.norm.bias",
        "scorer.1.weight": "cls.weight", "scorer.1.bias": "cls.bias",
        "scorer.3.weight": "cls.output.weight", "scorer.3.bias": "cls.output.bias",
    }
    if name in fixed:
        return fixed[name]
    parts = name.split(".")
    if name.startswith("encoder.layers."):
        enc = {"attn_norm.weight": "attn_norm.weight", "attn.Wqkv.weight": "attn_qkv.weight",
               "attn.Wo.weight": "attn_output.weight", "mlp_norm.weight": "ffn_norm.weight",
               "mlp.Wi.weight": "ffn_up.weight", "mlp.Wo.weight": "ffn_down.weight"}
        return f"blk.{parts[2]}.{enc['.'.join(parts[3:])]}"
    if name.startswith("head.layers."):
        rest = ".".join(parts[3:]).replace("in_proj_", "in_proj.")
        head = {"norm1": "attn_norm", "self_attn.in_proj": "attn_qkv", "self_attn.out_proj": "attn_output",
                "norm2": "ffn_norm", "linear1": "ffn_up", "linear2": "ffn_down"}
        base, kind = rest.rsplit(".", 1)
        return f"blk.{n_enc + int(parts[2])}.{head[base]}.{kind}"
    return None


TYPES = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0}


def policy(gname, shape, n_enc, ftype, head_type):
    if len(shape) < 2:
        ty = Q.F32
    elif (gname.startswith("blk.") and int(gname.split(".")[1]) >= n_enc) or gname.startswith("token_types.") \
            or gname.startswith("cls."):
        ty = head_type
    elif gname == "token_embd.weight" and ftype == Q.Q8_0:
        ty = Q.F16
    else:
        ty = ftype
    if ty == Q.Q8_0 and shape[-1] % 32 != 0:
        ty = Q.F16
    return ty


def check_tensors(src_dir, reader, ftype, head_type):
    enc_cfg = json.loads((src_dir / "encoder" / "config.json").read_text())
    n_enc = enc_cfg["num_hidden_layers"]
    src = read_safetensors(src_dir / "model.safetensors")
    names = [n for n in sorted(src) if not (n == "temperature" or n.startswith("act_head."))]
    assert [t.name for t in reader.tensors] == [gguf_name(n, n_enc) for n in names], "tensor names/order"
    total = 0
    for t, n in zip(reader.tensors, names):
        x = np.ascontiguousarray(src[n], dtype=np.float32)
        assert list(t.shape) == list(reversed(x.shape)), f"{t.name}: dims {list(t.shape)} vs {x.shape}"
        want = policy(t.name, x.shape, n_enc, ftype, head_type)
        assert t.tensor_type == want, f"{t.name}: type {t.tensor_type.name}, expected {want.name}"
        got = np.asarray(t.data).tobytes()
        if want == Q.F32:
            exp = x.astype("<f4").tobytes()
        elif want == Q.F16:
            exp = x.astype("<f2").tobytes()
        else:
            exp = gguf.quants.quantize(x, want).tobytes()
        assert got == exp, f"{t.name}: bytes differ from the {want.name} encoding of {n}"
        total += t.n_bytes
    return len(names), total


def field(reader, key):
    f = reader.fields[key]
    return f.types, f.contents()


def expected_s1_pico_keys(src_dir, ftype):
    tok_dir = src_dir / "tokenizer"
    tj = json.loads((tok_dir / "tokenizer.json").read_text())
    hf = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    vocab = hf.get_vocab(with_added_tokens=True)
    added = hf.get_added_tokens_decoder()
    by_id = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(1024):
        if i not in by_id:
            tokens.append(f"[PAD{i}]"); types.append(5)
        elif i in added:
            tokens.append(by_id[i]); types.append(3 if added[i].special else 4)
        else:
            tokens.append(by_id[i]); types.append(1)
    sv = gguf.SpecialVocab(tok_dir, load_merges=True, n_vocab=1024)
    d = "{{ o.description if o.description is string else o.description | tojson }}"
    template = ("[CLS]{{ type }} question: {{ instructions if instructions is string else instructions | tojson }}[SEP]"
                "{% for o in options %}[MASK] "
                "{% if type == 'choice' %}{{ o.key }}{% if o.description %}: " + d + "{% endif %}"
                "{% elif type == 'score' %}level {{ o.key }}: " + d +
                "{% else %}{{ o.key }}: {% if o.description %}" + d +
                "{% elif o.key == 'true' %}yes, the statement holds{% else %}no, the statement does not hold{% endif %}{% endif %}"
                "{% endfor %}[SEP]{{ state if state is string else state | tojson }}[SEP]")
    s, u32, i32, f32, b = V.STRING, V.UINT32, V.INT32, V.FLOAT32, V.BOOL
    A = V.ARRAY
    keys = [
        ("general.architecture", [s], "modern-bert"),
        ("general.alignment", [u32], 32),
        ("general.type", [s], "model"),
        ("general.name", [s], "s1-pico"),
        ("general.size_label", [s], gguf.utility.model_weight_count_rounded_notation(202305)),
        ("modern-bert.block_count", [u32], 3),
        ("modern-bert.context_length", [u32], 512),
        ("modern-bert.embedding_length", [u32], 64),
        ("modern-bert.feed_forward_length", [A, i32], [128, 128, 256]),
        ("modern-bert.attention.head_count", [u32], 1),
        ("modern-bert.rope.freq_base", [f32], 160000.0),
        ("modern-bert.rope.freq_base_swa", [f32], 10000.0),
        ("modern-bert.attention.layer_norm_rms_epsilon", [f32], np.float32(1e-5)),
        ("modern-bert.attention.layer_norm_epsilon", [f32], np.float32(1e-5)),
        ("general.file_type", [u32], {Q.F32: 0, Q.F16: 1, Q.Q8_0: 7, Q.BF16: 32}[ftype]),
        ("modern-bert.attention.causal", [b], False),
        ("modern-bert.attention.sliding_window", [u32], 128),
        ("modern-bert.attention.sliding_window_pattern", [u32], 3),
        ("modern-bert.rope.scaling.type", [s], "none"),
        ("modern-bert.vocab_size", [u32], 1024),
        ("modern-bert.hidden_activation", [s], "gelu"),
        ("modern-bert.decision.type", [s], "laya"),
        ("modern-bert.decision.block_count", [u32], 1),
        ("modern-bert.decision.max_head_tokens", [u32], 96),
        ("modern-bert.decision.max_tokens", [u32], 512),
        ("modern-bert.decision.temperature.choice", [f32], np.float32(1.0647699)),
        ("modern-bert.decision.temperature.score", [f32], np.float32(1.3)),
        ("modern-bert.decision.temperature.noul", [f32], np.float32(0.8)),
        ("modern-bert.decision.temperature.choice.2", [f32], np.float32(0.9)),
        ("modern-bert.decision.temperature.choice.3_5", [f32], np.float32(1.12)),
        ("modern-bert.decision.temperature.choice.11", [f32], np.float32(0.1006)),
        ("modern-bert.decision.temperature.score.3_5", [f32], np.float32(1.55)),
        ("modern-bert.decision.temperature.score.6_10", [f32], np.float32(7.5)),
        ("modern-bert.decision.temperature.noul.2", [f32], np.float32(0.75)),
        ("general.quantization_version", [u32], 2),
        ("tokenizer.ggml.add_bos_token", [b], sv.add_special_token["bos"]),
        ("tokenizer.ggml.add_eos_token", [b], sv.add_special_token["eos"]),
        ("tokenizer.ggml.add_sep_token", [b], sv.add_special_token["sep"]),
        ("tokenizer.ggml.model", [s], "gpt2"),
        ("tokenizer.ggml.pre", [s], "modern-bert"),
        ("tokenizer.ggml.tokens", [A, s], tokens),
        ("tokenizer.ggml.token_type", [A, i32], types),
        ("tokenizer.ggml.merges", [A, s], sv.merges),
    ]
    id_keys = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id",
               "sep": "seperator_token_id", "pad": "padding_token_id", "mask": "mask_token_id"}
    for typ, tid in sv.special_token_ids.items():
        if typ in id_keys:  # gguf-py has no key for cls
            keys.append((f"tokenizer.ggml.{id_keys[typ]}", [u32], tid))
    at = tj["added_tokens"]
    model_vocab = tj["model"]["vocab"]
    keys += [
        ("tokenizer.ggml.token_type_count", [u32], 3),
        ("tokenizer.chat_template.systemone", [s], template),
        ("tokenizer.chat_templates", [A, s], ["systemone"]),
        ("skycmd.tokenizer.nfc", [b], tj["normalizer"]["type"] == "NFC"),
        ("skycmd.tokenizer.add_prefix_space", [b], tj["pre_tokenizer"]["add_prefix_space"]),
        ("skycmd.tokenizer.use_regex", [b], tj["pre_tokenizer"]["use_regex"]),
        ("skycmd.tokenizer.ignore_merges", [b], tj["model"]["ignore_merges"]),
        ("skycmd.tokenizer.added.ids", [A, u32], [t["id"] for t in at]),
        ("skycmd.tokenizer.added.contents", [A, s], [t["content"] for t in at]),
    ]
    for flag in ["special", "lstrip", "rstrip", "normalized", "single_word"]:
        keys.append((f"skycmd.tokenizer.added.{flag}", [A, b], [t[flag] for t in at]))
    keys.append(("skycmd.tokenizer.added.in_vocab", [A, b], [t["content"] in model_vocab for t in at]))
    return keys


def check_keys(reader, expected):
    got = list(reader.fields.keys())[3:]  # GGUF.version, GGUF.tensor_count, GGUF.kv_count
    assert got == [k for k, _, _ in expected], f"key order:\n got {got}\n exp {[k for k, _, _ in expected]}"
    for key, types, value in expected:
        gt, gv = field(reader, key)
        assert gt == types, f"{key}: types {gt} vs {types}"
        if types[0] == V.FLOAT32:
            assert np.float32(gv) == np.float32(value), f"{key}: {gv!r} vs {value!r}"
        else:
            assert gv == value, f"{key}: {str(gv)[:200]!r} vs {str(value)[:200]!r}"


def main():
    src_dir, out, ftype, head_type = Path(sys.argv[1]), sys.argv[2], TYPES[sys.argv[3]], TYPES[sys.argv[4]]
    reader = gguf.GGUFReader(out)
    n, total = check_tensors(src_dir, reader, ftype, head_type)
    if "--keys-s1-pico" in sys.argv:
        check_keys(reader, expected_s1_pico_keys(src_dir, ftype))
    print(f"OK {n} tensors {total} bytes")


if __name__ == "__main__":
    main()
