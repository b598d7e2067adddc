//! Discovery Information Management (DIM, admin opcode 21h; NVMe-oF TP 8010, folded into
//! NVMe Base 2.0c / NVMe-oF 1.1a; libnvme `struct nvmf_dim_data`, `struct nvmf_ext_die`,
//! `struct nvmf_ext_attr`).
//!
//! A host (or a discovery controller announcing itself to a Central Discovery Controller)
//! sends its discovery information to a discovery controller: CDW10 bits 3:0 are the task
//! ([`DimTask`]: register, deregister, update), the data is a 1024-byte header naming the
//! entity (type, NQN, name, version) followed by NUMENT discovery information entries, either
//! all basic (1024-byte discovery log entries) or all extended (a 1032-byte fixed part plus
//! extended attributes such as the Host ID and the symbolic name, TEL bytes in all).
//!
//! What libnvme (`nvme dim`, nvme-stas) sends for a host: TDL = 1024 + TEL, NUMENT 1,
//! ENTFMT extended, ETYPE host, EKTYPE 5Fh, EID = host NQN, ENAME = host name, EVER = OS
//! name and version, one extended entry with TRTYPE TCP, the address family of the
//! connection, NQN = host NQN, TRADDR empty ("take it from the connection"), and two
//! attributes: Host ID (16 bytes) and, when configured, the symbolic name (space padded to a
//! multiple of 4). [`DimData::host`] builds exactly that.
//!
//! [`DimData::decode`] checks every length and field of untrusted data in one place and says
//! which byte offset is at fault ([`DimError`]); [`DimError::status`] is the status to return.

use crate::discovery::{DISCOVERY_ENTRY_LEN, DiscoveryLogEntry, adrfam, trtype};
use crate::identify::{get_ascii, put_ascii, put_nul_padded};
use crate::{Status, is_valid_nqn, le16, le32, le64, nul_padded_str, put16, put32, put64};
use std::net::{IpAddr, SocketAddr};

/// Size of the DIM data header (entries start here).
pub const DIM_HEADER_LEN: usize = 1024;
/// Size of the fixed part of an extended discovery information entry (attributes follow).
pub const EXT_ENTRY_FIXED_LEN: usize = 1032;
/// Size of an extended attribute's header (EXATTYPE, EXATLEN).
pub const EXAT_HEADER_LEN: usize = 4;
/// Width of ENAME (entity name, e.g. the host name).
pub const ENAME_LEN: usize = 256;
/// Width of EVER (entity version, e.g. the OS name and version).
pub const EVER_LEN: usize = 64;
/// The Entry Key Type libnvme sends ("must be 5Fh per specs"); carried, not interpreted.
pub const EKTYPE_DEFAULT: u16 = 0x5F;

/// Byte offsets of the header fields (also the offsets [`DimError`] reports).
pub mod off {
    /// Total Data Length (4 bytes).
    pub const TDL: u32 = 0;
    /// Number of Entries (8 bytes).
    pub const NUMENT: u32 = 8;
    /// Entry Format (2 bytes).
    pub const ENTFMT: u32 = 16;
    /// Entity Type (2 bytes).
    pub const ETYPE: u32 = 18;
    /// Port Local (1 byte).
    pub const PORTLCL: u32 = 20;
    /// Entry Key Type (2 bytes).
    pub const EKTYPE: u32 = 22;
    /// Entity Identifier: the entity's NQN (256 bytes).
    pub const EID: u32 = 24;
    /// Entity Name (256 bytes).
    pub const ENAME: u32 = 280;
    /// Entity Version (64 bytes).
    pub const EVER: u32 = 536;
    /// First entry.
    pub const ENTRIES: u32 = 1024;
    /// Within an entry: Transport Type.
    pub const E_TRTYPE: u32 = 0;
    /// Within an entry: Address Family.
    pub const E_ADRFAM: u32 = 1;
    /// Within an entry: NQN.
    pub const E_NQN: u32 = 256;
    /// Within an entry: Transport Address.
    pub const E_TRADDR: u32 = 512;
    /// Within an extended entry: Total Entry Length.
    pub const E_TEL: u32 = 1024;
    /// Within an extended entry: Number of Extended Attributes.
    pub const E_NUMEXAT: u32 = 1028;
}

