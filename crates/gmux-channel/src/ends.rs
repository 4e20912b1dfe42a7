//! The channel's two ends: the daemon's [`Server`] and the application's [`Client`].
//!
//! Each side polls for a short while after it was busy, then sleeps until woken:
//! notify-then-poll. The daemon sleeps on an eventfd (so that one thread waits for many
//! channels with epoll), the application on a futex word in the region (which the daemon
//! wakes with a system call that cannot block it).

use crate::message::{BadMessage, Message};
use crate::region::{self, Region};
use crate::ring::{Corrupt, Reader, Writer};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The in-flight word's value that holds the application's commands: it releases no new
/// one until the daemon writes another ([`Server::set_inflight`]).
pub const HOLD: u32 = u32::MAX;

/// How long [`Client::recv`] polls before it sleeps.
pub const CLIENT_POLL: Duration = Duration::from_micros(50);

/// Why a channel is closed: the other end wrote something no channel holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// An index of a ring is out of range.
    Index,
    /// A slot holds no message.
    Message(BadMessage),
}

impl From<Corrupt> for Broken {
    fn from(_: Corrupt) -> Broken {
        Broken::Index
    }
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Broken::Index => write!(f, "a ring index out of range"),
            Broken::Message(m) => m.fmt(f),
        }
    }
}

/// What the daemon hands an application to open its end: the region's memfd and the
/// eventfd that wakes the daemon.
#[derive(Debug)]
pub struct Handover {
    /// The region.
    pub memory: OwnedFd,
    /// Written to wake the daemon.
    pub wake: OwnedFd,
}

/// The daemon's end of one process's channel.
pub struct Server {
    region: Region,
    wake: OwnedFd,
    up: Reader,
    down: Writer,
}

impl Server {
    /// A new channel: the daemon's end, and what the application needs to open its own.
    pub fn create() -> io::Result<(Server, Handover)> {
        let (region, memory) = Region::create()?;
        let wake = region::eventfd()?;
        let handed = Handover { memory, wake: wake.try_clone()? };
        Ok((Server { region, wake, up: Reader::default(), down: Writer::default() }, handed))
    }

    /// The next message from the application, if one is waiting.
    pub fn recv(&mut self) -> Result<Option<Message>, Broken> {
        let Some(w) = self.up.pop(&self.region.layout().up)? else { return Ok(None) };
        match Message::decode(&w).map_err(Broken::Message)? {
            m if m.from_application() => Ok(Some(m)),
            _ => Err(Broken::Message(BadMessage::WrongWay)),
        }
    }

    /// Sends `m`, waking the application if it sleeps. `Ok(false)`: its ring is full
    /// (the application reads none of its answers), and `m` is dropped.
    pub fn send(&mut self, m: &Message) -> Result<bool, Broken> {
        let ring = &self.region.layout().down;
        let sent = self.down.push(ring, &m.encode())?;
        if sent && Writer::reader_sleeps(ring) {
            region::futex_wake(&ring.sleeping.0);
        }
        Ok(sent)
    }

    /// Asks the application to keep at most `n` commands in flight per stream (0: no
    /// bound; [`HOLD`]: release none), waking its threads that wait while held.
    pub fn set_inflight(&self, n: u32) {
        let word = &self.region.layout().inflight.0;
        if word.swap(n, std::sync::atomic::Ordering::AcqRel) == HOLD && n != HOLD {
            region::futex_wake_all(word);
        }
    }

    /// Marks the daemon asleep on this channel unless a message waits: returns whether
    /// it may sleep. The application then rings [`Server::wake_fd`] after its next
    /// message.
    pub fn sleep_unless_pending(&self) -> Result<bool, Broken> {
        Ok(self.up.sleep_unless_pending(&self.region.layout().up)?)
    }

    /// The eventfd the application rings after a message while the daemon sleeps. The
    /// daemon waits for it edge-triggered and never reads it: the application shares its
    /// file description, and could make a read block (by clearing `O_NONBLOCK`) or find
    /// nothing (by reading first).
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// After a wake-up: marks the daemon awake.
    pub fn woken(&self) {
        Reader::awake(&self.region.layout().up);
    }
}

