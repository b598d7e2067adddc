//! Arbitrary controller PDUs into the host's queue engine (`nvmf-host`'s `QueueCore`: the
//! code under every admin and I/O queue of `ebof discover/identify/perf`), with a mix of
//! commands outstanding, and the payload decoders the host applies to what comes back.
//!
//! Input: `[mode, chunk, bytes...]`. `mode` bits 0-1: digests (header, data); bit 2: SQ flow
//! control off (a DISSQFC queue); bits 3-4: queue entries (4, 8, 32, 128); bit 5: a small
//! in-capsule limit (more writes go through R2T). `chunk`: how many bytes arrive per read.
//!
//! Before the bytes, the queue is filled with commands cycling through [`KINDS`] (Identify,
//! reads, writes in-capsule and by R2T, flush, log pages); each command that completes is
//! replaced by the next kind, up to a bound. CIDs are the slot indices, so the seeds can name
//! them: slot 0 holds kind 0 (Identify Controller), slot 1 kind 1, and so on.
//!
//! Checked, beyond "never panics": only outstanding commands complete, each once; a
//! successful read returns exactly its length; the queue's in-flight count matches ours; what
//! the queue sends (capsules, H2CData for R2Ts) decodes on the target side as whole PDUs, and
//! H2CData only for outstanding writes that were not sent in-capsule.

use super::target_conn::host_encoder;
use crate::Features;
use nvme_spec::discovery::decode_discovery_log;
use nvme_spec::identify::{
    IdentifyController, IdentifyNamespace, cns, decode_ns_id_descs, decode_ns_list,
};
use nvme_spec::log::{ErrorLogEntry, SmartLog, lid};
use nvme_spec::opcode::{admin, io};
use nvme_spec::{CommandId, NamespaceId, QueueId, Sqe};
use nvmf_host::{Completion, DataDir, QueueCore};
use nvmf_tcp::pdu::{Pdu, Role};
use nvmf_tcp::{DecodeLimits, Digests, decode_frame};
use std::collections::HashMap;

const F_DONE: u8 = 30;
const F_ERR: u8 = 31;
/// Commands submitted per input at most (initial fill included).
const MAX_SUBMITS: usize = 64;

/// One kind of command the queue keeps outstanding.
pub struct Kind {
    /// Its name, for reports.
    pub name: &'static str,
    /// Which way its data moves.
    pub dir: DataDir,
    /// Its data length in bytes.
    pub len: usize,
    sqe: fn() -> Sqe,
    decode: fn(&[u8]),
}

fn identify(c: u8) -> Sqe {
    let mut s = Sqe::new(admin::IDENTIFY, CommandId(0));
    s.set_cdw(10, u32::from(c));
    s
}

fn get_log(l: u8, len: usize) -> Sqe {
    let mut s = Sqe::new(admin::GET_LOG_PAGE, CommandId(0));
    s.set_nsid(NamespaceId(u32::MAX));
    s.set_cdw(10, u32::from(l) | (((len / 4 - 1) as u32) << 16));
    s
}

fn rw(opc: u8, blocks: u32) -> Sqe {
    let mut s = Sqe::new(opc, CommandId(0));
    s.set_nsid(NamespaceId(1));
    s.set_slba(8);
    s.set_nlb(blocks);
    s
}

