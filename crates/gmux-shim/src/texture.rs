//! Texture objects over gmux memory: a kernel receives the object's handle, not the
//! address it reads. gmux records the address behind every texture object over linear
//! or pitched memory, so that a handle found in a kernel's parameters adds that memory to
//! the working set (an integer parameter equal to a handle adds it too: more resident,
//! never less).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static OBJECTS: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);
static ANY: AtomicBool = AtomicBool::new(false);

/// Records that texture object `handle` reads memory at `addr`.
pub fn record(handle: u64, addr: u64) {
    OBJECTS.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).insert(handle, addr);
    ANY.store(true, Ordering::Release);
}

/// Forgets a destroyed texture object.
pub fn forget(handle: u64) {
    if let Some(m) = OBJECTS.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        m.remove(&handle);
    }
}

/// Whether any texture object over memory was recorded (prediction skips the lookup
/// otherwise).
pub fn any() -> bool {
    ANY.load(Ordering::Acquire)
}

/// The address read through texture object `handle`, if gmux saw it created.
pub fn lookup(handle: u64) -> Option<u64> {
    OBJECTS.lock().unwrap_or_else(|p| p.into_inner()).as_ref()?.get(&handle).copied()
}
