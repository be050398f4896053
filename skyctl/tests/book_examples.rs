//! Every console example of the book runs as written (docs/README.md, "How the examples are
//! tested"). A ```` ```console ```` block holds commands and what they print, in trycmd's
//! syntax: `$ ` starts a command, `> ` continues it (a here-doc's lines, a `\` continuation),
//! an optional `? STATUS` line right after it gives the exit status (`success`, the default,
//! `failed` or a number), and the lines below are its standard output and error together,
//! where `...` on a line of its own stands for any lines and `[..]` for any text within a line
//! (compared by snapbox). Each page's commands run in order, through `sh` with this build's
//! `skyctl` first on PATH, in one fresh folder per page (`$ cd DIR` moves the rest of the page
//! into DIR); `<!-- examples run in a copy of: PATH... -->` on a page copies those paths of
//! this repository into that folder first.
//!
//! A block that shows commands (a `sh`, `shell`, `bash` or untagged block, or any block with a
//! `$ ` or `skyctl ` line) but is not a `console` block must say why it does not run, with
//! `<!-- not run: REASON -->` on the line before it; a command in an indented code block is
//! refused. So a new example runs or says why it does not.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;

fn root() -> PathBuf {
    let skyctl = Path::new(env!("CARGO_MANIFEST_DIR"));
    skyctl.parent().unwrap_or(skyctl).to_path_buf()
}

/// docs/**/*.md, relative to the repository root, sorted.
fn book_pages() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("docs"), &mut files);
    let mut pages: Vec<String> = files
        .iter()
        .map(|f| f.strip_prefix(root()).unwrap_or(f).display().to_string())
        .collect();
    pages.sort();
    pages
}

// ---------------------------------------------------------------------------------------------
// Blocks

/// Languages whose blocks show commands.
const COMMAND_LANGUAGES: &[&str] = &["console", "sh", "shell", "bash", "zsh", ""];

/// A fenced code block.
#[derive(Debug)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    /// The info string's language (`console` of `console,ignore`), and the rest.
    lang: String,
    info: String,
    /// (1-based line, text without the fence's indentation).
    body: Vec<(usize, String)>,
    /// The reason of a `<!-- not run: REASON -->` on the line before the fence.
    not_run: Option<String>,
}

impl Block {
    fn shows_commands(&self) -> bool {
        COMMAND_LANGUAGES.contains(&self.lang.as_str())
            || self.body.iter().any(|(_, l)| {
                let l = l.trim_start();
                l.starts_with("$ ") || l.starts_with("skyctl ")
            })
    }
    fn runs(&self) -> bool {
        self.info == "console"
    }
}

/// The fenced blocks of a Markdown text, and the lines of indented code that hold a command.
fn blocks(text: &str) -> (Vec<Block>, Vec<usize>) {
    let mut blocks = Vec::new();
    let mut indented_commands = Vec::new();
    let mut open: Option<(Block, usize)> = None;
    let mut previous = "";
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        match open.take() {
            Some((block, _)) if trimmed.starts_with("```") && trimmed.trim() == "```" => {
                blocks.push(block);
            }
            Some((mut block, indent)) => {
                let cut = line.len() - line.trim_start_matches(' ').len();
                block.body.push((n, line[cut.min(indent)..].to_string()));
                open = Some((block, indent));
            }
            None if trimmed.starts_with("```") => {
                let info = trimmed.trim_start_matches('`').trim().to_string();
                let lang = info
                    .split(|c: char| c == ',' || c.is_whitespace())
                    .next()
                    .unwrap_or_default()
                    .to_string();
                let not_run = previous
                    .trim()
                    .strip_prefix("<!-- not run:")
                    .and_then(|r| r.strip_suffix("-->"))
                    .map(|r| r.trim().to_string());
                let block = Block {
                    line: n,
                    lang,
                    info,
                    body: Vec::new(),
                    not_run,
                };
                open = Some((block, line.len() - trimmed.len()));
            }
            None => {
                let code = line
                    .strip_prefix("    ")
                    .or_else(|| line.strip_prefix('\t'));
                if let Some(code) = code {
                    let code = code.trim_start();
                    if code.starts_with("$ ") || code.starts_with("skyctl ") {
                        indented_commands.push(n);
                    }
                }
            }
        }
        previous = line;
    }
    if let Some((block, _)) = open {
        blocks.push(block);
    }
    (blocks, indented_commands)
}

