//! The last build record (`last-build.bin`, `last-build.log`, `materials.log`): its binary
//! codec, the change log over a base, and the key materials (formats: [`crate::state`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::StatePaths;
use crate::codec::{frame, unframe, Reader, Writer};
use crate::key::{Digest, KeyMaterial};
use crate::store::OutputRecord;

const MAGIC: &[u8; 8] = b"SKYLAST1";
const DELTA_MAGIC: &[u8; 8] = b"SKYLDLT1";

/// Where a node's key material is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Material {
    /// Not recorded.
    None,
    /// Recorded by this build, not saved yet.
    New(Box<str>),
    /// In `materials.log`: offset, length, first 16 bytes of the blake3 of those bytes.
    Stored {
        offset: u64,
        len: u32,
        check: [u8; 16],
    },
}

/// The last recorded state of one node.
#[derive(Clone, Debug)]
pub struct NodeState {
    /// Its key.
    pub key: Digest,
    /// Its outputs.
    pub outputs: Vec<OutputRecord>,
    /// What the key was computed from ([`LastBuild::material`] reads it).
    material: Material,
}

impl NodeState {
    /// The state of a node built with `material` (whose key is `key`).
    pub fn new(key: Digest, material: &KeyMaterial, outputs: Vec<OutputRecord>) -> NodeState {
        NodeState {
            key,
            // Serializing strings and digests cannot fail; without it, the worst case is a
            // vaguer reason on the next rebuild.
            material: serde_json::to_string(material)
                .map_or(Material::None, |t| Material::New(t.into())),
            outputs,
        }
    }
}

/// One file of the release tree as last written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseFile {
    /// Path inside the release directory.
    pub to: String,
    /// Content (a file digest, or a tree digest for a directory).
    pub digest: Digest,
    /// Whether it is a directory.
    pub dir: bool,
    /// Executable bit.
    pub exec: bool,
}

/// Which store a full build last recorded every node's result in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreStamp {
    /// The store directory (absolute).
    pub dir: String,
    /// Its generation id ([`crate::store::Store::id`]).
    pub id: String,
}

/// Everything the last build recorded.
#[derive(Clone, Debug, Default)]
pub struct LastBuild {
    /// Per node id.
    pub nodes: BTreeMap<String, NodeState>,
    /// The release tree, or `None` if no build wrote one.
    pub release: Option<Vec<ReleaseFile>>,
    /// Where it was written (workspace path of the release directory); `None` when not
    /// recorded (a record written before this was kept).
    pub release_dir: Option<String>,
    /// The store holding an action record for every node above; a build with another store
    /// (`--store`, or one emptied or collected since) stores what that one lacks.
    pub store: Option<StoreStamp>,
    /// Output paths of nodes that ran here and failed: files the engine made without
    /// recording them (a declared output found on disk that is neither recorded nor listed
    /// here was not made by the engine, and is never deleted).
    pub made: std::collections::BTreeSet<String>,
    /// The `materials.log` the stored materials are in.
    materials: Option<PathBuf>,
    /// Where this record was loaded from (for [`LastBuild::save_changes`]).
    loaded: Option<Loaded>,
}

/// A material's check value: the first 16 bytes of its blake3.
fn check_of(bytes: &[u8]) -> [u8; 16] {
    let mut c = [0; 16];
    c.copy_from_slice(&blake3::hash(bytes).as_bytes()[..16]);
    c
}

/// Where a record was loaded from: the base file's identity (the first 16 bytes of its
/// frame's blake3), its size, and how many bytes of the change log were applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loaded {
    base_id: [u8; 16],
    base_len: u64,
    log_len: u64,
}

fn write_head(w: &mut Writer, last: &LastBuild) {
    match &last.store {
        None => w.u8(0),
        Some(s) => {
            w.u8(1);
            w.str(&s.dir);
            w.str(&s.id);
        }
    }
    match (&last.release, &last.release_dir) {
        (None, _) => w.u8(0),
        (Some(files), dir) => {
            // Tag 2 carries the folder; tag 1 (no folder) is only read.
            w.u8(2);
            w.str(dir.as_deref().unwrap_or_default());
            w.len(files.len());
            for f in files {
                w.str(&f.to);
                w.digest(&f.digest);
                w.bool(f.dir);
                w.bool(f.exec);
            }
        }
    }
    w.len(last.made.len());
    for m in &last.made {
        w.str(m);
    }
}