/// The task of a DIM command (CDW10 bits 3:0, TAS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DimTask {
    /// Register the entity's discovery information (replacing an earlier registration).
    Register,
    /// Remove the entity's registration.
    Deregister,
    /// Change an existing registration.
    Update,
}

impl DimTask {
    /// TAS of CDW10 (bits 3:0), `None` for a reserved value.
    pub fn from_cdw10(cdw10: u32) -> Option<DimTask> {
        match cdw10 & 0xF {
            0 => Some(DimTask::Register),
            1 => Some(DimTask::Deregister),
            2 => Some(DimTask::Update),
            _ => None,
        }
    }
    /// CDW10 carrying this task.
    pub fn cdw10(self) -> u32 {
        match self {
            DimTask::Register => 0,
            DimTask::Deregister => 1,
            DimTask::Update => 2,
        }
    }
    /// The task as `nvme dim --task` spells it.
    pub fn name(self) -> &'static str {
        match self {
            DimTask::Register => "register",
            DimTask::Deregister => "deregister",
            DimTask::Update => "update",
        }
    }
}

/// Entity Type (ETYPE): who the discovery information describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntityType {
    /// A host (1h).
    Host,
    /// A Direct Discovery Controller (2h).
    Ddc,
    /// A Central Discovery Controller (3h).
    Cdc,
}

impl EntityType {
    /// From the ETYPE field, `None` for a reserved value.
    pub fn from_code(v: u16) -> Option<EntityType> {
        match v {
            1 => Some(EntityType::Host),
            2 => Some(EntityType::Ddc),
            3 => Some(EntityType::Cdc),
            _ => None,
        }
    }
    /// The ETYPE value.
    pub fn code(self) -> u16 {
        match self {
            EntityType::Host => 1,
            EntityType::Ddc => 2,
            EntityType::Cdc => 3,
        }
    }
    /// Lower-case name ("host", "ddc", "cdc").
    pub fn name(self) -> &'static str {
        match self {
            EntityType::Host => "host",
            EntityType::Ddc => "ddc",
            EntityType::Cdc => "cdc",
        }
    }
}

/// Entry Format (ENTFMT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryFormat {
    /// Basic entries: 1024-byte discovery log entries (1h).
    Basic,
    /// Extended entries: fixed part plus extended attributes (2h).
    Extended,
}

impl EntryFormat {
    /// The ENTFMT value.
    pub fn code(self) -> u16 {
        match self {
            EntryFormat::Basic => 1,
            EntryFormat::Extended => 2,
        }
    }
}

/// Extended Attribute Type (EXATTYPE) values.
pub mod exattype {
    /// Host Identifier (16 bytes).
    pub const HOSTID: u16 = 1;
    /// Symbolic name (ASCII, space padded).
    pub const SYMNAME: u16 = 2;
}

/// One extended attribute of an extended entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtAttr {
    /// EXATTYPE ([`exattype`]).
    pub exattype: u16,
    /// EXATVAL, EXATLEN bytes (the encoder pads it to a multiple of 4).
    pub value: Vec<u8>,
}

/// One discovery information entry: the transport fields of a discovery log entry (EFLAGS is
/// reserved in extended entries and reads as 0) plus, for extended entries, its attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DimEntry {
    /// TRTYPE, ADRFAM, SUBTYPE, TREQ, PORTID, CNTLID, ASQSZ, TRSVCID, NQN, TRADDR, TSAS.
    pub log: DiscoveryLogEntry,
    /// Extended attributes (empty for basic entries).
    pub attrs: Vec<ExtAttr>,
}

