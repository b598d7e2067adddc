//! `ebof ctl top`, `ebof ctl --boxes FILE show|top` and `ebof ctl dump` against real
//! `ebof serve` processes (issue 36, items 3 and 4):
//! * `top --once --json`: the figures of a namespace are zero when idle and move under
//!   `ebof perf` load (IOPS both ways, bandwidth, queue depth, interval latency);
//! * the fleet view of a boxes file with two live boxes, one whose port refuses and one that
//!   accepts and never answers: one table with a BOX column, the dead ones shown unreachable
//!   with their error, within the per-box timeout;
//! * `dump`: the bundle's files and MANIFEST, and no secret in it — the API token, the
//!   DH-HMAC-CHAP secrets, the TLS PSK and an encryption key's bytes (raw, hex, base64).

mod common;

use common::served::{HOST_A, NQN, perf_args_at, serve, serve_file};
use common::{EBOF, Target, ebof, free_port};
use serde_json::Value;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "ctl-top-token-5f0c9a";
const HOST_KEY: &str = "DHHC-1:01:VZi5tbir3nYufwfgCrjX0O2mmPHFkObvzamIRZnYUahWiFGg:";
const CTRL_KEY: &str =
    "DHHC-1:02:elMhBLOsS9lwM3coDHJdWd13OK+KUnC7FcTJuoLCxjK/HGD9d7D/WpmmINI3kXxbIeTtsA==:";
const TLS_KEY: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";

/// `ebof perf` against the listener on `port` for `secs` seconds, mixed reads and writes,
/// in the background (killed by its PID on drop).
struct Load(Child);

impl Load {
    fn start(port: &str, secs: u32) -> Load {
        let runtime = format!("{secs}s");
        let a = perf_args_at(
            port,
            HOST_A,
            &[
                "--rw",
                "randrw",
                "--bs",
                "4k",
                "--qd",
                "8",
                "--runtime",
                &runtime,
            ],
        );
        let child = Command::new(EBOF)
            .args(&a)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Load(child)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Wait until the box behind `sock` has an I/O queue connected (the load is running).
fn until_io_queue(sock: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = ebof_api::Client::new(sock).stats().unwrap();
        if s.io_queues > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "no I/O queue connected");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn json(o: &common::Output) -> Value {
    assert!(o.ok, "{}", o.stderr);
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", o.stdout))
}

fn ns1(v: &Value) -> &Value {
    v["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["nsid"] == 1)
        .unwrap_or_else(|| panic!("no nsid 1: {v}"))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k}: {v}"))
}

#[test]
fn top_once_json_figures_move_under_perf_load() {
    let s = serve();
    let sock = s.sock.to_str().unwrap();
    let idle = json(&ebof(&[
        "ctl",
        "--socket",
        sock,
        "top",
        "--once",
        "--json",
        "--interval",
        "0.5",
    ]));
    let n = ns1(&idle);
    assert_eq!(f(n, "read_iops") + f(n, "write_iops"), 0.0, "{idle}");
    assert_eq!(f(n, "queue_depth"), 0.0, "{idle}");
    assert!(n.get("read_latency").is_none(), "{idle}");

    let _load = Load::start(&s.t.port(), 8);
    until_io_queue(&s.sock);
    let busy = json(&ebof(&[
        "ctl",
        "--socket",
        sock,
        "top",
        "--once",
        "--json",
        "--interval",
        "2",
    ]));
    eprintln!("ebof ctl top --once --json under load:\n{busy}");
    let n = ns1(&busy);
    assert!(
        f(n, "read_iops") > 0.0 && f(n, "write_iops") > 0.0,
        "{busy}"
    );
    assert!(
        f(n, "read_bytes_per_sec") >= f(n, "read_iops") * 4096.0 * 0.99,
        "{busy}"
    );
    assert!(f(n, "write_bytes_per_sec") > 0.0, "{busy}");
    assert!(f(n, "queue_depth") > 0.0, "{busy}");
    let rl = &n["read_latency"];
    assert!(
        f(rl, "p50_us") > 0.0 && f(rl, "p99_us") >= f(rl, "p50_us"),
        "{busy}"
    );
    assert!(
        f(rl, "count") > 0.0 && f(&n["write_latency"], "count") > 0.0,
        "{busy}"
    );
    assert!(f(&busy, "interval_s") >= 1.5, "{busy}");
    assert!(busy["io_queues"].as_u64().unwrap() >= 1, "{busy}");

    // The text view, bounded by --count: busiest first, one header per view.
    let o = ebof(&[
        "ctl",
        "--socket",
        sock,
        "top",
        "--count",
        "2",
        "--interval",
        "0.5",
    ]);
    assert!(o.ok, "{}", o.stderr);
    eprintln!("ebof ctl top --count 2 under load:\n{}", o.stdout);
    let heads: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("SUBSYSTEM"))
        .collect();
    assert_eq!(heads.len(), 2, "{}", o.stdout);
    assert!(
        heads[0].contains("R/s") && heads[0].contains("QD"),
        "{}",
        o.stdout
    );
    // Two namespaces? The busy one leads.
    let first_row = o
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("SUBSYSTEM"))
        .nth(1);
    assert!(first_row.unwrap().starts_with(NQN), "{}", o.stdout);
    // Bad intervals are refused.
    let o = ebof(&["ctl", "--socket", sock, "top", "--once", "--interval", "0"]);
    assert!(!o.ok && o.stderr.contains("--interval"), "{}", o.stderr);
}

