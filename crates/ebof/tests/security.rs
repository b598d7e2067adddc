//! DH-HMAC-CHAP and NVMe/TCP TLS end to end over loopback: `ebof serve` with `[[hosts]]`
//! secrets and a TLS-required listener, and `ebof perf --verify` / `ebof identify` with
//! nvme-cli's flags. Right keys work (one-way, bidirectional, TLS, both together); a wrong host
//! secret, a wrong controller secret, a missing secret, a wrong PSK, an unknown host and a
//! plaintext connection to the TLS port are refused with a clear error; the target's log says
//! why without printing a secret.
//!
//! The keys are published test vectors (the DHHC-1 key of nvme-auth's vectors, the TLS key of
//! libnvme's `test/psk.c`); interoperability with the Linux host is the guest scenario's job
//! (`tests/interop/linux-security.sh`).

mod common;

use std::net::SocketAddr;
use std::process::Stdio;

use common::{Output, Target, ebof, free_port};

const NQN: &str = "nqn.2026-11.io.ebof:sec";
/// A second subsystem, for which HOST has a key of its own.
const NQN2: &str = "nqn.2026-11.io.ebof:sec2";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0000000a-0000-0000-0000-00000000000a";
const OTHER: &str = "nqn.2014-08.org.nvmexpress:uuid:0000000b-0000-0000-0000-00000000000b";
/// A host whose PSK derivation is RFC 8446's (as SPDK's initiator does it).
const RFC_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0000000c-0000-0000-0000-00000000000c";
const HOST_KEY: &str = "DHHC-1:01:VZi5tbir3nYufwfgCrjX0O2mmPHFkObvzamIRZnYUahWiFGg:";
const CTRL_KEY: &str =
    "DHHC-1:02:elMhBLOsS9lwM3coDHJdWd13OK+KUnC7FcTJuoLCxjK/HGD9d7D/WpmmINI3kXxbIeTtsA==:";
/// The same key bytes as HOST_KEY, another transformation: a wrong secret.
const WRONG_KEY: &str = "DHHC-1:00:VZi5tbir3nYufwfgCrjX0O2mmPHFkObvzamIRZnYUahWiFGg:";
const TLS_KEY: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
const WRONG_TLS_KEY: &str =
    "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:";

struct Served {
    _t: Target,
    plain: String,
    tls: String,
    dir: tempfile::TempDir,
}

impl Served {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }
}

/// Plain listener and a TLS-required one; HOST must authenticate (and has a TLS key), OTHER
/// may connect without either.
fn serve() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let (p1, p2) = (free_port(), free_port());
    let cfg = format!(
        r#"
[[listeners]]
address = "127.0.0.1"
port = {p1}

[[listeners]]
address = "127.0.0.1"
port = {p2}
tls = "required"

[[hosts]]
nqn = "{HOST}"
dhchap_key = "{HOST_KEY}"
dhchap_ctrl_key = "{CTRL_KEY}"
tls_key = "{TLS_KEY}"

[[hosts]]
nqn = "{RFC_HOST}"
tls_key = "{TLS_KEY}"
tls_psk_derivation = "rfc8446"

[[hosts]]
nqn = "{HOST}"
subsystem = "{NQN2}"
dhchap_key = "{WRONG_KEY}"

[[subsystems]]
nqn = "{NQN2}"
hosts = ["{HOST}"]

[[subsystems.namespaces]]
nsid = 1
backend = "ram"
size = "4M"

[[subsystems]]
nqn = "{NQN}"
hosts = ["{HOST}", "{OTHER}", "{RFC_HOST}"]

[[subsystems.namespaces]]
nsid = 1
backend = "ram"
size = "16M"

[management]
enabled = false
"#
    );
    let path = dir.path().join("ebof.toml");
    std::fs::write(&path, cfg).unwrap();
    let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{p1}").parse().unwrap();
    let t = Target::spawn(
        &["serve", "--config", path.to_str().unwrap()],
        addr,
        Stdio::from(log),
    );
    // The TLS listener is bound in the same step as the plain one.
    Served {
        _t: t,
        plain: p1.to_string(),
        tls: p2.to_string(),
        dir,
    }
}

fn perf(port: &str, host: &str, extra: &[&str]) -> Output {
    let mut a = vec![
        "perf",
        "-a",
        "127.0.0.1",
        "-s",
        port,
        "-n",
        NQN,
        "--hostnqn",
        host,
        "--rw",
        "randrw",
        "--qd",
        "8",
        "--runtime",
        "1s",
        "--verify",
        "--range",
        "0-4M",
    ];
    if !extra.contains(&"--bs") {
        a.extend(["--bs", "4k"]);
    }
    a.extend_from_slice(extra);
    ebof(&a)
}

fn ok(o: &Output, what: &str) {
    assert!(o.ok, "{what}: {}\n{}", o.stderr, o.stdout);
    assert!(
        o.stdout.contains("IOPS") || o.stdout.contains("iops"),
        "{what}: {}",
        o.stdout
    );
}