/// The command mix, in the order slots are first filled.
pub const KINDS: &[Kind] = &[
    Kind {
        name: "identify-controller",
        dir: DataDir::FromController,
        len: 4096,
        sqe: || identify(cns::CTRL),
        decode: |b| drop(IdentifyController::decode(b)),
    },
    Kind {
        name: "read-8k",
        dir: DataDir::FromController,
        len: 8192,
        sqe: || rw(io::READ, 16),
        decode: |_| {},
    },
    Kind {
        name: "write-16k",
        dir: DataDir::ToController,
        len: 16384,
        sqe: || rw(io::WRITE, 32),
        decode: |_| {},
    },
    Kind {
        name: "write-1k",
        dir: DataDir::ToController,
        len: 1024,
        sqe: || rw(io::WRITE, 2),
        decode: |_| {},
    },
    Kind {
        name: "flush",
        dir: DataDir::None,
        len: 0,
        sqe: || rw(io::FLUSH, 0),
        decode: |_| {},
    },
    Kind {
        name: "identify-namespace",
        dir: DataDir::FromController,
        len: 4096,
        sqe: || identify(cns::NS),
        decode: |b| drop(IdentifyNamespace::decode(b)),
    },
    Kind {
        name: "discovery-log",
        dir: DataDir::FromController,
        len: 3072,
        sqe: || get_log(0x70, 3072),
        decode: |b| drop(decode_discovery_log(b)),
    },
    Kind {
        name: "smart-log",
        dir: DataDir::FromController,
        len: 512,
        sqe: || get_log(lid::SMART, 512),
        decode: |b| drop(SmartLog::decode(b)),
    },
    Kind {
        name: "error-log",
        dir: DataDir::FromController,
        len: 4096,
        sqe: || get_log(lid::ERROR, 4096),
        decode: |b| drop(ErrorLogEntry::decode_page(b)),
    },
    Kind {
        name: "ns-list",
        dir: DataDir::FromController,
        len: 4096,
        sqe: || identify(cns::ACTIVE_NS_LIST),
        decode: |b| drop(decode_ns_list(b)),
    },
    Kind {
        name: "ns-id-descs",
        dir: DataDir::FromController,
        len: 4096,
        sqe: || identify(cns::NS_ID_DESC_LIST),
        decode: |b| drop(decode_ns_id_descs(b)),
    },
];

/// Queue parameters from the mode byte.
pub struct Setup {
    /// Header and data digests of the connection.
    pub digests: Digests,
    /// SQ flow control on (off: a DISSQFC queue, where C2HData SUCCESS may replace a response).
    pub flow_control: bool,
    /// Queue entries (SQSIZE + 1).
    pub entries: u16,
    /// The in-capsule data limit in bytes: writes up to it go in the capsule, longer ones by
    /// R2T.
    pub icd_max: usize,
}

impl Setup {
    /// The set-up a mode byte picks.
    pub fn from_byte(mode: u8) -> Setup {
        Setup {
            digests: Digests {
                hdgst: mode & 1 != 0,
                ddgst: mode & 2 != 0,
            },
            flow_control: mode & 4 == 0,
            entries: [4, 8, 32, 128][usize::from((mode >> 3) & 3)],
            icd_max: if mode & 0x20 == 0 { 8192 } else { 512 },
        }
    }
}

struct Outstanding {
    kind: usize,
    inline: bool,
}

struct Harness {
    q: QueueCore,
    icd_max: usize,
    outstanding: HashMap<u16, Outstanding>,
    submits: usize,
    next_kind: usize,
    tx_lim: DecodeLimits,
}

impl Harness {
    fn fill(&mut self) {
        while self.submits < MAX_SUBMITS && self.q.can_submit() {
            let k = self.next_kind % KINDS.len();
            let kind = &KINDS[k];
            let r = self
                .q
                .submit((kind.sqe)(), kind.dir, kind.len, k as u64, |b| b.fill(0x5A));
            let cid = match r {
                Ok(Some(cid)) => cid.0,
                other => panic!("submit with room failed: {other:?}"),
            };
            let inline = kind.dir == DataDir::ToController && kind.len <= self.icd_max;
            let prev = self
                .outstanding
                .insert(cid, Outstanding { kind: k, inline });
            assert!(prev.is_none(), "CID {cid} handed out twice");
            self.submits += 1;
            self.next_kind += 1;
        }
        assert_eq!(
            self.q.in_flight(),
            self.outstanding.len(),
            "in-flight count"
        );
        self.check_output();
    }

