//! The book cannot drift from the code: every `pipeline.toml` key the schema accepts is in
//! docs/reference/pipeline-toml.md (and every key there exists), docs/reference/cli.md holds
//! every command's `--help` as the binary prints it, every environment variable the sources
//! read is in docs/reference/environment.md, every relative link and `#anchor` in README.md
//! and docs/**/*.md resolves, and every `skyctl` command line in their code blocks parses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::CommandFactory;

mod common;

fn root() -> PathBuf {
    let skyctl = Path::new(env!("CARGO_MANIFEST_DIR"));
    skyctl.parent().unwrap_or(skyctl).to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// (a) pipeline.toml keys

/// Each table of the schema: a manifest whose only error is the unknown key `zz_not_a_key` in
/// that table, and the heading of its section in pipeline-toml.md.
const TABLES: &[(&str, &str)] = &[
    ("zz_not_a_key = 1\n", "## Top level"),
    ("[project]\nzz_not_a_key = 1\n", "## `[project]`"),
    ("[policy.p]\nzz_not_a_key = 1\n", "## `[policy.<name>]`"),
    (
        "[[policy.p.rule]]\nmatch = \"*\"\ntype = \"f16\"\nzz_not_a_key = 1\n",
        "### `[[policy.<name>.rule]]`",
    ),
    (
        "[calibration.c]\nprompts = \"builtin\"\nzz_not_a_key = 1\n",
        "## `[calibration.<name>]`",
    ),
    (
        "[[model]]\nname = \"m\"\nzz_not_a_key = 1\n",
        "## `[[model]]`",
    ),
    (
        "[[model]]\nname = \"m\"\nquantize = { zz_not_a_key = 1 }\n",
        "### `quantize = { ... }`",
    ),
    (
        "[[model]]\nname = \"m\"\ntune = { zz_not_a_key = 1 }\n",
        "### `tune = { ... }`",
    ),
    (
        "[[model]]\nname = \"m\"\nbench = { zz_not_a_key = 1 }\n",
        "### `bench = { ... }`",
    ),
    (
        "[[golden]]\nname = \"g\"\nkind = \"model\"\nzz_not_a_key = 1\n",
        "## `[[golden]]`",
    ),
    (
        "[[command]]\nname = \"c\"\nrun = \"true\"\nzz_not_a_key = 1\n",
        "## `[[command]]`",
    ),
    (
        "[[command]]\nname = \"c\"\nrun = \"true\"\ninputs = [{ zz_not_a_key = 1 }]\n",
        "### `inputs` tables",
    ),
    (
        "[[command]]\nname = \"c\"\nrun = \"true\"\nresources = { zz_not_a_key = 1 }\n",
        "## `resources = { ... }`",
    ),
    (
        "[[golden]]\nname = \"g\"\nkind = \"model\"\nresources = { zz_not_a_key = 1 }\n",
        "## `resources = { ... }`",
    ),
    ("[cache]\nzz_not_a_key = 1\n", "## `[cache]`"),
    ("[execute]\nzz_not_a_key = 1\n", "## `[execute]`"),
    (
        "[execute.slurm]\nzz_not_a_key = 1\n",
        "### `[execute.slurm]`",
    ),
    ("[site]\nzz_not_a_key = 1\n", "## `[site]`"),
    (
        "[site]\nmodules = { zz_not_a_key = 1 }\n",
        "### `modules = { ... }`",
    ),
    ("[release]\nzz_not_a_key = 1\n", "## `[release]`"),
    (
        "[[release.publish]]\nfrom = \"a\"\nto = \"b\"\nzz_not_a_key = 1\n",
        "### `[[release.publish]]`",
    ),
];

/// The keys the schema accepts where `probe` puts its unknown key, from the error's "expected
/// one of `a`, `b`" list.
fn schema_keys(probe: &str) -> BTreeSet<String> {
    let err = match skyctl::pipeline::schema::Manifest::parse(probe, Path::new("pipeline.toml")) {
        Ok(_) => panic!("the probe parsed, but it has an unknown key:\n{probe}"),
        Err(e) => e.to_string(),
    };
    let list = err
        .split_once("unknown key `zz_not_a_key`")
        .and_then(|(_, rest)| rest.split_once("expected one of "))
        .map(|(_, list)| list.lines().next().unwrap_or_default().to_string())
        .unwrap_or_else(|| panic!("no `expected one of` list for the probe\n{probe}in: {err}"));
    let keys: BTreeSet<String> = list
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    assert!(!keys.is_empty(), "no keys in {err:?}");
    keys
}

/// The lines of the section under `heading`, up to the next heading of any level.
fn section<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
    let mut lines = text.lines().skip_while(|l| l.trim_end() != heading);
    assert!(
        lines.next().is_some(),
        "pipeline-toml.md has no heading {heading:?}"
    );
    lines.take_while(|l| !l.starts_with('#')).collect()
}

