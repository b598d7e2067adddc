//! Interop with independent peers over loopback TCP: the `openssl` command line tool
//! (`s_client` / `s_server` with `-psk`) and GnuTLS's `gnutls-cli` / `gnutls-serv` (GnuTLS is
//! what the Linux host's `tlshd` runs; Debian package `gnutls-bin`). Each test is skipped, with
//! a message, when its tool is not installed.
//!
//! `s_client` is configured like the Linux host: TLS_AES_128_CCM_SHA256 only and a secp384r1
//! key share, so this also covers the CCM suite and the P-384 group. `gnutls-cli` offers what
//! KERNEL-INTEROP.md says the Linux host offers (TLS 1.3, AES-128-GCM and -CCM, (EC)DHE-PSK,
//! secp384r1 and x25519), and GnuTLS sends `record_size_limit`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nvmf_tls::psk::{PskHash, TlsPsk};
use nvmf_tls::{TlsClient, TlsClientConfig, TlsConn, TlsServer, TlsServerConfig};

const IDENTITY: &str = "NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:cli-host nqn.2024-01.io.ebof:cli";

fn tool_available(tool: &str, version_arg: &str) -> bool {
    let ok = Command::new(tool)
        .arg(version_arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIP: the {tool} command line tool is not installed");
    }
    ok
}

fn openssl_available() -> bool {
    tool_available("openssl", "version")
}

/// The GnuTLS priority string of a Linux-host-like client.
const GNUTLS_PRIORITY: &str = "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-PSK:+DHE-PSK:\
     -CIPHER-ALL:+AES-128-GCM:+AES-128-CCM:-GROUP-ALL:+GROUP-SECP384R1:+GROUP-X25519";

/// Waits until something listens on `port` (10 s at most).
fn connect_when_up(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("the peer did not start listening: {e}"),
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port()
}

fn key_hex() -> String {
    "11".repeat(32)
}

fn psk() -> TlsPsk {
    TlsPsk::new(PskHash::Sha256, &[0x11; 32]).expect("key")
}

/// Kills the child process on drop so a failing test leaves nothing behind.
struct Reap(Child);
impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Shuttles bytes between `sock` and `conn` until `done` says so (10 s at most).
fn run(sock: &mut TcpStream, conn: &mut TlsConn, mut done: impl FnMut(&mut TlsConn) -> bool) {
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let out = conn.take_cipher();
        sock.write_all(&out).expect("send");
        if done(conn) {
            let out = conn.take_cipher();
            let _ = sock.write_all(&out);
            return;
        }
        assert!(Instant::now() < deadline, "peer did not answer in time");
        match sock.read(&mut buf) {
            Ok(0) => panic!("peer closed early"),
            Ok(n) => {
                conn.feed(&buf[..n]).expect("feed");
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("recv: {e}"),
        }
    }
}

/// Runs a client tool (its stdin and stdout piped) against our server on a fresh listener:
/// the tool sends `ping` from stdin, we check the suite and identity and answer `pong`, then
/// close_notify; the tool must print `pong`.
fn client_tool_to_our_server(mut cmd: Command, port: u16, listener: TcpListener, suite: &str) {
    let child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the client tool");
    let mut child = Reap(child);
    let (mut sock, _) = listener.accept().expect("accept");
    assert_eq!(sock.local_addr().expect("addr").port(), port);
    let config =
        TlsServerConfig::new(|id: &[u8]| (id == IDENTITY.as_bytes()).then(psk)).expect("config");
    let mut server = TlsServer::new(&config).expect("server");
    let mut stdin = child.0.stdin.take().expect("stdin");
    stdin.write_all(b"ping from the tool\n").expect("stdin");
    let mut plain = Vec::new();
    run(&mut sock, &mut server, |c| {
        c.read_plain_into(&mut plain).expect("read");
        plain.ends_with(b"\n")
    });
    assert_eq!(plain, b"ping from the tool\n");
    assert_eq!(server.cipher_suite(), Some(suite));
    assert_eq!(server.psk_identity(), Some(IDENTITY.as_bytes()));

    server
        .write_plain(&[b"pong ", b"from ebof\n"])
        .expect("write");
    server.close_notify().expect("close");
    let out = server.take_cipher();
    sock.write_all(&out).expect("send");
    drop(stdin);
    let mut stdout = String::new();
    child
        .0
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    assert!(
        stdout.contains("pong from ebof"),
        "the tool printed {stdout:?}"
    );
}

fn listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    (listener, port)
}

