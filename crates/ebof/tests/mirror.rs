//! Replicated volumes through the product (issue 34, ADR 0028): two `ebof serve` processes
//! configured with `mirror = { peer, role }` serve one subsystem; a host (the `nvmf-host`
//! library, as a host would) sees the primary's path optimized and the secondary's
//! inaccessible, writes through the primary land on both copies, the primary is killed with
//! SIGKILL, the secondary is promoted with `ebof ctl ns mirror promote`, the data is read back
//! from it; the old primary restarts as secondary (never a second primary) and is resynced; the
//! new primary is killed and the old one promoted: everything written through either is there.

mod common;

use common::served::ctl_at;
use common::{Target, free_port};
use nvme_spec::NamespaceId;
use nvmf_host::{Controller, HostConfig, HostError};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.ebof:mirrored";
const NS: NamespaceId = NamespaceId(1);
const BS: usize = 512;

struct BoxSpec {
    name: &'static str,
    addr: SocketAddr,
    peer: SocketAddr,
    role: &'static str,
}

fn sock(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.sock"))
}

/// Write box `b`'s configuration and start it (logs in `<name>.log`).
fn start(dir: &Path, b: &BoxSpec, witness: Option<SocketAddr>) -> Target {
    start_with(dir, b, witness, "")
}

/// [`start`], with `ns_extra` (TOML lines) added to the namespace.
fn start_with(dir: &Path, b: &BoxSpec, witness: Option<SocketAddr>, ns_extra: &str) -> Target {
    let cfg = dir.join(format!("{}.toml", b.name));
    let witness = witness
        .map(|w| format!("[mirror]\nwitness = \"{w}\"\nlease_ms = 1000\n\n"))
        .unwrap_or_default();
    std::fs::write(
        &cfg,
        format!(
            "{witness}[target]\nstate_dir = \"{state}\"\n\n[management]\nsocket = \"{sock}\"\n\n\
             [[listeners]]\naddress = \"127.0.0.1\"\nport = {port}\n\n\
             [[subsystems]]\nnqn = \"{NQN}\"\n\n\
             [[subsystems.namespaces]]\nnsid = 1\nbackend = \"file\"\npath = \"{file}\"\n\
             size = \"8M\"\nana_group = 2\n\
             mirror = {{ peer = \"{peer}\", role = \"{role}\" }}\n{ns_extra}",
            state = dir.join(format!("{}-state", b.name)).display(),
            sock = sock(dir, b.name).display(),
            port = b.addr.port(),
            file = dir.join(format!("{}.img", b.name)).display(),
            peer = b.peer,
            role = b.role,
        ),
    )
    .unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{}.log", b.name)))
        .unwrap();
    Target::spawn(
        &["serve", "--config", cfg.to_str().unwrap()],
        b.addr,
        Stdio::from(log),
    )
}

/// `ebof ctl --json ns mirror status` of box `name`.
fn status(dir: &Path, name: &str) -> Value {
    let o = ctl_at(
        &sock(dir, name),
        &["--json", "ns", "mirror", "status", NQN, "1"],
    );
    assert!(o.ok, "mirror status of {name}: {}", o.stderr);
    serde_json::from_str(&o.stdout).unwrap()
}

