//! Thin provisioning as a host sees it (Identify Namespace NSFEAT bit 0 and NUSE), through the
//! queue state machine with no transport: RAM and file namespaces start empty, grow by what is
//! written (whole pages or file-system blocks) and shrink on deallocate; a RAM namespace pinned
//! for RDMA and a namespace whose backend is not sparse report every block as used.

mod common;

use common::Host;
use ebof_backend::BackendSpec;
use nvme_spec::identify::{IdentifyNamespace, cns, nsfeat};
use nvme_spec::opcode::{DSM_ATTR_DEALLOCATE, io};
use nvme_spec::{CommandId, NamespaceId, Sqe};
use nvmf_target::{Namespace, Subsystem, Target};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

const NQN: &str = "nqn.2026-11.io.ebof:thin";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000071e";
/// 1 MiB namespaces of 512-byte blocks.
const SIZE: u64 = 1 << 20;
const BLOCKS: u64 = SIZE / 512;

fn target(backends: Vec<Arc<dyn ebof_backend::Backend>>) -> Arc<Target> {
    let namespaces = backends
        .into_iter()
        .zip(1u32..)
        .map(|(b, nsid)| Arc::new(Namespace::new(nsid, b, 512, [nsid as u8; 16])))
        .collect();
    let sub = Subsystem {
        nqn: NQN.into(),
        serial: "THIN1".into(),
        model: "ebof".into(),
        allow_any_host: true,
        hosts: vec![],
        namespaces,
        ns_hosts: Default::default(),
    };
    Arc::new(Target::new(
        vec![sub],
        vec![],
        Default::default(),
        Instant::now(),
    ))
}

/// An admin queue and an I/O queue of one host.
fn connect(t: &Arc<Target>) -> (Host, Host) {
    let local = SocketAddr::from(([127, 0, 0, 1], 4420));
    let mut admin = Host::new(t, local, NQN, HOST);
    let c = admin.connect(0, 0xFFFF);
    assert!(c.status.is_success(), "{c:?}");
    admin.enable();
    let mut io = Host::new(t, local, NQN, HOST);
    assert!(io.connect(1, c.dw0 as u16).status.is_success());
    (admin, io)
}

/// (NSFEAT, NUSE, NSZE, NCAP) of `nsid`.
fn usage(admin: &mut Host, nsid: u32) -> (u8, u64, u64, u64) {
    let (s, d) = admin.identify(cns::NS, nsid);
    assert!(s.is_success(), "{s:?}");
    let id = IdentifyNamespace::decode(&d).expect("Identify Namespace");
    (id.nsfeat, id.nuse, id.nsze, id.ncap)
}

/// One 512-byte block written at `lba`.
fn write(io: &mut Host, nsid: u32, lba: u64) {
    let mut sqe = Sqe::new(io::WRITE, CommandId(7));
    sqe.set_nsid(NamespaceId(nsid));
    sqe.set_slba(lba);
    sqe.set_nlb(1);
    sqe.set_sgl_icd(512);
    let c = io.cmd(sqe, &[0x5A; 512]).0;
    assert!(c.status.is_success(), "{c:?}");
}

/// Dataset Management, Deallocate, of `nlb` blocks from `slba`.
fn deallocate(io: &mut Host, nsid: u32, slba: u64, nlb: u32) {
    let mut range = [0u8; 16];
    range[4..8].copy_from_slice(&nlb.to_le_bytes());
    range[8..16].copy_from_slice(&slba.to_le_bytes());
    let mut sqe = Sqe::new(io::DATASET_MGMT, CommandId(8));
    sqe.set_nsid(NamespaceId(nsid));
    sqe.set_cdw(10, 0); // one range
    sqe.set_cdw(11, DSM_ATTR_DEALLOCATE);
    sqe.set_sgl_icd(16);
    let c = io.cmd(sqe, &range).0;
    assert!(c.status.is_success(), "{c:?}");
}

/// Writes one block in each of 16 distinct 4 KiB pages, checks that NUSE counts exactly those
/// pages (8 blocks each: the backend allocates whole pages or file-system blocks), then
/// deallocates the first half and checks that NUSE drops by as much.
fn grows_and_shrinks(admin: &mut Host, io: &mut Host, nsid: u32) {
    let (feat, nuse, nsze, ncap) = usage(admin, nsid);
    assert_ne!(feat & nsfeat::THINP, 0, "thin bit for namespace {nsid}");
    assert_eq!(
        (nuse, nsze, ncap),
        (0, BLOCKS, BLOCKS),
        "fresh namespace {nsid}"
    );
    for page in 0..16u64 {
        write(io, nsid, page * 8);
    }
    assert_eq!(
        usage(admin, nsid).1,
        16 * 8,
        "after writes, namespace {nsid}"
    );
    // Rewriting a block takes no more space.
    write(io, nsid, 0);
    assert_eq!(
        usage(admin, nsid).1,
        16 * 8,
        "after a rewrite, namespace {nsid}"
    );
    deallocate(io, nsid, 0, 8 * 8);
    assert_eq!(
        usage(admin, nsid).1,
        8 * 8,
        "after deallocate, namespace {nsid}"
    );
}

#[test]
fn ram_and_file_namespaces_report_what_they_hold() {
    let dir = tempfile::tempdir().unwrap();
    let ram = ebof_backend::open(&BackendSpec::Ram { size: SIZE }).unwrap();
    let file = ebof_backend::open(&BackendSpec::File {
        path: dir.path().join("thin.img"),
        size: Some(SIZE),
    })
    .unwrap();
    let t = target(vec![ram, file]);
    let (mut admin, mut io) = connect(&t);
    grows_and_shrinks(&mut admin, &mut io, 1);
    grows_and_shrinks(&mut admin, &mut io, 2);
    // The I/O command set independent Identify Namespace carries the same bit.
    let (s, d) = admin.identify(cns::CS_INDEP_NS, 2);
    assert!(s.is_success(), "{s:?}");
    assert_ne!(d[0] & nsfeat::THINP, 0, "CNS 08h NSFEAT");
}

#[test]
fn a_ram_namespace_pinned_for_dma_is_no_longer_thin() {
    let ram = ebof_backend::open(&BackendSpec::Ram { size: SIZE }).unwrap();
    let t = target(vec![ram.clone()]);
    let (mut admin, mut io) = connect(&t);
    write(&mut io, 1, 0);
    assert_eq!(usage(&mut admin, 1).1, 8);
    // An RDMA device registered the memory: deallocation now zero-fills in place, so the
    // namespace holds every block it ever had and says it is fully used.
    assert!(ram.pin_for_dma().is_some());
    let (feat, nuse, nsze, _) = usage(&mut admin, 1);
    assert_eq!(feat & nsfeat::THINP, 0);
    assert_eq!(nuse, nsze);
}
