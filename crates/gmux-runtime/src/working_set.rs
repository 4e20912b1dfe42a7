//! What a command touches, as the runtime sees it: allocations or byte ranges of them.

use gmux_core::AllocId;

/// The allocations of a working set: held inline up to a kernel's usual count, so that
/// a launch allocates no heap memory for them.
pub type Allocs = smallvec::SmallVec<[AllocId; 16]>;

/// What a command touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkingSet {
    /// These allocations.
    Allocs(Allocs),
    /// Byte ranges of allocations (a piece of a copy or memset streamed through the limit).
    Spans(Vec<Span>),
    /// Everything (a command gmux cannot analyse).
    Tenant,
}

/// `len` bytes from `offset` in an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The allocation.
    pub alloc: AllocId,
    /// First byte, from the allocation's start.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}
