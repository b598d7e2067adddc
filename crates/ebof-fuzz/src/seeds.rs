//! The seed corpus, generated: `cargo run -p ebof-fuzz -- seeds` writes these files into
//! `fuzz/corpus/<target>/` (where they are committed). Generating them from the real encoders
//! and the real target keeps them valid when the code changes: the `target_conn` seeds are the
//! bytes a scripted host sent while talking to a [`Session`], answering its R2Ts.

use crate::Features;
use crate::targets::host_queue::{KINDS, Setup};
use crate::targets::target_conn::{
    DISCOVERY_NQN, NQN, Session, connect, enable, host_encoder, icreq,
};
use nvme_spec::fabrics::{PropertyCmd, prop};
use nvme_spec::identify::cns;
use nvme_spec::log::lid;
use nvme_spec::opcode::{admin, fctype, feature, io};
use nvme_spec::{CommandId, Cqe, NamespaceId, Sqe, Status};
use nvmf_tcp::pdu::{self, DataHdr, Digests, IcReq, IcResp, R2t};
use nvmf_tcp::{HostConn, HostEvent};

/// `(target, file name, bytes)` for every seed.
pub fn all() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut v = Vec::new();
    for (name, bytes) in pdu_seeds() {
        v.push(("pdu", name, bytes));
    }
    for (name, bytes) in target_conn_seeds() {
        v.push(("target_conn", name, bytes));
    }
    for (name, bytes) in config_text_seeds() {
        v.push(("config_text", name, bytes));
    }
    for (name, bytes) in config_struct_seeds() {
        v.push(("config_struct", name, bytes));
    }
    for (name, bytes) in host_queue_seeds() {
        v.push(("host_queue", name, bytes));
    }
    for (name, bytes) in auth_seeds() {
        v.push(("auth", name, bytes));
    }
    for (name, bytes) in rdma_wire_seeds() {
        v.push(("rdma_wire", name, bytes));
    }
    for (name, bytes) in tls_psk_seeds() {
        v.push(("tls_psk", name, bytes));
    }
    for (name, bytes) in tls_record_seeds() {
        v.push(("tls_record", name, bytes));
    }
    for (name, bytes) in dim_seeds() {
        v.push(("dim", name, bytes));
    }
    for (name, bytes) in dim_registry_seeds() {
        v.push(("dim_registry", name, bytes));
    }
    for (name, bytes) in csi_names_seeds() {
        v.push(("csi_names", name, bytes));
    }
    for (name, bytes) in crate::targets::csi_authority::seeds() {
        v.push(("csi_authority", name, bytes));
    }
    for (name, bytes) in crate::targets::vendor_cmds::seeds() {
        v.push(("vendor_cmds", name, bytes));
    }
    for (name, bytes) in crate::targets::key_header::seeds() {
        v.push(("key_header", name, bytes));
    }
    for (name, bytes) in crate::targets::witness_table::seeds() {
        v.push(("witness_table", name, bytes));
    }
    v
}

/// Listener lists as CreateVolume writes them (selector 0) and CSI names (selector 1).
fn csi_names_seeds() -> Vec<(String, Vec<u8>)> {
    let with = |sel: u8, text: &str| {
        let mut b = vec![sel];
        b.extend_from_slice(text.as_bytes());
        b
    };
    vec![
        (
            "listeners-two".into(),
            with(0, "tcp:10.77.0.1:4420,tcp:10.77.0.1:4421"),
        ),
        ("listeners-v6".into(), with(0, "tcp:[fd00::1]:4420")),
        ("listeners-bad".into(), with(0, "rdma:10.0.0.1:4420")),
        (
            "name-pvc".into(),
            with(1, "pvc-0b5d2f4e-1111-4222-8333-944455556666"),
        ),
        ("name-unicode".into(), with(1, "ünïcödé name/with spaces")),
        ("name-control".into(), with(1, "bad\u{1}name")),
        ("mutable-qos".into(), with(3, "iops=1000\nreadMbps=50")),
        ("mutable-pool".into(), with(3, "pool=fast\niops=-1")),
    ]
}

fn sqe(opc: u8, cid: u16) -> Sqe {
    Sqe::new(opc, CommandId(cid))
}

fn identify(cid: u16, c: u8, nsid: u32) -> Sqe {
    let mut s = sqe(admin::IDENTIFY, cid);
    s.set_nsid(NamespaceId(nsid));
    s.set_cdw(10, u32::from(c));
    s.set_sgl_transport(4096);
    s
}