#[test]
fn openssl_s_client_to_our_server() {
    if !openssl_available() {
        return;
    }
    let (listener, port) = listener();
    let mut cmd = Command::new("openssl");
    cmd.args([
        "s_client",
        "-connect",
        &format!("127.0.0.1:{port}"),
        "-tls1_3",
    ])
    .args(["-psk", &key_hex(), "-psk_identity", IDENTITY])
    .args([
        "-ciphersuites",
        "TLS_AES_128_CCM_SHA256",
        "-groups",
        "secp384r1",
    ])
    .arg("-quiet");
    client_tool_to_our_server(cmd, port, listener, "TLS_AES_128_CCM_SHA256");
}

#[test]
fn gnutls_cli_to_our_server() {
    if !tool_available("gnutls-cli", "--version") {
        return;
    }
    let (listener, port) = listener();
    let mut cmd = Command::new("gnutls-cli");
    cmd.args(["-p", &port.to_string(), "127.0.0.1"])
        .args(["--pskusername", IDENTITY, "--pskkey", &key_hex()])
        .args(["--priority", GNUTLS_PRIORITY]);
    client_tool_to_our_server(cmd, port, listener, "TLS_AES_128_GCM_SHA256");
}

/// `openssl s_server` on 127.0.0.1:`port`, TLS 1.3 only, no certificate, our PSK and identity.
fn openssl_s_server(port: u16) -> Command {
    let mut cmd = Command::new("openssl");
    cmd.args([
        "s_server",
        "-accept",
        &format!("127.0.0.1:{port}"),
        "-tls1_3",
        "-nocert",
    ])
    .args(["-psk", &key_hex(), "-psk_identity", IDENTITY]);
    cmd
}

