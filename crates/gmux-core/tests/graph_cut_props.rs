//! Cutting a graph into parts on random graphs and budgets: the order is a permutation
//! that keeps every edge forward, the parts cover the order in sequence, each part's
//! distinct allocations fit the budget, and each cut is needed (the part plus the next
//! node would not fit).

use gmux_core::graph_cut::{cut, topological};
use proptest::prelude::*;
use std::collections::HashMap;

/// A random acyclic graph: edges only from lower to higher node numbers, then the nodes
/// listed in a shuffled order so that the given order is not already topological.
fn dag() -> impl Strategy<Value = (usize, Vec<(usize, usize)>)> {
    (1usize..24)
        .prop_flat_map(|n| {
            let edges = prop::collection::vec((0..n, 0..n), 0..n * 2).prop_map(|e| e.into_iter().filter(|(a, b)| a < b).collect::<Vec<_>>());
            (Just(n), edges, Just((0..n).collect::<Vec<_>>()).prop_shuffle())
        })
        .prop_map(|(n, edges, perm)| (n, edges.into_iter().map(|(a, b)| (perm[a], perm[b])).collect()))
}

fn bytes_of(nodes: &[Vec<(u64, u64)>], range: std::ops::Range<usize>) -> u64 {
    let all: HashMap<u64, u64> = nodes[range].iter().flatten().copied().collect();
    all.values().sum()
}

proptest! {
    #[test]
    fn the_order_keeps_every_edge_forward((n, edges) in dag()) {
        let order = topological(n, &edges).expect("acyclic");
        let mut sorted = order.clone();
        sorted.sort_unstable();
        prop_assert_eq!(sorted, (0..n).collect::<Vec<_>>());
        let at: HashMap<usize, usize> = order.iter().enumerate().map(|(i, x)| (*x, i)).collect();
        for (f, t) in &edges {
            prop_assert!(at[f] < at[t], "edge {}->{} goes backward in {:?}", f, t, order);
        }
    }

    #[test]
    fn parts_cover_the_order_and_fit(
        nodes in prop::collection::vec(prop::collection::vec((0u64..12, 1u64..5), 0..4), 1..30),
        budget in 1u64..40,
    ) {
        // One size per allocation, as in a real chunk table.
        let size: HashMap<u64, u64> = nodes.iter().flatten().map(|(a, _)| (*a, a % 4 + 1)).collect();
        let nodes: Vec<Vec<(u64, u64)>> = nodes.iter().map(|n| n.iter().map(|(a, _)| (*a, size[a])).collect()).collect();
        match cut(&nodes, budget) {
            Err(e) => {
                prop_assert!(bytes_of(&nodes, e.node..e.node + 1) > budget);
                prop_assert!((0..e.node).all(|i| bytes_of(&nodes, i..i + 1) <= budget));
            }
            Ok(parts) => {
                prop_assert_eq!(parts.first().map(|p| p.start), Some(0));
                prop_assert_eq!(parts.last().map(|p| p.end), Some(nodes.len()));
                for w in parts.windows(2) {
                    prop_assert_eq!(w[0].end, w[1].start);
                    prop_assert!(bytes_of(&nodes, w[0].start..w[0].end + 1) > budget, "a needless cut at {}", w[0].end);
                }
                for p in &parts {
                    prop_assert!(!p.is_empty() || nodes.is_empty());
                    prop_assert!(bytes_of(&nodes, p.clone()) <= budget);
                }
            }
        }
    }
}