fn get_log(cid: u16, l: u8, len: u32) -> Sqe {
    let mut s = sqe(admin::GET_LOG_PAGE, cid);
    s.set_nsid(NamespaceId(u32::MAX));
    s.set_cdw(10, u32::from(l) | ((len / 4 - 1) << 16));
    s.set_sgl_transport(len);
    s
}

fn rw(opc: u8, cid: u16, nsid: u32, slba: u64, nlb: u32, bs: u32) -> Sqe {
    let mut s = sqe(opc, cid);
    s.set_nsid(NamespaceId(nsid));
    s.set_slba(slba);
    s.set_nlb(nlb);
    if opc == io::READ || opc == io::WRITE {
        s.set_sgl_transport(nlb * bs);
    }
    s
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ salt)
        .collect()
}

// ----------------------------------------------------------------------------------------
// pdu

fn pdu_seeds() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for (tag, dig) in [("plain", Digests::NONE), ("digests", Digests::BOTH)] {
        // Target role, from the ICReq on: mode 0 (decoder state "before IC").
        let mut b = vec![0u8, 7];
        pdu::encode_ic_req(
            &mut b,
            &IcReq {
                pfv: 0,
                hpda: 0,
                digests: dig,
                maxr2t: 0,
            },
        );
        let h = host_encoder(dig);
        b.extend(connect(&h, 1, 0, 31, 0, 0xFFFF, NQN));
        h.encode_capsule(&mut b, &identify(2, cns::CTRL, 0), &[]);
        let mut w = rw(io::WRITE, 3, 1, 0, 2, 512);
        w.set_sgl_icd(1024);
        h.encode_capsule(&mut b, &w, &pattern(1024, 3));
        // A write without in-capsule data: the harness answers with R2T TTAG 0.
        h.encode_capsule(&mut b, &rw(io::WRITE, 4, 1, 8, 8, 512), &[]);
        h.encode_h2c_data(&mut b, 4, 0, 0, &pattern(4096, 4));
        let mut t = Vec::new();
        pdu::encode_term_req(&mut t, pdu::pdu_type::H2C_TERM_REQ, 1, 0, &b[2..10]);
        b.extend(t);
        v.push((format!("target-{tag}"), b));

        // Host role: ICResp, responses, data, R2T, TermReq. Mode 1 (host, before IC).
        let mut b = vec![1u8, 5];
        pdu::encode_ic_resp(
            &mut b,
            &IcResp {
                pfv: 0,
                cpda: 0,
                digests: dig,
                maxh2cdata: 131072,
            },
        );
        let data = pattern(8192, 9);
        for (off, last) in [(0usize, false), (4096, true)] {
            let d = DataHdr {
                cccid: 5,
                ttag: 0,
                datao: off as u32,
                datal: 4096,
                last,
                success: false,
            };
            pdu::encode_c2h_data(&mut b, dig, 0, &d, &data[off..off + 4096]);
        }
        pdu::encode_capsule_resp(&mut b, dig, &cqe(5, 1, Status::SUCCESS));
        let d = DataHdr {
            cccid: 6,
            ttag: 0,
            datao: 0,
            datal: 512,
            last: true,
            success: true,
        };
        pdu::encode_c2h_data(&mut b, dig, 0, &d, &data[..512]);
        pdu::encode_r2t(
            &mut b,
            dig,
            &R2t {
                cccid: 7,
                ttag: 3,
                r2to: 0,
                r2tl: 16384,
            },
        );
        let mut t = Vec::new();
        pdu::encode_term_req(&mut t, pdu::pdu_type::C2H_TERM_REQ, 2, 0, &b[2..26]);
        b.extend(t);
        v.push((format!("host-{tag}"), b));
    }
    v
}

fn cqe(cid: u16, sqhd: u16, status: Status) -> Cqe {
    Cqe {
        dw0: 0,
        dw1: 0,
        sqhd,
        sqid: 1,
        cid,
        status,
    }
}

// ----------------------------------------------------------------------------------------
// target_conn

/// A command for the scripted host: the SQE (CID set), data to send and whether in-capsule.
struct Cmd {
    sqe: Sqe,
    data: Vec<u8>,
    inline: bool,
}

fn cmd(sqe: Sqe) -> Cmd {
    Cmd {
        sqe,
        data: Vec::new(),
        inline: false,
    }
}

fn with_data(mut sqe: Sqe, data: Vec<u8>, inline: bool) -> Cmd {
    if inline {
        sqe.set_sgl_icd(data.len() as u32);
    } else {
        sqe.set_sgl_transport(data.len() as u32);
    }
    Cmd { sqe, data, inline }
}

