//! A checkpoint that shrinks while skyctl reads it (issue 53, class 2): a trainer writing
//! `model.safetensors` anew while `convert` runs. Mapped, the weights killed the process with
//! SIGBUS (19 runs in 20), and inside `skyctl build` the whole build with it; read, a short
//! file is a located error of that command or node.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, Ordering};

#[test]
fn convert_survives_a_checkpoint_truncated_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("m");
    let made = std::process::Command::new(common::skyctl_bin())
        .args(["random", "s1-pico"])
        .arg(&ckpt)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let weights = ckpt.join("model.safetensors");
    let full = std::fs::read(&weights).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Shrink the file to a tenth and write it whole again, over and over.
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&weights) {
                    let _ = f.set_len(full.len() as u64 / 10);
                }
                std::thread::sleep(std::time::Duration::from_micros(300));
                let _ = std::fs::write(&weights, &full);
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
        });
        // A failed assertion below must still stop the thread, or the scope never ends.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        for i in 0..20 {
            let out = dir.path().join(format!("o{i}.gguf"));
            let run = std::process::Command::new(common::skyctl_bin())
                .arg("convert")
                .arg(&ckpt)
                .arg(&out)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&run.stderr);
            assert_eq!(
                run.status.signal(),
                None,
                "run {i}: killed by a signal: {stderr}"
            );
            match run.status.code() {
                Some(0) => {}
                Some(2) => {
                    assert!(stderr.contains("model.safetensors"), "run {i}: {stderr}");
                    assert!(!out.exists(), "run {i}: a refused convert left its output");
                }
                c => panic!("run {i}: exit {c:?}: {stderr}"),
            }
        }
    });
}
