//! Programs written in C with include/gmux_bpf.h and compiled by clang: the loader finds
//! their programs and maps, and the verifier and VM take them. Needs clang (skipped
//! without it unless GMUX_REQUIRE_CLANG=1, as in CI).

mod common;

use common::{fresh, HOOK};
use gmux_bpf::elf::parse;
use gmux_bpf::{MapDef, MapKind, Program};
use std::path::Path;
use std::process::Command;

/// `src` compiled by clang for `target`; `None` when clang is missing and not required.
fn compile(src: &str, target: &str) -> Option<Vec<u8>> {
    if Command::new("clang").arg("--version").output().is_err() {
        assert!(std::env::var_os("GMUX_REQUIRE_CLANG").is_none(), "clang is required (GMUX_REQUIRE_CLANG) but not found");
        eprintln!("skipped: no clang");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("gmux-bpf-elf-{}-{:x}", std::process::id(), src.len() ^ target.len() << 20));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (c, o) = (dir.join("p.c"), dir.join("p.o"));
    std::fs::write(&c, src).expect("write the source");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let out = Command::new("clang").args(["-O2", "-target", target, "-c"]).arg("-I").arg(&include).arg(&c).arg("-o").arg(&o).output().expect("clang runs");
    assert!(out.status.success(), "clang failed: {}", String::from_utf8_lossy(&out.stderr));
    Some(std::fs::read(&o).expect("the object"))
}

const COUNT: &str = r#"
#include "gmux_bpf.h"
struct ctx { u64 key; u64 add; };
GMUX_MAP(counts, GMUX_MAP_ARRAY, u32, u64, 4);
GMUX_MAP(seen, GMUX_MAP_HASH, u64, u64, 16);

SEC("gmux/test") int count(struct ctx *c) {
    u32 k = c->key & 3;
    u64 *v = map_lookup_elem(&counts, &k);
    if (!v)
        return 1;
    *v += c->add;
    u64 key = c->key, one = 1;
    map_update_elem(&seen, &key, &one, 0);
    char fmt[] = "count";
    trace(fmt, sizeof(fmt), *v);
    return 0;
}
"#;

#[test]
fn a_c_program_is_loaded_with_its_maps_and_counts() {
    let Some(obj) = compile(COUNT, "bpf") else { return };
    let o = parse(&obj).expect("parsed");
    assert_eq!(
        o.maps,
        vec![
            ("counts".to_string(), MapDef { kind: MapKind::Array, key_size: 4, value_size: 8, entries: 4 }),
            ("seen".to_string(), MapDef { kind: MapKind::Hash, key_size: 8, value_size: 8, entries: 16 }),
        ]
    );
    assert_eq!((o.programs.len(), o.programs[0].hook.as_str(), o.programs[0].name.as_str()), (1, "test", "count"));
    let defs: Vec<MapDef> = o.maps.iter().map(|m| m.1).collect();
    let mut p = Program::load(&o.programs[0].code, HOOK, &fresh(&defs)).expect("verified");
    for key in 0..10u64 {
        let mut ctx = [0u8; 16];
        ctx[..8].copy_from_slice(&key.to_le_bytes());
        ctx[8..].copy_from_slice(&(key * 10).to_le_bytes());
        assert_eq!(p.run(&mut ctx, 1), Ok(0));
    }
    let counts: Vec<u64> = p.maps().next().expect("counts").entries().iter().map(|(_, v)| u64::from_le_bytes(v[..8].try_into().expect("8"))).collect();
    // Keys 0..10 by key & 3: {0,4,8}, {1,5,9}, {2,6}, {3,7}, each adding key * 10.
    assert_eq!(counts, [120, 150, 80, 100]);
    assert_eq!(p.maps().nth(1).expect("seen").entries().len(), 10);
    assert_eq!(p.take_traces().first().map(String::as_str), Some("count 0"));
}