/// Run `cmds` one after the other on a [`Session`] of `mode` (answering R2Ts) and return the
/// seed: `[mode, 0]` and every byte the host sent after the prefix.
fn script(mode: u8, raw_prefix: Option<Vec<u8>>, cmds: Vec<Cmd>) -> Vec<u8> {
    let mut feat = Features::default();
    let mut s = Session::new(mode, &mut feat);
    let mut h = host_encoder(s.digests);
    let mut sent = Vec::new();
    if let Some(p) = raw_prefix {
        s.conn.feed(&p, usize::MAX, &mut feat);
        sent.extend(p);
        h = host_encoder(Digests::NONE);
    }
    for c in cmds {
        let mut out = Vec::new();
        let icd: &[u8] = if c.inline { &c.data } else { &[] };
        h.encode_capsule(&mut out, &c.sqe, icd);
        let mut pending = out;
        for _ in 0..16 {
            if pending.is_empty() || s.conn.is_closed() {
                break;
            }
            let back = s.conn.feed(&pending, usize::MAX, &mut feat);
            sent.extend(&pending);
            pending = answer_r2ts(&mut h, &back, &c);
        }
    }
    let mut seed = vec![mode, 0];
    seed.extend(sent);
    seed
}

/// H2CData for every R2T in `back` (which belongs to `c`).
fn answer_r2ts(h: &mut HostConn, back: &[u8], c: &Cmd) -> Vec<u8> {
    // A decoder in step with the target's output (its ICResp is not in `back`).
    let mut dec = host_encoder(h.digests());
    let mut pos = 0;
    let mut reply = Vec::new();
    while let Ok(Some((ev, n))) = dec.decode_one(&back[pos..]) {
        pos += n;
        if let HostEvent::R2t(r) = ev {
            let start = r.r2to as usize;
            let end = (start + r.r2tl as usize).min(c.data.len());
            h.encode_h2c_data(&mut reply, r.cccid, r.ttag, r.r2to, &c.data[start..end]);
        }
    }
    reply
}

fn prop_get(cid: u16, ofst: u32, size8: bool) -> Sqe {
    let mut s = sqe(admin::FABRICS, cid);
    s.set_fctype(fctype::PROPERTY_GET);
    PropertyCmd {
        size8,
        ofst,
        value: 0,
    }
    .encode_into(&mut s);
    s
}

fn features(opc: u8, cid: u16, fid: u8, value: u32) -> Sqe {
    let mut s = sqe(opc, cid);
    s.set_cdw(10, u32::from(fid));
    s.set_cdw(11, value);
    s
}

fn admin_cmds() -> Vec<Cmd> {
    vec![
        cmd(identify(1, cns::CTRL, 0)),
        cmd(identify(2, cns::NS, 1)),
        cmd(identify(3, cns::ACTIVE_NS_LIST, 0)),
        cmd(identify(4, cns::NS_ID_DESC_LIST, 2)),
        cmd(get_log(5, lid::SMART, 512)),
        cmd(get_log(6, lid::ERROR, 4096)),
        cmd(features(admin::GET_FEATURES, 7, feature::NUM_QUEUES, 0)),
        cmd(features(
            admin::SET_FEATURES,
            8,
            feature::NUM_QUEUES,
            0x0003_0003,
        )),
        cmd(features(
            admin::SET_FEATURES,
            9,
            feature::ASYNC_EVENT,
            0x100,
        )),
        cmd(prop_get(10, prop::CAP, true)),
        cmd(prop_get(11, prop::CSTS, false)),
        cmd(sqe(admin::KEEP_ALIVE, 12)),
        cmd(sqe(admin::ASYNC_EVENT_REQUEST, 13)),
    ]
}

fn io_cmds() -> Vec<Cmd> {
    let mut dsm = sqe(io::DATASET_MGMT, 9);
    dsm.set_nsid(NamespaceId(1));
    dsm.set_cdw(11, nvme_spec::opcode::DSM_ATTR_DEALLOCATE);
    let mut range = vec![0u8; 16];
    range[4..8].copy_from_slice(&8u32.to_le_bytes());
    range[8..16].copy_from_slice(&16u64.to_le_bytes());
    vec![
        with_data(rw(io::WRITE, 1, 1, 0, 8, 512), pattern(4096, 1), true),
        cmd(rw(io::READ, 2, 1, 0, 8, 512)),
        with_data(rw(io::WRITE, 3, 1, 64, 32, 512), pattern(16384, 3), false),
        cmd(rw(io::READ, 4, 1, 64, 32, 512)),
        with_data(rw(io::WRITE, 5, 2, 1, 1, 4096), pattern(4096, 5), true),
        cmd(rw(io::READ, 6, 2, 1, 1, 4096)),
        cmd(rw(io::FLUSH, 7, 1, 0, 0, 512)),
        cmd(rw(io::WRITE_ZEROES, 8, 1, 0, 4, 512)),
        with_data(dsm, range, true),
        with_data(rw(io::WRITE, 10, 1, 2040, 8, 512), pattern(4096, 10), false),
    ]
}

