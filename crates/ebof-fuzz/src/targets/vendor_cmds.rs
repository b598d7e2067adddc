//! Arbitrary bytes into ebof's vendor admin command decoders of `nvme-spec`
//! ([`MirrorAdmit::decode`], C1h, [`WitnessLease::decode`], C5h, [`MirrorResv::decode`],
//! C9h, and [`MirrorSnapshot::decode`], CDh, ADR 0028): what a mirror's replication link or a witness client sends a controller.
//!
//! Input: a 64-byte SQE (zero padded when shorter), then the command's data (the rest).
//! Every decoder sees it, once with the opcode as sent and once with the opcode forced to its
//! own.
//!
//! Checked, beyond "never panics":
//! - a refusal is a known one: the opcode, NSID, reserved dwords/bytes, data length, lease ms
//!   or op; a refused opcode is never the command's own;
//! - accepted ⇒ its fields are the wire's (NSID, epoch, lease within 1..=60000) and encode →
//!   decode is the identity; re-encoding reproduces the SQE's checked dwords and the data byte
//!   for byte;
//! - a reservation table accepted is one the target can hold: at most 1024 registrants, no host
//!   twice, a holder registered (or an All Registrants type with registrants); its conversion
//!   to `nvmf_target`'s table and back is the identity, and so is the table's persisted text
//!   form (what a secondary with PTPL on saves).

use crate::Features;
use nvme_spec::Sqe;
use nvme_spec::ebof_vendor::{
    MAX_LEASE_MS, MirrorAdmit, MirrorResv, MirrorSnapshot, RESV_IMAGE_MAX_REGS, ResvImageError,
    SNAPSHOT_NAME_MAX, SnapshotOp, VendorError, WITNESS_LEASE_DATA_LEN, WitnessLease, opcode,
};
use nvmf_target::reservation::ResvTable;

const F_ADMIT: u8 = 1;
const F_LEASE: u8 = 2;
const F_RESV: u8 = 3;
const F_SNAP: u8 = 4;

fn kind(e: &VendorError) -> u64 {
    match e {
        VendorError::Opcode(_) => 1,
        VendorError::Nsid(_) => 2,
        VendorError::ReservedDword(n) => 16 + *n as u64,
        VendorError::DataLen(_) => 3,
        VendorError::ReservedByte(o) => 64 + *o as u64,
        VendorError::LeaseMs(_) => 4,
        VendorError::Op(_) => 5,
    }
}

fn admit(sqe: &Sqe, feat: &mut Features) {
    match MirrorAdmit::decode(sqe) {
        Err(e) => {
            feat.add(F_ADMIT, kind(&e));
            match e {
                VendorError::Opcode(o) => assert_ne!(o, opcode::MIRROR_ADMIT),
                VendorError::Nsid(n) => assert!(n == 0 || n == u32::MAX),
                VendorError::ReservedDword(n) => assert!((12..16).contains(&n)),
                other => panic!("Mirror Admit refused with a data error: {other:?}"),
            }
        }
        Ok(a) => {
            feat.add(F_ADMIT, u64::from(a.in_sync));
            assert_eq!(a.nsid, sqe.nsid().0);
            assert_eq!(a.epoch as u32, sqe.cdw10());
            let mut again = *sqe;
            a.encode_into(&mut again);
            assert_eq!(again, *sqe, "re-encoding changed the SQE");
            assert_eq!(MirrorAdmit::decode(&again), Ok(a));
        }
    }
}

fn lease(sqe: &Sqe, data: &[u8], feat: &mut Features) {
    match WitnessLease::decode(sqe, data) {
        Err(e) => {
            feat.add(F_LEASE, kind(&e));
            match e {
                VendorError::Opcode(o) => assert_ne!(o, opcode::WITNESS_LEASE),
                VendorError::ReservedDword(n) => assert!((10..16).contains(&n)),
                VendorError::DataLen(n) => assert!(n == data.len() && n != WITNESS_LEASE_DATA_LEN),
                VendorError::ReservedByte(o) => assert!((45..64).contains(&o)),
                VendorError::LeaseMs(ms) => assert!(ms == 0 || ms > MAX_LEASE_MS),
                VendorError::Op(op) => assert!(op > 2),
                VendorError::Nsid(_) => panic!("Witness Lease looks at no NSID"),
            }
        }
        Ok(l) => {
            feat.add(
                F_LEASE,
                u64::from(l.op.to_byte()) << 1 | u64::from(l.peer_in_sync),
            );
            assert!((1..=MAX_LEASE_MS).contains(&l.lease_ms));
            assert_eq!(
                l.encode_data().as_slice(),
                data,
                "re-encoding changed the data"
            );
            let mut again = *sqe;
            WitnessLease::encode_sqe(&mut again);
            assert_eq!(again, *sqe);
            assert_eq!(WitnessLease::decode(&again, &l.encode_data()), Ok(l));
        }
    }
}

