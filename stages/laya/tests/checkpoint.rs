//! Opening Laya directories: the reference checkpoints, f32/f16/bf16 sources, sharded weights,
//! and random presets.

use std::path::{Path, PathBuf};

use sky_laya::random::{
    preset, random_tensors, safetensors_bytes, write_random, TensorMap, WeightDtype, PRESETS,
};
use sky_laya::{build_writer, CheckpointFiles, ConvertOptions, LayaCheckpoint};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn gguf_bytes(ckpt: &LayaCheckpoint, name: &str) -> Vec<u8> {
    let opts = ConvertOptions {
        name: Some(name.into()),
        ..Default::default()
    };
    build_writer(ckpt, &opts).unwrap().0.to_bytes().unwrap()
}

#[test]
fn reference_checkpoints_open_with_their_configs() {
    for (model, params, n_tensors, n_enc, heads) in [
        ("s1-pico", 202_305, 33, 2, 1),
        ("s1-nano", 1_134_209, 45, 4, 1),
        ("s1-micro", 6_630_913, 69, 6, 2),
    ] {
        let c = LayaCheckpoint::open(root().join("models").join(model)).unwrap();
        assert_eq!(c.n_params(), params, "{model}");
        assert_eq!(c.tensors().len(), n_tensors, "{model}");
        assert_eq!(c.encoder.num_hidden_layers, n_enc);
        assert_eq!(c.agent.head_layers, heads);
        assert_eq!(
            (c.encoder.norm_eps, c.encoder.layer_norm_eps),
            (Some(1e-5), None)
        );
        assert_eq!(
            (c.encoder.global_rope_theta, c.encoder.local_rope_theta),
            (160000.0, 10000.0)
        );
        assert!(c.root_config.is_none());
        let names: Vec<String> = c.agent.temperatures().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "choice",
                "score",
                "noul",
                "choice.2",
                "choice.3_5",
                "choice.11",
                "score.3_5",
                "score.6_10",
                "noul.2"
            ]
        );
        // llama.cpp's order: sorted PyTorch names
        let src: Vec<&str> = c
            .tensors()
            .iter()
            .map(|t| t.pytorch_name.as_str())
            .collect();
        let mut sorted = src.clone();
        sorted.sort();
        assert_eq!(src, sorted);
        let (g, p, shape, data) = c.iter_f32().next().unwrap();
        assert_eq!(
            (g, p, shape),
            (
                "token_embd_norm.weight",
                "encoder.embeddings.norm.weight",
                &[c.encoder.hidden_size][..]
            )
        );
        assert_eq!(data.len(), c.encoder.hidden_size);
    }
}

#[test]
fn f16_and_f32_copies_hold_the_same_values() {
    let a = LayaCheckpoint::open(root().join("models/s1-pico")).unwrap();
    let b = LayaCheckpoint::open(root().join("fixtures/laya-ref/s1-pico-f32")).unwrap();
    for (x, y) in a.iter_f32().zip(b.iter_f32()) {
        assert_eq!(x.0, y.0);
        assert_eq!(x.3, y.3, "{}", x.1);
    }
    assert_eq!(gguf_bytes(&a, "p"), gguf_bytes(&b, "p"));
}

fn all_tensors(c: &LayaCheckpoint) -> TensorMap {
    c.tensors()
        .iter()
        .map(|t| (t.pytorch_name.clone(), (t.shape.clone(), c.read_f32(t))))
        .collect()
}