/// The store stamp, the release tree and its folder, and `made` (see [`write_head`]).
type Head = (
    Option<StoreStamp>,
    Option<Vec<ReleaseFile>>,
    Option<String>,
    std::collections::BTreeSet<String>,
);

fn read_head(r: &mut Reader) -> Option<Head> {
    let store = match r.u8()? {
        0 => None,
        1 => Some(StoreStamp {
            dir: r.str()?.to_string(),
            id: r.str()?.to_string(),
        }),
        _ => return None,
    };
    let mut release_dir = None;
    let release = match r.u8()? {
        0 => None,
        tag @ (1 | 2) => {
            if tag == 2 {
                release_dir = Some(r.str()?.to_string()).filter(|d| !d.is_empty());
            }
            let n = r.count(38)?;
            let mut files = Vec::with_capacity(n);
            for _ in 0..n {
                files.push(ReleaseFile {
                    to: r.str()?.to_string(),
                    digest: r.digest()?,
                    dir: r.bool()?,
                    exec: r.bool()?,
                });
            }
            Some(files)
        }
        _ => return None,
    };
    let n = r.count(4)?;
    let mut made = std::collections::BTreeSet::new();
    for _ in 0..n {
        made.insert(r.str()?.to_string());
    }
    Some((store, release, release_dir, made))
}

fn write_node(w: &mut Writer, id: &str, st: &NodeState) {
    w.str(id);
    w.digest(&st.key);
    match &st.material {
        Material::Stored { offset, len, check } => {
            w.u8(1);
            w.u64(*offset);
            w.u32(*len);
            w.buf.extend_from_slice(check);
        }
        // Every new material was appended before encoding.
        Material::None | Material::New(_) => w.u8(0),
    }
    w.len(st.outputs.len());
    for o in &st.outputs {
        w.str(&o.path);
        w.digest(&o.digest);
        w.u64(o.size);
        w.bool(o.dir);
        w.bool(o.exec);
    }
}

fn read_node(r: &mut Reader) -> Option<(String, NodeState)> {
    let id = r.str()?.to_string();
    let key = r.digest()?;
    let material = match r.u8()? {
        0 => Material::None,
        1 => Material::Stored {
            offset: r.u64()?,
            len: r.u32()?,
            check: r.take(16)?.try_into().ok()?,
        },
        _ => return None,
    };
    let k = r.count(46)?;
    let mut outputs = Vec::with_capacity(k);
    for _ in 0..k {
        outputs.push(OutputRecord {
            path: r.str()?.to_string(),
            digest: r.digest()?,
            size: r.u64()?,
            dir: r.bool()?,
            exec: r.bool()?,
        });
    }
    Some((
        id,
        NodeState {
            key,
            outputs,
            material,
        },
    ))
}

/// The next frame of a log of frames: its body and what follows; `None` at the end or at a
/// frame that is cut or damaged (nothing after it is trusted).
fn next_frame<'b>(magic: &[u8; 8], bytes: &'b [u8]) -> Option<(&'b [u8], &'b [u8])> {
    let len = bytes.get(8..16)?;
    let len = usize::try_from(u64::from_le_bytes(len.try_into().ok()?)).ok()?;
    let end = crate::codec::FRAME_HEADER.checked_add(len)?;
    let whole = bytes.get(..end)?;
    Some((unframe(magic, whole)?, &bytes[end..]))
}