fn resv(sqe: &Sqe, data: &[u8], feat: &mut Features) {
    match MirrorResv::decode(sqe, data) {
        Err(e) => {
            feat.add_variant(F_RESV, &e);
            match e {
                ResvImageError::Sqe(VendorError::Opcode(o)) => assert_ne!(o, opcode::MIRROR_RESV),
                ResvImageError::Sqe(VendorError::Nsid(n)) => assert!(n == 0 || n == u32::MAX),
                ResvImageError::Sqe(VendorError::ReservedDword(n)) => {
                    assert!((12..16).contains(&n))
                }
                ResvImageError::Sqe(other) => panic!("Mirror Reservations SQE refused: {other:?}"),
                ResvImageError::DataLen(n) => assert_eq!(n, data.len()),
                ResvImageError::Count(n) => assert!(n > RESV_IMAGE_MAX_REGS),
                ResvImageError::ReservedByte(o) => assert!(o == 4 || (24..32).contains(&o)),
                ResvImageError::Type(t) => assert!(t > 6),
                ResvImageError::Holder => {}
                ResvImageError::Duplicate(i) => assert!(i > 0 && i < RESV_IMAGE_MAX_REGS),
            }
        }
        Ok(m) => {
            let img = &m.image;
            feat.add(
                F_RESV,
                64 + (img.regs.len().min(8) as u64) * 8 + img.reservation.map_or(0, |r| r.0) as u64,
            );
            assert_eq!(m.nsid, sqe.nsid().0);
            assert!(img.regs.len() <= RESV_IMAGE_MAX_REGS);
            assert_eq!(
                img.encode().as_slice(),
                data,
                "re-encoding changed the data"
            );
            let mut again = *sqe;
            MirrorResv::encode_sqe(m.nsid, m.epoch, &mut again);
            assert_eq!(again, *sqe, "re-encoding changed the SQE");
            let table = ResvTable::from_image(img.clone());
            assert_eq!(&table.to_image(), img);
            let text = table.encode_state();
            assert_eq!(
                ResvTable::decode_state(&text).as_ref(),
                Ok(&table),
                "a table the link accepts must persist and load back"
            );
        }
    }
}

fn snap(sqe: &Sqe, data: &[u8], feat: &mut Features) {
    match MirrorSnapshot::decode(sqe, data) {
        Err(e) => {
            feat.add(F_SNAP, kind(&e));
            match e {
                VendorError::Opcode(o) => assert_ne!(o, opcode::MIRROR_SNAPSHOT),
                VendorError::Nsid(n) => assert!(n == 0 || n == u32::MAX),
                VendorError::ReservedDword(n) => assert!((13..16).contains(&n)),
                VendorError::Op(_) => assert!(sqe.cdw(12) > 1),
                VendorError::DataLen(n) => {
                    assert!(n == data.len() && (n == 0 || n > SNAPSHOT_NAME_MAX))
                }
                VendorError::ReservedByte(o) => {
                    let b = data[o];
                    assert!(!b.is_ascii_alphanumeric());
                    assert!(o == 0 || !matches!(b, b'.' | b'_' | b'-'));
                }
                VendorError::LeaseMs(_) => panic!("Mirror Snapshot has no lease"),
            }
        }
        Ok(m) => {
            feat.add(F_SNAP, 32 + u64::from(m.op == SnapshotOp::Delete));
            assert_eq!(m.nsid, sqe.nsid().0);
            assert_eq!(m.name.as_bytes(), data, "the name is the data as is");
            assert!(!m.name.is_empty() && m.name.len() <= SNAPSHOT_NAME_MAX);
            let mut again = *sqe;
            m.encode_sqe(&mut again);
            assert_eq!(again, *sqe, "re-encoding changed the SQE");
            assert_eq!(MirrorSnapshot::decode(&again, m.name.as_bytes()), Ok(m));
        }
    }
}

