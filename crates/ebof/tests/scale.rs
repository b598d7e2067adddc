//! Scale (issue 9): one subsystem of 1024 namespaces and one controller with 1024 I/O queues,
//! against the real `ebof serve`. Lists every namespace through Identify, runs verified I/O on
//! the last namespace through all 1024 queues, and prints what an idle I/O queue costs the
//! target in memory (resident set growth with 1024 idle 1024-entry queues connected).

mod common;

use common::{Target, ebof_host, free_port};
use nvme_spec::NamespaceId;
use nvmf_host::{Controller, HostConfig, IoQueueOptions};
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

const NQN: &str = "nqn.2026-11.io.ebof:scale";
const NAMESPACES: u32 = 1024;
const QUEUES: u16 = 1024;

/// `ebof serve` with one subsystem of 1024 1-MiB RAM namespaces and up to 1024 I/O queues.
fn serve(dir: &std::path::Path) -> Target {
    let port = free_port();
    let mut cfg = format!(
        "[target]\nmax_io_queues = {QUEUES}\nmax_namespaces = {NAMESPACES}\ncores = [0]\n\n\
         [[listeners]]\naddress = \"127.0.0.1\"\nport = {port}\n\n\
         [[subsystems]]\nnqn = \"{NQN}\"\nallow_any_host = true\n"
    );
    for nsid in 1..=NAMESPACES {
        cfg.push_str(&format!(
            "[[subsystems.namespaces]]\nnsid = {nsid}\nbackend = \"ram\"\nsize = \"1M\"\n"
        ));
    }
    let path = dir.join("scale.toml");
    std::fs::write(&path, cfg).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    Target::spawn(
        &["serve", "--config", path.to_str().unwrap()],
        addr,
        Stdio::null(),
    )
}

/// Resident set of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

#[test]
fn a_thousand_namespaces_and_a_thousand_io_queues() {
    let dir = tempfile::tempdir().unwrap();
    let t = serve(dir.path());
    let port = t.port();

    // Identify: NN and the active namespace list cover all 1024 (one 4 KiB page of the list
    // holds exactly 1024 NSIDs).
    let out = ebof_host("identify", &port, NQN, &["--json"]);
    assert!(out.ok, "{}", out.stderr);
    let id: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(id["controller"]["nn"], NAMESPACES);
    let listed: Vec<u64> = id["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["nsid"].as_u64().unwrap())
        .collect();
    assert_eq!(listed, (1..=u64::from(NAMESPACES)).collect::<Vec<_>>());

    // Verified I/O on the last namespace through 1024 queues at once.
    let out = ebof_host(
        "perf",
        &port,
        NQN,
        &[
            "--nsid",
            "1024",
            "--queues",
            "1024",
            "--qd",
            "1",
            "--bs",
            "512",
            "--rw",
            "randrw",
            "--verify",
            "--runtime",
            "1s",
            "--json",
        ],
    );
    assert!(out.ok, "{}\n{}", out.stdout, out.stderr);
    let perf: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(perf["errors"]["total"], 0, "{perf}");
    assert_eq!(perf["verify"]["mismatch_count"], 0, "{perf}");
    assert!(
        perf["verify"]["checked_blocks"].as_u64().unwrap() > 0,
        "{perf}"
    );
    let ios = perf["ios"].as_u64().unwrap();
    assert!(ios >= u64::from(QUEUES), "every queue did I/O: {ios} I/Os");
    println!("perf through {QUEUES} queues on nsid {NAMESPACES}: {ios} verified I/Os");

    // Memory: 1024 idle I/O queues of 1024 entries each on one controller.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let cfg = HostConfig {
            io_queues: QUEUES,
            queue_size: 1024,
            ..HostConfig::default()
        };
        let ctrl = Controller::connect(addr, NQN, &cfg).await.unwrap();
        assert_eq!(ctrl.io_queues_granted(), Some(QUEUES));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = rss_kib(t.pid());
        let connector = ctrl.io_connector();
        let mut queues = Vec::new();
        for qid in 1..=QUEUES {
            queues.push(
                connector
                    .connect(&IoQueueOptions::new(qid, 1024))
                    .await
                    .unwrap_or_else(|e| panic!("I/O queue {qid}: {e}")),
            );
        }
        // One command on the last queue to the last namespace, then let the queues go idle
        // (a connection gives its buffers back on a tick with nothing received).
        let last = queues.last_mut().unwrap();
        let nsid = NamespaceId(NAMESPACES);
        let data = vec![0xA5u8; 4096];
        last.write(nsid, 8, 8, &data).await.unwrap();
        let mut back = vec![0u8; 4096];
        last.read(nsid, 8, 8, &mut back).await.unwrap();
        assert_eq!(back, data);
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let after = rss_kib(t.pid());
        let per_queue = (after.saturating_sub(before) * 1024) / u64::from(QUEUES);
        println!(
            "ebof serve RSS: {before} KiB with the controller, {after} KiB with {QUEUES} idle \
             1024-entry I/O queues: {per_queue} bytes per idle queue"
        );
        // Not a speed figure but a guard against a regression to eager per-entry tables
        // (which cost ~230 KiB per 1024-entry queue).
        assert!(per_queue < 32 * 1024, "{per_queue} bytes per idle queue");
        drop(queues);
        let _ = ctrl.shutdown().await;
    });
}
