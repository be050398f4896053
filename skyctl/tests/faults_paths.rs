//! The fault campaign of issue 24, items 1-6, against the real binary: project folders that
//! name what is not skyctl's, outputs through a symlink inside the workspace, a publish `to`
//! naming a folder, and input globs that match names that cannot be hashed, special files or
//! nothing at all. Each refusal comes before anything runs, located at `pipeline.toml:LINE:COL`,
//! with exit code 2, and leaves what it protects as it was.

mod common;

use std::path::Path;

use common::*;

/// `(line, col)` of the first `needle` in `text` (1-based, as the messages give them).
fn at(text: &str, needle: &str) -> (usize, usize) {
    let i = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in {text}"));
    let line = text[..i].matches('\n').count() + 1;
    let col = i - text[..i].rfind('\n').map_or(0, |n| n + 1) + 1;
    (line, col)
}

/// The stderr of a build that must be refused before anything runs: exit 2, one line
/// `skyctl: pipeline.toml:LINE:COL: MESSAGE` located at `needle` in the manifest, with
/// `message` in it; the command of the pipeline (which touches `ran`) did not run.
fn refused(ws: &Ws, needle: &str, message: &str) -> String {
    let toml = ws.read("pipeline.toml");
    let (line, col) = at(&toml, needle);
    let e = ws.fails(&["build"], 2);
    let want = format!("skyctl: pipeline.toml:{line}:{col}: ");
    assert!(
        e.starts_with(&want),
        "expected {want}... for {needle:?}, got: {e}\n{toml}"
    );
    assert!(
        e.contains(message),
        "expected {message:?}, got: {e}\n{toml}"
    );
    assert_eq!(e.trim_end().lines().count(), 1, "one message: {e}");
    assert!(!ws.p("ran").exists(), "a node ran before the refusal: {e}");
    e
}

/// A command node reading `models/m` (a declared source folder) and publishing one file.
fn pipeline(project: &str) -> String {
    format!(
        "[project]\n{project}\n\n[[command]]\nname = \"a\"\nrun = \"touch ran && cat models/m/w > o.txt\"\ninputs = [\"models/m\"]\noutputs = [\"o.txt\"]\n\n[[release.publish]]\nfrom = \"o.txt\"\nto = \"o.txt\"\n"
    )
}

fn git(ws: &Ws, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(ws.path())
        .output()
        .expect("running git")
}

/// A git repository with one commit, `models/m/w` committed, and `pipeline.toml`.
fn repo(project: &str) -> Ws {
    let ws = Ws::new();
    assert!(git(&ws, &["init", "-q", "."]).status.success());
    ws.write("models/m/w", "weights\n");
    ws.write("pipeline.toml", &pipeline(project));
    assert!(git(&ws, &["add", "."]).status.success());
    assert!(git(&ws, &["commit", "-q", "-m", "first"]).status.success());
    ws
}

