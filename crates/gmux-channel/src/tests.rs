use super::*;
use proptest::prelude::*;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn pair() -> (Server, Client) {
    let (server, handed) = Server::create().expect("channel");
    (server, Client::open(handed).expect("open"))
}

/// A third mapping of a channel's region, as a hostile application would write it.
fn scribbler() -> (Server, Client, crate::region::Region) {
    let (server, handed) = Server::create().expect("channel");
    let raw = crate::region::Region::open(&handed.memory).expect("map");
    (server, Client::open(handed).expect("open"), raw)
}

fn words(region: &crate::region::Region) -> &[AtomicU64] {
    let len = std::mem::size_of::<crate::region::Layout>() / 8;
    // SAFETY: the layout is `len` words of atomics, valid while `region` lives.
    unsafe { std::slice::from_raw_parts(region.layout() as *const _ as *const AtomicU64, len) }
}

#[test]
fn messages_travel_both_ways_in_order_and_a_full_ring_refuses_more() {
    let (mut server, client) = pair();
    for seq in 0..SLOTS as u64 {
        assert_eq!(client.send(&Message::Ping { seq }), Ok(true));
    }
    assert_eq!(client.send(&Message::Ping { seq: 999 }), Ok(false), "the 257th message of a full ring");
    for seq in 0..SLOTS as u64 {
        assert_eq!(server.recv(), Ok(Some(Message::Ping { seq })));
        assert_eq!(server.send(&Message::Pong { seq }), Ok(true));
    }
    assert_eq!(server.recv(), Ok(None));
    // Round the ring several times.
    for seq in 0..3 * SLOTS as u64 {
        let name = JobName::new(&format!("job-{seq}"));
        assert_eq!(client.send(&Message::JobBegin { job: seq, name, expected_ns: seq * 1000 }), Ok(true));
        assert_eq!(server.recv(), Ok(Some(Message::JobBegin { job: seq, name, expected_ns: seq * 1000 })));
    }
    for seq in 0..SLOTS as u64 {
        assert_eq!(client.try_recv(), Ok(Some(Message::Pong { seq })));
    }
    assert_eq!(client.try_recv(), Ok(None));
    // The in-flight bound the daemon asks for.
    assert_eq!(client.inflight(), 0);
    server.set_inflight(2);
    assert_eq!(client.inflight(), 2);
}

#[test]
fn job_names_are_cut_at_a_character_and_round_trip() {
    let long = "é".repeat(40);
    let n = JobName::new(&long);
    assert_eq!(n.as_str().len(), MAX_JOB_NAME, "20 two-byte characters");
    let odd = format!("a{}", "é".repeat(40));
    assert_eq!(JobName::new(&odd).as_str().len(), MAX_JOB_NAME - 1, "a character is never split");
    let m = Message::JobBegin { job: 7, name: JobName::new("resnet50"), expected_ns: 5_000_000 };
    assert_eq!(Message::decode(&m.encode()), Ok(m));
}

#[test]
fn a_forged_index_or_slot_breaks_only_that_channel() {
    let (mut server, client, raw) = scribbler();
    let (mut other, other_client) = pair();
    client.send(&Message::Ping { seq: 1 }).unwrap();
    // The application claims 1,000 slots are waiting.
    let up_tail = &raw.layout().up.tail.0;
    up_tail.store(up_tail.load(Ordering::Relaxed).wrapping_add(1000), Ordering::Relaxed);
    assert_eq!(server.recv(), Err(Broken::Index));
    // And a slot of an unknown kind, and a name too long.
    let (mut server, client, raw) = scribbler();
    client.send(&Message::Ping { seq: 1 }).unwrap();
    raw.layout().up.slots[0][0].store(77, Ordering::Relaxed);
    assert_eq!(server.recv(), Err(Broken::Message(BadMessage::Kind(77))));
    client.send(&Message::Ping { seq: 2 }).unwrap();
    raw.layout().up.slots[1][0].store(1 | (41 << 32), Ordering::Relaxed);
    assert_eq!(server.recv(), Err(Broken::Message(BadMessage::NameLength(41))));
    // A message only the daemon sends.
    client.send(&Message::Pong { seq: 3 }).unwrap();
    assert_eq!(server.recv(), Err(Broken::Message(BadMessage::WrongWay)));
    // The application's head of the daemon's ring, past what was sent.
    raw.layout().down.head.0.store(5000, Ordering::Relaxed);
    assert_eq!(server.send(&Message::Pong { seq: 1 }), Err(Broken::Index));
    // Another channel is untouched.
    other_client.send(&Message::Ping { seq: 3 }).unwrap();
    assert_eq!(other.recv(), Ok(Some(Message::Ping { seq: 3 })));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn any_writes_to_the_region_give_messages_or_a_broken_channel(
        writes in proptest::collection::vec((0usize..4200, any::<u64>()), 1..64),
        sends in 0u64..300,
    ) {
            let (mut server, client, raw) = scribbler();
        for seq in 0..sends {
            let _ = client.send(&Message::Ping { seq });
        }
        let w = words(&raw);
        for (i, v) in writes {
            w[i % w.len()].store(v, Ordering::Relaxed);
        }
        // At most a ring's worth of messages, then nothing or a broken channel.
        let mut got = 0;
        while let Ok(Some(_)) = server.recv() {
            got += 1;
            prop_assert!(got <= SLOTS);
        }
        let _ = server.send(&Message::Pong { seq: 0 });
        let _ = server.sleep_unless_pending();
    }

    #[test]
    fn every_message_decodes_to_itself(job in any::<u64>(), ns in any::<u64>(), name in "\\PC{0,50}") {
        for m in [
            Message::JobBegin { job, name: JobName::new(&name), expected_ns: ns },
            Message::JobEnd { job },
            Message::Ping { seq: job },
            Message::Pong { seq: ns },
        ] {
            prop_assert_eq!(Message::decode(&m.encode()), Ok(m));
        }
    }
}

