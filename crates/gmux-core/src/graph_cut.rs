//! Cutting a task graph into consecutive parts that each fit a memory budget: the
//! decision behind running a CUDA graph larger than the limit in parts.
//!
//! Nodes are put in a topological order of the graph's edges (ties in the order given),
//! then cut greedily: a node joins the current part while the distinct allocations of
//! the part fit the budget. Parts run one after another, so every edge goes forward.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

/// The nodes `0..n` in an order where every edge `(from, to)` has `from` first; ties go
/// to the lower index. `None` when the edges hold a cycle. Edges naming a node outside
/// `0..n` are ignored.
pub fn topological(n: usize, edges: &[(usize, usize)]) -> Option<Vec<usize>> {
    let mut after = vec![Vec::new(); n];
    let mut waiting = vec![0usize; n];
    for &(f, t) in edges.iter().filter(|(f, t)| *f < n && *t < n) {
        after[f].push(t);
        waiting[t] += 1;
    }
    let mut ready: BTreeSet<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &t in &after[i] {
            waiting[t] -= 1;
            if waiting[t] == 0 {
                ready.insert(t);
            }
        }
    }
    (order.len() == n).then_some(order)
}

/// Why a graph cannot be cut to fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    /// Position (in the order given) of the first node that does not fit alone.
    pub node: usize,
    /// Bytes it needs.
    pub bytes: u64,
}

/// Cuts nodes, in the order given, each with the allocations it uses as `(allocation,
/// bytes)`, into consecutive ranges whose distinct allocations fit `budget` bytes.
pub fn cut(nodes: &[Vec<(u64, u64)>], budget: u64) -> Result<Vec<Range<usize>>, TooLarge> {
    let mut parts = Vec::new();
    let (mut start, mut held, mut total) = (0, HashMap::new(), 0u64);
    for (i, allocs) in nodes.iter().enumerate() {
        let alone: u64 = distinct(allocs).values().sum();
        if alone > budget {
            return Err(TooLarge { node: i, bytes: alone });
        }
        let more: u64 = distinct(allocs).iter().filter(|(a, _)| !held.contains_key(*a)).map(|(_, b)| b).sum();
        if total + more > budget {
            parts.push(start..i);
            start = i;
            held.clear();
            total = 0;
        }
        for (a, b) in distinct(allocs) {
            if held.insert(a, b).is_none() {
                total += b;
            }
        }
    }
    if start < nodes.len() || parts.is_empty() {
        parts.push(start..nodes.len());
    }
    Ok(parts)
}

/// Each allocation once, with its bytes.
fn distinct(allocs: &[(u64, u64)]) -> HashMap<u64, u64> {
    allocs.iter().copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_is_cut_where_the_next_node_would_overflow() {
        // Four nodes over allocations of 4 bytes, each sharing one with the next.
        let nodes = vec![vec![(0, 4), (1, 4)], vec![(1, 4), (2, 4)], vec![(2, 4), (3, 4)], vec![(3, 4)]];
        assert_eq!(cut(&nodes, 8), Ok(vec![0..1, 1..2, 2..4]));
        assert_eq!(cut(&nodes, 12), Ok(vec![0..2, 2..4]));
        assert_eq!(cut(&nodes, 16), Ok(std::iter::once(0..4).collect::<Vec<_>>()));
        assert_eq!(cut(&nodes, 7), Err(TooLarge { node: 0, bytes: 8 }));
    }

    #[test]
    fn ties_keep_the_given_order_and_cycles_are_refused() {
        assert_eq!(topological(4, &[(3, 0)]), Some(vec![1, 2, 3, 0]));
        assert_eq!(topological(3, &[(0, 1), (1, 2), (2, 0)]), None);
        assert_eq!(topological(2, &[(0, 5)]), Some(vec![0, 1]), "an edge outside the nodes is ignored");
    }
}