#[test]
fn sharded_weights_convert_like_one_file() {
    let src = root().join("fixtures/laya-ref/s1-pico-f32");
    let one = LayaCheckpoint::open(&src).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("sharded");
    for sub in ["encoder", "tokenizer"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    for f in [
        "encoder/config.json",
        "rl_agent_config.json",
        "tokenizer/tokenizer.json",
        "tokenizer/tokenizer_config.json",
    ] {
        std::fs::copy(src.join(f), d.join(f)).unwrap();
    }
    let all = all_tensors(&one);
    // the second shard's names sort first inside the file but the file sorts second
    let (first, second): (TensorMap, TensorMap) = all
        .into_iter()
        .partition(|(n, _)| n.starts_with("encoder.layers"));
    let mut weight_map = serde_json::Map::new();
    for (file, part) in [
        ("model-00001-of-00002.safetensors", &first),
        ("model-00002-of-00002.safetensors", &second),
    ] {
        std::fs::write(
            d.join(file),
            safetensors_bytes(part, WeightDtype::F32).unwrap(),
        )
        .unwrap();
        for n in part.keys() {
            weight_map.insert(n.clone(), file.into());
        }
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(d.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let sharded = LayaCheckpoint::open(&d).unwrap();
    assert_eq!(sharded.n_params(), one.n_params());
    // llama.cpp lists parts in file order, names sorted within each part
    assert_eq!(
        sharded.tensors()[0].pytorch_name,
        "encoder.layers.0.attn.Wo.weight"
    );
    let mut a: Vec<_> = sharded
        .iter_f32()
        .map(|(g, _, _, v)| (g.to_string(), v))
        .collect();
    let mut b: Vec<_> = one
        .iter_f32()
        .map(|(g, _, _, v)| (g.to_string(), v))
        .collect();
    a.sort_by(|x, y| x.0.cmp(&y.0));
    b.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(a, b);

    // a duplicate across shards is refused by name
    let dup: TensorMap = second
        .iter()
        .take(1)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    std::fs::write(
        d.join("model-00001-of-00002.safetensors"),
        safetensors_bytes(&dup.into_iter().chain(first).collect(), WeightDtype::F32).unwrap(),
    )
    .unwrap();
    let e = LayaCheckpoint::open(&d).unwrap_err().to_string();
    assert!(e.contains("appears in both"), "{e}");
}

#[test]
fn bf16_and_f16_sources_round_like_the_writer() {
    let p = preset("s1-pico").unwrap();
    let exact = random_tensors(&p, 9).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (dtype, round) in [
        (
            WeightDtype::BF16,
            (|x: f32| sky_gguf::bf16_to_f32(sky_gguf::f32_to_bf16(x))) as fn(f32) -> f32,
        ),
        (WeightDtype::F16, |x: f32| {
            sky_gguf::f16_to_f32(sky_gguf::f32_to_f16(x))
        }),
    ] {
        let d = dir.path().join(format!("{dtype:?}"));
        write_random(&p, &d, 9, dtype).unwrap();
        let c = LayaCheckpoint::open(&d).unwrap();
        for (_, name, _, v) in c.iter_f32() {
            let want: Vec<f32> = exact[name].1.iter().map(|&x| round(x)).collect();
            assert_eq!(v, want, "{dtype:?} {name}");
        }
    }
}

#[test]
fn random_presets_open_with_exact_sizes_and_are_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    for p in PRESETS {
        let d = dir.path().join(p.name);
        assert_eq!(
            write_random(&p, &d, p.seed, WeightDtype::F32).unwrap(),
            p.params
        );
        let c = LayaCheckpoint::open(&d).unwrap();
        assert_eq!(c.n_params(), p.params);
        assert_eq!(c.encoder.hidden_size, p.hidden);
        assert_eq!(c.agent.head_max_len, p.head_max_len);
    }
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    let p = preset("s1-nano").unwrap();
    write_random(&p, &a, 42, WeightDtype::F16).unwrap();
    write_random(&p, &b, 42, WeightDtype::F16).unwrap();
    for f in [
        "model.safetensors",
        "encoder/config.json",
        "rl_agent_config.json",
        "tokenizer/tokenizer.json",
    ] {
        assert!(
            std::fs::read(a.join(f)).unwrap() == std::fs::read(b.join(f)).unwrap(),
            "{f}"
        );
    }
    // the small tokenizer is the reference size's
    assert!(
        std::fs::read(a.join("tokenizer/tokenizer.json")).unwrap()
            == std::fs::read(root().join("models/s1-nano/tokenizer/tokenizer.json")).unwrap()
    );
}

#[test]
fn streamed_file_equals_the_in_memory_gguf_writer() {
    let dir = tempfile::tempdir().unwrap();
    for (model, ftype, head) in [
        (
            "models/s1-pico",
            sky_gguf::GgmlType::F16,
            sky_gguf::GgmlType::F32,
        ),
        (
            "models/s1-nano",
            sky_gguf::GgmlType::Q8_0,
            sky_gguf::GgmlType::BF16,
        ),
    ] {
        let c = LayaCheckpoint::open(root().join(model)).unwrap();
        let opts = ConvertOptions {
            policy: sky_laya::TypePolicy {
                ftype,
                head_type: head,
                rules: vec![("blk.1.ffn_down.weight".into(), sky_gguf::GgmlType::F32)],
            },
            ..Default::default()
        };
        let out = dir.path().join("x.gguf");
        let s = sky_laya::convert(&c, &opts, &out).unwrap();
        let streamed = std::fs::read(&out).unwrap();
        let (w, tensors) = build_writer(&c, &opts).unwrap();
        assert!(streamed == w.to_bytes().unwrap(), "{model}");
        assert_eq!(s.tensors, tensors);
        assert_eq!(s.file_bytes, streamed.len() as u64);
        let f = sky_gguf::GgufFile::parse(&streamed).unwrap();
        assert_eq!(
            f.tensor("blk.1.ffn_down.weight").unwrap().ty,
            sky_gguf::GgmlType::F32
        );
    }
}

/// The files of a checkpoint directory, read.
struct Files(Vec<(&'static str, Vec<u8>)>);

impl Files {
    const NAMES: [&'static str; 7] = [
        "model.safetensors",
        "encoder/config.json",
        "rl_agent_config.json",
        "tokenizer/tokenizer.json",
        "tokenizer/tokenizer_config.json",
        "config.json",
        "tokenizer/config.json",
    ];

    fn read(dir: &Path) -> Files {
        let read = |rel| std::fs::read(dir.join(rel)).ok().map(|b| (rel, b));
        Files(Self::NAMES.into_iter().filter_map(read).collect())
    }

    fn get(&self, rel: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(r, _)| *r == rel)
            .map(|(_, b)| b.as_slice())
    }

    fn set(&mut self, rel: &'static str, bytes: &[u8]) {
        self.0.retain(|(r, _)| *r != rel);
        self.0.push((rel, bytes.to_vec()));
    }

    fn in_memory(&self) -> CheckpointFiles<'_> {
        let req = |rel| self.get(rel).unwrap_or_default();
        CheckpointFiles {
            weights: req("model.safetensors"),
            encoder_config: req("encoder/config.json"),
            agent_config: req("rl_agent_config.json"),
            tokenizer_json: req("tokenizer/tokenizer.json"),
            tokenizer_config: req("tokenizer/tokenizer_config.json"),
            root_config: self.get("config.json"),
            tokenizer_model_config: self.get("tokenizer/config.json"),
        }
    }

    fn write(&self, dir: &Path) {
        for (rel, bytes) in &self.0 {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
    }
}

#[test]
fn files_in_memory_load_like_the_directory() {
    let src = root().join("models/s1-pico");
    let files = Files::read(&src);
    let a = LayaCheckpoint::open(&src).unwrap();
    let b = LayaCheckpoint::from_files(&src, &files.in_memory()).unwrap();
    assert_eq!(a.tensors(), b.tensors());
    assert_eq!((&a.encoder, &a.agent), (&b.encoder, &b.agent));
    assert_eq!(a.tokenizer.json, b.tokenizer.json);
    assert_eq!(gguf_bytes(&a, "s1-pico"), gguf_bytes(&b, "s1-pico"));

    // Each broken file gives the directory's error, word for word.
    let w = files.get("model.safetensors").unwrap();
    let cases: [(&str, &[u8]); 11] = [
        ("encoder/config.json", b"{\"hidden_size\": 64"),
        ("encoder/config.json", b"[1]"),
        ("rl_agent_config.json", b"{\"head_layers\": 4294967297}"),
        (
            "rl_agent_config.json",
            b"{\"head_layers\": 1, \"x\": \"\xff\"}",
        ),
        ("tokenizer/tokenizer.json", b"\xff\xfe"),
        (
            "tokenizer/tokenizer_config.json",
            b"{\"cls_token\": \"[NOPE]\"}",
        ),
        ("tokenizer/config.json", b"nope"),
        ("config.json", b"[]"),
        ("model.safetensors", b"\x01\x00"),
        ("model.safetensors", &w[..w.len() - 4]),
        ("model.safetensors", &w[..100]),
    ];
    let tmp = tempfile::tempdir().unwrap();
    for (i, (rel, bytes)) in cases.into_iter().enumerate() {
        let mut f = Files::read(&src);
        f.set(rel, bytes);
        let d = tmp.path().join(format!("case{i}"));
        f.write(&d);
        let from_dir = LayaCheckpoint::open(&d).unwrap_err().to_string();
        let in_memory = LayaCheckpoint::from_files(&d, &f.in_memory())
            .unwrap_err()
            .to_string();
        assert_eq!(from_dir, in_memory, "{rel}");
    }

    // Reading every file first changes no error: a broken encoder config is still reported
    // before a missing tokenizer.
    let d = tmp.path().join("two-faults");
    let mut f = Files::read(&src);
    f.set("encoder/config.json", b"{}");
    f.write(&d);
    std::fs::remove_file(d.join("tokenizer/tokenizer.json")).unwrap();
    let e = LayaCheckpoint::open(&d).unwrap_err().to_string();
    assert!(e.contains("encoder") && e.contains("hidden_size"), "{e}");
}

/// A conversion told to stop ends with `Cancelled` before the first tensor and leaves nothing
/// at the output path; one never told to stop writes the same file as `convert`.
#[test]
fn a_conversion_told_to_stop_leaves_nothing() {
    let c = LayaCheckpoint::open(root().join("models/s1-pico")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s1-pico.gguf");
    let err =
        sky_laya::convert_until(&c, &ConvertOptions::default(), &out, Some(|| true)).unwrap_err();
    assert!(matches!(err, sky_laya::LayaError::Cancelled), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    sky_laya::convert_until(&c, &ConvertOptions::default(), &out, Some(|| false)).unwrap();
    let plain = dir.path().join("plain.gguf");
    sky_laya::convert(&c, &ConvertOptions::default(), &plain).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&plain).unwrap());
}
