//! What a build intends to touch: the selected nodes (targets and everything they depend on)
//! and the forced ones. Pure: no file I/O, no keys.

use crate::graph::{Graph, NodeIdx};

/// The scope of one build.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `selected[n]`: node `n` is a target or a dependency of one.
    pub selected: Vec<bool>,
    /// `forced[n]`: node `n` runs even when cached (`--rerun`).
    pub forced: Vec<bool>,
    /// Whether every node is selected (only then is the release tree rewritten).
    pub full: bool,
}

impl Plan {
    /// `targets`: resolved target groups (empty: every node not built only on request,
    /// [`crate::graph::Node::on_request`]). `rerun`: nodes to force.
    pub fn new(graph: &Graph, targets: &[NodeIdx], rerun: &[NodeIdx]) -> Plan {
        let n = graph.nodes.len();
        let mut selected = vec![false; n];
        let mut stack: Vec<NodeIdx> = if targets.is_empty() {
            (0..n).filter(|&x| !graph.nodes[x].on_request).collect()
        } else {
            targets.to_vec()
        };
        while let Some(x) = stack.pop() {
            if !selected[x] {
                selected[x] = true;
                stack.extend(&graph.deps[x]);
            }
        }
        let mut forced = vec![false; n];
        for &r in rerun {
            forced[r] = selected[r];
        }
        // Full: everything a build without targets builds (on-request nodes may be left out).
        let full = selected
            .iter()
            .zip(&graph.nodes)
            .all(|(&s, node)| s || node.on_request);
        Plan {
            selected,
            forced,
            full,
        }
    }

    /// Number of selected nodes.
    pub fn len(&self) -> usize {
        self.selected.iter().filter(|&&s| s).count()
    }

    /// Whether nothing is selected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cmd, graph};

    #[test]
    fn targets_pull_in_dependencies_only() {
        let g = graph(vec![
            cmd("a", "true", &[], &["a"]),
            cmd("b", "true", &["a"], &["b"]),
            cmd("c", "true", &[], &["c"]),
        ])
        .unwrap();
        let p = Plan::new(&g, &[g.by_id["b"]], &[g.by_id["a"], g.by_id["c"]]);
        assert_eq!(p.selected, vec![true, true, false]);
        assert_eq!(p.forced, vec![true, false, false]);
        assert!(!p.full);
        assert!(Plan::new(&g, &[], &[]).full);
    }

    #[test]
    fn on_request_nodes_are_built_only_when_targeted() {
        let mut specs = vec![
            cmd("a", "true", &[], &["a"]),
            cmd("gpu", "true", &["a"], &["g"]),
            cmd("gpu-check", "true", &["g"], &["gc"]),
            cmd("c", "true", &[], &["c"]),
        ];
        specs[1].on_request = true;
        specs[2].on_request = true;
        let g = graph(specs).unwrap();
        let p = Plan::new(&g, &[], &[]);
        assert_eq!(p.selected, vec![true, false, false, true]);
        assert!(
            p.full,
            "the release is written without the on-request nodes"
        );
        let p = Plan::new(&g, &[g.by_id["gpu-check"]], &[]);
        assert_eq!(p.selected, vec![true, true, true, false]);
        assert!(!p.full);
        let all: Vec<NodeIdx> = (0..4).collect();
        assert!(Plan::new(&g, &all, &[]).full);
    }
}
