//! Each tenant connection's outgoing grants. The daemon posts a connection's newest grant
//! and goes on; a writer thread of the connection's own sends it. A grant is whole state,
//! so only the newest unsent one matters, and a process that stops reading its socket
//! costs its own writer, never the daemon: no daemon lock is held while a socket is
//! written.

use std::io::{ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The newest unsent line of one connection.
#[derive(Debug, Default)]
pub struct Outbox {
    slot: Mutex<Slot>,
    posted: Condvar,
}

#[derive(Debug, Default)]
struct Slot {
    next: Option<String>,
    closed: bool,
}

impl Outbox {
    /// Replaces the unsent line, if any, with `line`; never waits for the socket.
    pub fn post(&self, line: String) {
        self.lock().next = Some(line);
        self.posted.notify_one();
    }

    /// Stops the writer once its current line is out (or its socket fails).
    pub fn close(&self) {
        self.lock().closed = true;
        self.posted.notify_one();
    }

    fn closed(&self) -> bool {
        self.lock().closed
    }

    /// The next line to send; `None` once closed.
    fn take(&self) -> Option<String> {
        let mut s = self.lock();
        loop {
            if s.closed {
                return None;
            }
            if let Some(line) = s.next.take() {
                return Some(line);
            }
            s = self.posted.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Starts the writer of `stream` and returns its outbox. `stalled(true)` is called when
/// a line has waited `patience` for the peer to read, `stalled(false)` when it is out.
pub fn start(stream: UnixStream, patience: Duration, stalled: impl Fn(bool) + Send + 'static) -> std::io::Result<Arc<Outbox>> {
    stream.set_write_timeout(Some(patience))?;
    let outbox = Arc::new(Outbox::default());
    let o = outbox.clone();
    std::thread::Builder::new().name("gmuxd-send".into()).spawn(move || {
        let mut stuck = false;
        while let Some(line) = o.take() {
            let mut rest = line.as_bytes();
            while !rest.is_empty() {
                match (&stream).write(rest) {
                    Ok(0) => return,
                    Ok(n) => rest = &rest[n..],
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        if o.closed() {
                            return;
                        }
                        if !stuck {
                            stuck = true;
                            stalled(true);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
            if stuck {
                stuck = false;
                stalled(false);
            }
        }
    })?;
    Ok(outbox)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    #[test]
    fn a_peer_that_does_not_read_never_blocks_a_post_and_gets_the_newest_line() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let stalls = Arc::new(AtomicUsize::new(0));
        let resumes = Arc::new(AtomicUsize::new(0));
        let (s, r) = (stalls.clone(), resumes.clone());
        let outbox = start(ours, Duration::from_millis(50), move |stuck| {
            if stuck { &s } else { &r }.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
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
        outbox.close();
    }
}
