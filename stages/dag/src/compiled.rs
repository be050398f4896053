//! A compiled graph: a checked [`Graph`] saved in a binary file, so that a front end can skip
//! parsing and expanding its declaration when nothing it depends on changed.
//!
//! The engine only stores and checks the file; what the graph depends on is the front end's
//! to say: it passes a `key` (a digest of the declaration's bytes, its own version, anything
//! else the expansion read) and an opaque `extra` payload (what it needs besides the graph).
//! [`Compiled::read`] gives the key and the payload back only from an intact head (the file's
//! magic and length, see [`crate::codec`], and the head's own blake3, so a front end that
//! needs only the head does not hash the whole file); the front end compares the key and
//! decides. [`Compiled::graph`] checks the whole file's blake3 (on another thread while it
//! decodes a large one) and rebuilds the graph; every index in the file is checked, and the
//! dependencies and the order are recomputed from the inputs, so a graph read back has the
//! invariants [`Graph::build`] gives. What the graph checks read from the disk (symlinks that
//! lead out of the workspace) is not in the file: the front end repeats those checks.
//!
//! Format (`SKYGRPH6` frame): the key (32 bytes), the payload (length-prefixed), the
//! `params_checked` flag, the blake3 of those head bytes, then the graph: nodes (id, kind, parameters as
//! [`crate::codec::Writer::json`] and their canonical key bytes, inputs, their spans, their
//! roles, outputs, flags (exclusive, volatile, gates the release, on request), group, span; a
//! glob input is tag 1, or 3 when it may match nothing), the release entries, the release
//! directory and its span, and the group noun.

use std::path::Path;
use std::sync::Arc;

use crate::codec::{frame, frame_body, unframe, Reader, Writer, FRAME_HEADER};
use crate::glob::Glob;
use crate::graph::{deps_of, topo_order, Graph, Input, Node, NodeParams, Output, ReleaseEntry};
use crate::key::Digest;
use crate::source::Source;

const MAGIC: &[u8; 8] = b"SKYGRPH6";

/// From this many bytes, [`Compiled::graph`] checks the file's digest on a thread of its own
/// while it decodes.
const PARALLEL_CHECK: usize = 256 * 1024;

/// Nodes from which [`Compiled::graph`] builds the id index on a thread of its own.
const PARALLEL_INDEX: usize = 1024;

/// Write `graph` to `path` (atomically, [`sky_fs::write_cache`]) under `key`, with the front
/// end's `extra` payload. `params_checked`: every node's parameters were parsed by its kind
/// (see [`Graph::params_checked`]).
pub fn write(
    path: &Path,
    key: &Digest,
    extra: &[u8],
    graph: &Graph,
    params_checked: bool,
) -> std::io::Result<()> {
    let mut w = Writer::default();
    encode_head(&mut w, key, extra, params_checked);
    encode(&mut w, graph);
    sky_fs::write_cache(path, &frame(MAGIC, &w.buf))
}

/// The head: the key, the payload, the flag, then the digest of those bytes.
fn encode_head(w: &mut Writer, key: &Digest, extra: &[u8], params_checked: bool) {
    let at = w.buf.len();
    w.digest(key);
    w.bytes(extra);
    w.bool(params_checked);
    let head = Digest::of(&w.buf[at..]);
    w.digest(&head);
}

fn encode(w: &mut Writer, g: &Graph) {
    w.len(g.nodes.len());
    let mut value = Writer::default();
    for n in &g.nodes {
        w.str(&n.id);
        w.str(&n.kind);
        value.buf.clear();
        value.json(n.params.value());
        w.bytes(&value.buf);
        w.bytes(n.params.canonical());
        w.len(n.inputs.len());
        for i in &n.inputs {
            match i {
                Input::Source(p) => {
                    w.u8(0);
                    w.str(p);
                }
                Input::Glob { glob, allow_empty } => {
                    w.u8(if *allow_empty { 3 } else { 1 });
                    w.str(glob.as_str());
                }
                Input::Output { node, output } => {
                    w.u8(2);
                    w.len(*node);
                    w.len(*output);
                }
            }
        }
        w.len(n.input_spans.len());
        for s in &n.input_spans {
            w.span(s);
        }
        w.len(n.input_roles.len());
        for role in &n.input_roles {
            w.str(role);
        }
        w.len(n.outputs.len());
        for o in &n.outputs {
            w.str(&o.path);
            w.bool(o.dir);
        }
        w.bool(n.exclusive);
        w.bool(n.volatile);
        w.bool(n.gates_release);
        w.bool(n.on_request);
        w.opt_str(n.group.as_deref());
        w.span(&n.span);
    }
    w.len(g.release.len());
    for r in &g.release {
        w.str(&r.to);
        w.len(r.node);
        w.len(r.output);
    }
    w.str(&g.release_dir);
    w.span(&g.release_span);
    w.str(&g.group_noun);
}

