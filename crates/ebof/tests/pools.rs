//! Storage pools (issue 22 item 1), end to end: `ebof serve --config F` with a 64 MiB-capped
//! `[[pools]]` and no subsystem, provisioned through `ebof ctl` (subsystem add, `ns add --pool`,
//! resize, snapshot clone into the pool, remove) with the pool's accounting moving as it
//! should; `pool-full` and `unknown-pool` refused with a clear message and nothing changed;
//! autosave and a restart keep the pool namespaces and their data (`ebof perf --verify-log`
//! before, `--verify-only` after); an orphan file (a crash between its creation and the
//! commit) is replaced; removing a namespace or its subsystem deletes the pool's files.
//!
//! Every wait is bounded; servers are killed by PID (dropping `Target`).

mod common;

use common::served::{ctl_at as ctl, rejected_at, serve_file, state_at as state};
use common::{ebof, free_port};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

const NQN: &str = "nqn.2026-11.io.ebof:vol-a";
const MIB: u64 = 1 << 20;

fn addr() -> SocketAddr {
    format!("127.0.0.1:{}", free_port()).parse().unwrap()
}

/// A pool box: one listener, autosave, pool `fast` (64 MiB cap) in `dir/fast` (not made yet:
/// `ebof serve` makes it), no subsystem.
fn config(dir: &Path, a: SocketAddr) -> PathBuf {
    let text = format!(
        "[[listeners]]\naddress = \"{}\"\nport = {}\n\n[management]\nautosave = true\n\n\
         [[pools]]\nname = \"fast\"\ndirectory = {:?}\nsize = \"64M\"\n",
        a.ip(),
        a.port(),
        dir.join("fast").display().to_string()
    );
    let cfg = dir.join("ebof.toml");
    std::fs::write(&cfg, text).unwrap();
    cfg
}

fn ctl_json(sock: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let o = ctl(sock, &a);
    assert!(o.ok, "ctl {args:?}: {}", o.stderr);
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", o.stdout))
}

/// The one pool's (provisioned, free, namespaces), from `ebof ctl pool list --json`.
fn pool(sock: &Path) -> (u64, u64, u64) {
    let l = ctl_json(sock, &["pool", "list"]);
    let p = &l[0];
    assert_eq!(p["name"], "fast", "{l}");
    assert_eq!(p["capacity_bytes"], 64 * MIB, "{l}");
    assert_eq!(p["size_limit"], 64 * MIB, "{l}");
    (
        p["provisioned_bytes"].as_u64().unwrap(),
        p["free_bytes"].as_u64().unwrap(),
        p["namespaces"].as_u64().unwrap(),
    )
}

