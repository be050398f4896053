//! A small glob matcher over `/`-separated paths and names: `*` (any run without `/`), `**`
//! (any run, `/` included), `?` (one character other than `/`), `[abc]`/`[a-z]`/`[!a]`
//! (one character of a set). Used for input globs and per-tensor policy rules.

/// A parsed glob pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
}

impl Glob {
    /// Parse a pattern; the error says what is malformed.
    pub fn new(pattern: &str) -> Result<Glob, String> {
        if pattern.is_empty() {
            return Err("empty glob pattern".into());
        }
        let b = pattern.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'[' {
                match b[i + 1..].iter().position(|&c| c == b']') {
                    Some(p) if p > 0 => i += p + 1,
                    _ => {
                        return Err(format!(
                            "unclosed `[` at character {} of `{pattern}`",
                            i + 1
                        ))
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

    /// Whether `text` matches the whole pattern.
    pub fn matches(&self, text: &str) -> bool {
        match_from(self.pattern.as_bytes(), text.as_bytes())
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

fn match_from(p: &[u8], t: &[u8]) -> bool {
    if p.is_empty() {
        return t.is_empty();
    }
    match p[0] {
        b'*' if p.get(1) == Some(&b'*') => {
            // `**/` also matches zero directories.
            let rest = &p[2..];
            if rest.first() == Some(&b'/') && match_from(&rest[1..], t) {
                return true;
            }
            (0..=t.len()).any(|i| match_from(rest, &t[i..]))
        }
        b'*' => {
            let rest = &p[1..];
            for i in 0..=t.len() {
                if match_from(rest, &t[i..]) {
                    return true;
                }
                if i < t.len() && t[i] == b'/' {
                    break;
                }
            }
            false
        }
        b'?' => !t.is_empty() && t[0] != b'/' && match_from(&p[1..], &t[1..]),
        b'[' => {
            let Some(end) = p[1..].iter().position(|&c| c == b']').map(|e| e + 1) else {
                return false;
            };
            if t.is_empty() || t[0] == b'/' {
                return false;
            }
            let mut set = &p[1..end];
            let negate = set.first() == Some(&b'!');
            if negate {
                set = &set[1..];
            }
            let c = t[0];
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
            hit != negate && match_from(&p[end + 1..], &t[1..])
        }
        c => !t.is_empty() && t[0] == c && match_from(&p[1..], &t[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, t: &str) -> bool {
        Glob::new(p).unwrap().matches(t)
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
        assert!(Glob::new("a[bc").is_err());
        assert!(Glob::new("").is_err());
    }

    #[test]
    fn literal_dir_is_the_walk_root() {
        assert_eq!(Glob::new("data/in/*.txt").unwrap().literal_dir(), "data/in");
        assert_eq!(Glob::new("*.txt").unwrap().literal_dir(), "");
        assert_eq!(Glob::new("a/**/b").unwrap().literal_dir(), "a");
    }
}