/// DIM register (in-capsule), update (through R2T) and deregister of a discovery
/// controller entity, then the log.
fn dim_cmds() -> Vec<Cmd> {
    use nvme_spec::dim::{DimData, DimTask, EntityType};
    let dim = |cid: u16, task: DimTask| {
        let mut s = sqe(admin::DISCOVERY_INFO_MGMT, cid);
        s.set_cdw(10, task.cdw10());
        s
    };
    let data = |name: &str| {
        DimData::discovery_controller(
            EntityType::Ddc,
            "nqn.2026-11.io.ebof:box2",
            name,
            "ebof",
            &[std::net::SocketAddr::from(([10, 77, 0, 12], 8009))],
        )
        .encode()
    };
    vec![
        with_data(dim(1, DimTask::Register), data("box2"), true),
        with_data(dim(2, DimTask::Update), data("box2b"), false),
        with_data(dim(3, DimTask::Deregister), data(""), true),
        cmd(get_log(4, 0x70, 4096)),
    ]
}

fn target_conn_seeds() -> Vec<(String, Vec<u8>)> {
    let h = host_encoder(Digests::NONE);
    let mut raw = icreq(Digests::NONE);
    raw.extend(connect(&h, 1, 0, 31, 0, 0xFFFF, NQN));
    raw.extend(enable(&h, 2));
    let mut raw_discovery = icreq(Digests::NONE);
    raw_discovery.extend(connect(&h, 1, 0, 31, 0, 0xFFFF, DISCOVERY_NQN));
    vec![
        (
            "raw-admin".into(),
            script(0, Some(raw), vec![cmd(identify(3, cns::CTRL, 0))]),
        ),
        (
            "raw-discovery".into(),
            script(0, Some(raw_discovery), vec![cmd(get_log(2, 0x70, 3072))]),
        ),
        ("admin".into(), script(1, None, admin_cmds())),
        // A command and a fatal PDU in one read: the completion must precede the C2HTermReq
        // (the first bug this target found).
        ("admin-then-protocol-error".into(), {
            let mut b = vec![1u8, 0];
            h.encode_capsule(&mut b, &sqe(admin::KEEP_ALIVE, 1), &[]);
            h.encode_h2c_data(&mut b, 2, 3, 0, &pattern(512, 2));
            b
        }),
        (
            "admin-digests".into(),
            script(1 | 4 | 8, None, admin_cmds()),
        ),
        (
            "discovery".into(),
            script(1 | 0x10, None, vec![cmd(get_log(1, 0x70, 4096))]),
        ),
        ("discovery-dim".into(), script(1 | 0x10, None, dim_cmds())),
        ("io".into(), script(2, None, io_cmds())),
        ("io-digests".into(), script(2 | 4 | 8, None, io_cmds())),
        ("io-dissqfc".into(), script(3, None, io_cmds())),
    ]
}

// ----------------------------------------------------------------------------------------
// config

fn config_text_seeds() -> Vec<(String, Vec<u8>)> {
    let example = include_str!("../../ebof-config/examples/ebof.toml");
    let default = ebof_config::Config::embedded_default().to_toml_string();
    let minimal = "[[listeners]]\naddress = \"127.0.0.1\"\n\n[[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:a\"\n\n[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n";
    let bad = "[[listeners]]\naddress = \"127.0.0.1\"\nport = 70000\n\n[[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:a\"\n\n[[subsystems.namespaces]]\nbackend = \"file\"\nsize = \"1000\"\nblock_size = 4096\n";
    let pool_box = "[[listeners]]\naddress = \"127.0.0.1\"\n\n[[pools]]\nname = \"fast\"\ndirectory = \"/var/lib/ebof/fast\"\nsize = \"64M\"\n\n[[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:v\"\n\n[[subsystems.namespaces]]\nbackend = \"file\"\npath = \"/var/lib/ebof/fast/nqn.2026-11.io.ebof_v.ns1.img\"\nsize = \"16M\"\npool = \"fast\"\n";
    let mirror_box = "[target]\nstate_dir = \"/var/lib/ebof/state\"\ncntlid_min = 1000\ncntlid_max = 1999\n\n[[listeners]]\naddress = \"127.0.0.21\"\n\n[mirror]\nwitness = \"127.0.0.23:4420\"\nlease_ms = 1000\nregion_kib = 256\n\n[witness]\nlease_max_ms = 2000\nhosts = [\"nqn.2026-11.io.ebof:mirror-link\"]\n\n[[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:m\"\n\n[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"16M\"\nana_group = 2\nmirror = { peer = \"127.0.0.22:4420\", role = \"primary\" }\n";
    vec![
        ("mirror-box".into(), mirror_box.as_bytes().to_vec()),
        ("example".into(), example.as_bytes().to_vec()),
        ("embedded-default".into(), default.into_bytes()),
        ("minimal".into(), minimal.as_bytes().to_vec()),
        ("errors".into(), bad.as_bytes().to_vec()),
        ("pool-box".into(), pool_box.as_bytes().to_vec()),
    ]
}