/// The files in the pool directory (not the snapshot directory), sorted.
fn pool_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("fast"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `ebof ctl ARGS` refused with `code` at `field`, the state and the pool's files unchanged;
/// the message must name each of `words`.
fn refused(sock: &Path, dir: &Path, args: &[&str], code: &str, field: &str, words: &[&str]) {
    let files = pool_files(dir);
    rejected_at(sock, args, code, field);
    assert_eq!(files, pool_files(dir), "{args:?} changed the pool's files");
    let o = ctl(sock, args);
    for w in words {
        assert!(o.stderr.contains(w), "{args:?}: no {w:?} in {}", o.stderr);
    }
}

/// `ebof perf` writing `range` of namespace `nsid` with self-checking blocks, logged to `log`.
fn write_run(port: &str, nsid: u32, log: &Path) {
    let nsid = nsid.to_string();
    let o = ebof(&[
        "perf",
        "-a",
        "127.0.0.1",
        "-s",
        port,
        "-n",
        NQN,
        "--nsid",
        &nsid,
        "--verify",
        "--verify-log",
        log.to_str().unwrap(),
        "--no-busy-poll",
        "--rw",
        "write",
        "--bs",
        "4k",
        "--qd",
        "8",
        "--range",
        "0-4M",
        "--runtime",
        "1s",
        "--flush-at-end",
        "--json",
    ]);
    assert!(o.ok, "perf: {}\n{}", o.stderr, o.stdout);
}

/// `ebof perf --verify-only`: namespace `nsid` holds exactly what `log` (a complete, flushed
/// run) wrote.
fn holds(port: &str, nsid: u32, log: &Path) {
    let j = verify_only(port, nsid, log);
    let count = |k: &str| {
        j["blocks"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("no blocks.{k}: {j}"))
    };
    assert!(count("flushed_blocks") > 0, "{j}");
    assert_eq!(count("flushed_intact"), count("flushed_blocks"), "{j}");
    assert_eq!(count("corrupt") + count("stale"), 0, "{j}");
}

fn verify_only(port: &str, nsid: u32, log: &Path) -> Value {
    let nsid = nsid.to_string();
    let o = ebof(&[
        "perf",
        "-a",
        "127.0.0.1",
        "-s",
        port,
        "-n",
        NQN,
        "--nsid",
        &nsid,
        "--verify-only",
        "--verify-log",
        log.to_str().unwrap(),
        "--qd",
        "8",
        "--json",
    ]);
    assert!(o.ok, "verify: {}\n{}", o.stderr, o.stdout);
    serde_json::from_str(&o.stdout).unwrap()
}

#[test]
fn a_pool_box_provisions_refuses_persists_and_cleans_up() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let a = addr();
    let cfg = config(dir, a);
    // A pool box starts with pools and no subsystem, and makes the pool's directory.
    let (t, sock) = serve_file(&cfg, dir, a);
    assert!(dir.join("fast").is_dir());
    assert_eq!(pool(&sock), (0, 64 * MIB, 0));
    let s = state(&sock);
    assert_eq!(s["pools"][0]["name"], "fast", "{s}");
    assert!(s["subsystems"].as_array().unwrap().is_empty());

    assert!(ctl(&sock, &["subsystem", "add", NQN]).ok);
    let added = ctl_json(
        &sock,
        &["ns", "add", NQN, "--pool", "fast", "--size", "16M"],
    );
    let file1 = dir.join("fast/nqn.2026-11.io.ebof_vol-a.ns1.img");
    assert_eq!(added["namespace"]["path"], file1.display().to_string());
    assert_eq!(added["namespace"]["backend"], "file");
    assert_eq!(added["namespace"]["size"], 16 * MIB);
    assert_eq!(std::fs::metadata(&file1).unwrap().len(), 16 * MIB);
    assert_eq!(pool(&sock), (16 * MIB, 48 * MIB, 1));
    let o = ctl(&sock, &["ns", "add", NQN, "--pool", "fast", "--size", "4M"]);
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stdout.contains("pool fast"), "{}", o.stdout);
    assert_eq!(pool(&sock), (20 * MIB, 44 * MIB, 2));

    // The tables.
    let show = ctl(&sock, &["show"]).stdout;
    assert!(show.contains("pools\n"), "{show}");
    assert!(
        show.contains("PROVISIONED") && show.contains("fast"),
        "{show}"
    );
    let list = ctl(&sock, &["pool", "list"]).stdout;
    assert!(
        list.contains(&dir.join("fast").display().to_string()),
        "{list}"
    );
    assert!(list.contains("44M"), "{list}");

    // Refusals: nothing changes.
    refused(
        &sock,
        dir,
        &["ns", "add", NQN, "--pool", "fast", "--size", "45M"],
        "pool-full",
        "subsystems[0].namespaces[2].size",
        &["pool fast", "45M", "44M free"],
    );
    refused(
        &sock,
        dir,
        &["ns", "add", NQN, "--pool", "slow", "--size", "1M"],
        "unknown-pool",
        "subsystems[0].namespaces[2].pool",
        &["fast"],
    );
    refused(
        &sock,
        dir,
        &["ns", "resize", NQN, "1", "61M"],
        "pool-full",
        "subsystems[0].namespaces[0].size",
        &["pool fast", "45M", "44M free"],
    );
    // Growth within the free bytes is fine.
    assert!(ctl(&sock, &["ns", "resize", NQN, "1", "32M"]).ok);
    assert_eq!(std::fs::metadata(&file1).unwrap().len(), 32 * MIB);
    assert_eq!(pool(&sock), (36 * MIB, 28 * MIB, 2));

    // Data in namespace 1, a snapshot, a clone into the pool.
    let log = dir.join("run.vlog");
    write_run(&t.port(), 1, &log);
    let used = ctl_json(&sock, &["pool", "list"])[0]["used_bytes"]
        .as_u64()
        .unwrap();
    assert!(used >= MIB, "written blocks are used: {used}");
    assert!(ctl(&sock, &["ns", "snapshot", NQN, "1", "s1"]).ok);
    refused(
        &sock,
        dir,
        &["ns", "add", NQN, "--from-snapshot", "s1", "--pool", "fast"],
        "pool-full",
        "pool",
        &["pool fast", "32M", "28M free"],
    );
    assert!(ctl(&sock, &["ns", "remove", NQN, "2"]).ok);
    assert!(!dir.join("fast/nqn.2026-11.io.ebof_vol-a.ns2.img").exists());
    assert_eq!(pool(&sock), (32 * MIB, 32 * MIB, 1));
    let clone = ctl_json(
        &sock,
        &["ns", "add", NQN, "--from-snapshot", "s1", "--pool", "fast"],
    );
    let file2 = dir.join("fast/nqn.2026-11.io.ebof_vol-a.ns2.img");
    assert_eq!(
        clone["added"]["namespace"]["path"],
        file2.display().to_string()
    );
    assert_eq!(pool(&sock), (64 * MIB, 0, 2));
    holds(&t.port(), 2, &log);
    // The metrics say the same.
    let m = ctl(&sock, &["metrics"]).stdout;
    assert!(m.contains("ebof_pool_free_bytes{pool=\"fast\"} 0"), "{m}");
    assert!(
        m.contains(&format!(
            "ebof_pool_provisioned_bytes{{pool=\"fast\"}} {}",
            64 * MIB
        )),
        "{m}"
    );

    // Autosaved with the pool key; a restart keeps both namespaces and their data.
    let saved = std::fs::read_to_string(&cfg).unwrap();
    assert_eq!(saved.matches("pool = \"fast\"").count(), 2, "{saved}");
    drop(t);
    let (t, sock) = serve_file(&cfg, dir, a);
    assert_eq!(pool(&sock), (64 * MIB, 0, 2));
    let s = state(&sock);
    let nss = s["subsystems"][0]["namespaces"].as_array().unwrap();
    assert_eq!(nss.len(), 2, "{s}");
    assert_eq!(nss[0]["path"], file1.display().to_string());
    assert_eq!(nss[0]["size"], 32 * MIB);
    assert_eq!(std::fs::metadata(&file1).unwrap().len(), 32 * MIB);
    for nsid in [1, 2] {
        holds(&t.port(), nsid, &log);
    }

    // An orphan file (made, then a crash before the commit) is replaced.
    assert!(ctl(&sock, &["ns", "remove", NQN, "2"]).ok);
    drop(t);
    let orphan = dir.join("fast/nqn.2026-11.io.ebof_vol-a.ns5.img");
    std::fs::write(&orphan, vec![0xA5u8; 1 << 16]).unwrap();
    let (t, sock) = serve_file(&cfg, dir, a);
    let o = ctl(
        &sock,
        &[
            "ns", "add", NQN, "--pool", "fast", "--size", "1M", "--nsid", "5",
        ],
    );
    assert!(o.ok, "{}", o.stderr);
    let data = std::fs::read(&orphan).unwrap();
    assert_eq!(data.len() as u64, MIB);
    assert!(data.iter().all(|b| *b == 0), "the orphan's data is gone");
    let log_text = std::fs::read_to_string(dir.join("serve.log")).unwrap();
    assert!(log_text.contains("orphan pool file"), "{log_text}");
    assert_eq!(pool(&sock), (33 * MIB, 31 * MIB, 2));

    // Removing the subsystem deletes every file of the pool's namespaces (the snapshot stays).
    assert!(ctl(&sock, &["subsystem", "remove", NQN]).ok);
    assert!(pool_files(dir).is_empty(), "{:?}", pool_files(dir));
    assert!(dir.join("fast/.ebof-snapshots/s1.img").exists());
    assert_eq!(pool(&sock), (0, 64 * MIB, 0));
    drop(t);
    let saved = std::fs::read_to_string(&cfg).unwrap();
    assert!(!saved.contains("[[subsystems]]"), "{saved}");
    assert!(saved.contains("[[pools]]"), "{saved}");
}

/// The guide's pool box configuration (docs/guide/management.md, "Storage pools") loads as
/// written, and `ebof serve --print-config` keeps its pool.
#[test]
fn the_readme_pool_box_loads() {
    let readme = include_str!("../../../docs/guide/management.md");
    let at = readme
        .find("### Storage pools")
        .expect("the Management page has a Storage pools section");
    let start = at + readme[at..].find("```toml\n").expect("a toml block") + "```toml\n".len();
    let text = &readme[start..start + readme[start..].find("```").expect("its end")];
    let c = ebof_config::Config::from_toml_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(c.subsystems.is_empty());
    assert_eq!(c.pools[0].name, "fast");
    assert_eq!(c.pools[0].size, Some(100 << 30));
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("ebof.toml");
    std::fs::write(&f, text).unwrap();
    let o = ebof(&["serve", "-c", f.to_str().unwrap(), "--print-config"]);
    assert!(o.ok, "{}", o.stderr);
    assert!(
        o.stdout.contains(
            "[[pools]]\nname = \"fast\"\ndirectory = \"/var/lib/ebof/fast\"\nsize = \"100G\"\n"
        ),
        "{}",
        o.stdout
    );
}
