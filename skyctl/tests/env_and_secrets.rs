//! Issue 32 classes 3 and 4: every environment variable is read through one reader
//! (`sky_env::Var`), and a set-but-unusable value is exit 2 naming the variable, never read as
//! unset; secrets (the remote cache's header, signing key and URL credentials) are never
//! printed, never a node's declared variable, never in a state file. The cases that need a
//! server are in `remote_cache.rs`.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use common::*;

const TOKEN: &str = "tok-7Hd9-never-shown";
const KEY: &str = "key-Qx81-never-shown-either";

/// The source files of the workspace's crates (`skyctl/src`, `stages/*/src`).
fn sources() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs = vec![root.join("skyctl/src")];
    for e in std::fs::read_dir(root.join("stages")).unwrap().flatten() {
        dirs.push(e.path().join("src"));
    }
    let mut files = Vec::new();
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// The one reader; and the reads allowed elsewhere, each with why.
const READER: &str = "stages/env/src/lib.rs";
const ALLOWED: [(&str, &str); 1] = [(
    "stages/gguf/src/reader.rs",
    // sky-gguf links no sky-env; the duration is a knob of its own `#[cfg(test)]` mutation
    // test, which the tool never runs.
    "SKY_GGUF_MUTATE_SECS",
)];

#[test]
fn every_variable_is_read_through_the_one_reader() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let files = sources();
    assert!(files.len() > 100, "{} files", files.len());
    let mut readers = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            if !(line.contains("env::var") || line.contains("var_os(")) {
                continue;
            }
            let allowed = ALLOWED
                .iter()
                .any(|(file, var)| rel == *file && text.contains(var));
            if rel != READER && !allowed {
                readers.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        readers.is_empty(),
        "environment read outside sky_env::Var:\n{}",
        readers.join("\n")
    );
    let reader = std::fs::read_to_string(root.join(READER)).unwrap();
    assert_eq!(reader.matches("std::env::var_os(").count(), 1);
}

/// A workspace with one command node.
fn one_node() -> Ws {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"a\"\nrun = \"echo a > out/a\"\noutputs = [\"out/a\"]\n",
    );
    ws
}

/// Run `args` with `var` set to `value` (raw bytes); returns the exit code and stdout+stderr.
fn with_var(ws: &Ws, args: &[&str], var: &str, value: &[u8]) -> (Option<i32>, String) {
    let out = ws
        .cmd(args)
        .env(var, OsStr::from_bytes(value))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[test]
fn a_set_but_unusable_variable_is_exit_2_naming_it() {
    let ws = one_node();
    let cases: [(&[&str], &str, &[u8]); 9] = [
        (&["status"], "SKYCTL_STORE", b""),
        (&["status"], "SKYCTL_STORE", b"   "),
        (&["status"], "SKYCTL_TIMINGS", b"1\xff"),
        (&["status"], "SKYCTL_TIMINGS", b"maybe"),
        (&["status"], "SKYCTL_ISA", b"avx2\xff"),
        (&["status"], "SKYCTL_REMOTE_CACHE_READ_ONLY", b"1\xff"),
        (&["status"], "SKYCTL_REMOTE_CACHE_TIMEOUT", b" "),
        (
            &["status"],
            "SKYCTL_REMOTE_CACHE_SIGNING_KEY",
            b"k\xffk\xffk\xffk\xffk\xffk\xffk",
        ),
        (&["status"], "SKYCTL_REMOTE_CACHE_HEADER", b""),
    ];
    for (args, var, value) in cases {
        let (code, text) = with_var(&ws, args, var, value);
        assert_eq!(code, Some(2), "{var}={value:?}: {text}");
        assert!(text.contains(var), "{var}={value:?}: {text}");
    }
    // Unset is unset.
    assert_eq!(ws.run(&["status"]).status.code(), Some(1));
}

#[test]
fn a_declared_variable_that_is_not_utf8_is_refused_where_it_is_declared() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"a\"\nrun = \"echo a > out/a\"\noutputs = [\"out/a\"]\nenv = [\"GREETING\"]\n",
    );
    let (code, text) = with_var(&ws, &["build"], "GREETING", b"hi\xff");
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("pipeline.toml:5:8") && text.contains("GREETING is set but is not UTF-8"),
        "{text}"
    );
    // Empty is a value like any other.
    let (code, text) = with_var(&ws, &["build"], "GREETING", b"");
    assert_eq!(code, Some(0), "{text}");
}

