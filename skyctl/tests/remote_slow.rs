//! Issue 24, item 9: a slow-loris remote cache (it answers 200, then sends one byte at a time,
//! each within the per-read timeout) stalled a build for minutes. A transfer may take the
//! timeout plus 1 s per MiB in all; past that the build warns once and goes on locally.
//!
//! The server is a small in-process HTTP/1.1 server on 127.0.0.1: it keeps what is `PUT`,
//! answers `HEAD`, and serves `GET` either at once or trickling, per path prefix.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

const PIPELINE: &str = r#"
[[command]]
name = "a"
run = "mkdir -p out && for i in 1 2 3 4 5 6 7 8 9 10; do cat in.txt; done > out/a.txt"
inputs = ["in.txt"]
outputs = ["out/a.txt"]

[[release.publish]]
from = "out/a.txt"
to = "a.txt"
"#;

/// What the server does with a `GET`.
#[derive(Default)]
struct Behaviour {
    /// Paths starting with one of these are sent one byte every [`DRIP`].
    trickle: Vec<String>,
}

const DRIP: Duration = Duration::from_millis(300);

struct Server {
    port: u16,
    behaviour: Arc<Mutex<Behaviour>>,
    stop: Arc<AtomicBool>,
}

impl Server {
    fn start() -> Server {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        l.set_nonblocking(true).expect("nonblocking");
        let objects: Arc<Mutex<HashMap<String, Vec<u8>>>> = Arc::default();
        let behaviour: Arc<Mutex<Behaviour>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (o, b, s) = (objects.clone(), behaviour.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((c, _)) => {
                        let (o, b, s) = (o.clone(), b.clone(), s.clone());
                        std::thread::spawn(move || {
                            let _ = serve(c, &o, &b, &s);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Server {
            port,
            behaviour,
            stop,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/cache", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Answer the requests of one keep-alive connection.
fn serve(
    c: TcpStream,
    objects: &Mutex<HashMap<String, Vec<u8>>>,
    behaviour: &Mutex<Behaviour>,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    c.set_nonblocking(false)?;
    let mut w = c.try_clone()?;
    let mut r = BufReader::new(c);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h)? == 0 {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body)?;
        let key = path.trim_start_matches("/cache/").to_string();
        let found = objects.lock().unwrap().get(&key).cloned();
        match (method.as_str(), found) {
            ("PUT", _) => {
                objects.lock().unwrap().insert(key, body);
                w.write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n")?;
            }
            ("HEAD", Some(obj)) => write!(
                w,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
                obj.len()
            )?,
            ("GET", Some(obj)) => {
                write!(
                    w,
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
                    obj.len()
                )?;
                let slow = behaviour
                    .lock()
                    .unwrap()
                    .trickle
                    .iter()
                    .any(|p| key.starts_with(p.as_str()));
                if slow {
                    for b in obj {
                        if stop.load(Ordering::Relaxed) {
                            return Ok(());
                        }
                        w.write_all(&[b])?;
                        w.flush()?;
                        std::thread::sleep(DRIP);
                    }
                } else {
                    w.write_all(&obj)?;
                }
            }
            _ => w.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")?,
        }
        w.flush()?;
    }
}

fn workspace() -> Ws {
    let ws = Ws::new();
    ws.write("pipeline.toml", PIPELINE);
    ws.write("in.txt", &"slow loris\n".repeat(20));
    ws
}

/// `skyctl build --json` against `url` with a 1 s timeout; killed (failing the test) after
/// `limit`. Returns the run and how long it took.
fn build(ws: &Ws, url: &str, limit: Duration) -> (BuildRun, Duration) {
    let mut c = ws.cmd(&["build", "--json", "--remote-cache", url]);
    for v in [
        "SKYCTL_REMOTE_CACHE",
        "SKYCTL_REMOTE_CACHE_READ_ONLY",
        "SKYCTL_REMOTE_CACHE_HEADER",
        "SKYCTL_REMOTE_CACHE_SIGNING_KEY",
        "SKYCTL_REMOTE_CACHE_CA",
    ] {
        c.env_remove(v);
    }
    c.env("SKYCTL_REMOTE_CACHE_TIMEOUT", "1");
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning skyctl");
    let start = Instant::now();
    let out: Output = loop {
        if child.try_wait().expect("waiting").is_some() {
            break child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the build stalled on a trickling server: killed after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (parse_build(out), start.elapsed())
}

fn warnings(run: &BuildRun) -> Vec<String> {
    run.events
        .iter()
        .filter(|e| e["event"] == "note")
        .filter_map(|e| e["message"].as_str())
        .filter(|m| m.starts_with("warning: remote cache"))
        .map(str::to_string)
        .collect()
}

/// A build that fills the server, then a clone that meets a trickle on `prefix`.
fn trickled(prefix: &str) -> (BuildRun, Duration) {
    let server = Server::start();
    let first = workspace();
    let (run, _) = build(&first, &server.url(), Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.summary["remote"]["uploaded"], 1, "{:?}", run.summary);
    server.behaviour.lock().unwrap().trickle = vec![prefix.to_string()];
    // The record alone trickles for 60 s, the 220-byte output for over a minute.
    let clone = workspace();
    let (run, took) = build(&clone, &server.url(), Duration::from_secs(30));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.executed(), ["a"], "built locally: {run:?}");
    assert_eq!(clone.read("site/public/a.txt"), "slow loris\n".repeat(200));
    (run, took)
}

#[test]
fn i24_9_a_trickled_blob_times_out_by_its_size_and_the_build_goes_on_locally() {
    let (run, took) = trickled("cas/");
    let w = warnings(&run);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains(": GET cas/")
            && w[0].contains(": timed out: ")
            && w[0].contains(
                " of 2200 bytes in 1 s (a transfer may take the timeout plus 1 s per MiB)"
            )
            && w[0].ends_with("; building without the remote cache"),
        "{w:?}"
    );
    assert_eq!(run.summary["remote"]["warnings"], 1);
    // The timeout (1 s) plus 1 s per MiB, and the local run: well under the minute.
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

#[test]
fn i24_9_a_trickled_action_record_times_out_and_the_build_goes_on_locally() {
    let (run, took) = trickled("ac/");
    let w = warnings(&run);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains(": GET ac/")
            && w[0].contains("timed out")
            && w[0].ends_with("; building without the remote cache"),
        "{w:?}"
    );
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

/// Issue 24, item 7: SIGTERM while the action record trickles in (a 30 s timeout, so the
/// transfer would last half a minute): the build exits 143 within 2 s and leaves no output.
#[test]
fn i24_7_a_signal_ends_a_build_blocked_on_a_trickling_record() {
    term_while_trickling("ac/");
}

/// The same while a blob trickles in (the record came at once).
#[test]
fn i24_7_a_signal_ends_a_build_blocked_on_a_trickling_blob() {
    term_while_trickling("cas/");
}

fn term_while_trickling(prefix: &str) {
    let server = Server::start();
    let first = workspace();
    let (run, _) = build(&first, &server.url(), Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.stderr);
    server.behaviour.lock().unwrap().trickle = vec![prefix.to_string()];
    let clone = workspace();
    let mut child = clone
        .cmd(&["build", "--remote-cache", &server.url()])
        .env("SKYCTL_REMOTE_CACHE_TIMEOUT", "30")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning skyctl");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        child.try_wait().expect("waiting").is_none(),
        "the build did not wait for the trickle"
    );
    let (status, took) = terminate(&mut child, "while reading the remote");
    assert_eq!(status.code(), Some(143));
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert!(!clone.p("out/a.txt").exists());
    assert!(!clone.p("site/public/a.txt").exists());
}
