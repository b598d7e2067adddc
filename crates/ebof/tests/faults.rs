//! Backend faults through the real `ebof serve` and `ebof perf`: each errno class reaches the
//! host as its deliberate NVMe status (see `nvmf_target::backend_status`), thousands of failures
//! cost one warning line per cause, and connection churn logs per controller, not per queue.

mod common;

use common::{EBOF, Target, ebof, free_port};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const NQN: &str = "nqn.2026-11.io.ebof:default";

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("ebof-faults-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn addr() -> SocketAddr {
    format!("127.0.0.1:{}", free_port()).parse().unwrap()
}

/// `ebof serve --file PATH` with its log going to `log`.
fn serve_file(path: &Path, log: &Path, a: SocketAddr) -> Target {
    let f = std::fs::File::create(log).unwrap();
    Target::spawn(
        &[
            "serve",
            "--listen",
            &a.to_string(),
            "--file",
            path.to_str().unwrap(),
            "--cores",
            "0",
        ],
        a,
        Stdio::from(f),
    )
}

/// `ebof serve --ram 16M` with its log going to `log`.
fn serve_ram(log: &Path) -> (Target, SocketAddr) {
    let a = addr();
    let f = std::fs::File::create(log).unwrap();
    let listen = a.to_string();
    let args = ["serve", "--listen", &listen, "--ram", "16M", "--cores", "0"];
    (Target::spawn(&args, a, Stdio::from(f)), a)
}

/// `ebof perf` for `runtime` with `extra` flags; returns (success, stdout + stderr).
fn perf(a: SocketAddr, rw: &str, runtime: &str, extra: &[&str]) -> (bool, String) {
    let port = a.port().to_string();
    let mut args = vec![
        "perf",
        "-a",
        "127.0.0.1",
        "-s",
        &port,
        "-n",
        NQN,
        "--rw",
        rw,
        "--qd",
        "16",
        "--runtime",
        runtime,
    ];
    args.extend_from_slice(extra);
    let o = ebof(&args);
    (o.ok, format!("{}{}", o.stdout, o.stderr))
}

