//! The README's and the user guide's (`docs/guide/`) examples, run as written: the `ebof serve`
//! lines of the README's quick start and of the guide's Serving page (validated with
//! --print-config) and the host transcript (discover, identify, perf) against `ebof serve` on the
//! embedded default, plus `ebof discover`'s fallback from 8009 to 4420. The well-known ports are
//! needed; when they are taken the host test says so and skips. Servers are killed by PID.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};

use common::{EBOF, Target, ebof};

const README: &str = include_str!("../../../README.md");
/// The guide's pages whose examples run here.
const SERVING: &str = include_str!("../../../docs/guide/serving.md");
const HOST_TOOLS: &str = include_str!("../../../docs/guide/host-tools.md");
const FLEET: &str = include_str!("../../../docs/guide/fleet.md");

const DEFAULT_NQN: &str = "nqn.2026-11.io.ebof:default";

/// The first fenced `lang` block after `heading` in `page` (the README or a guide page).
fn doc(page: &'static str, heading: &str, lang: &str) -> &'static str {
    let at = page
        .find(heading)
        .unwrap_or_else(|| panic!("the page has no {heading:?}"));
    let fence = format!("```{lang}\n");
    let start = at + page[at..].find(&fence).expect("a fenced block") + fence.len();
    let len = page[start..].find("```").expect("a closing fence");
    &page[start..start + len]
}

fn words(line: &str) -> Vec<String> {
    let cmd = line.split(" #").next().unwrap_or(line);
    cmd.split_whitespace().map(str::to_string).collect()
}

fn run(words: &[String]) -> common::Output {
    let args: Vec<&str> = words.iter().skip(1).map(String::as_str).collect();
    ebof(&args)
}

/// The servers an example started (`ebof serve … &`), killed by PID when the test ends.
struct Servers(Vec<std::process::Child>);

impl Servers {
    /// `ebof ARGS` in `dir`, in the background, its output discarded.
    fn spawn(&mut self, args: &[&str], dir: &std::path::Path) {
        let c = Command::new(EBOF)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn ebof serve");
        self.0.push(c);
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn port_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

#[test]
fn readme_serve_examples_are_valid() {
    // Each `ebof serve` line of the guide's Serving page and of the README's quick start, as
    // written, with --print-config added: that validates the flags and configuration without
    // binding 0.0.0.0 or creating /var/lib files.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ebof.toml"),
        doc(SERVING, "### Configuration file", "toml"),
    )
    .unwrap();
    let mut serve_lines: Vec<Vec<String>> = doc(SERVING, "## Serving", "sh")
        .lines()
        .filter(|l| l.starts_with("ebof serve"))
        .map(words)
        .collect();
    assert!(serve_lines.len() >= 5, "{serve_lines:?}");
    let quick: Vec<Vec<String>> = doc(README, "## Quick start", "sh")
        .lines()
        .filter(|l| l.starts_with("ebof serve"))
        .map(|l| words(l).into_iter().filter(|w| w != "&").collect())
        .collect();
    assert_eq!(quick.len(), 2, "the quick start serves twice: {quick:?}");
    serve_lines.extend(quick);
    for w in serve_lines {
        let mut args: Vec<&str> = w.iter().skip(1).map(String::as_str).collect();
        if !args.contains(&"--print-config") {
            args.push("--print-config");
        }
        let o = Command::new(EBOF)
            .args(&args)
            .current_dir(dir.path())
            .output()
            .expect("run ebof");
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{w:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(stdout.contains("[[subsystems]]"), "{w:?}: {stdout}");
    }
}

#[test]
fn readme_host_examples_run_against_the_default_serve() {
    // The README's commands use the well-known ports; on a machine where something else holds
    // them the test cannot run as written, so it says why and passes.
    for port in [4420, 8009] {
        if !port_free(port) {
            eprintln!("SKIP readme_host_examples: 127.0.0.1:{port} is in use on this machine");
            return;
        }
    }
    let addr: SocketAddr = "127.0.0.1:4420".parse().unwrap();
    let default_serve = Target::spawn(&["serve"], addr, Stdio::null());
    let mut ran = 0;
    for line in HOST_TOOLS.lines().filter_map(|l| l.strip_prefix("$ ")) {
        let mut w = words(line);
        assert_eq!(w[0], "ebof", "{line}");
        // Run perf for 1 s instead of the README's 10 s: the machine is shared.
        if let Some(i) = w.iter().position(|a| a == "--runtime") {
            w[i + 1] = "1s".into();
        }
        let o = run(&w);
        assert!(o.ok, "README example {line:?} failed: {}", o.stderr);
        match w[1].as_str() {
            "discover" => {
                assert!(
                    o.stdout.contains(&format!("subnqn:  {DEFAULT_NQN}")),
                    "{}",
                    o.stdout
                );
                assert!(o.stdout.contains("trsvcid: 4420"), "{}", o.stdout);
            }
            "identify" => assert!(
                o.stdout.contains("NVME Identify Controller:"),
                "{}",
                o.stdout
            ),
            "perf" => assert!(o.stdout.contains("read : IOPS="), "{}", o.stdout),
            other => panic!("README example of an unknown subcommand {other}"),
        }
        ran += 1;
    }
    assert_eq!(ran, 3, "the transcript: discover, identify, perf");

    // Plain `ebof discover -a 127.0.0.1` uses port 8009, served by the default.
    let o = ebof(&["discover", "-a", "127.0.0.1"]);
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stdout.contains(DEFAULT_NQN), "{}", o.stdout);
    assert!(!o.stderr.contains("trying"), "{}", o.stderr);
    drop(default_serve);

    // A target with no discovery listener (`--listen` drops the default one): without -s,
    // discover falls back from the refused 8009 to 4420 and says so.
    let _io_only = Target::spawn(
        &["serve", "--listen", "127.0.0.1:4420"],
        addr,
        Stdio::null(),
    );
    assert!(
        port_free(8009),
        "--listen must not keep the default discovery listener"
    );
    let o = ebof(&["discover", "-a", "127.0.0.1"]);
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stdout.contains(DEFAULT_NQN), "{}", o.stdout);
    assert!(
        o.stderr
            .contains("nothing listens on 127.0.0.1:8009 (the discovery port); trying the NVMe port 127.0.0.1:4420"),
        "{}",
        o.stderr
    );
    // With an explicit -s there is no fallback.
    let o = ebof(&["discover", "-a", "127.0.0.1", "-s", "8009"]);
    assert!(!o.ok);
    assert!(!o.stderr.contains("trying"), "{}", o.stderr);
}

/// The guide's fleet example (docs/guide/fleet.md), as written: its configuration files (box 2's derived from box
/// 1's as the comment says) and its commands, in its order: box 1 announces itself to a CDC
/// that is not up yet, the CDC lists box 2, `ebof discover` against the CDC sees both boxes,
/// and a subsystem added on box 2 reaches it. Needs root (the sockets are under /run/ebof);
/// servers are killed by PID.
#[test]
fn readme_fleet_example_runs() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP readme_fleet_example: the README's sockets are under /run/ebof (root)");
        return;
    }
    for a in ["127.0.0.10:8009", "127.0.0.11:8009", "127.0.0.12:8009"] {
        if TcpListener::bind(a).is_err() {
            eprintln!("SKIP readme_fleet_example: {a} is in use on this machine");
            return;
        }
    }
    let section = &FLEET[FLEET.find("## The fleet").expect("a Fleet section")..];
    let block = |name: &str| -> String {
        let at = section
            .find(&format!("```toml\n# {name}"))
            .unwrap_or_else(|| panic!("no {name} block"));
        let body = &section[at + "```toml\n".len()..];
        body[..body.find("```").expect("closing fence")].to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    let box1 = block("fleet-box1.toml");
    let box2 = box1
        .replace("127.0.0.11", "127.0.0.12")
        .replace("box1", "box2")
        .lines()
        .filter(|l| !l.starts_with("cdc = "))
        .collect::<Vec<_>>()
        .join("\n");
    for (name, text) in [
        ("fleet-cdc.toml", block("fleet-cdc.toml")),
        ("fleet-box1.toml", box1),
        ("fleet-box2.toml", box2),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let cmds: Vec<Vec<String>> = doc(FLEET, "## The fleet", "sh")
        .lines()
        .filter(|l| l.starts_with("ebof "))
        .map(|l| words(l).into_iter().filter(|w| w != "&").collect())
        .collect();
    let mut servers = Servers(Vec::new());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut ran = 0;
    for w in cmds {
        let args: Vec<&str> = w.iter().skip(1).map(String::as_str).collect();
        if w[1] == "serve" {
            servers.spawn(&args, dir.path());
            ran += 1;
            continue;
        }
        // Each later command is retried (bounded) until the fleet has converged on what it
        // shows: the boxes come up, announce, and the CDC reads them.
        let expect: &[&str] = match w[1].as_str() {
            "discover" => &["nqn.2026-11.io.ebof:box1", "nqn.2026-11.io.ebof:box2"],
            "ctl" if args.contains(&"list") => &["127.0.0.11:8009", "127.0.0.12:8009"],
            _ => &[],
        };
        loop {
            let o = ebof(&args);
            if o.ok && expect.iter().all(|e| o.stdout.contains(e)) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "README fleet example {w:?}: {}{}",
                o.stdout,
                o.stderr
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        ran += 1;
    }
    assert_eq!(ran, 6, "the README's fleet example has six commands");
    // The subsystem added last on box 2 reaches the CDC's log.
    loop {
        let o = ebof(&["discover", "-a", "127.0.0.10", "-s", "8009"]);
        if o.ok && o.stdout.contains("nqn.2026-11.io.ebof:box2-b") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", o.stdout);
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The guide's "Replicated volumes" example (docs/guide/fleet.md), run as written: a witness and two boxes on
/// loopback addresses, the primary in sync, `ebof perf --verify` through it, `kill -9` of the
/// primary, the secondary promoted by the witness, and `--verify-only` through it.
#[test]
fn readme_mirror_example_runs() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP readme_mirror_example: the README's sockets are under /run/ebof (root)");
        return;
    }
    for a in ["127.0.0.21:4420", "127.0.0.22:4420", "127.0.0.23:4420"] {
        if TcpListener::bind(a).is_err() {
            eprintln!("SKIP readme_mirror_example: {a} is in use on this machine");
            return;
        }
    }
    let section = &FLEET[FLEET
        .find("### Replicated volumes")
        .expect("a Replicated volumes section")..];
    let block = |name: &str| -> String {
        let at = section
            .find(&format!("```toml\n# {name}"))
            .unwrap_or_else(|| panic!("no {name} block"));
        let body = &section[at + "```toml\n".len()..];
        body[..body.find("```").expect("closing fence")].to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    let a = block("mirror-a.toml");
    let b = a
        .replace("127.0.0.22", "127.0.0.X")
        .replace("127.0.0.21", "127.0.0.22")
        .replace("127.0.0.X", "127.0.0.21")
        .replace("cntlid_min = 1 ", "cntlid_min = 1000 ")
        .replace("cntlid_max = 999", "cntlid_max = 1999")
        .replace("mirror-a", "mirror-b")
        .replace("role = \"primary\"", "role = \"secondary\"");
    for (name, text) in [
        ("mirror-w.toml", block("mirror-w.toml")),
        ("mirror-a.toml", a),
        ("mirror-b.toml", b),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let cmds: Vec<Vec<String>> = doc(FLEET, "### Replicated volumes", "sh")
        .lines()
        .filter(|l| l.starts_with("ebof ") || l.starts_with("kill "))
        .map(|l| words(l).into_iter().filter(|w| w != "&").collect())
        .collect();
    let mut servers = Servers(Vec::new());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let mut statuses = 0;
    let mut ran = 0;
    for w in cmds {
        ran += 1;
        if w[0] == "kill" {
            // `kill -9 %3`: the third server started (box A)
            let job: usize = w[2].trim_start_matches('%').parse().unwrap();
            let c = &mut servers.0[job - 1];
            c.kill().unwrap();
            c.wait().unwrap();
            continue;
        }
        let args: Vec<&str> = w.iter().skip(1).map(String::as_str).collect();
        if w[1] == "serve" {
            servers.spawn(&args, dir.path());
            continue;
        }
        // The first status waits for the first copy (in sync), the second for the promotion.
        let expect: &[&str] = if args.contains(&"status") {
            statuses += 1;
            if statuses == 1 {
                &["primary at epoch 1", "in-sync", "lease"]
            } else {
                &["primary at epoch 2"]
            }
        } else {
            &[]
        };
        loop {
            let out = Command::new(EBOF)
                .args(&args)
                .current_dir(dir.path())
                .output()
                .expect("run ebof");
            let o = common::Output {
                ok: out.status.success(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            };
            // Not before the primary holds its lease (a fenced primary refuses writes).
            if o.ok && expect.iter().all(|e| o.stdout.contains(e)) && !o.stdout.contains("FENCED") {
                if args.contains(&"--verify-only") {
                    println!("{}", o.stdout);
                }
                break;
            }
            assert!(
                std::time::Instant::now() < deadline && !expect.is_empty(),
                "README mirror example {w:?}: {}{}",
                o.stdout,
                o.stderr
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    assert_eq!(ran, 8, "the README's mirror example has eight commands");
}
