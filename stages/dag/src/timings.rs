//! Phase timers for profiling a build: with `SKYCTL_TIMINGS=1` in the environment, each
//! [`mark`] records how long the phase that ends there took, and [`report`] returns one line
//! per phase (the CLI prints it on stderr). Without the variable, a mark is one relaxed load.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// 0: not checked yet, 1: off, 2: on.
static STATE: AtomicU8 = AtomicU8::new(0);
static MARKS: Mutex<Vec<(&'static str, Instant)>> = Mutex::new(Vec::new());

fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let on = std::env::var_os("SKYCTL_TIMINGS").is_some_and(|v| !v.is_empty() && v != "0");
            STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
    }
}

/// The phase `name` ends now.
pub fn mark(name: &'static str) {
    if enabled() {
        let now = Instant::now();
        MARKS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name, now));
    }
}

/// `name ms` per phase since the first mark (empty when timings are off).
pub fn report() -> Vec<String> {
    if !enabled() {
        return Vec::new();
    }
    let marks = MARKS.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = Vec::new();
    let Some(&(_, first)) = marks.first() else {
        return out;
    };
    let mut prev = first;
    for &(name, t) in marks.iter().skip(1) {
        out.push(format!(
            "{name:<24} {:8.3} ms",
            t.duration_since(prev).as_secs_f64() * 1e3
        ));
        prev = t;
    }
    if let Some(&(_, last)) = marks.last() {
        out.push(format!(
            "{:<24} {:8.3} ms",
            "total",
            last.duration_since(first).as_secs_f64() * 1e3
        ));
    }
    out
}