fn config_struct_seeds() -> Vec<(String, Vec<u8>)> {
    vec![
        ("zeros".into(), vec![0u8; 256]),
        ("ones".into(), vec![0xffu8; 256]),
        ("counting".into(), (0..=255u8).collect()),
        ("pattern".into(), pattern(1024, 0x5a)),
    ]
}

// ----------------------------------------------------------------------------------------
// host_queue

/// Well-formed answers to the initial commands of a queue of `mode` (see
/// [`crate::targets::host_queue`]): data, R2Ts and responses for slots `0..entries-1`.
fn host_answers(mode: u8, success_flag: bool) -> Vec<u8> {
    let setup = Setup::from_byte(mode);
    let dig = setup.digests;
    let slots = usize::from(setup.entries) - 1;
    let mut b = vec![mode, 0xff];
    let mut sqhd = 0u16;
    for slot in 0..slots {
        let k = &KINDS[slot % KINDS.len()];
        let cid = slot as u16;
        sqhd = (sqhd + 1) % setup.entries;
        let mut resp = true;
        match k.dir {
            nvmf_host::DataDir::FromController => {
                let data = pattern(k.len, slot as u8);
                let mut off = 0;
                while off < k.len {
                    let n = (k.len - off).min(4096);
                    let last = off + n == k.len;
                    let success = last && success_flag;
                    let d = DataHdr {
                        cccid: cid,
                        ttag: 0,
                        datao: off as u32,
                        datal: n as u32,
                        last,
                        success,
                    };
                    pdu::encode_c2h_data(&mut b, dig, 0, &d, &data[off..off + n]);
                    off += n;
                    resp = !success;
                }
            }
            nvmf_host::DataDir::ToController if k.len > setup.icd_max => {
                pdu::encode_r2t(
                    &mut b,
                    dig,
                    &R2t {
                        cccid: cid,
                        ttag: slot as u16,
                        r2to: 0,
                        r2tl: k.len as u32,
                    },
                );
            }
            _ => {}
        }
        if resp {
            let sq = if setup.flow_control { sqhd } else { 0xFFFF };
            pdu::encode_capsule_resp(&mut b, dig, &cqe(cid, sq, Status::SUCCESS));
        }
    }
    b
}

fn host_queue_seeds() -> Vec<(String, Vec<u8>)> {
    vec![
        ("entries8".into(), host_answers(0x08, false)),
        ("entries8-digests".into(), host_answers(0x08 | 3, false)),
        ("entries8-dissqfc".into(), host_answers(0x08 | 4, true)),
        (
            "entries8-small-icd".into(),
            host_answers(0x08 | 0x20, false),
        ),
    ]
}

// ----------------------------------------------------------------------------------------
// auth

/// One operation of [`crate::targets::auth`]: `[op, len LE16, payload]`.
fn auth_op(b: &mut Vec<u8>, op: u8, payload: &[u8]) {
    b.push(op);
    b.extend_from_slice(&(payload.len() as u16).to_le_bytes());
    b.extend_from_slice(payload);
}

/// `steps` honest steps with `mode` and `keys`.
fn auth_honest(mode: u8, keys: u8, steps: usize) -> Vec<u8> {
    let mut b = vec![mode, keys];
    for _ in 0..steps {
        auth_op(&mut b, 0, &[]);
    }
    b
}

