//! Attacks on gmuxd by a second user: uid 65534 (nobody, group nogroup), against a daemon
//! and a tenant of root's, the daemon shared with group nogroup (`--group`). Acting as
//! another user needs root, as CI runs; run by anyone else, the test says so and checks
//! nothing.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

/// Runs `cmd` as uid and gid 65534 with no supplementary groups.
fn as_nobody(cmd: &mut Command) -> &mut Command {
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(NOBODY) != 0 || libc::setuid(NOBODY) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// A copy of `file` in `dir`, executable by everyone (the originals may sit in a
/// directory that only root can reach).
fn reachable_copy(file: &Path, dir: &Path) -> PathBuf {
    let to = dir.join(file.file_name().unwrap());
    std::fs::copy(file, &to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    to
}

/// A daemon of root's shared with group nogroup (`--group`), its binaries where uid 65534
/// can run them.
struct SharedDaemon {
    sb: Sandbox,
    /// A folder everyone may read.
    bin: PathBuf,
    /// gmux, and this test executable, in `bin`.
    gmux: PathBuf,
    me: PathBuf,
    socket: PathBuf,
    daemon: std::process::Child,
}

impl SharedDaemon {
    /// Starts `gmux daemon --hbm 64M --group nogroup FLAGS` and waits until it answers.
    fn start(name: &str, flags: &[&str]) -> SharedDaemon {
        let sb = Sandbox::new(name, 1 << 30);
        std::fs::set_permissions(sb.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let bin = sb.dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let gmux = reachable_copy(&gmux_bin(), &bin);
        let me = reachable_copy(&std::env::current_exe().unwrap(), &bin);
        let socket = sb.dir.path().join("run").join("gpu0.sock");
        let log = std::fs::File::create(sb.dir.path().join("daemon.log")).unwrap();
        let daemon = Command::new(gmux_bin())
            .args(["daemon", "--hbm", "64M", "--group", "nogroup"])
            .args(flags)
            .arg("--socket")
            .arg(&socket)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        // The file appears at bind, a moment before connections are accepted.
        let t0 = Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).map(|mut s| std::io::Write::write_all(&mut s, b"{\"op\":\"ps\"}\n")).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(5), "daemon did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        SharedDaemon { sb, bin, gmux, me, socket, daemon }
    }
}

/// `gmux ARGS` against the daemon at `socket`, as uid 65534 if `nobody`.
fn ctl(gmux: &Path, socket: &Path, args: &[&str], nobody: bool) -> Ran {
    let mut c = Command::new(gmux);
    c.args(args).env("GMUX_SOCKET", socket);
    if nobody {
        as_nobody(&mut c);
    }
    run_within(&mut c, Duration::from_secs(10))
}

#[test]
fn another_user_can_neither_join_nor_read_nor_change_nor_stop_what_is_not_theirs() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: acting as a second user needs root (CI runs as root)");
        return;
    }
    let SharedDaemon { sb, gmux, me, socket, mut daemon, .. } = SharedDaemon::start("attacks", &[]);
    let ctl = |args: &[&str], nobody: bool| ctl(&gmux, &socket, args, nobody);
    // Root's tenant, running.
    let mut victim = sb.gmux(None, ["loop", "--buffers", "4", "--bytes", "4M", "--rounds", "100000"]);
    victim.env_remove("GMUX_SOCKET").env("GMUX_SOCKET", &socket).env("GMUX_TENANT", "victim").stdout(Stdio::null()).stderr(Stdio::null());
    let mut victim = victim.spawn().unwrap();
    let t0 = Instant::now();
    while !ctl(&["get", "victim", "ggroup.stat"], false).stdout.contains("commands") {
        assert!(t0.elapsed() < Duration::from_secs(20), "the victim never joined");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Listing and reading: nobody sees root's tenant as one that does not exist.
    let ps = ctl(&["ps"], true);
    assert!(ps.status.success() && !ps.stdout.contains("victim"), "{}", ps.describe());
    let theirs = ctl(&["get", "victim", "gmem.limit.high"], true);
    let none = ctl(&["get", "nosuch", "gmem.limit.high"], true);
    assert!(!theirs.status.success(), "{}", theirs.describe());
    assert_eq!(theirs.stderr.replace("victim", "X"), none.stderr.replace("nosuch", "X"), "a hidden tenant answers unlike a missing one");
    // Writing and stopping.
    let set = ctl(&["set", "victim", "gmem.limit.high", "2M"], true);
    assert!(!set.status.success() && set.stderr.contains("permission denied"), "{}", set.describe());
    let stop = ctl(&["stop"], true);
    assert!(!stop.status.success(), "{}", stop.describe());
    let list = ctl(&["policy", "list"], true);
    assert!(!list.status.success() && list.stderr.contains("permission denied"), "no tenant policies without --allow-tenant-policies: {}", list.describe());
    // Joining root's tenant with a tiny limit, then one of its own.
    let hello = |tenant: &str| {
        let mut c = Command::new(&me);
        c.args(["--exact", "hello_as_another_user", "--ignored", "--nocapture"]).env("GMUX_SOCKET", &socket).env("GMUX_ATTACK_TENANT", tenant);
        let r = run_within(as_nobody(&mut c), Duration::from_secs(20));
        r.stdout.lines().find_map(|l| l.strip_prefix("ANSWER ").map(str::to_string)).unwrap_or_else(|| panic!("no answer: {}", r.describe()))
    };
    let joined = hello("victim");
    assert!(joined.contains("another user's"), "{joined}");
    // Watching: nobody's `gmux events` streams its own tenant's events and none of root's.
    let hidden = ctl(&["events", "--tenant", "victim"], true);
    assert!(!hidden.status.success() && hidden.stderr.contains("unknown tenant \"victim\""), "{}", hidden.describe());
    let mut watch = Command::new(&gmux);
    watch.args(["events", "--json"]).env("GMUX_SOCKET", &socket).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut watch = as_nobody(&mut watch).spawn().unwrap();
    let lines = std::io::BufRead::lines(std::io::BufReader::new(watch.stdout.take().unwrap()));
    let (tx, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| _ = tx.send(l)));
    // The watcher is subscribed once one of nobody's own joins reaches it (the leave of a
    // join it subscribed after may come first).
    let t0 = Instant::now();
    let first = loop {
        let own = hello("nobodys");
        assert!(own.contains("\"cap\""), "a member of the daemon's group runs a tenant of its own: {own}");
        if let Some(l) = std::iter::from_fn(|| seen.recv_timeout(Duration::from_secs(2)).ok()).find(|l| !l.contains("\"left\"")) {
            break l;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "nobody's watcher never heard of its own tenant");
    };
    assert!(first.contains("\"joined\"") && first.contains("nobodys"), "{first}");
    // Root's tenant changes, then nobody joins again: the watcher hears only the latter.
    assert!(ctl(&["set", "victim", "compute.timeslice", "30ms"], false).status.success());
    hello("nobodys");
    let mut after = Vec::new();
    while let Ok(l) = seen.recv_timeout(Duration::from_secs(2)) {
        after.push(l);
    }
    assert!(after.iter().any(|l| l.contains("\"joined\"") && l.contains("nobodys")), "{after:?}");
    assert!(after.iter().all(|l| l.contains("nobodys") && !l.contains("victim")), "{after:?}");
    let _ = watch.kill();
    let _ = watch.wait();
    // Holding more connections than a user may.
    let mut c = Command::new(&me);
    c.args(["--exact", "hello_as_another_user", "--ignored", "--nocapture"]).env("GMUX_SOCKET", &socket).env("GMUX_ATTACK_CONNS", "300");
    let r = run_within(as_nobody(&mut c), Duration::from_secs(30));
    assert!(r.stdout.contains("ANSWER") && r.stdout.contains("already holds 256 connections"), "{}", r.describe());

    assert_eq!(ctl(&["get", "victim", "gmem.limit.high"], false).stdout.trim(), "max", "root's tenant was changed");
    assert!(ctl(&["ps"], false).stdout.contains("victim"), "the daemon stopped serving root");
    assert!(victim.try_wait().unwrap().is_none(), "the victim died");
    let _ = victim.kill();
    let _ = victim.wait();
    let _ = ctl(&["stop"], false);
    let _ = daemon.wait();
}