fn count(log: &Path, needle: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

/// The number after "errors: " in perf's report.
fn errors(report: &str) -> u64 {
    report
        .split("errors: ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A file truncated under the running target: reads past its end fail with Unrecovered Read
/// Error and DNR (retrying cannot bring the data back), logged once, not once per command.
#[test]
fn truncated_file_reads_fail_with_dnr_and_log_once() {
    let dir = Scratch::new("trunc");
    let img = dir.0.join("t.img");
    let log = dir.0.join("serve.log");
    let a = addr();
    let _t = serve_file(&img, &log, a); // created with 1 GiB, sparse
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.set_len(1 << 20).unwrap();
    let (ok, report) = perf(a, "randread", "1s", &[]);
    assert!(!ok, "reads past the end must fail:\n{report}");
    assert!(
        report.contains("Unrecovered Read Error (sct 2 sc 0x81, dnr)"),
        "{report}"
    );
    let n = errors(&report);
    assert!(n > 100, "a load of failures, not a handful: {n}\n{report}");
    let lines = count(&log, "backend I/O failed");
    assert!(
        (1..=2).contains(&lines),
        "{n} failures wrote {lines} warning lines"
    );
}

/// A file size limit (`ulimit -f`, EFBIG) is "no space" for the host: Capacity Exceeded with
/// DNR, as the Linux target answers ENOSPC; the target survives (SIGXFSZ ignored) and what was
/// written below the limit reads back.
#[test]
fn file_size_limit_is_capacity_exceeded() {
    let dir = Scratch::new("fsize");
    let img = dir.0.join("f.img");
    // Made at full size (sparse) first: the limit only bites writes beyond 1 MiB.
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let log = dir.0.join("serve.log");
    let a = addr();
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(format!(
        "ulimit -f 2048 && exec '{EBOF}' serve --listen {a} --file '{}' --cores 0",
        img.display()
    ));
    let _t = Target::spawn_command(cmd, a, Stdio::from(std::fs::File::create(&log).unwrap()));
    out_of_space(a, &log);
}

/// The first MiB takes verified writes; writes across the namespace then run out of space and
/// fail with Capacity Exceeded + DNR, logged once; the target still serves the first MiB.
fn out_of_space(a: SocketAddr, log: &Path) {
    let (ok, report) = perf(a, "write", "500ms", &["--range", "0-1M", "--verify"]);
    assert!(ok, "{report}");
    let (ok, report) = perf(a, "randwrite", "1s", &[]);
    assert!(!ok, "{report}");
    assert!(
        report.contains("Capacity Exceeded (sct 0 sc 0x81, dnr)"),
        "{report}"
    );
    let (ok, report) = perf(a, "read", "300ms", &["--range", "0-1M"]);
    assert!(ok, "{report}");
    assert!((1..=2).contains(&count(log, "backend I/O failed")));
}

/// A full file system (ENOSPC, on a small tmpfs this test mounts; needs root): Capacity
/// Exceeded with DNR, and the target keeps serving what it stored.
#[test]
fn full_file_system_is_capacity_exceeded() {
    let dir = Scratch::new("enospc");
    let mnt = dir.0.join("fs");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(&mnt)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (needs root); EFBIG covers the class");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _u = Unmount(&mnt);
    let img = mnt.join("full.img");
    let log = dir.0.join("serve.log");
    let a = addr();
    let t = serve_file(&img, &log, a);
    out_of_space(a, &log);
    drop(t);
}

/// Connection churn: an I/O controller costs two info lines (created, removed) however many
/// queues it has; discovery controllers and I/O queues log at debug.
#[test]
fn churn_logs_per_controller_not_per_queue() {
    let dir = Scratch::new("churn");
    let log = dir.0.join("serve.log");
    let (t, a) = serve_ram(&log);
    let before = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .count();
    let port = a.port().to_string();
    let rounds = 10;
    for _ in 0..rounds {
        let o = ebof(&["identify", "-a", "127.0.0.1", "-s", &port, "-n", NQN]);
        assert!(o.ok, "{}", o.stderr);
    }
    let (ok, report) = perf(a, "randread", "300ms", &["--queues", "4"]);
    assert!(ok, "{report}");
    // Let the last controller's removal be logged.
    drop(t);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().skip(before).collect();
    let controllers = rounds + 1;
    let created = lines
        .iter()
        .filter(|l| l.contains("new I/O controller"))
        .count();
    assert_eq!(created, controllers, "{lines:#?}");
    assert!(
        !lines.iter().any(|l| l.contains("I/O queue connected")),
        "per-queue lines at info: {lines:#?}"
    );
    // Created + removed per controller, plus the shutdown lines.
    assert!(
        lines.len() <= 2 * controllers + 4,
        "{} lines for {controllers} controllers: {lines:#?}",
        lines.len()
    );
}

/// A host that overruns its queue (200 commands on a 32-entry admin queue, in one write): the
/// excess fails with Command Sequence Error, and the log gets one warning for all of them.
#[test]
fn queue_overrun_is_rejected_and_logged_once() {
    use nvme_spec::fabrics::{ConnectCmd, ConnectData};
    use nvme_spec::opcode::admin;
    use nvme_spec::{CommandId, ControllerId, QueueId, Sqe, Status};
    use nvmf_tcp::{HostConn, HostConnConfig, HostEvent};
    use std::io::{Read, Write};

    let dir = Scratch::new("overrun");
    let log = dir.0.join("serve.log");
    let (_t, a) = serve_ram(&log);
    let mut s = std::net::TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut host = HostConn::new(HostConnConfig::default());
    let mut out = Vec::new();
    host.encode_icreq(&mut out);
    let mut sqe = ConnectCmd {
        recfmt: 0,
        qid: QueueId(0),
        sqsize: 31,
        cattr: 0,
        kato: 10_000,
    }
    .to_sqe(CommandId(0));
    let data = ConnectData {
        hostid: [7; 16],
        cntlid: ControllerId(0xFFFF),
        subnqn: NQN.into(),
        hostnqn: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000ee".into(),
    }
    .encode();
    sqe.set_sgl_icd(data.len() as u32);
    // The ICReq must be answered before capsules can be encoded with the negotiated framing.
    s.write_all(&out).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut len = 0;
    let mut next = |s: &mut std::net::TcpStream, host: &mut HostConn| loop {
        if let Some((ev, n)) = host.decode_one(&buf[..len]).unwrap() {
            let r = match ev {
                HostEvent::Established { .. } => None,
                HostEvent::Response(c) => Some(c),
                other => panic!("{other:?}"),
            };
            buf.copy_within(n..len, 0);
            len -= n;
            return r;
        }
        let n = s.read(&mut buf[len..]).unwrap();
        assert!(n > 0, "target closed the connection");
        len += n;
    };
    assert!(next(&mut s, &mut host).is_none());
    let mut out = Vec::new();
    host.encode_capsule(&mut out, &sqe, &data);
    s.write_all(&out).unwrap();
    let c = next(&mut s, &mut host).expect("Connect response");
    assert!(c.status.is_success(), "{c:?}");
    // 200 Keep Alives in one write.
    let mut out = Vec::new();
    for cid in 1..=200u16 {
        host.encode_capsule(&mut out, &Sqe::new(admin::KEEP_ALIVE, CommandId(cid)), &[]);
    }
    s.write_all(&out).unwrap();
    let mut rejected = 0;
    for _ in 0..200 {
        let c = next(&mut s, &mut host).expect("a response per command");
        if c.status == Status::CMD_SEQ_ERROR {
            rejected += 1;
        } else {
            assert!(c.status.is_success(), "{c:?}");
        }
    }
    assert!(
        rejected >= 100,
        "only {rejected} of 200 beyond a 32-entry queue were rejected"
    );
    drop(s);
    let lines = count(&log, "host exceeded the queue depth");
    assert!(
        (1..=2).contains(&lines),
        "{rejected} overruns wrote {lines} lines"
    );
}
