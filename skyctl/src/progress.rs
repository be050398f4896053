//! How build events look: a progress bar with the running nodes on a TTY, one plain line per
//! node when piped, or one JSON object per line with `--json`. The engine only emits
//! [`Event`]s; all printing for builds lives here.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

use sky_dag::report::{Event, JobState, NodeStatus, Reporter, Summary};
use sky_dag::NodeFailure;

/// Output mode chosen from flags and the terminal.
pub enum Mode {
    /// `--json`.
    Json,
    /// stderr is a terminal.
    Tty,
    /// Piped.
    Plain,
}

impl Mode {
    /// `--json` wins; else a TTY on stderr gets the bar.
    pub fn pick(json: bool) -> Mode {
        if json {
            Mode::Json
        } else if std::io::stderr().is_terminal() {
            Mode::Tty
        } else {
            Mode::Plain
        }
    }
}

/// The CLI's reporter.
pub struct Console {
    mode: Mode,
    verbose: bool,
    bar: Option<ProgressBar>,
    running: BTreeSet<String>,
    /// Running nodes whose job waits on another machine: `queued 1234` or `job 1234`.
    jobs: BTreeMap<String, String>,
    /// Nodes stopped or not run because of Ctrl-C or SIGTERM: (counted as failed, as skipped).
    cancelled: (usize, usize),
}

impl Console {
    /// A reporter for `mode`; `verbose` also prints cache hits.
    pub fn new(mode: Mode, verbose: bool) -> Console {
        Console {
            mode,
            verbose,
            bar: None,
            running: BTreeSet::new(),
            jobs: BTreeMap::new(),
            cancelled: (0, 0),
        }
    }

    fn line(&self, s: &str) {
        match &self.bar {
            Some(b) => b.println(s),
            None => out(&mut std::io::stderr(), s),
        }
    }

    fn refresh(&self) {
        if let Some(b) = &self.bar {
            let names: Vec<String> = self
                .running
                .iter()
                .take(4)
                .map(|n| match self.jobs.get(n) {
                    Some(job) => format!("{n} ({job})"),
                    None => n.clone(),
                })
                .collect();
            let more = self.running.len().saturating_sub(names.len());
            let tail = if more > 0 {
                format!(" +{more}")
            } else {
                String::new()
            };
            b.set_message(format!("{}{tail}", names.join(", ")));
        }
    }

    /// Print the final summary line (JSON: `{"summary": {...}}`).
    pub fn summary(&mut self, s: &Summary) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        match self.mode {
            Mode::Json => out(
                &mut std::io::stdout(),
                &serde_json::json!({ "summary": s }).to_string(),
            ),
            _ => {
                let remote = s.remote.as_ref().map(|r| {
                    format!(
                        "; remote cache: {} fetched, {} uploaded, {} down, {} up, {} warning{}",
                        r.restored,
                        r.uploaded,
                        bytes(r.bytes_downloaded),
                        bytes(r.bytes_uploaded),
                        r.warnings,
                        if r.warnings == 1 { "" } else { "s" }
                    )
                });
                let (cf, cs) = self.cancelled;
                let (head, cancelled) = match sky_dag::interrupt::requested() {
                    Some(sig) => (
                        format!("skyctl: cancelled (interrupted by signal {sig}): "),
                        format!(", {} cancelled", cf + cs),
                    ),
                    None => ("skyctl: ".to_string(), String::new()),
                };
                out(
                    &mut std::io::stderr(),
                    &format!(
                        "{head}{} executed, {} cached, {} failed, {} skipped{cancelled} in {:.2}s{}",
                        s.executed,
                        s.cached,
                        s.failed.saturating_sub(cf),
                        s.skipped.saturating_sub(cs),
                        s.seconds,
                        remote.unwrap_or_default()
                    ),
                );
                if let Some(line) = release_line(s) {
                    out(&mut std::io::stderr(), &line);
                }
            }
        }
    }
}

/// What became of the release when something failed (nothing to say otherwise: the update
/// itself is a note).
fn release_line(s: &Summary) -> Option<String> {
    let r = s.release.as_ref()?;
    if r.published && s.failed_nodes.is_empty() {
        return None;
    }
    Some(if r.published {
        format!(
            "skyctl: release `{}` published: the release depends on none of the failed nodes ({})",
            r.dir,
            s.failed_nodes.join(", ")
        )
    } else {
        // Failures first: they are what to fix; what did not run follows from them.
        let (failed, unrun): (Vec<&str>, Vec<&str>) = r
            .blocked_by
            .iter()
            .map(String::as_str)
            .partition(|id| s.failed_nodes.iter().any(|f| f == id));
        let mut parts = Vec::new();
        if !failed.is_empty() {
            parts.push(format!("{} (failed)", failed.join(", ")));
        }
        if !unrun.is_empty() {
            parts.push(format!("{} (not run)", unrun.join(", ")));
        }
        if parts.is_empty() {
            format!("skyctl: release `{}` left as it was", r.dir)
        } else {
            format!(
                "skyctl: release `{}` left as it was: it depends on {}",
                r.dir,
                parts.join("; ")
            )
        }
    })
}

