//! Hosts never give up on a path for good (issue 34): after `ebof ctl subsystem remove` on a
//! running `ebof serve`, a host's reconnect is refused with DNR clear (a Linux 6.10+ host
//! deletes its controller on DNR, `nvmf_should_reconnect`) until the subsystem is added back,
//! when it connects again; a subsystem never served is refused with DNR. And a box that starts
//! does not accept a Connect before its configuration is applied (the subsystems exist before
//! the NVMe listener does). Through the `nvmf-host` library, as a host would.

mod common;

use common::served::{NQN, ctl, serve};
use common::{Target, free_port};
use nvme_spec::Status;
use nvme_spec::fabrics::{IATTR_CONNECT_DATA, connect_data_off};
use nvmf_host::{Controller, HostConfig, HostError};
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

const NEVER: &str = "nqn.2026-11.io.ebof:never-served";

/// Connect an admin queue to `subnqn` at `addr`: Ok, or the Connect's status and DW0.
fn connect(addr: SocketAddr, subnqn: &str) -> Result<(), (Status, u32)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match Controller::connect(addr, subnqn, &HostConfig::default()).await {
            Ok(c) => {
                drop(c);
                Ok(())
            }
            Err(HostError::ConnectRejected { status, dw0 }) => Err((status, dw0)),
            Err(e) => panic!("connect to {subnqn}: not a Connect rejection: {e}"),
        }
    })
}

/// Refused as an unknown subsystem (Invalid Parameters at SUBNQN), DNR as given.
fn assert_refused(r: Result<(), (Status, u32)>, dnr: bool, what: &str) {
    let (status, dw0) = r.expect_err(what);
    assert_eq!((status.sct, status.sc), (1, 0x82), "{what}: {status}");
    assert_eq!(status.dnr, dnr, "{what}: {status}");
    assert_eq!(
        dw0,
        u32::from(connect_data_off::SUBNQN) | IATTR_CONNECT_DATA,
        "{what}"
    );
}

#[test]
fn removed_subsystem_is_retried_never_served_is_not() {
    let s = serve();
    let addr = s.t.addr;
    connect(addr, NQN).expect("connect to the served subsystem");
    assert_refused(connect(addr, NEVER), true, "never served");

    let o = ctl(&s, &["subsystem", "remove", NQN]);
    assert!(o.ok, "{}", o.stderr);
    // Linux 6.12 logged "Removing controller (16770)" (0x4182) here and never came back.
    assert_refused(connect(addr, NQN), false, "removed while running");
    assert_refused(connect(addr, NQN), false, "removed, asked again");
    assert_refused(connect(addr, NEVER), true, "never served, after a removal");

    let o = ctl(&s, &["subsystem", "add", NQN]);
    assert!(o.ok, "{}", o.stderr);
    let o = ctl(&s, &["ns", "add", NQN, "--ram", "16M"]);
    assert!(o.ok, "{}", o.stderr);
    connect(addr, NQN).expect("the retry after the subsystem is back");

    // Removed a second time: still retried.
    let o = ctl(&s, &["subsystem", "remove", NQN]);
    assert!(o.ok, "{}", o.stderr);
    assert_refused(connect(addr, NQN), false, "removed again");
}

/// How a host probing a starting box fared: Connects refused at the transport (nothing
/// listening yet) before the first answer, and that answer.
struct Probe {
    refused: u32,
    answer: Result<(), (Status, u32)>,
}

/// Connect to `subnqn` at `addr` every few milliseconds until the box answers (bounded).
fn probe_until_answered(addr: SocketAddr, subnqn: &str) -> Probe {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut refused = 0;
    rt.block_on(async {
        loop {
            let answer = match Controller::connect(addr, subnqn, &HostConfig::default()).await {
                Ok(_) => Ok(()),
                Err(HostError::ConnectRejected { status, dw0 }) => Err((status, dw0)),
                Err(_) if Instant::now() < deadline => {
                    refused += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                Err(e) => panic!("{subnqn} never answered at {addr}: {e}"),
            };
            return Probe { refused, answer };
        }
    })
}

#[test]
fn a_starting_box_accepts_no_connect_before_its_configuration() {
    // Enough namespaces that opening them takes a while: a host knocking meanwhile must find
    // nothing listening (connection refused: it retries), never the box without its subsystem
    // (Invalid Parameters with DNR: a Linux 6.10+ host would delete its controller).
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let nqn = "nqn.2026-11.io.ebof:starting";
    let mut cfg = format!(
        "[target]\nmax_namespaces = 512\ncores = [0]\n\n[[listeners]]\naddress = \"127.0.0.1\"\n\
         port = {port}\n\n[[subsystems]]\nnqn = \"{nqn}\"\nallow_any_host = true\n"
    );
    for nsid in 1..=512 {
        cfg.push_str(&format!(
            "[[subsystems.namespaces]]\nnsid = {nsid}\nbackend = \"ram\"\nsize = \"1M\"\n"
        ));
    }
    let path = dir.path().join("starting.toml");
    std::fs::write(&path, cfg).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let prober = std::thread::spawn(move || probe_until_answered(addr, nqn));
    // Give the prober a head start, so it knocks while the box starts.
    std::thread::sleep(Duration::from_millis(50));
    let t = Target::spawn(
        &["serve", "--config", path.to_str().unwrap()],
        addr,
        Stdio::null(),
    );
    let probe = prober.join().unwrap();
    drop(t);
    assert!(
        probe.answer.is_ok(),
        "the first Connect the box answered was refused: {:?}",
        probe.answer
    );
    println!(
        "{} Connects refused at the transport before the box answered",
        probe.refused
    );
    assert!(
        probe.refused > 0,
        "the probe did not knock before the box listened"
    );
}
