//! Helpers shared by the `ebof` CLI tests: spawn `ebof serve` and wait for it (bounded), run an
//! `ebof` command with a timeout. Servers are killed by PID when their `Target` is dropped.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

pub mod served;

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const EBOF: &str = env!("CARGO_BIN_EXE_ebof");
/// Bound on any one CLI run.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(90);
/// Bound on `ebof serve` coming up.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A loopback port nothing listens on (bound, then released), never the same twice in one test
/// binary: the tests of a binary run in parallel, and the kernel may hand a just-released port
/// out again, so two servers could race for one port and a test would talk to the other's.
///
/// The port is taken from below the kernel's ephemeral range, never from it: the tests make
/// many client connections, and a client socket that happened to get the port as its source
/// port would stop the server from binding it; and a readiness probe connecting to a port in
/// that range before the server binds could connect to itself (TCP simultaneous open).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let (lo, hi) = non_ephemeral_ports();
    let span = u32::from(hi - lo);
    // Start where another test process (another binary, another CI job) is unlikely to look.
    let seed = std::process::id()
        .wrapping_mul(2_654_435_761)
        .wrapping_add(given.len() as u32 * 7919);
    for i in 0..span {
        let port = lo + ((seed.wrapping_add(i)) % span) as u16;
        if given.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
    panic!("no free loopback port in {lo}..{hi}");
}

/// A span of ports below the kernel's ephemeral range (`ip_local_port_range`, 32768 by default).
fn non_ephemeral_ports() -> (u16, u16) {
    let first_ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if first_ephemeral > 12_000 {
        (10_000, first_ephemeral)
    } else {
        // An unusual range: the ports above it, then.
        (61_000, 65_000)
    }
}

/// A running `ebof serve`, killed on drop.
pub struct Target {
    child: Child,
    pub addr: SocketAddr,
}

impl Target {
    /// `ebof serve --listen 127.0.0.1:FREE --ram 64M`.
    pub fn start() -> Target {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        Target::spawn(
            &["serve", "--listen", &addr.to_string(), "--ram", "64M"],
            addr,
            Stdio::null(),
        )
    }

    /// Spawn `ebof ARGS` (a serve command) and wait until `addr` accepts connections.
    pub fn spawn(args: &[&str], addr: SocketAddr, stderr: Stdio) -> Target {
        let mut cmd = Command::new(EBOF);
        cmd.args(args);
        Target::spawn_command(cmd, addr, stderr)
    }

    /// Spawn `cmd` (which runs a serve command, e.g. through `sh -c '…; exec ebof serve …'`
    /// so that the PID is the server's) and wait until `addr` accepts connections.
    pub fn spawn_command(cmd: Command, addr: SocketAddr, stderr: Stdio) -> Target {
        Target::spawn_inner(cmd, addr, stderr, None)
    }

    /// [`Target::spawn`] with its stderr written to `log`, shown if it fails to come up.
    pub fn spawn_logged(args: &[&str], addr: SocketAddr, log: &std::path::Path) -> Target {
        let mut cmd = Command::new(EBOF);
        cmd.args(args);
        let file = std::fs::File::create(log).expect("create the serve log");
        Target::spawn_inner(cmd, addr, Stdio::from(file), Some(log))
    }

    fn spawn_inner(
        mut cmd: Command,
        addr: SocketAddr,
        stderr: Stdio,
        log: Option<&std::path::Path>,
    ) -> Target {
        let shown = || {
            log.map(|p| {
                format!(
                    "\nits log:\n{}",
                    std::fs::read_to_string(p).unwrap_or_default()
                )
            })
            .unwrap_or_default()
        };
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn ebof serve");
        let mut t = Target { child, addr };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                // A socket connected to itself is not a server; nor is another process that
                // holds the port while ours failed to bind it and exited.
                // And the listening socket must be the child's own: something else that
                // answered the probe and went away would leave the test connecting to a port
                // nobody listens on yet ("connection refused").
                if s.local_addr().ok() != Some(addr) && listens(t.child.id(), addr.port()) {
                    return t;
                }
                if let Ok(Some(st)) = t.child.try_wait() {
                    panic!(
                        "ebof {args:?} exited ({st}) while something else answers on {addr}{}",
                        shown()
                    );
                }
            }
            if let Ok(Some(st)) = t.child.try_wait() {
                panic!("ebof {args:?} exited early: {st}{}", shown());
            }
            assert!(
                Instant::now() < deadline,
                "ebof {args:?} did not listen on {addr} within {START_TIMEOUT:?}{}",
                shown()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn port(&self) -> String {
        self.addr.port().to_string()
    }

    /// The server's process id (for /proc/PID).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the server process is doing, for failure messages: `running (R)`, `sleeping (S)`,
    /// … or `exited (zombie)` (its /proc entry stays until it is reaped, so existence alone
    /// says nothing), with its listening state on the test's port.
    pub fn describe(&self) -> String {
        let pid = self.child.id();
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                // pid (comm) STATE …; comm may hold spaces, so split after the last ')'.
                let rest = s.rsplit_once(')')?.1.trim_start().to_string();
                rest.split_whitespace().next().map(str::to_string)
            });
        let state = match state.as_deref() {
            Some("Z") => "exited (zombie)".to_string(),
            Some(st) => format!("alive ({st})"),
            None => "gone".to_string(),
        };
        format!(
            "pid {pid} {state}, listening on port {}: {}",
            self.addr.port(),
            listens(pid, self.addr.port())
        )
    }
}

/// Whether process `pid` holds a TCP socket listening on `port` (any address): its
/// `/proc/PID/net/tcp{,6}` LISTEN entries (state 0A) on that port, matched by inode against
/// the `socket:[INODE]` links in `/proc/PID/fd`.
fn listens(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            let on_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port);
            if on_port && *state == "0A" {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|e| {
        std::fs::read_link(e.path())
            .is_ok_and(|l| inodes.iter().any(|i| l.as_os_str() == i.as_str()))
    })
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill(); // by PID (std::process::Child)
        let _ = self.child.wait();
    }
}

pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Run the host command `ebof VERB -a 127.0.0.1 -s PORT -n NQN EXTRA...` with a timeout.
pub fn ebof_host(verb: &str, port: &str, nqn: &str, extra: &[&str]) -> Output {
    let mut args = vec![verb, "-a", "127.0.0.1", "-s", port, "-n", nqn];
    args.extend_from_slice(extra);
    ebof(&args)
}

/// Run `ebof ARGS` with a timeout, collecting its output.
pub fn ebof(args: &[&str]) -> Output {
    let mut child = Command::new(EBOF)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ebof");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + CMD_TIMEOUT;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ebof {args:?} did not finish within {CMD_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        ok: status.success(),
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}