#[test]
fn our_client_to_openssl_s_server() {
    if !openssl_available() {
        return;
    }
    // A free port (s_server cannot take an already-bound socket).
    let port = free_port();
    let child = openssl_s_server(port)
        .args(["-rev", "-naccept", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn s_server");
    let _child = Reap(child);
    let mut sock = connect_when_up(port);
    let config = TlsClientConfig::new().expect("config");
    let mut client = TlsClient::new(&config, IDENTITY.as_bytes(), psk()).expect("client");
    run(&mut sock, &mut client, |c| c.handshake_done());
    assert_eq!(client.cipher_suite(), Some("TLS_AES_128_GCM_SHA256"));

    // `-rev` answers every line reversed.
    client.write_plain(&[b"ping\n"]).expect("write");
    let mut plain = Vec::new();
    run(&mut sock, &mut client, |c| {
        c.read_plain_into(&mut plain).expect("read");
        plain.ends_with(b"gnip\n")
    });
    assert!(plain.ends_with(b"gnip\n"), "{plain:?}");
}

#[test]
fn our_client_to_gnutls_serv() {
    if !tool_available("gnutls-serv", "--version") {
        return;
    }
    // gnutls-serv's password file is `identity:hexkey`, so this identity has no colon.
    let identity = "NVMe0R01 nqn.2014-08.org.nvmexpress.host1 nqn.2024-01.io.ebof.gnutls";
    let dir = std::env::temp_dir().join(format!("nvmf-tls-gnutls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let passwd = dir.join("psk.passwd");
    std::fs::write(&passwd, format!("{identity}:{}\n", key_hex())).expect("passwd");
    let port = free_port();
    let child = Command::new("gnutls-serv")
        .args(["-p", &port.to_string(), "--echo"])
        .arg(format!("--pskpasswd={}", passwd.display()))
        .args(["--priority", GNUTLS_PRIORITY])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn gnutls-serv");
    let _child = Reap(child);
    let mut sock = connect_when_up(port);
    let config = TlsClientConfig::new().expect("config");
    let mut client = TlsClient::new(&config, identity.as_bytes(), psk()).expect("client");
    run(&mut sock, &mut client, |c| c.handshake_done());
    assert!(
        client
            .cipher_suite()
            .is_some_and(|s| s.starts_with("TLS_AES_128_"))
    );
    // A batch larger than one record, echoed back.
    let line: Vec<u8> = (0..40_000u32)
        .map(|i| b'a' + (i % 26) as u8)
        .chain([b'\n'])
        .collect();
    client.write_plain(&[&line]).expect("write");
    let mut plain = Vec::new();
    run(&mut sock, &mut client, |c| {
        c.read_plain_into(&mut plain).expect("read");
        plain.len() >= line.len()
    });
    assert!(plain == line, "echo differs ({} bytes back)", plain.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `len` bytes of digit lines: safe to push through `s_client`/`s_server` stdin, whose command
/// letters (Q, R, K, k, ...) are only recognised at the start of a read.
fn digit_lines(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            if i % 64 == 63 {
                b'\n'
            } else {
                b'0' + (i % 10) as u8
            }
        })
        .collect()
}

/// A child's stdout, read on a thread and handed over in chunks.
struct Stdout {
    chunks: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: Vec<u8>,
}

fn collect_stdout(child: &mut Child) -> Stdout {
    let mut out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    Stdout {
        chunks: rx,
        seen: Vec::new(),
    }
}

impl Stdout {
    /// Waits (bounded) until the output contains `needle`, or until EOF when `needle` is
    /// `None`; returns everything seen so far.
    fn wait_for(&mut self, needle: Option<&[u8]>) -> &[u8] {
        let deadline = Instant::now() + TOOL_EXIT;
        loop {
            if needle.is_some_and(|n| contains(&self.seen, n)) {
                return &self.seen;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(c) => self.seen.extend_from_slice(&c),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) if needle.is_none() => {
                    return &self.seen;
                }
                Err(e) => panic!(
                    "the tool's output did not show what we wait for ({e:?}, {} bytes seen)",
                    self.seen.len()
                ),
            }
        }
    }
}

const TOOL_EXIT: Duration = Duration::from_secs(20);

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

const BULK: usize = 3 << 20;

/// An OpenSSL tool (`s_client`/`s_server`) is told through its stdin to send a KeyUpdate with
/// update_requested (`K`): we must take it and answer with ours. Then BULK bytes go from the
/// tool to us (through its stdin, on a thread: the pipe is small) and must arrive intact.
/// Returns the thread, which gives the tool's stdin back (closing it would end the tool).
fn tool_key_update_then_bulk(
    sock: &mut TcpStream,
    conn: &mut TlsConn,
    tool: &mut Child,
) -> std::thread::JoinHandle<std::process::ChildStdin> {
    let mut stdin = tool.stdin.take().expect("stdin");
    stdin.write_all(b"K\n").expect("stdin");
    stdin.flush().expect("flush");
    let mut plain = Vec::new();
    run(sock, conn, |c| {
        c.read_plain_into(&mut plain).expect("read");
        c.record_stats().expect("stats").key_updates_received >= 1
    });
    assert_eq!(conn.record_stats().expect("stats").key_updates_sent, 1);
    let data = digit_lines(BULK);
    let sent = data.clone();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&sent);
        stdin
    });
    run(sock, conn, |c| {
        c.read_plain_into(&mut plain).expect("read");
        plain.len() >= BULK
    });
    assert!(plain == data, "{} bytes differ", plain.len());
    writer
}