/// One of each message, as typed values encode it.
fn auth_messages() -> Vec<Vec<u8>> {
    use nvme_auth::msg::{
        Challenge, DhchapDescriptor, Failure, Message, Negotiate, Reply, Success1,
    };
    use nvme_auth::{DhGroup, FailureReason, HashId};
    [
        Message::Negotiate(Negotiate {
            t_id: 1,
            sc_c: 0,
            napd: 2,
            dhchap: Some(DhchapDescriptor {
                hash_ids: vec![1, 2, 3],
                dh_group_ids: vec![0, 1, 2, 3, 4, 5],
            }),
        }),
        Message::Challenge(Challenge {
            t_id: 1,
            hash: HashId::Sha256,
            dh_group: DhGroup::Null,
            seqnum: 7,
            challenge: pattern(32, 1),
            dh_value: Vec::new(),
        }),
        Message::Challenge(Challenge {
            t_id: 1,
            hash: HashId::Sha512,
            dh_group: DhGroup::Ffdhe2048,
            seqnum: 7,
            challenge: pattern(64, 2),
            dh_value: pattern(256, 3),
        }),
        Message::Reply(Reply {
            t_id: 1,
            response: pattern(48, 4),
            challenge: Some(pattern(48, 5)),
            seqnum: 9,
            dh_value: Vec::new(),
        }),
        Message::Success1(Success1 {
            t_id: 1,
            hl: 32,
            response: Some(pattern(32, 6)),
        }),
        Message::Success2 { t_id: 1 },
        Message::Failure1(Failure::new(1, FailureReason::HashUnusable)),
        Message::Failure2(Failure::new(1, FailureReason::Failed)),
    ]
    .iter()
    .map(Message::encode)
    .collect()
}

fn auth_seeds() -> Vec<(String, Vec<u8>)> {
    use nvme_auth::{DhchapSecret, KeyTransform};
    let mut forged = vec![0x00, 0x00];
    auth_op(&mut forged, 0, &[]); // negotiate queued
    auth_op(&mut forged, 3, &[4, 1]); // its T_ID patched
    auth_op(&mut forged, 0, &[]);
    for m in auth_messages() {
        auth_op(&mut forged, 1, &m);
        auth_op(&mut forged, 2, &m);
    }
    auth_op(&mut forged, 0, &[]);
    auth_op(&mut forged, 4, &[0x10, 0x00, 6, 0x20]); // AL 16, HL patched
    auth_op(&mut forged, 5, &[]);
    auth_op(&mut forged, 7, &[0x08, 0x00]);
    auth_op(&mut forged, 8, &[0]);
    auth_op(&mut forged, 6, &[]);
    let mut codec = vec![0x40, 0x05];
    for kind in 0..7u8 {
        let mut p = vec![kind, 0, kind, 1, 3, 6];
        p.extend(pattern(200, kind));
        auth_op(&mut codec, 9, &p);
    }
    for (t, len) in [(KeyTransform::None, 32), (KeyTransform::Sha512, 64)] {
        if let Ok(s) = DhchapSecret::from_key(t, &pattern(len, 7)) {
            auth_op(&mut codec, 9, s.encode().as_bytes());
        }
    }
    let cdw10 = nvme_auth::msg::command_cdw10();
    let mut cmd = cdw10.to_le_bytes().to_vec();
    cmd.extend_from_slice(&4096u32.to_le_bytes());
    auth_op(&mut codec, 9, &cmd);
    vec![
        ("oneway-null".into(), auth_honest(0x00, 0x00, 8)),
        ("bidi-sha384".into(), auth_honest(0x46, 0x05, 10)),
        ("bidi-ffdhe2048".into(), auth_honest(0x70, 0x0f, 6)),
        ("reauth".into(), auth_honest(0x01, 0x02, 16)),
        ("no-common-hash".into(), auth_honest(0x0c, 0x00, 8)),
        ("wrong-host-key".into(), auth_honest(0x00, 0x10, 8)),
        ("wrong-ctrl-key".into(), auth_honest(0x40, 0x20, 10)),
        ("bidi-no-ctrl-key".into(), auth_honest(0xc0, 0x00, 8)),
        ("forged".into(), forged),
        ("codec".into(), codec),
    ]
}

// ----------------------------------------------------------------------------------------
// rdma_wire

