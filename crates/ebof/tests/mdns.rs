//! mDNS (TP 8009) on the wire: `ebof serve` in one network namespace publishes its discovery
//! listeners, a DNS-SD browser (`mdns-sd`) in another namespace across a veth pair resolves
//! them (port, address, TXT), and sees each withdrawn (goodbye packets) when its listener is
//! removed, when `ebof ctl mdns off` is given, and when serve stops.
//!
//! Loopback has no MULTICAST flag, hence the namespaces. Needs root and `ip netns`; without
//! them the test says so and passes (the test command runs as root, so there it runs).

mod common;

use common::{EBOF, ebof};
use mdns_sd::{ServiceDaemon, ServiceEvent};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SERVICE: &str = "_nvme-disc._tcp.local.";
/// Bound on each thing the test waits for (an announcement takes about a second: probing).
const WAIT: Duration = Duration::from_secs(10);

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn ip_ok(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Two namespaces joined by a veth pair; deleted (with the pair) on drop.
struct Link {
    server_ns: String,
    browser_ns: String,
    server_ip: String,
    browser_dev: String,
}

impl Link {
    fn new() -> Link {
        let id = std::process::id();
        let mut l = Link {
            server_ns: format!("ebof-mdns-s{id}"),
            browser_ns: format!("ebof-mdns-b{id}"),
            // 10.213.x.y: a private pair inside namespaces this test made; x from the pid
            // so that two runs at once do not share a subnet (each has its own link anyway).
            server_ip: format!("10.213.{}.1", id % 250),
            browser_dev: String::new(),
        };
        let browser_ip = format!("10.213.{}.2", id % 250);
        let (a, b) = (
            format!("ebms{}", id % 100_000),
            format!("ebmb{}", id % 100_000),
        );
        ip_ok(&["netns", "add", &l.server_ns]);
        ip_ok(&["netns", "add", &l.browser_ns]);
        ip_ok(&[
            "link",
            "add",
            &a,
            "netns",
            &l.server_ns,
            "type",
            "veth",
            "peer",
            "name",
            &b,
            "netns",
            &l.browser_ns,
        ]);
        for (ns, dev, addr) in [
            (&l.server_ns, &a, &l.server_ip),
            (&l.browser_ns, &b, &browser_ip),
        ] {
            ip_ok(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            ip_ok(&["-n", ns, "link", "set", "lo", "up"]);
        }
        // The server's end is up but has no carrier until the browser's end comes up
        // (`Link::connect`), as a tap before its VM starts.
        ip_ok(&["-n", &l.server_ns, "link", "set", &a, "up"]);
        l.browser_dev = b;
        l
    }

    /// Bring the browser's end up: the server's end gets its carrier.
    fn connect(&self) {
        ip_ok(&[
            "-n",
            &self.browser_ns,
            "link",
            "set",
            &self.browser_dev,
            "up",
        ]);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        ip(&["netns", "del", &self.server_ns]);
        ip(&["netns", "del", &self.browser_ns]);
    }
}

/// What the browser saw, by instance full name.
#[derive(Debug)]
enum Seen {
    Resolved {
        name: String,
        port: u16,
        addrs: Vec<IpAddr>,
        txt: BTreeMap<String, String>,
    },
    Removed,
}

/// A DNS-SD browser for `_nvme-disc._tcp` running inside namespace `ns`: its thread enters
/// the namespace before it starts the responder, whose thread inherits it.
fn browse_in(ns: &str) -> (mpsc::Receiver<(String, Seen)>, mpsc::Sender<()>) {
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).expect("open netns");
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a namespace fd we hold open; it changes this thread only.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        let sd = ServiceDaemon::new().expect("browser daemon");
        let events = sd.browse(SERVICE).expect("browse");
        loop {
            if stop_rx.try_recv().is_ok() {
                break;
            }
            match events.recv_timeout(Duration::from_millis(100)) {
                Ok(ServiceEvent::ServiceResolved(r)) => {
                    let txt = r
                        .get_properties()
                        .iter()
                        .map(|p| (p.key().to_string(), p.val_str().to_string()))
                        .collect();
                    let mut addrs: Vec<IpAddr> =
                        r.get_addresses().iter().map(|a| a.to_ip_addr()).collect();
                    addrs.sort();
                    let seen = Seen::Resolved {
                        name: r.get_fullname().to_string(),
                        port: r.get_port(),
                        addrs,
                        txt,
                    };
                    if tx.send((r.get_fullname().to_string(), seen)).is_err() {
                        break;
                    }
                }
                Ok(ServiceEvent::ServiceRemoved(_, name)) => {
                    if tx.send((name, Seen::Removed)).is_err() {
                        break;
                    }
                }
                Ok(_) | Err(mdns_sd::RecvTimeoutError::Timeout) => {}
                Err(mdns_sd::RecvTimeoutError::Disconnected) => break,
            }
        }
        let _ = sd.shutdown();
    });
    (rx, stop_tx)
}

/// What the browser reported, in order; events not yet waited for stay in `pending`, so
/// the order in which two records change does not matter.
struct Browser {
    rx: mpsc::Receiver<(String, Seen)>,
    pending: Vec<(String, Seen)>,
}