/// Waits for the eventfd `fd` to be readable, at most `ms`.
fn readable(fd: &impl AsFd, ms: i32) -> bool {
    let mut p = libc::pollfd { fd: fd.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

#[test]
fn a_sleeping_daemon_is_woken_by_the_eventfd_and_a_sleeping_application_by_the_futex() {
    let (mut server, handed) = Server::create().unwrap();
    // SAFETY: dup of an open descriptor.
    let wake = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(libc::dup(handed.wake.as_raw_fd())) };
    let client = Client::open(handed).unwrap();
    let daemon = std::thread::spawn(move || {
        for _ in 0..100 {
            // Sleep on the eventfd as the dispatcher does.
            let m = loop {
                if let Some(m) = server.recv().unwrap() {
                    break m;
                }
                if server.sleep_unless_pending().unwrap() {
                    assert!(readable(&wake, 5000), "the application's message woke the daemon");
                    let mut v = [0u8; 8];
                    // SAFETY: reads at most 8 bytes into a live buffer (the test's own reset;
                    // the daemon waits edge-triggered instead).
                    unsafe { libc::read(wake.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
                    server.woken();
                }
            };
            let Message::Ping { seq } = m else { panic!("{m:?}") };
            // Past the application's polling, so that it sleeps on the futex.
            std::thread::sleep(Duration::from_micros(300));
            assert_eq!(server.send(&Message::Pong { seq }), Ok(true));
        }
    });
    for seq in 0..100 {
        std::thread::sleep(Duration::from_micros(200));
        assert_eq!(client.send(&Message::Ping { seq }), Ok(true));
        let t = Instant::now();
        assert_eq!(client.recv(Duration::from_secs(5)), Ok(Some(Message::Pong { seq })));
        assert!(t.elapsed() < Duration::from_secs(1), "woken, not timed out");
    }
    daemon.join().unwrap();
    assert_eq!(client.recv(Duration::from_millis(2)), Ok(None), "nothing more, after the timeout");
}

#[test]
fn descriptors_pass_over_a_socket_with_their_line() {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let (mut server, handed) = Server::create().unwrap();
    send_with_fds(a.as_raw_fd(), b"{\"channel\":1}\n", &[handed.memory.as_raw_fd(), handed.wake.as_raw_fd()]).unwrap();
    drop(handed);
    let mut buf = [0u8; 64];
    let (n, mut fds) = recv_with_fds(b.as_raw_fd(), &mut buf).unwrap();
    assert_eq!(&buf[..n], b"{\"channel\":1}\n");
    assert_eq!(fds.len(), 2);
    let wake = fds.pop().unwrap();
    let memory = fds.pop().unwrap();
    let client = Client::open(Handover { memory, wake }).unwrap();
    client.send(&Message::JobEnd { job: 42 }).unwrap();
    assert_eq!(server.recv(), Ok(Some(Message::JobEnd { job: 42 })));
}

#[test]
fn threads_held_by_the_daemon_wake_when_it_lets_them_go_and_not_before() {
    let (server, client) = pair();
    let client = std::sync::Arc::new(client);
    assert!(!client.wait_while_held(Duration::from_secs(5)), "not held: returns at once");
    server.set_inflight(HOLD);
    assert!(client.wait_while_held(Duration::from_millis(30)), "still held after the timeout");
    let t0 = Instant::now();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let c = client.clone();
            std::thread::spawn(move || (c.wait_while_held(Duration::from_secs(10)), t0.elapsed()))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    server.set_inflight(2);
    for w in waiters {
        let (held, waited) = w.join().unwrap();
        assert!(!held);
        assert!(waited >= Duration::from_millis(100) && waited < Duration::from_secs(5), "woken after {waited:?}");
    }
    assert_eq!(client.inflight(), 2);
}