impl DimEntry {
    /// An NVMe/TCP entry for `nqn` at `addr` (TRADDR empty and TRSVCID empty with `None`:
    /// "the address of this connection").
    pub fn tcp(subtype: u8, nqn: &str, addr: Option<SocketAddr>) -> DimEntry {
        let mut log = DiscoveryLogEntry {
            trtype: trtype::TCP,
            adrfam: adrfam::IPV4,
            subtype,
            subnqn: nqn.to_string(),
            cntlid: crate::discovery::CNTLID_DYNAMIC,
            ..Default::default()
        };
        if let Some(a) = addr {
            log.adrfam = if a.is_ipv4() {
                adrfam::IPV4
            } else {
                adrfam::IPV6
            };
            log.traddr = a.ip().to_string();
            log.trsvcid = a.port().to_string();
        }
        DimEntry {
            log,
            attrs: Vec::new(),
        }
    }
    /// The entry with extended attribute `exattype` = `value` appended.
    pub fn with_attr(mut self, exattype: u16, value: &[u8]) -> DimEntry {
        self.attrs.push(ExtAttr {
            exattype,
            value: value.to_vec(),
        });
        self
    }
    /// The Host ID attribute, if present.
    pub fn hostid(&self) -> Option<[u8; 16]> {
        self.attrs
            .iter()
            .find(|a| a.exattype == exattype::HOSTID)
            .and_then(|a| a.value.get(..16))
            .and_then(|v| <[u8; 16]>::try_from(v).ok())
    }
    /// The symbolic name attribute (padding trimmed), if present.
    pub fn symname(&self) -> Option<String> {
        self.attrs
            .iter()
            .find(|a| a.exattype == exattype::SYMNAME)
            .map(|a| get_ascii(&a.value))
    }
    /// The transport address as a socket address, when TRADDR and TRSVCID are both set.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        let ip: IpAddr = self.log.traddr.parse().ok()?;
        let port: u16 = self.log.trsvcid.parse().ok()?;
        Some(SocketAddr::new(ip, port))
    }
    /// Bytes this entry takes in extended format (TEL).
    pub fn ext_len(&self) -> usize {
        EXT_ENTRY_FIXED_LEN
            + self
                .attrs
                .iter()
                .map(|a| EXAT_HEADER_LEN + pad4(exat_value(a).len()))
                .sum::<usize>()
    }
}

fn pad4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

/// Longest attribute value the encoder sends (EXATLEN is 16 bits and a multiple of 4); a
/// longer value is cut.
pub const EXAT_MAX_LEN: usize = 0xFFFC;

fn exat_value(a: &ExtAttr) -> &[u8] {
    &a.value[..a.value.len().min(EXAT_MAX_LEN)]
}

/// A DIM command's data: the entity and its discovery information entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimData {
    /// ENTFMT: how the entries are encoded.
    pub format: EntryFormat,
    /// ETYPE.
    pub etype: EntityType,
    /// PORTLCL (bit 0: the information applies to the port the command came in on only).
    pub portlcl: u8,
    /// EKTYPE, carried as sent ([`EKTYPE_DEFAULT`] from libnvme).
    pub ektype: u16,
    /// EID: the entity's NQN (the host NQN for a host).
    pub eid: String,
    /// ENAME (e.g. the host name); at most [`ENAME_LEN`] ASCII characters are sent.
    pub ename: String,
    /// EVER (e.g. "Linux 6.12"); at most [`EVER_LEN`] ASCII characters are sent.
    pub ever: String,
    /// The discovery information entries (NUMENT of them).
    pub entries: Vec<DimEntry>,
}