/// A compiled-graph file with an intact head, read whole.
pub struct Compiled {
    bytes: Arc<crate::codec::FileBytes>,
    key: Digest,
    extra: std::ops::Range<usize>,
    params_checked: bool,
    /// Where the graph starts.
    graph_at: usize,
    /// Whether the whole file matches its digest, once checked.
    intact: std::sync::OnceLock<bool>,
}

impl Compiled {
    /// Read `path`; `None` when it is missing, of another format, truncated, or its head is
    /// damaged (damage past the head is found by [`Compiled::graph`]).
    pub fn read(path: &Path) -> Option<Compiled> {
        let bytes = crate::codec::FileBytes::read(path).ok()?;
        let body = frame_body(MAGIC, &bytes)?;
        let mut r = Reader::new(body);
        let key = r.digest()?;
        let extra_len = r.index()?;
        let extra_at = FRAME_HEADER + body.len() - r.remaining();
        r.take(extra_len)?;
        let params_checked = r.bool()?;
        let head = body.get(..body.len() - r.remaining())?;
        if r.digest()? != Digest::of(head) {
            return None;
        }
        let graph_at = FRAME_HEADER + body.len() - r.remaining();
        Some(Compiled {
            key,
            extra: extra_at..extra_at + extra_len,
            params_checked,
            graph_at,
            bytes: Arc::new(bytes),
            intact: std::sync::OnceLock::new(),
        })
    }

    /// Whether the whole file matches its digest (checked once).
    fn intact(&self) -> bool {
        *self
            .intact
            .get_or_init(|| unframe(MAGIC, &self.bytes).is_some())
    }

    /// The key it was written under.
    pub fn key(&self) -> &Digest {
        &self.key
    }

    /// The front end's payload.
    pub fn extra(&self) -> &[u8] {
        self.bytes.get(self.extra.clone()).unwrap_or_default()
    }

    /// The graph, its spans pointing into `source` (the declaration it was compiled from);
    /// `Err(source)` back when the file does not hold a valid graph.
    pub fn graph(&self, source: Source) -> Result<Graph, Source> {
        let mut source = Some(source);
        // Decoding damaged bytes is safe (every count and index is checked), so a large file's
        // digest is checked beside the decoding, and the graph used only if it matches.
        let (intact, graph) = if self.bytes.len() >= PARALLEL_CHECK {
            std::thread::scope(|scope| {
                let check = std::thread::Builder::new().spawn_scoped(scope, || self.intact());
                let graph = self.decode(&mut source);
                // No thread (the system refused one): this thread checks.
                let intact = match check {
                    Ok(h) => h.join().unwrap_or(false),
                    Err(_) => self.intact(),
                };
                (intact, graph)
            })
        } else if self.intact() {
            (true, self.decode(&mut source))
        } else {
            (false, None)
        };
        graph
            .filter(|_| intact)
            .ok_or_else(|| source.take().unwrap_or_default())
    }

