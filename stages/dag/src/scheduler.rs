//! The scheduler: runs ready nodes in parallel, in dependency order.
//!
//! # Design
//!
//! One coordinator (the calling thread) owns all state. For each node whose dependencies
//! have all succeeded it asks the [`Driver`] what to do ([`Driver::start`]): either the node is
//! already done (a cache hit, handled inline on the coordinator because that is much cheaper
//! than a thread) or it returns a [`Job`] closure. Jobs run on scoped worker threads, at most
//! `jobs` at a time, and send exactly one `Finished` message back, even when they panic (the
//! panic is caught and becomes an error), so the coordinator never waits forever. Only the
//! coordinator calls the driver, so the driver may print, update progress and touch caches
//! without locks.
//!
//! Exclusive nodes (benchmarks) start only when nothing else runs, and nothing else starts
//! while one runs; non-exclusive ready nodes go first, so exclusive ones tend to run last, on a
//! quiet machine.
//!
//! After the first failure, without `keep_going`, no new node starts; running ones finish and
//! are reported. With `keep_going`, only the dependents of a failed node are skipped, and so
//! it is for a node outside `stops` (one the release does not depend on: the release of what
//! succeeded is still written). A node that never started but whose dependencies all
//! succeeded is offered to [`Driver::settle`] first (in dependency order), so an up-to-date
//! node is reported as cached, not as skipped.
//!
//! The scheduler knows nothing about keys, files or stores: see `builder.rs` for the driver.

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;

use crate::graph::NodeIdx;

/// Work to run off the coordinator; its result goes back to [`Driver::finish`].
pub type Job<'a, R> = Box<dyn FnOnce() -> R + Send + 'a>;

/// The driver's answer for a ready node.
pub enum Start<'a, R> {
    /// Handled inline; `true` when it succeeded.
    Done(bool),
    /// Run this job on a worker.
    Run(Job<'a, R>),
}

/// A job panicked: the panic message, as `stage panicked: ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Panicked(pub String);

impl std::fmt::Display for Panicked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The per-node decisions the scheduler delegates.
pub trait Driver<'a, R> {
    /// A node's dependencies all succeeded.
    fn start(&mut self, node: NodeIdx) -> Start<'a, R>;
    /// A job ended (`Err`: it panicked); return whether it succeeded.
    fn finish(&mut self, node: NodeIdx, result: Result<R, Panicked>) -> bool;
    /// The build stopped before this node started, and its dependencies all succeeded:
    /// `true` when the driver finished it at no cost (it was up to date), `false` to skip it.
    fn settle(&mut self, _node: NodeIdx) -> bool {
        false
    }
    /// The node will not run (a dependency failed, or the build stopped).
    fn skip(&mut self, node: NodeIdx);
    /// Called about twice a second while jobs run, for progress displays.
    fn tick(&mut self) {}
    /// Do a little of the work put off until jobs run, while they do; `false` when none is
    /// left.
    fn spare(&mut self) -> bool {
        false
    }
    /// Whether to stop starting nodes (a signal asked the build to stop).
    fn stop(&mut self) -> bool {
        false
    }
}

/// Counts of how the nodes ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Nodes that succeeded (inline or on a worker).
    pub ok: usize,
    /// Nodes that failed.
    pub failed: usize,
    /// Nodes not run.
    pub skipped: usize,
}

/// Scheduling settings and the graph shape.
pub struct Scheduler<'g> {
    /// Direct dependencies of each node.
    pub deps: &'g [Vec<NodeIdx>],
    /// Nodes that must run alone.
    pub exclusive: Vec<bool>,
    /// Maximum concurrent jobs (at least 1).
    pub jobs: usize,
    /// Keep building independent nodes after a failure.
    pub keep_going: bool,
    /// Nodes whose failure stops the build when not `keep_going` (every node when empty); a
    /// failure of another one skips only its dependents, as with `keep_going`.
    pub stops: Vec<bool>,
}

