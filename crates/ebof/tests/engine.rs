//! The I/O engines under a real `ebof serve`: file namespaces through io_uring and through the
//! fixed worker pool (forced with `io_engine = "threads"`), with the process's thread count
//! bounded by the configuration under a QD32 verify load and under read errors (a file
//! truncated under the server); O_DIRECT namespaces; and the block_size check for them.

mod common;

use common::{Output, Target, ebof, free_port};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.ebof:engine";
/// `[target] io_threads` of these tests: small, so that the bound is tight.
const IO_THREADS: usize = 2;
/// Namespace size: 64 MiB.
const SIZE: u64 = 64 << 20;

/// A scratch directory under the target directory (a real file system: tmpfs may refuse
/// O_DIRECT), removed on drop.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new() -> Scratch {
        Scratch(tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch dir"))
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

/// A configuration with one reactor core, one file namespace and the given engine.
fn config(dir: &Scratch, addr: SocketAddr, engine: &str, direct: bool, block_size: u32) -> PathBuf {
    let img = dir.path("ns.img");
    let text = format!(
        "[target]\ncores = [0]\nio_engine = \"{engine}\"\nio_threads = {IO_THREADS}\n\n\
         [[listeners]]\naddress = \"{}\"\nport = {}\n\n\
         [[subsystems]]\nnqn = \"{NQN}\"\n\n\
         [[subsystems.namespaces]]\nbackend = \"file\"\npath = {:?}\nsize = {SIZE}\n\
         block_size = {block_size}\ndirect = {direct}\n",
        addr.ip(),
        addr.port(),
        img.display().to_string(),
    );
    let cfg = dir.path(&format!("{engine}-{direct}.toml"));
    std::fs::write(&cfg, text).expect("write config");
    cfg
}

/// `ebof serve -c CFG` with its log in `log`.
fn serve(cfg: &Path, addr: SocketAddr, log: &Path) -> Target {
    let file = std::fs::File::create(log).expect("log file");
    Target::spawn(
        &["serve", "-c", cfg.to_str().expect("utf-8 path")],
        addr,
        Stdio::from(file),
    )
}

/// Threads of process `pid` now.
fn tasks(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// NUMA nodes: io_uring caps its kernel workers per node.
fn numa_nodes() -> usize {
    std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.starts_with("node") && n[4..].parse::<u32>().is_ok()
                })
                .count()
        })
        .unwrap_or(0)
        .max(1)
}

/// Run `ebof perf` against `t` while sampling the server's thread count; returns the perf
/// output and the most threads seen.
fn perf_sampling_threads(t: &Target, extra: &[&str]) -> (Output, usize) {
    let port = t.port();
    let mut args: Vec<String> = ["perf", "-a", "127.0.0.1", "-s", &port, "-n", NQN, "--json"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let done = AtomicBool::new(false);
    let pid = t.pid();
    std::thread::scope(|s| {
        let run = s.spawn(|| {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = ebof(&a);
            done.store(true, Ordering::Release);
            o
        });
        // Bounded by perf's own timeout (the helper kills it after CMD_TIMEOUT).
        let mut most = tasks(pid);
        while !done.load(Ordering::Acquire) {
            most = most.max(tasks(pid));
            std::thread::sleep(Duration::from_millis(10));
        }
        (run.join().expect("perf thread"), most)
    })
}

/// `ebof perf --verify ARGS` (ARGS space-separated); asserts that it succeeded with no error and
/// no mismatch. Returns the report and the most server threads seen.
fn perf_verify(t: &Target, engine: &str, args: &str) -> (Value, usize) {
    let mut a: Vec<&str> = args.split(' ').collect();
    a.push("--verify");
    let (o, most) = perf_sampling_threads(t, &a);
    let j = json(&o);
    assert!(o.ok, "{engine}: perf failed: {}\n{}", o.stderr, o.stdout);
    assert_eq!(j["errors"]["total"], 0, "{engine}: {j}");
    assert_eq!(j["verify"]["mismatch_count"], 0, "{engine}: {j}");
    assert!(j["ios"].as_u64().unwrap_or(0) > 0, "{engine}: {j}");
    (j, most)
}

/// The direct-I/O granularity of a fresh file `name` in `dir`, or why O_DIRECT is refused.
fn direct_granularity(dir: &Scratch, name: &str) -> Result<u32, String> {
    let b = ebof_backend::open_with(
        &ebof_backend::BackendSpec::File {
            path: dir.path(name),
            size: Some(SIZE),
        },
        ebof_backend::BackendOptions { direct: true },
    )
    .map_err(|e| e.to_string())?;
    b.raw_io()
        .and_then(|r| r.direct)
        .ok_or_else(|| "a direct backend reports no granularity".to_owned())
}

fn json(o: &Output) -> Value {
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "perf --json output is not JSON ({e}): {}\n{}",
            o.stdout, o.stderr
        )
    })
}

