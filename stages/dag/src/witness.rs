//! What a build's dirty check looked at, path by path, as it found it: the entries of the
//! no-op proof ([`crate::noop`]). The [`crate::scan::Scanner`] collects them while it checks,
//! each stat taken before what it vouches for was read (hashed, listed); the proof encodes
//! them and the next plain build compares them with the disk.

use std::borrow::Cow;
use std::cell::Cell;
use std::path::Path;

use crate::codec::{Reader, Writer};
use crate::key::Digest;
use crate::statcache::{is_racy, now_ns, FileStat};

/// Below this many entries a proof is one part, checked on one thread.
pub(crate) const PARALLEL_MIN: usize = 512;

/// What a build found at one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// A regular file whose stat alone vouches for its content.
    Settled(FileStat),
    /// A regular file modified within the racy window: its content is hashed again.
    Fresh(FileStat, Digest),
    /// A folder whose entries were listed.
    Listed {
        ino: u64,
        mtime_ns: i64,
        ctime_ns: i64,
    },
    /// A folder on the way to another path.
    Folder { ino: u64 },
    /// Nothing.
    Missing,
    /// A state file, exactly as it was.
    Exact(FileStat),
}

/// Whether a file with stat `st`, looked at no earlier than `now`, may still change without
/// a new stat (the stat cache's rule).
pub(crate) fn racy(st: &FileStat, now: i64) -> bool {
    is_racy(st.mtime_ns, now)
}

/// The paths a build looked at, as it found them; collected by the [`crate::scan::Scanner`]
/// while it checks, each stat taken before what it vouches for was read.
#[derive(Debug)]
pub struct Witness<'a> {
    /// In the order seen; a later look at a path replaces an earlier one.
    seen: Vec<(Cow<'a, str>, Seen)>,
    /// Something was looked at that a stat cannot vouch for (a symlinked source, a folder
    /// listed within its racy window, a check that failed): no proof from this build.
    spoiled: bool,
    /// When the collection began: every stat is taken after it, so a file older than the
    /// racy window then is older at its stat too.
    since: i64,
    /// Where the second look (at what the build wrote) began.
    second: Option<usize>,
    /// What the proof the build started from says of the paths it did not look at.
    carried: Option<Carried<'a>>,
}

/// The entries a build carries over from the proof it started from, still encoded
/// ([`crate::noop::Edited`]): every path it did not look at again stands as that proof found
/// it. An entry is dropped when its path is one of `dropped` (the edited files), or the build
/// looked at the path, or it is a folder on the way that the new proof records anew.
#[derive(Debug)]
pub(crate) struct Carried<'a> {
    /// The proof's parts of workspace paths (not the state files').
    pub(crate) parts: Vec<&'a [u8]>,
    pub(crate) dropped: std::collections::HashSet<&'a str>,
}

impl<'a> Carried<'a> {
    /// How many entries the parts hold, dropped ones included; `None` when one is damaged.
    fn len(&self) -> Option<usize> {
        self.parts
            .iter()
            .map(|part| Reader::new(part).count(5))
            .sum()
    }

    /// Every entry, in order, counted in `decoded` (a damaged part ends early: fewer than
    /// [`Carried::len`]).
    fn entries<'c>(
        &'c self,
        decoded: &'c Cell<usize>,
    ) -> impl Iterator<Item = (&'a str, Seen)> + 'c {
        self.parts.iter().flat_map(move |part| {
            let mut r = Reader::new(part);
            let n = r.count(5).unwrap_or(0);
            (0..n).map_while(move |_| {
                let entry = decode_entry(&mut r)?;
                decoded.set(decoded.get() + 1);
                Some(entry)
            })
        })
    }
}

