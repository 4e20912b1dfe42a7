//! Maps: storage a program reads and writes through the map helpers, and that the
//! control plane reads and writes between runs. An array map is `entries` values indexed
//! by a 4-byte key; a hash map holds up to `entries` values under keys of any size; a
//! ring buffer holds up to `entries` records of at most `value_size` bytes, which a
//! program writes (`ringbuf_output`) and the control plane takes, oldest first.

use std::cell::UnsafeCell;
use std::collections::HashMap;

/// A map's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapKind {
    /// Values indexed by a `u32` key below `entries`, all present, zeroed at creation.
    Array,
    /// Up to `entries` values under keys of `key_size` bytes.
    Hash,
    /// Up to `entries` records of at most `value_size` bytes, in the order written; a
    /// record written while it is full is dropped, and counted.
    RingBuf,
    /// An array per tenant (up to [`TENANT_COPIES`] tenants): a program reaches the copy
    /// of the tenant its hook is about ([`Map::set_tenant`]), made zeroed by its first
    /// lookup or update; a copy, once made, stays for the map's life.
    TenantArray,
}

/// Most tenants a per-tenant array holds a copy for; a lookup for another finds nothing.
pub const TENANT_COPIES: u32 = 64;

impl MapKind {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            MapKind::Array => "array",
            MapKind::Hash => "hash",
            MapKind::RingBuf => "ring buffer",
            MapKind::TenantArray => "per-tenant array",
        }
    }
}

/// What a map is: its kind and sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapDef {
    /// Array or hash.
    pub kind: MapKind,
    /// Bytes of a key (4 for an array).
    pub key_size: u32,
    /// Bytes of a value.
    pub value_size: u32,
    /// How many values it holds at most.
    pub entries: u32,
}

/// Largest value, key and map a program may declare, so that a map's memory is bounded.
pub const MAX_VALUE_BYTES: u32 = 4096;
/// Largest key.
pub const MAX_KEY_BYTES: u32 = 256;
/// Most bytes of values one map may hold.
pub const MAX_MAP_BYTES: u64 = 64 << 20;

impl MapDef {
    /// Checks the sizes; `Err` says what is wrong and the bound.
    pub fn check(&self) -> Result<(), String> {
        if self.value_size == 0 || self.value_size > MAX_VALUE_BYTES {
            return Err(format!("a value of {} bytes: values are 1 to {MAX_VALUE_BYTES} bytes", self.value_size));
        }
        match self.kind {
            MapKind::Array | MapKind::TenantArray if self.key_size != 4 => return Err(format!("an array map's key is 4 bytes (a u32), not {}", self.key_size)),
            MapKind::RingBuf if self.key_size != 4 => return Err(format!("a ring buffer's key is 4 bytes (a u32, unused), not {}", self.key_size)),
            _ if self.key_size == 0 || self.key_size > MAX_KEY_BYTES => {
                return Err(format!("a key of {} bytes: keys are 1 to {MAX_KEY_BYTES} bytes", self.key_size))
            }
            _ => {}
        }
        // A ring buffer also keeps each record's length.
        let per_entry = u64::from(self.value_size) + if self.kind == MapKind::RingBuf { 4 } else { 0 };
        let bytes = u64::from(self.entries) * per_entry * u64::from(self.copies());
        if self.entries == 0 || bytes > MAX_MAP_BYTES {
            let each = if self.kind == MapKind::TenantArray { format!(" for each of {TENANT_COPIES} tenants") } else { String::new() };
            return Err(format!("{} entries of {} bytes{each}: a map holds 1 entry and at most {} MiB", self.entries, self.value_size, MAX_MAP_BYTES >> 20));
        }
        Ok(())
    }

    /// How many copies of its values it holds.
    fn copies(&self) -> u32 {
        if self.kind == MapKind::TenantArray {
            TENANT_COPIES
        } else {
            1
        }
    }
}