/// `openssl s_client` on TLS_AES_128_GCM_SHA256 against our record layer: the tool sends a
/// KeyUpdate asking for ours (its `K` command), then megabytes go each way.
#[test]
fn openssl_s_client_key_update_and_bulk_to_our_server() {
    if !openssl_available() {
        return;
    }
    let (listener, port) = listener();
    let child = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-tls1_3",
        ])
        .args(["-psk", &key_hex(), "-psk_identity", IDENTITY])
        .args(["-ciphersuites", "TLS_AES_128_GCM_SHA256"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn s_client");
    let mut child = Reap(child);
    let mut stdout = collect_stdout(&mut child.0);
    let (mut sock, _) = listener.accept().expect("accept");
    let config =
        TlsServerConfig::new(|id: &[u8]| (id == IDENTITY.as_bytes()).then(psk)).expect("config");
    let mut server = TlsServer::new(&config).expect("server");
    run(&mut sock, &mut server, |c| c.handshake_done());
    assert!(server.own_record_layer());
    let writer = tool_key_update_then_bulk(&mut sock, &mut server, &mut child.0);
    // Our KeyUpdate too, then bulk back under the new key, then close.
    server.key_update(false).expect("key update");
    let back = digit_lines(BULK / 2);
    server.write_plain(&[&back]).expect("write");
    server.close_notify().expect("close");
    let out = server.take_cipher();
    sock.write_all(&out).expect("send");
    // Keep its stdin open: s_client quits at EOF on stdin, even with data still to print.
    let stdin = writer.join().expect("writer");
    let printed = stdout.wait_for(None).to_vec();
    drop(stdin);
    assert!(
        contains(&printed, &back[back.len() - 4096..]) && printed.len() >= back.len(),
        "s_client printed {} bytes",
        printed.len()
    );
}

/// Our client against `openssl s_server` (which sends NewSessionTickets after the handshake):
/// the server's KeyUpdate (its `K` command), ours, and megabytes each way.
#[test]
fn our_client_key_update_and_bulk_to_openssl_s_server() {
    if !openssl_available() {
        return;
    }
    let port = free_port();
    let child = openssl_s_server(port)
        .args(["-naccept", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn s_server");
    let mut child = Reap(child);
    let mut stdout = collect_stdout(&mut child.0);
    let mut sock = connect_when_up(port);
    let config = TlsClientConfig::new().expect("config");
    let mut client = TlsClient::new(&config, IDENTITY.as_bytes(), psk()).expect("client");
    run(&mut sock, &mut client, |c| c.handshake_done());
    assert!(client.own_record_layer());
    let writer = tool_key_update_then_bulk(&mut sock, &mut client, &mut child.0);
    // Our KeyUpdate asking for the server's, then bulk to the server (it prints it).
    client.key_update(true).expect("key update");
    let up = digit_lines(BULK / 2);
    client.write_plain(&[&up]).expect("write");
    // OpenSSL sends the KeyUpdate it owes before its next data: once it has read (and
    // printed) everything, make it write.
    run(&mut sock, &mut client, |c| c.pending_cipher().is_empty());
    stdout.wait_for(Some(&up[up.len() - 4096..]));
    let mut stdin = writer.join().expect("writer");
    stdin.write_all(b"0123\n").expect("stdin");
    stdin.flush().expect("flush");
    let mut plain = Vec::new();
    run(&mut sock, &mut client, |c| {
        c.read_plain_into(&mut plain).expect("read");
        plain.ends_with(b"0123\n")
    });
    assert_eq!(
        client.record_stats().expect("stats").key_updates_received,
        2
    );
    client.close_notify().expect("close");
    let out = client.take_cipher();
    sock.write_all(&out).expect("send");
    drop(sock);
    let printed = stdout.wait_for(None).to_vec();
    drop(stdin);
    assert!(
        contains(&printed, &up[up.len() - 4096..]),
        "s_server printed {} bytes",
        printed.len()
    );
}

/// Our client against `gnutls-serv --echo` on AES-128-GCM: our KeyUpdate asking for GnuTLS's,
/// and megabytes echoed back.
#[test]
fn our_client_key_update_and_bulk_to_gnutls_serv() {
    if !tool_available("gnutls-serv", "--version") {
        return;
    }
    let identity = "NVMe0R01 nqn.2014-08.org.nvmexpress.host2 nqn.2024-01.io.ebof.gnutls";
    let dir = std::env::temp_dir().join(format!("nvmf-tls-gnutls-ku-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let passwd = dir.join("psk.passwd");
    std::fs::write(&passwd, format!("{identity}:{}\n", key_hex())).expect("passwd");
    let port = free_port();
    let child = Command::new("gnutls-serv")
        .args(["-p", &port.to_string(), "--echo"])
        .arg(format!("--pskpasswd={}", passwd.display()))
        .args([
            "--priority",
            "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-PSK:-CIPHER-ALL:+AES-128-GCM",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn gnutls-serv");
    let _child = Reap(child);
    let mut sock = connect_when_up(port);
    let config = TlsClientConfig::new().expect("config");
    let mut client = TlsClient::new(&config, identity.as_bytes(), psk()).expect("client");
    run(&mut sock, &mut client, |c| c.handshake_done());
    assert_eq!(client.cipher_suite(), Some("TLS_AES_128_GCM_SHA256"));
    assert!(client.own_record_layer());
    client.key_update(true).expect("key update");
    // gnutls-serv --echo answers per line; lines of 64 bytes, a few MB in all.
    let data = digit_lines(BULK);
    let mut plain = Vec::new();
    for chunk in data.chunks(256 * 1024) {
        client.write_plain(&[chunk]).expect("write");
        let want = plain.len() + chunk.len();
        run(&mut sock, &mut client, |c| {
            c.read_plain_into(&mut plain).expect("read");
            plain.len() >= want
        });
    }
    assert!(plain == data, "echo differs ({} bytes back)", plain.len());
    let st = client.record_stats().expect("stats");
    assert_eq!((st.key_updates_sent, st.key_updates_received), (1, 1));
    let _ = std::fs::remove_dir_all(&dir);
}
