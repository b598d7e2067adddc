//! ebof's vendor-specific admin commands (ADR 0028, replicated volumes).
//!
//! * [`opcode::MIRROR_ADMIT`] (C1h) **Mirror Admit**, no data: NSID = the mirrored namespace,
//!   CDW10/CDW11 = epoch (low/high), CDW12 bit 0 = "you are in sync as of this epoch". Sent by a
//!   primary on its replication link. CQE DW0 bit 0 = the secondary holds a copy synced at this
//!   epoch, DW1 = its synced epoch (low 32 bits).
//! * [`opcode::WITNESS_LEASE`] (C5h) **Witness Lease**, 64 bytes host-to-controller data: bytes
//!   0..16 volume id, 16..32 holder id, 32..40 epoch LE, 40..44 lease ms LE (1..=60000),
//!   44 op (0 acquire/renew, 1 release, 2 query), 45 flags (bit 0 peer in sync), 46..64 zero.
//!   CQE DW0 bit 0 = granted (bits 1..=31 reserved), DW1 = ms left on the current holder's lease.
//! * [`opcode::MIRROR_RESV`] (C9h) **Mirror Reservations**, host-to-controller data: NSID = the
//!   mirrored namespace, CDW10/CDW11 = epoch (low/high), CDW12..15 zero; the data is the whole
//!   reservation table of the namespace ([`ResvImage`]). Sent by a primary on its replication
//!   link after each reservation change and before it declares the peer in sync.
//! * [`opcode::MIRROR_SNAPSHOT`] (CDh) **Mirror Snapshot**, host-to-controller data: NSID = the
//!   mirrored namespace, CDW10/CDW11 = epoch (low/high), CDW12 = op (0 take, 1 delete),
//!   CDW13..15 zero; the data is the snapshot's name (1..=64 bytes of `A-Za-z0-9._-`, the
//!   first alphanumeric). Sent by a primary on its replication link while it holds its writes,
//!   so both copies' snapshots are the same point in time.
//!
//! One decoder each ([`MirrorAdmit::decode`], [`WitnessLease::decode`], [`MirrorResv::decode`]);
//! they never panic and refuse every reserved bit set. Encoders build what the host side sends.

use crate::cqe::Cqe;
use crate::sqe::Sqe;
use crate::status::Status;
use crate::{le32, le64, put32, put64};

/// The vendor admin opcodes.
pub mod opcode {
    /// Mirror Admit (C1h): no data transfer (bits 1:0 = 00b).
    pub const MIRROR_ADMIT: u8 = 0xC1;
    /// Witness Lease (C5h): host-to-controller data (bits 1:0 = 01b).
    pub const WITNESS_LEASE: u8 = 0xC5;
    /// Mirror Reservations (C9h): host-to-controller data (bits 1:0 = 01b).
    pub const MIRROR_RESV: u8 = 0xC9;
    /// Mirror Snapshot (CDh): host-to-controller data (bits 1:0 = 01b).
    pub const MIRROR_SNAPSHOT: u8 = 0xCD;
}

/// Operation Denied (SCT 0h, SC 15h) with DNR: what a refused vendor command (or a replica-link
/// I/O that its fence no longer admits) completes with.
pub const OPERATION_DENIED: Status = Status {
    sct: 0,
    sc: 0x15,
    more: false,
    dnr: true,
};

/// Size of the Witness Lease data.
pub const WITNESS_LEASE_DATA_LEN: usize = 64;
/// Longest lease a Witness Lease may ask for, in milliseconds.
pub const MAX_LEASE_MS: u32 = 60_000;

/// Why a vendor command was refused by its decoder (maps to Invalid Field in Command).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VendorError {
    /// The SQE's opcode is not the command decoded.
    Opcode(u8),
    /// NSID 0 or broadcast where a namespace is needed.
    Nsid(u32),
    /// Reserved bits set in the command dword `n` (its index in the SQE).
    ReservedDword(usize),
    /// The data is not exactly [`WITNESS_LEASE_DATA_LEN`] bytes.
    DataLen(usize),
    /// A reserved data byte is not zero (its offset).
    ReservedByte(usize),
    /// Lease duration outside 1..=[`MAX_LEASE_MS`].
    LeaseMs(u32),
    /// Op byte outside 0..=2.
    Op(u8),
}

