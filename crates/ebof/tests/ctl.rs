//! The control plane end to end: `ebof serve --mgmt-socket … --metrics-listen …` and
//! `ebof ctl` (and the raw API through `ebof_api::Client`). Every invalid request gets one
//! clear error and changes nothing; counters match what `ebof perf` did.

mod common;

use common::served::{
    HOST_A, HOST_B, NQN, Served, ctl, ctl_at, perf_args_at, perf_on, rejected, serve, serve_file,
    state,
};
use common::{EBOF, Output, Target, ebof, free_port};
use ebof_api::Client;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `ebof perf` arguments against `s` as `hostnqn`, JSON output.
fn perf_args(s: &Served, hostnqn: &str, extra: &[&str]) -> Vec<String> {
    perf_args_at(&s.t.port(), hostnqn, extra)
}

fn perf(s: &Served, hostnqn: &str, extra: &[&str]) -> Output {
    let a = perf_args(s, hostnqn, extra);
    ebof(&a.iter().map(String::as_str).collect::<Vec<_>>())
}

/// GET /metrics over plain HTTP/1.0.
fn scrape(addr: SocketAddr) -> String {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut r = String::new();
    c.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").expect("HTTP answer");
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    body.to_string()
}

fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("exposition parses");
    let s = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .unwrap_or_else(|| panic!("no {name} {labels:?} in\n{text}"));
    match s.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        _ => panic!("{name}: unexpected type"),
    }
}

