//! `Engine::stop`: work told to stop ends with `InferError::Cancelled` before its next forward
//! pass (questions, golden cases, calibration prompts), and the answer is unchanged when it is
//! never told to.

use std::sync::atomic::{AtomicUsize, Ordering};

use sky_infer::error::InferError;
use sky_infer::forward::Workspace;

/// Says "stop" from its third call on.
static CALLS: AtomicUsize = AtomicUsize::new(0);
fn stop_at_third() -> bool {
    CALLS.fetch_add(1, Ordering::SeqCst) >= 2
}

#[test]
fn a_stopped_engine_ends_with_cancelled() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut engine = sky_infer::load::open(&root.join("models/s1-pico")).expect("load s1-pico");
    let cases = std::fs::read_to_string(root.join("golden/laya/cases.jsonl")).expect("cases");
    let cases = sky_infer::golden::parse_cases(&cases).expect("parse cases");
    let plain = sky_infer::golden::run_cases(&engine, &cases[..4]);

    engine.stop = Some(|| false);
    let unstopped = sky_infer::golden::run_cases(&engine, &cases[..4]);
    assert_eq!(unstopped.len(), plain.len());
    for ((id, a), (_, b)) in unstopped.iter().zip(&plain) {
        let (a, b) = (a.as_ref().expect(id), b.as_ref().expect(id));
        assert_eq!(a.probabilities, b.probabilities, "{id}");
    }

    engine.stop = Some(stop_at_third);
    let outputs = sky_infer::golden::run_cases(&engine, &cases[..4]);
    // The third case is cancelled and ends the list.
    assert_eq!(outputs.len(), 3);
    assert!(outputs[0].1.is_ok() && outputs[1].1.is_ok());
    assert!(
        matches!(outputs[2].1, Err(InferError::Cancelled)),
        "{:?}",
        outputs[2]
    );

    engine.stop = Some(|| true);
    let err = sky_infer::calibrate::calibrate_builtin(&engine).unwrap_err();
    assert!(matches!(err, InferError::Cancelled), "{err}");
    let mut ws = Workspace::new();
    let err = engine.run_case(&mut ws, &cases[0]).unwrap_err();
    assert!(matches!(err, InferError::Cancelled), "{err}");
    assert_eq!(err.to_string(), "stopped: cancelled by the caller");
}
