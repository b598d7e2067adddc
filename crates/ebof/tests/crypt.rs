//! Encryption at rest (issue 37, ADR 0029), end to end against `ebof serve`:
//!
//! * the format, checked by an independent implementation (Python `cryptography`, AES-XTS
//!   with the 512-byte sector number as tweak, i.e. dm-crypt's `aes-xts-plain64`): a file
//!   Python encrypted reads back through ebof, and what a host wrote through ebof decrypts in
//!   Python, for a namespace with its own key and for a pool namespace (its key derived by
//!   `ebof crypt derive-key`, as an operator recovering with `cryptsetup` would);
//! * the API and `ebof ctl show` say `encrypted`; snapshot, clone, resize and QoS work on an
//!   encrypted namespace;
//! * crypto-erase: after a namespace is removed, a copy of its file kept aside decrypts with
//!   no key header the box still holds;
//! * a missing key file, a loose one and a wrong key each stop `ebof serve` with their own
//!   code, naming the path, and no file is touched.
//!
//! Python comes from the system when it has `cryptography`, else from a venv under target/
//! (`pip install cryptography`); without either (PyPI unreachable) the Python checks are
//! skipped with a message.

mod common;

use common::served::{ctl_at as ctl, rejected_at, serve_file, state_at as state};
use common::{ebof, free_port};
use nvme_spec::NamespaceId;
use nvmf_host::{Controller, HostConfig};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const NQN: &str = "nqn.2026-11.io.ebof:enc";
const BS: usize = 512;
const MIB: u64 = 1 << 20;

/// AES-XTS over 512-byte sectors with Python's `cryptography`: `enc|dec KEYFILE FILE OFFSET
/// LEN IN OUT` transforms LEN bytes of IN (for enc) or of FILE at OFFSET (for dec) into OUT
/// (enc writes into FILE at OFFSET).
const PY: &str = r#"
import sys
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
mode, keyf, path, off, n, src, dst = sys.argv[1:8]
off, n = int(off), int(n)
key = open(keyf, 'rb').read()
assert len(key) == 64 and off % 512 == 0 and n % 512 == 0
data = open(src if mode == 'enc' else path, 'rb').read() if mode == 'enc' else None
if mode == 'dec':
    with open(path, 'rb') as f:
        f.seek(off); data = f.read(n)
