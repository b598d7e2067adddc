//! `ebof serve` as an operator meets it: plain-text logs in a file with readable values and
//! "ready" last, missing directories of a file namespace created, and a busy port failing before
//! anything is opened or created. Every wait is bounded; servers are killed by PID.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Target, ebof, free_port};

fn wait_for_text(path: &Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(Instant::now() < deadline, "no {needle:?} in:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serve_logs_to_a_file_are_plain_ordered_and_readable() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    // A missing directory for the file namespace is created.
    let img = dir.path().join("var/lib/ebof/ns1.img");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let t = Target::spawn(
        &[
            "serve",
            "--listen",
            &addr.to_string(),
            "--file",
            img.to_str().unwrap(),
        ],
        addr,
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let text = wait_for_text(&log, "ebof serve ready");
    drop(t);
    assert!(
        !text.contains('\x1b'),
        "ANSI escapes in a log file:\n{text}"
    );
    assert!(
        img.is_file(),
        "the file namespace and its directory are created"
    );
    let pos = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in:\n{text}"))
    };
    let ready = pos("ebof serve ready");
    assert!(pos("namespace") < pos("listening"), "{text}");
    assert!(pos("listening") < ready, "{text}");
    assert!(pos("reactor started") < ready, "{text}");
    assert_eq!(
        text[ready..].lines().count(),
        1,
        "ready is the last line:\n{text}"
    );
    // Values a person reads: kind, path, size; no Debug dumps.
    assert!(text.contains("backend=file"), "{text}");
    assert!(text.contains("size=1G"), "{text}");
    assert!(text.contains(&format!("path={}", img.display())), "{text}");
    assert!(!text.contains("Backend {"), "{text}");
    assert!(text.contains(&format!("listeners={addr}")), "{text}");
}

#[test]
fn a_busy_port_fails_before_anything_is_created() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("new/ns1.img");
    let o = ebof(&[
        "serve",
        "--listen",
        &addr.to_string(),
        "--file",
        img.to_str().unwrap(),
    ]);
    assert!(!o.ok);
    assert!(
        o.stderr
            .contains(&format!("ebof: error: cannot listen on {addr}: ")),
        "{}",
        o.stderr
    );
    assert_eq!(o.stderr.matches("in use").count(), 1, "{}", o.stderr);
    assert!(!dir.path().join("new").exists(), "nothing is created");
}

#[test]
fn an_rdma_listener_without_an_rdma_device_is_one_clear_error() {
    // Only meaningful where the kernel has no RDMA device (this machine and CI); elsewhere
    // serve would start and listen.
    let devices = std::fs::read_dir("/sys/class/infiniband").map_or(0, |d| d.count());
    if devices > 0 {
        eprintln!("skipped: this machine has {devices} RDMA device(s)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ebof.sock");
    let o = ebof(&[
        "serve",
        "--listen",
        "rdma:127.0.0.1:4420",
        "--ram",
        "16M",
        "--mgmt-socket",
        sock.to_str().unwrap(),
    ]);
    assert!(!o.ok, "{}", o.stderr);
    assert_eq!(
        o.stderr.matches("ebof: error: RDMA: ").count(),
        1,
        "one line naming RDMA: {}",
        o.stderr
    );
    assert!(o.stderr.contains("no RDMA device"), "{}", o.stderr);
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
}

/// A box that serves discovery only (a CDC, as a first-time user writes it): a `[discovery]`
/// listener and no `[[listeners]]` starts and answers discovery; subsystems without an I/O
/// listener are refused with the reason.
#[test]
fn a_discovery_only_box_starts_and_subsystems_need_a_listener() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let member = free_port();
    let cdc = format!(
        "[discovery]\naddress = \"127.0.0.1\"\nport = {port}\n\n[cdc]\nmembers = [\"127.0.0.1:{member}\"]\n\n[management]\nsocket = \"{}\"\n",
        dir.path().join("mgmt.sock").display()
    );
    let cfg = dir.path().join("cdc.toml");
    std::fs::write(&cfg, &cdc).unwrap();
    let log = dir.path().join("serve.log");
    let t = Target::spawn(
        &["serve", "--config", cfg.to_str().unwrap()],
        addr,
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    wait_for_text(&log, "ebof serve ready");
    let d = ebof(&["discover", "-a", "127.0.0.1", "-s", &port.to_string()]);
    assert!(d.ok, "{}{}", d.stdout, d.stderr);
    assert!(
        d.stdout.contains("Discovery Log Number of Records"),
        "{}",
        d.stdout
    );
    drop(t);

    let with_subsystem = format!(
        "{cdc}\n[[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:lonely\"\nallow_any_host = true\n"
    );
    std::fs::write(&cfg, with_subsystem).unwrap();
    let o = ebof(&["serve", "--config", cfg.to_str().unwrap()]);
    assert!(!o.ok);
    assert!(
        o.stderr.contains("no [[listeners]] entry serves them"),
        "{}",
        o.stderr
    );
}