    fn decode(&self, source: &mut Option<Source>) -> Option<Graph> {
        let buf = &self.bytes;
        let all = buf.get(self.graph_at..)?;
        let mut r = Reader::new(all);
        let at = |r: &Reader| buf.len() - r.remaining();
        // Each node takes at least 40 bytes.
        let n = r.count(40)?;
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            let id = r.str()?.to_string();
            let kind = r.str()?.to_string();
            let len = r.index()?;
            let start = at(&r);
            r.take(len)?;
            let encoded = start..start + len;
            let len = r.index()?;
            let start = at(&r);
            r.take(len)?;
            let canonical = start..start + len;
            let params = NodeParams::encoded(self.bytes.clone(), encoded, canonical);
            let k = r.count(5)?;
            let mut inputs = Vec::with_capacity(k);
            for _ in 0..k {
                inputs.push(match r.u8()? {
                    0 => Input::Source(r.str()?.to_string()),
                    1 => Input::Glob {
                        glob: Glob::new(r.str()?).ok()?,
                        allow_empty: false,
                    },
                    3 => Input::Glob {
                        glob: Glob::new(r.str()?).ok()?,
                        allow_empty: true,
                    },
                    2 => Input::Output {
                        node: r.index()?,
                        output: r.index()?,
                    },
                    _ => return None,
                });
            }
            let k = r.count(8)?;
            let mut input_spans = Vec::with_capacity(k);
            for _ in 0..k {
                input_spans.push(r.span()?);
            }
            // A role takes at least its length.
            let k = r.count(4)?;
            let mut input_roles = Vec::with_capacity(k);
            for _ in 0..k {
                input_roles.push(r.str()?.to_string());
            }
            let k = r.count(5)?;
            let mut outputs = Vec::with_capacity(k);
            for _ in 0..k {
                outputs.push(Output {
                    path: r.str()?.to_string(),
                    dir: r.bool()?,
                });
            }
            nodes.push(Node {
                id,
                kind,
                params,
                inputs,
                input_spans,
                input_roles,
                outputs,
                exclusive: r.bool()?,
                volatile: r.bool()?,
                gates_release: r.bool()?,
                on_request: r.bool()?,
                group: r.opt_str()?.map(str::to_string),
                span: r.span()?,
            });
        }
        let k = r.count(12)?;
        let mut release = Vec::with_capacity(k);
        for _ in 0..k {
            release.push(ReleaseEntry {
                to: r.str()?.to_string(),
                node: r.index()?,
                output: r.index()?,
            });
        }
        let release_dir = r.str()?.to_string();
        let release_span = r.span()?;
        let group_noun = r.str()?.to_string();
        if !r.is_empty() {
            return None;
        }
        // Every reference names a node and one of its outputs.
        let output_ok = |node: usize, output: usize| {
            nodes
                .get(node)
                .is_some_and(|t: &Node| output < t.outputs.len())
        };
        for node in &nodes {
            if node.input_spans.len() != node.inputs.len()
                || node.input_roles.len() != node.inputs.len()
            {
                return None;
            }
            for i in &node.inputs {
                if let Input::Output { node, output } = i {
                    if !output_ok(*node, *output) {
                        return None;
                    }
                }
            }
        }
        if !release.iter().all(|e| output_ok(e.node, e.output)) {
            return None;
        }
        // The id index (sorting thousands of ids) on another thread while this one orders the
        // nodes: the two take about as long on a large graph.
        let index = || -> std::collections::BTreeMap<String, usize> {
            nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.id.clone(), i))
                .collect()
        };
        let (by_id, ordered) = std::thread::scope(|scope| {
            let by_id = (nodes.len() >= PARALLEL_INDEX)
                .then(|| std::thread::Builder::new().spawn_scoped(scope, index).ok())
                .flatten();
            let deps = deps_of(&nodes);
            let order = topo_order(&nodes, &deps).ok();
            // No thread (a small graph, or the system refused one): this one indexes.
            let by_id = match by_id {
                Some(h) => h.join().ok(),
                None => Some(index()),
            };
            (by_id, order.map(|order| (deps, order)))
        });
        let (by_id, (deps, order)) = (by_id?, ordered?);
        if by_id.len() != nodes.len() {
            return None;
        }
        Some(Graph {
            nodes,
            by_id,
            deps,
            order,
            release,
            release_dir,
            release_span,
            group_noun,
            source: source.take()?,
            params_checked: self.params_checked,
            output_stats: Default::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cmd, spec};

    fn sample() -> Graph {
        let mut nodes = vec![
            cmd(
                "a",
                "echo 1.5",
                &["src.txt", "data/**/*.csv"],
                &["out/a", "out/dir/"],
            ),
            cmd("b", "true", &["out/a", "node:a"], &["out/b"]).input_as("model", "src.txt", 5..6),
        ];
        nodes[0] = nodes[0].clone().input_may_be_empty("opt/*.txt", 2..4);
        nodes[1].group = Some("g".into());
        nodes[1].volatile = true;
        nodes[0].params["float"] = serde_json::json!(0.1);
        let mut s = spec(nodes);
        s.release.push(crate::ReleaseSpec {
            to: "b.txt".into(),
            from: "out/b".into(),
            span: 3..9,
        });
        Graph::build(s, &Source::default(), Path::new("/nonexistent-root")).unwrap()
    }

    fn same(a: &Graph, b: &Graph) {
        assert_eq!(format!("{:?}", a.nodes), format!("{:?}", b.nodes));
        assert_eq!(a.by_id, b.by_id);
        assert_eq!(a.deps, b.deps);
        assert_eq!(a.order, b.order);
        assert_eq!(format!("{:?}", a.release), format!("{:?}", b.release));
        assert_eq!(
            (&a.release_dir, &a.release_span, &a.group_noun),
            (&b.release_dir, &b.release_span, &b.group_noun)
        );
        for (x, y) in a.nodes.iter().zip(&b.nodes) {
            assert_eq!(x.params.canonical(), y.params.canonical());
        }
    }

    #[test]
    fn a_graph_reads_back_as_it_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("graph");
        let g = sample();
        let key = Digest::of(b"k");
        write(&p, &key, b"front end", &g, true).unwrap();
        let c = Compiled::read(&p).unwrap();
        assert_eq!((c.key(), c.extra()), (&key, &b"front end"[..]));
        let back = c.graph(Source::default()).unwrap();
        assert!(back.params_checked);
        // Parameters decode only when asked for, to the same value (float bits included).
        assert!(format!("{:?}", back.nodes[0]).contains("params: <encoded>"));
        for n in &back.nodes {
            n.params.value();
        }
        same(&g, &back);
        assert_eq!(back.nodes[1].input_roles, ["", "", "", "model"]);
        assert_eq!(
            back.nodes[0].params.value().to_string(),
            g.nodes[0].params.value().to_string()
        );
    }

    /// A graph large enough for the id index to be built, and the digest checked, on threads
    /// of their own reads back the same; two nodes given one id in a well-framed file are
    /// refused there too, and so is a file whose graph decodes but does not match its digest.
    #[test]
    fn a_large_graph_reads_back_and_a_repeated_id_is_refused() {
        let n = PARALLEL_INDEX * 3;
        let nodes: Vec<_> = (0..n)
            .map(|i| {
                let ins = if i == 0 {
                    vec!["src.txt".to_string()]
                } else {
                    vec![format!("out/n{:05}", i - 1)]
                };
                let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
                cmd(
                    &format!("n{i:05}"),
                    "true",
                    &ins,
                    &[&format!("out/n{i:05}")],
                )
            })
            .collect();
        let g = Graph::build(
            spec(nodes),
            &Source::default(),
            Path::new("/nonexistent-root"),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("graph");
        write(&p, &Digest::of(b"k"), b"", &g, true).unwrap();
        let written = std::fs::read(&p).unwrap();
        assert!(written.len() >= PARALLEL_CHECK, "{} bytes", written.len());
        let back = Compiled::read(&p)
            .unwrap()
            .graph(Source::default())
            .unwrap();
        for n in &back.nodes {
            n.params.value();
        }
        same(&g, &back);
        // The last node's id changed by hand: a graph that decodes, refused by its digest.
        let at = written.windows(6).rposition(|x| x == b"n03071").unwrap();
        let mut bad = written.clone();
        bad[at] = b'm';
        std::fs::write(&p, &bad).unwrap();
        assert!(Compiled::read(&p)
            .unwrap()
            .graph(Source::default())
            .is_err());
        // The second node's id made the first's (same length, so every offset stays).
        let mut w = Writer::default();
        encode_head(&mut w, &Digest::of(b"k"), b"", true);
        encode(&mut w, &g);
        let at = w.buf.windows(6).position(|x| x == b"n00001").unwrap();
        w.buf[at..at + 6].copy_from_slice(b"n00000");
        std::fs::write(&p, frame(MAGIC, &w.buf)).unwrap();
        assert!(Compiled::read(&p)
            .unwrap()
            .graph(Source::default())
            .is_err());
    }

    #[test]
    fn damaged_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("graph");
        write(&p, &Digest::of(b"k"), b"", &sample(), false).unwrap();
        let good = std::fs::read(&p).unwrap();
        for cut in [0, 7, 30, good.len() / 2, good.len() - 1] {
            std::fs::write(&p, &good[..cut]).unwrap();
            assert!(Compiled::read(&p).is_none(), "cut at {cut}");
        }
        // A flip in the head is found by the read, one past it by the graph's check.
        for i in (0..good.len()).step_by(7) {
            let mut bad = good.clone();
            bad[i] ^= 1;
            std::fs::write(&p, &bad).unwrap();
            let graph = Compiled::read(&p).map(|c| c.graph(Source::default()));
            assert!(!matches!(graph, Some(Ok(_))), "bit flip at {i}");
        }
        assert!(Compiled::read(&dir.path().join("missing")).is_none());
    }

    #[test]
    fn a_well_framed_file_with_bad_references_is_refused() {
        // A body whose checksum matches but whose node points at a node that does not exist.
        let g = sample();
        let mut w = Writer::default();
        encode_head(&mut w, &Digest::of(b"k"), b"", false);
        encode(&mut w, &g);
        let good = w.buf.clone();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("graph");
        std::fs::write(&p, frame(MAGIC, &good)).unwrap();
        assert!(Compiled::read(&p).unwrap().graph(Source::default()).is_ok());
        // Every single-byte change of the body, re-framed: refused or a valid graph, never a
        // panic.
        for i in 32..good.len() {
            let mut bad = good.clone();
            bad[i] = bad[i].wrapping_add(0x41);
            std::fs::write(&p, frame(MAGIC, &bad)).unwrap();
            if let Some(c) = Compiled::read(&p) {
                if let Ok(g) = c.graph(Source::default()) {
                    for n in &g.nodes {
                        let _ = n.params.value();
                    }
                }
            }
        }
    }
}
