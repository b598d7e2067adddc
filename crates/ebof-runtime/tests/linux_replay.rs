//! Replay the admin-queue bytes the real Linux 6.1 initiator sent (`nvme connect`, then its
//! controller bring-up and namespace scan; captured by tests/interop/capture-linux-pdus.sh) into
//! the target, with no sockets, and check every command it issued is answered successfully.

mod common;

use ebof_runtime::conn::{ConnCore, Step};
use nvmf_target::{ListenerInfo, Target, TargetLimits};
use nvmf_tcp::{HostConn, HostConnConfig, HostEvent, TargetConnConfig};
use std::sync::Arc;
use std::time::Instant;

fn replay(file: &str, digests: bool) {
    let path = format!(
        "{}/../nvmf-tcp/tests/golden/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap();
    let sub = common::subsystem("nqn.2026-11.io.ebof:golden", common::ram(64 << 20), None);
    let local = "10.77.0.1:4420".parse().unwrap();
    let target = Arc::new(Target::new(
        vec![sub],
        vec![ListenerInfo {
            addr: local,
            portid: 1,
            tls: Default::default(),
            transport: Default::default(),
        }],
        TargetLimits::default(),
        Instant::now(),
    ));
    let mut core = ConnCore::new(target, TargetConnConfig::default(), local, Instant::now());
    for chunk in bytes.chunks(1500) {
        assert_eq!(core.feed(chunk), chunk.len());
        match core.process(Instant::now(), &mut |_: &mut nvmf_target::Queue, _: u16| {
            panic!("RAM never offloads")
        }) {
            Step::Continue => {}
            Step::Close(e) => panic!("{file}: target closed: {e:?}"),
        }
        core.flush_completions();
    }
    // Decode what the target answered, as the host would.
    let mut cfg = HostConnConfig::default();
    cfg.digests.hdgst = digests;
    cfg.digests.ddgst = digests;
    let mut host = HostConn::new(cfg);
    host.encode_icreq(&mut Vec::new());
    let out = core.take_output();
    let mut pos = 0;
    let mut responses = 0;
    while let Some((ev, n)) = host.decode_one(&out[pos..]).unwrap() {
        pos += n;
        if let HostEvent::Response(cqe) = ev {
            responses += 1;
            assert!(
                cqe.status.is_success(),
                "{file}: command {} failed: {}",
                cqe.cid,
                cqe.status
            );
        }
    }
    assert_eq!(pos, out.len());
    // Connect, property get/set, identify, features, keep-alive... (AERs stay outstanding).
    assert!(responses >= 8, "{file}: only {responses} responses");
}

#[test]
fn linux_admin_bring_up_replays_cleanly() {
    replay("linux-6.1-3-plain.bin", false);
    replay("linux-6.1-0-hdgst-ddgst.bin", true);
}
