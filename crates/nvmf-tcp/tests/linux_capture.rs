//! Golden vectors captured from the real Linux initiator: the host→target byte streams of
//! `nvme connect -t tcp` (plain, and with `--hdr-digest --data-digest`) + an 8 KiB direct write
//! and read + `nvme flush` + `nvme disconnect`, sent by Debian's 6.1 kernel to `ebof serve`
//! (recorded by `tests/interop/capture-linux-pdus.sh`; one file per TCP connection: the admin
//! queue and the I/O queues). Every byte must decode, and the PDUs must be what Linux is known
//! to send.

use nvme_spec::fabrics::{ConnectCmd, ConnectData};
use nvme_spec::opcode::{admin, fctype, io};
use nvmf_tcp::{TargetConn, TargetConnConfig, TargetEvent};

fn golden() -> Vec<(String, Vec<u8>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            let name = p.file_name()?.to_str()?.to_string();
            name.starts_with("linux-")
                .then(|| (name, std::fs::read(&p).unwrap()))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn linux_streams_decode_completely() {
    let files = golden();
    assert!(files.len() >= 4, "golden captures missing");
    let (mut admin_queues, mut io_queues, mut writes, mut reads) = (0, 0, 0, 0);
    for (name, bytes) in &files {
        let want_digests = name.contains("hdgst-ddgst");
        let mut t = TargetConn::new(TargetConnConfig::default());
        let mut out = Vec::new();
        let mut pos = 0;
        let mut n = 0;
        let mut is_io_queue = false;
        while let Some((ev, used)) = t
            .decode_one(&bytes[pos..], &mut out)
            .unwrap_or_else(|e| panic!("{name}: PDU {n} at byte {pos}: {e}"))
        {
            match (n, ev) {
                (
                    0,
                    TargetEvent::Established {
                        hpda,
                        digests,
                        maxr2t,
                    },
                ) => {
                    // Linux: HPDA 0, MAXR2T 0, digests only when asked for.
                    assert_eq!((hpda, maxr2t), (0, 0), "{name}");
                    assert_eq!(digests.hdgst, want_digests, "{name}");
                    assert_eq!(digests.ddgst, want_digests, "{name}");
                }
                (0, other) => panic!("{name}: first PDU is not an ICReq: {other:?}"),
                (1, TargetEvent::Command { sqe, icd }) => {
                    assert_eq!(
                        (sqe.opcode(), sqe.fctype()),
                        (admin::FABRICS, fctype::CONNECT),
                        "{name}"
                    );
                    assert_eq!(icd.len(), 1024, "{name}: Connect data travels in-capsule");
                    assert_eq!(sqe.sgl_type(), 0x01, "{name}");
                    let c = ConnectCmd::from_sqe(&sqe);
                    let d = ConnectData::decode(icd).unwrap();
                    assert_eq!(d.subnqn, "nqn.2026-11.io.ebof:golden");
                    assert!(d.hostnqn.starts_with("nqn."));
                    if c.qid.0 == 0 {
                        admin_queues += 1;
                        assert_eq!(c.sqsize, 31, "{name}: admin SQSIZE (NVMF_AQ_DEPTH - 1)");
                        assert_eq!(d.cntlid.0, 0xFFFF, "{name}: dynamic controller");
                        assert!(c.kato > 0, "{name}: admin Connect carries KATO");
                    } else {
                        io_queues += 1;
                        is_io_queue = true;
                        assert!(c.sqsize >= 31, "{name}: I/O SQSIZE {}", c.sqsize);
                        assert_ne!(
                            d.cntlid.0, 0xFFFF,
                            "{name}: I/O Connect names the controller"
                        );
                    }
                }
                (1, other) => panic!("{name}: second PDU is not Connect: {other:?}"),
                (_, TargetEvent::Command { sqe, icd }) => {
                    assert_eq!(sqe.psdt(), 1, "{name}: fabrics commands use SGLs");
                    match (is_io_queue, sqe.opcode()) {
                        (true, io::WRITE) => {
                            writes += 1;
                            assert_eq!(icd.len(), 8192, "{name}: 8 KiB write sent in-capsule");
                            assert_eq!(sqe.sgl_type(), 0x01, "{name}");
                        }
                        (true, io::READ) => {
                            reads += 1;
                            assert!(icd.is_empty());
                            assert_eq!(sqe.sgl_type(), 0x5A, "{name}: reads use a transport SGL");
                        }
                        _ => {}
                    }
                }
                (_, other) => panic!("{name}: unexpected {other:?}"),
            }
            pos += used;
            n += 1;
        }
        assert_eq!(
            pos,
            bytes.len(),
            "{name}: trailing bytes that are not a whole PDU"
        );
    }
    assert_eq!(admin_queues, 2, "one admin queue per session");
    assert!(io_queues >= 2);
    assert!(writes >= 2 && reads >= 2, "writes {writes} reads {reads}");
}
