//! The CSI socket serves a gRPC client whatever `:authority` it sends (issue 35, item 1):
//! HTTP/2 spoken by hand to `ebof_csi::server::serve`, one connection per authority as the
//! clients send them — the socket path (grpc-java, grpcurl), the percent-encoded path
//! (grpc-core ≥ 1.57: Python, C++, Ruby), `localhost` (grpc-go, Kubernetes), none, empty — and
//! one connection whose later requests name the path by an index into the client's HPACK
//! dynamic table. Each request is Identity.GetPluginInfo or Controller.ControllerGetCapabilities
//! (no box needed), and must be answered with grpc-status 0 and the right message.

use ebof_csi::pb;
use prost::Message;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const DATA: u8 = 0x0;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// `ebof csi --controller` in this process, on a runtime of its own, until dropped.
struct Driver {
    _dir: tempfile::TempDir,
    sock: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start() -> Driver {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "authority-test-token\n").unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // A box nobody serves: the calls made here never reach it.
    let boxes = dir.path().join("boxes.toml");
    std::fs::write(
        &boxes,
        "[[boxes]]\nname = \"box1\"\napi = \"127.0.0.1:9\"\ntoken_file = \"token\"\n",
    )
    .unwrap();
    let sock = dir.path().join("csi").join("csi.sock");
    let opts = ebof_csi::server::Options {
        endpoint: format!("unix://{}", sock.display()),
        driver_name: ebof_csi::DRIVER_NAME.into(),
        boxes: Some(boxes),
        node: None,
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        rt.block_on(ebof_csi::server::serve(opts, async {
            let _ = rx.await;
        }))
    });
    let t0 = Instant::now();
    while !sock.exists() {
        assert!(t0.elapsed() < Duration::from_secs(20), "no CSI socket");
        assert!(
            !thread.is_finished(),
            "the driver stopped: {:?}",
            thread.join()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    Driver {
        _dir: dir,
        sock,
        stop: Some(tx),
        thread: Some(thread),
    }
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let l = (payload.len() as u32).to_be_bytes();
    let mut f = vec![l[1], l[2], l[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// One HTTP/2 client connection, its HPACK state both ways.
struct Conn {
    s: UnixStream,
    enc: loona_hpack::Encoder<'static>,
    dec: loona_hpack::Decoder<'static>,
    next_stream: u32,
}

/// What a gRPC call came back with.
#[derive(Debug)]
#[allow(dead_code)] // the codes are read through Debug, in the failure messages
enum Answer {
    /// grpc-status and the response message.
    Grpc(String, Vec<u8>),
    /// The stream was reset (the error code).
    Reset(u32),
    /// The connection was closed (GOAWAY's code, or none).
    Closed(Option<u32>),
}

impl Conn {
    fn open(sock: &Path) -> Conn {
        let s = UnixStream::connect(sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut c = Conn {
            s,
            enc: loona_hpack::Encoder::new(),
            dec: loona_hpack::Decoder::new(),
            next_stream: 1,
        };
        let mut hello = PREFACE.to_vec();
        hello.extend(frame(SETTINGS, 0, 0, b""));
        c.s.write_all(&hello).unwrap();
        c
    }

    /// A unary call, `:authority` as given (`None`: not sent); HPACK as a typical encoder
    /// does it, every field indexed into the dynamic table.
    fn call(&mut self, authority: Option<&str>, path: &str, msg: &[u8]) -> Answer {
        let stream = self.next_stream;
        self.next_stream += 2;
        let mut fields: Vec<(&[u8], &[u8])> = vec![
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path.as_bytes()),
        ];
        if let Some(a) = authority {
            fields.push((b":authority", a.as_bytes()));
        }
        fields.push((b"content-type", b"application/grpc"));
        fields.push((b"te", b"trailers"));
        let block = self.enc.encode(fields);
        let mut body = vec![0u8];
        body.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        body.extend_from_slice(msg);
        let mut out = frame(HEADERS, END_HEADERS, stream, &block);
        out.extend(frame(DATA, END_STREAM, stream, &body));
        if self.s.write_all(&out).is_err() {
            return Answer::Closed(None);
        }
        self.answer(stream)
    }

    fn read_frame(&mut self) -> Option<(u8, u8, u32, Vec<u8>)> {
        let mut head = [0u8; 9];
        self.s.read_exact(&mut head).ok()?;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let stream = u32::from_be_bytes([head[5] & 0x7f, head[6], head[7], head[8]]);
        let mut payload = vec![0u8; len];
        self.s.read_exact(&mut payload).ok()?;
        Some((head[3], head[4], stream, payload))
    }

    fn answer(&mut self, stream: u32) -> Answer {
        let mut data = Vec::new();
        loop {
            let Some((kind, flags, s, payload)) = self.read_frame() else {
                return Answer::Closed(None);
            };
            match kind {
                // Every header block is decoded, whatever its stream: the table is shared.
                HEADERS => {
                    assert_ne!(flags & END_HEADERS, 0, "the server sent CONTINUATION");
                    let fields = self.dec.decode(&payload).expect("the server's HPACK");
                    if s == stream && flags & END_STREAM != 0 {
                        let status = fields
                            .iter()
                            .find(|(n, _)| n.as_slice() == b"grpc-status")
                            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                            .unwrap_or_default();
                        return Answer::Grpc(status, data.get(5..).unwrap_or_default().to_vec());
                    }
                }
                DATA if s == stream => data.extend_from_slice(&payload),
                RST_STREAM if s == stream => {
                    return Answer::Reset(u32::from_be_bytes(payload[..4].try_into().unwrap()));
                }
                GOAWAY => {
                    return Answer::Closed(Some(u32::from_be_bytes(
                        payload[4..8].try_into().unwrap(),
                    )));
                }
                SETTINGS if flags & 1 == 0 => {
                    self.s.write_all(&frame(SETTINGS, 1, 0, b"")).unwrap();
                }
                _ => {}
            }
        }
    }
}

fn plugin_info(c: &mut Conn, authority: Option<&str>) -> Result<pb::GetPluginInfoResponse, String> {
    let req = pb::GetPluginInfoRequest::default().encode_to_vec();
    match c.call(authority, "/csi.v1.Identity/GetPluginInfo", &req) {
        Answer::Grpc(s, m) if s == "0" => {
            pb::GetPluginInfoResponse::decode(m.as_slice()).map_err(|e| e.to_string())
        }
        other => Err(format!("{other:?}")),
    }
}

fn capabilities(
    c: &mut Conn,
    authority: Option<&str>,
) -> Result<pb::ControllerGetCapabilitiesResponse, String> {
    let req = pb::ControllerGetCapabilitiesRequest::default().encode_to_vec();
    match c.call(
        authority,
        "/csi.v1.Controller/ControllerGetCapabilities",
        &req,
    ) {
        Answer::Grpc(s, m) if s == "0" => {
            pb::ControllerGetCapabilitiesResponse::decode(m.as_slice()).map_err(|e| e.to_string())
        }
        other => Err(format!("{other:?}")),
    }
}

/// `/a/b.sock` as grpc-core ≥ 1.57 sends it: every byte but unreserved ones percent-encoded.
fn percent_encoded(p: &Path) -> String {
    p.to_str()
        .unwrap()
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[test]
fn every_client_authority_is_served() {
    let d = start();
    let path = d.sock.to_str().unwrap().to_string();
    let cases: Vec<(&str, Option<String>)> = vec![
        ("the socket path (grpc-java, grpcurl)", Some(path.clone())),
        (
            "the percent-encoded path (grpc-core: Python, C++)",
            Some(percent_encoded(&d.sock)),
        ),
        ("localhost (grpc-go, Kubernetes)", Some("localhost".into())),
        ("no :authority", None),
        ("an empty :authority", Some(String::new())),
        ("a host and port (tonic)", Some("[::]:50051".into())),
        ("unix:PATH", Some(format!("unix:{path}"))),
    ];
    let mut failed = Vec::new();
    for (what, authority) in &cases {
        let mut c = Conn::open(&d.sock);
        match plugin_info(&mut c, authority.as_deref()) {
            Ok(r) => assert_eq!(r.name, ebof_csi::DRIVER_NAME, "{what}"),
            Err(e) => failed.push(format!("{what}: GetPluginInfo: {e}")),
        }
        match capabilities(&mut c, authority.as_deref()) {
            Ok(r) => assert!(!r.capabilities.is_empty(), "{what}"),
            Err(e) => failed.push(format!("{what}: ControllerGetCapabilities: {e}")),
        }
    }
    assert!(failed.is_empty(), "refused:\n{}", failed.join("\n"));
}

#[test]
fn one_connection_many_calls_through_the_dynamic_table() {
    let d = start();
    let path = d.sock.to_str().unwrap().to_string();
    let mut c = Conn::open(&d.sock);
    // The first call puts the path into the client's table; the later ones name it by index.
    for i in 0..20 {
        let r = if i % 2 == 0 {
            plugin_info(&mut c, Some(&path)).map(|r| r.name)
        } else {
            capabilities(&mut c, Some(&path)).map(|r| format!("{}", r.capabilities.len()))
        };
        r.unwrap_or_else(|e| panic!("call {i}: {e}"));
    }
}