impl std::fmt::Display for VendorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VendorError::Opcode(o) => write!(f, "opcode {o:#04x} is not this command"),
            VendorError::Nsid(n) => write!(f, "NSID {n:#x} names no single namespace"),
            VendorError::ReservedDword(d) => write!(f, "reserved bits set in CDW{d}"),
            VendorError::DataLen(n) => write!(f, "data is {n} bytes, want 64"),
            VendorError::ReservedByte(o) => write!(f, "reserved data byte {o} is not zero"),
            VendorError::LeaseMs(ms) => write!(f, "lease {ms} ms outside 1..=60000"),
            VendorError::Op(op) => write!(f, "op {op} outside 0..=2"),
        }
    }
}

impl std::error::Error for VendorError {}

/// A decoded Mirror Admit (C1h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MirrorAdmit {
    /// The mirrored namespace.
    pub nsid: u32,
    /// The primary's epoch.
    pub epoch: u64,
    /// The secondary is in sync as of this epoch (persist as synced).
    pub in_sync: bool,
}

impl MirrorAdmit {
    /// Decode from the SQE (opcode C1h, NSID 1..=FFFFFFFEh, CDW12 bits 31:1 and CDW13..15 zero).
    pub fn decode(sqe: &Sqe) -> Result<MirrorAdmit, VendorError> {
        if sqe.opcode() != opcode::MIRROR_ADMIT {
            return Err(VendorError::Opcode(sqe.opcode()));
        }
        let nsid = sqe.nsid().0;
        if nsid == 0 || nsid == u32::MAX {
            return Err(VendorError::Nsid(nsid));
        }
        if sqe.cdw12() & !1 != 0 {
            return Err(VendorError::ReservedDword(12));
        }
        for n in 13..16 {
            if sqe.cdw(n) != 0 {
                return Err(VendorError::ReservedDword(n));
            }
        }
        let epoch = u64::from(sqe.cdw10()) | (u64::from(sqe.cdw11()) << 32);
        Ok(MirrorAdmit {
            nsid,
            epoch,
            in_sync: sqe.cdw12() & 1 != 0,
        })
    }

    /// Encode into `sqe` (opcode, NSID, CDW10..12; CID and the rest left as they are).
    pub fn encode_into(&self, sqe: &mut Sqe) {
        sqe.0[0] = opcode::MIRROR_ADMIT;
        sqe.set_nsid(crate::NamespaceId(self.nsid));
        sqe.set_cdw(10, self.epoch as u32);
        sqe.set_cdw(11, (self.epoch >> 32) as u32);
        sqe.set_cdw(12, u32::from(self.in_sync));
        for n in 13..16 {
            sqe.set_cdw(n, 0);
        }
    }
}

/// The answer to a Mirror Admit (CQE DW0/DW1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmitReply {
    /// The secondary holds a copy synced at the admitted epoch.
    pub synced: bool,
    /// Low 32 bits of the epoch the secondary's copy was last synced at.
    pub synced_epoch_lo: u32,
}

impl AdmitReply {
    /// Put into a CQE's DW0/DW1.
    pub fn encode_into(&self, cqe: &mut Cqe) {
        cqe.dw0 = u32::from(self.synced);
        cqe.dw1 = self.synced_epoch_lo;
    }
    /// Read from a CQE's DW0/DW1 (reserved DW0 bits ignored).
    pub fn from_cqe(cqe: &Cqe) -> AdmitReply {
        AdmitReply {
            synced: cqe.dw0 & 1 != 0,
            synced_epoch_lo: cqe.dw1,
        }
    }
}

/// What a Witness Lease asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseOpCode {
    /// 0: take the lease or renew it.
    Acquire,
    /// 1: give it up.
    Release,
    /// 2: only ask how it stands.
    Query,
}

impl LeaseOpCode {
    /// The wire byte.
    pub fn to_byte(self) -> u8 {
        match self {
            LeaseOpCode::Acquire => 0,
            LeaseOpCode::Release => 1,
            LeaseOpCode::Query => 2,
        }
    }
    /// From the wire byte.
    pub fn from_byte(b: u8) -> Option<LeaseOpCode> {
        match b {
            0 => Some(LeaseOpCode::Acquire),
            1 => Some(LeaseOpCode::Release),
            2 => Some(LeaseOpCode::Query),
            _ => None,
        }
    }
}

/// A decoded Witness Lease (C5h) data block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WitnessLease {
    /// The volume (namespace NGUID).
    pub volume: [u8; 16],
    /// The box asking.
    pub holder: [u8; 16],
    /// The epoch it holds or wants.
    pub epoch: u64,
    /// Lease duration in ms (1..=60000).
    pub lease_ms: u32,
    /// What it asks.
    pub op: LeaseOpCode,
    /// Flags bit 0: its peer has every write it acknowledged.
    pub peer_in_sync: bool,
}