#[test]
fn what_the_loader_or_the_verifier_cannot_take_is_refused_with_what_to_change() {
    let global = r#"
        #include "gmux_bpf.h"
        u64 total;
        SEC("gmux/test") int f(u64 *c) { total += *c; return 0; }
    "#;
    let Some(obj) = compile(global, "bpf") else { return };
    let e = parse(&obj).unwrap_err();
    assert!(e.contains("f: instruction") && e.contains("refers to total, which is not a map"), "{e}");

    let bad_kind = "#include \"gmux_bpf.h\"\nGMUX_MAP(m, 9, u32, u64, 4);\nSEC(\"gmux/test\") int f(void *c) { return 0; }\n";
    let e = parse(&compile(bad_kind, "bpf").expect("clang")).unwrap_err();
    assert!(e.contains("map m has kind 9"), "{e}");

    let none = "int f(void) { return 0; }\n";
    let e = parse(&compile(none, "bpf").expect("clang")).unwrap_err();
    assert!(e.contains("SEC(\"gmux/HOOK\")"), "{e}");

    let host = parse(&compile(none, "x86_64-linux-gnu").expect("clang")).unwrap_err();
    assert!(host.contains("not eBPF"), "{host}");

    // A loop clang keeps as a loop: the verifier names its jump back.
    let looped = r#"
        #include "gmux_bpf.h"
        struct ctx { u64 n; u64 out; };
        SEC("gmux/test") int f(struct ctx *c) {
            u64 s = 0;
            for (u64 i = 0; i < c->n; i++) s = s * 3 + (s >> 7) + i;
            c->out = s;
            return 0;
        }
    "#;
    let o = parse(&compile(looped, "bpf").expect("clang")).expect("parsed");
    let r = Program::load(&o.programs[0].code, HOOK, &fresh(&[])).err().expect("refused");
    assert!(r.reason.contains("loops must be unrolled"), "{r}");
}

#[test]
fn a_map_reference_that_is_not_a_whole_lddw_is_refused() {
    use object::{Object, ObjectSection};
    let Some(mut obj) = compile(COUNT, "bpf") else { return };
    let (at, code_len) = {
        let f = object::File::parse(&*obj).expect("ELF");
        let rel = f.section_by_name(".relgmux/test").expect("the program's relocations");
        let code = f.section_by_name("gmux/test").expect("the program");
        (rel.file_range().expect("in the file").0 as usize, code.size())
    };
    // The first relocation's offset (r_offset, 8 bytes): inside an instruction, then past
    // the section's end.
    for (offset, what) in [(4u64, "at byte 4 is not an lddw"), (code_len - 8, "is not an lddw")] {
        obj[at..at + 8].copy_from_slice(&offset.to_le_bytes());
        let e = parse(&obj).unwrap_err();
        assert!(e.contains(what), "{e}");
    }
}

/// A per-tenant array through a scheduling hook: the program counts each tenant's turns
/// in its own copy and gives a tenant that has had three turns a longer slice.
#[test]
fn a_per_tenant_array_keeps_each_tenants_own_count() {
    use gmux_bpf::Policy;
    use gmux_core::hooks::SchedHooks;
    use gmux_core::TenantId;
    let src = r#"
        #include "gmux_bpf.h"
        GMUX_MAP(turns, GMUX_MAP_TENANT_ARRAY, u32, u64, 1);
        SEC("gmux/timeslice") u64 slice(struct gmux_slice_ctx *c) {
            u32 k = 0;
            u64 *n = map_lookup_elem(&turns, &k);
            if (!n)
                return c->slice;
            *n += 1;
            return *n > 3 ? 2 * c->slice : c->slice;
        }
    "#;
    let Some(obj) = compile(src, "bpf") else { return };
    let mut p = Policy::load(&obj).expect("loaded").into_sched();
    let ms = 1_000_000;
    let turns = |p: &mut gmux_bpf::sched::SchedPolicy, t: u32, n: usize| (0..n).map(|_| p.timeslice(TenantId(t), 10 * ms, None)).last().expect("a turn");
    assert_eq!(turns(&mut p, 1, 4), 20 * ms, "tenant 1's fourth turn is doubled");
    assert_eq!(turns(&mut p, 2, 1), 10 * ms, "tenant 2 counts from its own zero");
    let m = p.maps().find(|m| m.0 == "turns").expect("turns").1;
    assert_eq!(m.def.kind, MapKind::TenantArray);
    assert_eq!(m.tenants(), vec![1, 2]);
    let count = |t: u32| {
        m.set_tenant(t);
        m.get(&0u32.to_le_bytes()).map(|v| u64::from_le_bytes(v[..].try_into().expect("8")))
    };
    assert_eq!((count(1), count(2)), (Some(4), Some(1)));
    // Tenant 1 leaves: its copy goes, and a tenant that comes after counts from zero in it.
    p.task_destroy(TenantId(1));
    let m = p.maps().find(|m| m.0 == "turns").expect("turns").1;
    assert_eq!(m.tenants(), vec![2]);
    assert_eq!(turns(&mut p, 3, 1), 10 * ms, "tenant 3 starts at zero");
    let m = p.maps().find(|m| m.0 == "turns").expect("turns").1;
    assert_eq!(m.tenants(), vec![3, 2], "in the copy tenant 1 had");
}
