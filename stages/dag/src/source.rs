//! The text a graph was declared in, so that errors can say `FILE:LINE:COL`.
//!
//! Node specs carry byte spans into this text; the engine never parses it.

use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::error::DagError;

/// A declaration file (its name as the user gave it, and its text).
#[derive(Debug, Clone, Default)]
pub struct Source {
    /// The file as given (used in messages).
    pub file: PathBuf,
    /// Its text, for turning spans into line:column.
    pub text: String,
}

impl Source {
    /// A source named `file` with contents `text`.
    pub fn new(file: &Path, text: &str) -> Source {
        Source {
            file: file.to_path_buf(),
            text: text.to_string(),
        }
    }

    /// An error located at `span` (a byte range of [`Source::text`]).
    pub fn error_at(&self, span: Range<usize>, message: impl Into<String>) -> DagError {
        let (line, col) = line_col(&self.text, span.start);
        DagError::Located {
            file: self.file.clone(),
            line,
            col,
            message: message.into(),
        }
    }

    /// An error about the file as a whole (a cycle spans several places).
    pub fn error(&self, message: impl Into<String>) -> DagError {
        DagError::Unlocated {
            file: self.file.clone(),
            message: message.into(),
        }
    }
}

/// A value with the byte span it was declared at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located<T> {
    /// The value.
    pub value: T,
    /// Where it was written.
    pub span: Range<usize>,
}

impl<T> Located<T> {
    /// `value` declared at `span`.
    pub fn new(value: T, span: Range<usize>) -> Located<T> {
        Located { value, span }
    }
}

/// 1-based line and column (in characters) of byte offset `pos`.
pub fn line_col(source: &str, pos: usize) -> (usize, usize) {
    let mut pos = pos.min(source.len());
    while !source.is_char_boundary(pos) {
        pos -= 1;
    }
    let before = &source[..pos];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, col)
}

/// " (did you mean `x`?)" when one candidate is close to `word`, else "".
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    let best = candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3) && *d < c.len().max(word.len()))
        .min();
    match best {
        Some((_, c)) => format!(" (did you mean `{c}`?)"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters() {
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("é\nx", 3), (2, 1));
        assert_eq!(line_col("abc", 99), (1, 4));
    }

    #[test]
    fn did_you_mean_picks_the_close_one() {
        assert_eq!(
            did_you_mean("alpah", ["alpha", "beta"]),
            " (did you mean `alpha`?)"
        );
        assert_eq!(did_you_mean("zzz", ["alpha"]), "");
    }
}
