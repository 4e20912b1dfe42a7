//! What the verifier's tests share: a hook, a map, an assembler for programs written as
//! text, and a checked interpreter (rbpf's) to run what the verifier accepts.

#![allow(dead_code)]

use gmux_bpf::{Helper, HookSpec, Map, MapDef, MapKind};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rbpf::ebpf::Insn;
use std::cell::RefCell;
use std::rc::Rc;

/// A hook with a 16-byte context whose second 8 bytes are writable, and every helper.
pub const HOOK: HookSpec = HookSpec { name: "test", ctx_size: 16, writable: &[(8, 16)], helpers: &Helper::ALL };

/// The same context, without `trace`.
pub const NO_TRACE: HookSpec =
    HookSpec { name: "quiet", ctx_size: 16, writable: &[(8, 16)], helpers: &[Helper::MapLookup, Helper::MapUpdate, Helper::MapDelete, Helper::Now] };

/// One map: 4-byte keys, 16-byte values, [`ENTRIES`] of them (an array).
pub const MAPS: &[MapDef] = &[MapDef { kind: MapKind::Array, key_size: 4, value_size: 16, entries: ENTRIES as u32 }];

/// Entries of the test map.
pub const ENTRIES: usize = 4;

/// Assembles `src`, one instruction a line, in rbpf's syntax, plus two forms it lacks:
/// `map rN, I` (load map I) and `xadddw [rD+O], rS` / `xaddw` (atomic add).
pub fn asm(src: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in src.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let reg = |s: &str| s.trim().trim_start_matches('r').parse::<u8>().expect("register");
        if let Some(rest) = line.strip_prefix("map ") {
            let (r, i) = rest.split_once(',').expect("map rN, I");
            out.extend(Insn { opc: 0x18, dst: reg(r), src: 1, off: 0, imm: i.trim().parse().expect("index") }.to_vec());
            out.extend(Insn { opc: 0, dst: 0, src: 0, off: 0, imm: 0 }.to_vec());
        } else if let Some((op, rest)) = line.split_once(' ').filter(|(op, _)| op.starts_with("xadd")) {
            let opc = if op == "xadddw" { 0xdb } else { 0xc3 };
            let (mem, s) = rest.split_once("],").expect("[rD+O], rS");
            let (d, o) = mem.trim_start_matches('[').split_once('+').expect("rD+O");
            out.extend(Insn { opc, dst: reg(d), src: reg(s), off: o.parse().expect("offset"), imm: 0 }.to_vec());
        } else {
            out.extend(rbpf::assembler::assemble(line).unwrap_or_else(|e| panic!("{line}: {e}")));
        }
    }
    out
}

/// One raw instruction.
pub fn raw(opc: u8, dst: u8, src: u8, off: i16, imm: i32) -> Vec<u8> {
    Insn { opc, dst, src, off, imm }.to_vec()
}

thread_local! {
    /// The test map's values.
    static VALUES: RefCell<Vec<u8>> = RefCell::new(vec![0; ENTRIES * 16]);
}

/// The test map's values now.
pub fn values() -> Vec<u8> {
    VALUES.with(|v| v.borrow().clone())
}

fn lookup(_map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: the verifier proved `key` points to 4 initialized bytes of the stack.
    let k = unsafe { (key as *const u32).read_unaligned() } as usize;
    VALUES.with(|v| if k < ENTRIES { v.borrow_mut()[k * 16..].as_mut_ptr() as u64 } else { 0 })
}

fn update(_map: u64, key: u64, value: u64, _: u64, _: u64) -> u64 {
    // SAFETY: the verifier proved `key` (4 bytes) and `value` (16) point to initialized stack.
    let (k, src) = unsafe { ((key as *const u32).read_unaligned() as usize, std::slice::from_raw_parts(value as *const u8, 16)) };
    VALUES.with(|v| {
        if k < ENTRIES {
            v.borrow_mut()[k * 16..k * 16 + 16].copy_from_slice(src);
            0
        } else {
            u64::MAX
        }
    })
}

fn zero(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    0
}