fn refused(o: &Output, what: &str, want: &str) {
    assert!(!o.ok, "{what} succeeded: {}", o.stdout);
    assert!(
        o.stderr.contains(want),
        "{what}: expected {want:?} in\n{}",
        o.stderr
    );
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
}

#[test]
fn dhchap_one_way_bidirectional_and_refusals() {
    let s = serve();
    ok(
        &perf(&s.plain, HOST, &["--dhchap-secret", HOST_KEY]),
        "one-way",
    );
    ok(
        &perf(
            &s.plain,
            HOST,
            &[
                "--dhchap-secret",
                HOST_KEY,
                "--dhchap-ctrl-secret",
                CTRL_KEY,
            ],
        ),
        "bidirectional",
    );
    // A host without a key is not asked.
    ok(&perf(&s.plain, OTHER, &[]), "host without a key");
    refused(
        &perf(&s.plain, HOST, &[]),
        "no secret",
        "requires DH-HMAC-CHAP",
    );
    refused(
        &perf(&s.plain, HOST, &["--dhchap-secret", WRONG_KEY]),
        "wrong host secret",
        "wrong --dhchap-secret",
    );
    refused(
        &perf(
            &s.plain,
            HOST,
            &[
                "--dhchap-secret",
                HOST_KEY,
                "--dhchap-ctrl-secret",
                HOST_KEY,
            ],
        ),
        "wrong controller secret",
        "wrong --dhchap-ctrl-secret",
    );
    let log = s.log();
    assert!(log.contains("DH-HMAC-CHAP authentication failed"), "{log}");
    for secret in ["VZi5tbir3nYufwfg", "elMhBLOsS9lwM3co", "VRLbtnN9AQb2WXW3"] {
        assert!(
            !log.contains(secret),
            "a secret in the target's log:\n{log}"
        );
    }
}

#[test]
fn tls_with_and_without_dhchap_and_refusals() {
    let s = serve();
    ok(
        &perf(
            &s.tls,
            HOST,
            &["--tls", "--tls-key", TLS_KEY, "--dhchap-secret", HOST_KEY],
        ),
        "TLS + DH-HMAC-CHAP",
    );
    ok(
        &perf(
            &s.tls,
            HOST,
            &[
                "--tls",
                "--tls-key",
                TLS_KEY,
                "--dhchap-secret",
                HOST_KEY,
                "--dhchap-ctrl-secret",
                CTRL_KEY,
                "--bs",
                "128k",
            ],
        ),
        "TLS + bidirectional, 128K",
    );
    let id = ebof(&[
        "identify",
        "-a",
        "127.0.0.1",
        "-s",
        &s.tls,
        "-n",
        NQN,
        "--hostnqn",
        HOST,
        "--tls",
        "--tls-key",
        TLS_KEY,
        "--dhchap-secret",
        HOST_KEY,
    ]);
    assert!(id.ok, "{}", id.stderr);
    refused(
        &perf(&s.tls, HOST, &["--dhchap-secret", HOST_KEY]),
        "plaintext to the TLS port",
        "requires TLS",
    );
    refused(
        &perf(
            &s.tls,
            HOST,
            &[
                "--tls",
                "--tls-key",
                WRONG_TLS_KEY,
                "--dhchap-secret",
                HOST_KEY,
            ],
        ),
        "wrong PSK",
        "TLS",
    );
    // OTHER has no TLS key on the target: its identity is unknown.
    refused(
        &perf(&s.tls, OTHER, &["--tls", "--tls-key", TLS_KEY]),
        "host without a TLS key",
        "TLS",
    );
    let o = ebof(&["perf", "-a", "127.0.0.1", "-s", &s.tls, "-n", NQN, "--tls"]);
    refused(&o, "--tls without a key", "--tls-key");
    let log = s.log();
    assert!(log.contains("TLS"), "{log}");
    for secret in ["VZi5tbir3nYufwfg", "elMhBLOsS9lwM3co", "VRLbtnN9AQb2WXW3"] {
        assert!(
            !log.contains(secret),
            "a secret in the target's log:\n{log}"
        );
    }
}

#[test]
fn malformed_secrets_are_clear_errors_that_do_not_echo_them() {
    let o = perf(
        "4420",
        HOST,
        &["--dhchap-secret", "DHHC-1:01:notbase64!!secretpart:"],
    );
    refused(&o, "malformed DHHC-1", "--dhchap-secret");
    assert!(!o.stderr.contains("secretpart"), "{}", o.stderr);
    let o = perf(
        "4420",
        HOST,
        &["--tls", "--tls-key", "NVMeTLSkey-1:01:c2VjcmV0c2VjcmV0:"],
    );
    refused(&o, "malformed TLS key", "--tls-key");
    assert!(!o.stderr.contains("c2VjcmV0c2VjcmV0"), "{}", o.stderr);
    // ebof serve refuses a configuration with a bad key, naming where it is.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = {}\n[[hosts]]\nnqn = \"{HOST}\"\n\
             dhchap_key = \"DHHC-1:01:QUJDREVGR0g=:\"\n[[subsystems]]\nnqn = \"{NQN}\"\n\
             [[subsystems.namespaces]]\nnsid = 1\nbackend = \"ram\"\nsize = \"1M\"\n\
             [management]\nenabled = false\n",
            free_port()
        ),
    )
    .unwrap();
    let o = ebof(&["serve", "--config", path.to_str().unwrap()]);
    assert!(!o.ok);
    assert!(o.stderr.contains("hosts[0].dhchap_key"), "{}", o.stderr);
    assert!(!o.stderr.contains("QUJDREVGR0g"), "{}", o.stderr);
}

