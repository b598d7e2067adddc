//! A `ebof serve` with the management socket and metrics, and the `ebof ctl` / `ebof perf`
//! calls the control-plane tests (`ctl.rs`, `churn.rs`) make against it.

use super::{Output, Target, ebof, free_port};
use ebof_api::Client;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

pub const NQN: &str = "nqn.2026-11.io.ebof:default";
pub const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:0000000a-0000-0000-0000-00000000000a";
pub const HOST_B: &str = "nqn.2014-08.org.nvmexpress:uuid:0000000b-0000-0000-0000-00000000000b";

pub struct Served {
    pub t: Target,
    pub _dir: tempfile::TempDir,
    pub sock: PathBuf,
    pub metrics: SocketAddr,
}

pub fn serve() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ebof.sock");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = dir.path().join("serve.log");
    let t = Target::spawn_logged(
        &[
            "serve",
            "--listen",
            &addr.to_string(),
            "--ram",
            "64M",
            "--cores",
            "0",
            "--mgmt-socket",
            sock.to_str().unwrap(),
            "--metrics-listen",
            &metrics.to_string(),
            // Tests add file namespaces in temporary directories (issue 32: the API makes
            // files only in pools and data directories).
            "--mgmt-data-dir",
            std::env::temp_dir().to_str().unwrap(),
        ],
        addr,
        &log,
    );
    // The API is up before the NVMe listener; make sure it is this serve's (a port picked by
    // free_port could, rarely, be someone else's), with its log if not.
    let st = Client::new(&sock).state().unwrap_or_else(|e| {
        panic!(
            "{e}\nserve log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    assert_eq!(st.listeners[0].address, addr.to_string());
    Served {
        t,
        _dir: dir,
        sock,
        metrics,
    }
}

pub fn ctl(s: &Served, args: &[&str]) -> Output {
    ctl_at(&s.sock, args)
}

/// `ebof ctl --socket SOCK ARGS`.
pub fn ctl_at(sock: &Path, args: &[&str]) -> Output {
    let mut a = vec!["ctl", "--socket", sock.to_str().unwrap()];
    a.extend_from_slice(args);
    ebof(&a)
}

pub fn state(s: &Served) -> Value {
    state_at(&s.sock)
}

/// `ebof ctl --socket SOCK show --json`; on failure with the log of the serve whose socket it
/// is (`serve.log` beside it, where [`serve`] and [`serve_file`] put both).
pub fn state_at(sock: &Path) -> Value {
    let o = ctl_at(sock, &["show", "--json"]);
    assert!(
        o.ok,
        "{}\nserve log:\n{}",
        o.stderr,
        std::fs::read_to_string(sock.with_file_name("serve.log")).unwrap_or_default()
    );
    serde_json::from_str(&o.stdout).unwrap()
}

/// [`perf_args`] through the listener on `port`.
pub fn perf_args_at(port: &str, hostnqn: &str, extra: &[&str]) -> Vec<String> {
    let target = ["-a", "127.0.0.1", "-s", port, "-n", NQN].map(str::to_string);
    let mut a = vec!["perf".to_string()];
    a.extend(target);
    a.extend(["--hostnqn", hostnqn, "--json"].map(str::to_string));
    a.extend(extra.iter().map(|x| x.to_string()));
    a
}

/// `ebof perf` on namespace `nsid` of `port` as HOST_A, with extra arguments; JSON output.
pub fn perf_on(port: &str, nsid: u32, extra: &[&str]) -> Output {
    let nsid = nsid.to_string();
    let mut e = vec!["--nsid", nsid.as_str()];
    e.extend_from_slice(extra);
    let a = perf_args_at(port, HOST_A, &e);
    ebof(&a.iter().map(String::as_str).collect::<Vec<_>>())
}

/// `ebof ctl ARGS` must fail with exactly one error line carrying `code`, and change nothing.
pub fn rejected(s: &Served, args: &[&str], code: &str) {
    rejected_at(&s.sock, args, code, "");
}

/// [`rejected`] on the serve behind `sock`; a non-empty `field` must be named too
/// (`FIELD: …`).
pub fn rejected_at(sock: &Path, args: &[&str], code: &str, field: &str) {
    let before = state_at(sock);
    let o = ctl_at(sock, args);
    assert!(!o.ok, "{args:?} succeeded: {}", o.stdout);
    assert_eq!(o.stderr.lines().count(), 1, "{args:?}: {}", o.stderr);
    assert!(
        o.stderr.contains(&format!("({code})")),
        "{args:?}: {}",
        o.stderr
    );
    if !field.is_empty() {
        assert!(
            o.stderr.contains(&format!("{field}: ")),
            "{args:?}: no field {field}: {}",
            o.stderr
        );
    }
    let mut after = state_at(sock);
    // Controllers come and go with the tests' own perf runs, not with the request; so do the
    // bytes the namespaces hold and the file systems' free space.
    after["controllers"] = before["controllers"].clone();
    let mut before = before;
    without_usage(&mut before);
    without_usage(&mut after);
    assert_eq!(before, after, "{args:?} changed the state");
}

/// `state` with what changes by itself taken out of every namespace: the bytes it holds
/// (`allocated_bytes`: the tests' own I/O) and its file system's figures (other writers).
pub fn without_usage(state: &mut Value) {
    for sub in state["subsystems"].as_array_mut().into_iter().flatten() {
        for ns in sub["namespaces"].as_array_mut().into_iter().flatten() {
            if let Some(o) = ns.as_object_mut() {
                o.remove("allocated_bytes");
                o.remove("filesystem");
            }
        }
    }
    // A pool's file system figures move with other writers; so does what its files hold, and
    // an uncapped pool's free bytes (the file system's available bytes).
    for pool in state["pools"].as_array_mut().into_iter().flatten() {
        if let Some(o) = pool.as_object_mut() {
            o.remove("filesystem");
            o.remove("used_bytes");
            if o.get("size_limit").is_none_or(Value::is_null) {
                o.remove("free_bytes");
            }
        }
    }
}

/// Serve `config` (a file) with a management socket in `dir`; returns the socket.
pub fn serve_file(config: &Path, dir: &Path, addr: SocketAddr) -> (Target, PathBuf) {
    let sock = dir.join("ebof.sock");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("serve.log"))
        .unwrap();
    let t = Target::spawn(
        &[
            "serve",
            "-c",
            config.to_str().unwrap(),
            "--cores",
            "0",
            "--mgmt-socket",
            sock.to_str().unwrap(),
        ],
        addr,
        Stdio::from(log),
    );
    (t, sock)
}
