//! A Fenwick tree over access slots: how many distinct chunks were touched since a slot.

/// Fenwick tree of counts over slots `1..=len`.
#[derive(Debug, Clone, Default)]
pub(super) struct Fenwick(Vec<i32>);

impl Fenwick {
    pub(super) fn with_len(n: usize) -> Self {
        Fenwick(vec![0; n + 1])
    }

    pub(super) fn len(&self) -> usize {
        self.0.len().saturating_sub(1)
    }

    pub(super) fn add(&mut self, mut i: usize, d: i32) {
        while i < self.0.len() {
            self.0[i] += d;
            i += i & i.wrapping_neg();
        }
    }

    pub(super) fn prefix(&self, mut i: usize) -> i32 {
        let mut s = 0;
        while i > 0 {
            s += self.0[i];
            i -= i & i.wrapping_neg();
        }
        s
    }
}
