//! A graph's shape: its edges, a topological order of its nodes, the correspondence
//! between a clone's nodes and the original's, and node removal.
//!
//! Every edge is a dependency a node was given when it was added, so each node's
//! dependencies are distinct nodes of its graph; removing a node removes its edges and
//! adds none (as `cuGraphDestroyNode` does), so the graph stays acyclic.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use cuda_abi::*;

use super::{reg, GraphId, Node, NodeId, Op, Registry, Res};

impl Registry {
    /// The nodes of `g` (which exists) in a topological order: every node after its
    /// dependencies, ties going to the node inserted first.
    pub(super) fn order(&self, g: GraphId) -> Vec<NodeId> {
        let nodes = &self.graphs[&g].nodes;
        let pos: HashMap<NodeId, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let mut waiting: Vec<usize> = nodes.iter().map(|n| self.nodes[n].deps.len()).collect();
        let mut dependents = vec![Vec::new(); nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            for d in &self.nodes[n].deps {
                dependents[pos[d]].push(i);
            }
        }
        let mut ready: BinaryHeap<_> = (0..nodes.len()).filter(|&i| waiting[i] == 0).map(Reverse).collect();
        let mut out = Vec::with_capacity(nodes.len());
        while let Some(Reverse(i)) = ready.pop() {
            out.push(nodes[i]);
            for &j in &dependents[i] {
                waiting[j] -= 1;
                if waiting[j] == 0 {
                    ready.push(Reverse(j));
                }
            }
        }
        debug_assert_eq!(out.len(), nodes.len(), "graphs are acyclic by construction");
        out
    }

    fn destroy_node(&mut self, n: NodeId) -> Res<()> {
        let g = self.node(n)?.graph;
        let graph = self.graphs.get_mut(&g).expect("a node's graph lives as long as the node");
        graph.nodes.retain(|&m| m != n);
        for m in &graph.nodes {
            self.nodes.get_mut(m).expect("a graph's nodes exist").deps.retain(|&d| d != n);
        }
        if let Some(Node { op: Op::Child(c), .. }) = self.nodes.remove(&n) {
            self.remove_graph(c);
        }
        Ok(())
    }
}

/// `cuGraphGetEdges`: the graph's edges as (dependency, dependent) pairs, grouped by the
/// dependent in insertion order, each node's dependencies in the order it was given them.
pub fn edges(g: GraphId) -> Res<Vec<(NodeId, NodeId)>> {
    let r = reg();
    let nodes = &r.graph(g)?.nodes;
    Ok(nodes.iter().flat_map(|&n| r.nodes[&n].deps.iter().map(move |&d| (d, n))).collect())
}

/// `cuGraphNodeFindInClone`: the node of `clone` copied from `original` by the
/// `cuGraphClone` that made `clone`. Refused when `clone` is not a clone of the node's
/// graph, or the copy is gone (destroyed, or `original` was added after the clone).
pub fn find_in_clone(original: NodeId, clone: GraphId) -> Res<NodeId> {
    let r = reg();
    let g = r.node(original)?.graph;
    let c = r.graph(clone)?;
    if c.origin != Some(g) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    c.nodes.iter().copied().find(|n| r.nodes[n].origin == Some(original)).ok_or(CUDA_ERROR_INVALID_VALUE)
}

/// `cuGraphDestroyNode`: removes the node and every edge to or from it; a child graph
/// node's embedded graph goes with it. Dependents of the node lose that dependency and
/// gain no other. Executable graphs made before keep their copy of the node.
pub fn destroy_node(n: NodeId) -> Res<()> {
    reg().destroy_node(n)
}