/// Garbage before and inside TLS handshakes, and a plaintext ICReq, on the TLS port while a
/// TLS + DH-HMAC-CHAP run goes on: each bad connection is closed, the run is unaffected and
/// the target keeps serving.
#[test]
fn hostile_tls_input_leaves_other_connections_alone() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;
    let s = serve();
    let port = s.tls.clone();
    let run = std::thread::spawn(move || {
        let mut a = vec![
            "perf",
            "-a",
            "127.0.0.1",
            "-s",
            &port,
            "-n",
            NQN,
            "--hostnqn",
            HOST,
            "--rw",
            "randrw",
            "--bs",
            "4k",
            "--qd",
            "8",
            "--runtime",
            "3s",
            "--verify",
            "--range",
            "0-4M",
        ];
        a.extend(["--tls", "--tls-key", TLS_KEY, "--dhchap-secret", HOST_KEY]);
        ebof(&a)
    });
    let addr = format!("127.0.0.1:{}", s.tls);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut random = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    };
    let mut cases: Vec<Vec<u8>> = vec![
        random(4096),
        // A handshake record header promising more than it sends, then EOF.
        vec![0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00],
        // A handshake record whose body is garbage.
        [&[0x16, 0x03, 0x01, 0x01, 0x00][..], &random(256)].concat(),
        // A plaintext ICReq.
        {
            let mut b = vec![0u8; 128];
            b[2] = 128;
            b[4] = 128;
            b
        },
    ];
    for _ in 0..20 {
        let mut c = vec![0x16, 0x03, 0x03];
        c.extend(random(300));
        cases.push(c);
    }
    for bytes in &cases {
        let mut c = TcpStream::connect(&addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = c.write_all(bytes);
        let _ = c.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        // The target answers with at most an alert and closes; a read error (reset) is a close.
        let _ = c.read_to_end(&mut sink);
        assert!(sink.len() < 64, "{} bytes back for garbage", sink.len());
    }
    let o = run.join().unwrap();
    ok(&o, "the run beside the garbage");
    let id = ebof(&[
        "identify",
        "-a",
        "127.0.0.1",
        "-s",
        &s.plain,
        "-n",
        NQN,
        "--hostnqn",
        OTHER,
    ]);
    assert!(id.ok, "target still serving: {}", id.stderr);
    assert!(!s.log().contains("panicked"), "{}", s.log());
}

/// A version-0 identity does not say how its PSK was derived: the host entry does
/// (`tls_psk_derivation`), and `--tls-psk-derivation` on our side.
#[test]
fn the_psk_derivation_of_version_0_identities_is_per_host() {
    let s = serve();
    ok(
        &perf(
            &s.tls,
            RFC_HOST,
            &[
                "--tls",
                "--tls-key",
                TLS_KEY,
                "--tls-psk-derivation",
                "rfc8446",
            ],
        ),
        "RFC 8446 derivation",
    );
    refused(
        &perf(&s.tls, RFC_HOST, &["--tls", "--tls-key", TLS_KEY]),
        "compat derivation for an rfc8446 host",
        "TLS",
    );
    refused(
        &perf(
            &s.tls,
            HOST,
            &[
                "--tls",
                "--tls-key",
                TLS_KEY,
                "--tls-psk-derivation",
                "rfc8446",
                "--dhchap-secret",
                HOST_KEY,
            ],
        ),
        "rfc8446 derivation for a compat host",
        "TLS",
    );
}

/// A `[[hosts]]` entry with `subsystem` holds that subsystem's keys; the host-wide entry the
/// others'.
#[test]
fn keys_per_host_and_subsystem() {
    let s = serve();
    let identify = |nqn: &str, key: &str| {
        ebof(&[
            "identify",
            "-a",
            "127.0.0.1",
            "-s",
            &s.plain,
            "-n",
            nqn,
            "--hostnqn",
            HOST,
            "--dhchap-secret",
            key,
        ])
    };
    assert!(identify(NQN2, WRONG_KEY).ok, "sec2's own key");
    refused(
        &identify(NQN2, HOST_KEY),
        "the host-wide key on sec2",
        "authentication",
    );
    assert!(identify(NQN, HOST_KEY).ok, "the host-wide key on sec");
    refused(
        &identify(NQN, WRONG_KEY),
        "sec2's key on sec",
        "authentication",
    );
}
