//! Token ids and marker positions of every golden case, for all three tokenizers, equal the
//! Python Laya runtime's `build_sequence` output exactly.

mod common;

use sky_infer::engine::Engine;
use sky_infer::sequence::Question;

fn check(model: &str) {
    let engine: Engine = sky_infer::load::engine_from_laya_dir(&common::model_dir(model)).unwrap();
    let cases = common::read_jsonl(&common::repo_root().join("fixtures/laya-ref/cases.jsonl"));
    let goldens = common::golden(model, "f32");
    assert_eq!(cases.len(), goldens.len());
    let mut bad = Vec::new();
    for (case, gold) in cases.iter().zip(&goldens) {
        let id = case["id"].as_str().unwrap();
        assert_eq!(gold["id"].as_str(), Some(id));
        let q = Question::parse(id, case).unwrap();
        assert_eq!(
            q.options,
            gold["rendered_options"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect::<Vec<_>>(),
            "{id}: options"
        );
        let seq = engine.sequence(&q, &case["state"], id).unwrap();
        let want_ids: Vec<u32> = gold["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let want_markers: Vec<usize> = gold["markers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        if seq.ids != want_ids || seq.markers != want_markers {
            let first = seq.ids.iter().zip(&want_ids).position(|(a, b)| a != b);
            bad.push(format!(
                "{id}: len {} vs {}, first diff at {first:?}, markers {:?} vs {:?}",
                seq.ids.len(),
                want_ids.len(),
                seq.markers,
                want_markers
            ));
        }
        assert_eq!(
            seq.state_tokens,
            gold["state_tokens"].as_u64().unwrap() as usize,
            "{id}: state tokens"
        );
        assert_eq!(
            seq.state_tokens_used,
            gold["state_tokens_used"].as_u64().unwrap() as usize,
            "{id}: state tokens used"
        );
        assert_eq!(
            seq.options_distinct,
            gold["option_stats"]["options_distinct"].as_u64().unwrap() as usize,
            "{id}: distinct"
        );
    }
    assert!(
        bad.is_empty(),
        "{model}: {} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn pico_sequences_match() {
    check("s1-pico");
}

#[test]
fn nano_sequences_match() {
    if !common::model_selected("s1-nano") {
        return;
    }
    check("s1-nano");
}

#[test]
fn micro_sequences_match() {
    if !common::model_selected("s1-micro") {
        return;
    }
    check("s1-micro");
}
