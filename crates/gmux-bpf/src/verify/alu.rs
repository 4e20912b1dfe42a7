//! Arithmetic on what the verifier knows: numbers' ranges through each operation, the
//! pointer arithmetic it allows, and what a conditional jump tells on each branch.

use super::state::{Range, Reg};
use rbpf::ebpf::{self, Insn};

/// Largest offset a pointer may be moved by at once (bounds stay far from overflow).
const MAX_MOVE: u64 = 1 << 29;

/// The range of `op` (an `ebpf::BPF_*` operation) on 64-bit numbers in `a` and `b`.
pub fn scalar(op: u8, a: Range, b: Range) -> Range {
    let (ka, kb) = (a.known(), b.known());
    let exact = |f: fn(u64, u64) -> Option<u64>| match (ka, kb) {
        (Some(x), Some(y)) => f(x, y).map_or(Range::ANY, Range::exactly),
        _ => Range::ANY,
    };
    match op {
        ebpf::BPF_ADD => match (a.lo.checked_add(b.lo), a.hi.checked_add(b.hi)) {
            (Some(lo), Some(hi)) => Range { lo, hi },
            _ => exact(|x, y| Some(x.wrapping_add(y))),
        },
        ebpf::BPF_SUB => match (a.lo.checked_sub(b.hi), a.hi.checked_sub(b.lo)) {
            (Some(lo), Some(hi)) => Range { lo, hi },
            _ => exact(|x, y| Some(x.wrapping_sub(y))),
        },
        ebpf::BPF_MUL => match (a.lo.checked_mul(b.lo), a.hi.checked_mul(b.hi)) {
            (Some(lo), Some(hi)) => Range { lo, hi },
            _ => exact(|x, y| Some(x.wrapping_mul(y))),
        },
        ebpf::BPF_DIV if b.lo > 0 => Range { lo: a.lo / b.hi, hi: a.hi / b.lo },
        ebpf::BPF_DIV if kb == Some(0) => Range::exactly(0),
        ebpf::BPF_MOD if b.lo > 0 => Range { lo: 0, hi: a.hi.min(b.hi - 1) },
        ebpf::BPF_MOD if kb == Some(0) => a,
        ebpf::BPF_AND => Range { lo: 0, hi: a.hi.min(b.hi) },
        ebpf::BPF_OR => exact(|x, y| Some(x | y)),
        ebpf::BPF_XOR => exact(|x, y| Some(x ^ y)),
        ebpf::BPF_RSH => match kb {
            Some(k) if k < 64 => Range { lo: a.lo >> k, hi: a.hi >> k },
            _ => Range::ANY,
        },
        ebpf::BPF_LSH => match kb {
            Some(k) if k < 64 && a.hi.leading_zeros() as u64 >= k => Range { lo: a.lo << k, hi: a.hi << k },
            _ => Range::ANY,
        },
        ebpf::BPF_MOV => b,
        _ => Range::ANY,
    }
}

/// The range of 32-bit operation `i` on numbers in `a` (destination) and `b`, as the
/// VM runs it: shift counts taken modulo 32, a remainder by 0 leaving all 64 bits of
/// the destination, and a register move that its compiled code does not truncate.
pub fn alu32(i: &Insn, a: Range, b: Range) -> Result<Range, String> {
    let op = i.opc & 0xf0;
    let from_reg = i.opc & ebpf::BPF_X != 0;
    Ok(match op {
        ebpf::BPF_MOV if from_reg && b.hi > u64::from(u32::MAX) => {
            if i.dst != i.src {
                return Err(format!(
                    "mov32 r{}, r{} of a number that may not fit 32 bits: compiled, the move keeps the upper half; mask it first (& 0xffffffff)",
                    i.dst, i.src
                ));
            }
            // Loading turns `mov32 rN, rN` into `and32 rN, 0xffffffff`, which truncates.
            b.low32()
        }
        ebpf::BPF_MOD if b.low32().lo == 0 => Range { lo: 0, hi: a.hi.max(u64::from(u32::MAX)) },
        ebpf::BPF_LSH | ebpf::BPF_RSH => {
            let count = b.known().map_or(Range::ANY, |k| Range::exactly(k & 31));
            scalar(op, a.low32(), count).low32()
        }
        _ => scalar(op, a.low32(), b.low32()).low32(),
    })
}

/// `dst op= src` on 64 bits, where either may be a pointer. `Err` says why the
/// operation is refused.
pub fn alu64(op: u8, dst: Reg, src: Reg) -> Result<Reg, String> {
    if op == ebpf::BPF_MOV {
        return Ok(src);
    }
    match (dst, src) {
        (Reg::Scalar(a), Reg::Scalar(b)) => Ok(Reg::Scalar(scalar(op, a, b))),
        (p, Reg::Scalar(b)) if op == ebpf::BPF_ADD || op == ebpf::BPF_SUB => moved(p, b, op == ebpf::BPF_SUB),
        (Reg::Scalar(a), p) if op == ebpf::BPF_ADD && p.is_pointer() => moved(p, a, false),
        (p, q) => {
            let which = if p.is_pointer() { p } else { q };
            Err(format!("arithmetic other than adding a number to a pointer, on {}", which.what()))
        }
    }
}

