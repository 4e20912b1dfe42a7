//! The verifier against random programs and mutations of valid ones: it never panics,
//! and every program it accepts runs in rbpf's checked interpreter without a fault.

mod common;

use common::{asm, program, run, HOOK, MAPS};
use gmux_bpf::verify;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[track_caller]
fn check(prog: &[u8], ctx: [u8; 16]) -> bool {
    let ok = verify(prog, &HOOK, MAPS).is_ok();
    if ok {
        let mut ctx = ctx;
        if let Err(e) = run(prog, &mut ctx) {
            panic!("accepted, but the checked interpreter failed: {e}\n{:?}", rbpf::disassembler::to_insn_vec(prog));
        }
    }
    ok
}

#[test]
fn a_hundred_thousand_random_programs_never_crash_the_verifier_and_those_accepted_run_cleanly() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x6d75_7862_7066);
    let mut accepted = 0;
    let n = 100_000;
    for _ in 0..n {
        let prog = program(&mut rng);
        accepted += usize::from(check(&prog, rng.gen()));
    }
    // The generator must reach deep enough to matter: some programs pass.
    eprintln!("{accepted} of {n} accepted");
    assert!(accepted > n / 100, "only {accepted} of {n} accepted");
}

/// Valid programs to mutate.
fn seeds() -> Vec<Vec<u8>> {
    let lookup = "stw [r10-4], 1\nmov64 r2, r10\nadd64 r2, -4\nmap r1, 0\ncall 1";
    vec![
        asm(&format!("mov64 r6, r1\n{lookup}\njeq r0, 0, +4\nldxdw r6, [r6+0]\nand64 r6, 8\nadd64 r0, r6\nldxdw r2, [r0+0]\nmov64 r0, 0\nexit")),
        asm("ldxdw r2, [r1+0]\nstxdw [r1+8], r2\nstdw [r10-8], 3\nldxdw r0, [r10-8]\nexit"),
        asm("mov64 r1, r10\nadd64 r1, -16\nstdw [r10-16], 0\nstdw [r10-8], 0\nmov64 r2, 16\nmov64 r3, 5\ncall 6\nmov64 r0, 0\nexit"),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn mutated_valid_programs_never_crash_the_verifier_and_those_accepted_run_cleanly(
        seed in 0usize..3,
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        ctx in any::<[u8; 16]>(),
    ) {
        let mut prog = seeds()[seed].clone();
        for (at, byte) in flips {
            let at = at % prog.len();
            prog[at] = byte;
        }
        check(&prog, ctx);
    }
}

#[test]
fn the_seeds_are_valid() {
    for s in seeds() {
        assert_eq!(verify(&s, &HOOK, MAPS), Ok(()));
        assert!(run(&s, &mut [0; 16]).is_ok());
    }
}