/// A map's storage. Values live in one slab that never moves, so that a pointer a
/// lookup returned stays valid for the rest of the run.
#[derive(Debug)]
pub struct Map {
    /// What it is.
    pub def: MapDef,
    slab: UnsafeCell<Box<[u8]>>,
    /// A hash map's keys and their slots in the slab.
    slots: UnsafeCell<Slots>,
    /// A ring buffer's records.
    ring: UnsafeCell<Ring>,
    /// A per-tenant array's tenants, by copy (`None`: a copy free for the next tenant),
    /// and the tenant a program reaches now.
    tenants: UnsafeCell<Vec<Option<u32>>>,
    tenant: std::cell::Cell<u32>,
}

/// Where a ring buffer's records are in the slab: `len` records from slot `head`, each
/// of `lens[slot]` bytes.
#[derive(Debug, Default)]
struct Ring {
    head: u32,
    len: u32,
    lens: Vec<u32>,
    /// Records dropped since the last time the records were taken.
    dropped: u64,
}

/// Which slab slot holds each key of a hash map; freed slots are reused, never moved, so
/// that a pointer to another key's value stays right.
#[derive(Debug, Default)]
struct Slots {
    of: HashMap<Box<[u8]>, u32>,
    free: Vec<u32>,
    next: u32,
}

impl Map {
    /// An empty map of `def` (checked).
    pub fn new(def: MapDef) -> Result<Map, String> {
        def.check()?;
        let bytes = def.entries as usize * def.value_size as usize * def.copies() as usize;
        let ring = Ring { lens: if def.kind == MapKind::RingBuf { vec![0; def.entries as usize] } else { Vec::new() }, ..Ring::default() };
        Ok(Map {
            def,
            slab: UnsafeCell::new(vec![0; bytes].into_boxed_slice()),
            slots: UnsafeCell::new(Slots::default()),
            ring: UnsafeCell::new(ring),
            tenants: UnsafeCell::new(Vec::new()),
            tenant: std::cell::Cell::new(0),
        })
    }

    /// The slab's address range, for the interpreter's memory checks.
    pub fn slab_range(&self) -> std::ops::Range<u64> {
        // SAFETY: reading the box's address and length; nothing is dereferenced.
        let slab = unsafe { &*self.slab.get() };
        let base = slab.as_ptr() as u64;
        base..base + slab.len() as u64
    }

    fn slot(&self, key: &[u8], insert: bool) -> Option<u32> {
        match self.def.kind {
            MapKind::Array => {
                let i = u32::from_le_bytes(key.try_into().ok()?);
                (i < self.def.entries).then_some(i)
            }
            MapKind::Hash => {
                // SAFETY: a map is used by one thread at a time: the program running
                // (through `&mut Program`) or the control plane between runs.
                let slots = unsafe { &mut *self.slots.get() };
                if let Some(s) = slots.of.get(key) {
                    return Some(*s);
                }
                if !insert {
                    return None;
                }
                let s = slots.free.pop().or_else(|| {
                    (slots.next < self.def.entries).then(|| {
                        slots.next += 1;
                        slots.next - 1
                    })
                })?;
                slots.of.insert(key.into(), s);
                Some(s)
            }
            // A ring buffer's records are not reached by key.
            MapKind::RingBuf => None,
            MapKind::TenantArray => {
                let i = u32::from_le_bytes(key.try_into().ok()?);
                if i >= self.def.entries {
                    return None;
                }
                let t = self.tenant.get();
                let copy = match self.copy_of(t) {
                    Some(c) => c,
                    None if insert => {
                        // SAFETY: one user at a time, as above.
                        let tenants = unsafe { &mut *self.tenants.get() };
                        match tenants.iter().position(Option::is_none) {
                            Some(c) => {
                                tenants[c] = Some(t);
                                c
                            }
                            None if tenants.len() < TENANT_COPIES as usize => {
                                tenants.push(Some(t));
                                tenants.len() - 1
                            }
                            None => return None,
                        }
                    }
                    None => return None,
                };
                Some(copy as u32 * self.def.entries + i)
            }
        }
    }

