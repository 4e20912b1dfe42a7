//! Tiers, where a chunk lives, and capacity and usage counted per tier.

use crate::size::CHUNK_BYTES;
use serde::{Deserialize, Serialize};

/// A storage tier, fastest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Tier {
    /// GPU memory (HBM).
    Gpu,
    /// Pinned host memory.
    Host,
    /// Spill file on local SSD.
    Disk,
}

impl Tier {
    /// All tiers, fastest first.
    pub const ALL: [Tier; 3] = [Tier::Gpu, Tier::Host, Tier::Disk];

    pub(super) fn index(self) -> usize {
        self as usize
    }
}

/// Where a chunk's data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Place {
    /// Never touched: no physical memory, contents are zero.
    Unbacked,
    /// In a tier.
    In(Tier),
    /// In host memory mapped at the chunk's own addresses: commands reach it over the
    /// link, slower than GPU memory, and it does not count against the GPU budget. A
    /// command whose working set exceeds the limit runs with the excess here.
    HostMapped,
}

impl Place {
    /// Resident in GPU memory.
    pub const GPU: Place = Place::In(Tier::Gpu);
    /// In the pinned host pool.
    pub const HOST: Place = Place::In(Tier::Host);
    /// In the spill file.
    pub const DISK: Place = Place::In(Tier::Disk);

    /// The tier whose memory holds the data (`None`: no memory yet).
    pub fn tier(self) -> Option<Tier> {
        match self {
            Place::Unbacked => None,
            Place::In(t) => Some(t),
            Place::HostMapped => Some(Tier::Host),
        }
    }
}

/// Capacity of each tier in bytes; `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Capacities {
    /// GPU-memory budget (the HBM budget).
    pub gpu: Option<u64>,
    /// Host-tier budget.
    pub host: Option<u64>,
    /// Disk-tier budget.
    pub disk: Option<u64>,
}

impl Capacities {
    /// Capacity of `tier` in chunks; `None` is unlimited.
    pub fn chunks(&self, tier: Tier) -> Option<u64> {
        let bytes = match tier {
            Tier::Gpu => self.gpu,
            Tier::Host => self.host,
            Tier::Disk => self.disk,
        };
        bytes.map(|b| b / CHUNK_BYTES)
    }
}

/// Per-tenant chunk counts by tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Chunks in each tier, indexed by [`Tier`].
    pub chunks: [u64; 3],
}

impl Usage {
    /// Bytes held in `tier`.
    pub fn bytes(&self, tier: Tier) -> u64 {
        self.chunks[tier.index()] * CHUNK_BYTES
    }
}
