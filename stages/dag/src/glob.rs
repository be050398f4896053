//! A small glob matcher over `/`-separated paths and names: `*` (any run without `/`), `**`
//! (any run, `/` included), `?` (one character other than `/`), `[abc]`/`[a-z]`/`[!a]`
//! (one character of a set). Used for input globs and per-tensor policy rules.

/// Why a glob pattern does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    /// The pattern is empty.
    #[error("empty glob pattern")]
    Empty,
    /// The pattern is longer than [`MAX_PATTERN`] bytes.
    #[error("glob pattern of {len} bytes; at most {MAX_PATTERN} are allowed")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// A `[` set without its `]`.
    #[error("unclosed `[` at character {at} of `{pattern}`")]
    UnclosedSet {
        /// 1-based byte position of the `[`.
        at: usize,
        /// The pattern.
        pattern: String,
    },
}

/// A parsed glob pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
}

impl Glob {
    /// Parse a pattern; the error says what is malformed.
    pub fn new(pattern: &str) -> Result<Glob, GlobError> {
        if pattern.is_empty() {
            return Err(GlobError::Empty);
        }
        if pattern.len() > MAX_PATTERN {
            return Err(GlobError::TooLong { len: pattern.len() });
        }
        let b = pattern.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'[' {
                match b[i + 1..].iter().position(|&c| c == b']') {
                    Some(p) if p > 0 => i += p + 1,
                    _ => {
                        return Err(GlobError::UnclosedSet {
                            at: i + 1,
                            pattern: pattern.to_string(),
                        })
                    }
                }
            }
            i += 1;
        }
        Ok(Glob {
            pattern: pattern.to_string(),
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether `text` matches the whole pattern. Each (pattern position, text position) is
    /// decided once, so a pattern with many stars costs O(pattern x text x text) at worst,
    /// not exponential time (a fuzzed `pipeline.toml` with 80 stars took minutes before).
    pub fn matches(&self, text: &str) -> bool {
        let mut m = Matcher {
            p: self.pattern.as_bytes(),
            t: text.as_bytes(),
            memo: std::collections::HashMap::new(),
        };
        m.at(0, 0)
    }

    /// The leading part of the pattern up to the last `/` before the first wildcard: the
    /// directory a file walk has to start from.
    pub fn literal_dir(&self) -> &str {
        let first_wild = self
            .pattern
            .find(['*', '?', '['])
            .unwrap_or(self.pattern.len());
        match self.pattern[..first_wild].rfind('/') {
            Some(p) => &self.pattern[..p],
            None => "",
        }
    }

    /// Whether `s` contains glob metacharacters.
    pub fn is_glob(s: &str) -> bool {
        s.contains(['*', '?', '['])
    }
}

/// Longest pattern accepted (a path or tensor-name glob is far shorter).
const MAX_PATTERN: usize = 4096;

struct Matcher<'a> {
    p: &'a [u8],
    t: &'a [u8],
    /// (pattern offset, text offset) -> whether the rest matches.
    memo: std::collections::HashMap<(usize, usize), bool>,
}

impl Matcher<'_> {
    fn at(&mut self, pi: usize, ti: usize) -> bool {
        if let Some(&known) = self.memo.get(&(pi, ti)) {
            return known;
        }
        let r = self.step(pi, ti);
        self.memo.insert((pi, ti), r);
        r
    }

    fn step(&mut self, pi: usize, ti: usize) -> bool {
        let (p, t) = (self.p, self.t);
        if pi == p.len() {
            return ti == t.len();
        }
        match p[pi] {
            b'*' if p.get(pi + 1) == Some(&b'*') => {
                // `**/` also matches zero directories.
                let rest = pi + 2;
                if p.get(rest) == Some(&b'/') && self.at(rest + 1, ti) {
                    return true;
                }
                (ti..=t.len()).any(|i| self.at(rest, i))
            }
            b'*' => {
                for i in ti..=t.len() {
                    if self.at(pi + 1, i) {
                        return true;
                    }
                    if i < t.len() && t[i] == b'/' {
                        break;
                    }
                }
                false
            }
            b'?' => ti < t.len() && t[ti] != b'/' && self.at(pi + 1, ti + 1),
            b'[' => {
                let Some(end) = p[pi + 1..]
                    .iter()
                    .position(|&c| c == b']')
                    .map(|e| pi + 1 + e)
                else {
                    return false;
                };
                if ti >= t.len() || t[ti] == b'/' {
                    return false;
                }
                let mut set = &p[pi + 1..end];
                let negate = set.first() == Some(&b'!');
                if negate {
                    set = &set[1..];
                }
                let c = t[ti];
                let mut hit = false;
                let mut i = 0;
                while i < set.len() {
                    if i + 2 < set.len() && set[i + 1] == b'-' {
                        hit |= set[i] <= c && c <= set[i + 2];
                        i += 3;
                    } else {
                        hit |= set[i] == c;
                        i += 1;
                    }
                }
                hit != negate && self.at(end + 1, ti + 1)
            }
            c => ti < t.len() && t[ti] == c && self.at(pi + 1, ti + 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, t: &str) -> bool {
        Glob::new(p).unwrap().matches(t)
    }

    #[test]
    fn many_stars_match_in_polynomial_time() {
        let pattern = format!("{}golden/laya/cases.jsonl", "*".repeat(80));
        let g = Glob::new(&pattern).unwrap();
        let t0 = std::time::Instant::now();
        assert!(!g.matches("build/s1-pico/s1-pico.f16.gguf/a/b/c/d/e/f/g"));
        assert!(g.matches("x/golden/laya/cases.jsonl"));
        let g = Glob::new(&"*a".repeat(40)).unwrap();
        assert!(!g.matches(&"a".repeat(30)));
        assert!(g.matches(&"a".repeat(60)));
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
        let e = Glob::new(&"x".repeat(5000)).unwrap_err();
        assert_eq!(e, GlobError::TooLong { len: 5000 });
        assert!(e.to_string().contains("at most 4096"), "{e}");
    }

    #[test]
    fn star_stays_in_one_component() {
        assert!(m("*.txt", "a.txt"));
        assert!(!m("*.txt", "d/a.txt"));
        assert!(m("d/*.txt", "d/a.txt"));
    }

    #[test]
    fn double_star_crosses_components() {
        assert!(m("**/*.txt", "a.txt"));
        assert!(m("**/*.txt", "x/y/a.txt"));
        assert!(m("blk.*.attn_*.weight", "blk.0.attn_qkv.weight"));
        assert!(m("enc/**", "enc/a/b"));
    }

    #[test]
    fn classes_and_question_mark() {
        assert!(m("blk.[0-3].x", "blk.2.x"));
        assert!(!m("blk.[!0-3].x", "blk.2.x"));
        assert!(m("a?c", "abc"));
        assert!(!m("a?c", "a/c"));
    }

    #[test]
    fn malformed_patterns_are_rejected() {
        let e = Glob::new("a[bc").unwrap_err();
        assert_eq!(
            e,
            GlobError::UnclosedSet {
                at: 2,
                pattern: "a[bc".into()
            }
        );
        assert_eq!(e.to_string(), "unclosed `[` at character 2 of `a[bc`");
        assert_eq!(Glob::new("").unwrap_err(), GlobError::Empty);
    }

    #[test]
    fn literal_dir_is_the_walk_root() {
        assert_eq!(Glob::new("data/in/*.txt").unwrap().literal_dir(), "data/in");
        assert_eq!(Glob::new("*.txt").unwrap().literal_dir(), "");
        assert_eq!(Glob::new("a/**/b").unwrap().literal_dir(), "a");
    }
}