    /// `ringbuf_output`: appends `data` as a record. `Err`: it is larger than a record
    /// (`value_size`), or the buffer is full (the record is dropped, and counted).
    pub fn output(&self, data: &[u8]) -> Result<(), RingFull> {
        if self.def.kind != MapKind::RingBuf || data.len() > self.def.value_size as usize {
            return Err(RingFull::TooBig);
        }
        // SAFETY: one user at a time (see `slot`).
        let ring = unsafe { &mut *self.ring.get() };
        if ring.len == self.def.entries {
            ring.dropped += 1;
            return Err(RingFull::Full);
        }
        let s = (ring.head + ring.len) % self.def.entries;
        ring.len += 1;
        ring.lens[s as usize] = data.len() as u32;
        // SAFETY: one user at a time (see `slot`); `s` is below `entries`.
        let v = unsafe { self.value(s) };
        v[..data.len()].copy_from_slice(data);
        v[data.len()..].fill(0);
        Ok(())
    }

    /// Takes a ring buffer's records, oldest first, and how many were dropped since the
    /// last take.
    pub fn take_records(&self) -> (Vec<Vec<u8>>, u64) {
        if self.def.kind != MapKind::RingBuf {
            return (Vec::new(), 0);
        }
        // SAFETY: one user at a time (see `slot`).
        let ring = unsafe { &mut *self.ring.get() };
        let records = (0..ring.len)
            .map(|i| {
                let s = (ring.head + i) % self.def.entries;
                // SAFETY: one user at a time; `s` is below `entries`.
                let v = unsafe { self.value(s) };
                v[..ring.lens[s as usize] as usize].to_vec()
            })
            .collect();
        ring.head = (ring.head + ring.len) % self.def.entries;
        ring.len = 0;
        (records, std::mem::take(&mut ring.dropped))
    }

    /// The value in slot `s`.
    ///
    /// # Safety
    /// Nothing else reads or writes that value while the slice lives (one user at a
    /// time, see `slot`).
    #[allow(clippy::mut_from_ref)]
    unsafe fn value(&self, s: u32) -> &mut [u8] {
        let size = self.def.value_size as usize;
        // SAFETY: `s` is a slot `slot` gave, below `entries` times the copies the slab
        // holds, so its value lies inside the slab; exclusive per this function's contract.
        unsafe { std::slice::from_raw_parts_mut((*self.slab.get()).as_mut_ptr().add(s as usize * size), size) }
    }

    /// A pointer to the value under `key`, or null.
    pub fn lookup_ptr(&self, key: &[u8]) -> *mut u8 {
        // A program's lookup in a per-tenant array makes the tenant's copy: it may write
        // through the pointer.
        let make = self.def.kind == MapKind::TenantArray;
        // SAFETY: only the pointer is taken.
        self.slot(key, make).map_or(std::ptr::null_mut(), |s| unsafe { self.value(s) }.as_mut_ptr())
    }