impl Reporter for Console {
    fn event(&mut self, e: &Event) {
        if let Mode::Json = self.mode {
            if let Ok(s) = serde_json::to_string(e) {
                out(&mut std::io::stdout(), &s);
            }
            return;
        }
        match e {
            Event::Plan { total } => {
                if let Mode::Tty = self.mode {
                    let bar = ProgressBar::new(*total as u64);
                    if let Ok(style) =
                        ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {wide_msg}")
                    {
                        bar.set_style(style);
                    }
                    self.bar = Some(bar);
                }
            }
            Event::Started { node, .. } => {
                self.running.insert(node.clone());
                self.refresh();
            }
            Event::Finished {
                node,
                status,
                why,
                seconds,
                error,
                failure,
                log_tail,
                ..
            } => {
                self.running.remove(node);
                self.jobs.remove(node);
                if matches!(failure, Some(NodeFailure::Cancelled { .. })) {
                    match status {
                        NodeStatus::Failed => self.cancelled.0 += 1,
                        NodeStatus::Skipped => self.cancelled.1 += 1,
                        _ => {}
                    }
                }
                if let Some(b) = &self.bar {
                    b.inc(1);
                }
                self.refresh();
                let why = why.as_ref().map(|w| format!(" ({w})")).unwrap_or_default();
                match status {
                    NodeStatus::Executed => {
                        self.line(&format!("executed  {node}{why} {seconds:.2}s"))
                    }
                    NodeStatus::Restored => self.line(&format!("restored  {node}{why}")),
                    NodeStatus::Remote => self.line(&format!("fetched   {node}{why}")),
                    NodeStatus::Cached if self.verbose => self.line(&format!("cached    {node}")),
                    NodeStatus::Cached => {}
                    NodeStatus::Skipped => match error {
                        Some(e) => self.line(&format!("skipped   {node}: {e}")),
                        None => self.line(&format!("skipped   {node}")),
                    },
                    // Stopped by Ctrl-C or SIGTERM: a cancel, not a failure of the node.
                    NodeStatus::Failed
                        if matches!(failure, Some(NodeFailure::Cancelled { .. })) =>
                    {
                        self.line(&format!(
                            "cancelled {node}{why}: {}",
                            error.as_deref().unwrap_or("interrupted")
                        ))
                    }
                    NodeStatus::Failed => {
                        self.line(&format!(
                            "FAILED    {node}{why}: {}",
                            error.as_deref().unwrap_or("failed")
                        ));
                        if let Some(tail) = log_tail {
                            for l in tail.lines() {
                                self.line(&format!("  | {l}"));
                            }
                        }
                    }
                }
            }
            Event::Job {
                node,
                engine,
                job,
                state,
                detail,
            } => {
                let (word, short) = match state {
                    JobState::Queued => ("queued", format!("queued, job {job}")),
                    JobState::Running => ("running", format!("job {job}")),
                };
                let detail = match (state, detail) {
                    (JobState::Queued, Some(d)) => format!(" ({d})"),
                    (JobState::Running, Some(d)) => format!(" on {d}"),
                    (_, None) => String::new(),
                };
                self.jobs.insert(node.clone(), short);
                self.refresh();
                // The bar shows it beside the node; piped output gets a line.
                if self.bar.is_none() {
                    self.line(&format!("{word:<9} {node}: {engine} job {job}{detail}"));
                }
            }
            Event::Note { message } => self.line(&format!("skyctl: {message}")),
        }
    }

    fn tick(&mut self) {
        if let Some(b) = &self.bar {
            b.tick();
        }
    }
}

/// One line of build output. A closed pipe (`skyctl build --json | head -1`) or a full disk
/// loses the line, never the build: the nodes still run and are cached, and the exit code
/// still says how the build went.
fn out(w: &mut dyn std::io::Write, line: &str) {
    let _ = writeln!(w, "{line}");
}

/// A byte count for people: `812 B`, `4.2 KiB`, `17.0 MiB`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}
