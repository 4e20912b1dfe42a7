//! Pointer tables in device memory, which kernels follow: addresses the shim learns from
//! the uploads that write them.
//!
//! `packed-tables`: `--buffers` buffers of `--bytes` (an even count), and two pointer
//! tables of a few bytes each, small enough to share one chunk: the first holds the
//! addresses of the first half of the buffers, the second of the other half. `--rounds`
//! rounds of `gather` through the first table (adding 1) and through the second (adding
//! 2); every buffer checked at the end. Prints `packed-tables: N buffers checked`.
//!
//! `large-table`: `--buffers` buffers of `--bytes` and one table of `--entries` pointers
//! to them in turn, uploaded at once (more than the 64 KiB every upload has scanned whole),
//! then `--rounds` rounds of a kernel over a ballast of `--ballast` bytes (enough to push
//! the buffers out) followed by `gather` through the table; every buffer checked at the
//! end. Prints `large-table: N buffers checked`.

use super::*;

pub fn packed_tables(app: &App, o: &Opts) -> bool {
    let buffers = o.num("buffers", 4) as usize / 2 * 2;
    let bytes = o.bytes("bytes", 2 << 20) as usize;
    let rounds = o.num("rounds", 3) as u32;
    let s = app.stream(0);
    let b = filled(app, buffers, bytes);
    let half = buffers / 2;
    let tables: Vec<u64> = b
        .chunks(half)
        .map(|part| {
            let t = app.alloc(part.len() * 8);
            app.htod(t, &part.iter().flat_map(|p| [*p as u32, (*p >> 32) as u32]).collect::<Vec<u32>>());
            t
        })
        .collect();
    for _ in 0..rounds {
        for (k, &table) in tables.iter().enumerate() {
            let (mut t, mut n, mut v) = (table, half as u64, k as u32 + 1);
            app.launch(app.k.gather, s, &mut [ptr(&mut t), ptr(&mut n), ptr(&mut v)]);
        }
    }
    app.sync(s);
    checked(app, "packed-tables", &b, bytes, |i| rounds * if i < half { 1 } else { 2 })
}

pub fn large_table(app: &App, o: &Opts) -> bool {
    let buffers = o.num("buffers", 2) as usize;
    let bytes = o.bytes("bytes", 4 << 20) as usize;
    let entries = o.num("entries", 8200) as usize;
    let rounds = o.num("rounds", 2) as u32;
    let ballast_bytes = o.bytes("ballast", 8 << 20) as usize;
    let s = app.stream(0);
    let b = filled(app, buffers, bytes);
    let table = app.alloc(entries * 8);
    app.htod(table, &(0..entries).flat_map(|k| [b[k % buffers] as u32, (b[k % buffers] >> 32) as u32]).collect::<Vec<u32>>());
    let ballast = app.alloc(ballast_bytes);
    for r in 0..rounds {
        app.fill(s, ballast, (ballast_bytes / 4) as u64, r);
        let (mut t, mut n, mut v) = (table, entries as u64, 1u32);
        app.launch(app.k.gather, s, &mut [ptr(&mut t), ptr(&mut n), ptr(&mut v)]);
    }
    app.sync(s);
    checked(app, "large-table", &b, bytes, |i| rounds * (entries / buffers + usize::from(i < entries % buffers)) as u32)
}

/// `n` buffers of `bytes`, buffer `i` filled with `i * 1000`.
fn filled(app: &App, n: usize, bytes: usize) -> Vec<u64> {
    let b: Vec<u64> = (0..n).map(|_| app.alloc(bytes)).collect();
    for (i, p) in b.iter().enumerate() {
        app.htod(*p, &vec![i as u32 * 1000; bytes / 4]);
    }
    b
}

/// Checks buffers filled with `i * 1000` (buffer `i`) after gathers added `added(i)` to the
/// first 1024 words of each; prints `NAME: N buffers checked`.
fn checked(app: &App, name: &str, b: &[u64], bytes: usize, added: impl Fn(usize) -> u32) -> bool {
    for (i, p) in b.iter().enumerate() {
        let got = app.dtoh(*p, bytes / 4);
        let expect = |j: usize| i as u32 * 1000 + if j < 1024 { added(i) } else { 0 };
        if let Some(j) = (0..got.len()).find(|&j| got[j] != expect(j)) {
            eprintln!("standin_app: {name}: buffer {i} word {j} is {} where {} was expected", got[j], expect(j));
            return false;
        }
    }
    println!("{name}: {} buffers checked", b.len());
    true
}