out = bytearray()
for i in range(0, n, 512):
    tweak = ((off + i) // 512).to_bytes(16, 'little')
    c = Cipher(algorithms.AES(key), modes.XTS(tweak))
    op = c.encryptor() if mode == 'enc' else c.decryptor()
    out += op.update(data[i:i + 512]) + op.finalize()
if mode == 'enc':
    with open(path, 'r+b') as f:
        f.seek(off); f.write(out)
else:
    open(dst, 'wb').write(out)
"#;

fn python() -> Option<PathBuf> {
    let ok = |py: &Path| {
        Command::new(py)
            .args(["-c", "import cryptography.hazmat.primitives.ciphers"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if ok(Path::new("python3")) {
        return Some("python3".into());
    }
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()?
        .join("crypt-venv");
    let py = venv.join("bin/python");
    if !py.exists() {
        let _ = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status();
    }
    let _ = Command::new(&py)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "cryptography",
        ])
        .status();
    if ok(&py) {
        return Some(py);
    }
    eprintln!("no Python with `cryptography` (PyPI unreachable?): format checks skipped");
    None
}

fn py_run(py: &Path, dir: &Path, args: &[&str]) {
    let script = dir.join("xts.py");
    std::fs::write(&script, PY).unwrap();
    let o = Command::new(py).arg(&script).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "python {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Python decrypts `len` bytes of `file` at `off` with `key`.
fn py_decrypt(py: &Path, dir: &Path, key: &Path, file: &Path, off: u64, len: usize) -> Vec<u8> {
    let out = dir.join("py.out");
    let (o, n) = (off.to_string(), len.to_string());
    py_run(py, dir, &["dec", s(key), s(file), &o, &n, "-", s(&out)]);
    std::fs::read(out).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn pattern(seed: u8, blocks: usize) -> Vec<u8> {
    (0..blocks * BS)
        .map(|i| seed.wrapping_mul(31).wrapping_add((i / 7) as u8) | 1)
        .collect()
}

/// A 64-byte key file (mode 0600) whose halves differ.
fn key_file(path: &Path, seed: u8) {
    let k: Vec<u8> = (0..64u8)
        .map(|i| i.wrapping_mul(seed) ^ seed.rotate_left(3) ^ (i >> 5))
        .collect();
    std::fs::write(path, k).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn write(addr: SocketAddr, ns: u32, slba: u64, data: &[u8]) {
    rt().block_on(async {
        let c = Controller::connect(addr, NQN, &HostConfig::default())
            .await
            .unwrap();
        let mut q = c.io_queue(1, 0, false).await.unwrap();
        q.write(NamespaceId(ns), slba, (data.len() / BS) as u32, data)
            .await
            .unwrap();
        q.flush(NamespaceId(ns)).await.unwrap();
        c.disconnect().await;
    })
}

/// Identify Namespace's ebof mark says `ns` is encrypted (vendor-specific byte 3849 bit 0).
fn identify_encrypted(addr: SocketAddr, ns: u32) -> bool {
    rt().block_on(async {
        let c = Controller::connect(addr, NQN, &HostConfig::default())
            .await
            .unwrap();
        let id = c.identify_namespace(NamespaceId(ns)).await.unwrap();
        c.disconnect().await;
        assert!(id.ebof_backend.is_some());
        id.ebof_encrypted
    })
}

fn read(addr: SocketAddr, ns: u32, slba: u64, blocks: usize) -> Vec<u8> {
    rt().block_on(async {
        let c = Controller::connect(addr, NQN, &HostConfig::default())
            .await
            .unwrap();
        let mut q = c.io_queue(1, 0, false).await.unwrap();
        let mut buf = vec![0u8; blocks * BS];
        q.read(NamespaceId(ns), slba, blocks as u32, &mut buf)
            .await
            .unwrap();
        c.disconnect().await;
        buf
    })
}

fn config(dir: &Path, a: SocketAddr) -> PathBuf {
    let text = format!(
        "[[listeners]]\naddress = \"{}\"\nport = {}\n\n[management]\ndata_dirs = [{:?}]\n\n\
         [[pools]]\nname = \"sec\"\ndirectory = {:?}\n\
         encryption = {{ key_file = {:?} }}\n\n\
         [[subsystems]]\nnqn = \"{NQN}\"\n\n\
         [[subsystems.namespaces]]\nnsid = 1\nbackend = \"file\"\npath = {:?}\nsize = \"4M\"\n\
         encryption = {{ key_file = {:?} }}\n",
        a.ip(),
        a.port(),
        s(&dir.join("data")),
        s(&dir.join("sec")),
        s(&dir.join("pool.key")),
        s(&dir.join("own.img")),
        s(&dir.join("own.key")),
    );
    let cfg = dir.join("ebof.toml");
    std::fs::write(&cfg, text).unwrap();
    cfg
}

fn addr() -> SocketAddr {
    format!("127.0.0.1:{}", free_port()).parse().unwrap()
}

#[test]
fn encrypted_namespaces_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let py = python();
    key_file(&d.join("pool.key"), 3);
    key_file(&d.join("own.key"), 5);
    // A namespace file encrypted outside ebof (Python: the cryptsetup format) before the box
    // ever saw it: ebof adopts it with its own key.
    let own = d.join("own.img");
    std::fs::write(&own, vec![0u8; 4 << 20]).unwrap();
    let outside = pattern(9, 16);
    if let Some(py) = &py {
        std::fs::write(d.join("plain.in"), &outside).unwrap();
        let n = outside.len().to_string();
        py_run(
            py,
            d,
            &[
                "enc",
                s(&d.join("own.key")),
                s(&own),
                "8192",
                &n,
                s(&d.join("plain.in")),
                "-",
            ],
        );
    }
    let a = addr();
    let cfg = config(d, a);
    let (t, sock) = serve_file(&cfg, d, a);
    if py.is_some() {
        assert_eq!(
            read(a, 1, 16, 16),
            outside,
            "a file Python encrypted reads back through ebof"
        );
    }
    // What a host writes through ebof is XTS ciphertext on disk, and Python decrypts it.
    let p1 = pattern(1, 64);
    write(a, 1, 100, &p1);
    assert_eq!(read(a, 1, 100, 64), p1);
    let raw = std::fs::read(&own).unwrap();
    assert_ne!(&raw[100 * BS..164 * BS], &p1[..], "plaintext on disk");
    if let Some(py) = &py {
        let got = py_decrypt(py, d, &d.join("own.key"), &own, 100 * BS as u64, p1.len());
        assert_eq!(got, p1, "Python decrypts what the host wrote");
    }
    // A pool namespace: its own derived key, recoverable offline with the pool key.
    let o = ctl(
        &sock,
        &["--json", "ns", "add", NQN, "--pool", "sec", "--size", "4M"],
    );
    assert!(o.ok, "{}", o.stderr);
    let st = state(&sock);
    let nss = &st["subsystems"][0]["namespaces"];
    assert_eq!(
        (nss[0]["encrypted"].as_bool(), nss[1]["encrypted"].as_bool()),
        (Some(true), Some(true)),
        "{st}"
    );
    assert!(
        identify_encrypted(a, 1) && identify_encrypted(a, 2),
        "Identify's vendor area"
    );
    // The pool says it is encrypted (never the key), in the API and `ctl pool list`.
    assert_eq!(st["pools"][0]["encrypted"].as_bool(), Some(true), "{st}");
    let pools = ctl(&sock, &["pool", "list"]).stdout;
    assert!(
        pools.contains("ENCRYPTED") && pools.contains("yes"),
        "{pools}"
    );
    assert!(
        !pools.contains(&d.join("pool.key").display().to_string()),
        "{pools}"
    );
    let show = ctl(&sock, &["show"]).stdout;
    assert!(show.contains("nsid 2 encrypted: aes-xts-plain64"), "{show}");
    assert!(
        !show.contains(
            &std::fs::read(d.join("pool.key"))
                .map(|k| format!("{:02x}{:02x}", k[0], k[1]))
                .unwrap()
        )
    );
    let f2 = d.join("sec/nqn.2026-11.io.ebof_enc.ns2.img");
    let h2 = PathBuf::from(format!("{}.key", s(&f2)));
    assert!(h2.exists());
    let p2 = pattern(2, 32);
    write(a, 2, 8, &p2);
    let dk = d.join("ns2.derived");
    let o = ebof(&[
        "crypt",
        "derive-key",
        "--pool-key",
        s(&d.join("pool.key")),
        "--header",
        s(&h2),
        "--out",
        s(&dk),
    ]);
    assert!(o.ok, "{}", o.stderr);
    if let Some(py) = &py {
        assert_eq!(
            py_decrypt(py, d, &dk, &f2, 8 * BS as u64, p2.len()),
            p2,
            "derived key + cryptsetup format"
        );
    }
    // Snapshot, clone (shares the key), resize and QoS on an encrypted namespace.
    assert!(ctl(&sock, &["ns", "snapshot", NQN, "2", "s1"]).ok);
    let o = ctl(
        &sock,
        &["ns", "add", NQN, "--from-snapshot", "s1", "--pool", "sec"],
    );
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(read(a, 3, 8, 32), p2, "the clone reads its origin's data");
    assert!(ctl(&sock, &["ns", "resize", NQN, "2", "8M"]).ok);
    assert_eq!(read(a, 2, 8, 32), p2);
    assert_eq!(
        read(a, 2, 12 << 10, 8),
        vec![0u8; 8 * BS],
        "grown range reads zero"
    );
    assert!(ctl(&sock, &["ns", "qos", NQN, "2", "--iops", "5000"]).ok);
    assert_eq!(read(a, 2, 8, 32), p2);
    // Crypto-erase: a fourth namespace, its file kept aside, then removed.
    assert!(ctl(&sock, &["ns", "add", NQN, "--pool", "sec", "--size", "1M"]).ok);
    let p4 = pattern(4, 8);
    write(a, 4, 0, &p4);
    let f4 = d.join("sec/nqn.2026-11.io.ebof_enc.ns4.img");
    let kept = d.join("kept.img");
    std::fs::copy(&f4, &kept).unwrap();
    let h4 = PathBuf::from(format!("{}.key", s(&f4)));
    let dk4 = d.join("ns4.derived");
    assert!(
        ebof(&[
            "crypt",
            "derive-key",
            "--pool-key",
            s(&d.join("pool.key")),
            "--header",
            s(&h4),
            "--out",
            s(&dk4)
        ])
        .ok
    );
    assert!(ctl(&sock, &["ns", "remove", NQN, "4"]).ok);
    assert!(!h4.exists() && !f4.exists());
    let o = ebof(&[
        "crypt",
        "derive-key",
        "--pool-key",
        s(&d.join("pool.key")),
        "--header",
        s(&h4),
    ]);
    assert!(
        !o.ok && o.stderr.contains("no such key header"),
        "{}",
        o.stderr
    );
    if let Some(py) = &py {
        // Before the erase, the kept copy decrypted with its (now destroyed) key…
        assert_eq!(py_decrypt(py, d, &dk4, &kept, 0, p4.len()), p4);
        // …and with no key the box still holds: every remaining header, the pool key, the own key.
        let mut keys = vec![d.join("pool.key"), d.join("own.key")];
        for (i, h) in headers(&d.join("sec")).iter().enumerate() {
            let k = d.join(format!("left{i}.derived"));
            assert!(
                ebof(&[
                    "crypt",
                    "derive-key",
                    "--pool-key",
                    s(&d.join("pool.key")),
                    "--header",
                    s(h),
                    "--out",
                    s(&k)
                ])
                .ok
            );
            keys.push(k);
        }
        assert!(keys.len() >= 4, "{keys:?}");
        for k in &keys {
            assert_ne!(
                py_decrypt(py, d, k, &kept, 0, p4.len()),
                p4,
                "{} still decrypts",
                k.display()
            );
        }
    }
    // Through the API: a file namespace with its own key (`ns add --key-file`); a missing key
    // is refused with its code and no file is made.
    std::fs::create_dir_all(d.join("data")).unwrap();
    let api_ns = d.join("data/api.img");
    let missing = d.join("nope.key");
    let add = |key: &Path| {
        let (f, k) = (s(&api_ns).to_string(), s(key).to_string());
        move |extra: &[&str]| {
            let mut a = vec![
                "ns",
                "add",
                NQN,
                "--file",
                &f,
                "--size",
                "1M",
                "--key-file",
                &k,
            ];
            a.extend_from_slice(extra);
            a.iter().map(|x| x.to_string()).collect::<Vec<_>>()
        }
    };
    let args = add(&missing)(&[]);
    rejected_at(
        &sock,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        "key-file-missing",
        "",
    );
    assert!(!api_ns.exists(), "a refused add made its file");
    let args = add(&d.join("own.key"))(&["--json"]);
    let o = ctl(&sock, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.ok, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["namespace"]["encrypted"], true, "{v}");
    let nsid = v["namespace"]["nsid"].as_u64().unwrap() as u32;
    let p5 = pattern(5, 8);
    write(a, nsid, 0, &p5);
    assert_eq!(read(a, nsid, 0, 8), p5);
    let plain_file = s(&d.join("data/plain.img")).to_string();
    let plain = ctl(
        &sock,
        &[
            "--json",
            "ns",
            "add",
            NQN,
            "--file",
            &plain_file,
            "--size",
            "1M",
        ],
    );
    assert!(plain.ok, "{}", plain.stderr);
    let v: serde_json::Value = serde_json::from_str(&plain.stdout).unwrap();
    let plain_nsid = v["namespace"]["nsid"].as_u64().unwrap() as u32;
    assert!(
        !identify_encrypted(a, plain_nsid),
        "a plain namespace is not marked"
    );
    assert_ne!(&std::fs::read(&api_ns).unwrap()[..p5.len()], &p5[..]);
    // A clone of an own-key namespace's snapshot, outside a pool: it gets its origin's key
    // (the copied header says its data is under it) and reads the origin's data.
    assert!(ctl(&sock, &["ns", "snapshot", NQN, "1", "own-s"]).ok);
    let c1 = d.join("data/clone-own.img");
    let o = ctl(
        &sock,
        &[
            "--json",
            "ns",
            "add",
            NQN,
            "--from-snapshot",
            "own-s",
            "--file",
            s(&c1),
        ],
    );
    assert!(o.ok, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["added"]["namespace"]["encrypted"], true, "{v}");
    let c1_nsid = v["added"]["namespace"]["nsid"].as_u64().unwrap() as u32;
    assert_eq!(
        read(a, c1_nsid, 100, 64),
        p1,
        "the own-key clone reads its origin's data"
    );
    // A clone of a pool namespace's snapshot outside the pool has no key that opens it:
    // refused (its hosts would read ciphertext), and neither its file nor its header is left.
    let c2 = d.join("data/clone-pool.img");
    let o = ctl(
        &sock,
        &["ns", "add", NQN, "--from-snapshot", "s1", "--file", s(&c2)],
    );
    assert!(
        !o.ok && o.stderr.contains("has no key") && o.stderr.contains("key-header"),
        "{}",
        o.stderr
    );
    assert!(!c2.exists(), "a refused clone left its file");
    assert!(
        !PathBuf::from(format!("{}.key", s(&c2))).exists(),
        "a refused clone left its key header"
    );
    // What CSI DeleteVolume does (`subsystem remove`): the key header of every pool namespace
    // goes with it, so the volume is crypto-erased (a snapshot's own header copy stays).
    let pool_headers = || -> Vec<PathBuf> {
        std::fs::read_dir(d.join("sec"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "key"))
            .collect()
    };
    assert!(!pool_headers().is_empty());
    let o = ctl(&sock, &["subsystem", "remove", NQN]);
    assert!(o.ok, "{}", o.stderr);
    assert!(pool_headers().is_empty(), "{:?}", pool_headers());
    drop(t);
    refusals(d, &cfg);
}

/// Every key header under `dir` (snapshots included).
fn headers(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(headers(&p));
        } else if p.extension().is_some_and(|x| x == "key") {
            out.push(p);
        }
    }
    out
}

/// Every file under `dir` with its content, for "nothing touched".
fn snapshot_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(snapshot_files(&p));
        } else if p.is_file() && p.file_name().is_some_and(|n| n != "serve.log") {
            out.push((p.clone(), std::fs::read(&p).unwrap()));
        }
    }
    out.sort();
    out
}