impl LastBuild {
    /// Load; missing, unreadable or damaged means "no previous build". Changes appended to
    /// `last-build.log` since the base was written are applied in order, up to the first that
    /// is cut or damaged, or that was written on another base.
    pub fn load(paths: &StatePaths) -> LastBuild {
        let Some(mut last) = crate::codec::FileBytes::read(&paths.last_build())
            .ok()
            .and_then(|b| {
                let mut last = Self::decode(unframe(MAGIC, &b)?)?;
                let mut base_id = [0; 16];
                base_id.copy_from_slice(b.get(16..32)?);
                last.loaded = Some(Loaded {
                    base_id,
                    base_len: b.len() as u64,
                    log_len: 0,
                });
                Some(last)
            })
        else {
            return LastBuild::default();
        };
        last.materials = Some(paths.materials());
        if let Ok(log) = crate::fsutil::read_regular(&paths.last_build_log(), sky_fs::STATE) {
            let mut rest = log.as_slice();
            while let Some((body, after)) = next_frame(DELTA_MAGIC, rest) {
                if last.apply(body).is_none() {
                    break;
                }
                rest = after;
                if let Some(l) = &mut last.loaded {
                    l.log_len = (log.len() - rest.len()) as u64;
                }
            }
        }
        last
    }

    /// Apply one change record; `None` (and nothing applied) when it is not one for this base.
    fn apply(&mut self, body: &[u8]) -> Option<()> {
        let mut r = Reader::new(body);
        let base_id = r.take(16)?;
        if Some(base_id) != self.loaded.as_ref().map(|l| &l.base_id[..]) {
            return None;
        }
        let head = read_head(&mut r)?;
        let n = r.count(41)?;
        let mut upserts = Vec::with_capacity(n);
        for _ in 0..n {
            upserts.push(read_node(&mut r)?);
        }
        let n = r.count(4)?;
        let mut removed = Vec::with_capacity(n);
        for _ in 0..n {
            removed.push(r.str()?.to_string());
        }
        if !r.is_empty() {
            return None;
        }
        (self.store, self.release, self.release_dir, self.made) = head;
        self.nodes.extend(upserts);
        for id in removed {
            self.nodes.remove(&id);
        }
        Some(())
    }

    fn decode(body: &[u8]) -> Option<LastBuild> {
        let mut r = Reader::new(body);
        let (store, release, release_dir, made) = read_head(&mut r)?;
        let n = r.count(41)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            entries.push(read_node(&mut r)?);
        }
        if !r.is_empty() {
            return None;
        }
        // Written sorted by id: the map builds without comparing more than neighbours.
        let nodes: BTreeMap<String, NodeState> = entries.into_iter().collect();
        (nodes.len() == n).then_some(LastBuild {
            nodes,
            release,
            release_dir,
            store,
            made,
            materials: None,
            loaded: None,
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        write_head(&mut w, self);
        w.len(self.nodes.len());
        for (id, st) in &self.nodes {
            write_node(&mut w, id, st);
        }
        frame(MAGIC, &w.buf)
    }

    /// A change record: the head, the states of `changed` ids still here, and the ids of
    /// `changed` no longer here.
    fn encode_changes(&self, base_id: &[u8; 16], changed: &[&str]) -> Vec<u8> {
        let mut w = Writer::default();
        w.buf.extend_from_slice(base_id);
        write_head(&mut w, self);
        let (here, gone): (Vec<&str>, Vec<&str>) =
            changed.iter().partition(|id| self.nodes.contains_key(**id));
        w.len(here.len());
        for id in here {
            if let Some(st) = self.nodes.get(id) {
                write_node(&mut w, id, st);
            }
        }
        w.len(gone.len());
        for id in gone {
            w.str(id);
        }
        frame(DELTA_MAGIC, &w.buf)
    }

    /// The key material `st` (a node of this record) was computed from; `None` when it was
    /// not recorded or cannot be read back intact.
    pub fn material(&self, st: &NodeState) -> Option<KeyMaterial> {
        match &st.material {
            Material::None => None,
            Material::New(text) => serde_json::from_str(text).ok(),
            Material::Stored { offset, len, check } => {
                use std::os::unix::fs::FileExt;
                let f = crate::fsutil::open_regular(self.materials.as_ref()?).ok()?;
                // The length is checked against the file before it sizes a buffer.
                let end = offset.checked_add(u64::from(*len))?;
                if f.metadata().ok()?.len() < end {
                    return None;
                }
                let mut buf = vec![0; *len as usize];
                f.read_exact_at(&mut buf, *offset).ok()?;
                if check_of(&buf) != *check {
                    return None;
                }
                serde_json::from_slice(&buf).ok()
            }
        }
    }

    /// Save whole: append the new key materials to `materials.log` (compacting it when most of
    /// it is no longer referenced), then replace `last-build.bin` atomically and drop the
    /// change log.
    pub fn save(&mut self, paths: &StatePaths) -> std::io::Result<()> {
        // A node that deleted `.skyctl` while it ran took the folder: the state is made again.
        std::fs::create_dir_all(&paths.dir)?;
        self.store_materials(paths)?;
        self.write_base(paths)
    }

    /// Save a record that differs from the one loaded only in its head (store stamp, release
    /// tree, `made`) and in the nodes `changed` (updated, added or removed): one change
    /// record appended to `last-build.log` (a one-node rebuild of a big pipeline writes a few
    /// hundred bytes, not the whole record), or the whole record when the log has grown to a
    /// quarter of it (16 KiB for a small one), the materials were compacted, or there is no
    /// base to append to.
    pub fn save_changes(&mut self, paths: &StatePaths, changed: &[&str]) -> std::io::Result<()> {
        std::fs::create_dir_all(&paths.dir)?;
        let compacted = self.store_materials(paths)?;
        if let (Some(loaded), false) = (self.loaded, compacted) {
            let delta = self.encode_changes(&loaded.base_id, changed);
            // The base on disk must be the one loaded (the workspace lock is held: it is).
            let same_base =
                sky_fs::open_nofollow(&paths.last_build(), sky_fs::STATE).is_ok_and(|f| {
                    let mut head = [0u8; 32];
                    std::os::unix::fs::FileExt::read_exact_at(&f, &mut head, 0).is_ok()
                        && head[16..32] == loaded.base_id
                        && f.metadata().is_ok_and(|m| m.len() == loaded.base_len)
                });
            let limit = (loaded.base_len / 4).max(16 << 10);
            if same_base && loaded.log_len + delta.len() as u64 <= limit {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(false)
                    .open(paths.last_build_log())?;
                // What a killed build appended past the records that load (a cut frame) goes.
                f.set_len(loaded.log_len)?;
                std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(loaded.log_len))?;
                f.write_all(&delta)?;
                if let Some(l) = &mut self.loaded {
                    l.log_len += delta.len() as u64;
                }
                return Ok(());
            }
        }
        self.write_base(paths)
    }

