//! The ByteLevel pre-tokenizer: the GPT-2 split regex written out by hand, and the byte-to-char
//! alphabet of byte-level BPE.
//!
//! The regex HF uses is
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
//! (Oniguruma, first alternative that matches wins). Its character classes come from
//! `unicode_tables.rs`, probed from HF `tokenizers` itself.

use crate::unicode_tables::{LETTER, NUMBER, WHITE_SPACE};

/// The class of one character as the split regex sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// `\p{L}`
    Letter,
    /// `\p{N}`
    Number,
    /// `\s`
    Space,
    /// Anything else: `[^\s\p{L}\p{N}]`.
    Other,
}

pub(crate) fn in_ranges(ranges: &[(u32, u32)], cp: u32) -> bool {
    ranges
        .binary_search_by(|&(lo, hi)| {
            if hi < cp {
                std::cmp::Ordering::Less
            } else if lo > cp {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// ASCII classes, precomputed so the common case is one table load.
const ASCII_CLASS: [Class; 128] = {
    let mut table = [Class::Other; 128];
    let mut i = 0;
    while i < 128 {
        let b = i as u8;
        table[i] = if b.is_ascii_alphabetic() {
            Class::Letter
        } else if b.is_ascii_digit() {
            Class::Number
        } else if (b >= 0x09 && b <= 0x0d) || b == b' ' {
            Class::Space
        } else {
            Class::Other
        };
        i += 1;
    }
    table
};

/// Classifies one character.
pub(crate) fn class_of(c: char) -> Class {
    let cp = c as u32;
    if cp < 128 {
        return ASCII_CLASS[cp as usize];
    }
    if in_ranges(LETTER, cp) {
        Class::Letter
    } else if in_ranges(NUMBER, cp) {
        Class::Number
    } else if in_ranges(WHITE_SPACE, cp) {
        Class::Space
    } else {
        Class::Other
    }
}

/// Byte offset where the run of `class` characters starting at byte `pos` ends.
fn run_end(text: &str, pos: usize, class: Class) -> usize {
    let bytes = text.as_bytes();
    let mut end = pos;
    // ASCII bytes are classified straight from the table; others decode one char.
    while end < bytes.len() {
        let b = bytes[end];
        if b < 0x80 {
            if ASCII_CLASS[b as usize] != class {
                break;
            }
            end += 1;
        } else {
            let Some(c) = text[end..].chars().next() else {
                break;
            };
            if class_of(c) != class {
                break;
            }
            end += c.len_utf8();
        }
    }
    end
}

/// Splits `text` the way the GPT-2 regex does (every byte lands in exactly one piece), calling
/// `emit` with each piece in order.
pub(crate) fn split_gpt2<'t>(text: &'t str, mut emit: impl FnMut(&'t str)) {
    let bytes = text.as_bytes();
    let mut pos = 0;
    while let Some(c) = text[pos..].chars().next() {
        let end = 'matched: {
            // 's|'t|'re|'ve|'m|'ll|'d (ASCII, so plain byte tests suffice)
            if c == '\'' {
                match (bytes.get(pos + 1), bytes.get(pos + 2)) {
                    (Some(b's' | b't' | b'm' | b'd'), _) => break 'matched pos + 2,
                    (Some(b'r'), Some(b'e'))
                    | (Some(b'v'), Some(b'e'))
                    | (Some(b'l'), Some(b'l')) => break 'matched pos + 3,
                    _ => {}
                }
            }
            // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional U+0020 then a run.
            let (start, class) = match text[pos + c.len_utf8()..].chars().next() {
                Some(next) if c == ' ' && class_of(next) != Class::Space => {
                    (pos + 1, class_of(next))
                }
                _ => (pos, class_of(c)),
            };
            if class != Class::Space {
                break 'matched run_end(text, start, class);
            }
            // `\s+(?!\S)` then `\s+`: a whitespace run followed by a non-space gives back its
            // last char (which then prefixes the next word), unless that would leave nothing.
            let ws_end = run_end(text, pos, Class::Space);
            let last_len = text[..ws_end].chars().next_back().map_or(0, char::len_utf8);
            if ws_end == text.len() || ws_end - last_len == pos {
                ws_end
            } else {
                ws_end - last_len
            }
        };
        emit(&text[pos..end]);
        pos = end;
    }
}

/// The GPT-2 byte-to-char table: printable Latin-1 bytes map to themselves, the other 68
/// bytes to U+0100.. in byte order.
pub(crate) const fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut extra = 0u32;
    let mut b = 0usize;
    while b < 256 {
        let printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        let cp = if printable {
            b as u32
        } else {
            extra += 1;
            255 + extra
        };
        table[b] = match char::from_u32(cp) {
            Some(c) => c,
            None => '\0', // unreachable: every value above is below U+0200
        };
        b += 1;
    }
    table
}

/// Byte -> byte-level char.
pub(crate) const BYTE_TO_CHAR: [char; 256] = byte_to_char_table();

/// Byte-level char -> byte, for chars below U+0144 (-1: not a byte-level char).
const CHAR_TO_BYTE: [i16; 0x144] = {
    let mut table = [-1i16; 0x144];
    let mut b = 0usize;
    while b < 256 {
        table[BYTE_TO_CHAR[b] as usize] = b as i16;
        b += 1;
    }
    table
};

/// Byte-level char -> byte (the inverse of [`BYTE_TO_CHAR`]).
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let b = *CHAR_TO_BYTE.get(c as usize)?;
    u8::try_from(b).ok()
}

/// Maps bytes to their byte-level string (what the vocab stores).
pub(crate) fn bytes_to_level_string(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| BYTE_TO_CHAR[b as usize]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        split_gpt2(text, |p| out.push(p));
        out
    }

    #[test]
    fn splits_words_numbers_punctuation_and_contractions() {
        assert_eq!(
            split("Hello world, it's 2024!!"),
            ["Hello", " world", ",", " it", "'s", " 2024", "!!"]
        );
        assert_eq!(
            split("we'll they're I've I'm he'd"),
            ["we", "'ll", " they", "'re", " I", "'ve", " I", "'m", " he", "'d"]
        );
        // Contractions are case-sensitive; `'S` falls to the punctuation branch.
        assert_eq!(split("IT'S"), ["IT", "'", "S"]);
        // A punctuation run swallows an apostrophe that a contraction cannot take.
        assert_eq!(split("!!'s"), ["!!'", "s"]);
    }

    #[test]
    fn whitespace_runs_give_back_their_last_char() {
        assert_eq!(split("a  b"), ["a", " ", " b"]);
        assert_eq!(split("a   b"), ["a", "  ", " b"]);
        assert_eq!(split("a \tb"), ["a", " ", "\t", "b"]);
        assert_eq!(split("a\tb"), ["a", "\t", "b"]);
        assert_eq!(split("a  "), ["a", "  "]);
        assert_eq!(split("  "), ["  "]);
        assert_eq!(split("a\r\n b"), ["a", "\r\n", " b"]);
        // U+00A0 and U+3000 are \s; the optional prefix is only U+0020.
        assert_eq!(split("a\u{a0}b"), ["a", "\u{a0}", "b"]);
        assert_eq!(
            split("a\u{3000}\u{3000}b"),
            ["a", "\u{3000}", "\u{3000}", "b"]
        );
        assert_eq!(split(""), Vec::<&str>::new());
    }

    #[test]
    fn unicode_classes_follow_the_reference_regex() {
        assert_eq!(class_of('é'), Class::Letter);
        assert_eq!(class_of('中'), Class::Letter);
        assert_eq!(class_of('٣'), Class::Number);
        assert_eq!(class_of('½'), Class::Number);
        assert_eq!(class_of('\u{301}'), Class::Other); // combining mark: not \p{L}
        assert_eq!(class_of('\u{1c}'), Class::Other); // Python calls it space, Oniguruma not
        assert_eq!(class_of('\u{85}'), Class::Space);
        assert_eq!(class_of('😀'), Class::Other);
        assert_eq!(split("e\u{301}t\u{e9}"), ["e", "\u{301}", "t\u{e9}"]);
    }

    #[test]
    fn generated_tables_are_sorted_disjoint_ranges() {
        use crate::unicode_tables::*;
        for table in [
            LETTER,
            NUMBER,
            WHITE_SPACE,
            NFC_DECOMPOSABLE,
            NFC_NONZERO_CCC,
            WORD,
        ] {
            for w in table.windows(2) {
                assert!(w[0].0 <= w[0].1 && w[0].1 < w[1].0, "{w:?}");
            }
        }
        assert!(in_ranges(WORD, '_' as u32) && !in_ranges(WORD, '\u{bd}' as u32));
    }

    #[test]
    fn byte_level_alphabet_is_gpt2s() {
        assert_eq!(BYTE_TO_CHAR[b' ' as usize], 'Ġ');
        assert_eq!(BYTE_TO_CHAR[b'\n' as usize], 'Ċ');
        assert_eq!(BYTE_TO_CHAR[b'!' as usize], '!');
        assert_eq!(BYTE_TO_CHAR[0], 'Ā');
        assert_eq!(BYTE_TO_CHAR[0xad], 'Ń');
        assert_eq!(BYTE_TO_CHAR[0xe9], 'é');
        let mut seen = std::collections::HashSet::new();
        for b in 0..=255u8 {
            let c = BYTE_TO_CHAR[b as usize];
            assert!(seen.insert(c), "duplicate char for byte {b}");
            assert_eq!(char_to_byte(c), Some(b));
        }
        assert_eq!(char_to_byte('\u{121}'), Some(0x7f));
        assert_eq!(char_to_byte('\u{144}'), None);
        assert_eq!(char_to_byte(' '), None);
        assert_eq!(bytes_to_level_string("é ".as_bytes()), "Ã©Ġ");
    }
}
