//! Loaded programs: maps bound and shared with the control plane, helpers, trace limits,
//! and the JIT against the interpreter.

mod common;

use common::{asm, fresh, program, HOOK};
use gmux_bpf::{MapDef, MapKind, Program};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const ARRAY: MapDef = MapDef { kind: MapKind::Array, key_size: 4, value_size: 16, entries: 4 };

/// Adds the context's first word to the second word of array entry `ctx[8]`, and
/// returns the new sum (or 1 when the index is out of range).
const COUNT: &str = "
    ldxw r6, [r1+0]
    ldxw r7, [r1+8]
    stxw [r10-4], r7
    mov64 r2, r10
    add64 r2, -4
    map r1, 0
    call 1
    jne r0, 0, +2
    mov64 r0, 1
    exit
    ldxdw r2, [r0+8]
    add64 r2, r6
    stxdw [r0+8], r2
    mov64 r0, r2
    exit";

fn ctx(add: u32, index: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[..4].copy_from_slice(&add.to_le_bytes());
    c[8..12].copy_from_slice(&index.to_le_bytes());
    c
}

#[test]
fn a_counter_in_an_array_map_counts_and_the_control_plane_reads_it() {
    let mut p = Program::load(&asm(COUNT), HOOK, &fresh(&[ARRAY])).expect("verified");
    assert_eq!(p.jitted(), cfg!(target_arch = "x86_64"));
    let mut total = 0;
    for add in 1..=100 {
        total += add;
        assert_eq!(p.run(&mut ctx(add as u32, 2), 0), Ok(total));
    }
    assert_eq!(p.run(&mut ctx(5, 4), 0), Ok(1), "entry 4 of 4 does not exist");
    let map = p.maps().next().expect("one map");
    assert_eq!(map.get(&2u32.to_le_bytes()).expect("entry 2")[8..], 5050u64.to_le_bytes());
    map.update(&2u32.to_le_bytes(), &[0; 16]).expect("in range");
    assert_eq!(p.run(&mut ctx(7, 2), 0), Ok(7), "the program sees the control plane's write");
    assert!(p.run(&mut [0; 8], 0).unwrap_err().contains("context is 16 bytes, not 8"));
}

#[test]
fn a_hash_map_inserts_up_to_its_entries_and_reuses_what_is_deleted() {
    // Inserts key ctx[0..4] with value ctx[8..16] twice over: returns update's result.
    let src = "
        ldxw r2, [r1+0]
        stxw [r10-4], r2
        ldxdw r3, [r1+8]
        stxdw [r10-16], r3
        stxdw [r10-24], r3
        map r1, 0
        mov64 r2, r10
        add64 r2, -4
        mov64 r3, r10
        add64 r3, -24
        mov64 r4, 0
        call 2
        exit";
    let def = MapDef { kind: MapKind::Hash, key_size: 4, value_size: 16, entries: 2 };
    let mut p = Program::load(&asm(src), HOOK, &fresh(&[def])).expect("verified");
    let mut c = ctx(10, 0);
    c[8..16].copy_from_slice(&99u64.to_le_bytes());
    assert_eq!(p.run(&mut c, 0), Ok(0));
    assert_eq!(p.run(&mut ctx(11, 0), 0), Ok(0));
    assert_eq!(p.run(&mut ctx(12, 0), 0), Ok(-7i64 as u64), "full: E2BIG");
    let map = p.maps().next().expect("one map");
    assert_eq!(map.get(&10u32.to_le_bytes()).expect("key 10")[..8], 99u64.to_le_bytes());
    assert!(map.delete(&10u32.to_le_bytes()));
    assert_eq!(p.run(&mut ctx(12, 0), 0), Ok(0), "the freed slot is reused");
    let map = p.maps().next().expect("one map");
    let mut keys: Vec<Vec<u8>> = map.entries().into_iter().map(|(k, _)| k).collect();
    keys.sort();
    assert_eq!(keys, vec![11u32.to_le_bytes().to_vec(), 12u32.to_le_bytes().to_vec()]);
}

#[test]
fn trace_lines_are_limited_per_second_of_decision_time() {
    let src = "
        stdw [r10-8], 0
        stb [r10-8], 104
        stb [r10-7], 105
        call 5
        mov64 r3, r0
        mov64 r1, r10
        add64 r1, -8
        mov64 r2, 8
        call 6
        mov64 r0, 0
        exit";
    let prog = asm(src);
    let mut p = Program::load(&prog, HOOK, &fresh(&[])).expect("verified");
    for i in 0..25 {
        p.run(&mut [0; 16], 1_000_000_000 + i).expect("runs");
    }
    let lines = p.take_traces();
    assert_eq!(lines.len(), 10);
    assert_eq!(lines[0], "hi 1000000000", "the text up to its NUL, then the argument (now_ns)");
    p.run(&mut [0; 16], 2_000_000_000).expect("runs");
    assert_eq!(p.take_traces(), ["hi 2000000000"], "a new second, a new allowance");
    for s in 3..303u64 {
        p.run(&mut [0; 16], s * 1_000_000_000).expect("runs");
    }
    let kept = p.take_traces();
    assert_eq!((kept.len(), kept[0].as_str()), (256, "hi 47000000000"), "untaken lines are kept up to 256, the oldest dropped");
}