    fn write_base(&mut self, paths: &StatePaths) -> std::io::Result<()> {
        let bytes = self.encode();
        sky_fs::write_cache(&paths.last_build(), &bytes)?;
        // Changes to the old base: refused by their base id if this removal is lost.
        let _ = std::fs::remove_file(paths.last_build_log());
        let mut base_id = [0; 16];
        base_id.copy_from_slice(&bytes[16..32]);
        self.loaded = Some(Loaded {
            base_id,
            base_len: bytes.len() as u64,
            log_len: 0,
        });
        // The JSON record of older versions is not read any more.
        let _ = std::fs::remove_file(paths.dir.join("last-build.json"));
        Ok(())
    }

    /// Append the new key materials to `materials.log`, after compacting it when most of it is
    /// no longer referenced; `true` when it was compacted (every offset moved).
    fn store_materials(&mut self, paths: &StatePaths) -> std::io::Result<bool> {
        let log = paths.materials();
        let live: u64 = self
            .nodes
            .values()
            .map(|st| match &st.material {
                Material::Stored { len, .. } => u64::from(*len),
                Material::New(t) => t.len() as u64,
                Material::None => 0,
            })
            .sum();
        let compact = std::fs::metadata(&log).is_ok_and(|m| m.len() > 2 * live + (1 << 20));
        if compact {
            self.compact(&log)?;
        }
        if self
            .nodes
            .values()
            .any(|st| matches!(st.material, Material::New(_)))
        {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)?;
            // Appended where the file ends now (after a torn append of a killed build, say).
            let base = f.metadata()?.len();
            let mut appended = Vec::new();
            for st in self.nodes.values_mut() {
                if let Material::New(text) = &st.material {
                    let bytes = text.as_bytes();
                    st.material = match u32::try_from(bytes.len()) {
                        Ok(len) => {
                            let m = Material::Stored {
                                offset: base + appended.len() as u64,
                                len,
                                check: check_of(bytes),
                            };
                            appended.extend_from_slice(bytes);
                            m
                        }
                        Err(_) => Material::None,
                    };
                }
            }
            f.write_all(&appended)?;
        }
        self.materials = Some(log);
        Ok(compact)
    }

    /// Rewrite `materials.log` with only the materials this record references.
    fn compact(&mut self, log: &Path) -> std::io::Result<()> {
        let old = crate::fsutil::read_regular(log, sky_fs::STATE).unwrap_or_default();
        let mut out = Vec::new();
        for st in self.nodes.values_mut() {
            if let Material::Stored { offset, len, check } = st.material.clone() {
                let start = usize::try_from(offset).unwrap_or(usize::MAX);
                let bytes = start
                    .checked_add(len as usize)
                    .and_then(|end| old.get(start..end))
                    .filter(|b| check_of(b) == check);
                st.material = match bytes {
                    Some(b) => {
                        let m = Material::Stored {
                            offset: out.len() as u64,
                            len,
                            check,
                        };
                        out.extend_from_slice(b);
                        m
                    }
                    None => Material::None,
                };
            }
        }
        sky_fs::write_cache(log, &out)
    }

    /// The state of each node of `graph`, by node index (`None`: not in this record).
    pub fn aligned<'s>(&'s self, graph: &crate::graph::Graph) -> Vec<Option<&'s NodeState>> {
        let mut out = vec![None; graph.nodes.len()];
        // Both maps are sorted by id: one merge, no lookups.
        let mut mine = self.nodes.iter().peekable();
        for (id, &n) in &graph.by_id {
            while mine.next_if(|(k, _)| k.as_str() < id.as_str()).is_some() {}
            if let Some((_, st)) = mine.next_if(|(k, _)| *k == id) {
                if let Some(slot) = out.get_mut(n) {
                    *slot = Some(st);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn material(i: usize) -> KeyMaterial {
        KeyMaterial {
            kind: "command".into(),
            version: 1,
            params: serde_json::json!({"run": ["echo", i.to_string()], "f": 0.1}).into(),
            inputs: vec![crate::key::KeyInput {
                path: format!("in/{i}"),
                digest: Digest::of(i.to_string().as_bytes()),
                files: Vec::new(),
            }],
        }
    }

    fn record(n: usize) -> LastBuild {
        let mut last = LastBuild {
            store: Some(StoreStamp {
                dir: "/s".into(),
                id: "gen".into(),
            }),
            release: Some(vec![ReleaseFile {
                to: "a.gguf".into(),
                digest: Digest::of(b"a"),
                dir: false,
                exec: true,
            }]),
            release_dir: Some("site/public".into()),
            made: ["out/failed".to_string()].into_iter().collect(),
            ..LastBuild::default()
        };
        for i in 0..n {
            let m = material(i);
            let out = OutputRecord {
                path: format!("out/{i}"),
                digest: Digest::of(format!("o{i}").as_bytes()),
                size: i as u64,
                dir: i % 2 == 0,
                exec: i % 3 == 0,
            };
            last.nodes
                .insert(format!("n{i}"), NodeState::new(m.key(), &m, vec![out]));
        }
        last
    }

    fn same(a: &LastBuild, b: &LastBuild) {
        assert_eq!(a.store, b.store);
        assert_eq!(a.release, b.release);
        assert_eq!(a.release_dir, b.release_dir);
        assert_eq!(a.made, b.made);
        assert_eq!(a.nodes.len(), b.nodes.len());
        for ((ia, sa), (ib, sb)) in a.nodes.iter().zip(&b.nodes) {
            assert_eq!((ia, sa.key, &sa.outputs), (ib, sb.key, &sb.outputs));
            assert_eq!(a.material(sa), b.material(sb));
        }
    }

    #[test]
    fn the_record_and_its_materials_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let paths = StatePaths::new(dir.path());
        std::fs::create_dir_all(&paths.dir).unwrap();
        let mut last = record(20);
        last.save(&paths).unwrap();
        let back = LastBuild::load(&paths);
        same(&last, &back);
        assert_eq!(back.material(&back.nodes["n7"]), Some(material(7)));
        // One node changes: one material appended, the others stay where they were.
        let size = std::fs::metadata(paths.materials()).unwrap().len();
        let mut next = back.clone();
        let m = material(100);
        let outputs = next.nodes["n3"].outputs.clone();
        next.nodes
            .insert("n3".into(), NodeState::new(m.key(), &m, outputs));
        next.save(&paths).unwrap();
        let grown = std::fs::metadata(paths.materials()).unwrap().len();
        assert_eq!(
            grown - size,
            serde_json::to_string(&m).unwrap().len() as u64
        );
        let back = LastBuild::load(&paths);
        same(&next, &back);
        assert_eq!(back.material(&back.nodes["n3"]), Some(m));
        // A torn append of a killed build: later appends go after it and still read back.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(paths.materials())
            .unwrap();
        std::io::Write::write_all(&mut f, b"{\"kind\":\"comm").unwrap();
        let mut again = back.clone();
        let m = material(200);
        again
            .nodes
            .insert("n4".into(), NodeState::new(m.key(), &m, Vec::new()));
        again.save(&paths).unwrap();
        let back = LastBuild::load(&paths);
        assert_eq!(back.material(&back.nodes["n4"]), Some(m));
        assert_eq!(back.material(&back.nodes["n5"]), Some(material(5)));
    }

    #[test]
    fn changes_are_appended_and_read_back_over_their_base() {
        let dir = tempfile::tempdir().unwrap();
        let paths = StatePaths::new(dir.path());
        std::fs::create_dir_all(&paths.dir).unwrap();
        record(40).save(&paths).unwrap();
        let base = std::fs::read(paths.last_build()).unwrap();
        let mut last = LastBuild::load(&paths);
        // One node changes, one goes, the head changes: a change record, the base untouched.
        let m = material(500);
        last.nodes
            .insert("n5".into(), NodeState::new(m.key(), &m, Vec::new()));
        last.nodes.remove("n6");
        last.made.insert("out/also".into());
        last.store = None;
        last.save_changes(&paths, &["n5", "n6"]).unwrap();
        assert_eq!(std::fs::read(paths.last_build()).unwrap(), base);
        let one = std::fs::metadata(paths.last_build_log()).unwrap().len();
        assert!(one > 0 && one < 1000, "{one}");
        let back = LastBuild::load(&paths);
        same(&last, &back);
        assert_eq!(back.material(&back.nodes["n5"]), Some(m));
        // A second change on top, then a cut one (a killed build): the cut one is not read.
        let mut next = back.clone();
        let m2 = material(501);
        next.nodes
            .insert("n7".into(), NodeState::new(m2.key(), &m2, Vec::new()));
        next.save_changes(&paths, &["n7"]).unwrap();
        let good = LastBuild::load(&paths);
        same(&next, &good);
        let mut cut = good.clone();
        cut.nodes.remove("n8");
        cut.save_changes(&paths, &["n8"]).unwrap();
        let log = std::fs::read(paths.last_build_log()).unwrap();
        std::fs::write(paths.last_build_log(), &log[..log.len() - 5]).unwrap();
        let back = LastBuild::load(&paths);
        same(&next, &back);
        // The next change goes after the last good record (the cut bytes are dropped).
        let mut after = back.clone();
        after.nodes.remove("n9");
        after.save_changes(&paths, &["n9"]).unwrap();
        same(&after, &LastBuild::load(&paths));
        // A damaged record in the middle: it and what follows are not read.
        let log = std::fs::read(paths.last_build_log()).unwrap();
        let mut bad = log.clone();
        bad[one as usize + 60] ^= 1;
        std::fs::write(paths.last_build_log(), &bad).unwrap();
        same(&last, &LastBuild::load(&paths));
        std::fs::write(paths.last_build_log(), &log).unwrap();
        // Changes written on another base are not applied to this one.
        let other = dir.path().join("other");
        let other_paths = StatePaths::new(&other);
        std::fs::create_dir_all(&other_paths.dir).unwrap();
        // (A base of other content: the base id is the digest of what it holds.)
        record(41).save(&other_paths).unwrap();
        let mut o = LastBuild::load(&other_paths);
        o.nodes.remove("n1");
        o.save_changes(&other_paths, &["n1"]).unwrap();
        std::fs::copy(other_paths.last_build_log(), paths.last_build_log()).unwrap();
        let back = LastBuild::load(&paths);
        assert!(back.nodes.contains_key("n1") && back.nodes.contains_key("n6"));
        // Enough changes and the whole record is written again, the log dropped.
        let mut big = LastBuild::load(&paths);
        for round in 0..400 {
            let m = material(1000 + round);
            big.nodes
                .insert("n2".into(), NodeState::new(m.key(), &m, Vec::new()));
            big.save_changes(&paths, &["n2"]).unwrap();
            same(&big, &LastBuild::load(&paths));
        }
        assert!(std::fs::metadata(paths.last_build_log()).map_or(0, |m| m.len()) < 16 << 10);
        assert_ne!(std::fs::read(paths.last_build()).unwrap(), base);
    }

    #[test]
    fn damaged_state_reads_as_no_build_and_damaged_materials_as_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let paths = StatePaths::new(dir.path());
        std::fs::create_dir_all(&paths.dir).unwrap();
        record(5).save(&paths).unwrap();
        let good = std::fs::read(paths.last_build()).unwrap();
        for cut in [0, 8, 47, good.len() / 2, good.len() - 1] {
            std::fs::write(paths.last_build(), &good[..cut]).unwrap();
            assert!(LastBuild::load(&paths).nodes.is_empty(), "cut at {cut}");
        }
        let mut bad = good.clone();
        let at = bad.len() - 10;
        bad[at] ^= 4;
        std::fs::write(paths.last_build(), &bad).unwrap();
        assert!(LastBuild::load(&paths).nodes.is_empty());
        std::fs::write(paths.last_build(), &good).unwrap();
        assert_eq!(LastBuild::load(&paths).nodes.len(), 5);
        // Materials: a flipped byte makes that one unknown; a truncated file, the ones cut.
        let mats = std::fs::read(paths.materials()).unwrap();
        let mut flipped = mats.clone();
        flipped[3] ^= 1;
        std::fs::write(paths.materials(), &flipped).unwrap();
        let last = LastBuild::load(&paths);
        assert_eq!(last.material(&last.nodes["n0"]), None);
        assert_eq!(last.material(&last.nodes["n1"]), Some(material(1)));
        std::fs::write(paths.materials(), &mats[..mats.len() / 2]).unwrap();
        let last = LastBuild::load(&paths);
        assert_eq!(last.material(&last.nodes["n4"]), None);
        std::fs::remove_file(paths.materials()).unwrap();
        let last = LastBuild::load(&paths);
        assert_eq!(last.material(&last.nodes["n1"]), None);
        assert_eq!(last.nodes.len(), 5);
    }

    #[test]
    fn materials_are_compacted_once_mostly_unreferenced() {
        let dir = tempfile::tempdir().unwrap();
        let paths = StatePaths::new(dir.path());
        std::fs::create_dir_all(&paths.dir).unwrap();
        let mut last = record(3);
        last.save(&paths).unwrap();
        // Rewrite one node's material many times: the log grows, then shrinks back.
        let mut max = 0;
        let big = |i: usize| {
            let mut m = material(i);
            m.params = serde_json::json!({"run": ["echo", "x".repeat(1000), i]}).into();
            m
        };
        for round in 0..2000 {
            let m = big(round);
            last.nodes
                .insert("n1".into(), NodeState::new(m.key(), &m, Vec::new()));
            last.save(&paths).unwrap();
            max = max.max(std::fs::metadata(paths.materials()).unwrap().len());
        }
        let size = std::fs::metadata(paths.materials()).unwrap().len();
        assert!(max > 1 << 20 && size < max / 2, "{size} of at most {max}");
        let back = LastBuild::load(&paths);
        assert_eq!(back.material(&back.nodes["n1"]), Some(big(1999)));
        assert_eq!(back.material(&back.nodes["n2"]), Some(material(2)));
    }
}
