//! The management plane is not root by accident (issue 32, review findings M1–M5), end to
//! end through `ebof serve` and `ebof ctl`: HTTPS on the API's TCP listener, no token in clear
//! beyond loopback, the storage allowlist's codes, owner-only files under umask 022, and
//! `/metrics` without host NQNs unless asked for.

mod common;

use common::served::{ctl_at, serve_file};
use common::{EBOF, Output, Target, free_port};
use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.ebof:sec";
const TOKEN: &str = "mgmt-security-token-7d1e";

fn run(cmd: &mut Command) -> Output {
    let o = cmd.stdin(Stdio::null()).output().expect("run");
    Output {
        ok: o.status.success(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// `ebof ctl ARGS` with no token or plain-HTTP permission from the environment.
fn ctl(args: &[&str]) -> Output {
    run(Command::new(EBOF)
        .arg("ctl")
        .args(args)
        .env_remove("EBOF_TOKEN")
        .env_remove("EBOF_ALLOW_PLAIN_HTTP"))
}

/// A private CA and a server certificate it signed for 127.0.0.1 and localhost (the
/// `openssl` tool, as the TLS interop tests use it): `(ca.pem, cert.pem, key.pem)`.
fn pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let p = |n: &str| dir.join(n);
    let ossl = |args: &[&str]| {
        let o = run(Command::new("openssl").args(args).current_dir(dir));
        assert!(o.ok, "openssl {args:?}: {}", o.stderr);
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut a = vec!["req", "-x509"];
    a.extend(ec);
    a.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=ebof test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    ossl(&a);
    let mut a = vec!["req"];
    a.extend(ec);
    a.extend(["-keyout", "key.pem", "-out", "req.csr", "-subj", "/CN=ebof"]);
    ossl(&a);
    std::fs::write(p("ext.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    ossl(&[
        "x509",
        "-req",
        "-in",
        "req.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "cert.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    std::fs::set_permissions(p("key.pem"), std::fs::Permissions::from_mode(0o600)).unwrap();
    (p("ca.pem"), p("cert.pem"), p("key.pem"))
}

/// A box serving a 16 MiB RAM namespace, its API on the Unix socket and on TCP (HTTPS when
/// `tls`), metrics on TCP, `data/` its data directory, `extra` appended to its configuration.
struct Box {
    _t: Target,
    dir: tempfile::TempDir,
    sock: PathBuf,
    api: SocketAddr,
    metrics: SocketAddr,
}

fn serve(tls: bool, extra: &str) -> Box {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("data")).unwrap();
    std::fs::write(d.join("token"), format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(d.join("token"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let tls_keys = if tls {
        let (_, cert, key) = pki(d);
        format!(
            "tls_cert = {:?}\ntls_key = {:?}\n",
            cert.display().to_string(),
            key.display().to_string()
        )
    } else {
        String::new()
    };
    let cfg = d.join("ebof.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = {}\n\n\
             [management]\nlisten = \"{api}\"\ntoken_file = {:?}\ndata_dirs = [{:?}]\n{tls_keys}\n\
             [metrics]\nlisten = \"{metrics}\"\n{extra}\n\
             [[subsystems]]\nnqn = \"{NQN}\"\n[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"16M\"\n",
            addr.port(),
            d.join("token").display().to_string(),
            d.join("data").display().to_string(),
        ),
    )
    .unwrap();
    let (t, sock) = serve_file(&cfg, d, addr);
    Box {
        _t: t,
        dir,
        sock,
        api,
        metrics,
    }
}

#[test]
fn ctl_speaks_https_with_a_private_ca_and_never_sends_the_token_in_clear() {
    let b = serve(true, "");
    let d = b.dir.path();
    let ca = d.join("ca.pem");
    let tf = d.join("token");
    let url = format!("https://{}", b.api);
    let o = ctl(&[
        "--api",
        &url,
        "--ca-file",
        ca.to_str().unwrap(),
        "--token-file",
        tf.to_str().unwrap(),
        "show",
    ]);
    assert!(o.ok && o.stdout.contains(NQN), "{}", o.stderr);
    let url_name = format!("https://localhost:{}", b.api.port());
    let o = ctl(&[
        "--api",
        &url_name,
        "--ca-file",
        ca.to_str().unwrap(),
        "--token-file",
        tf.to_str().unwrap(),
        "show",
    ]);
    assert!(o.ok, "{}", o.stderr);
    // Without the CA: the system's CAs do not know it.
    let o = ctl(&["--api", &url, "--token-file", tf.to_str().unwrap(), "show"]);
    assert!(
        !o.ok && o.stderr.contains("not trusted") && o.stderr.contains("--ca-file"),
        "{}",
        o.stderr
    );
    // A CA file for plain HTTP is a mistake, said so.
    let o = ctl(&[
        "--api",
        &b.api.to_string(),
        "--ca-file",
        ca.to_str().unwrap(),
        "show",
    ]);
    assert!(!o.ok && o.stderr.contains("https://"), "{}", o.stderr);

    // Plain HTTP beyond loopback: refused before anything is sent (TEST-NET-1 is not
    // reachable; the refusal comes first and at once).
    let started = Instant::now();
    let o = ctl(&[
        "--api",
        "192.0.2.1:9651",
        "--token-file",
        tf.to_str().unwrap(),
        "show",
    ]);
    assert!(
        !o.ok
            && o.stderr
                .contains("refusing to send the management token over plain HTTP"),
        "{}",
        o.stderr
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let o = run(Command::new(EBOF)
        .args(["ctl", "--api", "192.0.2.1:9651", "show"])
        .env("EBOF_TOKEN", TOKEN)
        .env_remove("EBOF_ALLOW_PLAIN_HTTP"));
    assert!(
        !o.ok && o.stderr.contains("--insecure-http"),
        "{}",
        o.stderr
    );
}

/// Review M1's test: a `block` namespace on /etc/hostname, a `file` namespace outside the
/// data directories and a save elsewhere are refused with their codes; inside, they work.
#[test]
fn the_api_opens_and_saves_only_where_the_configuration_allows() {
    // SAFETY: umask has no preconditions; serve inherits the usual 022 explicitly.
    unsafe { libc::umask(0o022) };
    let b = serve(false, "");
    let d = b.dir.path();
    let c = |args: &[&str]| ctl_at(&b.sock, args);
    for (args, code) in [
        (
            vec!["ns", "add", NQN, "--block", "/etc/hostname"],
            "device-not-allowed",
        ),
        (
            vec!["ns", "add", NQN, "--block", "/dev/null"],
            "device-not-allowed",
        ),
        (
            vec![
                "ns",
                "add",
                NQN,
                "--file",
                "/root/.ssh/authorized_keys",
                "--size",
                "1M",
            ],
            "path-not-allowed",
        ),
        (
            vec!["save", "/etc/ebof-test-saved.toml"],
            "save-path-not-allowed",
        ),
    ] {
        let o = c(&args);
        assert!(
            !o.ok && o.stderr.contains(&format!("({code})")),
            "{args:?}: {}",
            o.stderr
        );
    }
    let outside = d.join("outside.img");
    let o = c(&[
        "ns",
        "add",
        NQN,
        "--file",
        outside.to_str().unwrap(),
        "--size",
        "1M",
    ]);
    assert!(
        !o.ok && o.stderr.contains("(path-not-allowed)"),
        "{}",
        o.stderr
    );
    assert!(!outside.exists());
    assert!(!Path::new("/etc/ebof-test-saved.toml").exists());
    // The same over HTTPS-less TCP on loopback with the token: the same refusal.
    let o = run(Command::new(EBOF)
        .args([
            "ctl",
            "--api",
            &b.api.to_string(),
            "ns",
            "add",
            NQN,
            "--block",
            "/etc/hostname",
        ])
        .env("EBOF_TOKEN", TOKEN));
    assert!(
        !o.ok && o.stderr.contains("(device-not-allowed)"),
        "{}",
        o.stderr
    );

    // Inside data/: made owner-only although serve's umask is 022.
    let inside = d.join("data/ns.img");
    let o = c(&[
        "ns",
        "add",
        NQN,
        "--file",
        inside.to_str().unwrap(),
        "--size",
        "1M",
    ]);
    assert!(o.ok, "{}", o.stderr);
    let o = c(&["save", d.join("data/copy.toml").to_str().unwrap()]);
    assert!(o.ok, "{}", o.stderr);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&inside), 0o600);
    assert_eq!(mode(&d.join("data/copy.toml")), 0o600);
}

fn scrape(addr: SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    r
}

/// Review M4: `/metrics` (no token) shows no host NQN unless `[metrics] host_labels = true`.
#[test]
fn metrics_name_hosts_only_when_asked() {
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";
    for (labels, extra) in [(false, ""), (true, "host_labels = true\n")] {
        let b = serve(false, extra);
        let port = b._t.port();
        // A controller connected while we scrape: perf for a while, in the background.
        let mut perf = Command::new(EBOF)
            .args([
                "perf",
                "-a",
                "127.0.0.1",
                "-s",
                &port,
                "-n",
                NQN,
                "--hostnqn",
                HOST,
            ])
            .args(["--runtime", "20s", "--qd", "1", "--json"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        let text = loop {
            let t = scrape(b.metrics);
            if t.contains("ebof_controller_io_queues{") || Instant::now() > deadline {
                break t;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        // SAFETY: kill of the child we spawned, by its PID.
        unsafe { libc::kill(perf.id() as libc::pid_t, libc::SIGKILL) };
        let _ = perf.wait();
        assert!(
            text.contains("ebof_controller_io_queues{"),
            "no controller seen:\n{text}"
        );
        assert_eq!(
            text.contains(HOST),
            labels,
            "host_labels = {labels}:\n{text}"
        );
        assert_eq!(text.contains("hostnqn="), labels, "{text}");
    }
}