/// Issue 32 class 4: a node declaring the remote cache's secrets is refused at the
/// declaration; nothing prints them, and no state file holds them.
#[test]
fn a_secret_declared_as_a_node_variable_is_refused_at_its_line() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"a\"\nrun = \"echo a > out/a\"\noutputs = [\"out/a\"]\n\
         env = [\"SKYCTL_REMOTE_CACHE_HEADER\", \"SKYCTL_REMOTE_CACHE_SIGNING_KEY\"]\n",
    );
    let header = format!("Authorization: Bearer {TOKEN}");
    for args in [&["explain", "a"][..], &["build"], &["status"], &["graph"]] {
        let out = ws
            .cmd(args)
            .env("SKYCTL_REMOTE_CACHE_HEADER", &header)
            .env("SKYCTL_REMOTE_CACHE_SIGNING_KEY", KEY)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert!(
            text.contains("pipeline.toml:5:8")
                && text.contains("`SKYCTL_REMOTE_CACHE_HEADER` holds a secret"),
            "{args:?}: {text}"
        );
        assert!(!text.contains(TOKEN) && !text.contains(KEY), "{text}");
    }
    for rel in [
        ".skyctl/state-v1/materials.log",
        ".skyctl/state-v1/graph.bin",
    ] {
        let bytes = std::fs::read(ws.p(rel)).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(TOKEN) && !text.contains(KEY), "{rel}");
    }
    // The same for a kernel suite's harness.
    ws.write(
        "pipeline.toml",
        "[[golden]]\nname = \"k\"\nkind = \"kernels\"\nharness = \"true\"\nenv = [\"SKYCTL_REMOTE_CACHE\"]\n",
    );
    let e = ws.fails(&["verify"], 2);
    assert!(e.contains("pipeline.toml:5:8"), "{e}");
}

/// `skyctl status --remote-cache URL` (or the URL in `SKYCTL_REMOTE_CACHE`).
fn status_with(ws: &Ws, url: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut c = ws.cmd(&["status", "--remote-cache", url]);
    for v in [
        "SKYCTL_REMOTE_CACHE",
        "SKYCTL_REMOTE_CACHE_HEADER",
        "SKYCTL_REMOTE_CACHE_SIGNING_KEY",
        "SKYCTL_REMOTE_CACHE_READ_ONLY",
    ] {
        c.env_remove(v);
    }
    let out = c.envs(env.iter().copied()).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// Issue 32 class 4: a base64 password holds a `/`; the redaction cut the authority at the
/// first `/` and printed it whole. Now the URL is parsed: refused with the password hidden,
/// and percent-encoded it is sent (as Basic credentials) and still never shown.
#[test]
fn a_url_password_with_a_slash_is_never_printed() {
    let ws = one_node();
    let port = closed_port();
    let raw = format!("http://user:a/b+c==@127.0.0.1:{port}/cache");
    let (code, text) = status_with(&ws, &raw, &[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(!text.contains("b+c"), "{text}");
    assert!(
        text.contains(&format!("***@127.0.0.1:{port}/cache")),
        "{text}"
    );
    let encoded = format!("http://user:a%2Fb+c==@127.0.0.1:{port}/cache");
    let (code, text) = status_with(&ws, "off", &[("SKYCTL_REMOTE_CACHE", &encoded)]);
    assert_eq!(code, Some(1), "{text}");
    // `--remote-cache off` wins; through the variable alone, the warning hides it.
    let mut c = ws.cmd(&["status"]);
    let out = c.env("SKYCTL_REMOTE_CACHE", &encoded).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains(&format!("http://***@127.0.0.1:{port}/cache")) && !text.contains("b+c"),
        "{text}"
    );
}

#[test]
fn a_query_token_and_framing_headers_are_refused_without_echo() {
    let ws = one_node();
    let (code, text) = status_with(&ws, "http://127.0.0.1:1/cache?token=hunter2", &[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(!text.contains("hunter2") && text.contains("?***"), "{text}");
    for header in [
        "Host: hunter2.example",
        "Content-Length: 0",
        "Transfer-Encoding: chunked",
        "Connection: close",
    ] {
        let (code, text) = status_with(
            &ws,
            "http://127.0.0.1:1/cache",
            &[("SKYCTL_REMOTE_CACHE_HEADER", header)],
        );
        assert_eq!(code, Some(2), "{header}: {text}");
        assert!(
            text.contains("frames the request") && !text.contains("hunter2"),
            "{text}"
        );
    }
}
