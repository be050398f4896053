//! Worker threads for one forward pass ([`crate::forward::Workspace::set_threads`]).
//!
//! The pass is split, never reordered: every output element is computed by exactly the same
//! operations in the same order whichever thread computes it (matrix products split by rows
//! of their input or by panels of output columns, attention by (head, query block)), so the
//! scores are bit for bit those of
//! one thread. The calling thread takes the first part of every split and `n - 1` worker
//! threads the others. A pass synchronises about twice per layer, a few microseconds apart, so
//! the workers wait for the next part spinning (about 100 µs, then they sleep until the next
//! pass), so that a pass does not wait for a sleeping thread to be woken at every stretch. On
//! wasm32 there are no workers and only one thread.

use crate::error::{InferError, Result};

/// Most threads one pass may use.
pub const MAX_THREADS: usize = 16;

/// The threads a forward pass runs on: the caller plus `count() - 1` workers.
pub struct Threads {
    n: usize,
    #[cfg(not(target_arch = "wasm32"))]
    pool: Option<pool::Pool>,
}

impl Default for Threads {
    fn default() -> Self {
        Threads::one()
    }
}

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Threads({})", self.n)
    }
}

impl Threads {
    /// The calling thread alone.
    pub fn one() -> Threads {
        Threads {
            n: 1,
            #[cfg(not(target_arch = "wasm32"))]
            pool: None,
        }
    }

    /// `n` threads (1..=[`MAX_THREADS`]); the `n - 1` workers are started here and stopped
    /// when this value is dropped.
    ///
    /// Errors: `n` out of range, a thread cannot be started, or (wasm32) `n > 1`.
    pub fn new(n: usize) -> Result<Threads> {
        if n == 0 || n > MAX_THREADS {
            return Err(InferError::BadValue {
                key: "threads".into(),
                message: format!("{n} is not a thread count from 1 to {MAX_THREADS}"),
            });
        }
        if n == 1 {
            return Ok(Threads::one());
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let pool = pool::Pool::new(n - 1).map_err(|e| InferError::BadValue {
                key: "threads".into(),
                message: format!("cannot start {} worker threads: {e}", n - 1),
            })?;
            Ok(Threads {
                n,
                pool: Some(pool),
            })
        }
        #[cfg(target_arch = "wasm32")]
        Err(InferError::BadValue {
            key: "threads".into(),
            message: format!("{n} threads: this build runs on one thread only"),
        })
    }

    /// Threads a pass may use (1 = the caller alone).
    pub fn count(&self) -> usize {
        self.n
    }

