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
        }
    }

    /// Whether it is a pointer or a map.
    pub fn is_pointer(self) -> bool {
        !matches!(self, Reg::Uninit | Reg::Scalar(_))
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