impl DimData {
    /// What libnvme's `nvmf_register_ctrl` sends for a host: ETYPE host, EID = `hostnqn`, one
    /// extended NVMe/TCP entry for `hostnqn` at `addr` (`None`: the connection's address)
    /// with the Host ID and, if given and not empty, the symbolic name.
    pub fn host(
        hostnqn: &str,
        hostid: [u8; 16],
        ename: &str,
        ever: &str,
        symname: Option<&str>,
        addr: Option<SocketAddr>,
    ) -> DimData {
        let mut e = DimEntry::tcp(0, hostnqn, addr).with_attr(exattype::HOSTID, &hostid);
        if let Some(s) = symname.filter(|s| !s.is_empty()) {
            e = e.with_attr(exattype::SYMNAME, s.as_bytes());
        }
        DimData {
            format: EntryFormat::Extended,
            etype: EntityType::Host,
            portlcl: 0,
            ektype: EKTYPE_DEFAULT,
            eid: hostnqn.to_string(),
            ename: ename.to_string(),
            ever: ever.to_string(),
            entries: vec![e],
        }
    }

    /// A discovery controller (`etype` [`EntityType::Ddc`] or [`EntityType::Cdc`]) named
    /// `nqn` announcing the discovery ports `addrs` (NVMe/TCP, SUBTYPE 3 "current discovery
    /// subsystem", extended entries without attributes).
    pub fn discovery_controller(
        etype: EntityType,
        nqn: &str,
        ename: &str,
        ever: &str,
        addrs: &[SocketAddr],
    ) -> DimData {
        DimData {
            format: EntryFormat::Extended,
            etype,
            portlcl: 0,
            ektype: EKTYPE_DEFAULT,
            eid: nqn.to_string(),
            ename: ename.to_string(),
            ever: ever.to_string(),
            entries: addrs
                .iter()
                .map(|a| DimEntry::tcp(crate::discovery::subtype::CURRENT_DISCOVERY, nqn, Some(*a)))
                .collect(),
        }
    }

    /// Encode the data (TDL = its length). Basic entries drop their attributes; strings too
    /// long for their fields are cut.
    pub fn encode(&self) -> Vec<u8> {
        let body: usize = match self.format {
            EntryFormat::Basic => DISCOVERY_ENTRY_LEN * self.entries.len(),
            EntryFormat::Extended => self.entries.iter().map(DimEntry::ext_len).sum(),
        };
        let mut b = vec![0u8; DIM_HEADER_LEN + body];
        let tdl = b.len() as u32;
        put32(&mut b, 0, tdl);
        put64(&mut b, 8, self.entries.len() as u64);
        put16(&mut b, 16, self.format.code());
        put16(&mut b, 18, self.etype.code());
        b[20] = self.portlcl;
        put16(&mut b, 22, self.ektype);
        put_nul_padded(&mut b[24..280], &self.eid);
        put_nul_padded(&mut b[280..536], &self.ename);
        put_nul_padded(&mut b[536..600], &self.ever);
        let mut at = DIM_HEADER_LEN;
        let mut fixed = [0u8; DISCOVERY_ENTRY_LEN];
        for e in &self.entries {
            let mut log = e.log.clone();
            if self.format == EntryFormat::Extended {
                log.eflags = 0;
            }
            log.encode(&mut fixed);
            b[at..at + DISCOVERY_ENTRY_LEN].copy_from_slice(&fixed);
            if self.format == EntryFormat::Basic {
                at += DISCOVERY_ENTRY_LEN;
                continue;
            }
            let tel = e.ext_len();
            put32(&mut b, at + 1024, tel as u32);
            put16(&mut b, at + 1028, e.attrs.len() as u16);
            let mut p = at + EXT_ENTRY_FIXED_LEN;
            for a in &e.attrs {
                let val = exat_value(a);
                let len = pad4(val.len());
                put16(&mut b, p, a.exattype);
                put16(&mut b, p + 2, len as u16);
                let v = &mut b[p + 4..p + 4 + len];
                if a.exattype == exattype::SYMNAME {
                    // ASCII strings are space padded (NVMe Base 2.0, 1.5).
                    put_ascii(v, &String::from_utf8_lossy(val));
                } else {
                    v[..val.len()].copy_from_slice(val);
                }
                p += EXAT_HEADER_LEN + len;
            }
            at += tel;
        }
        b
    }