impl WitnessLease {
    /// Decode from the SQE (opcode C5h, CDW10..15 zero) and its 64-byte data.
    pub fn decode(sqe: &Sqe, data: &[u8]) -> Result<WitnessLease, VendorError> {
        if sqe.opcode() != opcode::WITNESS_LEASE {
            return Err(VendorError::Opcode(sqe.opcode()));
        }
        for n in 10..16 {
            if sqe.cdw(n) != 0 {
                return Err(VendorError::ReservedDword(n));
            }
        }
        let Ok(d) = <&[u8; WITNESS_LEASE_DATA_LEN]>::try_from(data) else {
            return Err(VendorError::DataLen(data.len()));
        };
        if let Some(off) = (46..WITNESS_LEASE_DATA_LEN).find(|&o| d[o] != 0) {
            return Err(VendorError::ReservedByte(off));
        }
        if d[45] & !1 != 0 {
            return Err(VendorError::ReservedByte(45));
        }
        let lease_ms = le32(d, 40);
        if lease_ms == 0 || lease_ms > MAX_LEASE_MS {
            return Err(VendorError::LeaseMs(lease_ms));
        }
        let op = LeaseOpCode::from_byte(d[44]).ok_or(VendorError::Op(d[44]))?;
        let mut volume = [0u8; 16];
        volume.copy_from_slice(&d[0..16]);
        let mut holder = [0u8; 16];
        holder.copy_from_slice(&d[16..32]);
        Ok(WitnessLease {
            volume,
            holder,
            epoch: le64(d, 32),
            lease_ms,
            op,
            peer_in_sync: d[45] & 1 != 0,
        })
    }

    /// The 64-byte data.
    pub fn encode_data(&self) -> [u8; WITNESS_LEASE_DATA_LEN] {
        let mut d = [0u8; WITNESS_LEASE_DATA_LEN];
        d[0..16].copy_from_slice(&self.volume);
        d[16..32].copy_from_slice(&self.holder);
        put64(&mut d, 32, self.epoch);
        put32(&mut d, 40, self.lease_ms);
        d[44] = self.op.to_byte();
        d[45] = u8::from(self.peer_in_sync);
        d
    }

    /// Set the SQE's opcode and clear CDW10..15 (CID and SGL are the transport's).
    pub fn encode_sqe(sqe: &mut Sqe) {
        sqe.0[0] = opcode::WITNESS_LEASE;
        for n in 10..16 {
            sqe.set_cdw(n, 0);
        }
    }
}

/// The answer to a Witness Lease (CQE DW0/DW1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseReplyDw {
    /// The requester holds the lease now (or gave it up, for Release).
    pub granted: bool,
    /// Ms left on the current holder's lease.
    pub ms_left: u32,
}

impl LeaseReplyDw {
    /// Put into a CQE's DW0/DW1.
    pub fn encode_into(&self, cqe: &mut Cqe) {
        cqe.dw0 = u32::from(self.granted);
        cqe.dw1 = self.ms_left;
    }
    /// Read from a CQE's DW0/DW1 (reserved DW0 bits ignored).
    pub fn from_cqe(cqe: &Cqe) -> LeaseReplyDw {
        LeaseReplyDw {
            granted: cqe.dw0 & 1 != 0,
            ms_left: cqe.dw1,
        }
    }
}

/// Largest number of registrants a [`ResvImage`] carries.
pub const RESV_IMAGE_MAX_REGS: usize = 1024;
/// Size of a [`ResvImage`]'s header.
pub const RESV_IMAGE_HEADER: usize = 32;
/// Size of one registrant entry of a [`ResvImage`].
pub const RESV_IMAGE_ENTRY: usize = 24;
/// Largest [`ResvImage`] data (header and [`RESV_IMAGE_MAX_REGS`] entries).
pub const RESV_IMAGE_MAX_LEN: usize = RESV_IMAGE_HEADER + RESV_IMAGE_ENTRY * RESV_IMAGE_MAX_REGS;