#[test]
fn a_user_allowed_tenant_policies_loads_memory_programs_for_their_own_tenants_alone() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: acting as a second user needs root (CI runs as root)");
        return;
    }
    let SharedDaemon { sb: _sb, bin, gmux, me, socket, mut daemon } = SharedDaemon::start("attacks-policies", &["--allow-tenant-policies"]);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(lfu) = compile_policy(&root.join("policies/lfu.c"), &bin.join("lfu.o")) else {
        let _ = daemon.kill();
        return;
    };
    let rt = compile_policy(&root.join("policies/rt_boost.c"), &bin.join("rt_boost.o")).expect("clang");
    for o in [&lfu, &rt] {
        std::fs::set_permissions(o, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let ctl = |args: &[&str], nobody: bool| ctl(&gmux, &socket, args, nobody);
    // A tenant of root's and one of nobody's, each made by a Hello.
    let said = |tenant: &str, nobody: bool, snapshot: Option<&str>| {
        let mut c = Command::new(&me);
        c.args(["--exact", "hello_as_another_user", "--ignored", "--nocapture"]).env("GMUX_SOCKET", &socket).env("GMUX_ATTACK_TENANT", tenant);
        if let Some(value) = snapshot {
            c.env("GMUX_ATTACK_SNAPSHOT", value);
        }
        if nobody {
            as_nobody(&mut c);
        }
        let r = run_within(&mut c, Duration::from_secs(20));
        assert!(r.stdout.contains("\"cap\""), "{tenant} joined: {}", r.describe());
    };
    let hello = |tenant: &str, nobody: bool| said(tenant, nobody, None);
    hello("roots", false);
    hello("nobodys", true);
    let path = |p: &Path| p.to_str().unwrap().to_string();

    let r = ctl(&["policy", "load", &path(&lfu)], true);
    assert!(!r.status.success() && r.stderr.contains("name your tenant with --tenant"), "{}", r.describe());
    let (theirs, none) = (ctl(&["policy", "load", &path(&lfu), "--tenant", "roots"], true), ctl(&["policy", "load", &path(&lfu), "--tenant", "nosuch"], true));
    assert!(!theirs.status.success() && theirs.stderr.contains("unknown tenant \"roots\""), "{}", theirs.describe());
    assert_eq!(theirs.stderr.replace("roots", "X"), none.stderr.replace("nosuch", "X"), "root's tenant answers as a missing one");
    let r = ctl(&["policy", "load", &path(&rt), "--tenant", "nobodys"], true);
    assert!(!r.status.success() && r.stderr.contains("task_init program decides for every tenant"), "{}", r.describe());
    let r = ctl(&["policy", "load", &path(&lfu), "--tenant", "nobodys"], true);
    assert!(r.status.success() && r.stdout.contains("loaded policy 1 (lfu.o): access, evict_prepare"), "{}", r.describe());
    // What a process says its copy of the policy's map holds is kept only from a process
    // of a tenant the policy runs in, and only in the map's sizes.
    said("nobodys", true, Some("0700000000000000"));
    said("roots", false, Some("0900000000000000"));
    said("nobodys", true, Some("0b00"));
    let dump = ctl(&["policy", "map", "1", "uses", "dump"], true);
    assert!(dump.status.success() && dump.stdout.matches("\nin process ").count() == 1, "{}", dump.describe());
    assert!(dump.stdout.contains("of tenant \"nobodys\", exited") && dump.stdout.ends_with(": 1 entries\n1 7\n"), "{}", dump.describe());
    // Root's policy is neither listed to nobody nor theirs to unload or read.
    assert!(ctl(&["policy", "load", &path(&rt)], false).status.success());
    let list = ctl(&["policy", "list", "--json"], true);
    let v: serde_json::Value = serde_json::from_str(&list.stdout).expect("JSON");
    assert_eq!((v.as_array().map(Vec::len), v[0]["tenant"].as_str()), (Some(1), Some("nobodys")), "{}", list.describe());
    for args in [&["policy", "unload", "2"][..], &["policy", "map", "2", "rt", "dump"][..]] {
        let r = ctl(args, true);
        assert!(!r.status.success() && r.stderr.contains("no policy 2 of yours"), "{}", r.describe());
    }
    assert!(ctl(&["policy", "unload", "1"], true).status.success(), "nobody unloads their own");
    assert_eq!(ctl(&["policy", "list", "--json"], false).stdout.matches("\"id\"").count(), 1, "root's stays");
    let _ = ctl(&["stop"], false);
    let _ = daemon.wait();
}

/// Run by the tests above, as uid 65534 (or as root, for a tenant of root's): says Hello for tenant `GMUX_ATTACK_TENANT` with a
/// 2 MiB limit, or holds `GMUX_ATTACK_CONNS` connections, and prints the daemon's answer.
#[test]
#[ignore = "run as another user by the tests above"]
fn hello_as_another_user() {
    use std::io::{BufRead, BufReader, Write};
    let Some(socket) = std::env::var_os("GMUX_SOCKET") else { return };
    if let Some(n) = std::env::var("GMUX_ATTACK_CONNS").ok().and_then(|n| n.parse::<usize>().ok()) {
        // Opens `n` connections and keeps them; prints what the last one is told.
        let held: Vec<_> = (0..n).filter_map(|_| std::os::unix::net::UnixStream::connect(&socket).ok()).collect();
        let last = held.last().expect("connected").try_clone().unwrap();
        last.set_read_timeout(Some(std::time::Duration::from_secs(3))).unwrap();
        let mut answer = String::new();
        let _ = BufReader::new(last).read_line(&mut answer);
        println!("ANSWER {} ({} connections open)", answer.trim(), held.len());
        return;
    }
    let Some(tenant) = std::env::var("GMUX_ATTACK_TENANT").ok() else { return };
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    let v = gmux_core::protocol::PROTOCOL;
    s.write_all(format!("{{\"op\":\"hello\",\"version\":{v},\"tenant\":{tenant:?},\"priority\":0,\"high\":2097152}}\n").as_bytes()).unwrap();
    let mut answer = String::new();
    BufReader::new(s.try_clone().unwrap()).read_line(&mut answer).unwrap();
    println!("ANSWER {}", answer.trim());
    // Then says that map `uses` of policy 1 holds key 1 with value VALUE: 8-byte hex, or
    // another size.
    if let Ok(value) = std::env::var("GMUX_ATTACK_SNAPSHOT") {
        let m = gmux_core::protocol::FromShim::MapSnapshot { policy: 1, map: "uses".into(), total: 1, entries: vec![("0100000000000000".into(), value)] };
        s.write_all(format!("{}\n", serde_json::to_string(&m).unwrap()).as_bytes()).unwrap();
        // The daemon reads it before it sees the connection close.
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}