#[test]
fn compiled_and_interpreted_runs_agree_on_random_programs() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x6a69_7421);
    let mut compared = 0;
    for _ in 0..40_000 {
        let code = program(&mut rng);
        let Ok(mut jit) = Program::load(&code, HOOK, &fresh(&[ARRAY])) else { continue };
        let mut int = Program::load(&code, HOOK, &fresh(&[ARRAY])).expect("the same program");
        int.interpret();
        let c: [u8; 16] = rng.gen();
        let (mut a, mut b) = (c, c);
        let (ra, rb) = (jit.run(&mut a, 5), int.run(&mut b, 5));
        assert_eq!(ra, rb, "{:?}", rbpf::disassembler::to_insn_vec(&code));
        assert_eq!(a, b, "context after the run");
        let (ma, mb) = (jit.maps().next().expect("map").entries(), int.maps().next().expect("map").entries());
        assert_eq!(ma, mb, "maps after the run");
        compared += 1;
    }
    assert!(compared > 200, "only {compared} programs compared");
}

#[test]
fn a_32_bit_move_truncates_compiled_as_interpreted() {
    let code = asm("lddw r1, 0x500000007\nmov32 r1, r1\nmov64 r0, r1\nexit");
    let mut jit = Program::load(&code, HOOK, &[]).expect("verified");
    let mut int = Program::load(&code, HOOK, &[]).expect("verified");
    int.interpret();
    assert_eq!((jit.run(&mut [0; 16], 0), int.run(&mut [0; 16], 0)), (Ok(7), Ok(7)));
}

#[test]
fn programs_too_long_for_the_jit_run_interpreted() {
    // Divisions by a register emit the most code per instruction (the most with r8 and
    // r9, which need a REX prefix).
    let div = "mov64 r1, 3\nmov64 r8, 3\nmov64 r9, 1000\nmov64 r0, 0\n".to_string();
    let body = |n: usize| format!("{div}{}exit", "div64 r9, r8\n".repeat(n));
    let n = (1..400).take_while(|n| gmux_bpf::program::jit_fits(&asm(&body(*n)))).last().expect("some fit");
    let mut fits = Program::load(&asm(&body(n)), HOOK, &[]).expect("verified");
    assert_eq!((fits.jitted(), fits.run(&mut [0; 16], 0)), (cfg!(target_arch = "x86_64"), Ok(0)));
    let mut over = Program::load(&asm(&body(n + 1)), HOOK, &[]).expect("verified");
    assert_eq!((over.jitted(), over.run(&mut [0; 16], 0)), (false, Ok(0)));
    for op in ["add64 r0, 1", "mod64 r0, r1", "call 5", "jeq r0, 7, +0", "lddw r2, 0x123456789"] {
        let code = asm(&format!("{div}{}mov64 r0, 0\nexit", format!("{op}\n").repeat(4000 / if op.starts_with("lddw") { 2 } else { 1 })));
        let mut p = Program::load(&code, HOOK, &[]).expect("verified");
        assert_eq!(p.run(&mut [0; 16], 0), Ok(0), "{op}");
    }
}

#[test]
fn a_ring_buffer_takes_the_records_a_program_writes_and_drops_past_its_size() {
    // The context's first 8 bytes as a record of 8, or of 16 bytes (longer than a record)
    // when the second 8 are nonzero.
    let src = "
        ldxdw r2, [r1+0]
        stxdw [r10-16], r2
        stxdw [r10-8], r2
        ldxdw r3, [r1+8]
        map r1, 0
        mov64 r2, r10
        add64 r2, -16
        jne r3, 0, +3
        mov64 r3, 8
        mov64 r4, 0
        ja +2
        mov64 r3, 16
        mov64 r4, 0
        call 130
        exit";
    let ring = MapDef { kind: MapKind::RingBuf, key_size: 4, value_size: 8, entries: 2 };
    let mut p = Program::load(&asm(src), HOOK, &fresh(&[ring])).expect("verified");
    assert_eq!(p.run(&mut ctx(5, 0), 0), Ok(0));
    let mut long = ctx(6, 0);
    long[8..16].copy_from_slice(&1u64.to_le_bytes());
    assert_eq!(p.run(&mut long, 0), Ok(-7i64 as u64), "longer than a record: E2BIG");
    assert_eq!(p.run(&mut ctx(7, 0), 0), Ok(0));
    assert_eq!(p.run(&mut ctx(8, 0), 0), Ok(-28i64 as u64), "full: ENOSPC");
    let (records, dropped) = p.maps().next().expect("one map").take_records();
    assert_eq!(records, vec![5u64.to_le_bytes().to_vec(), 7u64.to_le_bytes().to_vec()]);
    assert_eq!(dropped, 1);
    assert_eq!(p.run(&mut ctx(9, 0), 0), Ok(0), "room again once taken");
}