/// Pointer `p` moved by a number in `by` (backwards if `back`).
fn moved(p: Reg, by: Range, back: bool) -> Result<Reg, String> {
    // A known number moves by its signed value (`r2 += -4`); a range, by its bounds.
    let (lo, hi) = match by.known() {
        Some(k) if (k as i64).unsigned_abs() <= MAX_MOVE => {
            let k = if back { -(k as i64) } else { k as i64 };
            (k, k)
        }
        None if by.hi <= MAX_MOVE => {
            if back {
                (-(by.hi as i64), -(by.lo as i64))
            } else {
                (by.lo as i64, by.hi as i64)
            }
        }
        _ => return Err(format!("moves {} by a number that may reach {} (bound it first)", p.what(), by.hi)),
    };
    match p {
        Reg::Ctx(_) | Reg::Stack(_) if lo != hi => Err(format!("moves {} by a number not known exactly", p.what())),
        Reg::Ctx(o) => Ok(Reg::Ctx(o + lo)),
        Reg::Stack(o) => Ok(Reg::Stack(o + lo)),
        Reg::Value { map, lo: a, hi: b } if (a + lo).abs() < MAX_MOVE as i64 * 2 && (b + hi).abs() < MAX_MOVE as i64 * 2 => {
            Ok(Reg::Value { map, lo: a + lo, hi: b + hi })
        }
        Reg::Value { .. } => Err("moves a pointer to a map value too far".into()),
        _ => Err(format!("arithmetic on {}", p.what())),
    }
}

