//! gmux-core: the policy engine of gmux.
//!
//! Pure and deterministic: no CUDA, no I/O, no clock. Time enters only as
//! arguments ([`Nanos`]); the device is reached only through [`device::Device`].
//! The same engine drives the simulator (`gmux-sim`) and the real GPU: the daemon's
//! decisions are [`arbiter`]'s, the shim's planning is [`planner`]'s.

pub mod arbiter;
pub mod device;
pub mod error;
pub mod evict;
pub mod graph_cut;
pub mod hbm;
pub mod history;
pub mod hooks;
pub mod idhash;
pub mod knobs;
pub mod memory;
pub mod mover;
pub mod placement;
pub mod planner;
pub mod pressure;
pub mod protocol;
pub mod sched;
pub mod size;
pub mod spill;
pub mod tenant;
pub mod timeline;

pub use error::CoreError;
pub use memory::{AllocId, ChunkId, Memory, Place, Tier};
pub use size::{Nanos, CHUNK_BYTES};
pub use tenant::{TenantId, Tenants};
pub use timeline::{Slot, Timeline};
