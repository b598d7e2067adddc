//! Provable durability (issue 11 item 7): `ebof serve` with a file namespace, `ebof perf
//! --verify --flush-every N --verify-log`, `kill -9` of the target mid-run once some Flushes
//! completed, a restart on the same file, and `ebof perf --verify-only`: every block a completed
//! Flush covered must read back intact, and no block may be torn. Then the checker is shown to
//! catch damage: a flipped byte is reported corrupt, a zeroed range stale.
//!
//! What `kill -9` proves: the target acknowledges and flushes honestly and never leaves a torn
//! block; the killed process's writes are still in the kernel's page cache, so this is not a
//! power-loss test (see the README's "Write cache and durability").
//!
//! Every wait is bounded; targets are killed by PID (dropping `Target`), only the ones started
//! here.

mod common;

use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Output, Target, ebof, free_port};
use serde_json::Value;

const NQN: &str = "nqn.2026-11.io.ebof:durability";
/// The range written: 8 MiB of 4 KiB units, 512-byte blocks.
const RANGE: &str = "0-8M";
const RANGE_BYTES: usize = 8 << 20;
const BLOCKS: u64 = RANGE_BYTES as u64 / 512;
/// Flushes that must have completed before the target is killed.
const FLUSHES_BEFORE_KILL: usize = 3;
const KILL_DEADLINE: Duration = Duration::from_secs(40);

fn serve(file: &Path) -> Target {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let file = file.to_str().unwrap();
    Target::spawn(
        &[
            "serve",
            "--listen",
            &addr.to_string(),
            "--file",
            file,
            "--nqn",
            NQN,
            "--poll-us",
            "0",
        ],
        addr,
        Stdio::null(),
    )
}

fn json(o: &Output) -> Value {
    serde_json::from_str(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", o.stdout, o.stderr))
}

/// Completed Flushes recorded in a verify log so far: walk its records (format in
/// `perf/vlog.rs`: a 64-byte header, then records of 16 + 8 × count + 4 bytes; kind 2 =
/// flush completed). A record still being appended ends the walk.
fn flushes_logged(log: &Path) -> usize {
    let Ok(b) = std::fs::read(log) else { return 0 };
    let mut at = 64;
    let mut n = 0;
    while at + 20 <= b.len() {
        let count = u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap()) as usize;
        let len = 16 + 8 * count + 4;
        if at + len > b.len() {
            break;
        }
        n += usize::from(b[at] == 2);
        at += len;
    }
    n
}

fn verify_only(t: &Target, log: &Path) -> (Output, Value) {
    let o = ebof(&[
        "perf",
        "-a",
        "127.0.0.1",
        "-s",
        &t.port(),
        "-n",
        NQN,
        "--verify-only",
        "--verify-log",
        log.to_str().unwrap(),
        "--queues",
        "2",
        "--qd",
        "8",
        "--json",
    ]);
    let j = json(&o);
    (o, j)
}

fn count(j: &Value, k: &str) -> u64 {
    j["blocks"][k]
        .as_u64()
        .unwrap_or_else(|| panic!("no blocks.{k}: {j}"))
}