    /// Decode and check DIM data as a discovery controller receives it. Every length is
    /// checked against TDL and the buffer; the error names the offending byte offset.
    pub fn decode(b: &[u8]) -> Result<DimData, DimError> {
        use DimErrorKind as K;
        if b.len() < DIM_HEADER_LEN {
            return Err(DimError::new(K::Short, off::TDL));
        }
        let tdl = le32(b, 0) as usize;
        if tdl < DIM_HEADER_LEN || tdl > b.len() {
            return Err(DimError::new(K::Tdl, off::TDL));
        }
        let b = &b[..tdl];
        let format = match le16(b, 16) {
            1 => EntryFormat::Basic,
            2 => EntryFormat::Extended,
            _ => return Err(DimError::new(K::EntryFormat, off::ENTFMT)),
        };
        let etype =
            EntityType::from_code(le16(b, 18)).ok_or(DimError::new(K::EntityType, off::ETYPE))?;
        let eid = nul_padded_str(&b[24..280])
            .filter(|s| is_valid_nqn(s))
            .ok_or(DimError::new(K::Eid, off::EID))?
            .to_string();
        let ename = ascii_field(&b[280..536]).ok_or(DimError::new(K::Ename, off::ENAME))?;
        let ever = ascii_field(&b[536..600]).ok_or(DimError::new(K::Ever, off::EVER))?;
        let nument = le64(b, 8);
        let min = match format {
            EntryFormat::Basic => DISCOVERY_ENTRY_LEN,
            EntryFormat::Extended => EXT_ENTRY_FIXED_LEN,
        };
        if nument > ((tdl - DIM_HEADER_LEN) / min) as u64 {
            return Err(DimError::new(K::Nument, off::NUMENT));
        }
        let mut entries = Vec::with_capacity(nument as usize);
        let mut at = DIM_HEADER_LEN;
        for _ in 0..nument {
            let e = decode_entry(b, at, format)?;
            if etype == EntityType::Host && !e.log.subnqn.is_empty() && e.log.subnqn != eid {
                // A host's entries describe the host itself.
                return Err(DimError::new(K::NotApplicable, at32(at) + off::E_NQN));
            }
            at += match format {
                EntryFormat::Basic => DISCOVERY_ENTRY_LEN,
                EntryFormat::Extended => le32(b, at + 1024) as usize,
            };
            entries.push(e);
        }
        Ok(DimData {
            format,
            etype,
            portlcl: b[20],
            ektype: le16(b, 22),
            eid,
            ename,
            ever,
            entries,
        })
    }
}

fn at32(at: usize) -> u32 {
    u32::try_from(at).unwrap_or(u32::MAX)
}

/// An ASCII string field (NUL or space padded); `None` if it holds control or non-ASCII bytes.
fn ascii_field(b: &[u8]) -> Option<String> {
    nul_padded_str(b).map(|s| s.trim_end_matches(' ').to_string())
}

