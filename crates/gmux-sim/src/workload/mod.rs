//! Workloads: generators of command streams with their working sets.
//!
//! Sizes in a scenario are those at 100% subscription; a subscription level scales
//! every size of every tenant by the same factor.

mod sources;
mod spec;

pub use spec::{Arrivals, Size, WorkloadSpec};

/// An allocation a workload makes before its first command.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllocSpec {
    /// Bytes.
    pub bytes: u64,
    /// Contents start in the disk tier (a data set read from SSD).
    pub on_disk: bool,
}

/// A byte range a command touches, inside one of the workload's allocations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Access {
    /// Index into the workload's allocations.
    pub alloc: usize,
    /// First byte.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Written (invalidates a clean disk copy).
    pub write: bool,
}

/// One command of a tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// Time on the GPU when its data is resident, ns.
    pub duration_ns: f64,
    /// What it touches.
    pub ws: Vec<Access>,
    /// Last command of a task or request.
    pub task_end: bool,
    /// Arrival of the request this command starts, ns; it may not run earlier.
    pub arrival_ns: Option<f64>,
}

/// A stream of commands.
pub trait Source {
    /// Allocations made up front.
    fn allocs(&self) -> Vec<AllocSpec>;
    /// Next command; `None` when the workload is finished.
    fn next(&mut self) -> Option<Command>;
}

fn whole(alloc: usize, bytes: u64, write: bool) -> Access {
    Access { alloc, offset: 0, len: bytes, write }
}

#[cfg(test)]
mod tests;
