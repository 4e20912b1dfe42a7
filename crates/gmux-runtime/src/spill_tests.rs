//! Commands over the limit: the excess mapped on the host, and what comes back.

use crate::tests::{allocs_named, copies, memory, run, Calls};
use crate::{Error, Span, TenantMemory, WorkingSet};
use gmux_core::device::Event;
use gmux_core::{AllocId, Place, CHUNK_BYTES};
use proptest::prelude::*;

/// Runs `ws` on stream `on`, over the limit if it must.
fn run_any(m: &mut TenantMemory<Calls>, ws: &WorkingSet, on: u32) -> Result<Vec<Event>, Error<String>> {
    let sig = m.signature(7, ws);
    let waits = match m.prepare(ws, Some(on), sig, || None, || vec![on]) {
        Err(Error::NoRoom { .. }) => m.prepare_spilled(ws, Some(on), sig, || vec![on])?,
        r => r?,
    };
    m.released(ws, sig);
    Ok(waits)
}

fn chunks_of(m: &TenantMemory<Calls>, a: AllocId) -> Vec<gmux_core::ChunkId> {
    m.mem.alloc(a).unwrap().chunks().collect()
}

#[test]
fn a_command_over_the_limit_runs_with_the_excess_mapped_on_the_host() {
    let mut m = memory(4);
    let a = m.allocate(6 * CHUNK_BYTES).unwrap();
    let b = m.allocate(2 * CHUNK_BYTES).unwrap();
    let all_a = WorkingSet::Allocs(smallvec::smallvec![a]);
    assert!(matches!(run(&mut m, &[a], 0), Err(Error::NoRoom { need, room }) if (need, room) == (6 * CHUNK_BYTES, 4 * CHUNK_BYTES)));
    run_any(&mut m, &all_a, 0).unwrap();
    assert_eq!((m.resident(), m.host_mapped()), (4 * CHUNK_BYTES, 2 * CHUNK_BYTES), "the first four chunks in GPU memory, two on the host");
    assert_eq!((m.dev.mapped, m.dev.host_mapped), (4, 2));
    assert_eq!(copies(&m, "->"), 0, "nothing had data: nothing copied");
    assert_eq!((m.stats.spilled, m.stats.largest_spill), (1, 2 * CHUNK_BYTES));

    let log = m.dev.log.len();
    run_any(&mut m, &all_a, 0).unwrap();
    assert_eq!(m.dev.log.len(), log, "the same command again moves nothing");

    run(&mut m, &[b], 0).unwrap();
    assert_eq!((m.resident(), m.host_mapped()), (4 * CHUNK_BYTES, 2 * CHUNK_BYTES), "b takes two of a's GPU chunks");
    assert_eq!(copies(&m, "Evict c"), 2);

    // A command that fits and uses a's last chunk: copied back to the host tier, unmapped,
    // then brought in.
    let last = chunks_of(&m, a)[5];
    m.dev.log.clear();
    run_any(&mut m, &WorkingSet::Spans(vec![Span { alloc: a, offset: 5 * CHUNK_BYTES, len: 1 }]), 0).unwrap();
    assert_eq!(m.mem.chunk(last).place, Place::GPU);
    assert_eq!((m.host_mapped(), m.dev.host_mapped), (CHUNK_BYTES, 1));
    let i = |what: &str| m.dev.log.iter().position(|l| l == what).unwrap_or_else(|| panic!("no {what}: {:?}", m.dev.log));
    let (out, unmap, back) = (i(&format!("Evict c{} Gpu->Host", last.0)), i(&format!("unmap c{} x1", last.0)), i(&format!("Populate c{} Host->Gpu", last.0)));
    assert!(out < unmap && unmap < back, "out, unmapped, then in: {:?}", m.dev.log);
    assert!(m.dev.log[..out].iter().any(|l| l == "after [0]"), "the copy out waits for the application's work: {:?}", m.dev.log);
    assert!(m.resident() <= m.limit());

    m.free(a).unwrap();
    assert_eq!((m.host_mapped(), m.dev.host_mapped), (0, 0), "freeing unmaps host memory too");
    assert_eq!((m.resident(), m.dev.mapped), (2 * CHUNK_BYTES, 2), "b's chunks stay");
}

#[test]
fn a_refused_command_still_waits_for_the_populations_under_way() {
    let mut m = memory(4);
    let a = m.allocate(2 * CHUNK_BYTES).unwrap();
    let big = m.allocate(4 * CHUNK_BYTES).unwrap();
    let tmp = m.allocate(4 * CHUNK_BYTES).unwrap();
    run(&mut m, &[a], 1).unwrap();
    run(&mut m, &[tmp], 1).unwrap();
    let populated = run(&mut m, &[a], 1).unwrap();
    assert_eq!(populated.len(), 1, "a comes back on stream 1");
    let ws = WorkingSet::Allocs(smallvec::smallvec![a, big]);
    assert!(matches!(m.prepare(&ws, Some(2), 0, || None, || vec![2]), Err(Error::NoRoom { .. })));
    let waits = m.prepare_spilled(&ws, Some(2), 0, || vec![2]).unwrap();
    assert!(waits.contains(&populated[0]), "stream 2 waits for a's population: {waits:?}");
}

proptest! {
    /// Commands of any size run: resident memory stays within the limit, and every chunk
    /// of a command's working set is resident or mapped on the host when it is released.
    #[test]
    fn every_command_runs_within_the_limit(sizes in prop::collection::vec(1u64..8, 2..6), cmds in prop::collection::vec(prop::collection::vec(0usize..6, 1..4), 1..40), limit in 2u64..10) {
        let mut m = memory(limit);
        let allocs: Vec<AllocId> = sizes.iter().map(|s| m.allocate(s * CHUNK_BYTES).unwrap()).collect();
        for (i, cmd) in cmds.iter().enumerate() {
            let ws = allocs_named(cmd, &allocs);
            run_any(&mut m, &WorkingSet::Allocs(ws.as_slice().into()), (i % 2) as u32).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            for a in &ws {
                for c in chunks_of(&m, *a) {
                    let p = m.mem.chunk(c).place;
                    prop_assert!(p == Place::GPU || p == Place::HostMapped, "chunk {} is {:?}", c.0, p);
                }
            }
            prop_assert!(m.resident() <= m.limit() && m.held() <= m.limit());
            prop_assert_eq!(m.dev.mapped * CHUNK_BYTES, m.resident());
            prop_assert_eq!(m.dev.host_mapped * CHUNK_BYTES, m.host_mapped());
            m.mem.check().map_err(TestCaseError::fail)?;
        }
    }
}
