//! Shallow queues while a short job runs: Paella's rule that a short job never waits
//! behind a long job's queued kernels, at the granularity gmux has in every process
//! without deferring commands. The processes whose running jobs are all far longer
//! than the shortest job running anywhere keep at most [`SHALLOW`] commands in flight
//! per stream: the GPU reaches the short job's kernels after at most that many of
//! theirs. Nothing is held back, so no job starves, and with no short job running no
//! queue is bounded.
//!
//! Jobs are compared by their whole length, not by what they have left: a job about
//! to end would otherwise make every other job look long, short ones too, and a short
//! job held to two commands in flight waits for each of its kernels in turn.

use super::JobSizes;

/// Commands in flight per stream for a process held shallow.
pub const SHALLOW: u32 = 2;

/// How many times longer than the shortest running job a process's jobs must all be for
/// it to be held shallow.
pub const SHALLOW_RATIO: u64 = 4;

/// Each process's bound on commands in flight per stream (0: none), from how long its
/// running jobs are. A process with a job of no estimate, or with no job running, is
/// never bounded: it may be a short job.
pub fn shallow_bounds(sizes: &[JobSizes]) -> Vec<u32> {
    let shortest = sizes.iter().filter_map(|l| l.shortest).min();
    sizes
        .iter()
        .map(|l| match (shortest, l.shortest) {
            (Some(s), Some(mine)) if l.unknown == 0 && mine > s.saturating_mul(SHALLOW_RATIO) => SHALLOW,
            _ => 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(shortest: u64) -> JobSizes {
        JobSizes { shortest: Some(shortest), unknown: 0 }
    }

    #[test]
    fn long_jobs_go_shallow_only_while_a_much_shorter_one_runs() {
        let idle = JobSizes::default();
        // A 1 ms job beside 20 ms and 3 ms ones: only the 20 ms one is four times longer.
        assert_eq!(shallow_bounds(&[running(1_000_000), running(20_000_000), running(3_000_000)]), vec![0, SHALLOW, 0]);
        // No short job running: nobody is bounded, however long.
        assert_eq!(shallow_bounds(&[idle, running(20_000_000)]), vec![0, 0]);
        assert_eq!(shallow_bounds(&[running(20_000_000)]), vec![0]);
        // A job of no estimate may be short: its process is never bounded.
        let guess = JobSizes { shortest: Some(20_000_000), unknown: 1 };
        assert_eq!(shallow_bounds(&[running(1_000_000), guess]), vec![0, 0]);
        // The serving benchmark's short models (1.35 to 3.28 ms on an H200) never hold each
        // other, whatever each has left; its 15 ms model is held beside any of them.
        let ms = |x: f64| running((x * 1e6) as u64);
        assert_eq!(shallow_bounds(&[ms(1.35), ms(3.28), ms(1.64), ms(15.11)]), vec![0, 0, 0, SHALLOW]);
        assert_eq!(shallow_bounds(&[ms(3.28), ms(15.11)]), vec![0, SHALLOW]);
        // Exactly four times is not more.
        assert_eq!(shallow_bounds(&[running(1_000), running(4_000)]), vec![0, 0]);
    }
}
