//! `ebof csi --controller` driven by a client nobody here wrote: Python gRPC, the newest
//! grpcio from PyPI with its default channel options, stubs generated from csi.proto by
//! grpcio-tools (tests/csi/grpcio_check.py). grpc-core ≥ 1.57 sends the percent-encoded socket
//! path as `:authority`, which h2 alone refuses (issue 35): Identity, ControllerGetCapabilities
//! and a volume's life (create twice, list, publish, unpublish, delete twice) on a real pool
//! box must all succeed.
//!
//! The client is installed by the test into a venv under target/ (`python3 -m venv`, then
//! `pip install --upgrade grpcio protobuf grpcio-tools`; pip's cache makes later runs quick).
//! Only when PyPI cannot be reached at all, and no grpcio is installed from an earlier run,
//! does the test say SKIPPED and pass.

mod common;

use common::{EBOF, Target, free_port};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "csi-grpcio-test-token-52be10";

fn wait_for(mut f: impl FnMut() -> bool, what: &str) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "waited 30 s for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A command's combined output, or why it could not run.
fn run(cmd: &mut Command) -> (bool, String) {
    match cmd.stdin(Stdio::null()).output() {
        Ok(o) => (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        ),
        Err(e) => (false, format!("{cmd:?}: {e}")),
    }
}

/// The venv's python with grpcio, protobuf and grpcio-tools at their newest, or why not
/// (`Err`: PyPI unreachable and nothing installed before: skip).
fn python() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(|t| t.join("grpcio-venv"))
        .expect("the target directory");
    let py = venv.join("bin/python");
    if !py.exists() {
        let (ok, out) = run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
        assert!(ok, "python3 -m venv {}: {out}", venv.display());
    }
    let (ok, out) = run(Command::new(&py).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--upgrade",
        "grpcio",
        "protobuf",
        "grpcio-tools",
    ]));
    if ok {
        return Ok(py);
    }
    let have = run(Command::new(&py).args(["-c", "import grpc, grpc_tools"])).0;
    let (reachable, probe) = run(Command::new(&py)
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--dest",
        ])
        .arg(venv.join("probe"))
        .arg("grpcio"));
    if reachable {
        panic!("PyPI answers, but installing grpcio, protobuf and grpcio-tools failed:\n{out}");
    }
    if have {
        eprintln!("PyPI unreachable ({probe}); using the grpcio installed before");
        return Ok(py);
    }
    Err(format!("PyPI unreachable: {}", probe.trim()))
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn python_grpcio_with_default_options_is_served() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED: Python gRPC client from PyPI: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = d.join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // One pool box on loopback.
    let io: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let api = format!("127.0.0.1:{}", free_port());
    let box_sock = d.join("box.sock");
    let cfg = d.join("box.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = {}\n\n[management]\nsocket = {:?}\nlisten = \"{api}\"\ntoken_file = {:?}\n\n[[pools]]\nname = \"default\"\ndirectory = {:?}\nsize = \"1G\"\n",
            io.port(),
            box_sock,
            token,
            d.join("pool")
        ),
    )
    .unwrap();
    let _pool = Target::spawn(
        &["serve", "--config", cfg.to_str().unwrap(), "--cores", "0"],
        io,
        Stdio::null(),
    );
    wait_for(
        || ebof_mgmt::Client::new(&box_sock).state().is_ok(),
        "the box's management socket",
    );
    let boxes = d.join("boxes.toml");
    std::fs::write(
        &boxes,
        format!("[[boxes]]\nname = \"box1\"\napi = \"{api}\"\ntoken_file = \"token\"\n"),
    )
    .unwrap();
    // The driver, its socket at a path with characters grpc-core percent-encodes.
    let sock = d.join("csi dir/csi.sock");
    let log = d.join("csi.log");
    let mut csi = Running(
        Command::new(EBOF)
            .args(["csi", "--endpoint"])
            .arg(format!("unix://{}", sock.display()))
            .args(["--controller", "--boxes"])
            .arg(&boxes)
            .env("EBOF_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn ebof csi"),
    );
    wait_for(
        || {
            if let Ok(Some(st)) = csi.0.try_wait() {
                panic!(
                    "ebof csi exited ({st}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            sock.exists()
        },
        "the CSI socket",
    );
    let (ok, out) = run(Command::new(&py)
        .arg(repo().join("tests/csi/grpcio_check.py"))
        .arg("--endpoint")
        .arg(format!("unix://{}", sock.display()))
        .arg("--proto")
        .arg(repo().join("crates/ebof-csi/proto/csi.proto"))
        .arg("--out")
        .arg(d.join("stubs"))
        .args(["--volume", "pvc-grpcio-1"]));
    println!("{out}");
    assert!(
        ok && out.contains(" passed, 0 failed"),
        "Python grpcio against ebof csi:\n{out}\n--- ebof csi log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(
        out.contains("ok   Controller.CreateVolume") && out.contains("ok   Identity.Probe"),
        "{out}"
    );
}