    /// The value under `key`, if any (a per-tenant array's, if the tenant has a copy).
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        // SAFETY: one user at a time (see `slot`); the slot is in the slab.
        self.slot(key, false).map(|s| unsafe { self.value(s) }.to_vec())
    }

    /// Sets the value under `key`; `Err` if the key is out of range or the map is full.
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        if key.len() != self.def.key_size as usize || value.len() != self.def.value_size as usize {
            return Err(format!("this map takes {}-byte keys and {}-byte values", self.def.key_size, self.def.value_size));
        }
        let s = self.slot(key, true).ok_or_else(|| match self.def.kind {
            MapKind::TenantArray if u32::from_le_bytes(key.try_into().unwrap_or_default()) < self.def.entries => {
                format!("no room for another tenant: a per-tenant array holds {TENANT_COPIES} tenants' copies")
            }
            _ => format!("no room for this key: the map holds {} entries", self.def.entries),
        })?;
        // SAFETY: one user at a time (see `slot`).
        unsafe { self.value(s) }.copy_from_slice(value);
        Ok(())
    }

    /// Removes `key` (an array's value is zeroed instead); whether it was there.
    pub fn delete(&self, key: &[u8]) -> bool {
        let Some(s) = self.slot(key, false) else { return false };
        if self.def.kind == MapKind::Hash {
            // SAFETY: one user at a time (see `slot`).
            let slots = unsafe { &mut *self.slots.get() };
            slots.of.remove(key);
            slots.free.push(s);
        }
        // SAFETY: one user at a time (see `slot`).
        unsafe { self.value(s) }.fill(0);
        true
    }

    /// Every key and value present (an array's all; a per-tenant array's of the tenant
    /// [`Map::set_tenant`] named, if it has a copy; a ring buffer has none: its records
    /// are taken with [`Map::take_records`]).
    pub fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let keys: Vec<Vec<u8>> = match self.def.kind {
            MapKind::Array => (0..self.def.entries).map(|i| i.to_le_bytes().to_vec()).collect(),
            MapKind::TenantArray if self.copy_of(self.tenant.get()).is_none() => Vec::new(),
            MapKind::TenantArray => (0..self.def.entries).map(|i| i.to_le_bytes().to_vec()).collect(),
            // SAFETY: one user at a time (see `slot`).
            MapKind::Hash => unsafe { &*self.slots.get() }.of.keys().map(|k| k.to_vec()).collect(),
            MapKind::RingBuf => Vec::new(),
        };
        keys.into_iter().filter_map(|k| self.get(&k).map(|v| (k, v))).collect()
    }

    /// How many entries a reader outside the programs sees (a hash map's present, an
    /// array's that are not zero, a per-tenant array's the same in the copy of the tenant
    /// [`Map::set_tenant`] named; a ring buffer's none), and the first `most` of them.
    pub fn sample(&self, most: usize) -> (usize, Vec<Entry>) {
        let copy = match self.def.kind {
            MapKind::TenantArray => match self.copy_of(self.tenant.get()) {
                Some(c) => c,
                None => return (0, Vec::new()),
            },
            _ => 0,
        };
        match self.def.kind {
            MapKind::Array | MapKind::TenantArray => {
                let len = self.def.entries as usize * self.def.value_size as usize;
                // SAFETY: one user at a time (see `slot`); read in place, nothing allocated
                // for the values not listed.
                let slab = &unsafe { &*self.slab.get() }[copy * len..(copy + 1) * len];
                let mut out = Vec::new();
                let mut total = 0;
                for (i, v) in slab.chunks_exact(self.def.value_size as usize).enumerate().filter(|(_, v)| v.iter().any(|b| *b != 0)) {
                    total += 1;
                    if out.len() < most {
                        out.push(((i as u32).to_le_bytes().to_vec(), v.to_vec()));
                    }
                }
                (total, out)
            }
            MapKind::Hash => {
                // SAFETY: one user at a time (see `slot`); the keys are copied before any
                // value is read.
                let of = &unsafe { &*self.slots.get() }.of;
                let (total, keys): (usize, Vec<Vec<u8>>) = (of.len(), of.keys().take(most).map(|k| k.to_vec()).collect());
                (total, keys.into_iter().filter_map(|k| self.get(&k).map(|v| (k, v))).collect())
            }
            MapKind::RingBuf => (0, Vec::new()),
        }
    }
}

/// A key and its value, as bytes.
pub type Entry = (Vec<u8>, Vec<u8>);

/// Why `ringbuf_output` dropped a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingFull {
    /// Larger than a record, or not a ring buffer.
    TooBig,
    /// Every record is taken.
    Full,
}

mod tenant_copies;
#[cfg(test)]
mod tests;
