//! The verifier against programs it must refuse, each for its reason at its
//! instruction, and programs it must accept, run in a checked interpreter.

mod common;

use common::{asm, raw, run, values, HOOK, MAPS, NO_TRACE};
use gmux_bpf::{verify, HookSpec, Refusal};

/// A lookup of key 1 of map 0, its result in r0 (instructions 0 to 5).
const LOOKUP: &str = "
    stw [r10-4], 1
    mov64 r2, r10
    add64 r2, -4
    map r1, 0
    call 1";

/// Five independent branches in a row, the first leaving r3 a stack pointer or a number: 32 paths
/// meet after them, more than the verifier keeps apart (instructions 0 to 15).
const DIAMONDS: &str = "
    ldxdw r2, [r1+0]
    mov64 r3, r10
    jset r2, 1, +1
    mov64 r3, 1
    mov64 r4, 0
    jset r2, 2, +1
    mov64 r4, 1
    mov64 r5, 0
    jset r2, 4, +1
    mov64 r5, 1
    mov64 r6, 0
    jset r2, 8, +1
    mov64 r6, 1
    mov64 r7, 0
    jset r2, 16, +1
    mov64 r7, 1";

fn refused(prog: &[u8], hook: &HookSpec) -> Refusal {
    verify(prog, hook, MAPS).expect_err("an unsafe program was accepted")
}

#[track_caller]
fn refuses(src: &str, insn: usize, why: &str) {
    let r = refused(&asm(src), &HOOK);
    assert_eq!(r.insn, insn, "{r}");
    assert!(r.reason.contains(why), "{r}: expected {why:?}");
}

#[test]
fn unsafe_programs_are_refused_at_their_instruction_with_the_reason() {
    let cases: &[(&str, usize, &str)] = &[
        (&format!("{LOOKUP}\njeq r0, 0, +1\nldxdw r0, [r0+16]\nmov64 r0, 0\nexit"), 7, "outside its 16 bytes"),
        (&format!("{LOOKUP}\nldxdw r0, [r0+0]\nexit"), 6, "may be null"),
        ("mov64 r0, 0\nja -1\nexit", 1, "loops must be unrolled"),
        ("mov64 r0, 0\njeq r0, 0, -2\nexit", 1, "loops must be unrolled"),
        ("call 99\nexit", 0, "helper 99, which does not exist"),
        ("mov64 r2, 0\nstxdw [r1+0], r2\nmov64 r0, 0\nexit", 1, "read-only at the test hook"),
        ("ldxdw r0, [r10-8]\nexit", 0, "not initialized"),
        ("stw [r10-8], 1\nldxdw r0, [r10-8]\nexit", 1, "fp-4, which is not initialized"),
        ("mov64 r0, r2\nexit", 0, "reads r2"),
        ("mov64 r0, r1\nexit", 1, "exits with r0 a pointer to the context"),
        ("exit", 0, "exits with r0 not initialized"),
        ("mov64 r0, 0", 0, "runs past the last instruction"),
        ("ldxdw r2, [r1+0]\nmov64 r3, r10\njeq r2, 0, +1\nmov64 r3, 1\nstdw [r10-8], 0\nldxdw r0, [r3-8]\nexit", 5, "dereferences r3, a number"),
        (&format!("{}\nstdw [r10-8], 0\nldxdw r0, [r3-8]\nexit", DIAMONDS), 17, "reads r3, which holds different kinds on the paths that meet here"),
        ("mov64 r10, 0\nexit", 0, "read-only frame pointer"),
        ("stdw [r10-520], 0\nmov64 r0, 0\nexit", 0, "outside the 512-byte stack"),
        ("stdw [r10+0], 0\nmov64 r0, 0\nexit", 0, "outside the 512-byte stack"),
        ("ldxdw r0, [r1+16]\nexit", 0, "the test context has 16 bytes"),
        ("ldxdw r0, [r1+3]\nexit", 0, "accessed aligned"),
        (&format!("ldxdw r6, [r1+0]\n{LOOKUP}\njeq r0, 0, +1\nadd64 r0, r6\nmov64 r0, 0\nexit"), 8, "may reach"),
        (&format!("ldxdw r6, [r1+0]\nand64 r6, 15\n{LOOKUP}\njeq r0, 0, +2\nadd64 r0, r6\nldxdw r0, [r0+0]\nmov64 r0, 0\nexit"), 10, "outside its 16 bytes"),
        (&format!("{LOOKUP}\njeq r0, 0, +1\nstxdw [r0+0], r10\nmov64 r0, 0\nexit"), 7, "pointers never leave"),
        ("mov64 r2, r10\nstxdw [r1+8], r2\nmov64 r0, 0\nexit", 1, "pointers never leave"),
        ("map r1, 3\nmov64 r0, 0\nexit", 0, "refers to map 3, but the program has 1"),
        ("jeq r1, r10, +0\nmov64 r0, 0\nexit", 0, "compares a pointer to the context with a pointer to the stack"),
        ("ldabsw 1\nexit", 0, "packet loads"),
        ("ldxdw r3, [r1+0]\nand64 r3, 7\nmov64 r2, r10\nadd64 r2, r3\nmov64 r0, 0\nexit", 3, "moves a pointer to the stack by a number not known exactly"),
        ("mul64 r1, 2\nmov64 r0, 0\nexit", 0, "arithmetic other than adding a number to a pointer"),
        ("add32 r1, 2\nmov64 r0, 0\nexit", 0, "32-bit arithmetic on a pointer"),
        ("mov64 r1, 1\ncall 1\nmov64 r0, 0\nexit", 1, "map_lookup_elem argument 1 (r1) must be a map"),
        ("map r1, 0\nmov64 r2, r10\nadd64 r2, -4\ncall 1\nmov64 r0, 0\nexit", 4, "fp-4, which is not initialized"),
        ("mov64 r1, r10\nadd64 r1, -8\nstdw [r10-8], 0\nmov64 r2, 300\nmov64 r3, 0\ncall 6\nexit", 5, "constant size from 1 to 256"),
        ("mov64 r1, r10\nadd64 r1, -8\nstdw [r10-8], 0\nmov64 r2, 8\nmov64 r3, r10\ncall 6\nexit", 5, "must be a number"),
        ("stxdw [r10-8], r1\nldxw r0, [r10-8]\nexit", 1, "reads part of a pointer to the context"),
        ("stxw [r10-8], r1\nldxw r0, [r10-8]\nexit", 0, "stores part of a pointer to the context (4 of its 8 bytes)"),
        (&format!("{LOOKUP}\njeq32 r0, 0, +1\nldxdw r0, [r0+0]\nmov64 r0, 0\nexit"), 6, "other than with a 64-bit == or != against 0"),
        // The VM's 32-bit semantics: a register move compiled without truncation, shift
        // counts modulo 32, a remainder by 0 that leaves all 64 bits.
        ("lddw r2, 0x100000000\nmov32 r1, r2\nmov64 r0, 0\nexit", 2, "mov32 r1, r2 of a number that may not fit 32 bits"),
        (&format!("mov64 r6, 0x7fffffff\nadd64 r6, 1\nrsh32 r6, 32\nrsh64 r6, 31\nmul64 r6, 0x10000000\n{LOOKUP}\njeq r0, 0, +2\nadd64 r0, r6\nldxdw r0, [r0+0]\nmov64 r0, 0\nexit"), 13, "outside its 16 bytes"),
        (&format!("lddw r6, 0x100000000\nmod32 r6, 0\nrsh64 r6, 32\nmul64 r6, 0x10000000\n{LOOKUP}\njeq r0, 0, +2\nadd64 r0, r6\nldxdw r0, [r0+0]\nmov64 r0, 0\nexit"), 13, "outside its 16 bytes"),
        (&format!("{LOOKUP}\njeq r0, 0, +2\nmov64 r2, 1\nxadddw [r0+8], r2\nmov64 r0, 0\nexit"), 8, "atomic operations are not supported"),
    ];
    for (src, insn, why) in cases {
        refuses(src, *insn, why);
    }
}

