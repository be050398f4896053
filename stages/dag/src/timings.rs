//! Phase timers for profiling a build: with `SKYCTL_TIMINGS=1` in the environment, each
//! [`mark`] records how long the phase that ends there took, and [`report`] returns one line
//! per phase (the CLI prints it on stderr). Without the variable, a mark is one relaxed load.
//! The CLI calls [`init`] first, so a value that is not `1` or `0` is refused (exit 2).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// 0: not checked yet, 1: off, 2: on.
static STATE: AtomicU8 = AtomicU8::new(0);
static MARKS: Mutex<Vec<(&'static str, Instant)>> = Mutex::new(Vec::new());

/// The variable that turns the timers on.
pub const TIMINGS_ENV: &str = "SKYCTL_TIMINGS";

/// Read `SKYCTL_TIMINGS` (`1` or `0`; unset: off). A value that is neither is an error for the
/// caller to report; the timers are then off.
pub fn init() -> Result<(), sky_env::EnvError> {
    let on = sky_env::Var::get(TIMINGS_ENV).flag();
    STATE.store(if on == Ok(Some(true)) { 2 } else { 1 }, Ordering::Relaxed);
    on.map(|_| ())
}

fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let _ = init();
            STATE.load(Ordering::Relaxed) == 2
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
