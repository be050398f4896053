//! Byte-pair merging over token ids.
//!
//! HF merges the pair with the lowest rank first, the leftmost one on ties, until no adjacent
//! pair has a merge. Short words do that with a direct scan; long ones with a heap over a linked
//! list of symbols (HF's own algorithm), so a pathological megabyte "word" stays O(n log n).

use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// A multiplicative hasher for the `u64` pair keys (std's SipHash is several times slower here,
/// and the keys are not attacker-chosen in a way that matters for a local tokenizer).
#[derive(Default, Clone, Copy)]
pub(crate) struct PairHasher(u64);

impl Hasher for PairHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Pair (left id, right id) -> (rank, merged id).
pub(crate) type MergeMap = HashMap<u64, (u32, u32), BuildHasherDefault<PairHasher>>;

pub(crate) fn pair_key(a: u32, b: u32) -> u64 {
    (u64::from(a) << 32) | u64::from(b)
}

/// Words up to this many symbols use the scan (no allocation, cache friendly).
const SCAN_LIMIT: usize = 16;

/// Merges `symbols` in place.
pub(crate) fn merge(merges: &MergeMap, symbols: &mut Vec<u32>) {
    if symbols.len() <= SCAN_LIMIT {
        merge_scan(merges, symbols);
    } else {
        merge_heap(merges, symbols);
    }
}

const NO_MERGE: (u32, u32) = (u32::MAX, u32::MAX);

/// The scan: the (rank, merged id) of every adjacent pair is kept in a stack array and only the
/// pairs next to a merge are looked up again. Words longer than [`SCAN_LIMIT`] go to the heap.
pub(crate) fn merge_scan(merges: &MergeMap, symbols: &mut Vec<u32>) {
    let n = symbols.len();
    if n < 2 {
        return;
    }
    if n > SCAN_LIMIT {
        return merge_heap(merges, symbols);
    }
    let lookup = |a: u32, b: u32| merges.get(&pair_key(a, b)).copied().unwrap_or(NO_MERGE);
    let mut pairs = [NO_MERGE; SCAN_LIMIT];
    for i in 0..n - 1 {
        pairs[i] = lookup(symbols[i], symbols[i + 1]);
    }
    let mut len = n;
    loop {
        // Lowest rank, leftmost on ties.
        let mut best = 0;
        for i in 1..len - 1 {
            if pairs[i].0 < pairs[best].0 {
                best = i;
            }
        }
        let (rank, new_id) = pairs[best];
        if rank == u32::MAX {
            break;
        }
        symbols[best] = new_id;
        symbols.remove(best + 1);
        pairs.copy_within(best + 1..len - 1, best);
        len -= 1;
        if len < 2 {
            break;
        }
        if best + 1 < len {
            pairs[best] = lookup(symbols[best], symbols[best + 1]);
        }
        if best > 0 {
            pairs[best - 1] = lookup(symbols[best - 1], symbols[best]);
        }
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    // Max-heap: reverse so the lowest rank, then the leftmost position, pops first.
    rank: std::cmp::Reverse<u32>,
    pos: std::cmp::Reverse<usize>,
    new_id: u32,
}

pub(crate) fn merge_heap(merges: &MergeMap, symbols: &mut Vec<u32>) {
    let n = symbols.len();
    if n < 2 {
        return;
    }
    const NONE: usize = usize::MAX;
    let mut ids = symbols.clone();
    let mut prev: Vec<usize> = (0..n).map(|i| if i == 0 { NONE } else { i - 1 }).collect();
    let mut next: Vec<usize> = (0..n)
        .map(|i| if i + 1 < n { i + 1 } else { NONE })
        .collect();
    let mut alive = vec![true; n];
    let mut heap = BinaryHeap::new();
    let push = |heap: &mut BinaryHeap<Candidate>, ids: &[u32], pos: usize, right: usize| {
        if let Some(&(rank, new_id)) = merges.get(&pair_key(ids[pos], ids[right])) {
            heap.push(Candidate {
                rank: std::cmp::Reverse(rank),
                pos: std::cmp::Reverse(pos),
                new_id,
            });
        }
    };
    for i in 0..n.saturating_sub(1) {
        push(&mut heap, &ids, i, i + 1);
    }
    while let Some(top) = heap.pop() {
        let pos = top.pos.0;
        let right = next[pos];
        // Stale: the left symbol was merged away, or the pair changed since it was pushed.
        if !alive[pos] || right == NONE {
            continue;
        }
        match merges.get(&pair_key(ids[pos], ids[right])) {
            Some(&(rank, new_id)) if rank == top.rank.0 && new_id == top.new_id => {}
            _ => continue,
        }
        ids[pos] = top.new_id;
        alive[right] = false;
        let after = next[right];
        next[pos] = after;
        if after != NONE {
            prev[after] = pos;
            push(&mut heap, &ids, pos, after);
        }
        if prev[pos] != NONE {
            push(&mut heap, &ids, prev[pos], pos);
        }
    }
    symbols.clear();
    let mut i = 0;
    while i != NONE {
        symbols.push(ids[i]);
        i = next[i];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(list: &[(u32, u32, u32)]) -> MergeMap {
        list.iter()
            .enumerate()
            .map(|(rank, &(a, b, c))| (pair_key(a, b), (rank as u32, c)))
            .collect()
    }

    #[test]
    fn lowest_rank_first_then_leftmost() {
        // 1 2 -> 10 (rank 0), 2 3 -> 11 (rank 1), 10 3 -> 12 (rank 2), 1 1 -> 13 (rank 3)
        let m = map(&[(1, 2, 10), (2, 3, 11), (10, 3, 12), (1, 1, 13)]);
        for f in [merge_scan, merge_heap] {
            let mut s = vec![1, 2, 3];
            f(&m, &mut s);
            assert_eq!(s, [12]);
            let mut s = vec![1, 1, 1];
            f(&m, &mut s);
            assert_eq!(s, [13, 1]);
            let mut s = vec![3, 2];
            f(&m, &mut s);
            assert_eq!(s, [3, 2]);
        }
    }

    #[test]
    fn scan_and_heap_agree_on_pseudo_random_words() {
        // A small dense merge table over 6 base symbols.
        let mut list = Vec::new();
        let mut next_id = 100;
        let mut seed = 12345u64;
        let mut rnd = |k: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % k
        };
        let mut ids: Vec<u32> = (0..6).collect();
        for _ in 0..60 {
            let a = ids[rnd(ids.len() as u64) as usize];
            let b = ids[rnd(ids.len() as u64) as usize];
            if list.iter().any(|&(x, y, _)| (x, y) == (a, b)) {
                continue;
            }
            list.push((a, b, next_id));
            ids.push(next_id);
            next_id += 1;
        }
        let m = map(&list);
        for len in 0..200 {
            let word: Vec<u32> = (0..len).map(|_| rnd(6) as u32).collect();
            let (mut a, mut b) = (word.clone(), word.clone());
            merge_scan(&m, &mut a);
            merge_heap(&m, &mut b);
            assert_eq!(a, b, "word {word:?}");
        }
    }
}
