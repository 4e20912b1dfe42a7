//! The two ends of one ring. Each end keeps its own index privately and only publishes
//! it: what it reads of the other end's index is checked before use, so a peer that
//! writes nonsense into the shared memory breaks its own channel and nothing else.

use crate::region::{Ring, SLOTS, WORDS};
use std::sync::atomic::{fence, Ordering};

/// The other end wrote an index no ring of [`SLOTS`] slots can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

/// The end that writes slots.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    tail: u32,
}

impl Writer {
    /// Writes `words` into the next slot: `Ok(false)` when the ring is full.
    pub fn push(&mut self, ring: &Ring, words: &[u64; WORDS]) -> Result<bool, Corrupt> {
        let used = self.tail.wrapping_sub(ring.head.0.load(Ordering::Acquire));
        if used > SLOTS {
            return Err(Corrupt);
        }
        if used == SLOTS {
            return Ok(false);
        }
        let slot = &ring.slots[(self.tail % SLOTS) as usize];
        for (w, v) in slot.iter().zip(words) {
            w.store(*v, Ordering::Relaxed);
        }
        self.tail = self.tail.wrapping_add(1);
        ring.tail.0.store(self.tail, Ordering::Release);
        Ok(true)
    }

    /// After a push: whether the reader sleeps (it is marked awake again, so that one
    /// wake-up is sent per sleep).
    pub fn reader_sleeps(ring: &Ring) -> bool {
        // Pairs with the fence in `Reader::sleep_unless_pending`: either the reader sees
        // the new tail, or this sees its mark.
        fence(Ordering::SeqCst);
        ring.sleeping.0.load(Ordering::Relaxed) != 0 && ring.sleeping.0.swap(0, Ordering::AcqRel) != 0
    }
}

/// The end that reads slots.
#[derive(Debug, Default)]
pub(crate) struct Reader {
    head: u32,
}

impl Reader {
    /// Slots written and not yet read.
    pub fn pending(&self, ring: &Ring) -> Result<u32, Corrupt> {
        let n = ring.tail.0.load(Ordering::Acquire).wrapping_sub(self.head);
        if n > SLOTS {
            return Err(Corrupt);
        }
        Ok(n)
    }

    /// The next slot's words, if one was written.
    pub fn pop(&mut self, ring: &Ring) -> Result<Option<[u64; WORDS]>, Corrupt> {
        if self.pending(ring)? == 0 {
            return Ok(None);
        }
        let slot = &ring.slots[(self.head % SLOTS) as usize];
        let words = std::array::from_fn(|i| slot[i].load(Ordering::Relaxed));
        self.head = self.head.wrapping_add(1);
        ring.head.0.store(self.head, Ordering::Release);
        Ok(Some(words))
    }

    /// Marks the reader asleep, unless a slot is pending: returns whether it may sleep
    /// (when it may not, the mark is cleared again).
    pub fn sleep_unless_pending(&self, ring: &Ring) -> Result<bool, Corrupt> {
        ring.sleeping.0.store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.pending(ring)? > 0 {
            ring.sleeping.0.store(0, Ordering::Relaxed);
            return Ok(false);
        }
        Ok(true)
    }

    /// Clears the sleep mark (the reader is awake).
    pub fn awake(ring: &Ring) {
        ring.sleeping.0.store(0, Ordering::Relaxed);
    }
}
