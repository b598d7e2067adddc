//! Per-host I/O (issue 36, `[metrics] per_host_io = true`) against real `ebof serve`
//! processes: two hosts' reads and writes counted apart in `GET /v1/stats`, on `/metrics`
//! (label `hostnqn`, a valid exposition: `promtool check metrics` when promtool is at hand)
//! and in `ebof ctl top --hosts` (one box and `--boxes`); with the switch off, none of it.

mod common;

use common::served::{HOST_A, HOST_B, NQN, perf_args_at, serve_file};
use common::{EBOF, Target, ebof, free_port};
use ebof_api::{Client, HostStats};
use serde_json::Value;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const TOKEN: &str = "top-hosts-token-93e1";

/// A box with a RAM namespace (`extra` added to its configuration), its management API also
/// on TCP behind [`TOKEN`] (`DIR/token`); returns the box, its API address and its socket.
fn a_box(dir: &Path, extra: &str) -> (Target, SocketAddr, PathBuf) {
    let token = dir.join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let cfg = dir.join("ebof.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = {}\n\n\
             [management]\nlisten = \"{api}\"\ntoken_file = {:?}\n\n{extra}\n\
             [[subsystems]]\nnqn = \"{NQN}\"\nallow_any_host = true\n\
             [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"16M\"\n",
            addr.port(),
            token.display().to_string(),
        ),
    )
    .unwrap();
    let (t, sock) = serve_file(&cfg, dir, addr);
    (t, api, sock)
}

/// `ebof perf` as `host` on `t`, `rw` for `secs`, to its end.
fn perf(t: &Target, host: &str, rw: &str, secs: &str) {
    let a = perf_args_at(
        &t.port(),
        host,
        &["--rw", rw, "--bs", "4k", "--qd", "4", "--runtime", secs],
    );
    let o = ebof(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.ok, "{}", o.stderr);
}

fn host<'a>(hosts: &'a [HostStats], nqn: &str) -> &'a HostStats {
    hosts
        .iter()
        .find(|h| h.hostnqn == nqn)
        .unwrap_or_else(|| panic!("no {nqn}: {hosts:?}"))
}

/// Stats once the queues published (they do when idle, within a timer tick).
fn settled(sock: &Path) -> ebof_api::Stats {
    std::thread::sleep(std::time::Duration::from_millis(1200));
    Client::new(sock).stats().unwrap()
}

fn json(o: &common::Output) -> Value {
    assert!(o.ok, "{}", o.stderr);
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", o.stdout))
}

/// `promtool check metrics` on `text` where promtool is installed or unpacked by
/// scripts/check-monitoring.sh; else the lines are checked for the shape it wants.
fn check_exposition(text: &str) {
    let unpacked = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/prometheus/usr/bin/promtool"
    );
    let promtool = [unpacked, "promtool"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok());
    if let Some(p) = promtool {
        let mut c = Command::new(p)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let o = c.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        eprintln!("promtool check metrics: no problems");
        return;
    }
    // The per-host families (not `ebof_host_terminations_total`, a box-wide counter).
    let per_host = [
        "ebof_host_read_",
        "ebof_host_write_",
        "ebof_host_written_",
        "ebof_host_media_",
    ];
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| per_host.iter().any(|p| l.starts_with(p)))
        .collect();
    assert!(!lines.is_empty(), "no per-host series:\n{text}");
    for l in lines {
        let (series, v) = l.rsplit_once(' ').unwrap();
        assert!(v.parse::<f64>().is_ok(), "{l}");
        assert!(
            series.contains("hostnqn=\"") && series.ends_with('}'),
            "{l}"
        );
    }
}

