//! Graphs of `command` nodes for the engine's own tests.

use crate::command::{Command, Params};
use crate::graph::{Graph, GraphSpec, NodeSpec};
use crate::source::Source;
use crate::Result;

/// A `command` node running `run` (as `sh -c`), with these inputs and outputs (spans 0..0).
pub(crate) fn cmd(id: &str, run: &str, inputs: &[&str], outputs: &[&str]) -> NodeSpec {
    let params = Params {
        run: vec!["sh".into(), "-c".into(), run.into()],
        cwd: ".".into(),
        env: Default::default(),
        outputs: outputs.iter().map(|o| o.to_string()).collect(),
    };
    let mut n = NodeSpec::new::<Command>(id, &params, 0..0).unwrap();
    for i in inputs {
        n = n.input(*i, 0..0);
    }
    for o in outputs {
        n = n.output(*o, 0..0);
    }
    n
}

/// The spec of these nodes with the default release and store directories.
pub(crate) fn spec(nodes: Vec<NodeSpec>) -> GraphSpec {
    GraphSpec {
        nodes,
        release_dir: crate::Located::new("site/public".into(), 0..0),
        store_dir: ".skyctl".into(),
        ..GraphSpec::default()
    }
}

/// [`Graph::build`] of [`spec`] in a workspace that does not exist.
pub(crate) fn graph(nodes: Vec<NodeSpec>) -> Result<Graph> {
    Graph::build(
        spec(nodes),
        &Source::default(),
        std::path::Path::new("/nonexistent-root"),
    )
}
