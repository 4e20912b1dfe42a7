//! What the verifier knows at one instruction of one path: each register's type and,
//! for numbers, their unsigned range; the stack's initialized bytes and spilled
//! registers.

use crate::STACK_BYTES;

/// An unsigned range of a number, `lo..=hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// Smallest value.
    pub lo: u64,
    /// Largest value.
    pub hi: u64,
}

impl Range {
    /// Any number.
    pub const ANY: Range = Range { lo: 0, hi: u64::MAX };

    /// Exactly `v`.
    pub fn exactly(v: u64) -> Range {
        Range { lo: v, hi: v }
    }

    /// The value, if known.
    pub fn known(self) -> Option<u64> {
        (self.lo == self.hi).then_some(self.lo)
    }

    /// The low 32 bits, as 32-bit operations leave them.
    pub fn low32(self) -> Range {
        if self.hi <= u64::from(u32::MAX) {
            self
        } else {
            Range { lo: 0, hi: u64::from(u32::MAX) }
        }
    }
}

/// A register's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reg {
    /// Never written on this path (or clobbered by a call).
    Uninit,
    /// A number in a range.
    Scalar(Range),
    /// The context, plus a known offset.
    Ctx(i64),
    /// The frame pointer `r10`, plus a known offset (negative inside the stack).
    Stack(i64),
    /// A map (by index).
    Map(u32),
    /// A value of a map, plus an offset in a range (signed bounds).
    Value {
        /// The map.
        map: u32,
        /// Least offset.
        lo: i64,
        /// Greatest offset.
        hi: i64,
    },
    /// A map lookup's result before its null check.
    ValueOrNull(u32),
    /// Different kinds on the paths that meet here: unusable.
    Mixed,
}

impl Reg {
    /// Any number.
    pub const NUMBER: Reg = Reg::Scalar(Range::ANY);

    /// A short description for messages.
    pub fn what(self) -> &'static str {
        match self {
            Reg::Uninit => "not initialized",
            Reg::Scalar(_) => "a number",
            Reg::Ctx(_) => "a pointer to the context",
            Reg::Stack(_) => "a pointer to the stack",
            Reg::Map(_) => "a map",
            Reg::Value { .. } => "a pointer to a map value",
            Reg::ValueOrNull(_) => "a map value that may be null (check it first)",
            Reg::Mixed => "of different kinds on the paths that meet here",
        }
    }

    /// Whether it is a pointer or a map.
    pub fn is_pointer(self) -> bool {
        !matches!(self, Reg::Uninit | Reg::Scalar(_) | Reg::Mixed)
    }

    /// What holds on either of two paths that meet.
    pub fn join(self, o: Reg) -> Reg {
        match (self, o) {
            (a, b) if a == b => a,
            (Reg::Uninit, _) | (_, Reg::Uninit) => Reg::Uninit,
            (Reg::Scalar(a), Reg::Scalar(b)) => Reg::Scalar(Range { lo: a.lo.min(b.lo), hi: a.hi.max(b.hi) }),
            (Reg::Value { map, lo, hi }, Reg::Value { map: m, lo: l, hi: h }) if map == m => Reg::Value { map, lo: lo.min(l), hi: hi.max(h) },
            _ => Reg::Mixed,
        }
    }

    /// Whether everything `o` allows holds under `self` (so a path that was safe from
    /// `self` is safe from `o`).
    pub fn covers(self, o: Reg) -> bool {
        match (self, o) {
            (a, b) if a == b => true,
            // A path safe from here never read it.
            (Reg::Uninit | Reg::Mixed, _) => true,
            (Reg::Scalar(a), Reg::Scalar(b)) => a.lo <= b.lo && b.hi <= a.hi,
            (Reg::Value { map, lo, hi }, Reg::Value { map: m, lo: l, hi: h }) => map == m && lo <= l && h <= hi,
            _ => false,
        }
    }
}

/// One 8-byte slot of the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Bytes, bit `i` set where byte `i` was written.
    Bytes(u8),
    /// A whole register stored at the slot.
    Spill(Reg),
}

/// The state of one path at one instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// `r0` to `r10`.
    pub regs: [Reg; 11],
    /// The stack, slot 0 at `r10 - 8`.
    pub stack: [Slot; (STACK_BYTES / 8) as usize],
}

impl State {
    /// At a program's entry: `r1` the context, `r10` the frame pointer.
    pub fn entry() -> State {
        let mut regs = [Reg::Uninit; 11];
        regs[1] = Reg::Ctx(0);
        regs[10] = Reg::Stack(0);
        State { regs, stack: [Slot::Bytes(0); (STACK_BYTES / 8) as usize] }
    }

    /// The slot and the first byte in it of stack offset `off` (negative).
    fn slot_of(off: i64) -> (usize, u32) {
        let from_top = (-off - 1) as usize;
        let byte = 7 - (from_top % 8);
        (from_top / 8, byte as u32)
    }