/// The reservation table of a namespace as Mirror Reservations (C9h) carries it, little endian:
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | generation (PRGEN) |
/// | 4 | flags: bit 0 PTPL; bits 7:1 reserved |
/// | 5 | reservation type (0: none held; 1..=6) |
/// | 6..8 | number of registrants N (at most [`RESV_IMAGE_MAX_REGS`]) |
/// | 8..24 | the holder's host identifier (zero when none is held) |
/// | 24..32 | reserved |
/// | 32.. | N entries of 24 bytes: host identifier (16), reservation key (8) |
///
/// The length is exactly 32 + 24 N. [`ResvImage::decode`] also refuses what no reservation
/// table can be: a host registered twice, a reservation without registrants, a holder that is
/// not registered (unless the type is an All Registrants one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResvImage {
    /// Reservation generation.
    pub generation: u32,
    /// Persist Through Power Loss.
    pub ptpl: bool,
    /// The reservation held: (type, holder's host identifier).
    pub reservation: Option<(u8, [u8; 16])>,
    /// Registrants in registration order: (host identifier, key).
    pub regs: Vec<([u8; 16], u64)>,
}

/// Why a Mirror Reservations command or its data was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResvImageError {
    /// The SQE: opcode, NSID or a reserved dword ([`VendorError`]).
    Sqe(VendorError),
    /// The data is shorter than the header, or not 32 + 24 N bytes.
    DataLen(usize),
    /// More registrants than [`RESV_IMAGE_MAX_REGS`].
    Count(usize),
    /// A reserved bit or byte is set (its offset).
    ReservedByte(usize),
    /// Reservation type outside 0..=6.
    Type(u8),
    /// A holder identifier without a reservation, a reservation without registrants, or a
    /// holder that is not registered.
    Holder,
    /// The registrant at this index is registered already.
    Duplicate(usize),
}

impl std::fmt::Display for ResvImageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResvImageError::Sqe(e) => write!(f, "{e}"),
            ResvImageError::DataLen(n) => write!(f, "reservation table of {n} bytes"),
            ResvImageError::Count(n) => write!(f, "{n} registrants, at most 1024"),
            ResvImageError::ReservedByte(o) => write!(f, "reserved data byte {o} is not zero"),
            ResvImageError::Type(t) => write!(f, "reservation type {t} outside 0..=6"),
            ResvImageError::Holder => write!(f, "the holder is not a registrant"),
            ResvImageError::Duplicate(i) => write!(f, "registrant {i} is registered twice"),
        }
    }
}

impl std::error::Error for ResvImageError {}

impl ResvImage {
    /// Decode (see the type's docs); never panics.
    pub fn decode(d: &[u8]) -> Result<ResvImage, ResvImageError> {
        if d.len() < RESV_IMAGE_HEADER {
            return Err(ResvImageError::DataLen(d.len()));
        }
        let n = usize::from(crate::le16(d, 6));
        if n > RESV_IMAGE_MAX_REGS {
            return Err(ResvImageError::Count(n));
        }
        if d.len() != RESV_IMAGE_HEADER + RESV_IMAGE_ENTRY * n {
            return Err(ResvImageError::DataLen(d.len()));
        }
        if d[4] & !1 != 0 {
            return Err(ResvImageError::ReservedByte(4));
        }
        if let Some(o) = (24..RESV_IMAGE_HEADER).find(|&o| d[o] != 0) {
            return Err(ResvImageError::ReservedByte(o));
        }
        let rtype = d[5];
        if rtype > crate::resv::rtype::EXCLUSIVE_ACCESS_ALL_REGS {
            return Err(ResvImageError::Type(rtype));
        }
        let mut holder = [0u8; 16];
        holder.copy_from_slice(&d[8..24]);
        let mut regs: Vec<([u8; 16], u64)> = Vec::with_capacity(n);
        for (i, e) in d[RESV_IMAGE_HEADER..]
            .chunks_exact(RESV_IMAGE_ENTRY)
            .enumerate()
        {
            let mut host = [0u8; 16];
            host.copy_from_slice(&e[..16]);
            if regs.iter().any(|(h, _)| *h == host) {
                return Err(ResvImageError::Duplicate(i));
            }
            regs.push((host, le64(e, 16)));
        }
        let reservation = match rtype {
            0 if holder != [0; 16] => return Err(ResvImageError::Holder),
            0 => None,
            _ => {
                let all = rtype >= crate::resv::rtype::WRITE_EXCLUSIVE_ALL_REGS;
                if regs.is_empty() || (!all && !regs.iter().any(|(h, _)| *h == holder)) {
                    return Err(ResvImageError::Holder);
                }
                Some((rtype, holder))
            }
        };
        Ok(ResvImage {
            generation: le32(d, 0),
            ptpl: d[4] & 1 != 0,
            reservation,
            regs,
        })
    }