/// The keys of the key table of a section: the first cell of each row, when it is one
/// backquoted word.
fn documented_keys(lines: &[&str]) -> BTreeSet<String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |"))
        .map(|(k, _)| k.to_string())
        .filter(|k| !k.contains(' '))
        .collect()
}

#[test]
fn every_pipeline_key_is_documented_and_every_documented_key_exists() {
    let doc = read("docs/reference/pipeline-toml.md");
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (probe, heading) in TABLES {
        let keys = schema_keys(probe);
        let documented = documented_keys(&section(&doc, heading));
        for k in keys.difference(&documented) {
            problems.push(format!(
                "the schema accepts `{k}` under {heading}, but pipeline-toml.md has no row for it"
            ));
        }
        // One heading may serve two probes (resources); compare its rows with both.
        if seen.insert(*heading) {
            for k in documented.difference(&keys) {
                problems.push(format!(
                    "pipeline-toml.md documents `{k}` under {heading}, which the schema refuses"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_key_probe_can_fail() {
    // A section whose table lacks a key the schema has is reported.
    let doc = "## `[project]`\n\n| `release_dir` | path |\n";
    let documented = documented_keys(&section(doc, "## `[project]`"));
    let keys = schema_keys("[project]\nzz_not_a_key = 1\n");
    assert!(keys.contains("store_dir") && !documented.contains("store_dir"));
}

// ---------------------------------------------------------------------------------------------
// (b) the CLI reference

const HELP_START: &str = "<!-- help -->";
const HELP_END: &str = "<!-- /help -->";

/// Every command path, parents before their subcommands (`build`, `store`, `store check`).
fn command_paths() -> Vec<Vec<String>> {
    fn walk(cmd: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let mut path = prefix.to_vec();
            path.push(sub.get_name().to_string());
            out.push(path.clone());
            walk(sub, &path, out);
        }
    }
    let mut out = vec![Vec::new()];
    walk(&skyctl::cli::Cli::command(), &[], &mut out);
    out
}

/// The help section as the binary prints it: one heading and one block per command.
fn fresh_help() -> String {
    let mut s = String::new();
    for path in command_paths() {
        let out = Command::new(common::skyctl_bin())
            .args(&path)
            .arg("--help")
            .output()
            .expect("run skyctl --help");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "skyctl {} --help failed: {}",
            path.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        let name = if path.is_empty() {
            "skyctl".to_string()
        } else {
            format!("skyctl {}", path.join(" "))
        };
        s.push_str(&format!(
            "\n### `{name}`\n\n```text\n{}\n```\n",
            text.trim_end()
        ));
    }
    s
}

#[test]
fn the_cli_reference_holds_every_commands_help() {
    let rel = "docs/reference/cli.md";
    let doc = read(rel);
    let start = doc
        .find(HELP_START)
        .unwrap_or_else(|| panic!("{rel}: no {HELP_START} marker"))
        + HELP_START.len();
    let end = doc[start..]
        .find(HELP_END)
        .map(|i| start + i)
        .unwrap_or_else(|| panic!("{rel}: no {HELP_END} marker"));
    let fresh = fresh_help();
    let fresh_block = format!("{fresh}\n");
    if doc[start..end] != fresh_block {
        let out = root().join("target/docs-cli-help.md");
        let page = format!("{}{fresh_block}{}", &doc[..start], &doc[end..]);
        let _ = std::fs::create_dir_all(root().join("target"));
        std::fs::write(&out, page).expect("write target/docs-cli-help.md");
        let stale: Vec<&str> = fresh
            .split("\n### ")
            .filter(|block| !block.is_empty() && !doc[start..end].contains(block.trim_end()))
            .filter_map(|block| block.lines().next())
            .collect();
        panic!(
            "{rel} differs from the binary's --help ({}): the fresh page is in {}; \
             copy it over {rel} if the change is intended",
            stale.join(", "),
            out.display()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// (c) environment variables

/// Call sites whose variable name is not in the source: (file, what the docs call it).
const DYNAMIC: &[(&str, &str)] = &[
    ("skyctl/src/pipeline/mod.rs", "declared variables"),
    ("stages/env/src/lib.rs", "sky-env"),
];

/// Rust files of the workspace's crates (sources, tests, benches, build scripts).
fn rust_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    let mut crates = vec![root().join("skyctl")];
    for e in std::fs::read_dir(root().join("stages"))
        .expect("stages/")
        .flatten()
    {
        crates.push(e.path());
    }
    for c in crates {
        for part in ["src", "tests", "benches", "build_support"] {
            walk(&c.join(part), &mut out);
        }
        if c.join("build.rs").is_file() {
            out.push(c.join("build.rs"));
        }
    }
    out.sort();
    out
}

fn is_var_name(s: &str) -> bool {
    s.len() > 1
        && s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The string literals on `text` that look like variable names.
fn name_literals(text: &str) -> Vec<String> {
    text.split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| is_var_name(s))
        .map(str::to_string)
        .collect()
}

/// `const NAME: &str = "VALUE";` and `const NAME: [&str; N] = ["A", ...];` of every file.
fn name_consts(files: &[(PathBuf, String)]) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for (_, text) in files {
        for (i, _) in text.match_indices("const ") {
            let rest = &text[i + "const ".len()..];
            let Some((name, def)) = rest.split_once(':') else {
                continue;
            };
            let Some(end) = def.find(';').and_then(|semi| {
                // An array's `;` in its type comes before the `=`.
                if def[..semi].contains('=') {
                    Some(semi)
                } else {
                    def[semi + 1..].find(';').map(|j| semi + 1 + j)
                }
            }) else {
                continue;
            };
            let def = &def[..end];
            if def.trim_start().starts_with("&str") || def.trim_start().starts_with("[&str") {
                let values = name_literals(def);
                if !values.is_empty() {
                    out.insert(name.trim().to_string(), values);
                }
            }
        }
    }
    out
}

/// Every variable the sources read, with where; and the call sites that name none.
fn variables_read() -> (BTreeMap<String, String>, Vec<String>) {
    let root = root();
    let files: Vec<(PathBuf, String)> = rust_files()
        .into_iter()
        // This file names the calls it looks for.
        .filter(|p| !p.ends_with("skyctl/tests/docs.rs"))
        .map(|p| {
            let t = std::fs::read_to_string(&p).unwrap_or_default();
            (p, t)
        })
        .collect();
    let consts = name_consts(&files);
    let mut vars = BTreeMap::new();
    let mut unresolved = Vec::new();
    for (path, text) in &files {
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for call in ["Var::get(", "env::var(", "env::var_os(", "option_env!("] {
                for (at, _) in line.match_indices(call) {
                    // The call's name inside a string (a test about the reader) is no call.
                    if line[..at].matches('"').count() % 2 == 1 {
                        continue;
                    }
                    // A source inside a string literal escapes its quotes.
                    let unescaped = line[at + call.len()..].replace("\\\"", "\"");
                    let arg = unescaped
                        .split([')', ','])
                        .next()
                        .unwrap_or_default()
                        .trim()
                        .trim_start_matches('&');
                    let mut names = name_literals(arg);
                    if names.is_empty() {
                        if let Some(v) = consts.get(arg) {
                            names.clone_from(v);
                        }
                    }
                    if names.is_empty() {
                        // A loop or closure variable: the names a few lines up.
                        let from = n.saturating_sub(8);
                        for up in &lines[from..=n] {
                            names.extend(name_literals(up));
                            for word in up.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                            {
                                if let Some(v) = consts.get(word) {
                                    names.extend(v.iter().cloned());
                                }
                            }
                        }
                    }
                    if names.is_empty() {
                        unresolved.push(format!("{rel}:{}: {}", n + 1, line.trim()));
                    }
                    for name in names {
                        vars.entry(name).or_insert_with(|| rel.clone());
                    }
                }
            }
        }
    }
    // The site's browser tests read theirs through process.env.
    for f in std::fs::read_dir(root.join("site/tests"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let text = std::fs::read_to_string(f.path()).unwrap_or_default();
        for (at, _) in text.match_indices("process.env.") {
            let name: String = text[at + "process.env.".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if is_var_name(&name) {
                vars.entry(name)
                    .or_insert_with(|| format!("site/tests/{}", f.file_name().to_string_lossy()));
            }
        }
    }
    (vars, unresolved)
}

#[test]
fn every_environment_variable_read_is_documented() {
    let doc = read("docs/reference/environment.md");
    let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with('|')).collect();
    let (vars, unresolved) = variables_read();
    for must in [
        "SKYCTL_STORE",
        "SKYCTL_ISA",
        "SKYCTL_REMOTE_CACHE_SIGNING_KEY",
        "SLURM_STEP_GPUS",
    ] {
        assert!(vars.contains_key(must), "the scan missed {must}: {vars:?}");
    }
    let mut problems: Vec<String> = vars
        .iter()
        .filter(|(name, _)| !rows.iter().any(|r| r.contains(&format!("`{name}`"))))
        .map(|(name, file)| {
            format!("{file} reads {name}, which docs/reference/environment.md does not document")
        })
        .collect();
    for site in unresolved {
        match DYNAMIC
            .iter()
            .find(|(file, _)| site.starts_with(&format!("{file}:")))
        {
            Some((_, what)) if doc.contains(what) => {}
            Some((_, what)) => problems.push(format!(
                "{site}: environment.md should say what it reads ({what})"
            )),
            None => problems.push(format!(
                "{site}: reads a variable whose name this test cannot find; name it in the \
                 source, or list the file in DYNAMIC with what environment.md calls it"
            )),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// (d) links

/// README.md and every Markdown file under docs/.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![root().join("README.md"), root().join("BENCH.md")];
    walk(&root().join("docs"), &mut out);
    out.sort();
    out
}

/// The text outside fenced code blocks and inline code spans.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if fenced || (line.starts_with("    ") && !line.trim_start().starts_with(['-', '|', '['])) {
            out.push('\n');
            continue;
        }
        // Drop `code spans`: a link inside one is an example, not a link.
        let mut inside = false;
        for part in line.split('`') {
            if !inside {
                out.push_str(part);
            }
            inside = !inside;
        }
        out.push('\n');
    }
    out
}

/// `[text](target)` targets, with the line they start on.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("](") {
        let start = i + at + 2;
        let Some(len) = text[start..].find(')') else {
            break;
        };
        let target = &text[start..start + len];
        if !target.contains(char::is_whitespace) && !target.is_empty() {
            let line = bytes[..start].iter().filter(|b| **b == b'\n').count() + 1;
            out.push((line, target.to_string()));
        }
        i = start;
    }
    out
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (GitHub numbers repeats: `x`, `x-1`).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let base = slug(line.trim_start_matches('#'));
        let mut a = base.clone();
        let mut n = 0;
        while out.contains(&a) {
            n += 1;
            a = format!("{base}-{n}");
        }
        out.insert(a);
    }
    out
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug(" `[[model]]`"), "model");
    assert_eq!(
        slug(" Asking questions (requests)"),
        "asking-questions-requests"
    );
    assert_eq!(slug(" `quantize = { ... }`"), "quantize----");
    assert_eq!(
        slug(" The nodes a `[[model]]` expands into"),
        "the-nodes-a-model-expands-into"
    );
    let a = anchors("# A\n## B\n```\n# not\n```\n## B\n");
    assert_eq!(a, BTreeSet::from(["a".into(), "b".into(), "b-1".into()]));
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let root = root();
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).expect("read a Markdown file");
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (line, target) in links(&prose(&text)) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap_or(&root).join(path)
            };
            if !dest.exists() {
                problems.push(format!("{rel}:{line}: `{target}`: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let Ok(dest_text) = std::fs::read_to_string(&dest) else {
                    problems.push(format!("{rel}:{line}: `{target}`: an anchor into a folder"));
                    continue;
                };
                if !anchors(&dest_text).contains(anchor) {
                    problems.push(format!(
                        "{rel}:{line}: `{target}`: no heading with that anchor"
                    ));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} links found");
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// (e) command lines in code blocks

/// The words of a shell command line: whitespace-separated, with single and double quotes
/// grouping (enough for the book's examples, which use no escapes inside quotes).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, c) if c.is_whitespace() => {
                if started || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            (None, c) => word.push(c),
        }
    }
    if started || !word.is_empty() {
        words.push(word);
    }
    words
}