fn git_log_works(ws: &Ws) {
    let o = git(ws, &["log", "--oneline"]);
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("first"),
        "git log: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Issue 24, item 1: `release_dir = ".git"` replaced `.git` by the release tree.
#[test]
fn issue24_1_release_dir_git_is_refused_and_git_still_works() {
    let ws = repo("release_dir = \".git\"");
    refused(
        &ws,
        "\".git\"",
        "release_dir `.git` is version control's folder `.git`, which is not skyctl's",
    );
    git_log_works(&ws);
    // A folder inside `.git` neither.
    ws.write("pipeline.toml", &pipeline("release_dir = \".git/public\""));
    refused(
        &ws,
        "\".git/public\"",
        "release_dir `.git/public` lies inside version control's folder `.git`",
    );
    git_log_works(&ws);
    assert!(!ws.p(".git/public").exists());
}

/// Issue 24, item 1: each project folder naming `.git`, the pipeline file, skyctl's state, the
/// workspace root, a declared source input (holding it or inside it), or a path that is not a
/// folder: refused at the key, nothing changed.
#[test]
fn issue24_1_no_project_folder_names_what_is_not_skyctls() {
    for key in ["release_dir", "store_dir", "build_dir"] {
        let cases: Vec<(&str, String)> = vec![
            (
                ".git",
                format!("{key} `.git` is version control's folder `.git`, which is not skyctl's"),
            ),
            (
                ".git/x",
                format!("{key} `.git/x` lies inside version control's folder `.git`"),
            ),
            (
                "pipeline.toml",
                format!("{key} `pipeline.toml` is the pipeline file `pipeline.toml`"),
            ),
            (".", format!("{key} `.`: the workspace root cannot be")),
            ("./", format!("{key} `.`: the workspace root cannot be")),
            (
                "models",
                if key == "store_dir" {
                    // The store folder is checked on the disk first: it holds what is not the
                    // store's.
                    "store_dir `models` already exists and holds `models/m`, which is not the store's".to_string()
                } else {
                    format!("{key} `models` holds the input `models/m` of node `a`")
                },
            ),
            (
                "models/m/sub",
                format!("{key} `models/m/sub` lies inside the input `models/m` of node `a`"),
            ),
            (
                "/tmp/elsewhere",
                format!("{key}: absolute paths are not allowed"),
            ),
            ("../up", format!("{key}: `..` is not allowed")),
        ];
        for (value, message) in cases {
            let ws = repo(&format!("{key} = \"{value}\""));
            let before = snapshot(&ws.p("models"));
            refused(&ws, &format!("\"{value}\""), &message);
            git_log_works(&ws);
            assert_eq!(snapshot(&ws.p("models")), before, "{key} = {value}");
            assert_eq!(
                ws.read("pipeline.toml"),
                pipeline(&format!("{key} = \"{value}\""))
            );
        }
        // skyctl's own state: the store may be `.skyctl` (the default) or inside it, never the
        // state; the other two never share it.
        let value = if key == "store_dir" {
            ".skyctl/state-v1"
        } else {
            ".skyctl"
        };
        let ws = repo(&format!("{key} = \"{value}\""));
        refused(&ws, &format!("\"{value}\""), "which nothing else may share");
        // A file where the folder goes.
        let ws = repo(&format!("{key} = \"notes.txt\""));
        ws.write("notes.txt", "mine\n");
        refused(
            &ws,
            "\"notes.txt\"",
            &format!("{key} `notes.txt` is a file skyctl did not make"),
        );
        assert_eq!(ws.read("notes.txt"), "mine\n");
        // A folder holding another repository.
        let ws = repo(&format!("{key} = \"vendor/lib\""));
        ws.write("vendor/lib/.git/HEAD", "ref: refs/heads/main\n");
        refused(
            &ws,
            "\"vendor/lib\"",
            &format!("{key} `vendor/lib` contains `vendor/lib/.git` (version control)"),
        );
        assert!(ws.p("vendor/lib/.git/HEAD").is_file());
    }
}

/// Issue 24, item 1: every combination of the three folders, one inside another or the same:
/// refused at the folder the message is about, however the folders are declared.
#[test]
fn issue24_1_the_three_folders_never_overlap() {
    let keys = ["release_dir", "store_dir", "build_dir"];
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            // The same folder.
            let project = format!("{a} = \"shared\"\n{b} = \"shared\"");
            let ws = repo(&project);
            // Located at the second: its value starts after `KEY = `.
            let toml = ws.read("pipeline.toml");
            let (line, col) = at(&toml, &format!("{b} = \"shared\""));
            let e = ws.fails(&["build"], 2);
            assert!(
                e.starts_with(&format!(
                    "skyctl: pipeline.toml:{line}:{}: {b} `shared` is also ",
                    col + b.len() + 3
                )),
                "{a}/{b}: {e}"
            );
            assert!(e.contains(&format!("(`{a} = \"shared\"`)")), "{e}");
            assert!(!ws.p("ran").exists());
            // Each inside the other.
            for (inner, outer) in [(a, b), (b, a)] {
                let project = format!("{outer} = \"top\"\n{inner} = \"top/in\"");
                let ws = repo(&project);
                refused(&ws, "\"top/in\"", &format!("{inner} `top/in` lies inside "));
                let e = ws.fails(&["build"], 2);
                assert!(e.contains(&format!("(`{outer} = \"top\"`); the release tree, the store and the build folder must not overlap")), "{e}");
            }
        }
    }
    // A folder inside a default one: located at the folder that is written.
    let ws = repo("store_dir = \"site/public/store\"");
    refused(
        &ws,
        "\"site/public/store\"",
        "store_dir `site/public/store` lies inside the release tree (`release_dir = \"site/public\"`)",
    );
    // A default folder inside a written one: located at the one written.
    let ws = repo("build_dir = \"site\"");
    refused(
        &ws,
        "\"site\"",
        "release_dir `site/public` lies inside the build folder (`build_dir = \"site\"`)",
    );
}