/// One input: the SQE and data into every decoder (see the module docs).
pub fn run(input: &[u8], feat: &mut Features) {
    let mut b = [0u8; 64];
    let n = input.len().min(64);
    b[..n].copy_from_slice(&input[..n]);
    let data = &input[n..];
    let sqe = Sqe(b);
    admit(&sqe, feat);
    lease(&sqe, data, feat);
    let mut forced = sqe;
    forced.0[0] = opcode::MIRROR_ADMIT;
    admit(&forced, feat);
    forced.0[0] = opcode::WITNESS_LEASE;
    lease(&forced, data, feat);
    resv(&sqe, data, feat);
    forced.0[0] = opcode::MIRROR_RESV;
    resv(&forced, data, feat);
    snap(&sqe, data, feat);
    forced.0[0] = opcode::MIRROR_SNAPSHOT;
    snap(&forced, data, feat);
}

/// Seeds: valid commands of both kinds and a few near misses.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    use nvme_spec::CommandId;
    use nvme_spec::ebof_vendor::LeaseOpCode;
    let mut v = Vec::new();
    let mut s = Sqe::new(opcode::MIRROR_ADMIT, CommandId(1));
    let a = MirrorAdmit {
        nsid: 1,
        epoch: 0x1_0000_0003,
        in_sync: true,
    };
    a.encode_into(&mut s);
    v.push(("admit-in-sync".into(), s.0.to_vec()));
    let mut s2 = s;
    s2.set_cdw(12, 0);
    v.push(("admit-not-synced".into(), s2.0.to_vec()));
    let mut s3 = s;
    s3.set_cdw(12, 3);
    v.push(("admit-reserved-cdw12".into(), s3.0.to_vec()));
    let mut s = Sqe::new(0, CommandId(2));
    WitnessLease::encode_sqe(&mut s);
    for (name, op, ms) in [
        ("lease-acquire", LeaseOpCode::Acquire, 4000),
        ("lease-release", LeaseOpCode::Release, 1),
        ("lease-query", LeaseOpCode::Query, MAX_LEASE_MS),
    ] {
        let l = WitnessLease {
            volume: [0xA5; 16],
            holder: [0x3C; 16],
            epoch: 7,
            lease_ms: ms,
            op,
            peer_in_sync: true,
        };
        let mut b = s.0.to_vec();
        b.extend_from_slice(&l.encode_data());
        v.push((name.into(), b));
    }
    let mut b = v[v.len() - 1].1.clone();
    b[64 + 44] = 3;
    v.push(("lease-bad-op".into(), b));
    let mut s = Sqe::new(0, CommandId(3));
    MirrorResv::encode_sqe(1, 0x2_0000_0001, &mut s);
    let img = nvme_spec::ebof_vendor::ResvImage {
        generation: 9,
        ptpl: true,
        reservation: Some((1, [0x11; 16])),
        regs: vec![([0x11; 16], 0x1234), ([0x22; 16], 0x5678)],
    };
    let mut b = s.0.to_vec();
    b.extend_from_slice(&img.encode());
    v.push(("resv-held".into(), b.clone()));
    let mut bad = b.clone();
    bad[64 + 8] = 0x33;
    v.push(("resv-holder-not-registered".into(), bad));
    let mut b = s.0.to_vec();
    b.extend_from_slice(&nvme_spec::ebof_vendor::ResvImage::default().encode());
    v.push(("resv-empty".into(), b));
    for (name, op, snap) in [
        ("snapshot-take", SnapshotOp::Take, "daily-2026.11.28"),
        ("snapshot-delete", SnapshotOp::Delete, "s1"),
        ("snapshot-bad-name", SnapshotOp::Take, "a/../b"),
    ] {
        let mut s = Sqe::new(0, CommandId(4));
        MirrorSnapshot {
            nsid: 1,
            epoch: 3,
            op,
            name: snap.into(),
        }
        .encode_sqe(&mut s);
        let mut b = s.0.to_vec();
        b.extend_from_slice(snap.as_bytes());
        v.push((name.into(), b));
    }
    v
}