#[test]
fn raw_encodings_the_assembler_cannot_write_are_refused() {
    let exit = asm("mov64 r0, 0\nexit");
    let cases: Vec<(Vec<u8>, usize, &str)> = vec![
        ([raw(0xff, 0, 0, 0, 0), exit.clone()].concat(), 0, "unknown opcode 0xff"),
        ([raw(0x85, 0, 1, 0, 2), exit.clone()].concat(), 0, "inline it"),
        ([raw(0xb7, 11, 0, 0, 0), exit.clone()].concat(), 0, "r11 does not exist"),
        ([raw(0x18, 0, 0, 0, 0), exit.clone()].concat(), 0, "lddw without its second half"),
        ([raw(0x05, 0, 0, 1, 0), asm("lddw r0, 1"), asm("exit")].concat(), 0, "middle of the lddw at 1"),
        ([raw(0x05, 0, 0, 5, 0), exit.clone()].concat(), 0, "past the end"),
        (vec![0; 12], 0, "not a whole number"),
        ([exit.clone(), raw(0xff, 0, 0, 0, 0), asm("exit")].concat(), 2, "the VM cannot run it: unknown eBPF opcode 0xff"),
        ([exit.clone(), asm("mov64 r0, 1")].concat(), 0, "the VM cannot run it: program does not end with"),
        (asm("mov64 r0, 0\n").repeat(gmux_bpf::MAX_INSNS + 1), gmux_bpf::MAX_INSNS, "more than the 4096"),
    ];
    for (prog, insn, why) in cases {
        let r = refused(&prog, &HOOK);
        assert_eq!(r.insn, insn, "{r}");
        assert!(r.reason.contains(why), "{r}: expected {why:?}");
    }
    let trace = asm("mov64 r1, r10\nadd64 r1, -8\nstdw [r10-8], 0\nmov64 r2, 8\nmov64 r3, 0\ncall 6\nexit");
    let r = refused(&trace, &NO_TRACE);
    assert_eq!((r.insn, r.reason.as_str()), (5, "calls trace (helper 6), not allowed at the quiet hook"));
    assert_eq!(verify(&trace, &HOOK, MAPS), Ok(()));
}