/// What is wrong with how a page marks its command blocks. The `--help` text between
/// `<!-- help -->` and `<!-- /help -->` in cli.md is the binary's (docs.rs), not an example.
fn marking_problems(rel: &str, text: &str) -> Vec<String> {
    let (mut blocks, indented) = blocks(text);
    let line_of = |marker: &str| text.lines().position(|l| l.trim() == marker).map(|i| i + 1);
    if let (Some(start), Some(end)) = (line_of("<!-- help -->"), line_of("<!-- /help -->")) {
        blocks.retain(|b| b.line < start || b.line > end);
    }
    let mut problems = Vec::new();
    for n in indented {
        problems.push(format!(
            "{rel}:{n}: a command in an indented code block: put it in a ```console block \
             (run by this test) or a block marked <!-- not run: REASON -->"
        ));
    }
    for b in &blocks {
        let at = format!("{rel}:{}", b.line);
        match (&b.not_run, b.runs()) {
            (Some(_), true) => problems.push(format!(
                "{at}: a ```console block marked not run: it runs; drop the marker, or tag the \
                 block otherwise (```sh)"
            )),
            (Some(reason), false) if reason.is_empty() => {
                problems.push(format!("{at}: <!-- not run: --> without a reason"))
            }
            (None, false) if b.shows_commands() => problems.push(format!(
                "{at}: a ```{} block shows commands but neither runs (```console) nor says why \
                 not (<!-- not run: REASON --> on the line before it)",
                b.info
            )),
            _ => {}
        }
        if b.info.is_empty() {
            problems.push(format!(
                "{at}: a code block without a language: say what it holds (```console, ```sh, \
                 ```text, ```toml...)"
            ));
        }
    }
    problems
}

// ---------------------------------------------------------------------------------------------
// Steps

#[derive(Debug, Clone, Copy, PartialEq)]
enum Status {
    Success,
    Failed,
    Code(i32),
}

impl Status {
    fn parse(s: &str) -> Result<Status, String> {
        match s.trim() {
            "success" => Ok(Status::Success),
            "failed" => Ok(Status::Failed),
            n => n
                .parse()
                .map(Status::Code)
                .map_err(|_| format!("`? {n}`: a status is success, failed or a number")),
        }
    }
    fn admits(self, code: Option<i32>) -> bool {
        match self {
            Status::Success => code == Some(0),
            Status::Failed => code != Some(0),
            Status::Code(c) => code == Some(c),
        }
    }
}

/// One command of a console block and what it must print.
#[derive(Debug)]
struct Step {
    line: usize,
    script: String,
    status: Status,
    expected: String,
}

/// The steps of a console block, in trycmd's syntax.
fn steps(rel: &str, block: &Block) -> Result<Vec<Step>, String> {
    let mut steps: Vec<Step> = Vec::new();
    let mut lines = block.body.iter().peekable();
    while let Some((n, line)) = lines.next() {
        let Some(first) = line.strip_prefix("$ ") else {
            return Err(format!(
                "{rel}:{n}: a console block's first line is a command (`$ ...`), not `{line}`"
            ));
        };
        let mut script = first.to_string();
        while let Some((_, more)) = lines.peek() {
            let Some(more) = more
                .strip_prefix("> ")
                .or((more.as_str() == ">").then_some(""))
            else {
                break;
            };
            script.push('\n');
            script.push_str(more);
            lines.next();
        }
        let mut status = Status::Success;
        if let Some((m, s)) = lines.peek() {
            if let Some(s) = s.strip_prefix("? ") {
                status = Status::parse(s).map_err(|e| format!("{rel}:{m}: {e}"))?;
                lines.next();
            }
        }
        let mut expected = Vec::new();
        while let Some((_, out)) = lines.peek() {
            if out.starts_with("$ ") {
                break;
            }
            expected.push(out.as_str());
            lines.next();
        }
        steps.push(Step {
            line: *n,
            script,
            status,
            expected: expected.join("\n"),
        });
    }
    Ok(steps)
}

/// The paths of `<!-- examples run in a copy of: PATH... -->`.
fn copied_paths(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("<!-- examples run in a copy of:")?
                .strip_suffix("-->")
        })
        .flat_map(|paths| paths.split_whitespace().map(str::to_string))
        .collect()
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
        let entries = std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        for entry in entries {
            let entry = entry.expect("directory entry");
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{}: {e}", parent.display()));
        }
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
}