/// A box with the management API on TCP behind `TOKEN` (in `dir`), `extra` added to its
/// configuration; returns the box and its API address.
fn api_box(dir: &Path, extra: &str) -> (Target, SocketAddr, std::path::PathBuf) {
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
             [[subsystems]]\nnqn = \"{NQN}\"\n[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"16M\"\n",
            addr.port(),
            token.display().to_string(),
        ),
    )
    .unwrap();
    let (t, sock) = serve_file(&cfg, dir, addr);
    (t, api, sock)
}

#[test]
fn the_fleet_view_shows_every_box_and_the_dead_ones_as_unreachable() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (ta, api_a, sock_a) = api_box(da.path(), "");
    let (_tb, api_b, _) = api_box(db.path(), "");
    // A port that refuses, and one that accepts (the kernel's backlog) and never answers.
    let refused = free_port();
    let stuck = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stuck_addr = stuck.local_addr().unwrap();
    let file = da.path().join("boxes.toml");
    let token = da.path().join("token");
    let t = token.display();
    std::fs::write(
        &file,
        format!(
            "[[boxes]]\nname = \"a\"\napi = \"{api_a}\"\ntoken_file = \"{t}\"\nzone = \"z1\"\n\
             [[boxes]]\nname = \"b\"\napi = \"{api_b}\"\ntoken_file = \"{t}\"\n\
             [[boxes]]\nname = \"down\"\napi = \"127.0.0.1:{refused}\"\ntoken_file = \"{t}\"\n\
             [[boxes]]\nname = \"stuck\"\napi = \"{stuck_addr}\"\ntoken_file = \"{t}\"\n"
        ),
    )
    .unwrap();
    let boxes = file.to_str().unwrap();
    // Load on box a throughout: its controller is in `show`, its figures lead in `top`.
    let _load = Load::start(&ta.port(), 12);
    until_io_queue(&sock_a);
    let start = Instant::now();
    let v = json(&ebof(&[
        "ctl",
        "--boxes",
        boxes,
        "--box-timeout",
        "1",
        "show",
        "--json",
    ]));
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "one dead box stalled the view"
    );
    let l = v["boxes"].as_array().unwrap();
    let names: Vec<&str> = l.iter().map(|b| b["box"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b", "down", "stuck"]);
    for b in &l[..2] {
        assert!(b.get("error").is_none(), "{b}");
        assert_eq!(b["state"]["subsystems"][0]["nqn"], NQN, "{b}");
    }
    assert_eq!(l[0]["zone"], "z1");
    let e = l[2]["error"].as_str().unwrap();
    assert!(e.contains("no ebof management API at 127.0.0.1"), "{e}");
    assert!(l[2].get("state").is_none());
    assert!(
        l[3]["error"]
            .as_str()
            .unwrap()
            .contains("no answer within 1s"),
        "{v}"
    );

    let o = ebof(&["ctl", "--boxes", boxes, "--box-timeout", "1", "show"]);
    assert!(o.ok, "{}", o.stderr);
    eprintln!("ebof ctl --boxes FILE show:\n{}", o.stdout);
    let head = o.stdout.lines().next().unwrap();
    assert!(
        head.starts_with("BOX") && head.ends_with("STATUS"),
        "{}",
        o.stdout
    );
    let row = |n: &str| {
        o.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{n} ")))
            .unwrap_or_else(|| panic!("no row {n}: {}", o.stdout))
            .to_string()
    };
    assert!(
        row("a").ends_with("up") && row("b").ends_with("up"),
        "{}",
        o.stdout
    );
    assert!(
        row("down").contains("unreachable: no ebof management API"),
        "{}",
        o.stdout
    );
    assert!(
        row("stuck").contains("unreachable: no answer within 1s"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .lines()
            .any(|l| l.trim_start().starts_with("a ") && l.contains(NQN)),
        "the namespace table has a BOX column: {}",
        o.stdout
    );

    assert!(
        o.stdout
            .lines()
            .any(|l| l.trim_start().starts_with("a ") && l.contains(HOST_A)),
        "box a's controller: {}",
        o.stdout
    );
    // top across the fleet, under load on box a: a leads, the dead boxes say why.
    let v = json(&ebof(&[
        "ctl",
        "--boxes",
        boxes,
        "--box-timeout",
        "1",
        "top",
        "--once",
        "--json",
        "--interval",
        "2",
    ]));
    eprintln!("ebof ctl --boxes FILE top --once --json under load:\n{v}");
    let l = v["boxes"].as_array().unwrap();
    assert_eq!(l.len(), 4, "{v}");
    assert_eq!(l[0]["box"], "a", "busiest first: {v}");
    assert!(f(ns1(&l[0]), "read_iops") > 0.0, "{v}");
    assert_eq!(f(ns1(&l[1]), "read_iops"), 0.0, "{v}");
    for b in &l[2..] {
        assert!(
            b["error"].as_str().unwrap().starts_with("unreachable: "),
            "{v}"
        );
    }
    let o = ebof(&[
        "ctl",
        "--boxes",
        boxes,
        "--box-timeout",
        "1",
        "top",
        "--once",
        "--interval",
        "1",
    ]);
    assert!(o.ok, "{}", o.stderr);
    eprintln!("ebof ctl --boxes FILE top --once under load:\n{}", o.stdout);
    assert!(
        o.stdout.lines().any(|l| l.starts_with("BOX ")),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("down: unreachable: "), "{}", o.stdout);
    // Other commands act on one box.
    let o = ebof(&["ctl", "--boxes", boxes, "stats"]);
    assert!(
        !o.ok && o.stderr.contains("--boxes goes with show and top"),
        "{}",
        o.stderr
    );
    drop(stuck);
}

/// Base64 (RFC 4648, padded) of `b`.
fn base64(b: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Every file of the gzipped tar `bundle`: its path and bytes.
fn unpack(bundle: &Path) -> Vec<(String, Vec<u8>)> {
    use std::io::Read;
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(bundle).unwrap());
    let mut a = tar::Archive::new(gz);
    let mut out = Vec::new();
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        let path = e.path().unwrap().display().to_string();
        let mut b = Vec::new();
        e.read_to_end(&mut b).unwrap();
        out.push((path, b));
    }
    out
}

#[test]
fn the_support_bundle_holds_no_secret() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    // An encryption key: 64 bytes, mode 0600.
    let key: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
    let key_file = dir.join("ns.key");
    std::fs::write(&key_file, &key).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let data = dir.join("ns.img");
    let extra = format!(
        "[[hosts]]\nnqn = \"{HOST_A}\"\ndhchap_key = \"{HOST_KEY}\"\n\
         dhchap_ctrl_key = \"{CTRL_KEY}\"\ntls_key = \"{TLS_KEY}\"\n\n\
         [[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:crypt\"\n[[subsystems.namespaces]]\n\
         backend = \"file\"\npath = {:?}\nsize = \"4M\"\nencryption = {{ key_file = {:?} }}\n",
        data.display().to_string(),
        key_file.display().to_string()
    );
    let (_t, api, sock) = api_box(dir, &extra);
    let token = dir.join("token");
    let bundle = dir.join("bundle.tar.gz");
    let o = ebof(&[
        "ctl",
        "--api",
        &api.to_string(),
        "--token-file",
        token.to_str().unwrap(),
        "dump",
        "-o",
        bundle.to_str().unwrap(),
    ]);
    assert!(o.ok, "{}", o.stderr);
    assert!(
        o.stdout.contains("support bundle written to"),
        "{}",
        o.stdout
    );
    let mode = std::fs::metadata(&bundle).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let files = unpack(&bundle);
    let names: Vec<&str> = files
        .iter()
        .map(|(p, _)| p.rsplit('/').next().unwrap())
        .collect();
    for want in [
        "state.json",
        "stats.json",
        "config.toml",
        "metrics.txt",
        "versions.txt",
        "MANIFEST",
    ] {
        assert!(names.contains(&want), "{want} not in {names:?}");
    }
    let text = |name: &str| {
        let (_, b) = files.iter().find(|(p, _)| p.ends_with(name)).unwrap();
        String::from_utf8(b.clone()).unwrap()
    };
    let manifest = text("MANIFEST");
    eprintln!("MANIFEST:\n{manifest}");
    assert!(manifest.contains("config.toml") && manifest.contains("metrics.txt"));
    assert!(
        manifest.contains("logs.txt") && manifest.contains("not collected"),
        "{manifest}"
    );
    let config = text("config.toml");
    assert!(config.contains("dhchap_key = \"<redacted>\""), "{config}");
    assert!(
        config.contains(&key_file.display().to_string()),
        "key file paths stay: {config}"
    );
    assert!(config.contains(&token.display().to_string()), "{config}");
    assert!(text("versions.txt").contains("box kernel: Linux"));
    assert!(text("metrics.txt").contains("ebof_build_info"));
    assert!(text("state.json").contains("nqn.2026-11.io.ebof:crypt"));

    // No secret, in any form, anywhere in the bundle (nor in the archive's own bytes).
    let secret_part = |k: &str| k.split(':').nth(2).unwrap().to_string();
    let mut secrets: Vec<Vec<u8>> = vec![TOKEN.into()];
    for k in [HOST_KEY, CTRL_KEY, TLS_KEY] {
        secrets.push(k.into());
        secrets.push(secret_part(k).into());
    }
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    secrets.push(hex.clone().into());
    secrets.push(hex.to_uppercase().into());
    secrets.push(base64(&key).into());
    secrets.push(
        base64(&key)
            .trim_end_matches('=')
            .replace('+', "-")
            .replace('/', "_")
            .into(),
    );
    secrets.push(key[..16].to_vec());
    let contains = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    for (path, body) in &files {
        for s in &secrets {
            assert!(
                !contains(body, s),
                "{path} holds a secret ({})",
                String::from_utf8_lossy(&s[..8.min(s.len())])
            );
        }
    }
    // The same over the management socket (on the box: logs are looked for in the journal).
    let bundle2 = dir.join("local.tar.gz");
    let o = ebof(&[
        "ctl",
        "--socket",
        sock.to_str().unwrap(),
        "dump",
        "-o",
        bundle2.to_str().unwrap(),
    ]);
    assert!(o.ok, "{}", o.stderr);
    for (path, body) in unpack(&bundle2) {
        for s in &secrets {
            assert!(!contains(&body, s), "{path} holds a secret");
        }
    }

    // The fleet's bundle: a directory per box with the same files, the dead boxes in the
    // top-level MANIFEST with their error, within the per-box timeout, and no secret.
    let d2 = tempfile::tempdir().unwrap();
    let (_t2, api2, _) = api_box(d2.path(), "");
    let refused = free_port();
    let stuck = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stuck_addr = stuck.local_addr().unwrap();
    let t = token.display();
    let file = dir.join("boxes.toml");
    std::fs::write(
        &file,
        format!(
            "[[boxes]]\nname = \"secret-box\"\napi = \"{api}\"\ntoken_file = \"{t}\"\n\
             [[boxes]]\nname = \"plain\"\napi = \"{api2}\"\ntoken_file = \"{}\"\n\
             [[boxes]]\nname = \"down\"\napi = \"127.0.0.1:{refused}\"\ntoken_file = \"{t}\"\n\
             [[boxes]]\nname = \"stuck\"\napi = \"{stuck_addr}\"\ntoken_file = \"{t}\"\n",
            d2.path().join("token").display()
        ),
    )
    .unwrap();
    let fleet_bundle = dir.join("fleet.tar.gz");
    let start = Instant::now();
    let o = ebof(&[
        "ctl",
        "--boxes",
        file.to_str().unwrap(),
        "--box-timeout",
        "2",
        "dump",
        "-o",
        fleet_bundle.to_str().unwrap(),
    ]);
    assert!(o.ok, "{}", o.stderr);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "a stuck box stalled the dump"
    );
    assert!(o.stdout.contains("2 of 4 boxes"), "{}", o.stdout);
    let mode = std::fs::metadata(&fleet_bundle)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let files = unpack(&fleet_bundle);
    let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    for b in ["secret-box", "plain"] {
        for want in [
            "state.json",
            "stats.json",
            "config.toml",
            "metrics.txt",
            "versions.txt",
            "MANIFEST",
        ] {
            assert!(
                paths.iter().any(|p| p.ends_with(&format!("/{b}/{want}"))),
                "{b}/{want} not in {paths:?}"
            );
        }
    }
    assert!(
        !paths
            .iter()
            .any(|p| p.contains("/down/") || p.contains("/stuck/"))
    );
    let (_, m) = files
        .iter()
        .find(|(p, _)| p.matches('/').count() == 1 && p.ends_with("/MANIFEST"))
        .expect("a top-level MANIFEST");
    let m = String::from_utf8(m.clone()).unwrap();
    eprintln!("fleet MANIFEST:\n{m}");
    let line = |b: &str| {
        m.lines()
            .find(|l| l.starts_with(&format!("{b} ")))
            .unwrap_or_else(|| panic!("no {b}: {m}"))
            .to_string()
    };
    assert!(line("secret-box").contains("collected"), "{m}");
    assert!(line("plain").contains("collected"), "{m}");
    assert!(
        line("down").contains("unreachable: no ebof management API"),
        "{m}"
    );
    assert!(line("stuck").contains("unreachable: "), "{m}");
    let d2_token = std::fs::read(d2.path().join("token")).unwrap();
    secrets.push(d2_token.trim_ascii().to_vec());
    for (path, body) in &files {
        for s in &secrets {
            assert!(!contains(body, s), "{path} holds a secret");
        }
    }
    drop(stuck);
}