    /// Stores `size` bytes of `value` at stack offset `off` (in bounds: checked by the
    /// caller). An aligned 8-byte store keeps the register whole.
    pub fn store_stack(&mut self, off: i64, size: i64, value: Reg) {
        if size == 8 && off % 8 == 0 {
            self.stack[Self::slot_of(off).0] = Slot::Spill(value);
            return;
        }
        for b in off..off + size {
            let (slot, byte) = Self::slot_of(b);
            let mask = match self.stack[slot] {
                Slot::Bytes(m) => m,
                // Part of a spilled number stays written; part of a spilled pointer
                // is no longer readable.
                Slot::Spill(Reg::Scalar(_)) => 0xff,
                Slot::Spill(_) => 0,
            };
            self.stack[slot] = Slot::Bytes(mask | 1 << byte);
        }
    }

    /// Loads `size` bytes at stack offset `off`: a spilled register read whole, else a
    /// number. `Err` says why not.
    pub fn load_stack(&self, off: i64, size: i64) -> Result<Reg, String> {
        if size == 8 && off % 8 == 0 {
            if let Slot::Spill(r) = self.stack[Self::slot_of(off).0] {
                return Ok(r);
            }
        }
        self.initialized(off, size)?;
        Ok(Reg::NUMBER)
    }

    /// What holds on either of two paths that meet.
    pub fn join(&self, o: &State) -> State {
        let mut out = self.clone();
        for (r, b) in out.regs.iter_mut().zip(o.regs) {
            *r = r.join(b);
        }
        for (s, b) in out.stack.iter_mut().zip(o.stack) {
            *s = match (*s, b) {
                (Slot::Spill(x), Slot::Spill(y)) if !matches!(x.join(y), Reg::Mixed | Reg::Uninit) => Slot::Spill(x.join(y)),
                (x, y) => Slot::Bytes(written(x) & written(y)),
            };
        }
        out
    }

    /// Whether everything `o` allows holds under `self` (see [`Reg::covers`]).
    pub fn covers(&self, o: &State) -> bool {
        self.regs.iter().zip(&o.regs).all(|(a, b)| a.covers(*b))
            && self.stack.iter().zip(&o.stack).all(|(a, b)| match (*a, *b) {
                (Slot::Spill(x), Slot::Spill(y)) => x.covers(y),
                (Slot::Spill(_), Slot::Bytes(_)) => false,
                (Slot::Bytes(m), y) => m & !written(y) == 0,
            })
    }

    /// Whether `size` bytes at stack offset `off` are all written, as numbers.
    pub fn initialized(&self, off: i64, size: i64) -> Result<(), String> {
        for b in off..off + size {
            let (slot, byte) = Self::slot_of(b);
            match self.stack[slot] {
                Slot::Bytes(m) if m & (1 << byte) != 0 => {}
                Slot::Spill(Reg::Scalar(_)) => {}
                Slot::Spill(r) => return Err(format!("reads part of {} spilled at fp{}", r.what(), b - b.rem_euclid(8))),
                Slot::Bytes(_) => return Err(format!("reads stack byte fp{b}, which is not initialized")),
            }
        }
        Ok(())
    }
}

/// The bytes of a slot readable as numbers.
fn written(s: Slot) -> u8 {
    match s {
        Slot::Bytes(m) => m,
        Slot::Spill(Reg::Scalar(_)) => 0xff,
        Slot::Spill(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reg() -> impl Strategy<Value = Reg> {
        let range = (any::<u64>(), any::<u64>()).prop_map(|(a, b)| Range { lo: a.min(b), hi: a.max(b) });
        prop_oneof![
            Just(Reg::Uninit),
            Just(Reg::Mixed),
            range.prop_map(Reg::Scalar),
            (-16i64..16).prop_map(Reg::Ctx),
            (-16i64..16).prop_map(Reg::Stack),
            (0u32..2).prop_map(Reg::Map),
            (0u32..2, -8i64..8, 0i64..8).prop_map(|(map, lo, w)| Reg::Value { map, lo, hi: lo + w }),
            (0u32..2).prop_map(Reg::ValueOrNull),
        ]
    }

    proptest! {
        #[test]
        fn a_join_covers_both_paths_and_covering_is_reflexive(a in reg(), b in reg(), sa in any::<[u8; 4]>(), sb in any::<[u8; 4]>()) {
            let j = a.join(b);
            prop_assert!(j.covers(a) && j.covers(b), "{j:?} from {a:?} and {b:?}");
            prop_assert!(a.covers(a));
            let mut x = State::entry();
            let mut y = State::entry();
            x.regs[2] = a;
            y.regs[2] = b;
            for i in 0..4 {
                x.stack[i] = Slot::Bytes(sa[i]);
                y.stack[i] = if sb[i] % 3 == 0 { Slot::Spill(b) } else { Slot::Bytes(sb[i]) };
            }
            let js = x.join(&y);
            prop_assert!(js.covers(&x) && js.covers(&y));
        }
    }
}