#[test]
fn a_counter_in_a_map_value_is_accepted_and_counts() {
    // Adds the context's first word to entry 1's second word, bounded index reads
    // included, and writes the writable half of the context.
    let src = format!(
        "mov64 r6, r1
        {LOOKUP}
        jeq r0, 0, +10
        ldxdw r6, [r6+0]
        mov64 r7, r6
        and64 r7, 1
        lsh64 r7, 3
        mov64 r8, r0
        add64 r8, r7
        ldxdw r9, [r8+0]
        ldxdw r2, [r0+8]
        add64 r2, 1
        stxdw [r0+8], r2
        mov64 r0, 0
        exit"
    );
    let prog = asm(&src);
    assert_eq!(verify(&prog, &HOOK, MAPS), Ok(()));
    let mut ctx = [0u8; 16];
    assert_eq!(run(&prog, &mut ctx), Ok(0));
    assert_eq!(values()[16 + 8], 1, "entry 1's second word counted once");
}

#[test]
fn bounds_from_jumps_make_an_index_safe_and_division_by_zero_is_defined() {
    let src = format!(
        "ldxdw r6, [r1+0]
        {LOOKUP}
        jeq r0, 0, +6
        jgt r6, 8, +5
        add64 r0, r6
        ldxdw r2, [r0+0]
        mov64 r0, 7
        div64 r0, 0
        exit
        mov64 r0, 0
        exit"
    );
    let prog = asm(&src);
    assert_eq!(verify(&prog, &HOOK, MAPS), Ok(()));
    let mut ctx = [0u8; 16];
    ctx[0] = 8;
    assert_eq!(run(&prog, &mut ctx), Ok(0), "7 / 0 is 0");
    let too_far = src.replace("jgt r6, 8", "jgt r6, 9");
    let r = refused(&asm(&too_far), &HOOK);
    assert!(r.reason.contains("outside its 16 bytes"), "{r}");
}

#[test]
fn a_long_branchy_program_verifies_in_one_pass() {
    // 500 independent branches: 2^500 paths, joined where they meet.
    let mut src = String::from("ldxdw r2, [r1+0]\nmov64 r0, 0\n");
    for i in 0..500 {
        src += &format!("jset r2, {}, +1\nadd64 r0, 1\n", 1 << (i % 30));
    }
    src += "exit";
    let t = std::time::Instant::now();
    assert_eq!(verify(&asm(&src), &HOOK, MAPS), Ok(()));
    assert!(t.elapsed().as_secs() < 5, "took {:?}", t.elapsed());
}

#[test]
fn byte_swaps_take_no_source_register() {
    for swap in ["be16", "be32", "be64", "le16"] {
        assert_eq!(verify(&asm(&format!("mov64 r1, 5\n{swap} r1\nmov64 r0, 0\nexit")), &HOOK, MAPS), Ok(()), "{swap}");
    }
}

#[test]
fn a_ring_buffer_is_written_only_by_ringbuf_output_and_only_it() {
    use gmux_bpf::{MapDef, MapKind};
    let ring = [MapDef { kind: MapKind::RingBuf, key_size: 4, value_size: 8, entries: 4 }];
    let output = "stdw [r10-8], 7\nmap r1, 0\nmov64 r2, r10\nadd64 r2, -8\nmov64 r3, 8\nmov64 r4, 0\ncall 130\nexit";
    assert_eq!(verify(&asm(output), &HOOK, &ring), Ok(()));
    let on_array = verify(&asm(output), &HOOK, MAPS).expect_err("ringbuf_output on an array");
    assert!(on_array.insn == 7 && on_array.reason.contains("a keyed map: it takes the map helpers"), "{on_array:?}");
    let lookup = verify(&asm(&format!("{LOOKUP}\nmov64 r0, 0\nexit")), &HOOK, &ring).expect_err("a lookup in a ring buffer");
    assert!(lookup.insn == 5 && lookup.reason.contains("a ring buffer map: it takes ringbuf_output"), "{lookup:?}");
    let unsized_ = "stdw [r10-8], 7\nmap r1, 0\nmov64 r2, r10\nadd64 r2, -8\nldxdw r3, [r1+0]\nmov64 r4, 0\ncall 130\nexit";
    assert!(verify(&asm(unsized_), &HOOK, &ring).is_err(), "the size must be a constant");
}
