//! Provable durability (issue 11 item 7): `ebof serve` with a file namespace, `ebof perf
//! --verify --flush-every N --verify-log`, `kill -9` of the target mid-run once some Flushes
//! completed, a restart on the same file, and `ebof perf --verify-only`: every block a completed
//! Flush covered must read back intact, and no block may be torn. Then the checker is shown to
//! catch damage: a flipped byte is reported corrupt, a zeroed range stale.
//!
//! What `kill -9` proves: the target acknowledges and flushes honestly and never leaves a torn
//! block; the killed process's writes are still in the kernel's page cache, so this is not a
//! power-loss test (see docs/guide/durability.md, "Write cache and durability").
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

/// Records of `kind` in a verify log so far (2 = flush completed, 6 = FUA writes completed):
/// walk its records (format in `ebof-perf/src/perf/vlog.rs`: a 64-byte header, then records of
/// 16 + 8 × count + 4 bytes). A record still being appended ends the walk.
fn records_logged(log: &Path, kind: u8) -> usize {
    let Ok(b) = std::fs::read(log) else { return 0 };
    let mut at = 64;
    let mut n = 0;
    while at + 20 <= b.len() {
        let count = u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap()) as usize;
        let len = 16 + 8 * count + 4;
        if at + len > b.len() {
            break;
        }
        n += usize::from(b[at] == kind);
        at += len;
    }
    n
}

/// A crash run, up to the restarted target.
struct Crashed {
    _dir: tempfile::TempDir,
    /// The namespace file (open read/write for the damage checks).
    file: std::fs::File,
    log: std::path::PathBuf,
    /// perf's JSON report of the killed run.
    perf: Value,
    /// `ebof serve` restarted on the same file.
    target: Target,
}

/// Serve a fresh 16 MiB file namespace; run verified random writes (2 queues, QD 8) with
/// `perf_extra`, logged; once `min` records of `kind` are in the log, kill -9 the target by PID
/// in the middle of the run; check that perf fails and reports the loss; restart the target.
fn write_and_kill(perf_extra: &[&str], kind: u8, min: usize) -> Crashed {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ns.img");
    let log = dir.path().join("run.vlog");
    // Sparse, used at its size.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&img)
        .unwrap();
    file.set_len(16 << 20).unwrap();

    let t = serve(&img);
    let port = t.port();
    let log_arg = log.to_str().unwrap();
    let mut args: Vec<String> = [
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
        "--verify-log",
        log_arg,
        "--no-busy-poll",
        "--json",
    ]
    .iter()
    .chain(perf_extra)
    .map(|s| s.to_string())
    .collect();
    let run = std::thread::spawn(move || {
        let a: Vec<&str> = args.iter_mut().map(|s| s.as_str()).collect();
        ebof(&a)
    });

    let deadline = Instant::now() + KILL_DEADLINE;
    while records_logged(&log, kind) < min {
        assert!(
            Instant::now() < deadline && !run.is_finished(),
            "{min} log records of kind {kind} did not appear within {KILL_DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(t); // SIGKILL by PID, then reaped

    // perf notices, writes the rest of its log, reports and fails.
    let o = run.join().expect("perf thread");
    assert!(!o.ok, "perf must fail when its target dies: {}", o.stdout);
    assert!(
        o.stderr.contains("I/O errors (connection lost)") && o.stderr.contains("--verify-only"),
        "{}",
        o.stderr
    );
    let perf = json(&o);
    assert!(
        !perf["errors"]["transport"].as_array().unwrap().is_empty(),
        "{perf}"
    );
    assert_eq!(perf["verify"]["mismatch_count"], 0, "{perf}");
    Crashed {
        target: serve(&img),
        _dir: dir,
        file,
        log,
        perf,
    }
}

/// The consistency every crash run must show: every block owed by a Flush or FUA intact, no
/// stale, corrupt or torn block, and the counts adding up.
fn assert_durable(j: &Value) {
    assert_eq!(j["log"]["complete"], true, "{j}");
    assert!(j["log"]["in_flight_writes"].as_u64().unwrap() <= 16, "{j}");
    let owed = count(j, "flushed_blocks");
    assert!(owed > 0, "no block was durable before the kill: {j}");
    assert_eq!(count(j, "flushed_intact"), owed, "{j}");
    assert_eq!((count(j, "stale"), count(j, "corrupt")), (0, 0), "{j}");
    // 4 KiB units lie in one page each: a killed target leaves no unit half-written.
    assert_eq!(count(j, "torn_units"), 0, "{j}");
    assert_eq!(count(j, "unreadable_units"), 0, "{j}");
    assert!(count(j, "intact") >= owed, "{j}");
    assert_eq!(count(j, "blocks"), BLOCKS, "{j}");
    assert_eq!(
        count(j, "intact") + count(j, "never_written"),
        BLOCKS,
        "{j}"
    );
    assert_eq!(j["violations"], 0);
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
    // A Flush every 32 writes per queue; kill -9 once 3 completed.
    let c = write_and_kill(&["--flush-every", "32"], 2, FLUSHES_BEFORE_KILL);
    let flushes = c.perf["flush"]["count"].as_u64().unwrap();
    assert!(flushes >= FLUSHES_BEFORE_KILL as u64, "{}", c.perf);
    assert!(c.perf["flush"]["latency_us"]["p50"].as_f64().unwrap() > 0.0);

    let (o, j) = verify_only(&c.target, &c.log);
    assert!(o.ok, "verify-only failed: {}\n{}", o.stderr, o.stdout);
    assert_durable(&j);
    assert_eq!(j["log"]["flushes"].as_u64().unwrap(), flushes, "{j}");
    let flushed = count(&j, "flushed_blocks");
    let (file, log, t) = (&c.file, &c.log, &c.target);

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
    let (o, j) = verify_only(t, log);
    assert!(!o.ok, "a corrupted block must fail the check: {}", o.stdout);
    assert_eq!(count(&j, "corrupt"), 1, "{j}");
    assert_eq!(j["findings"][0]["lba"], first as u64, "{j}");
    assert!(o.stderr.contains("durability check failed"), "{}", o.stderr);
    // The range zeroed: every flushed block is now missing, i.e. stale.
    file.write_all_at(&vec![0u8; RANGE_BYTES], 0).unwrap();
    let (o, j) = verify_only(t, log);
    assert!(!o.ok);
    assert_eq!(count(&j, "stale"), flushed, "{j}");
    assert_eq!(count(&j, "corrupt"), 0, "{j}");
    assert_eq!(count(&j, "intact"), 0, "{j}");
}

#[test]
fn fua_writes_survive_kill_9_of_the_target() {
    // No Flush at all: every write carries FUA, so each is durable when it completes.
    let c = write_and_kill(&["--fua"], 6, 3);
    assert_eq!(c.perf["flush"]["count"], 0, "{}", c.perf);
    let (o, j) = verify_only(&c.target, &c.log);
    assert!(o.ok, "verify-only failed: {}\n{}", o.stderr, o.stdout);
    assert_durable(&j);
    assert_eq!(j["log"]["flushes"], 0, "{j}");
    let fua = j["log"]["fua_writes"].as_u64().unwrap();
    assert_eq!(fua, j["log"]["acked_writes"].as_u64().unwrap(), "{j}");
    // Every unit written with FUA is owed: its 8 blocks are counted as durable.
    assert_eq!(
        count(&j, "flushed_blocks"),
        8 * j["log"]["durable_units"].as_u64().unwrap()
    );
}
