//! Each tenant connection's outgoing grants, policy lists and map writes. The daemon
//! posts a connection's newest line of a kind and goes on; a writer task of the
//! connection's own sends it. A grant and a policy list are whole state, so only the
//! newest unsent one of a kind matters; map writes each count, the newest
//! [`MAX_WRITES`] kept. A process that stops reading its socket costs its own writer,
//! never the daemon: no daemon lock is held while a socket is written.

use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

/// The newest unsent lines of one connection: its grant, and its tenant's memory
/// policies. Dropping it stops the writer once its current line is out (or its socket
/// fails).
#[derive(Debug)]
pub struct Outbox {
    next: watch::Sender<Unsent>,
    /// Map writes not taken by the writer yet, numbered as the other lines.
    writes: Writes,
}

type Writes = std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<(u64, String)>>>;

/// The newest line of each kind, numbered in posting order.
#[derive(Debug, Default, Clone)]
struct Unsent {
    grant: Option<(u64, String)>,
    policies: Option<(u64, String)>,
    posted: u64,
}

/// Most map writes kept for a connection's writer: a process that reads none of them
/// loses the oldest.
pub const MAX_WRITES: usize = 64;

impl Outbox {
    /// Replaces the unsent grant, if any, with `line`; never waits for the socket.
    pub fn post(&self, line: String) {
        self.next.send_modify(|u| {
            u.posted += 1;
            u.grant = Some((u.posted, line));
        });
    }

    /// Queues map-write line `line` after the lines posted before it (each write counts,
    /// unlike grants and policy lists); never waits for the socket.
    pub fn post_write(&self, line: String) {
        self.next.send_modify(|u| {
            u.posted += 1;
            let mut q = self.writes.lock().unwrap_or_else(|p| p.into_inner());
            if q.len() >= MAX_WRITES {
                q.pop_front();
            }
            q.push_back((u.posted, line));
        });
    }

    /// Replaces the unsent policies line, if any, with `line`; never waits for the socket.
    /// Unsent lines go in the order they were posted.
    pub fn post_policies(&self, line: String) {
        self.next.send_modify(|u| {
            u.posted += 1;
            u.policies = Some((u.posted, line));
        });
    }
}