impl<'a> Witness<'a> {
    /// Room for `n` paths (a build looks at each output once, and at a few more).
    pub(crate) fn with_capacity(n: usize) -> Witness<'a> {
        Witness {
            seen: Vec::with_capacity(n),
            spoiled: false,
            since: now_ns(),
            second: None,
            carried: None,
        }
    }

    /// What follows is a second look at paths the build wrote since it first looked: it
    /// replaces the first.
    pub(crate) fn look_again(&mut self) {
        self.second = Some(self.seen.len());
    }

    /// Record that the file `rel`, found with stat `st`, has content `digest`.
    pub(crate) fn see_file(&mut self, rel: Cow<'a, str>, st: FileStat, digest: Digest) {
        let seen = if racy(&st, self.since) {
            Seen::Fresh(st, digest)
        } else {
            Seen::Settled(st)
        };
        self.seen.push((rel, seen));
    }

    /// Carry over `carried`, a proof's entries for the paths this build did not look at.
    pub(crate) fn carry(&mut self, carried: Carried<'a>) {
        self.carried = Some(carried);
    }

    /// No proof can come of this build.
    pub(crate) fn spoil(&mut self) {
        self.spoiled = true;
    }

    /// Whether no proof can come of this build.
    pub(crate) fn is_spoiled(&self) -> bool {
        self.spoiled
    }

    /// Record the folder `rel` of `root` before its entries are listed; spoiled when it is
    /// not a folder or changed within the racy window.
    pub(crate) fn see_listed(&mut self, root: &Path, rel: &str) {
        match std::fs::symlink_metadata(root.join(rel)) {
            Ok(md) if md.is_dir() => {
                let st = FileStat::of(&md);
                if is_racy(st.ctime_ns, now_ns()) {
                    self.spoil();
                } else {
                    self.seen.push((
                        Cow::Owned(rel.to_string()),
                        Seen::Listed {
                            ino: st.ino,
                            mtime_ns: st.mtime_ns,
                            ctime_ns: st.ctime_ns,
                        },
                    ));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.seen.push((Cow::Owned(rel.to_string()), Seen::Missing))
            }
            _ => self.spoil(),
        }
    }

    /// Record every folder under `rel` (itself included) before they are listed.
    pub(crate) fn see_tree(&mut self, root: &Path, rel: &str) {
        for e in walkdir::WalkDir::new(root.join(rel)).follow_links(false) {
            match e {
                Ok(e) if e.file_type().is_dir() => {
                    match e.path().strip_prefix(root).ok().and_then(Path::to_str) {
                        Some(p) => self.see_listed(root, p),
                        None => self.spoil(),
                    }
                }
                Ok(_) => {}
                Err(_) => self.spoil(),
            }
        }
    }

    /// Encode into `w` the entries, one per path (the last look at each), then every folder
    /// on the way to them as it is now, in parts; `false` when spoiled.
    pub(crate) fn finish(self, root: &Path, w: &mut Writer) -> bool {
        if self.spoiled {
            return false;
        }
        // A path looked at twice in the first look is checked twice (two stats of one file
        // that disagree are a change either way); one looked at again stands as last seen.
        let hasher = foldhash::fast::RandomState::default;
        let second = self.second.unwrap_or(self.seen.len());
        let again: std::collections::HashSet<&str, foldhash::fast::RandomState> = self.seen
            [second..]
            .iter()
            .map(|(p, _)| p.as_ref())
            .collect();
        let kept = |i: usize, p: &str| i >= second || !again.contains(p);
        let mut looked = std::collections::HashSet::with_hasher(hasher());
        looked.extend(
            self.seen
                .iter()
                .filter(|(_, s)| matches!(s, Seen::Listed { .. }))
                .map(|(p, _)| p.as_ref()),
        );
        let mut folders: Vec<(&str, Seen)> = Vec::new();
        let mut on_way = std::collections::HashSet::with_hasher(hasher());
        let mut last_parent = None;
        for (rel, _) in &self.seen {
            let mut at: &str = rel;
            while let Some((parent, _)) = at.rsplit_once('/') {
                // Most paths share their folder with the one before.
                if last_parent == Some(parent) || !on_way.insert(parent) {
                    break;
                }
                if !looked.contains(parent) {
                    let seen = match std::fs::symlink_metadata(root.join(parent)) {
                        Ok(md) if md.is_dir() => Seen::Folder {
                            ino: FileStat::of(&md).ino,
                        },
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Seen::Missing,
                        _ => return false,
                    };
                    folders.push((parent, seen));
                }
                at = parent;
            }
            last_parent = rel.rsplit_once('/').map(|(p, _)| p);
        }
        // Carried entries go first: the proof's sources come first in it.
        // (Only a build that carries entries needs the sets.)
        let (mut seen_now, mut folders_now) = (
            std::collections::HashSet::with_hasher(hasher()),
            std::collections::HashSet::with_hasher(hasher()),
        );
        if self.carried.is_some() {
            seen_now.extend(self.seen.iter().map(|(p, _)| p.as_ref()));
            folders_now.extend(folders.iter().map(|(p, _)| *p));
        }
        let keep_carried = |p: &str, seen: &Seen| {
            let looked_again = seen_now.contains(p)
                || (matches!(seen, Seen::Folder { .. }) && folders_now.contains(p));
            let dropped = self.carried.as_ref().is_some_and(|c| c.dropped.contains(p));
            !looked_again && !dropped
        };
        let carried_n = match self.carried.as_ref().map(Carried::len) {
            Some(Some(n)) => n,
            Some(None) => return false,
            None => 0,
        };
        let decoded = Cell::new(0);
        let entries = self
            .carried
            .iter()
            .flat_map(|c| c.entries(&decoded))
            .filter(|(p, seen)| keep_carried(p, seen))
            .chain(
                self.seen
                    .iter()
                    .enumerate()
                    .filter(|(i, (p, _))| kept(*i, p))
                    .map(|(_, (p, s))| (p.as_ref(), *s)),
            )
            .chain(folders.iter().map(|(p, s)| (*p, *s)));
        // At most this many: a carried entry dropped only shortens the last part.
        let n = carried_n
            + self
                .seen
                .iter()
                .enumerate()
                .filter(|(i, (p, _))| kept(*i, p))
                .count()
            + folders.len();
        // A settled file's entry is its path and about 40 bytes.
        w.buf.reserve(n * 64);
        let parts = if n >= PARALLEL_MIN { 2 } else { 1 };
        let per = n.div_ceil(parts).max(1);
        let mut entries = entries.peekable();
        while entries.peek().is_some() {
            encode_part(w, entries.by_ref().take(per));
        }
        // Every carried entry was read: a proof that lost one would not cover its path.
        decoded.get() == carried_n
    }
}