    /// Encode (the inverse of [`ResvImage::decode`] for a table it accepts).
    pub fn encode(&self) -> Vec<u8> {
        let mut d = vec![0u8; RESV_IMAGE_HEADER + RESV_IMAGE_ENTRY * self.regs.len()];
        put32(&mut d, 0, self.generation);
        d[4] = u8::from(self.ptpl);
        if let Some((t, h)) = self.reservation {
            d[5] = t;
            d[8..24].copy_from_slice(&h);
        }
        crate::put16(
            &mut d,
            6,
            u16::try_from(self.regs.len()).unwrap_or(u16::MAX),
        );
        for (i, (h, k)) in self.regs.iter().enumerate() {
            let o = RESV_IMAGE_HEADER + RESV_IMAGE_ENTRY * i;
            d[o..o + 16].copy_from_slice(h);
            put64(&mut d, o + 16, *k);
        }
        d
    }
}

/// A decoded Mirror Reservations (C9h).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorResv {
    /// The mirrored namespace.
    pub nsid: u32,
    /// The primary's epoch.
    pub epoch: u64,
    /// The namespace's whole reservation table.
    pub image: ResvImage,
}

impl MirrorResv {
    /// Decode from the SQE (opcode C9h, NSID 1..=FFFFFFFEh, CDW12..15 zero) and its data.
    pub fn decode(sqe: &Sqe, data: &[u8]) -> Result<MirrorResv, ResvImageError> {
        let (nsid, epoch) = Self::decode_sqe(sqe).map_err(ResvImageError::Sqe)?;
        Ok(MirrorResv {
            nsid,
            epoch,
            image: ResvImage::decode(data)?,
        })
    }

    /// The SQE's part alone: (NSID, epoch).
    pub fn decode_sqe(sqe: &Sqe) -> Result<(u32, u64), VendorError> {
        if sqe.opcode() != opcode::MIRROR_RESV {
            return Err(VendorError::Opcode(sqe.opcode()));
        }
        let nsid = sqe.nsid().0;
        if nsid == 0 || nsid == u32::MAX {
            return Err(VendorError::Nsid(nsid));
        }
        if let Some(n) = (12..16).find(|&n| sqe.cdw(n) != 0) {
            return Err(VendorError::ReservedDword(n));
        }
        Ok((
            nsid,
            u64::from(sqe.cdw10()) | (u64::from(sqe.cdw11()) << 32),
        ))
    }

    /// Set the SQE's opcode, NSID, CDW10..15 (CID and SGL are the transport's); the data is
    /// `image.encode()`.
    pub fn encode_sqe(nsid: u32, epoch: u64, sqe: &mut Sqe) {
        sqe.0[0] = opcode::MIRROR_RESV;
        sqe.set_nsid(crate::NamespaceId(nsid));
        sqe.set_cdw(10, epoch as u32);
        sqe.set_cdw(11, (epoch >> 32) as u32);
        for n in 12..16 {
            sqe.set_cdw(n, 0);
        }
    }
}

/// Longest snapshot name a Mirror Snapshot carries.
pub const SNAPSHOT_NAME_MAX: usize = 64;

/// What a Mirror Snapshot (CDh) asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotOp {
    /// Take the snapshot of the namespace under its I/O hold (CDW12 = 0).
    Take,
    /// Delete the snapshot of that name (CDW12 = 1).
    Delete,
}

/// A decoded Mirror Snapshot (CDh).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorSnapshot {
    /// The mirrored namespace.
    pub nsid: u32,
    /// The primary's epoch.
    pub epoch: u64,
    /// Take or delete.
    pub op: SnapshotOp,
    /// The snapshot's name (checked: 1..=64 safe characters, the first alphanumeric).
    pub name: String,
}