/// Every `skyctl ...` line in a fenced or indented code block of README.md and docs/ (the
/// generated help in cli.md aside): (file:line, the line with `$ `, comments, `[ ]` around
/// optional parts and `\` continuations, with their `> ` in a console block, taken away).
fn book_command_lines() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for file in markdown_files() {
        let rel = file
            .strip_prefix(root())
            .unwrap_or(&file)
            .display()
            .to_string();
        if rel == "docs/reference/cli.md" || rel == "BENCH.md" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let mut fenced = false;
        let mut pending: Option<(usize, String)> = None;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if !fenced && !line.starts_with("    ") {
                continue;
            }
            let mut code = line.trim();
            if let Some((at, mut so_far)) = pending.take() {
                // A console block's continuation line starts with `> ` (book_examples.rs).
                let code = code.strip_prefix("> ").unwrap_or(code);
                let more = code.strip_suffix('\\');
                so_far.push(' ');
                so_far.push_str(more.unwrap_or(code).trim());
                match more {
                    Some(_) => pending = Some((at, so_far)),
                    None => out.push((format!("{rel}:{at}"), so_far)),
                }
                continue;
            }
            code = code.strip_prefix("$ ").unwrap_or(code);
            if !code.starts_with("skyctl ") {
                continue;
            }
            // A comment starts at ` #`.
            let code = code.split(" #").next().unwrap_or(code).trim();
            let code = code.replace(['[', ']'], "");
            match code.strip_suffix('\\') {
                Some(start) => pending = Some((i + 1, start.trim().to_string())),
                None => out.push((format!("{rel}:{}", i + 1), code)),
            }
        }
    }
    out
}

#[test]
fn shell_words_keep_quoted_text_together() {
    assert_eq!(
        shell_words(r#"skyctl ask m.gguf --text "a b" --x '' c"#),
        ["skyctl", "ask", "m.gguf", "--text", "a b", "--x", "", "c"]
    );
}

/// Every skyctl command line the book shows parses with this skyctl: its subcommands, flags
/// and values exist (the README's walkthrough also runs, in `readme.rs`).
#[test]
fn every_command_line_in_the_book_parses() {
    let lines = book_command_lines();
    assert!(
        lines.len() >= 20,
        "only {} command lines: {lines:?}",
        lines.len()
    );
    let mut problems = Vec::new();
    for (at, line) in &lines {
        let words = shell_words(line);
        match skyctl::cli::Cli::command().try_get_matches_from(&words) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
                ) => {}
            Err(e) => problems.push(format!(
                "{at}: `{line}`: {}",
                e.to_string().lines().next().unwrap_or_default()
            )),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