/// PATH with this build's skyctl first.
fn path_with_skyctl() -> std::ffi::OsString {
    let bin_dir = Path::new(common::skyctl_bin())
        .parent()
        .expect("the binary's folder")
        .to_path_buf();
    std::env::join_paths(std::iter::once(bin_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH")
}

/// Runs a page's console blocks in order in `dir`; the first problem, if any (later commands
/// of the page depend on the earlier ones, so the page stops there). Returns the number of
/// commands run.
fn run_page(rel: &str, text: &str, dir: &Path) -> Result<usize, String> {
    let (blocks, _) = blocks(text);
    let path = path_with_skyctl();
    let assert = snapbox::Assert::new().normalize_paths(false);
    let mut cwd = dir.to_path_buf();
    let mut ran = 0;
    for block in blocks.iter().filter(|b| b.runs()) {
        for step in steps(rel, block)? {
            let at = format!("{rel}:{}: `{}`", step.line, step.script);
            if let Some(to) = step
                .script
                .strip_prefix("cd ")
                .filter(|s| !s.contains('\n'))
            {
                cwd = cwd.join(to.trim());
                if !cwd.is_dir() {
                    return Err(format!("{at}: no folder {}", cwd.display()));
                }
                continue;
            }
            let mut cmd = Command::new("sh");
            cmd.arg("-c")
                .arg(format!("exec 2>&1\n{}", step.script))
                .current_dir(&cwd)
                .env("PATH", &path)
                .env("LC_ALL", "C")
                .stdin(Stdio::null());
            for (name, _) in std::env::vars_os() {
                if name.to_string_lossy().starts_with("SKYCTL_") {
                    cmd.env_remove(name);
                }
            }
            let out = cmd.output().map_err(|e| format!("{at}: sh: {e}"))?;
            ran += 1;
            let mut actual = String::from_utf8_lossy(&out.stdout).into_owned();
            actual.push_str(&String::from_utf8_lossy(&out.stderr));
            let actual = actual.trim_end_matches('\n').to_string();
            let code = out.status.code();
            if !step.status.admits(code) {
                return Err(format!(
                    "{at}: exit status {code:?}, the page says {:?}; it printed:\n{actual}",
                    step.status
                ));
            }
            let expected = step.expected.trim_end_matches('\n').to_string();
            assert
                .try_eq(
                    Some(&at),
                    snapbox::Data::text(actual),
                    snapbox::Data::text(expected),
                )
                .map_err(|e| format!("{at}: the output differs from the page's\n{e}"))?;
        }
    }
    Ok(ran)
}

// ---------------------------------------------------------------------------------------------
// The book

/// Every command block of the book runs (```console) or says why not.
#[test]
fn every_command_block_in_the_book_runs_or_says_why_not() {
    let mut problems = Vec::new();
    let mut not_run = 0;
    for rel in book_pages() {
        let text = std::fs::read_to_string(root().join(&rel)).expect("page");
        problems.extend(marking_problems(&rel, &text));
        not_run += blocks(&text)
            .0
            .iter()
            .filter(|b| b.not_run.is_some())
            .count();
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(not_run >= 3, "only {not_run} blocks marked not run");
}

/// Every ```console block of the book runs as written: page by page, in a fresh folder.
#[test]
fn every_console_example_in_the_book_runs() {
    let mut problems = Vec::new();
    let mut pages = Vec::new();
    let mut commands = 0;
    for rel in book_pages() {
        let text = std::fs::read_to_string(root().join(&rel)).expect("page");
        if !blocks(&text).0.iter().any(Block::runs) {
            continue;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        for p in copied_paths(&text) {
            let from = root().join(&p);
            assert!(from.exists(), "{rel}: `{p}` to copy does not exist");
            copy_tree(&from, &tmp.path().join(&p));
        }
        match run_page(&rel, &text, tmp.path()) {
            Ok(n) => commands += n,
            Err(e) => problems.push(e),
        }
        pages.push(rel);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    assert!(pages.len() >= 5, "only these pages run examples: {pages:?}");
    assert!(commands >= 25, "only {commands} commands ran");
}

// ---------------------------------------------------------------------------------------------
// The runner can fail

fn run_text(text: &str) -> Result<usize, String> {
    let tmp = tempfile::tempdir().expect("tempdir");
    run_page("test.md", text, tmp.path())
}

#[test]
fn a_right_example_passes() {
    let page = "```console\n$ echo hello; echo 'at 0.25s' >&2\nhello\nat [..]s\n\
                $ mkdir d\n$ cd d\n$ cat > f <<'EOF'\n> a\n>\n> b\n> EOF\n$ cat f; ls ..\na\n\nb\n...\n\
                $ exit 3\n? 3\n$ false\n? failed\n```\n";
    assert_eq!(run_text(page), Ok(6));
}

#[test]
fn a_wrong_output_is_caught() {
    let e = run_text("```console\n$ echo hello\nhallo\n```\n").expect_err("wrong output");
    assert!(
        e.contains("test.md:2: `echo hello`") && e.contains("hallo"),
        "{e}"
    );
    // Output the page does not show is caught too.
    run_text("```console\n$ echo hello; echo more\nhello\n```\n").expect_err("unshown output");
    run_text("```console\n$ echo hello\n```\n").expect_err("output where the page shows none");
}

#[test]
fn a_wrong_exit_status_is_caught() {
    let e = run_text("```console\n$ exit 2\n```\n").expect_err("a failure shown as success");
    assert!(e.contains("exit status Some(2)"), "{e}");
    run_text("```console\n$ exit 2\n? 1\n```\n").expect_err("another code");
    run_text("```console\n$ true\n? failed\n```\n").expect_err("a success shown as failure");
}

#[test]
fn a_page_stops_at_its_first_failure() {
    let e = run_text("```console\n$ false\n$ touch later\n```\n").expect_err("failure");
    assert!(e.contains("`false`"), "{e}");
}

#[test]
fn only_console_blocks_run() {
    let page = "```sh\nexit 1\n```\n\n```console,ignore\n$ exit 1\n```\n\n```text\n$ exit 1\n```\n";
    assert_eq!(run_text(page), Ok(0));
}

#[test]
fn the_steps_follow_trycmd() {
    let (b, _) = blocks(
        "x\n```console\n$ a \\\n>   --b\n? 2\nout\n\n$ c\n```\n  ```console\n  $ d\n  e\n  ```\n",
    );
    let s = steps("t", &b[0]).expect("steps");
    assert_eq!(s.len(), 2);
    assert_eq!((s[0].line, s[0].script.as_str()), (3, "a \\\n  --b"));
    assert_eq!(
        (s[0].status, s[0].expected.as_str()),
        (Status::Code(2), "out\n")
    );
    assert_eq!((s[1].script.as_str(), s[1].status), ("c", Status::Success));
    let s = steps("t", &b[1]).expect("indented block");
    assert_eq!((s[0].script.as_str(), s[0].expected.as_str()), ("d", "e"));
    let (b, _) = blocks("```console\nout\n```\n");
    assert!(
        steps("t", &b[0]).is_err(),
        "a block must start with a command"
    );
    assert!(Status::parse("often").is_err());
}

#[test]
fn an_unmarked_command_block_is_caught() {
    let marked = "<!-- not run: needs a GPU -->\n```sh\nskyctl kernels run --impl cuda a b\n```\n";
    assert_eq!(marking_problems("t.md", marked), Vec::<String>::new());
    let data = "```toml\n[project]\n```\n\n```text\nsuite  result\n```\n";
    assert_eq!(marking_problems("t.md", data), Vec::<String>::new());
    let help = "<!-- help -->\n```text\nExamples:\nskyctl build\n```\n<!-- /help -->\n";
    assert_eq!(marking_problems("t.md", help), Vec::<String>::new());
    for (page, what) in [
        ("```sh\nskyctl build\n```\n", "an unmarked sh block"),
        ("```\nmake\n```\n", "an untagged block"),
        (
            "```text\n$ skyctl build\n```\n",
            "a command in a text block",
        ),
        (
            "```console,ignore\n$ skyctl build\n```\n",
            "console,ignore without a reason",
        ),
        (
            "<!-- not run: -->\n```sh\nls\n```\n",
            "a marker without a reason",
        ),
        (
            "<!-- not run: slow -->\n```console\n$ ls\n```\n",
            "a marked console block",
        ),
        ("Run:\n\n    skyctl build\n", "an indented command"),
    ] {
        assert!(
            !marking_problems("t.md", page).is_empty(),
            "{what} was not caught"
        );
    }
}