/// The engine the server's reactor reports, from its log (waits for the line, bounded).
fn engine_in_log(log: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(at) = text.find("io_engine=") {
            let rest = &text[at + "io_engine=".len()..];
            return rest
                .split(|c: char| c.is_whitespace() || c == '"')
                .find(|w| !w.is_empty())
                .unwrap_or_default()
                .to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no io_engine in the log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// QD32 verify on a file namespace, then reads of the file truncated under the server: on
/// both engines the data verifies, the reads past the new end fail (as errors, not data),
/// and the server never has more threads than its configuration allows: the reactor's
/// `io_threads` pool plus io_uring's kernel workers (capped at `io_threads` per NUMA node),
/// over what it had once it was up.
#[test]
fn file_namespace_on_each_engine_with_bounded_threads() {
    for engine in ["io_uring", "threads"] {
        let dir = Scratch::new();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let cfg = config(&dir, addr, engine, false, 512);
        let log = dir.path("serve.log");
        let t = serve(&cfg, addr, &log);
        let running = engine_in_log(&log);
        if engine == "threads" {
            assert_eq!(running, "threads");
        } else if running != "io_uring" {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(text.contains("io_uring unavailable"), "{text}");
            println!("io_uring refused by this kernel; the fallback pool ran instead");
        }
        let cores = 1;
        let bound = tasks(t.pid()) + cores * IO_THREADS * (1 + numa_nodes());

        let (_, most) = perf_verify(
            &t,
            engine,
            "--rw randrw --mix 50 --bs 4k --qd 32 --runtime 1s --range 0-16M",
        );
        println!("{engine}: at most {most} threads under QD32 (configuration allows {bound})");
        assert!(
            most <= bound,
            "{engine}: {most} threads under QD32, configuration allows {bound}"
        );

        // Cut the file to 8 MiB under the server: reads of 8M-16M now fail.
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path("ns.img"))
            .and_then(|f| f.set_len(8 << 20))
            .expect("truncate");
        let args: Vec<&str> = "--rw randread --bs 4k --qd 32 --runtime 1s --range 8M-16M"
            .split(' ')
            .collect();
        let (o, most) = perf_sampling_threads(&t, &args);
        let j = json(&o);
        assert!(!o.ok, "{engine}: reads past the end succeeded: {j}");
        assert!(
            j["errors"]["total"].as_u64().unwrap_or(0) > 0,
            "{engine}: {j}"
        );
        println!("{engine}: at most {most} threads under read errors (allowed {bound})");
        assert!(
            most <= bound,
            "{engine}: {most} threads under read errors, configuration allows {bound}"
        );
    }
}

/// An O_DIRECT file namespace (4 KiB blocks) verifies on both engines. Skipped, with the
/// reason, where the file system refuses O_DIRECT.
#[test]
fn direct_file_namespace_verifies_on_each_engine() {
    let dir = Scratch::new();
    let granularity = match direct_granularity(&dir, "probe.img") {
        Ok(g) => g,
        Err(e) => {
            println!("skipped: this file system refuses O_DIRECT ({e})");
            return;
        }
    };
    assert!(granularity <= 4096, "direct-I/O granularity {granularity}");
    for engine in ["io_uring", "threads"] {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let cfg = config(&dir, addr, engine, true, 4096);
        let log = dir.path(&format!("serve-{engine}.log"));
        let t = serve(&cfg, addr, &log);
        perf_verify(
            &t,
            engine,
            "--rw randrw --bs 4k --qd 16 --runtime 500ms --range 0-4M",
        );
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(text.contains("direct=true"), "{text}");
    }
}

/// With `direct = true`, a block_size below the file system's direct-I/O granularity is
/// refused at startup, naming the field and the fix. Skipped where the granularity is 512
/// (every block size fits) or O_DIRECT is refused.
#[test]
fn direct_namespace_with_too_small_blocks_is_refused() {
    let dir = Scratch::new();
    let granularity = match direct_granularity(&dir, "ns.img") {
        Ok(g) => g,
        Err(e) => {
            println!("skipped: this file system refuses O_DIRECT ({e})");
            return;
        }
    };
    if granularity <= 512 {
        println!("skipped: direct-I/O granularity here is {granularity}, any block size fits");
        return;
    }
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let cfg = config(&dir, addr, "io_uring", true, 512);
    // Startup fails before anything listens, so this ends on its own (bounded by the helper).
    let o = ebof(&["serve", "-c", cfg.to_str().unwrap()]);
    assert!(!o.ok);
    assert!(
        o.stderr
            .contains("subsystems[0].namespaces[0].block_size: block_size 512 is smaller than")
            && o.stderr
                .contains(&format!("use block_size = {granularity}")),
        "{}",
        o.stderr
    );
}