#[test]
fn flushed_blocks_survive_kill_9_of_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ns.img");
    let log = dir.path().join("run.vlog");
    // A 16 MiB namespace file (sparse), used at its size.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&img)
        .unwrap();
    file.set_len(16 << 20).unwrap();

    // 1. Verified random writes with a Flush every 32 writes per queue, logged.
    let t = serve(&img);
    let port = t.port();
    let log_arg = log.to_str().unwrap().to_string();
    let run = std::thread::spawn(move || {
        ebof(&[
            "perf",
            "-a",
            "127.0.0.1",
            "-s",
            &port,
            "-n",
            NQN,
            "--rw",
            "randwrite",
            "--bs",
            "4k",
            "--qd",
            "8",
            "--queues",
            "2",
            "--range",
            RANGE,
            "--runtime",
            "60s",
            "--verify",
            "--flush-every",
            "32",
            "--verify-log",
            &log_arg,
            "--no-busy-poll",
            "--json",
        ])
    });

    // 2. Once some Flushes completed, kill -9 the target (by PID) in the middle of the run.
    let deadline = Instant::now() + KILL_DEADLINE;
    while flushes_logged(&log) < FLUSHES_BEFORE_KILL {
        assert!(
            Instant::now() < deadline && !run.is_finished(),
            "{FLUSHES_BEFORE_KILL} flushes did not complete within {KILL_DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(t); // SIGKILL, then reaped

    // perf notices, writes the rest of its log, reports and fails.
    let o = run.join().expect("perf thread");
    assert!(!o.ok, "perf must fail when its target dies: {}", o.stdout);
    let p = json(&o);
    assert!(
        !p["errors"]["transport"].as_array().unwrap().is_empty(),
        "{p}"
    );
    let flushes = p["flush"]["count"].as_u64().unwrap();
    assert!(flushes >= FLUSHES_BEFORE_KILL as u64, "{p}");
    assert!(
        p["flush"]["latency_us"]["p50"].as_f64().unwrap() > 0.0,
        "{p}"
    );
    assert_eq!(p["verify"]["mismatch_count"], 0, "{p}");

    // 3. Restart on the same file; read-only check against the log.
    let t = serve(&img);
    let (o, j) = verify_only(&t, &log);
    assert!(o.ok, "verify-only failed: {}\n{}", o.stderr, o.stdout);
    assert_eq!(j["log"]["complete"], true, "{j}");
    assert_eq!(j["log"]["flushes"].as_u64().unwrap(), flushes, "{j}");
    assert!(j["log"]["in_flight_writes"].as_u64().unwrap() <= 16, "{j}");
    let flushed = count(&j, "flushed_blocks");
    assert!(
        flushed > 0,
        "no block was covered by a completed flush: {j}"
    );
    assert_eq!(count(&j, "flushed_intact"), flushed, "{j}");
    assert_eq!((count(&j, "stale"), count(&j, "corrupt")), (0, 0), "{j}");
    // 4 KiB units lie in one page each: a killed target leaves no unit half-written.
    assert_eq!(count(&j, "torn_units"), 0, "{j}");
    assert_eq!(count(&j, "unreadable_units"), 0, "{j}");
    assert!(count(&j, "intact") >= flushed, "{j}");
    assert_eq!(count(&j, "blocks"), BLOCKS, "{j}");
    assert_eq!(
        count(&j, "intact") + count(&j, "never_written"),
        BLOCKS,
        "{j}"
    );
    assert_eq!(j["violations"], 0);

    // 4. The checker catches damage. A flipped byte in the first written block: corrupt.
    let mut data = vec![0u8; RANGE_BYTES];
    file.read_exact_at(&mut data, 0).unwrap();
    let first = data
        .chunks_exact(512)
        .position(|s| s.starts_with(b"EBOFVFY1"))
        .expect("a written block");
    file.write_all_at(
        &[data[first * 512 + 200] ^ 0x40],
        (first * 512 + 200) as u64,
    )
    .unwrap();
    let (o, j) = verify_only(&t, &log);
    assert!(!o.ok, "a corrupted block must fail the check: {}", o.stdout);
    assert_eq!(count(&j, "corrupt"), 1, "{j}");
    assert_eq!(j["findings"][0]["lba"], first as u64, "{j}");
    assert!(o.stderr.contains("durability check failed"), "{}", o.stderr);
    // The range zeroed: every flushed block is now missing, i.e. stale.
    file.write_all_at(&vec![0u8; RANGE_BYTES], 0).unwrap();
    let (o, j) = verify_only(&t, &log);
    assert!(!o.ok);
    assert_eq!(count(&j, "stale"), flushed, "{j}");
    assert_eq!(count(&j, "corrupt"), 0, "{j}");
    assert_eq!(count(&j, "intact"), 0, "{j}");
}
