//! The maps' storage, sizes and kinds against their definitions.

use super::*;

#[test]
fn sizes_are_bounded_and_each_refusal_names_the_bound() {
    let ok = MapDef { kind: MapKind::Hash, key_size: 8, value_size: 64, entries: 1024 };
    assert_eq!(ok.check(), Ok(()));
    let err = |d: MapDef| d.check().unwrap_err();
    assert!(err(MapDef { value_size: 0, ..ok }).contains("values are 1 to 4096 bytes"));
    assert!(err(MapDef { key_size: 300, ..ok }).contains("keys are 1 to 256 bytes"));
    assert!(err(MapDef { kind: MapKind::Array, ..ok }).contains("an array map's key is 4 bytes"));
    assert!(err(MapDef { entries: 1 << 20, value_size: 4096, ..ok }).contains("at most 64 MiB"));
    assert!(err(MapDef { entries: 0, ..ok }).contains("1 entry"));
}

#[test]
fn an_array_holds_every_index_below_its_entries_and_nothing_else() {
    let m = Map::new(MapDef { kind: MapKind::Array, key_size: 4, value_size: 8, entries: 3 }).expect("valid");
    assert_eq!(m.get(&2u32.to_le_bytes()), Some(vec![0; 8]));
    assert_eq!(m.get(&3u32.to_le_bytes()), None);
    m.update(&1u32.to_le_bytes(), &7u64.to_le_bytes()).expect("in range");
    assert!(m.update(&3u32.to_le_bytes(), &[0; 8]).unwrap_err().contains("holds 3 entries"));
    assert!(m.update(&1u32.to_le_bytes(), &[0; 4]).unwrap_err().contains("8-byte values"));
    assert!(m.delete(&1u32.to_le_bytes()), "an array's value is zeroed");
    assert_eq!(m.get(&1u32.to_le_bytes()), Some(vec![0; 8]));
    assert_eq!(m.entries().len(), 3);
}

#[test]
fn a_ring_buffer_keeps_records_in_order_and_counts_what_it_drops() {
    let m = Map::new(MapDef { kind: MapKind::RingBuf, key_size: 4, value_size: 8, entries: 3 }).expect("valid");
    assert_eq!(m.output(&[1, 2, 3]), Ok(()));
    assert_eq!(m.output(&[4; 8]), Ok(()));
    assert_eq!(m.output(&[5; 9]), Err(RingFull::TooBig), "longer than a record");
    assert_eq!(m.output(&[6]), Ok(()));
    assert_eq!(m.output(&[7]), Err(RingFull::Full));
    assert_eq!(m.output(&[8]), Err(RingFull::Full));
    assert!(m.lookup_ptr(&0u32.to_le_bytes()).is_null() && m.entries().is_empty(), "records are not reached by key");
    assert_eq!(m.take_records(), (vec![vec![1, 2, 3], vec![4; 8], vec![6]], 2));
    assert_eq!(m.take_records(), (Vec::<Vec<u8>>::new(), 0), "taken once");
    // Around the end of the slab, a shorter record after a longer one in its slot.
    for r in [[9u8; 8].as_slice(), &[10, 11], &[12]] {
        m.output(r).expect("room");
    }
    assert_eq!(m.take_records(), (vec![vec![9; 8], vec![10, 11], vec![12]], 0));
    let arr = Map::new(MapDef { kind: MapKind::Array, key_size: 4, value_size: 8, entries: 3 }).expect("valid");
    assert_eq!(arr.output(&[1]), Err(RingFull::TooBig), "only a ring buffer takes records");
    let bad = MapDef { kind: MapKind::RingBuf, key_size: 8, value_size: 8, entries: 3 };
    assert!(bad.check().unwrap_err().contains("a ring buffer's key is 4 bytes"));
    let lengths_too = MapDef { kind: MapKind::RingBuf, key_size: 4, value_size: 4, entries: 12 << 20 };
    assert!(lengths_too.check().unwrap_err().contains("at most 64 MiB"), "each record's length counts too");
    assert_eq!(MapDef { kind: MapKind::Array, ..lengths_too }.check(), Ok(()));
}