    /// What the queue sends decodes as whole CapsuleCmd / H2CData PDUs on the target side.
    fn check_output(&mut self) {
        let tx = self.q.take_output();
        let mut buf = &tx[..];
        while !buf.is_empty() {
            let f = match decode_frame(buf, &self.tx_lim) {
                Ok(Some(f)) => f,
                other => panic!("host output is not a whole, valid PDU: {other:?}"),
            };
            assert!(f.data_digest_ok, "host data digest");
            match f.pdu {
                Pdu::CapsuleCmd { sqe, data } => {
                    let cid = sqe.cid().0;
                    let o = self.outstanding.get(&cid);
                    assert!(o.is_some(), "capsule for CID {cid}, not outstanding");
                    if let Some(o) = o {
                        assert_eq!(!data.is_empty(), o.inline, "in-capsule data for CID {cid}");
                    }
                }
                Pdu::H2cData { hdr, .. } => {
                    let o = self.outstanding.get(&hdr.cccid);
                    assert!(
                        o.is_some_and(|o| !o.inline && KINDS[o.kind].dir == DataDir::ToController),
                        "H2CData for CID {}, not an outstanding R2T write",
                        hdr.cccid
                    );
                }
                other => panic!("the host sent {other:?}"),
            }
            buf = &buf[f.len..];
        }
    }
}

/// One input: a host queue set up from the mode byte with commands outstanding, fed the
/// rest as controller PDUs in `chunk`-byte reads (see the module docs).
pub fn run(data: &[u8], feat: &mut Features) {
    let [mode, chunk, bytes @ ..] = data else {
        return;
    };
    let setup = Setup::from_byte(*mode);
    let conn = host_encoder(setup.digests);
    let mut h = Harness {
        q: QueueCore::new(
            conn,
            QueueId(1),
            setup.entries,
            setup.icd_max,
            setup.flow_control,
        ),
        icd_max: setup.icd_max,
        outstanding: HashMap::new(),
        submits: 0,
        next_kind: 0,
        tx_lim: DecodeLimits {
            role: Role::Target,
            digests: Some(setup.digests),
            pda: 0,
            max_icd: u32::MAX,
            max_data: u32::MAX,
        },
    };
    h.fill();
    let chunk = usize::from(*chunk).max(1) * 16;
    let mut head = 0;
    let mut avail = 0;
    while avail < bytes.len() {
        avail = (avail + chunk).min(bytes.len());
        let mut done: Vec<(u16, bool, usize, u64)> = Vec::new();
        let r = {
            let outstanding = &h.outstanding;
            h.q.receive(&bytes[..avail], &mut head, &mut |c: Completion<'_>| {
                let cid = c.cid.0;
                let o = outstanding.get(&cid);
                assert!(
                    o.is_some_and(|o| o.kind as u64 == c.user),
                    "completion for CID {cid} (user {}), not outstanding",
                    c.user
                );
                assert!(
                    !done.iter().any(|d| d.0 == cid),
                    "CID {cid} completed twice in one batch"
                );
                let kind = &KINDS[c.user as usize];
                if kind.dir == DataDir::FromController && c.is_success() {
                    assert_eq!(c.data.len(), kind.len, "{} data length", kind.name);
                    (kind.decode)(c.data);
                } else {
                    assert!(c.data.len() <= kind.len);
                }
                done.push((cid, c.is_success(), c.data.len(), c.user));
            })
        };
        // What the batch made the queue send (H2CData for R2Ts) is checked while the
        // commands it belongs to still count as outstanding.
        h.check_output();
        for (cid, ok, _, user) in &done {
            feat.add(F_DONE, (*user << 1) | u64::from(*ok));
            h.outstanding.remove(cid);
        }
        match r {
            Ok(n) => assert_eq!(n, done.len(), "completions reported"),
            Err(e) => {
                feat.add_str(F_ERR, &e.to_string().chars().take(40).collect::<String>());
                return;
            }
        }
        h.fill();
    }
}
