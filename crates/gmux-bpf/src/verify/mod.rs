//! The verifier: it follows every path of a program from its entry, tracking each
//! register's type and range and the stack's contents ([`state`]), and refuses the
//! program at the first instruction where a path could do something unsafe, with the
//! instruction's number and the reason, as Linux's verifier log does. Paths that meet
//! are kept apart while few, and joined into one state covering them beyond that, so the
//! work stays linear in the program's length.

mod alu;
pub mod state;

use crate::helper::{Arg, Helper, Ret};
use crate::map::{MapDef, MapKind};
use crate::{HookSpec, MAX_INSNS, STACK_BYTES};
use rbpf::ebpf::{self, Insn};
use state::{Range, Reg, State};

/// Distinct states kept apart at one instruction before they are joined.
pub const PATHS_PER_INSN: usize = 8;

/// Why a program was refused: at instruction `insn` (its index in 8-byte slots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The instruction.
    pub insn: usize,
    /// Why.
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "instruction {}: {}", self.insn, self.reason)
    }
}

/// Proves `prog` (eBPF bytecode) safe to run at `hook` with `maps`, or says where and
/// why it is not.
pub fn verify(prog: &[u8], hook: &HookSpec, maps: &[MapDef]) -> Result<(), Refusal> {
    let at = |insn: usize, reason: String| Refusal { insn, reason };
    if prog.is_empty() || !prog.len().is_multiple_of(ebpf::INSN_SIZE) {
        return Err(at(0, format!("{} bytes is not a whole number of 8-byte instructions", prog.len())));
    }
    let insns = ebpf::to_insn_vec(prog);
    if insns.len() > MAX_INSNS {
        return Err(at(MAX_INSNS, format!("{} instructions, more than the {MAX_INSNS} allowed", insns.len())));
    }
    // Every lddw, on a path or not, is a number or one of the program's maps: loading
    // binds the maps without walking.
    let mut pc = 0;
    while pc < insns.len() {
        let i = &insns[pc];
        if i.opc == ebpf::LD_DW_IMM {
            if i.src > 1 {
                return Err(at(pc, format!("lddw with source {}: only numbers (0) and maps (1)", i.src)));
            }
            if i.src == 1 && i.imm as u32 as usize >= maps.len() {
                return Err(at(pc, format!("refers to map {}, but the program has {}", i.imm as u32, maps.len())));
            }
            pc += 1;
        }
        pc += 1;
    }
    // Jumps only go forward, so every path reaches an instruction before any of its
    // successors: one pass in program order sees each instruction with every state
    // that can reach it. Up to PATHS_PER_INSN distinct states are kept apart (a null
    // check's branches, say); beyond, they are joined into one that covers them all.
    let v = Walk { insns: &insns, hook, maps };
    let mut states: Vec<Vec<State>> = vec![Vec::new(); insns.len()];
    states[0].push(State::entry());
    for pc in 0..insns.len() {
        for st in std::mem::take(&mut states[pc]) {
            for (next, s) in v.step(pc, st).map_err(|reason| at(pc, reason))? {
                let at_next = states.get_mut(next).ok_or_else(|| at(pc, "runs past the last instruction (end with exit)".into()))?;
                if at_next.iter().any(|old| old.covers(&s)) {
                    continue;
                }
                at_next.retain(|old| !s.covers(old));
                at_next.push(s);
                if at_next.len() > PATHS_PER_INSN {
                    let joined = at_next.iter().skip(1).fold(at_next[0].clone(), |a, b| a.join(b));
                    *at_next = vec![joined];
                }
            }
        }
    }
    // The VM's own loader checks every instruction's encoding, those no path reaches
    // included.
    if let Err(e) = rbpf::EbpfVmNoData::new(Some(prog)) {
        let text = e.to_string();
        let insn = text.split("insn #").nth(1).and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()).unwrap_or(0);
        let why = text.trim_start_matches("[Verifier] Error: ").split(" (insn #").next().unwrap_or(&text).to_string();
        return Err(at(insn, format!("the VM cannot run it: {why}")));
    }
    Ok(())
}

/// One program being walked.
struct Walk<'a> {
    insns: &'a [Insn],
    hook: &'a HookSpec,
    maps: &'a [MapDef],
}

