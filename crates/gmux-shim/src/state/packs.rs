//! Small allocations packed into shared chunks. An allocation of at most [`PACKED_MAX`]
//! bytes takes a slot of a pack: one chunk that gmux keeps as an allocation of its own,
//! the unit of residency, so that the limit counts about the bytes the program asked for
//! rather than a whole chunk for each. A command that uses one slot brings in its whole
//! pack. Slots are aligned to [`SLOT_ALIGN`] bytes, as the driver aligns allocations.

use crate::cuda::CUdeviceptr;
use gmux_core::CHUNK_BYTES;
use std::collections::BTreeMap;

/// The largest allocation packed; larger ones get chunks of their own.
pub const PACKED_MAX: u64 = CHUNK_BYTES / 2;
/// Alignment of a slot, and the unit of its size.
pub const SLOT_ALIGN: u64 = 512;

/// A packed allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Its address.
    pub base: CUdeviceptr,
    /// The bytes the program asked for.
    pub bytes: u64,
    /// The base of its pack.
    pub pack: CUdeviceptr,
}

/// Every pack's free space and every live slot.
#[derive(Debug, Default)]
pub struct Packs {
    /// Per pack (by base), its holes as (offset, length), in order.
    holes: BTreeMap<CUdeviceptr, Vec<(u64, u64)>>,
    slots: BTreeMap<CUdeviceptr, Slot>,
}

/// The bytes a slot of `bytes` takes.
pub fn slot_len(bytes: u64) -> u64 {
    bytes.max(1).div_ceil(SLOT_ALIGN) * SLOT_ALIGN
}

impl Packs {
    /// A slot of `bytes` in a pack that has room (the first hole that fits), if any.
    pub fn place(&mut self, bytes: u64) -> Option<CUdeviceptr> {
        let len = slot_len(bytes);
        let (&pack, holes) = self.holes.iter_mut().find(|(_, h)| h.iter().any(|&(_, l)| l >= len))?;
        let i = holes.iter().position(|&(_, l)| l >= len).expect("found above");
        let (off, l) = holes[i];
        if l == len {
            holes.remove(i);
        } else {
            holes[i] = (off + len, l - len);
        }
        let base = pack + off;
        self.slots.insert(base, Slot { base, bytes, pack });
        Some(base)
    }

    /// Adds the empty pack of one chunk at `pack`.
    pub fn add(&mut self, pack: CUdeviceptr) {
        self.holes.insert(pack, vec![(0, CHUNK_BYTES)]);
    }

    /// The slot that `ptr` falls in.
    pub fn find(&self, ptr: CUdeviceptr) -> Option<&Slot> {
        let (_, s) = self.slots.range(..=ptr).next_back()?;
        (ptr < s.base + slot_len(s.bytes)).then_some(s)
    }

    /// The slots that bytes `[start, start + len)` overlap.
    pub fn overlapping(&self, start: CUdeviceptr, len: u64) -> impl Iterator<Item = &Slot> {
        let first = self.find(start).map_or(start, |s| s.base);
        self.slots.range(first..start.saturating_add(len)).map(|(_, s)| s)
    }

    /// Whether `ptr` is inside a pack (in a slot or in free space).
    pub fn is_pack_address(&self, ptr: CUdeviceptr) -> bool {
        self.holes.range(..=ptr).next_back().is_some_and(|(&p, _)| ptr < p + CHUNK_BYTES)
    }

    /// Frees the slot at `base`; returns its pack's base when the pack is now empty (and
    /// forgotten: the caller frees its chunk).
    pub fn free(&mut self, base: CUdeviceptr) -> Option<CUdeviceptr> {
        let s = self.slots.remove(&base)?;
        let holes = self.holes.get_mut(&s.pack).expect("a slot's pack is known");
        let (off, len) = (base - s.pack, slot_len(s.bytes));
        let i = holes.partition_point(|&(o, _)| o < off);
        holes.insert(i, (off, len));
        // Merge with the hole after, then with the one before.
        if i + 1 < holes.len() && holes[i].0 + holes[i].1 == holes[i + 1].0 {
            holes[i].1 += holes.remove(i + 1).1;
        }
        if i > 0 && holes[i - 1].0 + holes[i - 1].1 == holes[i].0 {
            holes[i - 1].1 += holes.remove(i).1;
        }
        if holes.as_slice() == [(0, CHUNK_BYTES)] {
            self.holes.remove(&s.pack);
            return Some(s.pack);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: CUdeviceptr = 0x7000_0000;

    #[test]
    fn two_halves_share_a_chunk_and_a_third_needs_another() {
        let mut p = Packs::default();
        assert_eq!(p.place(1 << 20), None, "no pack yet");
        p.add(P);
        assert_eq!(p.place(1 << 20), Some(P));
        assert_eq!(p.place(1 << 20), Some(P + (1 << 20)));
        assert_eq!(p.place(1), None, "the pack is full");
        assert_eq!(p.find(P + (1 << 20) + 5).map(|s| s.base), Some(P + (1 << 20)));
        let over: Vec<_> = p.overlapping(P + 100, 1 << 20).map(|s| s.base).collect();
        assert_eq!(over, vec![P, P + (1 << 20)], "a range from inside the first slot into the second");
        assert_eq!(p.overlapping(P + (1 << 20), 1).count(), 1);
        assert_eq!(p.free(P), None, "the other half is still live");
        assert_eq!(p.place(100), Some(P), "a freed slot is reused");
        assert_eq!(p.free(P), None);
        assert_eq!(p.free(P + (1 << 20)), Some(P), "an empty pack goes back");
        assert!(p.slots.is_empty());
        assert!(!p.is_pack_address(P));
    }

    proptest! {
        /// Live slots never overlap, stay inside their pack, are aligned, and every pack
        /// comes back once all its slots are freed.
        #[test]
        fn slots_never_overlap(ops in proptest::collection::vec((1u64..=PACKED_MAX, any::<bool>(), any::<u16>()), 1..200)) {
            let mut p = Packs::default();
            let mut live: Vec<(u64, u64)> = Vec::new();
            let mut packs = 0u64;
            for (bytes, alloc, pick) in ops {
                if alloc || live.is_empty() {
                    let base = p.place(bytes).unwrap_or_else(|| {
                        let pack = P + packs * CHUNK_BYTES;
                        packs += 1;
                        p.add(pack);
                        p.place(bytes).expect("an empty pack fits any packed size")
                    });
                    prop_assert_eq!(base % SLOT_ALIGN, 0);
                    let pack = p.find(base).expect("placed").pack;
                    prop_assert!(base + bytes <= pack + CHUNK_BYTES);
                    for &(b, n) in &live {
                        prop_assert!(base + bytes <= b || b + n <= base, "{base:#x}+{bytes} overlaps {b:#x}+{n}");
                    }
                    live.push((base, bytes));
                } else {
                    let (b, _) = live.swap_remove(pick as usize % live.len());
                    p.free(b);
                }
            }
            for (b, _) in live.drain(..) {
                p.free(b);
            }
            prop_assert!(p.slots.is_empty());
            prop_assert!(p.holes.is_empty(), "every pack came back");
        }
    }
}