/// Wait (bounded) until box `name`'s mirror status satisfies `f`.
fn wait_status(dir: &Path, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = status(dir, name);
        if f(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{name}: never {what}: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn pattern(seed: u8, blocks: usize) -> Vec<u8> {
    (0..blocks * BS)
        .map(|i| seed.wrapping_mul(31).wrapping_add((i / 7) as u8))
        .collect()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Write `data` at `slba` through the box at `addr`: Ok, or the NVMe status.
fn write(addr: SocketAddr, slba: u64, data: &[u8]) -> Result<(), HostError> {
    rt().block_on(async {
        let c = Controller::connect(addr, NQN, &HostConfig::default()).await?;
        let mut q = c.io_queue(1, 0, false).await?;
        let r = q.write(NS, slba, (data.len() / BS) as u32, data).await;
        c.disconnect().await;
        r
    })
}

fn read(addr: SocketAddr, slba: u64, blocks: usize) -> Result<Vec<u8>, HostError> {
    rt().block_on(async {
        let c = Controller::connect(addr, NQN, &HostConfig::default()).await?;
        let mut q = c.io_queue(1, 0, false).await?;
        let mut buf = vec![0u8; blocks * BS];
        let r = q.read(NS, slba, blocks as u32, &mut buf).await;
        c.disconnect().await;
        r.map(|_| buf)
    })
}

/// The path through `addr` is ANA inaccessible: I/O fails with SCT 3h SC 02h.
fn assert_inaccessible(addr: SocketAddr, what: &str) {
    match write(addr, 0, &pattern(0xEE, 1)) {
        Err(HostError::Status(s)) => {
            assert_eq!((s.sct, s.sc), (3, 2), "{what}: {s}");
            assert!(
                !s.dnr,
                "{what}: an ANA refusal must let the host retry elsewhere"
            );
        }
        other => panic!("{what}: a write through an inaccessible path: {other:?}"),
    }
}

#[test]
fn manual_failover_resync_and_failback() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (a, b) = pair();
    let (a_addr, b_addr) = (a.addr, b.addr);
    let tb = start(d, &b, None);
    let ta = start(d, &a, None);

    // The primary copies the whole volume to the new secondary, then is in sync.
    let s = wait_status(d, "a", "in sync", |s| s["state"] == "in-sync");
    assert_eq!(
        (s["role"].as_str(), s["epoch"].as_u64()),
        (Some("primary"), Some(1))
    );
    assert_eq!(s["peer"], b_addr.to_string());
    let s = status(d, "b");
    assert_eq!(s["role"], "secondary");
    assert_inaccessible(b_addr, "the secondary");
    // `ctl show` marks it too.
    let o = ctl_at(&sock(d, "a"), &["show"]);
    assert!(
        o.stdout.contains("nsid 1 mirror: primary at epoch 1"),
        "{}",
        o.stdout
    );

    // Writes through the primary are acknowledged once both copies have them.
    let first = pattern(1, 64);
    write(a_addr, 100, &first).expect("write through the primary");
    assert_eq!(read(a_addr, 100, 64).unwrap(), first);

    // Kill -9 the primary; promote the secondary by hand (no witness configured).
    drop(ta);
    let o = ctl_at(
        &sock(d, "b"),
        &["--json", "ns", "mirror", "promote", NQN, "1"],
    );
    assert!(o.ok, "promote: {}", o.stderr);
    let s: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(
        (s["role"].as_str(), s["epoch"].as_u64()),
        (Some("primary"), Some(2))
    );
    assert_eq!(
        read(b_addr, 100, 64).expect("read from the new primary"),
        first
    );
    let second = pattern(2, 32);
    write(b_addr, 1000, &second).expect("write through the new primary (degraded)");
    // Alone: the write is acknowledged on one copy and its region is marked for the resync.
    let s = status(d, "b");
    assert_eq!(s["state"], "degraded", "{s}");
    assert!(s["dirty_regions"].as_u64().unwrap() > 0, "{s}");

    // The old primary restarts: it comes back as secondary at its epoch, never as a second
    // primary, and is copied whole (its copy may hold writes never acknowledged).
    let ta = start(d, &a, None);
    let s = status(d, "a");
    assert_eq!(
        s["role"], "secondary",
        "a restarted primary must come back secondary: {s}"
    );
    assert_inaccessible(a_addr, "the restarted old primary");
    wait_status(d, "b", "in sync again", |s| s["state"] == "in-sync");
    assert_eq!(
        status(d, "a")["epoch"],
        2,
        "the secondary follows the new epoch"
    );

    // Kill the new primary; promote the old one: everything written through either is there.
    drop(tb);
    let o = ctl_at(&sock(d, "a"), &["ns", "mirror", "promote", NQN, "1"]);
    assert!(o.ok, "promote back: {}", o.stderr);
    assert_eq!(read(a_addr, 100, 64).unwrap(), first);
    assert_eq!(read(a_addr, 1000, 32).unwrap(), second);
    let s = status(d, "a");
    assert_eq!(
        (s["role"].as_str(), s["epoch"].as_u64()),
        (Some("primary"), Some(3))
    );

    // Refusals are clear: promoting a primary, a namespace that is not mirrored.
    let o = ctl_at(&sock(d, "a"), &["ns", "mirror", "promote", NQN, "1"]);
    assert!(
        !o.ok && o.stderr.contains("already primary"),
        "{}",
        o.stderr
    );
    let o = ctl_at(&sock(d, "a"), &["ns", "mirror", "status", NQN, "7"]);
    assert!(
        !o.ok && o.stderr.contains("unknown-namespace"),
        "{}",
        o.stderr
    );
    // Metrics carry the role and epoch.
    let o = ctl_at(&sock(d, "a"), &["metrics"]);
    assert!(
        o.stdout.contains(&format!(
            "ebof_mirror_epoch{{subsystem=\"{NQN}\",nsid=\"1\"}} 3"
        )),
        "{}",
        o.stdout
    );
    drop(ta);
}

/// A box that is only a witness (`[witness]`, no subsystem).
fn start_witness(dir: &Path, addr: SocketAddr) -> Target {
    let cfg = dir.join("w.toml");
    std::fs::write(
        &cfg,
        format!(
            "[management]\nsocket = \"{}\"\n\n[[listeners]]\naddress = \"127.0.0.1\"\nport = {}\n\n\
             [witness]\nlease_max_ms = 2000\n",
            sock(dir, "w").display(),
            addr.port()
        ),
    )
    .unwrap();
    Target::spawn(
        &["serve", "--config", cfg.to_str().unwrap()],
        addr,
        Stdio::null(),
    )
}

fn signal(t: &Target, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &t.pid().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

/// With a witness the secondary promotes itself once the primary's lease has expired: after
/// `kill -9` of the primary, and after a SIGSTOP of it — and the paused primary, resumed after
/// the promotion, completes no write (it is fenced: ANA inaccessible), so nothing it was
/// asked lands after the new primary's writes.
#[test]
fn witness_promotes_after_kill_and_fences_a_paused_primary() {
    // EBOF_KEEP_TEST_DIR=1 keeps the boxes' configurations and logs for a look afterwards.
    let mut dir = Some(tempfile::tempdir().unwrap());
    let path = dir.as_ref().unwrap().path().to_path_buf();
    if std::env::var_os("EBOF_KEEP_TEST_DIR").is_some() {
        eprintln!("test dir: {}", path.display());
        std::mem::forget(dir.take());
    }
    let d = path.as_path();
    let (a, b) = pair();
    let (a_addr, b_addr) = (a.addr, b.addr);
    let w_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let _w = start_witness(d, w_addr);
    let tb = start(d, &b, Some(w_addr));
    let ta = start(d, &a, Some(w_addr));
    let s = wait_status(d, "a", "in sync with a lease", |s| {
        s["state"] == "in-sync" && s["lease_ms_left"].as_u64().is_some_and(|l| l > 0)
    });
    assert_eq!(s["fenced"], false, "{s}");
    let first = pattern(3, 16);
    write(a_addr, 8, &first).expect("write through the primary");

    // Pause the primary: the secondary takes over once the lease has expired.
    signal(&ta, "-STOP");
    let paused = Instant::now();
    wait_status(d, "b", "promoted", |s| s["role"] == "primary");
    let took = paused.elapsed();
    let mut resumed_io = None;
    while resumed_io.is_none() {
        if write(b_addr, 200, &pattern(4, 8)).is_ok() {
            resumed_io = Some(paused.elapsed());
        }
        assert!(
            paused.elapsed() < Duration::from_secs(30),
            "no I/O through b"
        );
    }
    println!(
        "failover with a witness (lease 1 s): promoted {} ms after the primary stopped, \
         first write through the new primary at {} ms",
        took.as_millis(),
        resumed_io.unwrap().as_millis()
    );
    assert_eq!(read(b_addr, 8, 16).unwrap(), first);
    // The new primary's write at LBA 300, then the old primary resumes: it has no lease, so
    // a write through it is refused as ANA inaccessible and never reaches either copy.
    let newer = pattern(5, 8);
    write(b_addr, 300, &newer).unwrap();
    signal(&ta, "-CONT");
    let stale = pattern(6, 8);
    match write(a_addr, 300, &stale) {
        Err(HostError::Status(st)) => assert_eq!((st.sct, st.sc), (3, 2), "{st}"),
        other => panic!("the resumed old primary completed a write: {other:?}"),
    }
    assert_eq!(read(b_addr, 300, 8).unwrap(), newer, "a stale write landed");
    wait_status(d, "a", "secondary again", |s| s["role"] == "secondary");

    // Kill -9 the new primary: the old one (resynced as secondary meanwhile) takes over.
    wait_status(d, "b", "in sync with a", |s| s["state"] == "in-sync");
    // b reports "in sync" to the witness as soon as it is (one request); until then it would
    // rightly refuse a's takeover (b's last report said a missed writes).
    std::thread::sleep(Duration::from_millis(200));
    let killed = Instant::now();
    drop(tb);
    wait_status(d, "a", "promoted again", |s| s["role"] == "primary");
    println!(
        "failover after kill -9: promoted in {} ms",
        killed.elapsed().as_millis()
    );
    assert_eq!(read(a_addr, 300, 8).unwrap(), newer);
    assert_eq!(read(a_addr, 8, 16).unwrap(), first);
    drop(ta);
    drop(dir);
}

/// Mirrored namespaces added through the API (`ebof ctl ns add --mirror-peer`) take an ANA
/// group of their own when none is given; a bad peer or role is refused with the field.
#[test]
fn mirrored_namespaces_added_live_get_groups_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let peer: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let a = BoxSpec {
        name: "a",
        addr: a_addr,
        peer,
        role: "secondary",
    };
    let _ta = start(d, &a, None);
    let add = |extra: &[&str]| {
        let mut args = vec!["--json", "ns", "add", NQN, "--ram", "1M"];
        args.extend_from_slice(extra);
        ctl_at(&sock(d, "a"), &args)
    };
    let p = peer.to_string();
    let mut groups = Vec::new();
    for _ in 0..2 {
        let o = add(&["--mirror-peer", &p, "--mirror-role", "secondary"]);
        assert!(o.ok, "{}", o.stderr);
        let v: Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(v["namespace"]["mirror"]["role"], "secondary", "{v}");
        groups.push(v["namespace"]["ana_group"].as_u64().unwrap());
    }
    // group 2 is the configured mirrored namespace's
    assert_eq!(groups, [1, 3]);
    let o = add(&["--mirror-peer", "0.0.0.0:4420", "--mirror-role", "primary"]);
    assert!(!o.ok && o.stderr.contains("mirror.peer"), "{}", o.stderr);
    let o = add(&[
        "--mirror-peer",
        &p,
        "--mirror-role",
        "primary",
        "--ana-group",
        "2",
    ]);
    assert!(!o.ok && o.stderr.contains("invalid-mirror"), "{}", o.stderr);
}

/// Encrypted copies (issues 34 and 37, ADR 0029): each box encrypts its copy of a mirrored
/// file namespace under its own key; the link carries what the host wrote. Both copies on disk
/// are ciphertext that decrypts (dm-crypt's aes-xts-plain64 layout) under its box's key to
/// what the host wrote; after a failover the restarted old primary is resynced under its key.
#[test]
fn encrypted_copies_each_under_its_own_key() {
    use ebof_backend::crypt::{KEY_LEN, Xts};
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (a, b) = pair();
    let (a_addr, b_addr) = (a.addr, b.addr);
    let key = |name: &str, seed: u8| -> (PathBuf, [u8; KEY_LEN]) {
        let k: [u8; KEY_LEN] =
            std::array::from_fn(|i| seed.wrapping_add((i as u8).wrapping_mul(37)));
        let path = d.join(format!("{name}.key"));
        std::fs::write(&path, k).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        (path, k)
    };
    let ((ka_path, ka), (kb_path, kb)) = (key("a", 3), key("b", 200));
    // Each box also has an encrypted pool (its own key) for the second pair below.
    let enc = |p: &Path| {
        let name = p.file_stem().unwrap().to_str().unwrap();
        let pool = d.join(format!("{name}-pool"));
        std::fs::create_dir_all(&pool).unwrap();
        format!(
            "encryption = {{ key_file = \"{k}\" }}\n\n[[pools]]\nname = \"sec\"\n\
             directory = \"{}\"\nencryption = {{ key_file = \"{k}\" }}\n",
            pool.display(),
            k = p.display()
        )
    };
    let tb = start_with(d, &b, None, &enc(&kb_path));
    let ta = start_with(d, &a, None, &enc(&ka_path));
    wait_status(d, "a", "in sync", |s| s["state"] == "in-sync");

    // The copy on disk at `slba`: not the plaintext, and `want` under `key`.
    let check = |img: &str, key: &[u8; KEY_LEN], slba: u64, want: &[u8]| {
        let raw = std::fs::read(d.join(img)).unwrap();
        let off = slba as usize * BS;
        let mut got = raw[off..off + want.len()].to_vec();
        assert_ne!(got, want, "{img}: plaintext at rest");
        Xts::new(key).decrypt(slba, &mut got);
        assert!(
            got == want,
            "{img}: blocks at {slba} do not decrypt to what was written"
        );
    };
    let first = pattern(5, 64);
    write(a_addr, 100, &first).expect("write through the primary");
    assert_eq!(read(a_addr, 100, 64).unwrap(), first);
    check("a.img", &ka, 100, &first);
    check("b.img", &kb, 100, &first);

    // Failover: the secondary serves the data it holds under its own key.
    drop(ta);
    let o = ctl_at(&sock(d, "b"), &["ns", "mirror", "promote", NQN, "1"]);
    assert!(o.ok, "promote: {}", o.stderr);
    assert_eq!(read(b_addr, 100, 64).unwrap(), first);
    let second = pattern(6, 32);
    write(b_addr, 1000, &second).expect("write through the new primary (degraded)");
    check("b.img", &kb, 1000, &second);

    // The old primary restarts with its key and is resynced under it.
    let ta = start_with(d, &a, None, &enc(&ka_path));
    wait_status(d, "b", "in sync again", |s| s["state"] == "in-sync");
    check("a.img", &ka, 100, &first);
    check("a.img", &ka, 1000, &second);
    // `show` says the namespace is encrypted on both boxes, and no key is in it.
    for name in ["a", "b"] {
        let o = ctl_at(&sock(d, name), &["show"]);
        assert!(o.ok, "{}", o.stderr);
        assert!(
            o.stdout.contains("nsid 1 encrypted: aes-xts-plain64"),
            "{name}: {}",
            o.stdout
        );
        for k in [&ka, &kb] {
            let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
            assert!(!o.stdout.contains(&hex), "{name}: a key in `show`");
        }
    }
    pool_pair(d, (a_addr, &ka_path), (b_addr, &kb_path));
    drop((ta, tb));
}

/// A mirrored pair made live in the encrypted pools of box b (primary now) and box a: in sync,
/// the host's data on both, each copy ciphertext that the operator's recovery (`ebof crypt
/// derive-key` from the pool key and the key header) decrypts.
fn pool_pair(d: &Path, (a_addr, ka): (SocketAddr, &Path), (b_addr, kb): (SocketAddr, &Path)) {
    let add = |name: &str, peer: SocketAddr, role: &str| {
        let p = peer.to_string();
        let o = ctl_at(
            &sock(d, name),
            &[
                "ns",
                "add",
                NQN,
                "--nsid",
                "2",
                "--pool",
                "sec",
                "--size",
                "4M",
                "--ana-group",
                "3",
                "--mirror-peer",
                &p,
                "--mirror-role",
                role,
            ],
        );
        assert!(o.ok, "{name}: ns add: {}", o.stderr);
    };
    add("a", b_addr, "secondary");
    add("b", a_addr, "primary");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = ctl_at(
            &sock(d, "b"),
            &["--json", "ns", "mirror", "status", NQN, "2"],
        );
        let s: Value = serde_json::from_str(&o.stdout).unwrap_or_default();
        if s["state"] == "in-sync" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pool pair never in sync: {s} {}",
            o.stderr
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let data = pattern(9, 16);
    rt().block_on(async {
        let c = Controller::connect(b_addr, NQN, &HostConfig::default())
            .await
            .unwrap();
        let mut q = c.io_queue(1, 0, false).await.unwrap();
        q.write(NamespaceId(2), 40, 16, &data).await.unwrap();
        let mut back = vec![0u8; data.len()];
        q.read(NamespaceId(2), 40, 16, &mut back).await.unwrap();
        assert!(back == data, "the pool pair reads back what was written");
        c.disconnect().await;
    });
    for (name, pool_key) in [("a", ka), ("b", kb)] {
        let dir = d.join(format!("{name}-pool"));
        let img = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                dir.join(format!("{}.key", p.file_name().unwrap().to_str().unwrap()))
                    .exists()
            })
            .unwrap_or_else(|| {
                panic!(
                    "{name}: no data file with a key header in {}",
                    dir.display()
                )
            });
        let header = dir.join(format!(
            "{}.key",
            img.file_name().unwrap().to_str().unwrap()
        ));
        let key_out = d.join(format!("{name}-derived.key"));
        let out = common::ebof(&[
            "crypt",
            "derive-key",
            "--pool-key",
            pool_key.to_str().unwrap(),
            "--header",
            header.to_str().unwrap(),
            "--out",
            key_out.to_str().unwrap(),
        ]);
        assert!(out.ok, "derive-key: {}", out.stderr);
        let key: [u8; ebof_backend::crypt::KEY_LEN] =
            std::fs::read(&key_out).unwrap()[..].try_into().unwrap();
        let raw = std::fs::read(&img).unwrap();
        let mut got = raw[40 * BS..40 * BS + data.len()].to_vec();
        assert!(got != data, "{name}: plaintext at rest in the pool");
        ebof_backend::crypt::Xts::new(&key).decrypt(40, &mut got);
        assert!(
            got == data,
            "{name}: the pool copy does not decrypt to what was written"
        );
    }
}