#[test]
fn show_stats_and_metrics_match_a_perf_run() {
    let s = serve();
    let st = state(&s);
    assert_eq!(st["subsystems"][0]["nqn"], NQN);
    assert_eq!(st["subsystems"][0]["allow_any_host"], true);
    assert_eq!(st["subsystems"][0]["namespaces"][0]["size"], 64u64 << 20);
    assert_eq!(st["subsystems"][0]["namespaces"][0]["block_size"], 512);
    assert_eq!(st["listeners"][0]["address"], s.t.addr.to_string());
    assert_eq!(st["controllers"], serde_json::json!([]));
    let text = ctl(&s, &["show"]);
    assert!(
        text.ok && text.stdout.contains(NQN) && text.stdout.contains("64M"),
        "{}",
        text.stdout
    );
    // Owner-only socket.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&s.sock).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let o = perf(
        &s,
        HOST_A,
        &[
            "--rw",
            "randwrite",
            "--bs",
            "4k",
            "--qd",
            "4",
            // Long enough that the first writes to fresh RAM pages (huge-page faults, slow on
            // a loaded machine) do not leave a run with nothing counted.
            "--runtime",
            "1s",
        ],
    );
    assert!(o.ok, "{}", o.stderr);
    let j: Value = serde_json::from_str(&o.stdout).unwrap();
    let writes = j["write"]["ios"].as_u64().unwrap();
    assert!(writes > 0);
    // perf counts what completed in its measured window; the commands still in flight at its
    // end (at most --qd) complete too and the target counts them. Queues publish their
    // counters when they close, just after perf exits: poll (bounded) until they settle.
    let deadline = Instant::now() + Duration::from_secs(5);
    let stats = loop {
        let o = ctl(&s, &["stats", "--json"]);
        assert!(o.ok, "{}", o.stderr);
        let v: Value = serde_json::from_str(o.stdout.trim()).unwrap();
        if v["namespaces"][0]["write_commands"].as_u64() >= Some(writes) && v["controllers"] == 0
            || Instant::now() > deadline
        {
            break v;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let ns = &stats["namespaces"][0];
    let counted = ns["write_commands"].as_u64().unwrap();
    assert!(
        (writes..=writes + 4).contains(&counted),
        "perf {writes}: {stats}"
    );
    assert_eq!(
        ns["bytes_written"].as_u64(),
        Some(counted * 4096),
        "{stats}"
    );
    assert_eq!(ns["read_commands"].as_u64(), Some(0), "{stats}");

    let text = scrape(s.metrics);
    let l = [("subsystem", NQN), ("nsid", "1")];
    assert_eq!(
        sample(&text, "ebof_namespace_write_commands_total", &l),
        counted as f64
    );
    assert_eq!(
        sample(&text, "ebof_namespace_written_bytes_total", &l),
        (counted * 4096) as f64
    );
    assert_eq!(sample(&text, "ebof_namespace_read_commands_total", &l), 0.0);
    assert_eq!(
        sample(&text, "ebof_namespace_size_bytes", &l),
        (64u64 << 20) as f64
    );
    assert_eq!(sample(&text, "ebof_subsystems", &[]), 1.0);
    // Latency: every counted write is in the histogram, in the API and in the exposition.
    let wl = &ns["write_latency"];
    assert_eq!(wl["count"].as_u64(), Some(counted), "{stats}");
    let (p50, p9999) = (
        wl["p50_us"].as_f64().unwrap(),
        wl["p9999_us"].as_f64().unwrap(),
    );
    assert!(p50 > 0.0 && p50 <= p9999, "{stats}");
    assert!(ns.get("read_latency").is_none(), "{stats}");
    let scrape_all = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("exposition parses");
    let hist = scrape_all
        .samples
        .iter()
        .find(|x| {
            x.metric == "ebof_namespace_write_latency_seconds"
                && x.labels.get("subsystem") == Some(NQN)
        })
        .unwrap_or_else(|| panic!("no write latency histogram in\n{text}"));
    let prometheus_parse::Value::Histogram(buckets) = &hist.value else {
        panic!("write latency is not a histogram: {:?}", hist.value);
    };
    let total = buckets.iter().map(|b| b.count).fold(0.0, f64::max);
    assert_eq!(total, counted as f64, "cumulative +Inf bucket");
    assert!(buckets.windows(2).all(|w| w[0].count <= w[1].count));
    assert_eq!(sample(&text, "ebof_protocol_errors_total", &[]), 0.0);
    assert!(sample(&text, "ebof_connections_accepted_total", &[]) >= 2.0);
    assert_eq!(sample(&text, "ebof_controllers", &[("kind", "io")]), 0.0);
    // The same exposition on the management socket.
    let o = ctl(&s, &["metrics"]);
    assert!(
        o.ok && o.stdout.contains("ebof_namespace_write_commands_total"),
        "{}",
        o.stderr
    );
    let o = ctl(&s, &["stats", "--watch", "--count", "2"]);
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(o.stdout.matches("SUBSYSTEM").count(), 2, "{}", o.stdout);
}

#[test]
fn host_access_changes_live_and_invalid_requests_change_nothing() {
    let s = serve();
    rejected(&s, &["host", "allow", NQN, HOST_A], "conflicting-hosts");
    rejected(
        &s,
        &["host", "allow", "nqn.2026-11.io.ebof:none", HOST_A],
        "unknown-subsystem",
    );
    let o = ctl(&s, &["host", "allow-any", NQN, "off"]);
    assert!(o.ok, "{}", o.stderr);
    // Only the (empty) host list now: a new Connect is refused.
    let o = perf(&s, HOST_A, &["--runtime", "100ms"]);
    assert!(!o.ok, "connect should have been refused");
    let o = ctl(&s, &["host", "allow", NQN, HOST_A]);
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(
        state(&s)["subsystems"][0]["hosts"],
        serde_json::json!([HOST_A])
    );
    let o = perf(&s, HOST_A, &["--runtime", "100ms"]);
    assert!(o.ok, "{}", o.stderr);
    let o = perf(&s, HOST_B, &["--runtime", "100ms"]);
    assert!(!o.ok, "{HOST_B} is not allowed");

    rejected(&s, &["host", "allow", NQN, HOST_A], "duplicate-host");
    rejected(&s, &["host", "allow", NQN, "not-an-nqn"], "invalid-nqn");
    rejected(&s, &["host", "allow-any", NQN, "on"], "conflicting-hosts");
    rejected(&s, &["host", "deny", NQN, HOST_B], "unknown-host");
    rejected(&s, &["disconnect", "0"], "invalid-cntlid");
    rejected(&s, &["disconnect", "abc"], "invalid-cntlid");
    rejected(&s, &["disconnect", "4242"], "unknown-controller");

    let o = ctl(&s, &["--json", "host", "deny", NQN, HOST_A]);
    assert!(o.ok, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["hosts"], serde_json::json!([]));
    let o = perf(&s, HOST_A, &["--runtime", "100ms"]);
    assert!(!o.ok, "{HOST_A} was denied");
}

#[test]
fn subsystems_added_and_removed_live() {
    let s = serve();
    let new = "nqn.2026-11.io.ebof:added";
    let o = ctl(&s, &["subsystem", "add", new, "--model", "lab"]);
    assert!(o.ok, "{}", o.stderr);
    assert!(
        o.stdout
            .contains("subsystem nqn.2026-11.io.ebof:added added"),
        "{}",
        o.stdout
    );
    let st = state(&s);
    assert_eq!(st["subsystems"][1]["nqn"], new);
    assert_eq!(st["subsystems"][1]["model"], "lab");
    // A host sees it in the discovery log at once.
    let port = s.t.port();
    let disc = ebof(&["discover", "-a", "127.0.0.1", "-s", &port]);
    assert!(
        disc.ok && disc.stdout.contains(new),
        "{}{}",
        disc.stdout,
        disc.stderr
    );

    rejected(&s, &["subsystem", "add", new], "duplicate-nqn");
    rejected(&s, &["subsystem", "add", "nqn-bad"], "invalid-nqn");
    rejected(
        &s,
        &["subsystem", "add", "nqn.2014-08.org.nvmexpress.discovery"],
        "reserved-nqn",
    );
    rejected(
        &s,
        &["subsystem", "add", "nqn.2026-11.io.ebof:x", "--serial", ""],
        "invalid-serial",
    );
    rejected(
        &s,
        &["subsystem", "remove", "nqn.2026-11.io.ebof:none"],
        "unknown-subsystem",
    );

    let o = ctl(&s, &["--json", "subsystem", "remove", new]);
    assert!(o.ok, "{}", o.stderr);
    let st = state(&s);
    assert_eq!(st["subsystems"].as_array().unwrap().len(), 1);
    let disc = ebof(&["discover", "-a", "127.0.0.1", "-s", &port]);
    assert!(disc.ok && !disc.stdout.contains(new), "{}", disc.stdout);
    // The first subsystem served on throughout.
    let o = perf(&s, HOST_A, &["--runtime", "100ms"]);
    assert!(o.ok, "{}", o.stderr);
}

/// A 20 s `ebof perf` as HOST_A, and the id of its controller once it has its I/O queue.
fn running_perf(s: &Served) -> (std::process::Child, String) {
    running_perf_on(s, &s.t.port())
}

/// [`running_perf`] through the listener on `port`.
fn running_perf_on(s: &Served, port: &str) -> (std::process::Child, String) {
    let args = perf_args_at(port, HOST_A, &["--runtime", "20s", "--qd", "2"]);
    let mut child = Command::new(EBOF)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait (bounded) for its controller to show up with its I/O queue.
    let deadline = Instant::now() + Duration::from_secs(10);
    let ctrl = loop {
        let st = state(s);
        if let Some(c) = st["controllers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["hostnqn"] == HOST_A && c["io_queues"] == 1)
        {
            break c.clone();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no controller of {HOST_A} in {st}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ctrl["kind"], "io");
    assert_eq!(ctrl["subsystem"], NQN);
    (child, ctrl["cntlid"].as_u64().unwrap().to_string())
}

/// perf loses its queue and stops (with an error) long before its 20 s.
fn ends_early(mut child: std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("perf still running after its controller was disconnected");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
}

#[test]
fn disconnect_ends_a_running_host() {
    let s = serve();
    let (child, id) = running_perf(&s);
    let o = ctl(&s, &["disconnect", &id]);
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stdout.contains("disconnected"), "{}", o.stdout);
    ends_early(child);
    let o = ctl(&s, &["stats", "--json"]);
    let v: Value = serde_json::from_str(o.stdout.trim()).unwrap();
    assert_eq!(v["admin_disconnects"], 1);
}

#[test]
fn removing_a_subsystem_disconnects_its_hosts() {
    let s = serve();
    let (child, id) = running_perf(&s);
    let o = ctl(&s, &["--json", "subsystem", "remove", NQN]);
    assert!(o.ok, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(
        v["disconnected"],
        serde_json::json!([id.parse::<u64>().unwrap()])
    );
    ends_early(child);
    assert_eq!(state(&s)["subsystems"], serde_json::json!([]));
    // A new Connect to it is refused.
    let o = perf(&s, HOST_A, &["--runtime", "100ms"]);
    assert!(!o.ok, "connected to a removed subsystem");
}

#[test]
fn raw_api_errors_are_typed() {
    let s = serve();
    let c = Client::new(&s.sock);
    let check = |method: &str, uri: &str, body: Option<&str>, status: u16, code: &str| {
        let (st, b) = c.raw(method, uri, body.map(str::to_string)).unwrap();
        let e: ebof_api::ApiError = serde_json::from_slice(&b)
            .unwrap_or_else(|_| panic!("{method} {uri}: {}", String::from_utf8_lossy(&b)));
        assert_eq!((st, e.code.as_str()), (status, code), "{method} {uri}: {e}");
    };
    check("GET", "/v2/state", None, 404, "unknown-endpoint");
    check("DELETE", "/v1/state", None, 405, "method-not-allowed");
    let hosts = format!("/v1/subsystems/{NQN}/hosts");
    check("POST", &hosts, Some("{"), 400, "bad-request");
    check("POST", &hosts, Some(r#"{"hostnqn":1}"#), 400, "bad-request");
    check("POST", &hosts, Some(r#"{"host":"x"}"#), 400, "bad-request");
    assert_eq!(c.state().unwrap().subsystems[0].hosts, Vec::<String>::new());
    let e = c.allow_host(NQN, "bad").unwrap_err();
    assert!(e.to_string().contains("hostnqn: "), "{e}");
}

#[test]
fn no_server_and_socket_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("none.sock");
    let o = ebof(&["ctl", "--socket", sock.to_str().unwrap(), "show"]);
    assert!(!o.ok);
    assert!(
        o.stderr
            .contains(&format!("no ebof serve at {}", sock.display())),
        "{}",
        o.stderr
    );
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);

    // A live socket is an error for a second server.
    let s = serve();
    let listen = format!("127.0.0.1:{}", free_port());
    let serve_args = |sock: &Path| -> Vec<String> {
        ["serve", "--listen", &listen, "--ram", "1M", "--mgmt-socket"]
            .iter()
            .map(|a| a.to_string())
            .chain([sock.display().to_string()])
            .collect()
    };
    let run = |sock: &Path| {
        let a = serve_args(sock);
        ebof(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let o = run(&s.sock);
    assert!(!o.ok);
    assert!(
        o.stderr.contains("another ebof serve is running"),
        "{}",
        o.stderr
    );
    // A file that is not a socket is left alone.
    let plain = dir.path().join("plain");
    std::fs::write(&plain, "keep").unwrap();
    let o = run(&plain);
    assert!(!o.ok);
    assert!(o.stderr.contains("not a socket"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&plain).unwrap(), "keep");
    // A stale socket (its server gone) is replaced.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(std::fs::symlink_metadata(&stale).is_ok());
    let a = serve_args(&stale);
    let t = Target::spawn(
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        listen.parse().unwrap(),
        Stdio::null(),
    );
    let st = Client::new(&stale).state().unwrap();
    assert_eq!(st.subsystems.len(), 1);
    drop(t);
}

fn namespace(st: &Value, nsid: u64) -> Option<&Value> {
    st["subsystems"][0]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["nsid"] == nsid)
}

#[test]
fn namespaces_added_resized_and_removed_live() {
    let s = serve();
    let port = s.t.port();
    let o = ctl(&s, &["ns", "add", NQN, "--ram", "16M"]);
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stdout.contains("namespace 2 added"), "{}", o.stdout);
    let st = state(&s);
    assert_eq!(namespace(&st, 2).unwrap()["size"], 16u64 << 20);
    let o = perf_on(
        &port,
        2,
        &["--rw", "randrw", "--verify", "--runtime", "300ms"],
    );
    assert!(o.ok, "{}", o.stderr);

    // A file namespace, created with its directory.
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("new/disk.img");
    let o = ctl(
        &s,
        &[
            "ns",
            "add",
            NQN,
            "--file",
            img.to_str().unwrap(),
            "--size",
            "8M",
            "--nsid",
            "7",
        ],
    );
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 8 << 20);
    assert_eq!(
        namespace(&state(&s), 7).unwrap()["path"],
        img.display().to_string()
    );

    // Grow both while they serve; shrinking needs --shrink.
    for (nsid, size) in [("2", "32M"), ("7", "16M")] {
        let o = ctl(&s, &["ns", "resize", NQN, nsid, size]);
        assert!(o.ok, "{}", o.stderr);
    }
    let st = state(&s);
    assert_eq!(namespace(&st, 2).unwrap()["size"], 32u64 << 20);
    assert_eq!(namespace(&st, 7).unwrap()["size"], 16u64 << 20);
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 16 << 20);
    let o = perf_on(
        &port,
        7,
        &["--rw", "randwrite", "--verify", "--runtime", "300ms"],
    );
    assert!(o.ok, "{}", o.stderr);
    rejected(
        &s,
        &["ns", "resize", NQN, "2", "8M"],
        "shrink-not-confirmed",
    );
    let o = ctl(&s, &["ns", "resize", NQN, "2", "8M", "--shrink"]);
    assert!(o.ok, "{}", o.stderr);

    // Invalid requests: one error each, nothing changes.
    rejected(
        &s,
        &["ns", "add", NQN, "--ram", "16M", "--nsid", "2"],
        "duplicate-nsid",
    );
    rejected(&s, &["ns", "add", NQN, "--ram", "1000"], "invalid-size");
    rejected(
        &s,
        &["ns", "add", NQN, "--ram", "1M", "--nsid", "0"],
        "invalid-nsid",
    );
    rejected(
        &s,
        &["ns", "add", "nqn.2026-11.io.ebof:none", "--ram", "1M"],
        "unknown-subsystem",
    );
    rejected(
        &s,
        &["ns", "add", NQN, "--file", img.to_str().unwrap()],
        "duplicate-path",
    );
    rejected(
        &s,
        &[
            "ns",
            "add",
            NQN,
            "--file",
            "/proc/ebof-none/disk.img",
            "--size",
            "1M",
        ],
        "path-not-allowed",
    );
    rejected(
        &s,
        &["ns", "add", NQN, "--block", "/dev/ebof-none"],
        "device-not-allowed",
    );
    // Allowed, but no file can be made there (its "directory" is a file).
    let under_a_file = img.join("x.img");
    rejected(
        &s,
        &[
            "ns",
            "add",
            NQN,
            "--file",
            under_a_file.to_str().unwrap(),
            "--size",
            "1M",
        ],
        "backend-failed",
    );
    rejected(&s, &["ns", "resize", NQN, "2", "1000"], "invalid-size");
    rejected(&s, &["ns", "resize", NQN, "9", "1M"], "unknown-namespace");
    rejected(&s, &["ns", "remove", NQN, "9"], "unknown-namespace");
    rejected(&s, &["ns", "remove", NQN, "x"], "invalid-nsid");

    // Remove: the namespace is gone for hosts, the file stays as it was.
    let o = ctl(&s, &["ns", "remove", NQN, "7"]);
    assert!(o.ok, "{}", o.stderr);
    assert!(namespace(&state(&s), 7).is_none());
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 16 << 20);
    let o = perf_on(&port, 7, &["--runtime", "100ms"]);
    assert!(!o.ok, "perf ran on a removed namespace");
    let o = perf_on(&port, 1, &["--runtime", "100ms"]);
    assert!(o.ok, "{}", o.stderr);
}

#[test]
fn listeners_added_and_removed_live() {
    let s = serve();
    let extra = format!("127.0.0.1:{}", free_port());
    let o = ctl(&s, &["listener", "add", &extra]);
    assert!(o.ok, "{}", o.stderr);
    let listed = |s: &Served, addr: &str| {
        state(s)["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["address"] == addr)
    };
    assert!(listed(&s, &extra));
    let port2 = extra.rsplit(':').next().unwrap().to_string();
    let o = perf_on(&port2, 1, &["--runtime", "100ms"]);
    assert!(o.ok, "{}", o.stderr);
    // Both listeners are in the discovery log.
    let disc = ebof(&["discover", "-a", "127.0.0.1", "-s", &port2]);
    assert!(disc.ok, "{}", disc.stderr);
    assert!(
        disc.stdout.contains(&s.t.port()) && disc.stdout.contains(&port2),
        "{}",
        disc.stdout
    );

    // A dedicated discovery listener.
    let dport = free_port().to_string();
    let daddr = format!("127.0.0.1:{dport}");
    let o = ctl(&s, &["listener", "add", &daddr, "--discovery"]);
    assert!(o.ok, "{}", o.stderr);
    let disc = ebof(&["discover", "-a", "127.0.0.1", "-s", &dport]);
    assert!(
        disc.ok && disc.stdout.contains(NQN),
        "{}{}",
        disc.stdout,
        disc.stderr
    );

    rejected(&s, &["listener", "add", &extra], "duplicate-listener");
    rejected(
        &s,
        &["listener", "add", "127.0.0.1:1", "--discovery"],
        "duplicate-listener",
    );
    rejected(
        &s,
        &["listener", "add", "10.255.255.1:4420"],
        "listen-failed",
    );
    rejected(
        &s,
        &["listener", "add", "not-an-address"],
        "invalid-address",
    );
    rejected(
        &s,
        &["listener", "remove", "127.0.0.1:1"],
        "unknown-listener",
    );

    // Removing a listener closes its socket; a host connected through it stays.
    let args = [
        "perf",
        "-a",
        "127.0.0.1",
        "-s",
        &port2,
        "-n",
        NQN,
        "--hostnqn",
        HOST_A,
        "--runtime",
        "3s",
        "--qd",
        "2",
        "--json",
    ];
    let child = Command::new(EBOF)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !state(&s)["controllers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["io_queues"] == 1)
    {
        assert!(Instant::now() < deadline, "perf did not connect");
        std::thread::sleep(Duration::from_millis(50));
    }
    let extra3 = format!("127.0.0.1:{}", free_port());
    let port3 = extra3.rsplit(':').next().unwrap().to_string();
    let o = ctl(&s, &["listener", "add", &extra3]);
    assert!(o.ok, "{}", o.stderr);
    let o = ctl(&s, &["listener", "remove", &extra]);
    assert!(o.ok, "{}", o.stderr);
    assert!(!listed(&s, &extra));
    assert!(
        TcpStream::connect_timeout(&extra.parse().unwrap(), Duration::from_secs(2)).is_err(),
        "the removed listener still accepts"
    );
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the connected host was cut off: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Asked to, removing a listener also ends the controllers that came in through it.
    let (child, id) = running_perf_on(&s, &port3);
    let o = ctl(
        &s,
        &["--json", "listener", "remove", &extra3, "--disconnect"],
    );
    assert!(o.ok, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(
        v["disconnected"],
        serde_json::json!([id.parse::<u64>().unwrap()])
    );
    ends_early(child);
    let o = ctl(&s, &["listener", "remove", &daddr]);
    assert!(o.ok, "{}", o.stderr);
    // The last NVMe listener cannot go: the configuration needs one.
    rejected(
        &s,
        &["listener", "remove", &format!("127.0.0.1:{}", s.t.port())],
        "no-listeners",
    );
}

#[test]
fn save_restart_and_compare() {
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.path().join("ebof.toml");
    let img = dir.path().join("disk.img");
    std::fs::write(
        &config,
        format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = {}\n\n[[subsystems]]\nnqn = \"{NQN}\"\n\
             [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"16M\"\n\
             [management]\ndata_dirs = [{:?}]\n",
            addr.port(),
            dir.path().display().to_string()
        ),
    )
    .unwrap();
    let (t, sock) = serve_file(&config, dir.path(), addr);
    let c = |args: &[&str]| {
        let o = ctl_at(&sock, args);
        assert!(o.ok, "{args:?}: {}", o.stderr);
        o
    };
    let other = "nqn.2026-11.io.ebof:second";
    c(&[
        "ns",
        "add",
        NQN,
        "--file",
        img.to_str().unwrap(),
        "--size",
        "4M",
        "--block-size",
        "4096",
    ]);
    c(&["ns", "resize", NQN, "1", "32M"]);
    c(&["subsystem", "add", other, "--no-allow-any-host"]);
    c(&["host", "allow", other, HOST_B]);
    c(&["ns", "add", other, "--ram", "8M", "--nsid", "5"]);
    let extra = format!("127.0.0.1:{}", free_port());
    c(&["listener", "add", &extra]);
    let before: Value = serde_json::from_str(&c(&["show", "--json"]).stdout).unwrap();
    let o = c(&["save"]);
    assert!(
        o.stdout.contains(&config.display().to_string()),
        "{}",
        o.stdout
    );
    // Saving elsewhere, and the file loads as a configuration.
    let copy = dir.path().join("copy.toml");
    c(&["save", copy.to_str().unwrap()]);
    let check = ebof(&["serve", "-c", copy.to_str().unwrap(), "--print-config"]);
    assert!(check.ok, "{}", check.stderr);
    assert!(
        std::fs::read_dir(dir.path()).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".tmp-"))
    );
    drop(t);

    let (_t, sock2) = serve_file(&config, dir.path(), addr);
    let o = ctl_at(&sock2, &["show", "--json"]);
    assert!(o.ok, "{}", o.stderr);
    let mut after: Value = serde_json::from_str(&o.stdout).unwrap();
    after["controllers"] = before["controllers"].clone();
    let mut before = before;
    // Port IDs are renumbered from the file's order; the rest must be equal.
    for v in [&mut before, &mut after] {
        for l in v["listeners"].as_array_mut().unwrap() {
            l["portid"] = Value::Null;
        }
        common::served::without_usage(v);
    }
    assert_eq!(before, after);
}

#[test]
fn autosave_writes_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.path().join("ebof.toml");
    std::fs::write(
        &config,
        format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = {}\n\n[management]\nautosave = true\n\n\
             [[subsystems]]\nnqn = \"{NQN}\"\n[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"16M\"\n",
            addr.port()
        ),
    )
    .unwrap();
    let (_t, sock) = serve_file(&config, dir.path(), addr);
    let o = ctl_at(&sock, &["ns", "add", NQN, "--ram", "4M"]);
    assert!(o.ok, "{}", o.stderr);
    let saved = ebof_config::Config::load(&config).unwrap();
    assert_eq!(saved.subsystems[0].namespaces.len(), 2);
    assert!(saved.management.autosave);
    // A rejected request writes nothing.
    let text = std::fs::read_to_string(&config).unwrap();
    let o = ctl_at(&sock, &["ns", "add", NQN, "--ram", "1000"]);
    assert!(!o.ok);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), text);
}

