//! Added-token extraction, as HF `AddedVocabulary::find_matches` does it: leftmost-longest
//! non-overlapping matches of the token contents, then `single_word`, `lstrip` and `rstrip`.

/// One pattern: the text to find and what to do around it.
#[derive(Clone, Debug)]
pub(crate) struct Pattern {
    pub content: String,
    pub id: u32,
    pub lstrip: bool,
    pub rstrip: bool,
    pub single_word: bool,
}

/// A piece of the input: plain text to tokenize further, or an added token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Plain text, as a byte range of the searched string.
    Text(usize, usize),
    /// An added token and the byte range it (with stripped spaces) covers.
    Token(u32, usize, usize),
}

/// Finds added tokens in text.
#[derive(Clone, Debug, Default)]
pub(crate) struct Matcher {
    patterns: Vec<Pattern>,
    /// Which bytes start some pattern: a quick reject for the scan.
    first_byte: Vec<bool>,
}

/// `\w` as HF's `single_word` check sees it (the Rust `regex` crate's Unicode word class,
/// probed from HF into `unicode_tables::WORD`).
fn is_word_char(c: char) -> bool {
    crate::pretok::in_ranges(crate::unicode_tables::WORD, c as u32)
}

impl Matcher {
    pub(crate) fn new(patterns: Vec<Pattern>) -> Matcher {
        let patterns: Vec<Pattern> = patterns
            .into_iter()
            .filter(|p| !p.content.is_empty())
            .collect();
        let mut first_byte = vec![false; 256];
        for p in &patterns {
            first_byte[p.content.as_bytes()[0] as usize] = true;
        }
        Matcher {
            patterns,
            first_byte,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Leftmost-longest match at or after `from`: (pattern index, start, end).
    fn find(&self, text: &str, from: usize) -> Option<(usize, usize, usize)> {
        let bytes = text.as_bytes();
        for start in from..bytes.len() {
            if !self.first_byte[bytes[start] as usize] {
                continue;
            }
            let rest = &bytes[start..];
            let best = self
                .patterns
                .iter()
                .enumerate()
                .filter(|(_, p)| rest.starts_with(p.content.as_bytes()))
                // Longest wins; on equal length the first declared (aho-corasick's order).
                .min_by_key(|(k, p)| (std::cmp::Reverse(p.content.len()), *k));
            if let Some((k, p)) = best {
                return Some((k, start, start + p.content.len()));
            }
        }
        None
    }

    /// Splits `text` into plain pieces and added tokens (empty pieces dropped).
    pub(crate) fn split(&self, text: &str, out: &mut Vec<Piece>) {
        let mut start_offset = 0;
        let mut from = 0;
        while let Some((k, mat_start, mat_end)) = self.find(text, from) {
            from = mat_end;
            let p = &self.patterns[k];
            let (mut start, mut stop) = (mat_start, mat_end);
            if p.single_word {
                let start_space =
                    start == 0 || !text[..start].chars().next_back().is_some_and(is_word_char);
                let stop_space =
                    stop == text.len() || !text[stop..].chars().next().is_some_and(is_word_char);
                if !start_space || !stop_space {
                    continue;
                }
            }
            if p.lstrip {
                let trimmed = text[..start].trim_end_matches(char::is_whitespace).len();
                // Spaces an earlier match already took stay with it.
                start = trimmed.max(start_offset);
            }
            if p.rstrip {
                stop = text.len() - text[stop..].trim_start_matches(char::is_whitespace).len();
            }
            if start_offset < start {
                out.push(Piece::Text(start_offset, start));
            }
            out.push(Piece::Token(p.id, start, stop));
            start_offset = stop;
        }
        if start_offset < text.len() {
            out.push(Piece::Text(start_offset, text.len()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pat(content: &str, id: u32, lstrip: bool, rstrip: bool, single_word: bool) -> Pattern {
        Pattern {
            content: content.to_string(),
            id,
            lstrip,
            rstrip,
            single_word,
        }
    }

    fn pieces<'a>(m: &Matcher, text: &'a str) -> Vec<(Option<u32>, &'a str)> {
        let mut out = Vec::new();
        m.split(text, &mut out);
        out.into_iter()
            .map(|p| match p {
                Piece::Text(a, b) => (None, &text[a..b]),
                Piece::Token(id, a, b) => (Some(id), &text[a..b]),
            })
            .collect()
    }

    #[test]
    fn plain_matches_keep_surrounding_spaces_in_text() {
        let m = Matcher::new(vec![pat("[CLS]", 2, false, false, false)]);
        assert_eq!(
            pieces(&m, "a [CLS] b"),
            [(None, "a "), (Some(2), "[CLS]"), (None, " b")]
        );
        assert_eq!(
            pieces(&m, "[CLS][CLS]"),
            [(Some(2), "[CLS]"), (Some(2), "[CLS]")]
        );
        assert_eq!(pieces(&m, "no tokens"), [(None, "no tokens")]);
        assert_eq!(pieces(&m, ""), []);
    }

    #[test]
    fn lstrip_and_rstrip_take_whitespace() {
        let m = Matcher::new(vec![
            pat("[MASK]", 4, true, false, false),
            pat("<r>", 5, false, true, false),
        ]);
        assert_eq!(
            pieces(&m, "a \t [MASK] b"),
            [(None, "a"), (Some(4), " \t [MASK]"), (None, " b")]
        );
        assert_eq!(
            pieces(&m, "x<r>  \u{3000}y"),
            [(None, "x"), (Some(5), "<r>  \u{3000}"), (None, "y")]
        );
        // The second lstrip cannot take spaces the first rstrip already took.
        assert_eq!(
            pieces(&m, "<r>  [MASK]"),
            [(Some(5), "<r>  "), (Some(4), "[MASK]")]
        );
    }

    #[test]
    fn longest_match_wins_and_single_word_needs_boundaries() {
        let m = Matcher::new(vec![
            pat("ab", 1, false, false, false),
            pat("abc", 2, false, false, false),
        ]);
        assert_eq!(
            pieces(&m, "xabcab"),
            [(None, "x"), (Some(2), "abc"), (Some(1), "ab")]
        );
        let m = Matcher::new(vec![pat("cat", 7, false, false, true)]);
        assert_eq!(
            pieces(&m, "cat concat cat."),
            [
                (Some(7), "cat"),
                (None, " concat "),
                (Some(7), "cat"),
                (None, ".")
            ]
        );
    }
}