    /// Runs `f` on every part, the first on the calling thread and the others on the
    /// workers (part `i` on thread `i % count()`), and returns when all are done.
    pub(crate) fn for_each<T: Send>(&self, parts: impl Iterator<Item = T>, f: impl Fn(T) + Sync) {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(pool) = &self.pool {
            let mut parts = parts;
            let mut slots: [std::sync::Mutex<Option<T>>; MAX_THREADS] =
                std::array::from_fn(|_| std::sync::Mutex::new(None));
            let mut count = 0;
            for (slot, p) in slots.iter_mut().zip(parts.by_ref()) {
                *slot.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(p);
                count += 1;
            }
            let used = count.min(self.n);
            let take = |t: usize| {
                for slot in slots.iter().take(count).skip(t).step_by(used.max(1)) {
                    let item = slot.lock().map(|mut s| s.take());
                    if let Ok(Some(p)) = item {
                        f(p);
                    }
                }
            };
            pool.run(used, &take);
            // More parts than slots (no caller of this crate makes that many): the rest here.
            parts.for_each(&f);
            return;
        }
        parts.for_each(f);
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod pool {
    //! The workers: each spins on a job counter, runs its part of the job, and signals done.

    use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    /// How long an idle worker spins before it sleeps.
    const SPIN: Duration = Duration::from_micros(100);

    /// The job all workers see: a type-erased `&(dyn Fn(usize) + Sync)`.
    type Job = *const (dyn Fn(usize) + Sync + 'static);

    struct Shared {
        /// `generation << 8 | parts` of the current job (part 0 is the caller's): read in
        /// one load, so that a worker never pairs one job's generation with another's parts.
        /// The generation is bumped for every job and for shutdown.
        state: AtomicU64,
        /// Workers' parts of the current job not finished yet.
        pending: AtomicUsize,
        /// The current job, valid from `generation`'s bump until `pending` reaches 0.
        job: AtomicPtr<JobBox>,
        /// Per worker: asleep (or about to be), so the caller must unpark it.
        sleeping: Vec<AtomicBool>,
        stop: AtomicBool,
        /// A worker's part panicked (the caller re-raises it once all parts are done).
        panicked: AtomicBool,
    }

    /// A fat pointer behind a thin one, so that it fits an `AtomicPtr`.
    struct JobBox(Job);

    pub(super) struct Pool {
        shared: Arc<Shared>,
        workers: Vec<JoinHandle<()>>,
    }

    impl Pool {
        pub(super) fn new(workers: usize) -> std::io::Result<Pool> {
            let shared = Arc::new(Shared {
                state: AtomicU64::new(0),
                pending: AtomicUsize::new(0),
                job: AtomicPtr::new(std::ptr::null_mut()),
                sleeping: (0..workers).map(|_| AtomicBool::new(false)).collect(),
                stop: AtomicBool::new(false),
                panicked: AtomicBool::new(false),
            });
            let mut pool = Pool {
                shared: shared.clone(),
                workers: Vec::with_capacity(workers),
            };
            for w in 0..workers {
                let s = shared.clone();
                let handle = std::thread::Builder::new()
                    .name(format!("sky-infer-{}", w + 1))
                    .spawn(move || worker(&s, w))?;
                pool.workers.push(handle);
            }
            Ok(pool)
        }

        /// Runs `f(0)` here and `f(1..parts)` on workers 0..parts - 1; returns when all are
        /// done (so nothing of `f` is used after it returns).
        pub(super) fn run(&self, parts: usize, f: &(dyn Fn(usize) + Sync)) {
            let parts = parts.min(self.workers.len() + 1);
            if parts <= 1 {
                if parts == 1 {
                    f(0);
                }
                return;
            }
            let s = &*self.shared;
            // SAFETY: the lifetime is erased only for as long as workers may call the job:
            // this function does not return before `pending` is 0, i.e. before every worker
            // that took a part has finished it, and workers touch the job only in between.
            let job: Job = unsafe {
                std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(f)
            };
            let mut boxed = JobBox(job);
            s.job.store(&mut boxed, Ordering::SeqCst);
            s.pending.store(parts - 1, Ordering::SeqCst);
            let gen = (s.state.load(Ordering::SeqCst) >> 8) + 1;
            s.state.store(gen << 8 | parts as u64, Ordering::SeqCst);
            for (w, sleeping) in s.sleeping.iter().enumerate().take(parts - 1) {
                if sleeping.swap(false, Ordering::SeqCst) {
                    self.workers[w].thread().unpark();
                }
            }
            // The workers may use `f` until `pending` is 0: a panic in the caller's part waits
            // for them too before it unwinds.
            let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(0)));
            let mut spins = 0u32;
            while s.pending.load(Ordering::Acquire) != 0 {
                relax(&mut spins);
                if spins.is_multiple_of(4096) {
                    // A worker of this job asleep while its part is pending missed its wake-up:
                    // seen under qemu-user on an x86-64 host, which does not keep aarch64's
                    // store-release / load-acquire pair in order, so the `swap` above and the
                    // worker's re-check can both read the old value. Wake it again (one that
                    // has finished its part goes back to sleep).
                    for (w, sleeping) in s.sleeping.iter().enumerate().take(parts - 1) {
                        if sleeping.load(Ordering::SeqCst) && sleeping.swap(false, Ordering::SeqCst)
                        {
                            self.workers[w].thread().unpark();
                        }
                    }
                }
            }
            s.job.store(std::ptr::null_mut(), Ordering::SeqCst);
            if let Err(payload) = mine {
                s.panicked.store(false, Ordering::SeqCst);
                std::panic::resume_unwind(payload);
            }
            if s.panicked.swap(false, Ordering::SeqCst) {
                panic!("a worker thread of the forward pass panicked");
            }
        }
    }

    impl Drop for Pool {
        fn drop(&mut self) {
            let s = &*self.shared;
            s.stop.store(true, Ordering::SeqCst);
            let gen = (s.state.load(Ordering::SeqCst) >> 8) + 1;
            s.state.store(gen << 8, Ordering::SeqCst);
            for w in &self.workers {
                w.thread().unpark();
            }
            for w in self.workers.drain(..) {
                // A worker that panicked has nothing left to clean up.
                let _ = w.join();
            }
        }
    }

    /// One step of a busy wait: a pause, and every 64 steps a yield, so that a thread
    /// waiting for another on the same core (a loaded machine) lets it run.
    #[inline]
    fn relax(spins: &mut u32) {
        *spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }

    fn worker(s: &Shared, w: usize) {
        // The state the pool started with (a job may be published before this thread runs).
        let mut seen = 0u64;
        loop {
            // Wait for the next generation: spin, then sleep.
            let t0 = Instant::now();
            let mut spins = 0u32;
            loop {
                let now = s.state.load(Ordering::SeqCst);
                if now != seen {
                    seen = now;
                    break;
                }
                if spins % 256 == 255 && t0.elapsed() > SPIN {
                    s.sleeping[w].store(true, Ordering::SeqCst);
                    // Re-check after announcing: a job published before the flag was set is
                    // seen here, one published after it unparks us.
                    if s.state.load(Ordering::SeqCst) == seen {
                        std::thread::park();
                    }
                    s.sleeping[w].store(false, Ordering::SeqCst);
                } else {
                    relax(&mut spins);
                }
            }
            if s.stop.load(Ordering::SeqCst) {
                return;
            }
            let part = w + 1;
            // A worker with a part of job `seen` holds that job open (`pending`), so the job
            // pointer read below is that job's.
            if part < (seen & 0xFF) as usize {
                let job = s.job.load(Ordering::SeqCst);
                if !job.is_null() {
                    // SAFETY: the caller keeps the job alive until `pending` is 0, and this
                    // worker's part is still pending, so the pointer and the closure behind
                    // it are valid here.
                    let f = unsafe { &*(*job).0 };
                    // A panicking part must still count as done, or the caller waits forever.
                    let run = std::panic::AssertUnwindSafe(|| f(part));
                    if std::panic::catch_unwind(run).is_err() {
                        s.panicked.store(true, Ordering::SeqCst);
                    }
                }
                s.pending.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// An output buffer that the threads of one split write at disjoint elements, through a raw
/// pointer (the column split of a weight product writes column ranges of one row-major
/// output; attention writes (query block, head) rectangles). It holds the buffer's exclusive
/// borrow for as long as it lives, so nothing else reads or writes the buffer meanwhile.
pub(crate) struct SharedOut<'a> {
    ptr: *mut f32,
    len: usize,
    _borrow: std::marker::PhantomData<&'a mut [f32]>,
}

// SAFETY: a `SharedOut` is only written through, by the threads of one split at disjoint
// elements (the callers of `write` and `ptr` guarantee that), while the buffer it points into
// is exclusively borrowed by it.
unsafe impl Send for SharedOut<'_> {}
// SAFETY: as above.
unsafe impl Sync for SharedOut<'_> {}

impl<'a> SharedOut<'a> {
    pub(crate) fn new(out: &'a mut [f32]) -> SharedOut<'a> {
        SharedOut {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            _borrow: std::marker::PhantomData,
        }
    }

    /// Elements of the buffer.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The buffer's first element. Writing through it needs what [`SharedOut::write`] needs.
    pub(crate) fn ptr(&self) -> *mut f32 {
        self.ptr
    }

    /// Copies `src` to elements `at..at + src.len()`.
    ///
    /// # Safety
    /// No other thread reads or writes those elements meanwhile.
    pub(crate) unsafe fn write(&self, at: usize, src: &[f32]) {
        assert!(at + src.len() <= self.len, "shared output out of bounds");
        // SAFETY: in bounds (checked just above); exclusive by the caller's guarantee.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(at), src.len()) }
    }
}

/// `parts` contiguous ranges covering `0..n` as evenly as possible (none empty unless `n` is
/// 0, then one empty range).
pub(crate) fn split_even(n: usize, parts: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let parts = parts.clamp(1, n.max(1));
    (0..parts).map(move |i| i * n / parts..(i + 1) * n / parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn ranges_cover_everything_once() {
        for n in [0usize, 1, 5, 97, 512] {
            for p in 1..6 {
                let r: Vec<_> = split_even(n, p).collect();
                assert_eq!(r.first().map(|r| r.start), Some(0));
                assert_eq!(r.last().map(|r| r.end), Some(n));
                assert!(r.windows(2).all(|w| w[0].end == w[1].start));
                assert!(n == 0 || r.iter().all(|r| !r.is_empty()));
            }
        }
    }

    #[test]
    fn every_part_runs_once() {
        for n in [1, 2, 3] {
            let t = Threads::new(n).unwrap();
            assert_eq!(t.count(), n);
            let hits = AtomicUsize::new(0);
            let mut out = vec![0usize; 10];
            t.for_each(out.chunks_mut(3).enumerate(), |(i, c)| {
                hits.fetch_add(1, Ordering::Relaxed);
                c.fill(i + 1);
            });
            assert_eq!(hits.load(Ordering::Relaxed), 4);
            assert_eq!(out, [1, 1, 1, 2, 2, 2, 3, 3, 3, 4]);
        }
        // A panic on a worker reaches the caller (after every part is done), and the pool
        // keeps working.
        let t = Threads::new(2).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            t.for_each(0..2usize, |i| assert!(i == 0, "part {i}"));
        }));
        assert!(r.is_err());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            t.for_each(0..2usize, |i| assert!(i == 1, "part {i}"));
        }));
        assert!(r.is_err());
        let hits = AtomicUsize::new(0);
        t.for_each(0..2usize, |_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(hits.load(Ordering::Relaxed), 2);
        assert!(Threads::new(0).is_err());
        assert!(Threads::new(MAX_THREADS + 1).is_err());
    }
}