/// `ebof ctl ARGS` with `EBOF_TOKEN` set to `token` (or unset), bounded by the client's own
/// request timeout.
fn ctl_env(args: &[&str], token: Option<&str>) -> Output {
    let mut cmd = Command::new(EBOF);
    cmd.arg("ctl").args(args).stdin(Stdio::null());
    match token {
        Some(t) => cmd.env("EBOF_TOKEN", t),
        None => cmd.env_remove("EBOF_TOKEN"),
    };
    let o = cmd.output().expect("run ebof ctl");
    Output {
        ok: o.status.success(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// The last line of `ebof serve`'s stderr (its error; log lines come before it).
fn last_line(s: &str) -> &str {
    s.lines().last().unwrap_or("")
}

#[test]
fn management_api_on_tcp_with_a_bearer_token() {
    use std::os::unix::fs::PermissionsExt;
    const TOKEN: &str = "tcp-test-token-4f9a0c1e";
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "not-the-token\n").unwrap();
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let api = format!("127.0.0.1:{}", free_port());
    let sock = dir.path().join("ebof.sock");
    let serve_args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "serve",
            "--listen",
            &addr.to_string(),
            "--ram",
            "16M",
            "--cores",
            "0",
            "--mgmt-socket",
            sock.to_str().unwrap(),
            "--mgmt-listen",
            &api,
            "--mgmt-data-dir",
            dir.path().to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |a: &[String]| ebof(&a.iter().map(String::as_str).collect::<Vec<_>>());

    // No token file: a configuration error naming the field and the option.
    let o = run(&serve_args(&[]));
    assert!(!o.ok);
    let err = last_line(&o.stderr);
    assert!(
        err.contains("config error at management.token_file: ")
            && err.contains("--mgmt-token-file")
            && err.ends_with("(missing-field)"),
        "{}",
        o.stderr
    );
    // A token file others can read: refused at start, naming the file and the fix.
    let with_token = serve_args(&["--mgmt-token-file", token.to_str().unwrap()]);
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = run(&with_token);
    assert!(!o.ok);
    assert_eq!(
        last_line(&o.stderr),
        format!(
            "ebof: error: management token file {0} can be read or written by group or others (mode 0644); make it owner-only: chmod 600 {0}",
            token.display()
        ),
        "{}",
        o.stderr
    );
    assert!(!sock.exists(), "nothing was started");

    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let log = dir.path().join("serve.log");
    let _t = Target::spawn(
        &with_token.iter().map(String::as_str).collect::<Vec<_>>(),
        addr,
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let tf = token.to_str().unwrap();

    // The right token: the whole API, through --token-file or EBOF_TOKEN.
    let o = ctl_env(&["--api", &api, "--token-file", tf, "show"], None);
    assert!(o.ok, "{}", o.stderr);
    assert!(
        o.stdout.contains(NQN) && o.stdout.contains("16M"),
        "{}",
        o.stdout
    );
    let added = "nqn.2026-11.io.ebof:over-tcp";
    let o = ctl_env(&["--api", &api, "subsystem", "add", added], Some(TOKEN));
    assert!(o.ok, "{}", o.stderr);
    let o = ctl_env(
        &["--socket", sock.to_str().unwrap(), "show", "--json"],
        None,
    );
    assert!(o.ok, "{}", o.stderr);
    let st: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(st["subsystems"][1]["nqn"], added, "the change is live");
    let o = ctl_env(&["--api", &api, "--token-file", tf, "metrics"], None);
    assert!(o.ok && o.stdout.contains("# TYPE"), "{}", o.stderr);
    // save writes listen and token_file back (never the token).
    let saved = dir.path().join("saved.toml");
    let o = ctl_env(
        &[
            "--api",
            &api,
            "--token-file",
            tf,
            "save",
            saved.to_str().unwrap(),
        ],
        None,
    );
    assert!(o.ok, "{}", o.stderr);
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.contains(&format!("listen = \"{api}\"")), "{text}");
    assert!(
        text.contains(&format!("token_file = \"{}\"", token.display())),
        "{text}"
    );
    assert!(!text.contains(TOKEN), "{text}");

    // A wrong token, no token, an empty EBOF_TOKEN: one clear error line each, nothing changed.
    let before = ctl_env(&["--api", &api, "--token-file", tf, "show", "--json"], None).stdout;
    for (args, env, says) in [
        (
            vec![
                "--api",
                &api,
                "--token-file",
                wrong.to_str().unwrap(),
                "show",
            ],
            None,
            "(unauthorized)",
        ),
        (
            vec!["--api", &api, "show"],
            Some("not-it"),
            "(unauthorized)",
        ),
        (
            vec!["--api", &api, "subsystem", "remove", NQN],
            None,
            "(unauthorized)",
        ),
        (
            vec!["--api", &api, "show"],
            Some(""),
            "EBOF_TOKEN: the token is empty",
        ),
    ] {
        let o = ctl_env(&args, env);
        assert!(!o.ok, "{args:?}");
        assert_eq!(o.stderr.lines().count(), 1, "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(says), "{args:?}: {}", o.stderr);
    }
    let o = ctl_env(&["--api", &api, "show"], None);
    assert!(
        o.stderr
            .contains("requires `Authorization: Bearer TOKEN` (ebof ctl: --token-file PATH or EBOF_TOKEN) (unauthorized)"),
        "{}",
        o.stderr
    );
    let after = ctl_env(&["--api", &api, "--token-file", tf, "show", "--json"], None).stdout;
    assert_eq!(before, after);
    // Refusals are logged (rate-limited: at least the first), never with a token.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("request refused"), "{logged}");
    assert!(
        !logged.contains(TOKEN) && !logged.contains("not-the-token") && !logged.contains("not-it")
    );

    // Nothing at the address: as clear as the socket's error.
    let nowhere = format!("127.0.0.1:{}", free_port());
    let o = ctl_env(&["--api", &nowhere, "--token-file", tf, "show"], None);
    assert!(!o.ok);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(
        o.stderr.starts_with(&format!(
            "ebof: error: no ebof management API at {nowhere}: "
        )),
        "{}",
        o.stderr
    );
    // --token-file belongs to --api; --api and --socket exclude each other.
    assert!(!ctl_env(&["--token-file", tf, "show"], None).ok);
    assert!(!ctl_env(&["--api", &api, "--socket", "/x", "show"], None).ok);
}

#[test]
fn ana_states_set_live_shown_and_enforced() {
    let s = serve();
    let l = format!("127.0.0.1:{}", s.t.port());
    let set = |state: &str| {
        ctl(
            &s,
            &[
                "ana",
                "set",
                "--listener",
                &l,
                "--group",
                "1",
                "--state",
                state,
            ],
        )
    };
    let o = set("inaccessible");
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stdout.contains("inaccessible"), "{}", o.stdout);
    assert_eq!(
        state(&s)["ana"],
        serde_json::json!([{"listener": l, "group": 1, "state": "inaccessible"}])
    );
    let show = ctl(&s, &["show"]);
    assert!(
        show.stdout
            .contains("ana (groups not listed are optimized)")
            && show.stdout.contains("inaccessible"),
        "{}",
        show.stdout
    );
    // I/O through the path fails (a single-path host has nowhere else to go).
    let o = perf(&s, HOST_A, &["--runtime", "100ms"]);
    assert!(!o.ok, "I/O succeeded on an inaccessible path: {}", o.stdout);
    assert!(o.stderr.contains("I/O errors"), "{}", o.stderr);
    // Setting the same state again changes nothing.
    let o = ctl(
        &s,
        &[
            "--json",
            "ana",
            "set",
            "--listener",
            &l,
            "--state",
            "inaccessible",
        ],
    );
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["changed"], false);
    for (listener, group, code) in [
        ("127.0.0.1:1", "1", "unknown-listener"),
        (l.as_str(), "1025", "invalid-ana-group"),
        (l.as_str(), "0", "invalid-ana-group"),
    ] {
        let args = ["ana", "set", "--listener", listener, "--group", group];
        rejected(&s, &[&args[..], &["--state", "change"]].concat(), code);
    }
    let o = set("optimized");
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(state(&s)["ana"], serde_json::json!([]));
    let o = perf(&s, HOST_A, &["--runtime", "100ms"]);
    assert!(o.ok, "{}", o.stderr);
}