/// A reader outside the programs sees a hash map's entries and an array's that are
/// not zero, counted in full and listed up to the number asked for.
#[test]
fn a_sample_counts_every_entry_and_lists_the_first() {
    let h = Map::new(MapDef { kind: MapKind::Hash, key_size: 8, value_size: 8, entries: 64 }).expect("hash");
    for k in 0u64..10 {
        h.update(&k.to_le_bytes(), &(k * 3).to_le_bytes()).expect("update");
    }
    let (total, some) = h.sample(4);
    assert_eq!((total, some.len()), (10, 4));
    assert!(some.iter().all(|(k, v)| u64::from_le_bytes(v[..].try_into().unwrap()) == 3 * u64::from_le_bytes(k[..].try_into().unwrap())));
    let a = Map::new(MapDef { kind: MapKind::Array, key_size: 4, value_size: 4, entries: 100 }).expect("array");
    for i in [3u32, 50, 99] {
        a.update(&i.to_le_bytes(), &7u32.to_le_bytes()).expect("update");
    }
    let (total, all) = a.sample(100);
    assert_eq!(total, 3);
    assert_eq!(all.iter().map(|(k, _)| u32::from_le_bytes(k[..].try_into().unwrap())).collect::<Vec<_>>(), vec![3, 50, 99]);
    let r = Map::new(MapDef { kind: MapKind::RingBuf, key_size: 4, value_size: 8, entries: 4 }).expect("ring");
    assert_eq!(r.sample(10), (0, Vec::new()));
}

/// A per-tenant array keeps one array per tenant: what a program writes for one
/// tenant is not what another reads; past [`TENANT_COPIES`] tenants a lookup finds
/// nothing; the control plane reads each copy.
#[test]
fn a_per_tenant_array_keeps_a_copy_per_tenant() {
    let def = MapDef { kind: MapKind::TenantArray, key_size: 4, value_size: 8, entries: 4 };
    assert_eq!(def.check(), Ok(()));
    let too_big = MapDef { entries: 1 << 20, value_size: 8, ..def };
    assert!(too_big.check().unwrap_err().contains("for each of 64 tenants"), "{:?}", too_big.check());
    let m = Map::new(def).expect("valid");
    let key = 2u32.to_le_bytes();
    for t in [7, 9] {
        m.set_tenant(t);
        m.update(&key, &u64::from(t * 100).to_le_bytes()).expect("update");
    }
    m.set_tenant(7);
    assert_eq!(m.get(&key), Some(700u64.to_le_bytes().to_vec()));
    m.set_tenant(9);
    assert_eq!(m.get(&key), Some(900u64.to_le_bytes().to_vec()));
    assert_eq!(m.sample(10), (1, vec![(key.to_vec(), 900u64.to_le_bytes().to_vec())]));
    assert_eq!(m.tenants(), vec![7, 9]);
    m.set_tenant(11);
    assert!(m.get(&key).is_none() && !m.delete(&key), "reading or deleting makes no copy");
    assert_eq!(m.tenants(), vec![7, 9]);
    assert!(m.get(&4u32.to_le_bytes()).is_none(), "an index past its entries");
    for t in 100..100 + TENANT_COPIES - 2 {
        m.set_tenant(t);
        assert!(!m.lookup_ptr(&key).is_null(), "tenant {t} gets a copy");
    }
    m.set_tenant(1);
    assert!(m.lookup_ptr(&key).is_null(), "no copy past 64 tenants");
    assert!(m.update(&key, &[0; 8]).unwrap_err().contains("holds 64 tenants' copies"));
    let range = m.slab_range();
    assert_eq!(range.end - range.start, 4 * 8 * u64::from(TENANT_COPIES));
    // A tenant that left gives its copy, zeroed, to the next one; the others keep theirs.
    assert!(m.forget_tenant(7) && !m.forget_tenant(7), "7 had a copy, once");
    m.set_tenant(1);
    assert!(m.get(&key).is_none(), "no copy yet");
    m.update(&3u32.to_le_bytes(), &5u64.to_le_bytes()).expect("the freed copy");
    assert_eq!(m.sample(10), (1, vec![(3u32.to_le_bytes().to_vec(), 5u64.to_le_bytes().to_vec())]), "nothing of 7's values is left");
    assert_eq!(m.tenants()[0], 1, "in 7's copy");
    m.set_tenant(9);
    assert_eq!(m.get(&key), Some(900u64.to_le_bytes().to_vec()));
    m.set_tenant(7);
    assert!(m.get(&key).is_none(), "7 has no copy now");
}