/// What a conditional jump `dst op k` tells of an unsigned range `r` on the branch
/// taken (`taken`) or not; `None`: that branch is never taken.
pub fn refine(op: u8, r: Range, k: u64, taken: bool) -> Option<Range> {
    // Each operation as the range where it holds: `lo..=hi` (inclusive), or
    // everything but `k` for JNE.
    let holds = |lo: u64, hi: u64| {
        let (lo, hi) = (r.lo.max(lo), r.hi.min(hi));
        (lo <= hi).then_some(Range { lo, hi })
    };
    let (op, taken) = match op {
        ebpf::BPF_JNE => (ebpf::BPF_JEQ, !taken),
        _ => (op, taken),
    };
    match (op, taken) {
        (ebpf::BPF_JEQ, true) => holds(k, k),
        (ebpf::BPF_JEQ, false) => (r.known() != Some(k)).then_some(r),
        (ebpf::BPF_JGT, true) | (ebpf::BPF_JLE, false) => k.checked_add(1).and_then(|k1| holds(k1, u64::MAX)),
        (ebpf::BPF_JGT, false) | (ebpf::BPF_JLE, true) => holds(0, k),
        (ebpf::BPF_JGE, true) | (ebpf::BPF_JLT, false) => holds(k, u64::MAX),
        (ebpf::BPF_JGE, false) | (ebpf::BPF_JLT, true) => k.checked_sub(1).and_then(|k1| holds(0, k1)),
        _ => Some(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `r1 op= r2` on `x` and `y` (class `BPF_ALU64` or `BPF_ALU`), run by rbpf's
    /// interpreter and, on x86-64, its JIT: what each leaves in r1.
    fn run(class: u8, op: u8, x: u64, y: u64) -> Vec<u64> {
        let lddw = |dst: u8, v: u64| {
            let lo = Insn { opc: ebpf::LD_DW_IMM, dst, src: 0, off: 0, imm: v as u32 as i32 };
            let hi = Insn { opc: 0, dst: 0, src: 0, off: 0, imm: (v >> 32) as u32 as i32 };
            [lo.to_vec(), hi.to_vec()].concat()
        };
        let insn = |opc, dst, src| Insn { opc, dst, src, off: 0, imm: 0 }.to_vec();
        let prog = [lddw(1, x), lddw(2, y), insn(class | op | ebpf::BPF_X, 1, 2), insn(ebpf::MOV64_REG, 0, 1), insn(ebpf::EXIT, 0, 0)].concat();
        #[allow(unused_mut)]
        let mut vm = rbpf::EbpfVmNoData::new(Some(&prog)).expect("a valid program");
        #[allow(unused_mut)]
        let mut out = vec![vm.execute_program().expect("runs")];
        #[cfg(target_arch = "x86_64")]
        {
            vm.jit_compile().expect("compiles");
            // SAFETY: the program was just compiled, and it touches no memory.
            out.push(unsafe { vm.execute_program_jit() }.expect("runs"));
        }
        out
    }

    /// A range and a number in it: small, near a power of two, or anywhere.
    fn member() -> impl Strategy<Value = (Range, u64)> {
        let edge = prop_oneof![0u64..70, (0u32..64, -3i64..3).prop_map(|(k, d)| (1u64 << k).wrapping_add(d as u64)), any::<u64>()];
        (edge.clone(), edge.clone(), edge).prop_map(|(a, b, c)| {
            let mut v = [a, b, c];
            v.sort_unstable();
            (Range { lo: v[0], hi: v[2] }, v[1])
        })
    }

    const OPS: [u8; 11] = [
        ebpf::BPF_ADD,
        ebpf::BPF_SUB,
        ebpf::BPF_MUL,
        ebpf::BPF_DIV,
        ebpf::BPF_MOD,
        ebpf::BPF_AND,
        ebpf::BPF_OR,
        ebpf::BPF_XOR,
        ebpf::BPF_LSH,
        ebpf::BPF_RSH,
        ebpf::BPF_ARSH,
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]

        /// The verifier's range of each operation holds what the VM computes, in its
        /// interpreter and its JIT, for any operands in the ranges it started from.
        #[test]
        fn the_range_of_an_operation_holds_what_the_vm_computes((a, x) in member(), (b, y) in member(), op in 0usize..OPS.len(), wide in any::<bool>()) {
            let op = OPS[op];
            if wide {
                let r = scalar(op, a, b);
                for v in run(ebpf::BPF_ALU64, op, x, y) {
                    prop_assert!(r.lo <= v && v <= r.hi, "{op:#x} of {x} in {a:?} and {y} in {b:?} is {v}, outside {r:?}");
                }
            } else {
                let i = Insn { opc: ebpf::BPF_ALU | op | ebpf::BPF_X, dst: 1, src: 2, off: 0, imm: 0 };
                let r = alu32(&i, a, b).expect("no move");
                for v in run(ebpf::BPF_ALU, op, x, y) {
                    prop_assert!(r.lo <= v && v <= r.hi, "32-bit {op:#x} of {x} in {a:?} and {y} in {b:?} is {v}, outside {r:?}");
                }
            }
        }

        /// Each branch of a conditional jump keeps every number that takes it.
        #[test]
        fn a_branch_keeps_every_number_that_takes_it((r, x) in member(), (_, k) in member(), op in 0usize..6) {
            let op = [ebpf::BPF_JEQ, ebpf::BPF_JNE, ebpf::BPF_JGT, ebpf::BPF_JGE, ebpf::BPF_JLT, ebpf::BPF_JLE][op];
            let taken = match op {
                ebpf::BPF_JEQ => x == k,
                ebpf::BPF_JNE => x != k,
                ebpf::BPF_JGT => x > k,
                ebpf::BPF_JGE => x >= k,
                ebpf::BPF_JLT => x < k,
                _ => x <= k,
            };
            let branch = refine(op, r, k, taken);
            prop_assert!(branch.is_some_and(|b| b.lo <= x && x <= b.hi), "{op:#x} {k}: {x} in {r:?} takes the branch {taken}, whose range is {branch:?}");
        }
    }

    #[test]
    fn ranges_follow_the_operations_and_give_up_on_overflow() {
        let r = |lo, hi| Range { lo, hi };
        assert_eq!(scalar(ebpf::BPF_ADD, r(1, 5), r(10, 10)), r(11, 15));
        assert_eq!(scalar(ebpf::BPF_AND, Range::ANY, r(63, 63)), r(0, 63));
        assert_eq!(scalar(ebpf::BPF_MOD, Range::ANY, r(10, 10)), r(0, 9));
        assert_eq!(scalar(ebpf::BPF_DIV, r(7, 7), r(0, 0)), r(0, 0), "x / 0 is 0");
        assert_eq!(scalar(ebpf::BPF_MOD, r(7, 7), r(0, 0)), r(7, 7), "x % 0 is x");
        assert_eq!(scalar(ebpf::BPF_ADD, r(1, u64::MAX), r(1, 1)), Range::ANY);
        assert_eq!(scalar(ebpf::BPF_LSH, r(0, 3), r(4, 4)), r(0, 48));
    }

    #[test]
    fn a_jump_bounds_each_branch() {
        let any = Range::ANY;
        assert_eq!(refine(ebpf::BPF_JLT, any, 16, true), Some(Range { lo: 0, hi: 15 }));
        assert_eq!(refine(ebpf::BPF_JLT, any, 16, false), Some(Range { lo: 16, hi: u64::MAX }));
        assert_eq!(refine(ebpf::BPF_JGT, Range { lo: 0, hi: 9 }, 9, true), None, "never taken");
        assert_eq!(refine(ebpf::BPF_JNE, any, 3, false), Some(Range::exactly(3)));
        assert_eq!(refine(ebpf::BPF_JEQ, Range::exactly(3), 3, false), None);
    }
}