impl MirrorSnapshot {
    /// Decode from the SQE (opcode CDh, NSID 1..=FFFFFFFEh, CDW12 0 or 1, CDW13..15 zero) and
    /// its data (the name). A name of another length is [`VendorError::DataLen`]; a byte
    /// outside the alphabet is [`VendorError::ReservedByte`] at its offset.
    pub fn decode(sqe: &Sqe, data: &[u8]) -> Result<MirrorSnapshot, VendorError> {
        if sqe.opcode() != opcode::MIRROR_SNAPSHOT {
            return Err(VendorError::Opcode(sqe.opcode()));
        }
        let nsid = sqe.nsid().0;
        if nsid == 0 || nsid == u32::MAX {
            return Err(VendorError::Nsid(nsid));
        }
        if let Some(n) = (13..16).find(|&n| sqe.cdw(n) != 0) {
            return Err(VendorError::ReservedDword(n));
        }
        let op = match sqe.cdw(12) {
            0 => SnapshotOp::Take,
            1 => SnapshotOp::Delete,
            other => return Err(VendorError::Op(u8::try_from(other).unwrap_or(u8::MAX))),
        };
        if data.is_empty() || data.len() > SNAPSHOT_NAME_MAX {
            return Err(VendorError::DataLen(data.len()));
        }
        let ok = |i: usize, b: u8| {
            b.is_ascii_alphanumeric() || (i > 0 && matches!(b, b'.' | b'_' | b'-'))
        };
        if let Some(i) = data.iter().enumerate().position(|(i, &b)| !ok(i, b)) {
            return Err(VendorError::ReservedByte(i));
        }
        Ok(MirrorSnapshot {
            nsid,
            epoch: u64::from(sqe.cdw10()) | (u64::from(sqe.cdw11()) << 32),
            op,
            name: String::from_utf8_lossy(data).into_owned(),
        })
    }