/// One entry at `at` of `b` (already cut to TDL).
fn decode_entry(b: &[u8], at: usize, format: EntryFormat) -> Result<DimEntry, DimError> {
    use DimErrorKind as K;
    let base = at32(at);
    let fixed = match format {
        EntryFormat::Basic => DISCOVERY_ENTRY_LEN,
        EntryFormat::Extended => EXT_ENTRY_FIXED_LEN,
    };
    if at + fixed > b.len() {
        return Err(DimError::new(K::Nument, off::NUMENT));
    }
    let e = &b[at..];
    if !matches!(e[0], trtype::RDMA | trtype::FC | trtype::TCP) {
        return Err(DimError::new(K::Trtype, base + off::E_TRTYPE));
    }
    if !matches!(e[1], adrfam::IPV4 | adrfam::IPV6 | adrfam::IB | adrfam::FC) {
        return Err(DimError::new(K::Adrfam, base + off::E_ADRFAM));
    }
    let nqn = nul_padded_str(&e[256..512]).ok_or(DimError::new(K::Nqn, base + off::E_NQN))?;
    if !nqn.is_empty() && !is_valid_nqn(nqn) {
        return Err(DimError::new(K::Nqn, base + off::E_NQN));
    }
    let traddr = ascii_field(&e[512..768]).ok_or(DimError::new(K::Traddr, base + off::E_TRADDR))?;
    let ip_ok = match e[1] {
        adrfam::IPV4 => traddr.parse::<std::net::Ipv4Addr>().is_ok(),
        adrfam::IPV6 => traddr.parse::<std::net::Ipv6Addr>().is_ok(),
        _ => true,
    };
    if !traddr.is_empty() && !ip_ok {
        return Err(DimError::new(K::Traddr, base + off::E_TRADDR));
    }
    let mut log = DiscoveryLogEntry::decode(&e[..DISCOVERY_ENTRY_LEN])
        .map_err(|_| DimError::new(K::Short, base))?;
    log.traddr = traddr;
    let mut attrs = Vec::new();
    if format == EntryFormat::Extended {
        log.eflags = 0;
        let tel = le32(e, 1024) as usize;
        if tel < EXT_ENTRY_FIXED_LEN || !tel.is_multiple_of(4) || tel > e.len() {
            return Err(DimError::new(K::Tel, base + off::E_TEL));
        }
        let numexat = le16(e, 1028);
        let mut p = EXT_ENTRY_FIXED_LEN;
        for _ in 0..numexat {
            if p + EXAT_HEADER_LEN > tel {
                return Err(DimError::new(K::Numexat, base + off::E_NUMEXAT));
            }
            let exattype = le16(e, p);
            let len = usize::from(le16(e, p + 2));
            if p + EXAT_HEADER_LEN + len > tel {
                return Err(DimError::new(K::Exat, base + at32(p) + 2));
            }
            let value = &e[p + EXAT_HEADER_LEN..p + EXAT_HEADER_LEN + len];
            let ok = match exattype {
                exattype::HOSTID => len >= 16,
                exattype::SYMNAME => ascii_field(value).is_some(),
                _ => true,
            };
            if !ok {
                return Err(DimError::new(K::Exat, base + at32(p) + 2));
            }
            attrs.push(ExtAttr {
                exattype,
                value: value.to_vec(),
            });
            p += EXAT_HEADER_LEN + len;
        }
    }
    Ok(DimEntry { log, attrs })
}

/// What is wrong with DIM data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DimErrorKind {
    /// Shorter than the 1024-byte header.
    Short,
    /// TDL below the header size or beyond the data sent.
    Tdl,
    /// NUMENT entries do not fit in TDL.
    Nument,
    /// ENTFMT is neither basic nor extended.
    EntryFormat,
    /// ETYPE is reserved.
    EntityType,
    /// EID is not an NQN.
    Eid,
    /// ENAME is not ASCII.
    Ename,
    /// EVER is not ASCII.
    Ever,
    /// An entry's TRTYPE is not RDMA, FC or TCP.
    Trtype,
    /// An entry's ADRFAM is not IPv4, IPv6, InfiniBand or FC.
    Adrfam,
    /// An entry's NQN is not an NQN.
    Nqn,
    /// An entry's TRADDR is not an address of its family.
    Traddr,
    /// An extended entry's TEL is below 1032, not a multiple of 4, or beyond TDL.
    Tel,
    /// NUMEXAT attributes do not fit in TEL.
    Numexat,
    /// An attribute's EXATLEN runs past TEL, or its value is unfit for its type.
    Exat,
    /// The entry does not apply to the entity type (a host's entry for another NQN).
    NotApplicable,
}

/// A DIM data error: what and the byte offset in the data of the offending field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("DIM data: {kind:?} at byte {offset}")]
pub struct DimError {
    /// What is wrong.
    pub kind: DimErrorKind,
    /// Offset in the data of the field at fault.
    pub offset: u32,
}