/// A snapshot restored into a new mirrored pair (what the CSI driver does for a `replicas: "2"`
/// volume made from a snapshot): the primary's namespace is a clone of the snapshot made with
/// `mirror` (`ns add --from-snapshot … --mirror-peer … --mirror-role primary`), the secondary's
/// an empty namespace of the same size; the primary copies itself whole to it, both grow
/// (the secondary first), and after the primary's loss the secondary serves the snapshot's
/// data.
#[test]
fn a_snapshot_restored_into_a_new_mirrored_pair() {
    let dir = tempfile::tempdir().unwrap();
    // Each box's files in a directory of its own, so their snapshot directories differ.
    let bd = |name: &str| dir.path().join(name);
    std::fs::create_dir_all(bd("a")).unwrap();
    std::fs::create_dir_all(bd("b")).unwrap();
    let (a, b) = pair();
    let (a_addr, b_addr) = (a.addr, b.addr);
    // Pools, as the CSI driver uses.
    let pool = |name: &str| {
        format!(
            "\n[[pools]]\nname = \"p\"\ndirectory = \"{}\"\n",
            bd(name).join("pool").display()
        )
    };
    let tb = start_with(&bd("b"), &b, None, &pool("b"));
    let ta = start_with(&bd("a"), &a, None, &pool("a"));
    wait_status(&bd("a"), "a", "in sync", |s| s["state"] == "in-sync");
    let data = pattern(11, 64);
    write(a_addr, 200, &data).expect("write through the primary");
    let ok = |name: &str, args: &[&str]| {
        let o = ctl_at(&sock(&bd(name), name), args);
        assert!(o.ok, "{name}: {args:?}: {}", o.stderr);
        o.stdout
    };
    ok("a", &["ns", "snapshot", NQN, "1", "before"]);
    // Overwritten after the snapshot: the restored pair holds the old data.
    write(a_addr, 200, &pattern(12, 64)).unwrap();
    let (pa, pb) = (a_addr.to_string(), b_addr.to_string());
    ok(
        "a",
        &[
            "ns",
            "add",
            NQN,
            "--nsid",
            "3",
            "--from-snapshot",
            "before",
            "--pool",
            "p",
            "--mirror-peer",
            &pb,
            "--mirror-role",
            "primary",
        ],
    );
    ok(
        "b",
        &[
            "ns",
            "add",
            NQN,
            "--nsid",
            "3",
            "--pool",
            "p",
            "--size",
            "8M",
            "--mirror-peer",
            &pa,
            "--mirror-role",
            "secondary",
        ],
    );
    let status3 = |name: &str| -> Value {
        let o = ctl_at(
            &sock(&bd(name), name),
            &["--json", "ns", "mirror", "status", NQN, "3"],
        );
        serde_json::from_str(&o.stdout).unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while status3("a")["state"] != "in-sync" {
        assert!(Instant::now() < deadline, "never in sync: {}", status3("a"));
        std::thread::sleep(Duration::from_millis(50));
    }
    // Both grow, the secondary first (the primary grows only once its peer holds the size).
    for name in ["b", "a"] {
        let o = ok(name, &["--json", "ns", "resize", NQN, "3", "16M"]);
        assert!(o.contains("16777216"), "{name} grew: {o}");
    }
    let read3 = |addr: SocketAddr, slba: u64, blocks: usize| -> Vec<u8> {
        rt().block_on(async {
            let c = Controller::connect(addr, NQN, &HostConfig::default())
                .await
                .unwrap();
            let mut q = c.io_queue(1, 0, false).await.unwrap();
            let mut buf = vec![0u8; blocks * BS];
            q.read(NamespaceId(3), slba, blocks as u32, &mut buf)
                .await
                .unwrap();
            c.disconnect().await;
            buf
        })
    };
    assert!(
        read3(a_addr, 200, 64) == data,
        "the clone holds the snapshot's data"
    );
    // The primary is lost: the secondary, promoted, serves the snapshot's data.
    drop(ta);
    ok("b", &["ns", "mirror", "promote", NQN, "3"]);
    assert!(
        read3(b_addr, 200, 64) == data,
        "the secondary got the clone's data"
    );
    drop(tb);
}

/// Box a (primary) and box b (secondary) naming each other, on free loopback ports.
fn pair() -> (BoxSpec, BoxSpec) {
    let a_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let b_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let a = BoxSpec {
        name: "a",
        addr: a_addr,
        peer: b_addr,
        role: "primary",
    };
    let b = BoxSpec {
        name: "b",
        addr: b_addr,
        peer: a_addr,
        role: "secondary",
    };
    (a, b)
}