impl Walk<'_> {
    /// Checks instruction `pc` on a path in state `st`; returns the paths after it.
    fn step(&self, pc: usize, mut st: State) -> Result<Vec<(usize, State)>, String> {
        let i = self.insns.get(pc).ok_or("runs past the last instruction (end with exit)")?;
        if i.dst > 10 || i.src > 10 {
            return Err(format!("register r{} does not exist", i.dst.max(i.src)));
        }
        let class = class_of(i);
        let writes_dst = matches!(class, ebpf::BPF_ALU | ebpf::BPF_ALU64 | ebpf::BPF_LDX) || i.opc == ebpf::LD_DW_IMM;
        if writes_dst && i.dst == 10 {
            return Err("writes r10, the read-only frame pointer".into());
        }
        match class {
            ebpf::BPF_ALU64 | ebpf::BPF_ALU => self.alu(i, &mut st)?,
            ebpf::BPF_LDX => {
                if i.opc & 0xe0 != ebpf::BPF_MEM {
                    return Err(format!("unknown opcode {:#04x}", i.opc));
                }
                let size = width(i.opc);
                let r = self.access(&st, i.src, i.off, size, None)?;
                st.regs[i.dst as usize] = r;
            }
            ebpf::BPF_ST | ebpf::BPF_STX => {
                let size = width(i.opc);
                let mode = i.opc & 0xe0;
                let value = if class == ebpf::BPF_ST {
                    if mode != ebpf::BPF_MEM {
                        return Err(format!("unknown opcode {:#04x}", i.opc));
                    }
                    Reg::Scalar(Range::exactly(i.imm as i64 as u64))
                } else {
                    read(&st, i.src)?
                };
                if mode == ebpf::BPF_XADD {
                    return Err("atomic operations are not supported: update a map value with a load and a store".into());
                }
                if mode != ebpf::BPF_MEM {
                    return Err(format!("unknown opcode {:#04x}", i.opc));
                }
                self.access(&st, i.dst, i.off, size, Some(value))?;
                if let Reg::Stack(o) = st.regs[i.dst as usize] {
                    st.store_stack(o + i64::from(i.off), size, value);
                }
            }
            ebpf::BPF_LD if i.opc == ebpf::LD_DW_IMM => {
                let hi = self.insns.get(pc + 1).filter(|n| n.opc == 0).ok_or("lddw without its second half")?;
                st.regs[i.dst as usize] = match i.src {
                    0 => Reg::Scalar(Range::exactly((i.imm as u32 as u64) | (hi.imm as u32 as u64) << 32)),
                    1 if (i.imm as u32 as usize) < self.maps.len() => Reg::Map(i.imm as u32),
                    1 => return Err(format!("refers to map {}, but the program has {}", i.imm as u32, self.maps.len())),
                    s => return Err(format!("lddw with source {s}: only numbers (0) and maps (1)")),
                };
                return Ok(vec![(pc + 2, st)]);
            }
            ebpf::BPF_LD => return Err("packet loads (ld_abs, ld_ind) have no packet here".into()),
            ebpf::BPF_JMP | ebpf::BPF_JMP32 => return self.jump(pc, i, st),
            _ => return Err(format!("unknown opcode {:#04x}", i.opc)),
        }
        Ok(vec![(pc + 1, st)])
    }

    fn alu(&self, i: &Insn, st: &mut State) -> Result<(), String> {
        let op = i.opc & 0xf0;
        if op > ebpf::BPF_END {
            return Err(format!("unknown opcode {:#04x}", i.opc));
        }
        let wide = class_of(i) == ebpf::BPF_ALU64;
        // NEG and byte swaps take no source (a byte swap's X bit means big-endian).
        let src = if matches!(op, ebpf::BPF_NEG | ebpf::BPF_END) {
            Reg::NUMBER
        } else if i.opc & ebpf::BPF_X != 0 {
            read(st, i.src)?
        } else if wide {
            Reg::Scalar(Range::exactly(i.imm as i64 as u64))
        } else {
            Reg::Scalar(Range::exactly(u64::from(i.imm as u32)))
        };
        let dst = if op == ebpf::BPF_MOV { Reg::NUMBER } else { read(st, i.dst)? };
        if matches!(op, ebpf::BPF_NEG | ebpf::BPF_ARSH | ebpf::BPF_END) {
            if dst.is_pointer() {
                return Err(format!("{} on {}", op_name(op), dst.what()));
            }
            st.regs[i.dst as usize] = Reg::NUMBER;
            return Ok(());
        }
        st.regs[i.dst as usize] = if wide {
            alu::alu64(op, dst, src)?
        } else {
            match (dst, src) {
                (Reg::Scalar(a), Reg::Scalar(b)) => Reg::Scalar(alu::alu32(i, a, b)?),
                _ => return Err(format!("32-bit arithmetic on {}", if dst.is_pointer() { dst } else { src }.what())),
            }
        };
        Ok(())
    }

    /// Checks an access of `size` bytes at `reg + off`: a load (`store` is `None`,
    /// returns what it reads) or a store of `store`.
    fn access(&self, st: &State, reg: u8, off: i16, size: i64, store: Option<Reg>) -> Result<Reg, String> {
        let p = read(st, reg)?;
        let off = i64::from(off);
        if let Some(v) = store.filter(|v| v.is_pointer() && !matches!(p, Reg::Stack(_))) {
            return Err(format!("stores {} outside the stack (pointers never leave the program)", v.what()));
        }
        match p {
            Reg::Stack(o) => {
                let at = o + off;
                if store.is_some_and(Reg::is_pointer) && size != 8 {
                    return Err(format!("stores part of {} ({size} of its 8 bytes)", store.map_or("", Reg::what)));
                }
                if at < -STACK_BYTES || at + size > 0 {
                    return Err(format!("stack access at fp{at} of {size} bytes is outside the {STACK_BYTES}-byte stack"));
                }
                if at % size != 0 {
                    return Err(format!("misaligned stack access at fp{at} of {size} bytes"));
                }
                if store.is_some() {
                    Ok(Reg::Uninit)
                } else {
                    st.load_stack(at, size)
                }
            }
            Reg::Ctx(o) => {
                let at = o + off;
                let end = at + size;
                if at < 0 || end > i64::from(self.hook.ctx_size) || at % size != 0 {
                    return Err(format!(
                        "context access at {at} of {size} bytes: the {} context has {} bytes, accessed aligned",
                        self.hook.name, self.hook.ctx_size
                    ));
                }
                if store.is_some() && !self.hook.writable.iter().any(|&(a, b)| i64::from(a) <= at && end <= i64::from(b)) {
                    return Err(format!("writes context bytes {at}..{end}, read-only at the {} hook", self.hook.name));
                }
                Ok(Reg::NUMBER)
            }
            Reg::Value { map, lo, hi } => {
                let value_size = i64::from(self.maps[map as usize].value_size);
                if lo + off < 0 || hi + off + size > value_size {
                    return Err(format!("map {map} value access at {}..{} of {size} bytes is outside its {value_size} bytes", lo + off, hi + off));
                }
                Ok(Reg::NUMBER)
            }
            other => Err(format!("dereferences r{reg}, {}", other.what())),
        }
    }

    fn jump(&self, pc: usize, i: &Insn, mut st: State) -> Result<Vec<(usize, State)>, String> {
        let op = i.opc & 0xf0;
        if op == ebpf::BPF_EXIT && class_of(i) == ebpf::BPF_JMP {
            return match st.regs[0] {
                Reg::Scalar(_) => Ok(vec![]),
                r => Err(format!("exits with r0 {}: return a number", r.what())),
            };
        }
        if op == ebpf::BPF_CALL && class_of(i) == ebpf::BPF_JMP {
            if i.src != 0 {
                return Err("calls a function of the program: inline it (__always_inline)".into());
            }
            self.call(i.imm, &mut st)?;
            return Ok(vec![(pc + 1, st)]);
        }
        if class_of(i) == ebpf::BPF_JMP32 && matches!(op, ebpf::BPF_JA | ebpf::BPF_CALL | ebpf::BPF_EXIT) || op > ebpf::BPF_JSLE {
            return Err(format!("unknown opcode {:#04x}", i.opc));
        }
        if i.off < 0 {
            return Err(format!("jumps back to instruction {}: loops must be unrolled", pc as i64 + 1 + i64::from(i.off)));
        }
        let target = pc + 1 + i.off as usize;
        if target >= self.insns.len() {
            return Err(format!("jumps to instruction {target}, past the end"));
        }
        if target > 0 && self.insns[target - 1].opc == ebpf::LD_DW_IMM && self.insns[target].opc == 0 {
            return Err(format!("jumps into the middle of the lddw at {}", target - 1));
        }
        if op == ebpf::BPF_JA {
            return Ok(vec![(target, st)]);
        }
        let dst = read(&st, i.dst)?;
        let src = if i.opc & ebpf::BPF_X != 0 { read(&st, i.src)? } else { Reg::Scalar(Range::exactly(i.imm as i64 as u64)) };
        let wide = class_of(i) == ebpf::BPF_JMP;
        let mut out = Vec::with_capacity(2);
        match (dst, src) {
            (Reg::ValueOrNull(map), Reg::Scalar(r)) if wide && r.known() == Some(0) && (op == ebpf::BPF_JEQ || op == ebpf::BPF_JNE) => {
                let value = Reg::Value { map, lo: 0, hi: 0 };
                let null = Reg::Scalar(Range::exactly(0));
                let (on_jump, on_fall) = if op == ebpf::BPF_JEQ { (null, value) } else { (value, null) };
                let mut jumped = st.clone();
                jumped.regs[i.dst as usize] = on_jump;
                st.regs[i.dst as usize] = on_fall;
                out.push((target, jumped));
                out.push((pc + 1, st));
            }
            (Reg::Scalar(r), Reg::Scalar(k)) => match k.known().filter(|_| wide) {
                Some(k) => {
                    for (taken, next) in [(true, target), (false, pc + 1)] {
                        if let Some(r) = alu::refine(op, r, k, taken) {
                            let mut s = st.clone();
                            s.regs[i.dst as usize] = Reg::Scalar(r);
                            out.push((next, s));
                        }
                    }
                }
                None => {
                    out.push((target, st.clone()));
                    out.push((pc + 1, st));
                }
            },
            (Reg::ValueOrNull(_), _) => return Err("checks a map value that may be null other than with a 64-bit == or != against 0".into()),
            (a, b) => return Err(format!("compares {} with {}: only numbers, and map values with 0", a.what(), b.what())),
        }
        Ok(out)
    }

    /// Checks a call of helper `id` and applies it: `r1`-`r5` clobbered, `r0` its result.
    fn call(&self, id: i32, st: &mut State) -> Result<(), String> {
        let h = Helper::from_id(id).ok_or_else(|| format!("calls helper {id}, which does not exist"))?;
        if !self.hook.helpers.contains(&h) {
            return Err(format!("calls {} (helper {id}), not allowed at the {} hook", h.name(), self.hook.name));
        }
        let mut map = None;
        for (n, arg) in h.args().iter().enumerate() {
            let r = n as u8 + 1;
            let v = read(st, r).map_err(|e| format!("{} argument {}: {e}", h.name(), n + 1))?;
            let bad = |want: &str| format!("{} argument {} (r{r}) must be {want}, not {}", h.name(), n + 1, v.what());
            let stack_bytes = |size: u32| match v {
                Reg::Stack(o) if o >= -STACK_BYTES && o + i64::from(size) <= 0 => st.initialized(o, i64::from(size)),
                _ => Err(bad(&format!("a pointer to {size} bytes of stack"))),
            };
            match arg {
                Arg::Map => match v {
                    Reg::Map(m) => {
                        let def = self.maps[m as usize];
                        let ring = def.kind == MapKind::RingBuf;
                        if ring != (h == Helper::RingbufOutput) {
                            let want = if ring {
                                "ringbuf_output (a ring buffer's records are not reached by key)"
                            } else {
                                "the map helpers (ringbuf_output takes a ring buffer)"
                            };
                            return Err(format!(
                                "{} argument 1 (r1) is map {m}, a {} map: it takes {want}",
                                h.name(),
                                if ring { "ring buffer" } else { "keyed" }
                            ));
                        }
                        map = Some(def);
                    }
                    _ => return Err(bad("a map")),
                },
                Arg::Key => stack_bytes(map.expect("a map comes first").key_size)?,
                Arg::Value => stack_bytes(map.expect("a map comes first").value_size)?,
                Arg::Bytes => {
                    let size = match st.regs[r as usize + 1] {
                        Reg::Scalar(s) => s.known().filter(|s| (1..=256).contains(s)),
                        _ => None,
                    };
                    let size = size.ok_or_else(|| format!("{} argument {} must be a constant size from 1 to 256", h.name(), n + 2))?;
                    stack_bytes(size as u32)?;
                }
                Arg::Size | Arg::Scalar if v.is_pointer() => return Err(bad("a number")),
                Arg::Size | Arg::Scalar => {}
            }
        }
        let r0 = match h.ret() {
            Ret::Scalar => Reg::NUMBER,
            Ret::ValueOrNull => match st.regs[1] {
                Reg::Map(m) => Reg::ValueOrNull(m),
                _ => unreachable!("checked above"),
            },
        };
        st.regs[0] = r0;
        for r in 1..=5 {
            st.regs[r] = Reg::Uninit;
        }
        Ok(())
    }
}

/// Register `r`, which must be initialized.
fn read(st: &State, r: u8) -> Result<Reg, String> {
    match st.regs[r as usize] {
        Reg::Uninit => Err(format!("reads r{r}, which is not initialized")),
        Reg::Mixed => Err(format!("reads r{r}, which holds different kinds on the paths that meet here")),
        v => Ok(v),
    }
}

/// Bytes a load or store of opcode `opc` moves.
fn width(opc: u8) -> i64 {
    match opc & 0x18 {
        ebpf::BPF_B => 1,
        ebpf::BPF_H => 2,
        ebpf::BPF_W => 4,
        _ => 8,
    }
}

/// An instruction's class (`ebpf::BPF_ALU`, `BPF_JMP`, ...).
fn class_of(i: &Insn) -> u8 {
    i.opc & 0x07
}

fn op_name(op: u8) -> &'static str {
    match op {
        ebpf::BPF_NEG => "negation",
        ebpf::BPF_ARSH => "arithmetic shift",
        _ => "byte swap",
    }
}