fn rdma_wire_seeds() -> Vec<(String, Vec<u8>)> {
    use nvmf_rdma::wire::{CmRequest, RejectStatus, encode_accept, encode_reject, set_keyed_sgl};
    let request = |qid, hrqsize, hsqsize| {
        let mut b = CmRequest {
            recfmt: 0,
            qid,
            hrqsize,
            hsqsize,
            cntlid: 0xffff,
        }
        .encode()
        .to_vec();
        // The CM pads the Linux host's 32 bytes to 56; then whole capsules follow.
        b.resize(64, 0);
        b
    };
    let capsules = || {
        let mut b = Vec::new();
        let mut r = rw(io::READ, 1, 1, 0, 8, 512);
        set_keyed_sgl(&mut r, 0x7f00_1234_5000, 4096, 0xdead_beef, false);
        b.extend_from_slice(r.as_bytes());
        let mut w = rw(io::WRITE, 2, 1, 8, 8, 512);
        set_keyed_sgl(&mut w, 0x7f00_1234_6000, 4096, 0x1234_5678, true);
        b.extend_from_slice(w.as_bytes());
        let mut i = rw(io::WRITE, 3, 1, 16, 1, 512);
        i.set_sgl_icd(512);
        b.extend_from_slice(i.as_bytes());
        let mut f = sqe(io::FLUSH, 4);
        set_keyed_sgl(&mut f, 0, 0, 0, false);
        b.extend_from_slice(f.as_bytes());
        // NVMe/TCP's transport data block: refused here.
        b.extend_from_slice(identify(5, cns::CTRL, 0).as_bytes());
        b
    };
    let mut admin = vec![0x2a];
    admin.extend(request(0, 32, 31));
    admin.extend(capsules());
    let mut io_queue = vec![0x2a];
    io_queue.extend(request(1, 128, 127));
    io_queue.extend(capsules());
    let mut accept = vec![0x00];
    accept.extend_from_slice(&encode_accept(128));
    let mut reject = vec![0x15];
    reject.extend_from_slice(&encode_reject(RejectStatus::InvalidHsqsize));
    vec![
        ("admin".into(), admin),
        ("io".into(), io_queue),
        ("accept".into(), accept),
        ("reject".into(), reject),
    ]
}

// ----------------------------------------------------------------------------------------
// tls_record

fn tls_record_seeds() -> Vec<(String, Vec<u8>)> {
    let op = |code: u8, bytes: &[u8]| {
        let len = u16::try_from(bytes.len()).unwrap_or(u16::MAX).to_le_bytes();
        let mut v = vec![code, len[0], len[1]];
        v.extend_from_slice(bytes);
        v
    };
    let big = pattern(20_000, 0x33);
    let mut seeds = vec![
        (
            "data".to_string(),
            [vec![0xfe], op(2, b"icreq"), op(2, &big)].concat(),
        ),
        (
            "data-sha384-1byte-reads".into(),
            [vec![0x01], op(2, &big[..3000])].concat(),
        ),
        (
            "key-update".into(),
            [
                vec![0x20],
                op(2, b"a"),
                op(3, &[1]),
                op(2, b"b"),
                op(3, &[0]),
                op(2, b"c"),
            ]
            .concat(),
        ),
        (
            "close".into(),
            [vec![0x40], op(2, b"last"), op(5, b"")].concat(),
        ),
        ("tampered".into(), [vec![0x60], op(4, &big[..100])].concat()),
        (
            "raw-header".into(),
            [vec![0x02], op(0, &[23, 3, 3, 0x41, 0x01])].concat(),
        ),
    ];
    for (name, inner) in [
        ("inner-padding", &b"data\x17\0\0\0"[..]),
        ("inner-zeros", &[0u8; 8][..]),
        ("inner-key-update", &[24, 0, 0, 1, 1, 22][..]),
        ("inner-ticket", &[4, 0, 0, 2, 9, 9, 22][..]),
        ("inner-alert", &[2, 50, 21][..]),
        ("inner-close", &[1, 0, 21][..]),
        ("inner-ccs", &[1, 20][..]),
    ] {
        seeds.push((
            name.to_string(),
            [vec![0x10], op(2, b"x"), op(1, inner)].concat(),
        ));
    }
    seeds
}

// ----------------------------------------------------------------------------------------
// tls_psk

