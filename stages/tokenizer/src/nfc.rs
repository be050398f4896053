//! NFC exactly as HF `tokenizers` computes it.
//!
//! HF normalizes with `unicode-normalization-alignments`, whose tables predate Unicode 11: it
//! neither decomposes, reorders nor composes characters added since. We run the same algorithm
//! (canonical decomposition, stable reordering of combining-mark runs, canonical composition)
//! on the `unicode-normalization` crate's data, restricted to the characters HF knows
//! (`NFC_DECOMPOSABLE`, `NFC_NONZERO_CCC`, probed from HF by `tests/gen_unicode_tables.py`).
//! The code-point sweep in `tests/hf_parity.rs` checks the result against HF.

use std::borrow::Cow;

use unicode_normalization::char::{canonical_combining_class, compose, decompose_canonical};
use unicode_normalization::{is_nfc_quick, IsNormalized};

use crate::pretok::in_ranges;
use crate::unicode_tables::{NFC_DECOMPOSABLE, NFC_NONZERO_CCC};

fn is_hangul_syllable(c: char) -> bool {
    ('\u{ac00}'..='\u{d7a3}').contains(&c)
}

/// Whether HF's tables know a canonical decomposition of `c`.
fn hf_decomposes(c: char) -> bool {
    is_hangul_syllable(c) || in_ranges(NFC_DECOMPOSABLE, c as u32)
}

/// The canonical combining class HF's tables give `c` (0 for characters they do not know).
fn hf_ccc(c: char) -> u8 {
    if (c as u32) < 0x300 || !in_ranges(NFC_NONZERO_CCC, c as u32) {
        0
    } else {
        canonical_combining_class(c)
    }
}

/// The primary composite of `a` and `b`, if HF's tables know it.
fn hf_compose(a: char, b: char) -> Option<char> {
    compose(a, b).filter(|&r| hf_decomposes(r))
}

/// NFC of `text` as HF computes it; borrows when nothing changes.
pub(crate) fn nfc(text: &str) -> Cow<'_, str> {
    // Text that is NFC by the crate's newer data is NFC for HF too: HF's rules reorder and
    // compose strictly less (unknown characters count as plain starters).
    if text.is_ascii() || is_nfc_quick(text.chars()) == IsNormalized::Yes {
        return Cow::Borrowed(text);
    }
    Cow::Owned(nfc_slow(text))
}

fn nfc_slow(text: &str) -> String {
    // 1. Canonical decomposition, then stable sort of each run of non-starters by class.
    let mut decomposed: Vec<(u8, char)> = Vec::with_capacity(text.len());
    for c in text.chars() {
        if hf_decomposes(c) {
            decompose_canonical(c, |d| decomposed.push((hf_ccc(d), d)));
        } else {
            decomposed.push((hf_ccc(c), c));
        }
    }
    let mut i = 0;
    while i < decomposed.len() {
        if decomposed[i].0 == 0 {
            i += 1;
            continue;
        }
        let start = i;
        while i < decomposed.len() && decomposed[i].0 != 0 {
            i += 1;
        }
        decomposed[start..i].sort_by_key(|&(class, _)| class);
    }

    // 2. Canonical composition (the `Recompositions` state machine of the crate HF uses).
    let mut out = String::with_capacity(text.len());
    let mut composee: Option<char> = None;
    let mut last_ccc: Option<u8> = None;
    let mut pending: Vec<char> = Vec::new();
    for (class, ch) in decomposed {
        let Some(k) = composee else {
            if class == 0 {
                composee = Some(ch);
            } else {
                out.push(ch);
            }
            continue;
        };
        match last_ccc {
            None => match hf_compose(k, ch) {
                Some(r) => composee = Some(r),
                None if class == 0 => {
                    out.push(k);
                    composee = Some(ch);
                }
                None => {
                    pending.push(ch);
                    last_ccc = Some(class);
                }
            },
            Some(last) if last >= class => {
                // `ch` is blocked from the composee.
                if class == 0 {
                    out.push(k);
                    out.extend(pending.drain(..));
                    composee = Some(ch);
                    last_ccc = None;
                } else {
                    pending.push(ch);
                    last_ccc = Some(class);
                }
            }
            Some(_) => match hf_compose(k, ch) {
                Some(r) => composee = Some(r),
                None => {
                    pending.push(ch);
                    last_ccc = Some(class);
                }
            },
        }
    }
    if let Some(k) = composee {
        out.push(k);
    }
    out.extend(pending);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composes_reorders_and_borrows() {
        assert!(matches!(nfc("plain ascii"), Cow::Borrowed(_)));
        assert!(matches!(nfc("déjà"), Cow::Borrowed(_)));
        assert_eq!(nfc("de\u{301}ja\u{300}"), "déjà");
        assert_eq!(nfc("a\u{316}\u{301}"), "\u{e1}\u{316}");
        assert_eq!(nfc("a\u{301}\u{316}"), "\u{e1}\u{316}");
        assert_eq!(nfc("\u{1100}\u{1161}\u{11a8}"), "\u{ac01}");
        assert_eq!(nfc("\u{212b}"), "\u{c5}"); // singleton decomposition
        assert_eq!(nfc("\u{301}a"), "\u{301}a"); // a leading mark stays
                                                 // A mark newer than HF's tables is a plain starter for HF: no reordering around it.
        assert_eq!(nfc("a\u{1abf}\u{316}"), "a\u{1abf}\u{316}");
    }

    #[test]
    fn tables_agree_with_the_crate_data() {
        for &(lo, hi) in NFC_NONZERO_CCC {
            for cp in lo..=hi {
                if let Some(c) = char::from_u32(cp) {
                    assert_ne!(canonical_combining_class(c), 0, "U+{cp:04X}");
                }
            }
        }
        for &(lo, hi) in NFC_DECOMPOSABLE {
            for cp in lo..=hi {
                if let Some(c) = char::from_u32(cp) {
                    let mut parts = String::new();
                    decompose_canonical(c, |d| parts.push(d));
                    assert_ne!(parts, c.to_string(), "U+{cp:04X}");
                }
            }
        }
    }
}
