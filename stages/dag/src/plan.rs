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
    /// `targets`: resolved target groups (empty: everything). `rerun`: nodes to force.
    pub fn new(graph: &Graph, targets: &[NodeIdx], rerun: &[NodeIdx]) -> Plan {
        let n = graph.nodes.len();
        let mut selected = vec![targets.is_empty(); n];
        let mut stack: Vec<NodeIdx> = targets.to_vec();
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
        let full = selected.iter().all(|&s| s);
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
}