fn tls_psk_seeds() -> Vec<(String, Vec<u8>)> {
    use nvmf_tls::psk::{ConfiguredPsk, Derivation, IdentityVersion, KeyTransform};
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:host1";
    const SUB: &str = "nqn.2026-11.io.ebof:disk1";
    let with_mode = |mode: u8, bytes: &[u8]| {
        let mut b = vec![mode];
        b.extend_from_slice(bytes);
        b
    };
    let mut v = vec![(
        "identity-v0".into(),
        with_mode(0x03, format!("NVMe0R01 {HOST} {SUB}").as_bytes()),
    )];
    for (name, t, len) in [
        ("00", KeyTransform::None, 48),
        ("01", KeyTransform::Sha256, 32),
        ("02", KeyTransform::Sha384, 48),
    ] {
        let key = pattern(len, 0x42);
        let Ok(k) = ConfiguredPsk::new(t, &key) else {
            continue;
        };
        v.push((
            format!("interchange-{name}"),
            with_mode(0x03, k.to_interchange().as_bytes()),
        ));
        if let Ok((id, _)) = k.host_identity(HOST, SUB, IdentityVersion::V1, Derivation::Compat) {
            v.push((
                format!("identity-v1-{name}"),
                with_mode(0x03, id.to_string().as_bytes()),
            ));
        }
        // Agreement: the key, then the NQNs (mode bits: transform, version 1, host on the RFC
        // encoding, target preferring it, 48-byte key for 00). Version 1: a transformed key's
        // digest tells the target the host's encoding, so it may prefer the other one.
        let (mode, v1_preferred) = match t {
            KeyTransform::None => (0x20, 0x10),
            KeyTransform::Sha256 => (0x01, 0x00),
            KeyTransform::Sha384 => (0x02, 0x00),
        };
        let mut b = key.clone();
        b.extend_from_slice(format!("{HOST} {SUB}").as_bytes());
        v.push((
            format!("agree-v1-{name}"),
            with_mode(mode | 0x04 | 0x08 | v1_preferred, &b),
        ));
        v.push((format!("agree-v0-{name}"), with_mode(mode, &b)));
    }
    v
}

// ----------------------------------------------------------------------------------------
// dim

fn dim_seeds() -> Vec<(String, Vec<u8>)> {
    use nvme_spec::dim::{DimData, EntityType, EntryFormat};
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
    let host = DimData::host(
        HOST,
        [0x11; 16],
        "host1",
        "Linux 6.12",
        Some("rack-3"),
        None,
    );
    let mut ddc = DimData::discovery_controller(
        EntityType::Ddc,
        "nqn.2014-08.org.nvmexpress.discovery",
        "box1",
        "ebof",
        &[
            std::net::SocketAddr::from(([10, 77, 0, 11], 8009)),
            "[fd00::11]:8009"
                .parse()
                .unwrap_or(std::net::SocketAddr::from(([0; 4], 8009))),
        ],
    );
    let mut v = vec![
        ("host-libnvme".into(), host.encode()),
        ("ddc-extended".into(), ddc.encode()),
    ];
    ddc.format = EntryFormat::Basic;
    v.push(("ddc-basic".into(), ddc.encode()));
    let mut other = host.encode();
    other[1024 + 256 + 5] = b'X';
    v.push(("host-other-nqn".into(), other));
    v
}

// ----------------------------------------------------------------------------------------
// dim_registry (steps `[op, who, what, arg]`, see the target's docs)

fn dim_registry_seeds() -> Vec<(String, Vec<u8>)> {
    let steps = |v: &[[u8; 4]]| v.iter().flatten().copied().collect::<Vec<u8>>();
    // Identity 1 at 10.0.0.1 (who = 1 | 1 << 5), identity 25 (authenticated) at 10.0.0.2.
    let (one, auth) = (1 | (1 << 5), 25 | (2 << 5));
    let mut flood = Vec::new();
    for i in 0..200u8 {
        // Fresh host NQNs from one address, then from others.
        flood.push([3, (i / 64) << 5, 0, i]);
    }
    flood.push([7, one, 0, 0]);
    flood.push([0, one, 0, 1]);
    flood.push([6, 0, 0, 0]);
    flood.push([3, 0, 0, 250]);
    vec![
        (
            "untrusted-then-trusted".into(),
            steps(&[
                [0, one, 3, 0],
                [7, one, 0, 0],
                [0, one, 3, 0],
                [0, one, 1, 4],
                [1, one, 0, 2],
                [2, one, 0, 0],
            ]),
        ),
        (
            "authenticated-announcer-and-forger".into(),
            steps(&[
                [0, auth, 1, 0],
                [2, 25 | (3 << 5), 0, 0],
                [0, 25 | (3 << 5), 0, 5],
                [5, auth, 0, 0],
                [6, 0, 0, 0],
                [3, 2, 0, 0],
                [0, auth, 2, 6],
            ]),
        ),
        (
            "member-limit".into(),
            steps(&[
                [7, one, 0, 0],
                [0, one, 3, 0],
                [0, one | 0x80, 0x83, 4],
                [0, 2 | (1 << 5), 3, 8],
            ]),
        ),
        ("host-flood".into(), steps(&flood)),
    ]
}
