//! Hosts never give up on a path for good (issue 34): after `ebof ctl subsystem remove` on a
//! running `ebof serve`, a host's reconnect is refused with DNR clear (a Linux 6.10+ host
//! deletes its controller on DNR, `nvmf_should_reconnect`) until the subsystem is added back,
//! when it connects again; a subsystem never served is refused with DNR. Through the
//! `nvmf-host` library, as a host would.

mod common;

use common::served::{NQN, ctl, serve};
use nvme_spec::Status;
use nvme_spec::fabrics::{IATTR_CONNECT_DATA, connect_data_off};
use nvmf_host::{Controller, HostConfig, HostError};
use std::net::SocketAddr;

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