    /// Set the SQE's opcode, NSID, CDW10..15 (CID and SGL are the transport's); the data is
    /// the name's bytes.
    pub fn encode_sqe(&self, sqe: &mut Sqe) {
        sqe.0[0] = opcode::MIRROR_SNAPSHOT;
        sqe.set_nsid(crate::NamespaceId(self.nsid));
        sqe.set_cdw(10, self.epoch as u32);
        sqe.set_cdw(11, (self.epoch >> 32) as u32);
        sqe.set_cdw(12, u32::from(self.op == SnapshotOp::Delete));
        for n in 13..16 {
            sqe.set_cdw(n, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CommandId, QueueId};

    fn admit_sqe(a: &MirrorAdmit) -> Sqe {
        let mut s = Sqe::new(opcode::MIRROR_ADMIT, CommandId(3));
        a.encode_into(&mut s);
        s
    }

    fn lease() -> WitnessLease {
        WitnessLease {
            volume: [7; 16],
            holder: [9; 16],
            epoch: 0x1_0000_0002,
            lease_ms: 4000,
            op: LeaseOpCode::Release,
            peer_in_sync: true,
        }
    }

    fn lease_sqe() -> Sqe {
        let mut s = Sqe::new(0, CommandId(4));
        WitnessLease::encode_sqe(&mut s);
        s
    }

    #[test]
    fn admit_round_trip() {
        for a in [
            MirrorAdmit {
                nsid: 1,
                epoch: 0,
                in_sync: false,
            },
            MirrorAdmit {
                nsid: 0xFFFF_FFFE,
                epoch: u64::MAX,
                in_sync: true,
            },
            MirrorAdmit {
                nsid: 5,
                epoch: 0x1234_5678_9ABC_DEF0,
                in_sync: true,
            },
        ] {
            assert_eq!(MirrorAdmit::decode(&admit_sqe(&a)), Ok(a));
        }
    }

    #[test]
    fn admit_refusals() {
        let a = MirrorAdmit {
            nsid: 1,
            epoch: 2,
            in_sync: false,
        };
        let mut s = admit_sqe(&a);
        s.0[0] = 0xC5;
        assert_eq!(MirrorAdmit::decode(&s), Err(VendorError::Opcode(0xC5)));
        for nsid in [0, u32::MAX] {
            let mut s = admit_sqe(&a);
            s.set_nsid(crate::NamespaceId(nsid));
            assert_eq!(MirrorAdmit::decode(&s), Err(VendorError::Nsid(nsid)));
        }
        let mut s = admit_sqe(&a);
        s.set_cdw(12, 2);
        assert_eq!(MirrorAdmit::decode(&s), Err(VendorError::ReservedDword(12)));
        for n in 13..16 {
            let mut s = admit_sqe(&a);
            s.set_cdw(n, 1 << 31);
            assert_eq!(MirrorAdmit::decode(&s), Err(VendorError::ReservedDword(n)));
        }
    }

    #[test]
    fn admit_reply_round_trip() {
        let r = AdmitReply {
            synced: true,
            synced_epoch_lo: 77,
        };
        let mut c = Cqe::new(CommandId(1), QueueId::ADMIN, Status::SUCCESS);
        r.encode_into(&mut c);
        assert_eq!((c.dw0, c.dw1), (1, 77));
        assert_eq!(AdmitReply::from_cqe(&Cqe::decode(&c.to_bytes())), r);
        assert!(!OPERATION_DENIED.is_success());
        const { assert!(OPERATION_DENIED.dnr) };
        assert_eq!((OPERATION_DENIED.sct, OPERATION_DENIED.sc), (0, 0x15));
    }

    #[test]
    fn lease_round_trip() {
        let s = lease_sqe();
        for op in [
            LeaseOpCode::Acquire,
            LeaseOpCode::Release,
            LeaseOpCode::Query,
        ] {
            for (ms, sync) in [(1, false), (MAX_LEASE_MS, true)] {
                let l = WitnessLease {
                    op,
                    lease_ms: ms,
                    peer_in_sync: sync,
                    ..lease()
                };
                assert_eq!(WitnessLease::decode(&s, &l.encode_data()), Ok(l));
            }
        }
        let r = LeaseReplyDw {
            granted: true,
            ms_left: 3999,
        };
        let mut c = Cqe::default();
        r.encode_into(&mut c);
        assert_eq!(LeaseReplyDw::from_cqe(&c), r);
    }

    #[test]
    fn lease_refusals() {
        let s = lease_sqe();
        let d = lease().encode_data();
        let mut bad = s;
        bad.0[0] = 0xC1;
        assert_eq!(
            WitnessLease::decode(&bad, &d),
            Err(VendorError::Opcode(0xC1))
        );
        for n in 10..16 {
            let mut bad = s;
            bad.set_cdw(n, 1);
            assert_eq!(
                WitnessLease::decode(&bad, &d),
                Err(VendorError::ReservedDword(n))
            );
        }
        assert_eq!(
            WitnessLease::decode(&s, &d[..63]),
            Err(VendorError::DataLen(63))
        );
        let mut long = d.to_vec();
        long.push(0);
        assert_eq!(
            WitnessLease::decode(&s, &long),
            Err(VendorError::DataLen(65))
        );
        for off in 46..64 {
            let mut bad = d;
            bad[off] = 1;
            assert_eq!(
                WitnessLease::decode(&s, &bad),
                Err(VendorError::ReservedByte(off))
            );
        }
        let mut bad = d;
        bad[45] = 2;
        assert_eq!(
            WitnessLease::decode(&s, &bad),
            Err(VendorError::ReservedByte(45))
        );
        for ms in [0, MAX_LEASE_MS + 1, u32::MAX] {
            let mut bad = d;
            bad[40..44].copy_from_slice(&ms.to_le_bytes());
            assert_eq!(
                WitnessLease::decode(&s, &bad),
                Err(VendorError::LeaseMs(ms))
            );
        }
        for op in [3u8, 0xFF] {
            let mut bad = d;
            bad[44] = op;
            assert_eq!(WitnessLease::decode(&s, &bad), Err(VendorError::Op(op)));
        }
    }

    fn image() -> ResvImage {
        ResvImage {
            generation: 0x0102_0304,
            ptpl: true,
            reservation: Some((1, [0xA; 16])),
            regs: vec![([0xA; 16], 0xDEAD_BEEF), ([0xB; 16], 7)],
        }
    }

    fn resv_sqe() -> Sqe {
        let mut s = Sqe::new(0, CommandId(5));
        MirrorResv::encode_sqe(2, 0x1_0000_0009, &mut s);
        s
    }

    #[test]
    fn resv_round_trip() {
        let s = resv_sqe();
        for img in [
            ResvImage::default(),
            image(),
            ResvImage {
                reservation: Some((6, [0; 16])),
                regs: vec![([1; 16], 1)],
                ..ResvImage::default()
            },
        ] {
            let d = img.encode();
            assert_eq!(d.len(), 32 + 24 * img.regs.len());
            let m = MirrorResv::decode(&s, &d).unwrap();
            assert_eq!((m.nsid, m.epoch), (2, 0x1_0000_0009));
            assert_eq!(m.image, img);
        }
        let mut many = ResvImage::default();
        for i in 0..RESV_IMAGE_MAX_REGS {
            let mut h = [0u8; 16];
            h[..8].copy_from_slice(&(i as u64).to_le_bytes());
            many.regs.push((h, i as u64));
        }
        let d = many.encode();
        assert_eq!(d.len(), RESV_IMAGE_MAX_LEN);
        assert_eq!(ResvImage::decode(&d), Ok(many));
    }

    #[test]
    fn resv_refusals() {
        use ResvImageError as E;
        let s = resv_sqe();
        let d = image().encode();
        let mut bad = s;
        bad.0[0] = opcode::WITNESS_LEASE;
        assert_eq!(
            MirrorResv::decode(&bad, &d),
            Err(E::Sqe(VendorError::Opcode(opcode::WITNESS_LEASE)))
        );
        for nsid in [0, u32::MAX] {
            let mut bad = s;
            bad.set_nsid(crate::NamespaceId(nsid));
            assert_eq!(
                MirrorResv::decode(&bad, &d),
                Err(E::Sqe(VendorError::Nsid(nsid)))
            );
        }
        for n in 12..16 {
            let mut bad = s;
            bad.set_cdw(n, 1);
            assert_eq!(
                MirrorResv::decode(&bad, &d),
                Err(E::Sqe(VendorError::ReservedDword(n)))
            );
        }
        assert_eq!(ResvImage::decode(&d[..31]), Err(E::DataLen(31)));
        assert_eq!(ResvImage::decode(&d[..d.len() - 1]), Err(E::DataLen(79)));
        let mut long = d.clone();
        long.push(0);
        assert_eq!(ResvImage::decode(&long), Err(E::DataLen(81)));
        let mut b = d.clone();
        b[6..8].copy_from_slice(&1025u16.to_le_bytes());
        assert_eq!(ResvImage::decode(&b), Err(E::Count(1025)));
        let mut b = d.clone();
        b[4] = 2;
        assert_eq!(ResvImage::decode(&b), Err(E::ReservedByte(4)));
        for o in 24..32 {
            let mut b = d.clone();
            b[o] = 1;
            assert_eq!(ResvImage::decode(&b), Err(E::ReservedByte(o)));
        }
        let mut b = d.clone();
        b[5] = 7;
        assert_eq!(ResvImage::decode(&b), Err(E::Type(7)));
        // A holder that is not registered (type 1 is not All Registrants).
        let mut b = d.clone();
        b[8] = 0xC;
        assert_eq!(ResvImage::decode(&b), Err(E::Holder));
        // A holder without a reservation.
        let mut b = d.clone();
        b[5] = 0;
        assert_eq!(ResvImage::decode(&b), Err(E::Holder));
        // A reservation without registrants.
        let none = ResvImage {
            reservation: Some((5, [0; 16])),
            ..ResvImage::default()
        };
        assert_eq!(ResvImage::decode(&none.encode()), Err(E::Holder));
        let mut b = d.clone();
        let (first, second) = b.split_at_mut(56);
        second[..16].copy_from_slice(&first[32..48]);
        assert_eq!(ResvImage::decode(&b), Err(E::Duplicate(1)));
    }

    #[test]
    fn mirror_snapshot_round_trips_and_refuses_bad_names() {
        let m = MirrorSnapshot {
            nsid: 3,
            epoch: 0x1_0000_0002,
            op: SnapshotOp::Delete,
            name: "daily-1.a_b".into(),
        };
        let mut s = Sqe::new(0, CommandId(5));
        m.encode_sqe(&mut s);
        assert_eq!(MirrorSnapshot::decode(&s, m.name.as_bytes()), Ok(m.clone()));
        assert_eq!(
            MirrorSnapshot::decode(&s, b""),
            Err(VendorError::DataLen(0))
        );
        assert_eq!(
            MirrorSnapshot::decode(&s, &[b'a'; 65]),
            Err(VendorError::DataLen(65))
        );
        assert_eq!(
            MirrorSnapshot::decode(&s, b"-x"),
            Err(VendorError::ReservedByte(0))
        );
        assert_eq!(
            MirrorSnapshot::decode(&s, b"a/b"),
            Err(VendorError::ReservedByte(1))
        );
        let mut bad = s;
        bad.set_cdw(12, 2);
        assert_eq!(MirrorSnapshot::decode(&bad, b"a"), Err(VendorError::Op(2)));
        bad.set_cdw(12, 0);
        bad.set_cdw(14, 1);
        assert_eq!(
            MirrorSnapshot::decode(&bad, b"a"),
            Err(VendorError::ReservedDword(14))
        );
        bad.set_nsid(crate::NamespaceId(0));
        assert_eq!(
            MirrorSnapshot::decode(&bad, b"a"),
            Err(VendorError::Nsid(0))
        );
    }
}
