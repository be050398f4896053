//! `skyctl ask`: answer decision questions with a model (a .gguf file or a Laya directory).

#![allow(clippy::print_stdout)]

use crate::outcome::Outcome;
use std::io::Write as _;
use std::path::PathBuf;

use sky_infer::engine::{error_response, parse_json_bytes, parse_json_line};
use sky_infer::forward::Workspace;

/// Arguments of `skyctl ask`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["request", "requests"])))]
pub struct Args {
    /// The model: a .gguf file or a Laya checkpoint directory.
    pub model: PathBuf,
    /// A `/v1/systemone` request (`{"state": ..., "questions": {...}}`; docs/guide/first-project.md),
    /// or `-` for standard input. Prints the response, pretty-printed (one line with --json).
    #[arg(long, value_name = "FILE.json")]
    pub request: Option<PathBuf>,
    /// One case per line (`{"id", "type", "instructions", "criteria", "state"}`). Prints one
    /// line per case: `ID<TAB>ANSWER<TAB>[probabilities]`, or with --json one JSON object
    /// (id, input_ids, markers, scores, temperature, probabilities, answer). `-` reads
    /// standard input.
    #[arg(long, value_name = "FILE.jsonl")]
    pub requests: Option<PathBuf>,
    /// Machine-readable output: the response JSON on one line, one JSON object per case, and
    /// errors as the spec's error object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Compute path: --q8, --q8-fast, --no-calib.
    #[command(flatten)]
    pub path: super::ComputeFlags,
    /// Threads of one question's forward pass (the same answers bit for bit as one thread).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub threads: u32,
}

/// The largest request file `ask` reads (a request is a few kilobytes; a device or a runaway
/// pipe stops here instead of filling memory): [`sky_fs::REQUEST`].
pub const MAX_REQUEST_BYTES: u64 = 64 << 20;
const _: () = assert!(matches!(sky_fs::REQUEST.max, Some(MAX_REQUEST_BYTES)));

/// The bytes of `path` (a regular file, a FIFO or a pipe: `--request <(...)`), or of standard
/// input for `-`, at most [`MAX_REQUEST_BYTES`].
pub(crate) fn read(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    if path.as_os_str() != "-" {
        return Ok(sky_fs::read(path, sky_fs::REQUEST)?);
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_REQUEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow::anyhow!("standard input: {e}"))?;
    anyhow::ensure!(
        bytes.len() as u64 <= MAX_REQUEST_BYTES,
        "standard input: a request larger than {} MiB",
        MAX_REQUEST_BYTES >> 20
    );
    Ok(bytes)
}

/// Run `skyctl ask`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let (engine, report) = args.path.path().open(&args.model)?;
    for note in &report.notes {
        eprintln_err(&format!("note: {note}"));
    }
    let mut ws = Workspace::new();
    ws.set_threads(args.threads as usize)?;
    let mut out = std::io::stdout().lock();
    if let Some(path) = &args.request {
        let what = path.display().to_string();
        let result =
            parse_json_bytes(&read(path)?, &what).and_then(|req| engine.systemone(&mut ws, &req));
        match result {
            Ok(resp) if args.json => writeln!(out, "{resp}")?,
            Ok(resp) => writeln!(out, "{}", serde_json::to_string_pretty(&resp)?)?,
            Err(e) if args.json => {
                writeln!(out, "{}", error_response(&e))?;
                return Ok(Outcome::BadInput);
            }
            Err(e) => anyhow::bail!("{e}"),
        }
        return Ok(Outcome::Success);
    }
    let Some(path) = &args.requests else {
        anyhow::bail!("give --request or --requests")
    };
    let bytes = read(path)?;
    let mut failed = 0usize;
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let what = format!("{}:{}", path.display(), i + 1);
        let file = path.display().to_string();
        match parse_json_line(line, &file, i + 1).and_then(|case| engine.run_case(&mut ws, &case)) {
            Ok((id, r)) if args.json => writeln!(out, "{}", r.line(&id))?,
            Ok((id, r)) => writeln!(
                out,
                "{id}\t{}\t{}",
                short_answer(&r.answer),
                serde_json::to_string(&r.probabilities)?
            )?,
            Err(e) => {
                failed += 1;
                // Name the case by its own id when the line carries one, so a caller can match
                // errors to cases; the line number stays for lines too broken to have an id.
                let case_id = case_id_of(line);
                if args.json {
                    let mut err = error_response(&e);
                    err["id"] = serde_json::json!(case_id);
                    err["line"] = serde_json::json!(i + 1);
                    writeln!(out, "{err}")?;
                } else if let Some(id) = case_id {
                    eprintln_err(&format!("{what} (case {id:?}): {e}"));
                } else {
                    // A JSON syntax error already says FILE:LINE:COL.
                    let msg = e.to_string();
                    if msg.starts_with(&what) {
                        eprintln_err(&msg);
                    } else {
                        eprintln_err(&format!("{what}: {msg}"));
                    }
                }
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} case(s) of {} failed", path.display());
    }
    Ok(Outcome::Success)
}

/// The ANSWER column of `--requests` text output: the choice, the score or the noul value
/// (`--json` has the whole answer object); anything else as compact JSON.
fn short_answer(answer: &serde_json::Value) -> String {
    let key = match answer["type"].as_str() {
        Some("choice") => "choice",
        Some("score") => "score",
        Some("noul") => "noul",
        _ => return answer.to_string(),
    };
    match &answer[key] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => answer.to_string(),
        v => v.to_string(),
    }
}

/// The `id` of a request line, if the line is a JSON object with a string id.
fn case_id_of(line: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(line).ok()?;
    Some(value.get("id")?.as_str()?.to_owned())
}

#[allow(clippy::print_stderr)]
fn eprintln_err(msg: &str) {
    eprintln!("skyctl: {msg}");
}
