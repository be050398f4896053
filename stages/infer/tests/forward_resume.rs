//! A pass resumed at any encoder layer boundary, from the hidden state a whole pass captured
//! there, gives the whole pass's scores bit for bit (what `skyctl tune` relies on to skip the
//! layers a lowered tensor does not touch); bad resume states are refused.

mod common;
use common::numbers;

use sky_infer::config::QType;
use sky_infer::forward::{forward, forward_from, Boundaries, Resume, Workspace};

#[test]
fn resumed_passes_equal_whole_passes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let engine = sky_infer::load::open(&root.join("models/s1-pico")).expect("load s1-pico");
    let m = &engine.model;
    let n_enc = m.layers.len();
    let text = std::fs::read_to_string(root.join("fixtures/laya-ref/goldens/s1-pico.f64.jsonl"))
        .expect("s1-pico goldens");
    let mut ws = Workspace::new();
    let mut checked = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()).take(12) {
        let rec: serde_json::Value = serde_json::from_str(line).expect("golden JSON");
        let ids = numbers(&rec, "input_ids", |x| x as u32);
        let markers = numbers(&rec, "markers", |x| x as usize);
        let qtype = QType::parse(rec["type"].as_str().expect("type")).expect("qtype");
        let whole = forward(m, engine.isa, &mut ws, &ids, &markers, qtype, None)
            .expect("forward")
            .to_vec();
        let mut states = Vec::new();
        let captured = forward_from(
            m,
            engine.isa,
            &mut ws,
            &ids,
            &markers,
            qtype,
            None,
            Boundaries {
                resume: None,
                capture: Some(&mut states),
            },
        )
        .expect("capturing pass")
        .to_vec();
        assert_eq!(captured, whole, "capturing changes nothing");
        assert_eq!(states.len(), n_enc + 1, "one state per boundary");
        for (layer, x) in states.iter().enumerate() {
            assert_eq!(x.len(), ids.len() * m.config.hidden);
            let mut tail = Vec::new();
            let resumed = forward_from(
                m,
                engine.isa,
                &mut ws,
                &ids,
                &markers,
                qtype,
                None,
                Boundaries {
                    resume: Some(Resume { layer, x }),
                    capture: Some(&mut tail),
                },
            )
            .expect("resumed pass");
            assert_eq!(resumed, &whole[..], "resumed at layer {layer}");
            assert_eq!(
                tail,
                states[layer..],
                "the boundaries from layer {layer} on"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 12);
}

#[test]
fn bad_resume_states_are_refused() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let engine = sky_infer::load::open(&root.join("models/s1-pico")).expect("load s1-pico");
    let m = &engine.model;
    let (ids, markers) = (vec![2u32, 5, 4, 3], vec![2usize]);
    let x = vec![0f32; ids.len() * m.config.hidden];
    let mut ws = Workspace::new();
    for (layer, len) in [(m.layers.len() + 1, x.len()), (0, x.len() - 1)] {
        let e = forward_from(
            m,
            engine.isa,
            &mut ws,
            &ids,
            &markers,
            QType::Choice,
            None,
            Boundaries {
                resume: Some(Resume {
                    layer,
                    x: &x[..len],
                }),
                capture: None,
            },
        )
        .expect_err("refused")
        .to_string();
        assert!(
            e.contains(&format!("a resume state for layer {layer} of {len} values")),
            "{e}"
        );
    }
}