#[test]
fn two_hosts_are_counted_apart_and_off_shows_none() {
    let (d_on, d_off) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (on, api_on, sock_on) = a_box(d_on.path(), "[metrics]\nper_host_io = true\n");
    let (off, api_off, sock_off) = a_box(d_off.path(), "");
    perf(&on, HOST_A, "randread", "2s");
    perf(&on, HOST_B, "randwrite", "2s");
    perf(&off, HOST_A, "randread", "1s");

    // Counted apart: A only read, B only wrote, and together they are the namespace.
    let s = settled(&sock_on);
    let hosts = s.hosts.as_deref().expect("per-host I/O on");
    let (a, b) = (host(hosts, HOST_A), host(hosts, HOST_B));
    assert!(a.read_commands > 0 && a.write_commands == 0, "{a:?}");
    assert!(b.write_commands > 0 && b.read_commands == 0, "{b:?}");
    assert_eq!(a.bytes_read, a.read_commands * 4096);
    assert_eq!(b.bytes_written, b.write_commands * 4096);
    let ns = &s.namespaces[0];
    assert_eq!(
        (ns.read_commands, ns.write_commands),
        (a.read_commands, b.write_commands)
    );
    assert_eq!(a.read_latency.as_ref().unwrap().count, a.read_commands);
    assert!(a.write_latency.is_none() && b.read_latency.is_none());
    assert_eq!(b.write_latency.as_ref().unwrap().count, b.write_commands);

    // Off: no per-host figures anywhere.
    let s = settled(&sock_off);
    assert!(
        s.hosts.is_none() && s.namespaces[0].read_commands > 0,
        "{s:?}"
    );
    let m = Client::new(&sock_off).metrics().unwrap();
    assert!(!m.contains("ebof_host_read") && !m.contains(HOST_A), "{m}");
    let o = ebof(&[
        "ctl",
        "--socket",
        sock_off.to_str().unwrap(),
        "top",
        "--hosts",
        "--once",
    ]);
    assert!(
        !o.ok && o.stderr.contains("per_host_io = true"),
        "{}",
        o.stderr
    );

    // /metrics: a series per host, in a valid exposition.
    let m = Client::new(&sock_on).metrics().unwrap();
    let reads = format!(
        "ebof_host_read_commands_total{{hostnqn=\"{HOST_A}\"}} {}",
        a.read_commands
    );
    let writes = format!(
        "ebof_host_write_commands_total{{hostnqn=\"{HOST_B}\"}} {}",
        b.write_commands
    );
    assert!(m.contains(&reads) && m.contains(&writes), "{m}");
    assert!(
        m.contains(&format!(
            "ebof_host_read_latency_seconds_count{{hostnqn=\"{HOST_A}\"}}"
        )),
        "{m}"
    );
    check_exposition(&ebof_mgmt::metrics::to_text_format(&m));

    // top --hosts under load from A only: A leads, B is idle.
    let a_args = perf_args_at(
        &on.port(),
        HOST_A,
        &[
            "--rw",
            "randread",
            "--bs",
            "4k",
            "--qd",
            "4",
            "--runtime",
            "8s",
        ],
    );
    let mut load = Command::new(EBOF)
        .args(&a_args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let sock = sock_on.to_str().unwrap();
    let v = json(&ebof(&[
        "ctl",
        "--socket",
        sock,
        "top",
        "--hosts",
        "--once",
        "--json",
        "--interval",
        "2",
    ]));
    eprintln!("ebof ctl top --hosts --once --json under load:\n{v}");
    let l = v["hosts"].as_array().unwrap();
    assert_eq!(l[0]["hostnqn"], HOST_A, "{v}");
    assert!(l[0]["read_iops"].as_f64().unwrap() > 0.0, "{v}");
    assert!(
        l[0]["read_latency"]["p99_us"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    assert_eq!(l[1]["hostnqn"], HOST_B, "{v}");
    assert_eq!(l[1]["write_iops"].as_f64().unwrap(), 0.0, "{v}");
    let o = ebof(&[
        "ctl",
        "--socket",
        sock,
        "top",
        "--hosts",
        "--once",
        "--interval",
        "1",
    ]);
    assert!(o.ok, "{}", o.stderr);
    eprintln!("ebof ctl top --hosts --once under load:\n{}", o.stdout);
    let head = o.stdout.lines().find(|l| l.starts_with("HOST")).unwrap();
    assert!(head.contains("R/s") && head.contains("QD"), "{}", o.stdout);

    // The fleet: the box that counts shows its hosts, the other says it does not.
    let (t_on, t_off) = (d_on.path().join("token"), d_off.path().join("token"));
    let file = d_on.path().join("boxes.toml");
    std::fs::write(
        &file,
        format!(
            "[[boxes]]\nname = \"on\"\napi = \"{api_on}\"\ntoken_file = {:?}\n\
             [[boxes]]\nname = \"off\"\napi = \"{api_off}\"\ntoken_file = {:?}\n",
            t_on.display().to_string(),
            t_off.display().to_string()
        ),
    )
    .unwrap();
    let boxes = file.to_str().unwrap();
    let o = ebof(&[
        "ctl",
        "--boxes",
        boxes,
        "top",
        "--hosts",
        "--once",
        "--interval",
        "1",
    ]);
    let _ = load.kill();
    let _ = load.wait();
    assert!(o.ok, "{}", o.stderr);
    eprintln!(
        "ebof ctl --boxes FILE top --hosts --once under load:\n{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("off: per-host I/O is off"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .lines()
            .any(|l| l.starts_with("on ") && l.contains(HOST_A)),
        "{}",
        o.stdout
    );
}

#[test]
fn label_values_are_escaped() {
    use ebof_mgmt::metrics::label_value;
    assert_eq!(label_value("nqn.plain"), "nqn.plain");
    assert_eq!(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}