/// Runs `prog` in rbpf's interpreter, which checks every memory access, with `ctx` as the
/// context and the test map.
pub fn run(prog: &[u8], ctx: &mut [u8]) -> Result<u64, String> {
    VALUES.with(|v| v.borrow_mut().fill(0));
    let mut vm = rbpf::EbpfVmRaw::new(Some(prog)).map_err(|e| e.to_string())?;
    for (h, f) in
        [(Helper::MapLookup, lookup as rbpf::ebpf::Helper), (Helper::MapUpdate, update), (Helper::MapDelete, zero), (Helper::Now, zero), (Helper::Trace, zero)]
    {
        vm.register_helper(h.id() as u32, f).map_err(|e| e.to_string())?;
    }
    let base = VALUES.with(|v| v.borrow().as_ptr() as u64);
    vm.register_allowed_memory(base..base + (ENTRIES * 16) as u64);
    vm.execute_program(ctx).map_err(|e| e.to_string())
}

/// A random instruction from a vocabulary close to what compilers emit, with operands
/// that are often but not always valid.
pub fn insn(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let reg = |rng: &mut ChaCha8Rng| rng.gen_range(0..=10u8);
    let imm = |rng: &mut ChaCha8Rng| *[0, 1, -1, 4, -4, 8, -8, 15, 16, 64, 255, i32::MAX].get(rng.gen_range(0..12)).unwrap_or(&0);
    let off = |rng: &mut ChaCha8Rng| *[0i16, 4, 8, 12, 16, -4, -8, -16, -512, -520].get(rng.gen_range(0..10)).unwrap_or(&0);
    let size = |rng: &mut ChaCha8Rng| [0x00u8, 0x08, 0x10, 0x18][rng.gen_range(0..4)];
    let alu_op = |rng: &mut ChaCha8Rng| rng.gen_range(0..=0x0du8) << 4;
    match rng.gen_range(0..100) {
        0..=14 => raw(0xb7, reg(rng), 0, 0, imm(rng)),
        15..=24 => raw(0xbf, reg(rng), reg(rng), 0, 0),
        25..=39 => {
            let class = if rng.gen_bool(0.8) { 0x07 } else { 0x04 };
            let x = if rng.gen_bool(0.5) { 0x08 } else { 0 };
            raw(class | x | alu_op(rng), reg(rng), reg(rng), 0, imm(rng))
        }
        40..=51 => raw(0x61 | size(rng), reg(rng), reg(rng), off(rng), 0),
        52..=59 => raw(0x63 | size(rng), reg(rng), reg(rng), off(rng), 0),
        60..=64 => raw(0x62 | size(rng), reg(rng), 0, off(rng), imm(rng)),
        65..=69 => [raw(0x18, reg(rng), 1, 0, rng.gen_range(0..2)), raw(0, 0, 0, 0, 0)].concat(),
        70..=77 => raw(0x85, 0, 0, 0, [1, 2, 3, 5, 6, 7][rng.gen_range(0..6)]),
        78..=89 => {
            let class = if rng.gen_bool(0.8) { 0x05 } else { 0x06 };
            let x = if rng.gen_bool(0.3) { 0x08 } else { 0 };
            let op = rng.gen_range(1..=0x0du8) << 4;
            raw(class | x | op, reg(rng), reg(rng), rng.gen_range(-2..8), imm(rng))
        }
        90..=91 => raw(0x05, 0, 0, rng.gen_range(-1..6), 0),
        // A number wider than 32 bits, for the 32-bit operations.
        92..=93 => [raw(0x18, reg(rng), 0, 0, rng.gen()), raw(0, 0, 0, 0, rng.gen_range(1..4))].concat(),
        94..=97 => raw(0x95, 0, 0, 0, 0),
        _ => (0..8).map(|_| rng.gen()).collect(),
    }
}

/// A random program of up to 24 instructions, most ending with `r0 = 0; exit`.
pub fn program(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut p: Vec<u8> = (0..rng.gen_range(1..24)).flat_map(|_| insn(rng)).collect();
    if rng.gen_bool(0.9) {
        p.extend(asm("mov64 r0, 0\nexit"));
    }
    p
}

/// Fresh maps of `defs`, for `Program::load`.
pub fn fresh(defs: &[MapDef]) -> Vec<Rc<Map>> {
    defs.iter().map(|d| Rc::new(Map::new(*d).expect("a valid map"))).collect()
}
