//! `[target] cntlid_min`/`cntlid_max` (issue 34): two boxes that serve one subsystem together
//! hand out controller IDs from disjoint ranges, so a host that connects to both (native
//! multipath) never sees one CNTLID twice in the subsystem. Through the `nvmf-host` library.

mod common;

use common::{Target, free_port};
use nvmf_host::{Controller, HostConfig};
use std::net::SocketAddr;
use std::process::Stdio;

const NQN: &str = "nqn.2026-11.io.ebof:cntlid";

/// A box serving `NQN` with controller IDs `min..=max`.
fn box_with_range(dir: &std::path::Path, name: &str, min: u16, max: u16) -> Target {
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "[target]\ncntlid_min = {min}\ncntlid_max = {max}\n\n[management]\nsocket = \"{}\"\n\n\
             [[listeners]]\naddress = \"127.0.0.1\"\nport = {port}\n\n\
             [[subsystems]]\nnqn = \"{NQN}\"\nallow_any_host = true\n\n\
             [[subsystems.namespaces]]\nnsid = 1\nbackend = \"ram\"\nsize = \"16M\"\n",
            dir.join(format!("{name}.sock")).display()
        ),
    )
    .unwrap();
    Target::spawn(
        &["serve", "--config", cfg.to_str().unwrap()],
        addr,
        Stdio::null(),
    )
}

#[test]
fn two_boxes_of_one_subsystem_hand_out_disjoint_controller_ids() {
    let dir = tempfile::tempdir().unwrap();
    let a = box_with_range(dir.path(), "a", 1001, 1002);
    let b = box_with_range(dir.path(), "b", 2001, 2002);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cfg = HostConfig::default();
        let a1 = Controller::connect(a.addr, NQN, &cfg).await.unwrap();
        let a2 = Controller::connect(a.addr, NQN, &cfg).await.unwrap();
        let b1 = Controller::connect(b.addr, NQN, &cfg).await.unwrap();
        let mut on_a = [a1.cntlid().0, a2.cntlid().0];
        on_a.sort_unstable();
        assert_eq!(on_a, [1001, 1002]);
        assert!((2001..=2002).contains(&b1.cntlid().0), "{}", b1.cntlid().0);
        // box a's range is used up: the next Connect is refused (Controller Busy), not given
        // an ID from outside the range
        let busy = Controller::connect(a.addr, NQN, &cfg).await;
        assert!(busy.is_err(), "a third controller on a two-ID box");
    });
}