/// The application's end of its channel. Any thread may use it: sending and receiving
/// each take a lock of their own, so a thread waiting for an answer holds up no sender.
pub struct Client {
    region: Region,
    wake: OwnedFd,
    up: Mutex<Writer>,
    down: Mutex<Reader>,
}

impl Client {
    /// Asks the daemon for a channel on `stream`, a new connection to it: sends `request`
    /// (one line) and reads the answer within `within`. Returns the answer's line, and the
    /// channel if the daemon handed one over with it.
    pub fn ask(stream: &UnixStream, request: &[u8], within: Duration) -> io::Result<(String, Option<Client>)> {
        (&*stream).write_all(request)?;
        stream.set_read_timeout(Some(within))?;
        let mut buf = [0u8; 4096];
        let (n, mut fds) = crate::recv_with_fds(stream.as_raw_fd(), &mut buf)?;
        let line = String::from_utf8_lossy(&buf[..n]).trim().to_string();
        if fds.len() != 2 {
            return Ok((line, None));
        }
        let wake = fds.pop().expect("two");
        let memory = fds.pop().expect("two");
        Ok((line, Some(Client::open(Handover { memory, wake })?)))
    }

    /// Opens the end that the daemon handed over.
    pub fn open(h: Handover) -> io::Result<Client> {
        Ok(Client { region: Region::open(&h.memory)?, wake: h.wake, up: Mutex::default(), down: Mutex::default() })
    }

    /// Sends `m`, waking the daemon if it sleeps. `Ok(false)`: the ring is full (the
    /// daemon is behind), and `m` is not sent.
    pub fn send(&self, m: &Message) -> Result<bool, Broken> {
        let ring = &self.region.layout().up;
        let sent = self.up.lock().unwrap_or_else(|p| p.into_inner()).push(ring, &m.encode())?;
        if sent && Writer::reader_sleeps(ring) {
            region::ring_eventfd(self.wake.as_raw_fd());
        }
        Ok(sent)
    }

    /// The most commands the daemon asks this process to keep in flight per stream (0: no
    /// bound; [`HOLD`]: release none).
    pub fn inflight(&self) -> u32 {
        self.region.layout().inflight.0.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Sleeps while the daemon holds this process's commands ([`HOLD`]), at most
    /// `timeout`: returns whether it still holds them.
    pub fn wait_while_held(&self, timeout: Duration) -> bool {
        let word = &self.region.layout().inflight.0;
        let start = Instant::now();
        while word.load(std::sync::atomic::Ordering::Acquire) == HOLD {
            let Some(left) = timeout.checked_sub(start.elapsed()).filter(|l| !l.is_zero()) else { return true };
            region::futex_wait(word, HOLD, left);
        }
        false
    }

    /// The next message from the daemon, if one is waiting.
    pub fn try_recv(&self) -> Result<Option<Message>, Broken> {
        let Some(w) = self.down.lock().unwrap_or_else(|p| p.into_inner()).pop(&self.region.layout().down)? else { return Ok(None) };
        match Message::decode(&w).map_err(Broken::Message)? {
            m if !m.from_application() => Ok(Some(m)),
            _ => Err(Broken::Message(BadMessage::WrongWay)),
        }
    }

    /// The next message from the daemon, waiting at most `timeout`: polls for
    /// [`CLIENT_POLL`], then sleeps until the daemon wakes it.
    pub fn recv(&self, timeout: Duration) -> Result<Option<Message>, Broken> {
        let start = Instant::now();
        loop {
            if let Some(m) = self.try_recv()? {
                return Ok(Some(m));
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Ok(None);
            }
            if waited < CLIENT_POLL {
                std::hint::spin_loop();
                continue;
            }
            let ring = &self.region.layout().down;
            let sleeps = self.down.lock().unwrap_or_else(|p| p.into_inner()).sleep_unless_pending(ring)?;
            if sleeps {
                region::futex_wait(&ring.sleeping.0, 1, timeout - waited);
                Reader::awake(ring);
            }
        }
    }
}
