//! Issue 53, class 7: the workspace's own rules, everywhere a path is written. A `.git` at any
//! depth is never written (a nested repository's hooks neither); a folder input that holds
//! another node's output waits for that node; `--store` never makes a store in a folder of
//! the user's files (a query never makes one at all); a direct tool never writes over what it
//! reads. Each against the real binary: the exit code, the message, and what was left.

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

/// The one line of a build refused before anything ran: exit 2, located at `needle` in
/// pipeline.toml, with `message` after the location.
fn refused_at(ws: &Ws, needle: &str, message: &str) {
    let toml = ws.read("pipeline.toml");
    let (line, col) = at(&toml, needle);
    let e = ws.fails(&["build"], 2);
    assert_eq!(
        e.trim_end(),
        format!("skyctl: pipeline.toml:{line}:{col}: {message}"),
        "{toml}"
    );
    assert!(!ws.p("ran").exists(), "a node ran: {e}");
}

fn git_init(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let o = std::process::Command::new("git")
        .args(["init", "-q", "."])
        .current_dir(dir)
        .output()
        .expect("running git");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Issue 53, class 7: an output `sub/.git/hooks/pre-commit` inside a nested repository was
/// written (only the root `.git` was refused).
#[test]
fn issue53_7_an_output_in_a_nested_repository_is_refused() {
    let ws = Ws::new();
    git_init(ws.path());
    git_init(&ws.p("sub"));
    let hooks = snapshot(&ws.p("sub/.git/hooks"));
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"hook\"\nrun = \"touch ran && mkdir -p sub/.git/hooks && echo evil > sub/.git/hooks/pre-commit\"\noutputs = [\"sub/.git/hooks/pre-commit\"]\n",
    );
    refused_at(
        &ws,
        "\"hook\"",
        "node `hook`: output `sub/.git/hooks/pre-commit` lies inside version control's folder `sub/.git`, which is not the build's to write",
    );
    assert_eq!(snapshot(&ws.p("sub/.git/hooks")), hooks);
    // A folder output named like it, at any depth, and a folder output holding one.
    for (out, message) in [
        ("a/b/.git/", "is version control's folder `a/b/.git`"),
        ("a/.git/x/", "lies inside version control's folder `a/.git`"),
    ] {
        ws.write(
            "pipeline.toml",
            &format!("[[command]]\nname = \"w\"\nrun = \"touch ran\"\noutputs = [\"{out}\"]\n"),
        );
        let shown = out.trim_end_matches('/');
        refused_at(
            &ws,
            "\"w\"",
            &format!("node `w`: output `{shown}` {message}, which is not the build's to write"),
        );
    }
    // The project folders by the same rule.
    for key in ["release_dir", "store_dir", "build_dir"] {
        ws.write(
            "pipeline.toml",
            &format!("[project]\n{key} = \"sub/.git/x\"\n\n[[command]]\nname = \"a\"\nrun = \"touch ran && echo a > o\"\noutputs = [\"o\"]\n"),
        );
        refused_at(
            &ws,
            "\"sub/.git/x\"",
            &format!("{key} `sub/.git/x` lies inside version control's folder `sub/.git`, which is not skyctl's; choose a folder of its own"),
        );
    }
    assert!(!ws.p("sub/.git/x").exists());
    // Names that only look like it are the build's.
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"ok\"\nrun = \"mkdir -p .github x.git && echo a > .github/a && echo b > x.git/b\"\noutputs = [\".github/a\", \"x.git/b\"]\n",
    );
    let r = ws.build(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A pipeline where `use` (declared first) lists the folder `data`, which holds `data/src.txt`
/// and the output `data/gen.txt` of `gen`.
const HOLDING: &str = "[[command]]\nname = \"use\"\nrun = \"sleep 1; ls data > listing\"\ninputs = [\"data\"]\noutputs = [\"listing\"]\n\n[[command]]\nname = \"gen\"\nrun = \"mkdir -p data && cat seed > data/gen.txt\"\ninputs = [\"seed\"]\noutputs = [\"data/gen.txt\"]\n";

/// Issue 53, class 7: a folder input holding another node's output got no dependency: the
/// consumer ran first (without the output), the next build re-ran it, and with `-j 2` it
/// failed as `input_changed` when the output appeared while it ran.
#[test]
fn issue53_7_a_folder_input_holding_an_output_waits_for_its_node() {
    let ws = Ws::new();
    ws.write("data/src.txt", "s\n");
    ws.write("seed", "one\n");
    ws.write("pipeline.toml", HOLDING);
    let r = ws.build(&["-j", "2"]);
    assert_eq!(r.code, 0, "{}\n{:?}", r.stderr, r.events);
    assert_eq!(r.executed(), vec!["gen".to_string(), "use".to_string()]);
    assert_eq!(ws.read("listing"), "gen.txt\nsrc.txt\n");
    // Nothing changed: nothing runs.
    let r = ws.build(&["-j", "2"]);
    assert_eq!((r.code, r.count("executed")), (0, 0), "{:?}", r.events);
    // The output changes: both run again, in order.
    ws.write("seed", "two\n");
    let r = ws.build(&["-j", "2"]);
    assert_eq!(r.code, 0, "{}\n{:?}", r.stderr, r.events);
    assert_eq!(r.executed(), vec!["gen".to_string(), "use".to_string()]);
    let r = ws.build(&["-j", "2"]);
    assert_eq!((r.code, r.count("executed")), (0, 0), "{:?}", r.events);
    // The dependency shows in the graph.
    let o = ws.run(&["graph", "--format", "json"]);
    let text = String::from_utf8_lossy(&o.stdout);
    let g: serde_json::Value = serde_json::from_str(&text).unwrap();
    let use_node = g["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "use")
        .unwrap();
    assert_eq!(use_node["deps"], serde_json::json!(["gen"]), "{text}");
    // From a clean checkout the folder need not exist: its node makes it.
    let ws = Ws::new();
    ws.write("seed", "one\n");
    ws.write("pipeline.toml", HOLDING);
    let r = ws.build(&["-j", "2"]);
    assert_eq!(r.code, 0, "{}\n{:?}", r.stderr, r.events);
    assert_eq!(ws.read("listing"), "gen.txt\n");
    // A node reading the folder it writes into: refused at the input.
    let ws = Ws::new();
    ws.write("data/src.txt", "s\n");
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"self\"\nrun = \"touch ran && ls data > data/list\"\ninputs = [\"data\"]\noutputs = [\"data/list\"]\n",
    );
    refused_at(
        &ws,
        "\"data\"]",
        "node `self`: input `data` holds its own output `data/list`; a node cannot read the folder it writes into (its key would change with every run): read another folder, or write the output elsewhere",
    );
}

/// Issue 53, class 7: `--store DIR` (or SKYCTL_STORE) naming a folder of the user's files
/// wrote `CACHEDIR.TAG` and a `.gitignore` of `*` into it, even for `store path`, a query;
/// `store_dir` naming the same folder was refused.
#[test]
fn issue53_7_a_store_option_never_takes_a_folder_of_user_files() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"a\"\nrun = \"touch ran && echo a > o\"\noutputs = [\"o\"]\n",
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let mine = elsewhere.path().join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "mine\n").unwrap();
    let before = snapshot(&mine);
    let arg = mine.to_str().unwrap();
    let want = format!(
        "skyctl: --store `{arg}` already exists and holds `{arg}/notes.txt`, which is not the store's; choose a folder of its own (the store writes `CACHEDIR.TAG` and `.gitignore` into it)"
    );
    for args in [
        &["store", "path", "--store", arg][..],
        &["build", "--store", arg],
        &["status", "--store", arg],
        &["store", "check", "--store", arg],
    ] {
        let e = ws.fails(args, 2);
        assert_eq!(e.trim_end(), want, "{args:?}");
        assert_eq!(snapshot(&mine), before, "{args:?} wrote into the folder");
    }
    // Named by SKYCTL_STORE: the same, by its name.
    let o = ws
        .cmd(&["build"])
        .env("SKYCTL_STORE", &mine)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim_end(),
        want.replace("--store", "SKYCTL_STORE")
    );
    assert_eq!(snapshot(&mine), before);
    assert!(!ws.p("ran").exists());
    // A folder inside version control's: elsewhere, or in the workspace (a project folder,
    // checked with the others).
    let repo = elsewhere.path().join("repo");
    git_init(&repo);
    let cache = repo.join(".git/cache");
    let e = ws.fails(&["build", "--store", cache.to_str().unwrap()], 2);
    assert_eq!(
        e.trim_end(),
        format!(
            "skyctl: --store `{}` lies inside version control's folder `{}`, which is not skyctl's; choose a folder of its own",
            cache.display(),
            repo.canonicalize().unwrap().join(".git").display()
        )
    );
    assert!(!cache.exists());
    let e = ws.fails(&["build", "--store", ".git/cache"], 2);
    assert_eq!(
        e.trim_end(),
        "skyctl: pipeline.toml:1:1: --store `.git/cache` lies inside version control's folder `.git`, which is not skyctl's; choose a folder of its own"
    );
    assert!(!ws.p(".git").exists());
    // A folder of user files in the workspace, by the same rule.
    ws.write("docs/guide.md", "my guide\n");
    let e = ws.fails(&["build", "--store", "docs"], 2);
    assert!(
        e.starts_with("skyctl: pipeline.toml:1:1: --store `docs` already exists and holds `"),
        "{e}"
    );
    assert_eq!(snapshot(&ws.p("docs")).len(), 1);
    // A query names a store and makes none; a build makes it in an empty folder, and it is
    // used again as it is.
    let empty = elsewhere.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = ws.run(&["store", "path", "--store", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim_end(),
        empty.join("store-v2").to_str().unwrap()
    );
    assert!(
        snapshot(&empty).is_empty(),
        "a query wrote into the store folder"
    );
    // `store check` and `store push` of a store not made yet say so and make none.
    for action in ["check", "push"] {
        let o = ws.run(&["store", action, "--store", empty.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "store {action}");
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim_end(),
            format!(
                "no store yet at {}: nothing has been built into it",
                empty.join("store-v2").display()
            )
        );
        assert!(snapshot(&empty).is_empty(), "store {action} made a store");
    }
    let r = ws.build(&["--store", empty.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(empty.join("CACHEDIR.TAG").is_file());
    let r = ws.build(&["--store", empty.to_str().unwrap()]);
    assert_eq!((r.code, r.count("executed")), (0, 0), "{}", r.stderr);
    // A store already there is used even with other files beside it.
    std::fs::write(empty.join("README"), "about this cache\n").unwrap();
    let r = ws.build(&["--store", empty.to_str().unwrap()]);
    assert_eq!((r.code, r.count("executed")), (0, 0), "{}", r.stderr);
}

/// Issue 53, class 7: `convert CKPT CKPT/model.safetensors` overwrote its own input; the
/// other direct tools' outputs follow the same rule.
#[test]
fn issue53_7_a_tool_never_writes_over_what_it_reads() {
    let ws = Ws::new();
    let o = ws.run(&["random", "s1-pico", "ck"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let ck = snapshot(&ws.p("ck"));
    let e = ws.fails(&["convert", "ck", "ck/model.safetensors"], 2);
    assert_eq!(
        e.trim_end(),
        "skyctl: convert: the output `ck/model.safetensors` lies inside the checkpoint `ck`, which convert reads; write it elsewhere"
    );
    // Through a symlink, or `..`.
    std::os::unix::fs::symlink("ck", ws.p("alias")).unwrap();
    for out in ["alias/m.gguf", "ck/encoder/../m.gguf", "ck/new/m.gguf"] {
        let e = ws.fails(&["convert", "ck", out], 2);
        assert!(e.contains("lies inside the checkpoint `ck`"), "{out}: {e}");
    }
    assert_eq!(snapshot(&ws.p("ck")), ck);
    // Beside it: written.
    let o = ws.run(&["convert", "ck", "m.gguf"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // quantize and calibrate: never over the model.
    let e = ws.fails(&["quantize", "m.gguf", "m.gguf"], 2);
    assert!(
        e.contains(
            "skyctl: quantize: the output `m.gguf` is the model `m.gguf`, which quantize reads"
        ),
        "{e}"
    );
    let e = ws.fails(&["calibrate", "ck", "ck/calibration.json"], 2);
    assert!(e.contains("lies inside the model `ck`"), "{e}");
    let e = ws.fails(
        &[
            "tune",
            "m.gguf",
            "--cases",
            "c.jsonl",
            "--tolerance",
            "0.1",
            "--out",
            "m.gguf",
        ],
        2,
    );
    assert!(
        e.contains("skyctl: tune: the output `m.gguf` is the model `m.gguf`, which tune reads"),
        "{e}"
    );
    // golden record: never over the cases or the model.
    ws.write("cases.jsonl", "{}\n");
    let e = ws.fails(
        &[
            "golden",
            "record",
            "m.gguf",
            "--cases",
            "cases.jsonl",
            "--out",
            "cases.jsonl",
        ],
        2,
    );
    assert!(
        e.contains("skyctl: golden record: the output `cases.jsonl` is the cases file `cases.jsonl`, which golden record reads"),
        "{e}"
    );
    assert_eq!(ws.read("cases.jsonl"), "{}\n");
    // kernels run: never into the golden folder it is checked against; cuda compile: never
    // over its sources.
    let gen = ws.run(&["golden", "gen", "kg"]);
    assert_eq!(gen.status.code(), Some(0), "{gen:?}");
    let before = snapshot(&ws.p("kg"));
    let e = ws.fails(&["kernels", "run", "--impl", "cpu", "kg", "kg"], 2);
    assert_eq!(
        e.trim_end(),
        "skyctl: kernels run: the output `kg` is the golden inputs folder `kg`, which kernels run reads; write it elsewhere"
    );
    assert_eq!(snapshot(&ws.p("kg")), before);
    let ran = ws.run(&["kernels", "run", "--impl", "cpu", "kg", "kout"]);
    assert_eq!(ran.status.code(), Some(0), "{ran:?}");
    ws.write("k.cu", "__global__ void k() {}\n");
    let e = ws.fails(&["cuda", "compile", "--out", "k.cu", "k.cu"], 2);
    assert!(
        e.contains("skyctl: cuda compile: the output `k.cu` is a kernel source `k.cu`, which cuda compile reads"),
        "{e}"
    );
    assert_eq!(ws.read("k.cu"), "__global__ void k() {}\n");
    // Nothing into version control's folder, at any depth.
    git_init(&ws.p("sub"));
    for args in [
        &["convert", "ck", "sub/.git/hooks/pre-commit"][..],
        &["random", "s1-pico", "sub/.git/ck"],
        &["golden", "gen", "sub/.git/goldens"],
    ] {
        let e = ws.fails(args, 2);
        assert!(
            e.contains("lies inside version control's folder `")
                && e.contains("sub/.git`, which is not skyctl's to write"),
            "{args:?}: {e}"
        );
    }
    assert!(!ws.p("sub/.git/hooks/pre-commit").exists());
    assert!(!ws.p("sub/.git/ck").exists() && !ws.p("sub/.git/goldens").exists());
    // random: a checkpoint's files are replaced; another folder's are not.
    ws.write("mine/tokenizer/tokenizer.json", "my tokenizer\n");
    let e = ws.fails(&["random", "s1-pico", "mine"], 2);
    assert_eq!(
        e.trim_end(),
        "skyctl: random: `mine` is not a Laya checkpoint, and it holds `mine/model.safetensors`, which random would write over; give a new folder (or a checkpoint, whose files are replaced)"
            .replace("mine/model.safetensors", "mine/tokenizer/tokenizer.json")
    );
    assert_eq!(snapshot(&ws.p("mine")).len(), 1);
    let o = ws.run(&["random", "s1-pico", "ck", "--seed", "7"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