/// Issue 24, item 1: `--store` inside the release tree (or the build folder) would be swapped
/// away with it: refused at the folder it overlaps. `--store` elsewhere stays the user's choice.
#[test]
fn issue24_1_a_store_given_on_the_command_line_is_kept_apart_too() {
    let ws = repo("release_dir = \"dist\"");
    let toml = ws.read("pipeline.toml");
    let (line, col) = at(&toml, "\"dist\"");
    for (store, message) in [
        (
            "dist/store",
            "--store `dist/store` lies inside the release tree (`release_dir = \"dist\"`)",
        ),
        (
            "build/store",
            "--store `build/store` lies inside the build folder (`build_dir = \"build\"`)",
        ),
        (".", "--store `.`: the workspace root cannot be the store"),
    ] {
        let e = ws.fails(&["build", "--store", store], 2);
        let located = if store == "dist/store" {
            format!("skyctl: pipeline.toml:{line}:{col}: ")
        } else {
            "skyctl: pipeline.toml:1:1: ".to_string()
        };
        assert!(
            e.starts_with(&located) && e.contains(message),
            "{store}: {e}"
        );
        assert!(!ws.p(store).join("store-v2").exists(), "{store}");
        assert!(!ws.p("ran").exists());
    }
    let elsewhere = tempfile::tempdir().unwrap();
    let r = ws.build(&["--store", elsewhere.path().to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(ws.read("dist/o.txt"), "weights\n");
}

/// Issue 24, item 1: an existing release folder that is not a release skyctl wrote (committed
/// files, or the files of a folder no build published to) is refused before anything runs, and
/// kept; one skyctl wrote is replaced, strays and all, even when its record was lost.
#[test]
fn issue24_1_an_existing_folder_that_is_not_a_release_is_never_replaced() {
    let ws = repo("release_dir = \"docs\"");
    ws.write("docs/guide.md", "my guide\n");
    refused(
        &ws,
        "\"docs\"",
        "release_dir `docs` already exists and holds `docs/guide.md`, which skyctl did not make; the release tree replaces the whole folder",
    );
    assert_eq!(ws.read("docs/guide.md"), "my guide\n");
    // `clean` leaves it too.
    let o = ws.run(&["clean"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(
            "left `docs`: already exists and holds `docs/guide.md`, which skyctl did not make"
        ),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(ws.read("docs/guide.md"), "my guide\n");
    // Moved away: the release is written; a stray put in it later goes with the next build.
    std::fs::remove_dir_all(ws.p("docs")).unwrap();
    let r = ws.build(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(snapshot(&ws.p("docs")).len(), 1);
    ws.write("docs/stray.txt", "x");
    ws.write("models/m/w", "new weights\n");
    let r = ws.build(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        snapshot(&ws.p("docs")).into_keys().collect::<Vec<_>>(),
        vec!["o.txt".to_string()]
    );
    // The workspace state lost: the tree is still known by its content (the store has it).
    std::fs::remove_dir_all(ws.p(".skyctl/state-v1")).unwrap();
    ws.write("models/m/w", "newer weights\n");
    let r = ws.build(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(ws.read("docs/o.txt"), "newer weights\n");
    // Another release_dir: the old one stays, the new one must be free.
    std::fs::remove_file(ws.p("ran")).unwrap();
    ws.write("pipeline.toml", &pipeline("release_dir = \"models\""));
    refused(
        &ws,
        "\"models\"",
        "release_dir `models` holds the input `models/m` of node `a`",
    );
    assert_eq!(ws.read("models/m/w"), "newer weights\n");
}

/// Issue 24, item 1: a store folder that exists and holds what is not the store's.
#[test]
fn issue24_1_an_existing_folder_that_is_not_a_store_is_refused() {
    let ws = repo("store_dir = \"cache\"");
    ws.write("cache/notes.txt", "mine\n");
    refused(
        &ws,
        "\"cache\"",
        "store_dir `cache` already exists and holds `cache/notes.txt`, which is not the store's",
    );
    assert_eq!(snapshot(&ws.p("cache")).len(), 1, "nothing written into it");
    std::fs::remove_file(ws.p("cache/notes.txt")).unwrap();
    let r = ws.build(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(ws.p("cache/store-v2").is_dir());
    // Built once, still the store's.
    let r = ws.build(&[]);
    assert_eq!((r.code, r.count("executed")), (0, 0), "{}", r.stderr);
}

/// Issue 24, item 2: an output through a symlink inside the workspace (`g -> .git`) wrote into
/// `.git/hooks`.
#[test]
fn issue24_2_an_output_through_a_symlink_to_git_is_refused() {
    let ws = repo("");
    std::os::unix::fs::symlink(".git", ws.p("g")).unwrap();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"hook\"\nrun = \"touch ran && mkdir -p g/hooks && echo evil > g/hooks/post-checkout\"\noutputs = [\"g/hooks/post-checkout\"]\n",
    );
    refused(
        &ws,
        "\"hook\"",
        "node `hook`: output `g/hooks/post-checkout`: `g` is a symlink (to `.git`); outputs are written only through real folders",
    );
    assert!(!ws.p(".git/hooks/post-checkout").exists());
    git_log_works(&ws);
}

/// Issue 24, item 2: an output through a symlink into the store replaced a blob with other
/// bytes; `store check` then failed for ever.
#[test]
fn issue24_2_an_output_through_a_symlink_into_the_store_is_refused() {
    let ws = repo("");
    let r = ws.build(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::remove_file(ws.p("ran")).unwrap();
    let blob = walkdir::WalkDir::new(ws.p(".skyctl/store-v2/blobs"))
        .into_iter()
        .flatten()
        .find(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .unwrap();
    let rel = blob
        .strip_prefix(ws.p(".skyctl/store-v2"))
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let before = std::fs::read(&blob).unwrap();
    std::os::unix::fs::symlink(".skyctl/store-v2", ws.p("st")).unwrap();
    let mut toml = pipeline("");
    toml += &format!(
        "\n[[command]]\nname = \"swap\"\nrun = \"touch ran && echo other > st/{rel}\"\noutputs = [\"st/{rel}\"]\n"
    );
    ws.write("pipeline.toml", &toml);
    refused(
        &ws,
        "\"swap\"",
        &format!("node `swap`: output `st/{rel}`: `st` is a symlink (to `.skyctl/store-v2`)"),
    );
    assert_eq!(std::fs::read(&blob).unwrap(), before);
    let o = ws.run(&["store", "check"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// Issue 24, item 2: a symlink at each depth of an output path (a folder on the way, or the
/// output itself), leading inside the workspace: refused naming the link; what it points at is
/// untouched. The same with the compiled graph of a build that passed before the link appeared.
#[test]
fn issue24_2_a_symlink_at_any_depth_of_an_output_path_is_refused() {
    let out = "a/b/c/out.txt";
    let toml = format!(
        "[[command]]\nname = \"w\"\nrun = \"touch ran && mkdir -p a/b/c && echo new > {out}\"\noutputs = [\"{out}\"]\n"
    );
    // (the link, where it points, relative to the link's folder)
    let links = [
        ("a", "real"),
        ("a/b", "../real"),
        ("a/b/c", "../../real"),
        (out, "../../../real/keep.txt"),
    ];
    for (link, to) in links {
        for cached in [false, true] {
            let ws = Ws::new();
            ws.write("pipeline.toml", &toml);
            if cached {
                // A build that passes compiles the graph; the link comes after.
                let r = ws.build(&[]);
                assert_eq!(r.code, 0, "{}", r.stderr);
                std::fs::remove_dir_all(ws.p("a")).unwrap();
                std::fs::remove_file(ws.p("ran")).unwrap();
            }
            ws.write("real/keep.txt", "keep\n");
            if let Some((parent, _)) = link.rsplit_once('/') {
                std::fs::create_dir_all(ws.p(parent)).unwrap();
            }
            std::os::unix::fs::symlink(to, ws.p(link)).unwrap();
            let e = refused(
                &ws,
                "\"w\"",
                &format!("node `w`: output `{out}`: `{link}` is a symlink (to `real"),
            );
            assert!(
                e.contains("outputs are written only through real folders"),
                "{e}"
            );
            assert_eq!(
                snapshot(&ws.p("real")).into_keys().collect::<Vec<_>>(),
                vec!["keep.txt".to_string()],
                "{link}"
            );
            assert_eq!(ws.read("real/keep.txt"), "keep\n");
        }
    }
}

/// Issue 24, item 2: a folder that becomes a symlink while the build runs (an earlier node
/// makes it): the engine does not write through it; the node fails naming it.
#[test]
fn issue24_2_a_symlink_made_during_the_build_is_not_written_through() {
    let ws = repo("");
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"first\"\nrun = \"ln -s .git d && echo 1 > one\"\noutputs = [\"one\"]\n\n[[command]]\nname = \"second\"\nrun = \"cat one > d/hooks/post-merge\"\ninputs = [\"one\"]\noutputs = [\"d/hooks/post-merge\"]\n",
    );
    let r = ws.build(&[]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let err = r
        .events
        .iter()
        .find(|e| e["node"] == "second" && e["status"] == "failed")
        .and_then(|e| e["error"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        err.contains("output `d/hooks/post-merge`: `d` is a symlink (to `.git`)"),
        "{err}"
    );
    assert!(!ws.p(".git/hooks/post-merge").exists());
}

/// Issue 24, item 3: `to = "."` was accepted; the release assembly then failed with "Not a
/// directory" and no location. Any `to` that is empty or names a folder is refused up front.
#[test]
fn issue24_3_publish_to_a_folder_is_refused_at_to() {
    for to in [".", "", "./.", "sub/.", "/", "/abs/x", "../x"] {
        let ws = Ws::new();
        ws.write("in.txt", "hi\n");
        ws.write(
            "pipeline.toml",
            &format!("[[command]]\nname = \"a\"\nrun = \"touch ran && cp in.txt o.txt\"\ninputs = [\"in.txt\"]\noutputs = [\"o.txt\"]\n\n[[release.publish]]\nfrom = \"o.txt\"\nto = \"{to}\"\n"),
        );
        let message = match to {
            "" => "publish `to` is empty; give the file's path in the release tree".to_string(),
            "/" | "/abs/x" => format!("publish `to = \"{to}\"`: absolute paths are not allowed"),
            "../x" => "publish `to = \"../x\"`: `..` is not allowed".to_string(),
            _ => format!("publish `to = \"{to}\"` names a folder, not a file; give the file's path in the release tree (`x.txt`), or a folder ending in `/` (`models/`) to keep its name"),
        };
        refused(&ws, &format!("\"{to}\"\n"), &message);
        assert!(!ws.p("site/public").exists());
    }
    // A folder ending in `/` keeps the name, for a file and for a folder output.
    let ws = Ws::new();
    ws.write("in.txt", "hi\n");
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"a\"\nrun = \"cp in.txt o.txt && mkdir -p out/site && cp in.txt out/site/i.txt\"\ninputs = [\"in.txt\"]\noutputs = [\"o.txt\", \"out/site/\"]\n\n[[release.publish]]\nfrom = \"o.txt\"\nto = \"./\"\n\n[[release.publish]]\nfrom = \"out/site/\"\nto = \"web/\"\n",
    );
    let r = ws.build(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        snapshot(&ws.p("site/public"))
            .into_keys()
            .collect::<Vec<_>>(),
        vec!["o.txt".to_string(), "web/site/i.txt".to_string()]
    );
}

/// A pipeline whose node lists `data` (it never opens a FIFO: a regression hangs no test),
/// with the `inputs` given.
fn glob_pipeline(inputs: &str) -> String {
    format!("[[command]]\nname = \"g\"\nrun = \"touch ran && ls -R data > o.out\"\ninputs = [{inputs}]\noutputs = [\"o.out\"]\n")
}

/// Issue 24, item 4: a file name that is not UTF-8, matched by a glob, was left out of the
/// key: an edit to it gave "0 executed" and a stale output. Refused, like a directory input.
#[test]
fn issue24_4_a_name_that_is_not_utf8_is_refused_by_globs_and_folders() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
    for inputs in ["\"data/*.txt\"", "\"data/**\"", "\"**/*.txt\""] {
        let ws = Ws::new();
        ws.write("data/a.txt", "a\n");
        ws.write("pipeline.toml", &glob_pipeline(inputs));
        std::fs::write(ws.p("data").join(bad), "hidden\n").unwrap();
        let glob = inputs.trim_matches('"');
        refused(
            &ws,
            inputs,
            &format!("node `g`: input `{glob}` matches `data/caf\u{fffd}.txt`, whose name is not UTF-8: it cannot be part of a key; rename it, or narrow the glob"),
        );
    }
    // Inside a folder whose own name is not UTF-8.
    let ws = Ws::new();
    ws.write("data/a.txt", "a\n");
    ws.write("pipeline.toml", &glob_pipeline("\"data/**/*.txt\""));
    let dir = ws.p("data").join(std::ffi::OsStr::from_bytes(b"d\xff"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("x.txt"), "x").unwrap();
    refused(
        &ws,
        "\"data/**/*.txt\"",
        "matches `data/d\u{fffd}/x.txt`, whose name is not UTF-8",
    );
    // A name the glob does not match is no concern of it.
    let ws = Ws::new();
    ws.write("data/a.txt", "a\n");
    ws.write("pipeline.toml", &glob_pipeline("\"data/*.txt\""));
    std::fs::write(
        ws.p("data").join(std::ffi::OsStr::from_bytes(b"n\xe9.bin")),
        "",
    )
    .unwrap();
    assert_eq!(ws.build(&[]).code, 0);
    // A directory input: refused with its location too.
    let ws = Ws::new();
    ws.write("data/a.txt", "a\n");
    ws.write("pipeline.toml", &glob_pipeline("\"data\""));
    std::fs::write(ws.p("data").join(bad), "hidden\n").unwrap();
    refused(&ws, "\"data\"", "node `g`: input `data` cannot be hashed: ");
}

/// Issue 24, item 5: a FIFO, socket or device matched by a glob was left out of the key.
/// Refused with the path, as directory inputs do; a symlink to one too.
#[test]
fn issue24_5_special_files_matched_by_a_glob_are_refused() {
    type Make = fn(&Path);
    let cases: [(&str, Make, &str); 4] = [
        (
            "data/p.txt",
            |p| {
                assert!(std::process::Command::new("mkfifo")
                    .arg(p)
                    .status()
                    .is_ok_and(|s| s.success()))
            },
            "a FIFO",
        ),
        (
            "data/s.txt",
            |p| {
                std::os::unix::net::UnixListener::bind(p).map(drop).unwrap();
            },
            "a socket",
        ),
        (
            "data/d.txt",
            |p| {
                // A character device (as root, which the fault suite runs as).
                assert!(
                    std::process::Command::new("mknod")
                        .arg(p)
                        .args(["c", "1", "3"])
                        .status()
                        .is_ok_and(|s| s.success()),
                    "mknod failed (the fault suite runs as root, as CI does)"
                )
            },
            "a device",
        ),
        (
            "data/sub/p.txt",
            |p| {
                assert!(std::process::Command::new("mkfifo")
                    .arg(p)
                    .status()
                    .is_ok_and(|s| s.success()))
            },
            "a FIFO",
        ),
    ];
    for (path, make, kind) in cases {
        for inputs in ["\"data/**/*.txt\"", "\"data\""] {
            let ws = Ws::new();
            ws.write("data/a.txt", "a\n");
            std::fs::create_dir_all(ws.p("data/sub")).unwrap();
            make(&ws.p(path));
            ws.write("pipeline.toml", &glob_pipeline(inputs));
            let message = if inputs == "\"data\"" {
                "node `g`: input `data` cannot be hashed: ".to_string()
            } else {
                format!("node `g`: input `data/**/*.txt` matches `{path}`, which is {kind}; only regular files can be inputs")
            };
            refused(&ws, inputs, &message);
        }
    }
    // A symlink inside the workspace to a FIFO, matched by the glob: resolved, then refused.
    let ws = Ws::new();
    ws.write("data/a.txt", "a\n");
    assert!(std::process::Command::new("mkfifo")
        .arg(ws.p("fifo"))
        .status()
        .is_ok_and(|s| s.success()));
    std::os::unix::fs::symlink("../fifo", ws.p("data/l.txt")).unwrap();
    ws.write("pipeline.toml", &glob_pipeline("\"data/*.txt\""));
    refused(
        &ws,
        "\"data/*.txt\"",
        "node `g`: input `data/l.txt` is a FIFO; only regular files and folders can be inputs",
    );
}

/// Issue 24, item 6: a glob matching nothing was accepted and the command ran reading
/// undeclared files. An error at the input, unless it says it may be empty.
#[test]
fn issue24_6_a_glob_matching_nothing_is_refused_unless_allowed() {
    for (setup, inputs) in [
        ("empty folder", "\"data/*.txt\""),
        ("no folder", "\"nowhere/*.txt\""),
        ("other names", "\"data/*.csv\""),
    ] {
        let ws = Ws::new();
        std::fs::create_dir_all(ws.p("data")).unwrap();
        if setup == "other names" {
            ws.write("data/a.txt", "a\n");
        }
        ws.write("pipeline.toml", &glob_pipeline(inputs));
        let glob = inputs.trim_matches('"');
        refused(
            &ws,
            inputs,
            &format!("node `g`: input `{glob}` matches no file; if that is expected, declare it as {{ glob = \"{glob}\", allow_empty = true }}"),
        );
    }
    // Allowed: it builds, and a file that appears later re-runs the node.
    let ws = Ws::new();
    std::fs::create_dir_all(ws.p("data")).unwrap();
    ws.write(
        "pipeline.toml",
        &glob_pipeline("{ glob = \"data/*.txt\", allow_empty = true }"),
    );
    let r = ws.build(&[]);
    assert_eq!((r.code, r.count("executed")), (0, 1), "{}", r.stderr);
    let r = ws.build(&[]);
    assert_eq!((r.code, r.count("executed")), (0, 0), "{}", r.stderr);
    ws.write("data/new.txt", "new\n");
    let r = ws.build(&[]);
    assert_eq!((r.code, r.count("executed")), (0, 1), "{}", r.stderr);
    assert_eq!(ws.read("o.out"), "data:\nnew.txt\n");
    // The table is checked: unknown keys, a missing `glob`, a plain path.
    for (inputs, needle, message) in [
        (
            "{ glob = \"data/*.txt\", allow_emtpy = true }",
            "{ glob",
            "unknown key `allow_emtpy` (did you mean `allow_empty`?)",
        ),
        (
            "{ allow_empty = true }",
            "{ allow",
            "an input table needs `glob = \"<pattern>\"`",
        ),
        (
            "{ glob = \"data/new.txt\", allow_empty = true }",
            "{ glob",
            "node `g`: input `data/new.txt`: only a glob (`*`, `?`, `[...]`) may be allowed to match nothing",
        ),
        (
            "3",
            "3]",
            "expected a path, a glob or `node:<name>`, or a table `{ glob = \"...\", allow_empty = true }`",
        ),
    ] {
        ws.write("pipeline.toml", &glob_pipeline(inputs));
        let _ = std::fs::remove_file(ws.p("ran"));
        refused(&ws, needle, message);
    }
}

/// Not in the issue, the same promise: `clean` removed every declared output path and the
/// release folder, whoever made them. Now only what skyctl made goes; the rest is listed.
#[test]
fn clean_removes_only_what_skyctl_made() {
    let ws = Ws::new();
    ws.write("README.md", "my notes\n");
    ws.write("in.txt", "hi\n");
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"a\"\nrun = \"cp in.txt o.txt\"\ninputs = [\"in.txt\"]\noutputs = [\"o.txt\"]\n\n[[command]]\nname = \"b\"\nrun = \"echo x > README.md\"\noutputs = [\"README.md\"]\n\n[[release.publish]]\nfrom = \"o.txt\"\nto = \"o.txt\"\n",
    );
    let r = ws.build(&["a"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let o = ws.run(&["clean"]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("removed 1 outputs"), "{out}");
    assert!(
        out.contains("left `README.md`: not made by skyctl"),
        "{out}"
    );
    assert_eq!(ws.read("README.md"), "my notes\n");
    assert!(!ws.p("o.txt").exists());
}