impl Scheduler<'_> {
    fn stops_at(&self, x: NodeIdx) -> bool {
        self.stops.get(x).copied().unwrap_or(true)
    }

    /// Run every node with `selected[n]`, in dependency order (`order` breaks ties).
    pub fn run<'a, R: Send + 'a>(
        &self,
        selected: &[bool],
        order: &[NodeIdx],
        driver: &mut dyn Driver<'a, R>,
    ) -> Tally {
        let n = self.deps.len();
        let mut rank = vec![0usize; n];
        for (i, &x) in order.iter().enumerate() {
            rank[x] = i;
        }
        let mut waiting = vec![0usize; n];
        let mut rdeps = vec![Vec::new(); n];
        for x in 0..n {
            if !selected[x] {
                continue;
            }
            for &d in &self.deps[x] {
                if selected[d] {
                    waiting[x] += 1;
                    rdeps[d].push(x);
                }
            }
        }
        let mut ready: BTreeSet<(usize, NodeIdx)> = (0..n)
            .filter(|&x| selected[x] && waiting[x] == 0)
            .map(|x| (rank[x], x))
            .collect();
        let mut done = vec![false; n];
        let mut succeeded = vec![false; n];
        let mut tally = Tally::default();
        let mut stopped = false;
        let jobs = self.jobs.max(1);

        std::thread::scope(|scope| {
            let (tx, rx) = mpsc::channel::<(NodeIdx, Result<R, Panicked>)>();
            let mut running = 0usize;
            let mut exclusive_running = false;
            loop {
                stopped |= driver.stop();
                // Start what can start.
                while !stopped && !exclusive_running {
                    let pick = ready
                        .iter()
                        .find(|(_, x)| !self.exclusive[*x])
                        .copied()
                        .filter(|_| running < jobs)
                        .or_else(|| {
                            if running == 0 {
                                ready.iter().next().copied()
                            } else {
                                None
                            }
                        });
                    let Some(item) = pick else { break };
                    ready.remove(&item);
                    let x = item.1;
                    match driver.start(x) {
                        Start::Done(ok) => {
                            succeeded[x] = ok;
                            Self::complete(
                                x,
                                ok,
                                &mut done,
                                &mut waiting,
                                &rdeps,
                                &mut ready,
                                &rank,
                                &mut tally,
                                self.keep_going || !self.stops_at(x),
                                driver,
                            );
                            stopped |= !ok && !self.keep_going && self.stops_at(x);
                        }
                        Start::Run(job) => {
                            running += 1;
                            exclusive_running = self.exclusive[x];
                            let tx = tx.clone();
                            scope.spawn(move || {
                                let r = catch_unwind(AssertUnwindSafe(job)).map_err(panic_message);
                                let _ = tx.send((x, r));
                            });
                        }
                    }
                }
                if running == 0 {
                    break;
                }
                let mut arrived = None;
                while arrived.is_none() && driver.spare() {
                    arrived = rx.try_recv().ok();
                }
                let waited = match arrived {
                    Some(m) => Ok(m),
                    None => rx.recv_timeout(std::time::Duration::from_millis(500)),
                };
                let msg = match waited {
                    Ok(m) => m,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        driver.tick();
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                };
                running -= 1;
                exclusive_running = false;
                let (x, result) = msg;
                let ok = driver.finish(x, result);
                succeeded[x] = ok;
                Self::complete(
                    x,
                    ok,
                    &mut done,
                    &mut waiting,
                    &rdeps,
                    &mut ready,
                    &rank,
                    &mut tally,
                    self.keep_going || !self.stops_at(x),
                    driver,
                );
                stopped |= !ok && !self.keep_going && self.stops_at(x);
            }
        });
        // Whatever never started is settled (up to date) or skipped, in dependency order.
        for &x in order {
            let ready = self.deps[x].iter().all(|&d| !selected[d] || succeeded[d]);
            if selected[x] && !done[x] && ready && driver.settle(x) {
                done[x] = true;
                succeeded[x] = true;
                tally.ok += 1;
            }
        }
        for x in 0..n {
            if selected[x] && !done[x] {
                done[x] = true;
                tally.skipped += 1;
                driver.skip(x);
            }
        }
        tally
    }

    #[allow(clippy::too_many_arguments)]
    fn complete<'a, R>(
        x: NodeIdx,
        ok: bool,
        done: &mut [bool],
        waiting: &mut [usize],
        rdeps: &[Vec<NodeIdx>],
        ready: &mut BTreeSet<(usize, NodeIdx)>,
        rank: &[usize],
        tally: &mut Tally,
        keep_going: bool,
        driver: &mut dyn Driver<'a, R>,
    ) {
        done[x] = true;
        if ok {
            tally.ok += 1;
            for &r in &rdeps[x] {
                waiting[r] -= 1;
                if waiting[r] == 0 && !done[r] {
                    ready.insert((rank[r], r));
                }
            }
            return;
        }
        tally.failed += 1;
        if !keep_going {
            return;
        }
        // Skip every transitive dependent now, so `--keep-going` reports them as skipped.
        let mut stack: Vec<NodeIdx> = rdeps[x].clone();
        while let Some(r) = stack.pop() {
            if !done[r] {
                done[r] = true;
                ready.remove(&(rank[r], r));
                tally.skipped += 1;
                driver.skip(r);
                stack.extend(&rdeps[r]);
            }
        }
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> Panicked {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    Panicked(format!("stage panicked: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Fake {
        fail: Vec<NodeIdx>,
        panic: Vec<NodeIdx>,
        log: Vec<String>,
        live: Arc<AtomicUsize>,
        max_live: Arc<AtomicUsize>,
        exclusive_seen_with_others: Arc<AtomicUsize>,
        exclusive: Vec<bool>,
    }

    impl<'a> Driver<'a, bool> for Fake {
        fn start(&mut self, node: NodeIdx) -> Start<'a, bool> {
            self.log.push(format!("start {node}"));
            let fail = self.fail.contains(&node);
            let panic = self.panic.contains(&node);
            let live = self.live.clone();
            let max_live = self.max_live.clone();
            let bad = self.exclusive_seen_with_others.clone();
            let excl = self.exclusive[node];
            Start::Run(Box::new(move || {
                let now = live.fetch_add(1, Ordering::SeqCst) + 1;
                max_live.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(20));
                if excl && live.load(Ordering::SeqCst) != 1 {
                    bad.fetch_add(1, Ordering::SeqCst);
                }
                live.fetch_sub(1, Ordering::SeqCst);
                if panic {
                    panic!("boom");
                }
                !fail
            }))
        }
        fn finish(&mut self, node: NodeIdx, result: Result<bool, Panicked>) -> bool {
            self.log.push(format!("finish {node} {result:?}"));
            result.unwrap_or(false)
        }
        fn skip(&mut self, node: NodeIdx) {
            self.log.push(format!("skip {node}"));
        }
    }

    fn fake(exclusive: Vec<bool>) -> Fake {
        Fake {
            fail: vec![],
            panic: vec![],
            log: vec![],
            live: Arc::default(),
            max_live: Arc::default(),
            exclusive_seen_with_others: Arc::default(),
            exclusive,
        }
    }

    // 0 -> {1, 2} -> 3 ; 4 independent
    fn deps() -> Vec<Vec<NodeIdx>> {
        vec![vec![], vec![0], vec![0], vec![1, 2], vec![]]
    }

    #[test]
    fn runs_in_dependency_order_in_parallel() {
        let d = deps();
        let s = Scheduler {
            deps: &d,
            exclusive: vec![false; 5],
            jobs: 4,
            keep_going: false,
            stops: Vec::new(),
        };
        let mut f = fake(vec![false; 5]);
        let t = s.run(&[true; 5], &[0, 1, 2, 3, 4], &mut f);
        assert_eq!(
            t,
            Tally {
                ok: 5,
                failed: 0,
                skipped: 0
            }
        );
        let pos = |s: &str| f.log.iter().position(|l| l.starts_with(s)).unwrap();
        assert!(pos("finish 0") < pos("start 1"));
        assert!(pos("finish 1") < pos("start 3") && pos("finish 2") < pos("start 3"));
        assert!(f.max_live.load(Ordering::SeqCst) >= 2);
    }

    #[test]
    fn exclusive_runs_alone() {
        let d = deps();
        let excl = vec![false, true, false, false, false];
        let s = Scheduler {
            deps: &d,
            exclusive: excl.clone(),
            jobs: 4,
            keep_going: false,
            stops: Vec::new(),
        };
        let mut f = fake(excl);
        s.run(&[true; 5], &[0, 1, 2, 3, 4], &mut f);
        assert_eq!(f.exclusive_seen_with_others.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn failure_outside_stops_skips_only_its_dependents() {
        let d = deps();
        let s = Scheduler {
            deps: &d,
            exclusive: vec![false; 5],
            jobs: 1,
            keep_going: false,
            // 1 is not one the build stops for; 2 is.
            stops: vec![true, false, true, true, true],
        };
        let mut f = fake(vec![false; 5]);
        f.fail = vec![1];
        let t = s.run(&[true; 5], &[0, 1, 2, 3, 4], &mut f);
        // 0 and 2 and 4 run, 1 fails, its dependent 3 is skipped.
        assert_eq!(
            t,
            Tally {
                ok: 3,
                failed: 1,
                skipped: 1
            }
        );
        assert!(f.log.contains(&"skip 3".to_string()), "{:?}", f.log);
        let mut f = fake(vec![false; 5]);
        f.fail = vec![2];
        let t = s.run(&[true; 5], &[0, 1, 2, 3, 4], &mut f);
        assert_eq!(t.failed, 1);
        assert!(t.skipped >= 1 && t.ok + t.skipped == 4, "{t:?}");
        assert!(!f.log.contains(&"start 4".to_string()), "{:?}", f.log);
    }

    #[test]
    fn failure_stops_new_work_and_skips_the_rest() {
        let d = deps();
        let s = Scheduler {
            deps: &d,
            exclusive: vec![false; 5],
            jobs: 1,
            keep_going: false,
            stops: Vec::new(),
        };
        let mut f = fake(vec![false; 5]);
        f.fail = vec![0];
        let t = s.run(&[true; 5], &[0, 1, 2, 3, 4], &mut f);
        assert_eq!(
            t,
            Tally {
                ok: 0,
                failed: 1,
                skipped: 4
            }
        );
    }

    #[test]
    fn keep_going_skips_only_dependents() {
        let d = deps();
        let s = Scheduler {
            deps: &d,
            exclusive: vec![false; 5],
            jobs: 2,
            keep_going: true,
            stops: Vec::new(),
        };
        let mut f = fake(vec![false; 5]);
        f.fail = vec![1];
        let t = s.run(&[true; 5], &[0, 1, 2, 3, 4], &mut f);
        assert_eq!(
            t,
            Tally {
                ok: 3,
                failed: 1,
                skipped: 1
            }
        );
        assert!(f.log.contains(&"skip 3".to_string()));
    }

    #[test]
    fn a_panicking_stage_does_not_hang_the_build() {
        let d = deps();
        let s = Scheduler {
            deps: &d,
            exclusive: vec![false; 5],
            jobs: 2,
            keep_going: true,
            stops: Vec::new(),
        };
        let mut f = fake(vec![false; 5]);
        f.panic = vec![2];
        let t = s.run(&[true; 5], &[0, 1, 2, 3, 4], &mut f);
        assert_eq!(t.failed, 1);
        assert!(
            f.log.iter().any(|l| l.contains("stage panicked: boom")),
            "{:?}",
            f.log
        );
    }

    #[test]
    fn after_a_failure_nodes_whose_dependencies_succeeded_may_settle() {
        struct Settling(Fake);
        impl<'a> Driver<'a, bool> for Settling {
            fn start(&mut self, node: NodeIdx) -> Start<'a, bool> {
                self.0.start(node)
            }
            fn finish(&mut self, node: NodeIdx, result: Result<bool, Panicked>) -> bool {
                self.0.finish(node, result)
            }
            fn settle(&mut self, node: NodeIdx) -> bool {
                self.0.log.push(format!("settle {node}"));
                true
            }
            fn skip(&mut self, node: NodeIdx) {
                self.0.skip(node)
            }
        }
        let d = deps();
        let s = Scheduler {
            deps: &d,
            exclusive: vec![false; 5],
            jobs: 1,
            keep_going: false,
            stops: Vec::new(),
        };
        let mut f = Settling(fake(vec![false; 5]));
        f.0.fail = vec![1];
        let t = s.run(&[true; 5], &[0, 1, 2, 3, 4], &mut f);
        // 0 ran, 1 failed; 2 and 4 settle (their dependencies succeeded); 3 needs 1: skipped.
        assert_eq!(
            t,
            Tally {
                ok: 3,
                failed: 1,
                skipped: 1
            }
        );
        let log = &f.0.log;
        assert!(log.contains(&"settle 2".to_string()), "{log:?}");
        assert!(log.contains(&"settle 4".to_string()), "{log:?}");
        assert!(!log.contains(&"settle 3".to_string()), "{log:?}");
        assert!(log.contains(&"skip 3".to_string()), "{log:?}");
    }
}