impl DimError {
    /// An error of `kind` at `offset`.
    pub fn new(kind: DimErrorKind, offset: u32) -> DimError {
        DimError { kind, offset }
    }
    /// The status a discovery controller returns: Invalid Discovery Information for
    /// information that does not apply to the entity type, Invalid Field in Command for
    /// everything malformed.
    pub fn status(&self) -> Status {
        match self.kind {
            DimErrorKind::NotApplicable => Status::INVALID_DISCOVERY_INFO,
            _ => Status::INVALID_FIELD,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";

    fn libnvme_like() -> DimData {
        DimData::host(
            HOST,
            [0x11; 16],
            "host1",
            "Linux 6.12.0",
            Some("rack-3"),
            None,
        )
    }

    #[test]
    fn host_registration_layout_matches_libnvme() {
        let d = libnvme_like();
        let b = d.encode();
        // 1024 header + 1032 fixed + (4 + 16) host id + (4 + 8) symname "rack-3" padded.
        assert_eq!(b.len(), 1024 + 1032 + 20 + 12);
        assert_eq!(le32(&b, 0) as usize, b.len());
        assert_eq!(le64(&b, 8), 1);
        assert_eq!(le16(&b, 16), 2);
        assert_eq!(le16(&b, 18), 1);
        assert_eq!(le16(&b, 22), 0x5F);
        assert_eq!(&b[24..24 + HOST.len()], HOST.as_bytes());
        assert_eq!(&b[280..285], b"host1");
        let e = &b[1024..];
        assert_eq!(e[0], trtype::TCP);
        assert_eq!(le32(e, 1024) as usize, 1032 + 32);
        assert_eq!(le16(e, 1028), 2);
        assert_eq!(le16(e, 1032), exattype::HOSTID);
        assert_eq!(le16(e, 1034), 16);
        assert_eq!(&e[1036..1052], &[0x11; 16]);
        assert_eq!(le16(e, 1052), exattype::SYMNAME);
        assert_eq!(le16(e, 1054), 8);
        assert_eq!(&e[1056..1064], b"rack-3  ");
        let back = DimData::decode(&b).unwrap();
        assert_eq!(back.entries[0].hostid(), Some([0x11; 16]));
        assert_eq!(back.entries[0].symname().as_deref(), Some("rack-3"));
        assert_eq!(back.eid, HOST);
        assert_eq!(back.ename, "host1");
        assert_eq!(back.ever, "Linux 6.12.0");
    }

    #[test]
    fn basic_and_ddc_round_trip() {
        let a: SocketAddr = "10.0.0.5:8009".parse().unwrap();
        let mut d = DimData::discovery_controller(
            EntityType::Ddc,
            "nqn.2014-08.org.nvmexpress.discovery",
            "box1",
            "ebof",
            &[a, "[fd00::1]:8009".parse().unwrap()],
        );
        let back = DimData::decode(&d.encode()).unwrap();
        assert_eq!(back, d);
        assert_eq!(back.entries[0].socket_addr(), Some(a));
        d.format = EntryFormat::Basic;
        let b = d.encode();
        assert_eq!(b.len(), 1024 + 2 * 1024);
        assert_eq!(DimData::decode(&b).unwrap(), d);
    }

    #[test]
    fn task_field() {
        for t in [DimTask::Register, DimTask::Deregister, DimTask::Update] {
            assert_eq!(DimTask::from_cdw10(t.cdw10() | 0xFFF0_0000), Some(t));
        }
        assert_eq!(DimTask::from_cdw10(3), None);
        assert_eq!(DimTask::from_cdw10(0xF), None);
    }

    /// Every malformation gets its kind, offset and status.
    #[test]
    fn bad_payloads() {
        let good = libnvme_like().encode();
        type Edit = fn(&mut Vec<u8>);
        let cases: Vec<(&str, Edit, DimErrorKind, u32, Status)> = vec![
            (
                "short",
                |b| b.truncate(1000),
                DimErrorKind::Short,
                0,
                Status::INVALID_FIELD,
            ),
            (
                "tdl small",
                |b| put32(b, 0, 100),
                DimErrorKind::Tdl,
                0,
                Status::INVALID_FIELD,
            ),
            (
                "tdl big",
                |b| put32(b, 0, 1 << 20),
                DimErrorKind::Tdl,
                0,
                Status::INVALID_FIELD,
            ),
            (
                "nument",
                |b| put64(b, 8, 2),
                DimErrorKind::Nument,
                8,
                Status::INVALID_FIELD,
            ),
            (
                "nument huge",
                |b| put64(b, 8, u64::MAX),
                DimErrorKind::Nument,
                8,
                Status::INVALID_FIELD,
            ),
            (
                "entfmt",
                |b| put16(b, 16, 3),
                DimErrorKind::EntryFormat,
                16,
                Status::INVALID_FIELD,
            ),
            (
                "etype",
                |b| put16(b, 18, 0),
                DimErrorKind::EntityType,
                18,
                Status::INVALID_FIELD,
            ),
            (
                "eid empty",
                |b| b[24..280].fill(0),
                DimErrorKind::Eid,
                24,
                Status::INVALID_FIELD,
            ),
            (
                "eid binary",
                |b| b[24] = 1,
                DimErrorKind::Eid,
                24,
                Status::INVALID_FIELD,
            ),
            (
                "ename",
                |b| b[280] = 0x07,
                DimErrorKind::Ename,
                280,
                Status::INVALID_FIELD,
            ),
            (
                "ever",
                |b| b[536] = 0xFF,
                DimErrorKind::Ever,
                536,
                Status::INVALID_FIELD,
            ),
            (
                "trtype",
                |b| b[1024] = 9,
                DimErrorKind::Trtype,
                1024,
                Status::INVALID_FIELD,
            ),
            (
                "adrfam",
                |b| b[1025] = 0,
                DimErrorKind::Adrfam,
                1025,
                Status::INVALID_FIELD,
            ),
            (
                "traddr",
                |b| b[1024 + 512..1024 + 515].copy_from_slice(b"x.y"),
                DimErrorKind::Traddr,
                1536,
                Status::INVALID_FIELD,
            ),
            (
                "tel small",
                |b| put32(b, 2048, 1000),
                DimErrorKind::Tel,
                2048,
                Status::INVALID_FIELD,
            ),
            (
                "tel odd",
                |b| put32(b, 2048, 1033),
                DimErrorKind::Tel,
                2048,
                Status::INVALID_FIELD,
            ),
            (
                "tel big",
                |b| put32(b, 2048, 4096),
                DimErrorKind::Tel,
                2048,
                Status::INVALID_FIELD,
            ),
            (
                "numexat",
                |b| put16(b, 2052, 9),
                DimErrorKind::Numexat,
                2052,
                Status::INVALID_FIELD,
            ),
            (
                "exatlen",
                |b| put16(b, 2058, 200),
                DimErrorKind::Exat,
                2058,
                Status::INVALID_FIELD,
            ),
            (
                "hostid short",
                |b| put16(b, 2058, 4),
                DimErrorKind::Exat,
                2058,
                Status::INVALID_FIELD,
            ),
            (
                "other host",
                |b| b[1024 + 256 + 5] = b'X',
                DimErrorKind::NotApplicable,
                1280,
                Status::INVALID_DISCOVERY_INFO,
            ),
        ];
        for (name, edit, kind, offset, status) in cases {
            let mut b = good.clone();
            edit(&mut b);
            let e = DimData::decode(&b).expect_err(name);
            assert_eq!((e.kind, e.offset), (kind, offset), "{name}");
            assert_eq!(e.status(), status, "{name}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..4200)) {
            let _ = DimData::decode(&b);
        }

        #[test]
        fn decode_mutated_never_panics(i in 0usize..2100, v in any::<u8>()) {
            let mut b = libnvme_like().encode();
            if i < b.len() { b[i] = v; }
            let _ = DimData::decode(&b);
        }
    }
}