/// Starts the writer of `w` on the current runtime and returns its outbox.
/// `stalled(true)` is called when a line has waited `patience` for the peer to read,
/// `stalled(false)` when it is out.
pub fn start<W>(mut w: W, patience: Duration, stalled: impl Fn(bool) + Send + 'static) -> Outbox
where
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (next, mut rx) = watch::channel(Unsent::default());
    let writes = Writes::default();
    let queued = writes.clone();
    tokio::spawn(async move {
        let mut stuck = false;
        let mut sent = 0u64;
        while rx.changed().await.is_ok() {
            let u = rx.borrow_and_update().clone();
            // The writes posted up to this state; those posted since come with the next.
            let taken: Vec<(u64, String)> = {
                let mut q = queued.lock().unwrap_or_else(|p| p.into_inner());
                let upto = q.iter().take_while(|w| w.0 <= u.posted).count();
                q.drain(..upto).collect()
            };
            // A policies line goes no later than the first write: a write may be to a
            // policy that line attaches.
            let first_write = taken.first().map_or(u64::MAX, |w| w.0);
            let policies = u.policies.filter(|(n, _)| *n > sent).map(|(n, l)| ((n.min(first_write), 0), l));
            let grant = u.grant.filter(|(n, _)| *n > sent).map(|(n, l)| ((n, 1), l));
            let mut lines: Vec<((u64, u8), String)> = policies.into_iter().chain(grant).chain(taken.into_iter().map(|(n, l)| ((n, 1), l))).collect();
            lines.sort_by_key(|l| l.0);
            sent = u.posted;
            for (_, line) in lines {
                let mut rest = line.as_bytes();
                while !rest.is_empty() {
                    // `write` is cancel-safe: a write that times out has written nothing.
                    match tokio::time::timeout(patience, w.write(rest)).await {
                        Ok(Ok(0)) | Ok(Err(_)) => return,
                        Ok(Ok(n)) => rest = &rest[n..],
                        Err(_) if rx.has_changed().is_err() => return,
                        Err(_) => {
                            if !stuck {
                                stuck = true;
                                stalled(true);
                            }
                        }
                    }
                }
            }
            if stuck {
                stuck = false;
                stalled(false);
            }
        }
    });
    Outbox { next, writes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_peer_that_does_not_read_never_blocks_a_post_and_gets_the_newest_line() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let stalls = Arc::new(AtomicUsize::new(0));
        let resumes = Arc::new(AtomicUsize::new(0));
        let (s, r) = (stalls.clone(), resumes.clone());
        let outbox = rt.block_on(async {
            let ours = tokio::net::UnixStream::from_std(ours).unwrap();
            start(ours, Duration::from_millis(50), move |stuck| {
                if stuck { &s } else { &r }.fetch_add(1, Ordering::SeqCst);
            })
        });
        // Far more than a socket buffer holds, from a peer that reads nothing.
        let t0 = Instant::now();
        let pad = "x".repeat(1000);
        for i in 0..20_000 {
            outbox.post(format!("{i} {pad}\n"));
        }
        assert!(t0.elapsed() < Duration::from_secs(1), "posting took {:?}", t0.elapsed());
        // Posts coalesce, so keep the writer supplied until the peer's buffer is full.
        let t0 = Instant::now();
        let mut i = 0;
        while stalls.load(Ordering::SeqCst) == 0 {
            assert!(t0.elapsed() < Duration::from_secs(5), "the writer never reported the stall");
            i += 1;
            outbox.post(format!("more {i} {pad}\n"));
            std::thread::sleep(Duration::from_micros(100));
        }
        outbox.post(format!("last {pad}\n"));
        // The peer reads again: lines come whole, and the last one is the newest posted.
        let mut lines = BufReader::new(theirs).lines();
        let mut n = 0;
        loop {
            let line = lines.next().expect("the newest line arrives").unwrap();
            assert!(line.ends_with(&pad), "a line arrived cut: {:?}", &line[..line.len().min(20)]);
            n += 1;
            if line.starts_with("last ") {
                break;
            }
        }
        assert!(n < 20_000 + i, "superseded lines were sent too: {n}");
        let t0 = Instant::now();
        while resumes.load(Ordering::SeqCst) == 0 {
            assert!(t0.elapsed() < Duration::from_secs(5), "the writer never reported it drained");
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(outbox);
        // The writer ends when its outbox is dropped: the peer sees the end of the stream.
        assert!(lines.next().is_none());
    }

    /// An outbox writing to a socket pair, on a runtime of its own (returned, so that the
    /// writer lives), with `post` done on it before the writer first runs or as it runs;
    /// and the lines the peer reads.
    fn posted(post: impl FnOnce(&Outbox)) -> (tokio::runtime::Runtime, Outbox, std::io::Lines<BufReader<std::os::unix::net::UnixStream>>) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let outbox = rt.block_on(async {
            let outbox = start(tokio::net::UnixStream::from_std(ours).unwrap(), Duration::from_secs(5), |_| {});
            post(&outbox);
            outbox
        });
        (rt, outbox, BufReader::new(theirs).lines())
    }

    #[test]
    fn a_policies_line_and_a_grant_both_arrive_in_posting_order_and_neither_replaces_the_other() {
        let (_rt, outbox, mut lines) = posted(|outbox| {
            // A later grant may replace an unsent one, never the policies line.
            outbox.post("grant 1\n".into());
            outbox.post_policies("policies 1\n".into());
            outbox.post("grant 2\n".into());
        });
        let mut next = || lines.next().expect("a line").unwrap();
        let mut got = vec![next()];
        while got.last().map(String::as_str) != Some("grant 2") {
            got.push(next());
        }
        let posted = ["grant 1", "policies 1", "grant 2"];
        let at: Vec<usize> = got.iter().map(|l| posted.iter().position(|p| p == l).expect("a posted line")).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]) && at.contains(&1), "in posting order, the policies line among them: {got:?}");
        outbox.post("grant 3\n".into());
        assert_eq!(next(), "grant 3", "a policies line already sent is not sent again");
    }

    /// Every map write arrives, in posting order among the other lines, unlike grants,
    /// which coalesce; a write sent is not sent again.
    #[test]
    fn every_map_write_arrives_in_posting_order() {
        let (_rt, outbox, mut lines) = posted(|outbox| {
            outbox.post_write("write 1\n".into());
            outbox.post("grant 1\n".into());
            outbox.post_write("write 2\n".into());
            outbox.post_write("write 3\n".into());
        });
        let mut next = || lines.next().expect("a line").unwrap();
        let got: Vec<String> = (0..4).map(|_| next()).collect();
        assert_eq!(got, ["write 1", "grant 1", "write 2", "write 3"]);
        outbox.post("grant 2\n".into());
        assert_eq!(next(), "grant 2", "the writes are not sent again");
    }

    /// A policies line posted after a write replaces the one before it, and still goes
    /// first: the write may be to a policy that only a policies line attaches.
    #[test]
    fn a_write_never_arrives_before_the_policies_line_posted_ahead_of_it() {
        let (_rt, outbox, mut lines) = posted(|outbox| {
            outbox.post_policies("policies 1\n".into());
            outbox.post_write("write 1\n".into());
            outbox.post_policies("policies 2\n".into());
            outbox.post("grant 1\n".into());
        });
        let mut got = Vec::new();
        while got.last().map(String::as_str) != Some("grant 1") {
            got.push(lines.next().expect("a line").unwrap());
        }
        let write = got.iter().position(|l| l == "write 1").expect("the write");
        assert!(got[..write].iter().any(|l| l.starts_with("policies")), "{got:?}");
        assert_eq!(got.last().map(String::as_str), Some("grant 1"));
        drop(outbox);
    }
}