/// One part: its length in bytes, then the entry count and the entries (written in place,
/// the two counts filled in after).
pub(crate) fn encode_part<'e>(w: &mut Writer, entries: impl Iterator<Item = (&'e str, Seen)>) {
    let at = w.buf.len();
    w.len(0);
    w.len(0);
    let mut n = 0;
    for (p, seen) in entries {
        encode_entry(w, p, &seen);
        n += 1;
    }
    let bytes = w.buf.len() - at - 4;
    let mut counts = Writer::default();
    counts.len(bytes);
    counts.len(n);
    w.buf[at..at + 8].copy_from_slice(&counts.buf);
}

fn encode_stat(w: &mut Writer, st: &FileStat) {
    w.u64(st.size);
    w.u64(st.mtime_ns as u64);
    w.u64(st.ctime_ns as u64);
    w.u64(st.ino);
    w.bool(st.exec);
}

fn encode_entry(w: &mut Writer, path: &str, seen: &Seen) {
    w.str(path);
    match seen {
        Seen::Settled(st) => {
            w.u8(0);
            encode_stat(w, st);
        }
        Seen::Fresh(st, digest) => {
            w.u8(1);
            encode_stat(w, st);
            w.digest(digest);
        }
        Seen::Listed {
            ino,
            mtime_ns,
            ctime_ns,
        } => {
            w.u8(2);
            w.u64(*ino);
            w.u64(*mtime_ns as u64);
            w.u64(*ctime_ns as u64);
        }
        Seen::Folder { ino } => {
            w.u8(3);
            w.u64(*ino);
        }
        Seen::Missing => w.u8(4),
        Seen::Exact(st) => {
            w.u8(5);
            encode_stat(w, st);
        }
    }
}

fn decode_stat(r: &mut Reader) -> Option<FileStat> {
    Some(FileStat {
        size: r.u64()?,
        mtime_ns: r.u64()? as i64,
        ctime_ns: r.u64()? as i64,
        ino: r.u64()?,
        exec: r.bool()?,
    })
}

pub(crate) fn decode_entry<'b>(r: &mut Reader<'b>) -> Option<(&'b str, Seen)> {
    let path = r.str()?;
    let seen = match r.u8()? {
        0 => Seen::Settled(decode_stat(r)?),
        1 => Seen::Fresh(decode_stat(r)?, r.digest()?),
        2 => Seen::Listed {
            ino: r.u64()?,
            mtime_ns: r.u64()? as i64,
            ctime_ns: r.u64()? as i64,
        },
        3 => Seen::Folder { ino: r.u64()? },
        4 => Seen::Missing,
        5 => Seen::Exact(decode_stat(r)?),
        _ => return None,
    };
    Some((path, seen))
}