impl Browser {
    /// Wait (bounded) for the browser to report an instance whose name contains `needle` as
    /// resolved (or removed); returns what it saw.
    fn wait_for(&mut self, needle: &str, removed: bool, log: &Path) -> Seen {
        let hit = |(name, seen): &(String, Seen)| {
            name.contains(needle) && matches!(seen, Seen::Removed) == removed
        };
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(i) = self.pending.iter().position(hit) {
                return self.pending.remove(i).1;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            match self.rx.recv_timeout(left) {
                Ok(ev) => self.pending.push(ev),
                Err(_) => break,
            }
        }
        panic!(
            "the browser did not see {needle} {} within {WAIT:?}; it saw {:?}\nserve log:\n{}",
            if removed { "removed" } else { "resolved" },
            self.pending,
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}

fn ctl(sock: &Path, args: &[&str]) -> common::Output {
    let mut a = vec!["ctl", "--socket", sock.to_str().unwrap()];
    a.extend_from_slice(args);
    let o = ebof(&a);
    assert!(o.ok, "ebof ctl {args:?}: {}", o.stderr);
    o
}

/// `ebof ctl ARGS` answered (serve is up).
fn ctl_ok(sock: &Path, args: &[&str]) -> bool {
    let mut a = vec!["ctl", "--socket", sock.to_str().unwrap()];
    a.extend_from_slice(args);
    ebof(&a).ok
}

fn check_record(seen: &Seen, port: u16, addr: &str) {
    let Seen::Resolved {
        name,
        port: p,
        addrs,
        txt,
    } = seen
    else {
        panic!("{seen:?}");
    };
    assert_eq!(*p, port);
    // ebof-<machine>-<address>-<port>._nvme-disc._tcp.local.
    let tail = format!("-{}-{port}.{SERVICE}", addr.replace('.', "-"));
    assert!(name.starts_with("ebof-") && name.ends_with(&tail), "{name}");
    assert_eq!(addrs, &[addr.parse::<IpAddr>().unwrap()]);
    assert_eq!(txt.get("p").map(String::as_str), Some("tcp"), "{txt:?}");
    assert_eq!(
        txt.get("nqn").map(String::as_str),
        Some("nqn.2014-08.org.nvmexpress.discovery"),
        "{txt:?}"
    );
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn discovery_listeners_are_published_and_withdrawn_over_mdns() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIPPED: mDNS wire test needs root (network namespaces)");
        return;
    }
    if !ip(&["netns", "list"]) {
        println!("SKIPPED: mDNS wire test needs `ip netns` (iproute2)");
        return;
    }
    let started = Instant::now();
    let link = Link::new();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ebof.sock");
    let log = dir.path().join("serve.log");
    let cfg_file = dir.path().join("saved.toml");
    let io = format!("{}:4420", link.server_ip);
    let mut serve = Serve(
        Command::new("ip")
            .args(["netns", "exec", &link.server_ns, EBOF, "serve"])
            .args(["--listen", &io])
            .args(["--ram", "16M", "--cores", "0", "--mgmt-socket"])
            .arg(&sock)
            .arg("--mgmt-data-dir")
            .arg(dir.path())
            .env("EBOF_LOG", "info,mdns_sd=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .expect("spawn ebof serve"),
    );
    // Serve publishes while its interface has no carrier yet (the tap of a VM that starts
    // later); once the link comes up the record must still be announced and answered.
    let ready = Instant::now();
    while !sock.exists() || !ctl_ok(&sock, &["mdns"]) {
        assert!(
            ready.elapsed() < Duration::from_secs(30),
            "serve did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    link.connect();
    // The browser starts once its link is up (a host boots after the boxes).
    let (rx, stop_browser) = browse_in(&link.browser_ns);
    let mut browser = Browser {
        rx,
        pending: Vec::new(),
    };
    // The listener (auto mode: not on loopback) resolves with port, address and TXT.
    let dash = link.server_ip.replace('.', "-");
    let r_io = browser.wait_for(&format!("{dash}-4420"), false, &log);
    check_record(&r_io, 4420, &link.server_ip);
    // The API shows it, announced.
    let o = ctl(&sock, &["mdns", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["mode"], "auto", "{v}");
    let states: Vec<&str> = v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["announced"], "{v}");

    // A listener added live is published; removed, its record is withdrawn.
    let extra = format!("{}:4421", link.server_ip);
    ctl(&sock, &["listener", "add", &extra]);
    let added = browser.wait_for(&format!("{dash}-4421"), false, &log);
    check_record(&added, 4421, &link.server_ip);
    ctl(&sock, &["listener", "remove", &extra]);
    browser.wait_for(&format!("{dash}-4421"), true, &log);

    // `mdns off` withdraws every record; show says off; `on` publishes it again.
    ctl(&sock, &["mdns", "off"]);
    browser.wait_for(&format!("{dash}-4420"), true, &log);
    let show = ctl(&sock, &["show"]).stdout;
    assert!(show.contains("mdns: off"), "{show}");
    ctl(&sock, &["mdns", "on"]);
    let again = browser.wait_for(&format!("{dash}-4420"), false, &log);
    check_record(&again, 4420, &link.server_ip);
    ctl(&sock, &["save", cfg_file.to_str().unwrap()]);
    let saved = std::fs::read_to_string(&cfg_file).unwrap();
    assert!(saved.contains("mdns = true"), "{saved}");

    // A dedicated discovery listener is published alone: the I/O listener's record goes.
    let disc = format!("{}:8009", link.server_ip);
    ctl(&sock, &["listener", "add", &disc, "--discovery"]);
    let d = browser.wait_for(&format!("{dash}-8009"), false, &log);
    check_record(&d, 8009, &link.server_ip);
    browser.wait_for(&format!("{dash}-4420"), true, &log);

    // Shutdown withdraws it too.
    // SAFETY: kill on our own child's pid.
    unsafe { libc::kill(serve.0.id() as libc::pid_t, libc::SIGTERM) };
    browser.wait_for(&format!("{dash}-8009"), true, &log);
    let status = serve.0.wait().unwrap();
    assert!(status.success(), "serve exited {status}");
    let _ = stop_browser.send(());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("mDNS: withdrawing"), "{text}");
    println!("mDNS wire test took {:?}", started.elapsed());
}
