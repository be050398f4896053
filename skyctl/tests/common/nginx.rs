//! A real nginx WebDAV server for the remote-cache tests: started on 127.0.0.1 on a free port
//! with its config, logs, temp paths and data in a temp dir, stopped by pid when dropped (also
//! when a test fails). nginx must be installed (`.ci/run` installs Debian's `nginx`): a missing
//! nginx fails the test, it never skips.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running nginx.
pub struct Nginx {
    child: Child,
    pub dir: tempfile::TempDir,
    pub port: u16,
    tls: bool,
}

/// The token of the token-guarded server.
pub const TOKEN: &str = "s3cret-token-for-tests";

/// What the server serves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `/cache/`: anonymous read and write (WebDAV PUT).
    Open,
    /// `/cache/`: anonymous GET and HEAD; PUT only with `Authorization: Bearer TOKEN`.
    TokenGuarded,
    /// Like `Open`, over TLS with the certificate of `fixtures/tls` (issued by its `ca.pem`).
    Tls,
}

/// The CA that issued the TLS server's certificate.
pub fn test_ca() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/tls/ca.pem")
}

fn nginx_bin() -> PathBuf {
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
    {
        let p = Path::new(dir).join("nginx");
        if p.is_file() {
            return p;
        }
    }
    panic!("nginx is not installed: the remote-cache tests need it (apt-get install -y nginx; .ci/run does this)");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Nginx {
    pub fn start(mode: Mode) -> Nginx {
        let bin = nginx_bin();
        let mut last_err = String::new();
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("tempdir");
            let port = free_port();
            let d = dir.path();
            for sub in [
                "data",
                "tmp/body",
                "tmp/proxy",
                "tmp/fastcgi",
                "tmp/uwsgi",
                "tmp/scgi",
            ] {
                std::fs::create_dir_all(d.join(sub)).unwrap();
            }
            let root_user = if rustix::process::geteuid().is_root() {
                "user root;"
            } else {
                ""
            };
            let (map, guard) = match mode {
                Mode::Open | Mode::Tls => (String::new(), ""),
                Mode::TokenGuarded => (
                    format!(
                        "map \"$request_method:$http_authorization\" $cache_write_denied {{\n\
                         default 1;\n\
                         \"~^(GET|HEAD):\" 0;\n\
                         \"PUT:Bearer {TOKEN}\" 0;\n\
                         }}"
                    ),
                    "if ($cache_write_denied) { return 403; }",
                ),
            };
            let dp = d.display();
            let tls_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/tls");
            let listen = if mode == Mode::Tls {
                format!(
                    "listen 127.0.0.1:{port} ssl;\n        ssl_certificate {}/server.pem;\n        ssl_certificate_key {}/server.key;",
                    tls_dir.display(),
                    tls_dir.display()
                )
            } else {
                format!("listen 127.0.0.1:{port};")
            };
            let conf = format!(
                r#"daemon off;
master_process off;
{root_user}
worker_processes 1;
pid {dp}/nginx.pid;
error_log {dp}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log {dp}/access.log;
    client_body_temp_path {dp}/tmp/body;
    proxy_temp_path {dp}/tmp/proxy;
    fastcgi_temp_path {dp}/tmp/fastcgi;
    uwsgi_temp_path {dp}/tmp/uwsgi;
    scgi_temp_path {dp}/tmp/scgi;
    client_max_body_size 0;
    keepalive_requests 100000;
    {map}
    server {{
        {listen}
        root {dp}/data;
        log_not_found off;
        location /cache/ {{
            {guard}
            dav_methods PUT DELETE;
            create_full_put_path on;
            dav_access user:rw group:r all:r;
        }}
        location /err500/ {{ return 500; }}
        location /forbidden/ {{ return 403; }}
    }}
}}
"#
            );
            std::fs::write(d.join("nginx.conf"), conf).unwrap();
            let child = Command::new(&bin)
                .arg("-p")
                .arg(d)
                .arg("-c")
                .arg(d.join("nginx.conf"))
                .arg("-e")
                .arg(d.join("error.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            let mut server = Nginx {
                child,
                dir,
                port,
                tls: mode == Mode::Tls,
            };
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = server.child.try_wait() {
                    break;
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return server;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            last_err =
                std::fs::read_to_string(server.dir.path().join("error.log")).unwrap_or_default();
            // Dropped here: stopped by pid. Another port may have been taken meanwhile: retry.
        }
        panic!("nginx did not start: {last_err}");
    }

    /// The cache base URL.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}/cache", self.port)
    }

    /// A base URL whose every request answers `code` (500 or 403).
    pub fn failing_url(&self, code: u16) -> String {
        let loc = if code == 500 { "err500" } else { "forbidden" };
        format!("http://127.0.0.1:{}/{loc}", self.port)
    }

    /// Where `/cache/` keeps its files (`cas/`, `ac/`).
    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data/cache")
    }

    /// The access log lines so far.
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("access.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Files under `data()/sub` (`cas` or `ac`), by name.
    pub fn objects(&self, sub: &str) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.data().join(sub))
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A listener that accepts connections and never answers (a hung server), until dropped.
pub struct Silent {
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Silent {
    pub fn start() -> Silent {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        l.set_nonblocking(true).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                match l.accept() {
                    Ok((c, _)) => held.push(c),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Silent {
            port,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/cache", self.port)
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One remote-cache test at a time (take it first thing in the test): the tests time servers
/// out and count requests, and a 2-core machine running a dozen builds at once makes that
/// flaky.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}