/// A start refused for the key: its own code, the path named, nothing touched.
fn refused(d: &Path, cfg: &Path, code: &str, path: &Path) {
    let before = snapshot_files(d);
    let o = ebof(&[
        "serve",
        "-c",
        s(cfg),
        "--cores",
        "0",
        "--mgmt-socket",
        s(&d.join("x.sock")),
    ]);
    assert!(!o.ok, "serve started with {code}");
    assert!(
        o.stderr.contains(&format!("({code})")),
        "{code}: {}",
        o.stderr
    );
    assert!(
        o.stderr.contains(s(path)),
        "{code}: path not named: {}",
        o.stderr
    );
    assert_eq!(before, snapshot_files(d), "{code}: files touched");
}

fn refusals(d: &Path, cfg: &Path) {
    let own_key = d.join("own.key");
    let good = std::fs::read(&own_key).unwrap();
    std::fs::rename(&own_key, d.join("own.key.aside")).unwrap();
    refused(d, cfg, "key-file-missing", &own_key);
    std::fs::rename(d.join("own.key.aside"), &own_key).unwrap();
    std::fs::set_permissions(&own_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    refused(d, cfg, "key-file-permissions", &own_key);
    std::fs::set_permissions(&own_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&own_key, &good[..40]).unwrap();
    refused(d, cfg, "key-file-malformed", &own_key);
    key_file(&own_key, 7);
    refused(d, cfg, "wrong-key", &d.join("own.img"));
    std::fs::write(&own_key, &good).unwrap();
    let _ = MIB;
}

/// O_DIRECT (the engine's aligned bounce buffers) on an encrypted namespace of 4 KiB blocks:
/// what the host wrote is the XTS ciphertext on disk (sector numbers of 512 bytes) and reads
/// back.
#[test]
fn direct_io_on_an_encrypted_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    key_file(&d.join("k"), 11);
    let a = addr();
    let text = format!(
        "[[listeners]]\naddress = \"{}\"\nport = {}\n\n[[subsystems]]\nnqn = \"{NQN}\"\n\n\
         [[subsystems.namespaces]]\nbackend = \"file\"\npath = {:?}\nsize = \"4M\"\n\
         block_size = 4096\ndirect = true\nencryption = {{ key_file = {:?} }}\n",
        a.ip(),
        a.port(),
        s(&d.join("d.img")),
        s(&d.join("k")),
    );
    let cfg = d.join("ebof.toml");
    std::fs::write(&cfg, text).unwrap();
    let (t, _sock) = serve_file(&cfg, d, a);
    let data = pattern(6, 64); // 32 KiB: 8 blocks of 4 KiB at LBA 3 (byte 12288)
    let back = rt().block_on(async {
        let c = Controller::connect(a, NQN, &HostConfig::default())
            .await
            .unwrap();
        let mut q = c.io_queue(1, 0, false).await.unwrap();
        q.write(NamespaceId(1), 3, 8, &data).await.unwrap();
        q.flush(NamespaceId(1)).await.unwrap();
        let mut buf = vec![0u8; data.len()];
        q.read(NamespaceId(1), 3, 8, &mut buf).await.unwrap();
        c.disconnect().await;
        buf
    });
    drop(t);
    assert_eq!(back, data);
    let key: [u8; 64] = std::fs::read(d.join("k")).unwrap().try_into().unwrap();
    let mut expect = data.clone();
    ebof_backend::crypt::Xts::new(&key).encrypt(3 * 4096 / 512, &mut expect);
    let raw = std::fs::read(d.join("d.img")).unwrap();
    assert_eq!(&raw[3 * 4096..3 * 4096 + data.len()], &expect[..]);
}
