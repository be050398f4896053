//! The README's command table (between `<!-- commands -->` and `<!-- /commands -->`) and
//! clap's definitions agree: every subcommand is in the table, and every flag the table shows
//! for a command exists on that command, with the table's value name. The full `--help` of
//! every command is checked in docs/reference/cli.md by `docs.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use clap::CommandFactory;

/// The first cell of every row of the README's command table.
fn reference_lines() -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
        .expect("README.md");
    let start = text
        .find("<!-- commands -->")
        .expect("README: no <!-- commands --> marker");
    let end = text[start..]
        .find("<!-- /commands -->")
        .map(|i| start + i)
        .expect("README: no <!-- /commands --> marker");
    let lines: Vec<String> = text[start..end]
        .lines()
        .filter(|l| l.starts_with("| `skyctl"))
        .map(|l| l.split(" | ").next().unwrap_or_default().to_string())
        .collect();
    assert!(
        lines.len() > 20,
        "README command table not found: {lines:?}"
    );
    lines
}

/// Every command path (`build`, `store check`, ...) with its long flags -> value name.
fn clap_commands() -> BTreeMap<String, BTreeMap<String, Option<String>>> {
    fn walk(
        cmd: &clap::Command,
        prefix: &str,
        globals: &BTreeMap<String, Option<String>>,
        out: &mut BTreeMap<String, BTreeMap<String, Option<String>>>,
    ) {
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let path = format!("{prefix}{}", sub.get_name()).trim().to_string();
            let mut flags = globals.clone();
            for a in sub.get_arguments() {
                let value = a.get_value_names().map(|v| {
                    v.iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                });
                if let Some(long) = a.get_long() {
                    flags.insert(format!("--{long}"), value.clone());
                }
                if let Some(short) = a.get_short() {
                    flags.insert(format!("-{short}"), value);
                }
            }
            out.insert(path.clone(), flags.clone());
            walk(sub, &format!("{path} "), &flags, out);
        }
    }
    let mut out = BTreeMap::new();
    walk(&skyctl::cli::Cli::command(), "", &BTreeMap::new(), &mut out);
    out
}

#[test]
fn every_subcommand_is_in_the_readme_and_every_readme_flag_exists() {
    let commands = clap_commands();
    let lines = reference_lines();
    let mut documented = BTreeSet::new();
    let mut problems = Vec::new();
    for line in &lines {
        // Each `skyctl A [B]` on the line, then the flags up to the next `skyctl`.
        for part in line.split("skyctl ").skip(1) {
            let words: Vec<&str> = part.split_whitespace().collect();
            let Some(first) = words
                .first()
                .map(|w| w.trim_matches(|c: char| !c.is_ascii_alphanumeric()))
            else {
                continue;
            };
            let mut path = first.to_string();
            if let Some(second) = words.get(1) {
                let two = format!(
                    "{first} {}",
                    second.trim_matches(|c: char| !c.is_ascii_alphanumeric())
                );
                if commands.contains_key(&two) {
                    path = two;
                }
            }
            let Some(flags) = commands.get(&path) else {
                problems.push(format!(
                    "README names `skyctl {path}`, which clap does not know: {line}"
                ));
                continue;
            };
            documented.insert(path.clone());
            // A table cell escapes `|` as `\|`.
            let part = part.replace("\\|", "|");
            let tokens: Vec<&str> = part
                .split([' ', '[', ']', '(', ')', '`', ','])
                .filter(|t| !t.is_empty())
                .collect();
            for (i, t) in tokens.iter().enumerate() {
                let flag = t.split('|').next().unwrap_or_default();
                let is_flag = (flag.starts_with("--") && flag.len() > 2)
                    || (flag.len() == 2
                        && flag.starts_with('-')
                        && flag.as_bytes()[1].is_ascii_alphabetic());
                if !is_flag {
                    continue;
                }
                match flags.get(flag) {
                    None => problems.push(format!(
                        "`skyctl {path}`: README shows {flag}, clap has no such flag"
                    )),
                    Some(Some(value)) => {
                        // The README's value name (the next token, when it is one) is clap's.
                        if let Some(next) = tokens.get(i + 1).filter(|n| {
                            !n.starts_with('-')
                                && n.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                        }) {
                            if *next != value {
                                problems.push(format!("`skyctl {path} {flag}`: README says {next}, --help says {value}"));
                            }
                        }
                    }
                    Some(None) => {}
                }
            }
        }
    }
    for path in commands.keys() {
        // A parent whose subcommands are all documented counts as documented.
        let has_documented_child = documented
            .iter()
            .any(|d| d.starts_with(&format!("{path} ")));
        if !documented.contains(path) && !has_documented_child {
            problems.push(format!(
                "`skyctl {path}` is missing from the README's command reference"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "README and --help disagree:\n{}",
        problems.join("\n")
    );
}
