//! The verifier's bounds, against their definition: for every offset, size and bound of
//! an index, an access is accepted exactly when it stays inside what it points to.

mod common;

use common::{asm, HOOK, MAPS};
use gmux_bpf::verify;
use proptest::prelude::*;

const SIZES: [(&str, i64); 4] = [("b", 1), ("h", 2), ("w", 4), ("dw", 8)];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn a_map_value_access_through_a_bounded_index_is_accepted_exactly_in_bounds(
        mask in 0u32..40, bound in 0i64..40, use_jump in any::<bool>(), off in -8i16..24, size in 0usize..4,
    ) {
        let (name, width) = SIZES[size];
        // The index is the context's first word, bounded by `& mask` or `if > bound: skip`.
        let limit = if use_jump { format!("jgt r6, {bound}, +3\nja +0") } else { format!("and64 r6, {mask}\nja +0") };
        let src = format!(
            "ldxdw r6, [r1+0]
            stw [r10-4], 1
            mov64 r2, r10
            add64 r2, -4
            map r1, 0
            call 1
            jeq r0, 0, +4
            {limit}
            add64 r0, r6
            ldx{name} r0, [r0{off:+}]
            mov64 r0, 0
            exit"
        );
        let most = if use_jump { bound } else { i64::from(mask) };
        let in_bounds = i64::from(off) >= 0 && most + i64::from(off) + width <= 16;
        let r = verify(&asm(&src), &HOOK, MAPS);
        prop_assert_eq!(r.is_ok(), in_bounds, "{:?}", r);
    }

    #[test]
    fn a_stack_access_is_accepted_exactly_inside_the_stack_aligned_and_initialized(
        at in -530i64..8, size in 0usize..4, init_from in -530i64..8, init_len in 0i64..24,
    ) {
        let (name, width) = SIZES[size];
        // Bytes init_from..init_from + init_len are written one by one first (where in
        // the stack), then `width` bytes at `at` are read.
        let mut src = String::new();
        let written: Vec<i64> = (init_from..init_from + init_len).filter(|b| (-512..0).contains(b)).collect();
        for b in &written {
            src += &format!("stb [r10{b:+}], 1\n");
        }
        src += &format!("ldx{name} r0, [r10{at:+}]\nmov64 r0, 0\nexit");
        let inside = at >= -512 && at + width <= 0 && at % width == 0;
        let init = (at..at + width).all(|b| written.contains(&b));
        let r = verify(&asm(&src), &HOOK, MAPS);
        prop_assert_eq!(r.is_ok(), inside && init, "{:?}", r);
    }

    #[test]
    fn a_context_access_is_accepted_exactly_inside_aligned_and_written_only_where_writable(
        at in -8i64..24, size in 0usize..4, store in any::<bool>(),
    ) {
        let (name, width) = SIZES[size];
        let op = if store { format!("st{name} [r1{at:+}], 7") } else { format!("ldx{name} r0, [r1{at:+}]") };
        let src = format!("{op}\nmov64 r0, 0\nexit");
        let inside = at >= 0 && at + width <= 16 && at % width == 0;
        let writable = !store || at >= 8;
        let r = verify(&asm(&src), &HOOK, MAPS);
        prop_assert_eq!(r.is_ok(), inside && writable, "{:?}", r);
    }
}
