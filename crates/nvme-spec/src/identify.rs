//! Identify data structures (NVMe Base 2.0 section 5.17, NVM Command Set 1.0 section 4.1.5).
//!
//! Every structure here is 4096 bytes on the wire. Encoding is infallible and writes into a
//! caller-provided array, zeroing every byte it does not model; decoding takes untrusted bytes,
//! is fallible and never panics. Offsets were checked against the spec figures and Linux
//! `include/linux/nvme.h` (`struct nvme_id_ctrl`, `nvme_id_ns`, `nvme_id_ns_cs_indep`,
//! `nvme_id_ns_nvm`, `nvme_id_ctrl_nvm`, `nvme_ns_id_desc`).
//!
//! This module also owns [`DecodeError`], shared by [`crate::log`] and [`crate::discovery`], and
//! the fixed-width string helpers ([`put_ascii`], [`put_nul_padded`], [`get_ascii`],
//! [`get_nul_padded`]).

use crate::{le16, le32, le64, put16, put32, put64};

/// Size of every Identify data structure.
pub const IDENTIFY_DATA_LEN: usize = 4096;

/// Error returned by the decoders of this crate's data structures.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer is shorter than the structure requires.
    #[error("buffer too short: need {need}, got {got}")]
    Short {
        /// Bytes the structure needs.
        need: usize,
        /// Bytes the buffer held.
        got: usize,
    },
    /// A field holds a value the structure cannot carry.
    #[error("invalid field {field}: {reason}")]
    Invalid {
        /// The field's name as the spec spells it.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
}

/// Return `Err(Short)` unless `b` holds at least `need` bytes.
pub(crate) fn need(b: &[u8], need: usize) -> Result<(), DecodeError> {
    if b.len() < need {
        Err(DecodeError::Short { need, got: b.len() })
    } else {
        Ok(())
    }
}

/// Read a little-endian 128-bit value at `off` (SMART counters, NVMCAP, TNVMCAP).
#[inline]
pub(crate) fn le128(b: &[u8], off: usize) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    u128::from_le_bytes(a)
}

/// Write a little-endian 128-bit value at `off`.
#[inline]
pub(crate) fn put128(b: &mut [u8], off: usize, v: u128) {
    b[off..off + 16].copy_from_slice(&v.to_le_bytes());
}

/// Copy `N` bytes starting at `off` into an array.
#[inline]
pub(crate) fn arr<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[off..off + N]);
    a
}

// ---------------------------------------------------------------------------------------------
// Fixed-width string fields
// ---------------------------------------------------------------------------------------------

/// Write `s` into an ASCII field (SN, MN, FR, TRSVCID, TRADDR): left-justified, padded with spaces
/// (20h), truncated to `dst.len()`. Non-ASCII and control characters are written as `?`.
pub fn put_ascii(dst: &mut [u8], s: &str) {
    dst.fill(b' ');
    for (d, c) in dst.iter_mut().zip(s.chars()) {
        *d = if c.is_ascii() && !c.is_ascii_control() {
            c as u8
        } else {
            b'?'
        };
    }
}

/// Write `s` into a NUL-padded UTF-8 field (SUBNQN, NQNs in the discovery log). The string is
/// truncated on a character boundary to `dst.len() - 1` bytes so that at least one NUL always
/// terminates it; the rest of `dst` is zeroed.
pub fn put_nul_padded(dst: &mut [u8], s: &str) {
    dst.fill(0);
    let max = dst.len().saturating_sub(1);
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    dst[..end].copy_from_slice(&s.as_bytes()[..end]);
}

/// Read an ASCII field: stops at the first NUL, trims trailing spaces. Never fails: bytes that
/// are not valid UTF-8 become U+FFFD.
pub fn get_ascii(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end])
        .trim_end_matches(' ')
        .to_string()
}

/// Read a NUL-padded string field: everything before the first NUL. Never fails: bytes that are
/// not valid UTF-8 become U+FFFD.
pub fn get_nul_padded(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

// ---------------------------------------------------------------------------------------------
// CNS / CSI values and controller bit fields
// ---------------------------------------------------------------------------------------------

/// Controller or Namespace Structure (CNS) values, Identify CDW10 bits 7:0 (NVMe Base 2.0
/// Figure 273).
pub mod cns {
    /// Identify Namespace (NVM command set, 4096 B).
    pub const NS: u8 = 0x00;
    /// Identify Controller.
    pub const CTRL: u8 = 0x01;
    /// Active Namespace ID list.
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    /// Namespace Identification Descriptor list.
    pub const NS_ID_DESC_LIST: u8 = 0x03;
    /// NVM Set list.
    pub const NVM_SET_LIST: u8 = 0x04;
    /// I/O Command Set specific Identify Namespace (selected by CSI).
    pub const CS_NS: u8 = 0x05;
    /// I/O Command Set specific Identify Controller (selected by CSI).
    pub const CS_CTRL: u8 = 0x06;
    /// Active Namespace ID list associated with the given I/O Command Set.
    pub const CS_ACTIVE_NS_LIST: u8 = 0x07;
    /// I/O Command Set Independent Identify Namespace.
    pub const CS_INDEP_NS: u8 = 0x08;
    /// Allocated Namespace ID list.
    pub const ALLOCATED_NS_LIST: u8 = 0x10;
    /// Identify Namespace for an allocated NSID.
    pub const ALLOCATED_NS: u8 = 0x11;
    /// Controller list: controllers attached to the NSID.
    pub const NS_CTRL_LIST: u8 = 0x12;
    /// Controller list: all controllers in the NVM subsystem.
    pub const CTRL_LIST: u8 = 0x13;
    /// I/O Command Set data structure (command set combinations).
    pub const IO_CMD_SET: u8 = 0x1C;
}

/// Command Set Identifier (CSI) values, Identify CDW11 bits 31:24.
pub mod csi {
    /// NVM Command Set.
    pub const NVM: u8 = 0x00;
    /// Key Value Command Set.
    pub const KV: u8 = 0x01;
    /// Zoned Namespace Command Set.
    pub const ZNS: u8 = 0x02;
}

/// Controller type (CNTRLTYPE, Identify Controller byte 111).
pub mod cntrltype {
    /// Not reported (pre-1.4 controllers).
    pub const NOT_REPORTED: u8 = 0;
    /// I/O controller.
    pub const IO: u8 = 1;
    /// Discovery controller.
    pub const DISCOVERY: u8 = 2;
    /// Administrative controller.
    pub const ADMIN: u8 = 3;
}

/// Controller Multi-Path I/O and Namespace Sharing Capabilities (CMIC) bits.
pub mod cmic {
    /// The NVM subsystem may contain more than one port.
    pub const MULTI_PORT: u8 = 1 << 0;
    /// The NVM subsystem may contain more than one controller.
    pub const MULTI_CTRL: u8 = 1 << 1;
    /// SR-IOV virtual function.
    pub const SRIOV: u8 = 1 << 2;
    /// Asymmetric Namespace Access Reporting supported.
    pub const ANA: u8 = 1 << 3;
}

/// Optional Asynchronous Events Supported (OAES) bits.
pub mod oaes {
    /// Namespace Attribute Notices.
    pub const NS_ATTR: u32 = 1 << 8;
    /// Firmware Activation Notices.
    pub const FW_ACT: u32 = 1 << 9;
    /// Asymmetric Namespace Access Change Notices.
    pub const ANA_CHANGE: u32 = 1 << 11;
    /// Discovery Log Page Change Notification (discovery controllers).
    pub const DISC_CHANGE: u32 = 1 << 31;
}

/// Log Page Attributes (LPA) bits.
pub mod lpa {
    /// SMART / Health log on a per-namespace basis.
    pub const SMART_PER_NS: u8 = 1 << 0;
    /// Commands Supported and Effects log page supported.
    pub const CMD_EFFECTS: u8 = 1 << 1;
    /// Extended data for Get Log Page (NUMDU, LPO) supported.
    pub const EXT_DATA: u8 = 1 << 2;
}

/// Optional NVM Command Support (ONCS) bits.
pub mod oncs {
    /// Compare command supported (bit 0).
    pub const COMPARE: u16 = 1 << 0;
    /// Write Uncorrectable command supported (bit 1).
    pub const WRITE_UNCORRECTABLE: u16 = 1 << 1;
    /// Dataset Management command supported (bit 2).
    pub const DSM: u16 = 1 << 2;
    /// Write Zeroes command supported (bit 3).
    pub const WRITE_ZEROES: u16 = 1 << 3;
    /// Save field in Set Features / Select field in Get Features.
    pub const SAVE_SELECT: u16 = 1 << 4;
    /// Reservations supported (bit 5): the four reservation commands and the related features.
    pub const RESERVATIONS: u16 = 1 << 5;
    /// Timestamp feature supported (bit 6).
    pub const TIMESTAMP: u16 = 1 << 6;
    /// Verify command supported (bit 7).
    pub const VERIFY: u16 = 1 << 7;
    /// Copy command supported (bit 8).
    pub const COPY: u16 = 1 << 8;
}

/// Fused Operation Support (FUSES) bits.
pub mod fuses {
    /// Compare and Write fused operation supported.
    pub const COMPARE_AND_WRITE: u16 = 1 << 0;
}

/// Optional Copy Formats Supported (OCFS) bits.
pub mod ocfs {
    /// Copy Source Range Descriptor format 0h supported.
    pub const FORMAT_0: u16 = 1 << 0;
}

/// Volatile Write Cache (VWC) bits.
pub mod vwc {
    /// A volatile write cache is present.
    pub const PRESENT: u8 = 1 << 0;
    /// Bits 2:1 = 11b: Flush with NSID FFFFFFFFh is supported.
    pub const FLUSH_BROADCAST_SUPPORTED: u8 = 0b11 << 1;
    /// Bits 2:1 = 10b: Flush with NSID FFFFFFFFh is not supported.
    pub const FLUSH_BROADCAST_NOT_SUPPORTED: u8 = 0b10 << 1;
}

/// SGL Support (SGLS) bits.
pub mod sgls {
    /// Bits 1:0 = 01b: SGLs supported, no alignment or granularity requirement.
    pub const SUPPORTED: u32 = 0b01;
    /// Bits 1:0 = 10b: SGLs supported, Dword alignment and granularity required.
    pub const SUPPORTED_DWORD_ALIGNED: u32 = 0b10;
    /// Keyed SGL Data Block descriptor supported (RDMA).
    pub const KEYED: u32 = 1 << 2;
    /// SGL Bit Bucket descriptor supported.
    pub const BIT_BUCKET: u32 = 1 << 16;
    /// Address field of an SGL Data Block may be an offset (in-capsule data).
    pub const OFFSET: u32 = 1 << 20;
    /// Transport SGL Data Block descriptor supported.
    pub const TRANSPORT_DATA_BLOCK: u32 = 1 << 21;
}

// ---------------------------------------------------------------------------------------------
// Identify Controller (CNS 01h)
// ---------------------------------------------------------------------------------------------

/// Power State Descriptor (32 bytes; NVMe Base 2.0 Figure 276). Identify Controller carries 32 of
/// them from byte 2048; this crate models descriptor 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerState {
    /// Maximum Power, byte 0 (u16), in centiwatts (or 0.0001 W if MXPS is set).
    pub mp: u16,
    /// Byte 3: bit 0 Max Power Scale (MXPS), bit 1 Non-Operational State (NOPS).
    pub flags: u8,
    /// Entry Latency, byte 4 (u32), microseconds.
    pub enlat: u32,
    /// Exit Latency, byte 8 (u32), microseconds.
    pub exlat: u32,
    /// Relative Read Throughput, byte 12 (bits 4:0).
    pub rrt: u8,
    /// Relative Read Latency, byte 13 (bits 4:0).
    pub rrl: u8,
    /// Relative Write Throughput, byte 14 (bits 4:0).
    pub rwt: u8,
    /// Relative Write Latency, byte 15 (bits 4:0).
    pub rwl: u8,
    /// Idle Power, byte 16 (u16).
    pub idlp: u16,
    /// Idle Power Scale, byte 18 (bits 7:6).
    pub ips: u8,
    /// Active Power, byte 20 (u16).
    pub actp: u16,
    /// Byte 22: Active Power Workload (APW, bits 2:0) and Active Power Scale (APS, bits 7:6).
    pub apw_aps: u8,
}

impl PowerState {
    /// Byte-3 flag: Max Power Scale (0.0001 W units instead of 0.01 W).
    pub const MXPS: u8 = 1 << 0;
    /// Byte-3 flag: Non-Operational State.
    pub const NOPS: u8 = 1 << 1;
    /// Wire size.
    pub const LEN: usize = 32;

    /// Write this descriptor into `out` (32 bytes; the caller provides the slot).
    pub fn encode(&self, out: &mut [u8; 32]) {
        out.fill(0);
        put16(out, 0, self.mp);
        out[3] = self.flags;
        put32(out, 4, self.enlat);
        put32(out, 8, self.exlat);
        out[12] = self.rrt;
        out[13] = self.rrl;
        out[14] = self.rwt;
        out[15] = self.rwl;
        put16(out, 16, self.idlp);
        out[18] = self.ips;
        put16(out, 20, self.actp);
        out[22] = self.apw_aps;
    }

    /// Decode from at least 32 bytes.
    pub fn decode(b: &[u8]) -> Result<PowerState, DecodeError> {
        need(b, Self::LEN)?;
        Ok(PowerState {
            mp: le16(b, 0),
            flags: b[3],
            enlat: le32(b, 4),
            exlat: le32(b, 8),
            rrt: b[12],
            rrl: b[13],
            rwt: b[14],
            rwl: b[15],
            idlp: le16(b, 16),
            ips: b[18],
            actp: le16(b, 20),
            apw_aps: b[22],
        })
    }
}

/// Identify Controller data structure (CNS 01h, 4096 bytes; NVMe Base 2.0 Figure 275).
///
/// Fields not modelled here are written as zero and ignored when decoding. String fields hold the
/// trimmed value; see [`put_ascii`] / [`put_nul_padded`] for the wire form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdentifyController {
    /// PCI Vendor ID, byte 0.
    pub vid: u16,
    /// PCI Subsystem Vendor ID, byte 2.
    pub ssvid: u16,
    /// Serial Number, bytes 4..24 (20 ASCII, space padded).
    pub sn: String,
    /// Model Number, bytes 24..64 (40 ASCII, space padded).
    pub mn: String,
    /// Firmware Revision, bytes 64..72 (8 ASCII, space padded).
    pub fr: String,
    /// Recommended Arbitration Burst, byte 72.
    pub rab: u8,
    /// IEEE OUI Identifier, bytes 73..76 (as on the wire, least significant byte first).
    pub ieee: [u8; 3],
    /// Controller Multi-Path I/O and Namespace Sharing Capabilities, byte 76 ([`cmic`]).
    pub cmic: u8,
    /// Maximum Data Transfer Size, byte 77 (power of two, in units of CAP.MPSMIN; 0 = no limit).
    pub mdts: u8,
    /// Controller ID, byte 78.
    pub cntlid: u16,
    /// Version, byte 80 (same encoding as the VS property).
    pub ver: u32,
    /// RTD3 Resume Latency, byte 84 (microseconds).
    pub rtd3r: u32,
    /// RTD3 Entry Latency, byte 88 (microseconds).
    pub rtd3e: u32,
    /// Optional Asynchronous Events Supported, byte 92 ([`oaes`]).
    pub oaes: u32,
    /// Controller Attributes, byte 96.
    pub ctratt: u32,
    /// Controller Type, byte 111 ([`cntrltype`]).
    pub cntrltype: u8,
    /// FRU Globally Unique Identifier, bytes 112..128.
    pub fguid: [u8; 16],
    /// Command Retry Delay Times 1..3, bytes 128, 130, 132 (units of 100 ms).
    pub crdt: [u16; 3],
    /// Optional Admin Command Support, byte 256.
    pub oacs: u16,
    /// Abort Command Limit, byte 258 (0's based).
    pub acl: u8,
    /// Asynchronous Event Request Limit, byte 259 (0's based).
    pub aerl: u8,
    /// Firmware Updates, byte 260.
    pub frmw: u8,
    /// Log Page Attributes, byte 261 ([`lpa`]).
    pub lpa: u8,
    /// Error Log Page Entries, byte 262 (0's based).
    pub elpe: u8,
    /// Number of Power States Support, byte 263 (0's based).
    pub npss: u8,
    /// Admin Vendor Specific Command Configuration, byte 264.
    pub avscc: u8,
    /// Autonomous Power State Transition Attributes, byte 265.
    pub apsta: u8,
    /// Warning Composite Temperature Threshold, byte 266 (Kelvin).
    pub wctemp: u16,
    /// Critical Composite Temperature Threshold, byte 268 (Kelvin).
    pub cctemp: u16,
    /// Total NVM Capacity, bytes 280..296 (bytes).
    pub tnvmcap: u128,
    /// Unallocated NVM Capacity, bytes 296..312 (bytes).
    pub unvmcap: u128,
    /// Keep Alive Support, byte 320 (granularity in units of 100 ms; 0 = not supported).
    pub kas: u16,
    /// ANA Transition Time, byte 342 (seconds).
    pub anatt: u8,
    /// Asymmetric Namespace Access Capabilities, byte 343.
    pub anacap: u8,
    /// ANA Group Identifier Maximum, byte 344.
    pub anagrpmax: u32,
    /// Number of ANA Group Identifiers, byte 348.
    pub nanagrpid: u32,
    /// Submission Queue Entry Size, byte 512 (bits 3:0 required, 7:4 maximum; log2).
    pub sqes: u8,
    /// Completion Queue Entry Size, byte 513 (bits 3:0 required, 7:4 maximum; log2).
    pub cqes: u8,
    /// Maximum Outstanding Commands, byte 514 (fabrics).
    pub maxcmd: u16,
    /// Number of Namespaces (maximum valid NSID), byte 516.
    pub nn: u32,
    /// Optional NVM Command Support, byte 520 ([`oncs`]).
    pub oncs: u16,
    /// Fused Operation Support, byte 522.
    pub fuses: u16,
    /// Format NVM Attributes, byte 524.
    pub fna: u8,
    /// Volatile Write Cache, byte 525 ([`vwc`]).
    pub vwc: u8,
    /// Atomic Write Unit Normal, byte 526 (0's based, logical blocks).
    pub awun: u16,
    /// Atomic Write Unit Power Fail, byte 528 (0's based, logical blocks).
    pub awupf: u16,
    /// I/O Command Set Vendor Specific Command Configuration, byte 530 (Linux: `nvscc`).
    pub icsvscc: u8,
    /// Namespace Write Protection Capabilities, byte 531.
    pub nwpc: u8,
    /// Atomic Compare & Write Unit, byte 532 (0's based).
    pub acwu: u16,
    /// Optional Copy Formats Supported, byte 534.
    pub ocfs: u16,
    /// SGL Support, byte 536 ([`sgls`]).
    pub sgls: u32,
    /// Maximum Number of Allowed Namespaces, byte 540.
    pub mnan: u32,
    /// NVM Subsystem NVMe Qualified Name, bytes 768..1024 (UTF-8, NUL padded).
    pub subnqn: String,
    /// I/O Queue Command Capsule Supported Size, byte 1792 (16-byte units; fabrics).
    pub ioccsz: u32,
    /// I/O Queue Response Capsule Supported Size, byte 1796 (16-byte units; fabrics).
    pub iorcsz: u32,
    /// In Capsule Data Offset, byte 1800 (16-byte units; fabrics).
    pub icdoff: u16,
    /// Fabrics Controller Attributes, byte 1802 (bit 0: static controller model).
    pub fcatt: u8,
    /// Maximum SGL Data Block Descriptors, byte 1803 (0 = no limit).
    pub msdbd: u8,
    /// Optional Fabric Commands Support, byte 1804 (bit 0: Disconnect).
    pub ofcs: u16,
    /// Discovery Controller Type, byte 1806 (0 not reported, 1 DDC, 2 CDC).
    pub dctype: u8,
    /// Power State 0 Descriptor, bytes 2048..2080.
    pub psd0: PowerState,
}

impl IdentifyController {
    /// Write the 4096-byte structure into `out`; every unmodelled byte is zeroed.
    pub fn encode(&self, out: &mut [u8; IDENTIFY_DATA_LEN]) {
        out.fill(0);
        put16(out, 0, self.vid);
        put16(out, 2, self.ssvid);
        put_ascii(&mut out[4..24], &self.sn);
        put_ascii(&mut out[24..64], &self.mn);
        put_ascii(&mut out[64..72], &self.fr);
        out[72] = self.rab;
        out[73..76].copy_from_slice(&self.ieee);
        out[76] = self.cmic;
        out[77] = self.mdts;
        put16(out, 78, self.cntlid);
        put32(out, 80, self.ver);
        put32(out, 84, self.rtd3r);
        put32(out, 88, self.rtd3e);
        put32(out, 92, self.oaes);
        put32(out, 96, self.ctratt);
        out[111] = self.cntrltype;
        out[112..128].copy_from_slice(&self.fguid);
        put16(out, 128, self.crdt[0]);
        put16(out, 130, self.crdt[1]);
        put16(out, 132, self.crdt[2]);
        put16(out, 256, self.oacs);
        out[258] = self.acl;
        out[259] = self.aerl;
        out[260] = self.frmw;
        out[261] = self.lpa;
        out[262] = self.elpe;
        out[263] = self.npss;
        out[264] = self.avscc;
        out[265] = self.apsta;
        put16(out, 266, self.wctemp);
        put16(out, 268, self.cctemp);
        put128(out, 280, self.tnvmcap);
        put128(out, 296, self.unvmcap);
        put16(out, 320, self.kas);
        out[342] = self.anatt;
        out[343] = self.anacap;
        put32(out, 344, self.anagrpmax);
        put32(out, 348, self.nanagrpid);
        out[512] = self.sqes;
        out[513] = self.cqes;
        put16(out, 514, self.maxcmd);
        put32(out, 516, self.nn);
        put16(out, 520, self.oncs);
        put16(out, 522, self.fuses);
        out[524] = self.fna;
        out[525] = self.vwc;
        put16(out, 526, self.awun);
        put16(out, 528, self.awupf);
        out[530] = self.icsvscc;
        out[531] = self.nwpc;
        put16(out, 532, self.acwu);
        put16(out, 534, self.ocfs);
        put32(out, 536, self.sgls);
        put32(out, 540, self.mnan);
        put_nul_padded(&mut out[768..1024], &self.subnqn);
        put32(out, 1792, self.ioccsz);
        put32(out, 1796, self.iorcsz);
        put16(out, 1800, self.icdoff);
        out[1802] = self.fcatt;
        out[1803] = self.msdbd;
        put16(out, 1804, self.ofcs);
        out[1806] = self.dctype;
        let mut ps = [0u8; PowerState::LEN];
        self.psd0.encode(&mut ps);
        out[2048..2080].copy_from_slice(&ps);
    }

    /// Decode from at least 4096 bytes.
    pub fn decode(b: &[u8]) -> Result<IdentifyController, DecodeError> {
        need(b, IDENTIFY_DATA_LEN)?;
        Ok(IdentifyController {
            vid: le16(b, 0),
            ssvid: le16(b, 2),
            sn: get_ascii(&b[4..24]),
            mn: get_ascii(&b[24..64]),
            fr: get_ascii(&b[64..72]),
            rab: b[72],
            ieee: arr(b, 73),
            cmic: b[76],
            mdts: b[77],
            cntlid: le16(b, 78),
            ver: le32(b, 80),
            rtd3r: le32(b, 84),
            rtd3e: le32(b, 88),
            oaes: le32(b, 92),
            ctratt: le32(b, 96),
            cntrltype: b[111],
            fguid: arr(b, 112),
            crdt: [le16(b, 128), le16(b, 130), le16(b, 132)],
            oacs: le16(b, 256),
            acl: b[258],
            aerl: b[259],
            frmw: b[260],
            lpa: b[261],
            elpe: b[262],
            npss: b[263],
            avscc: b[264],
            apsta: b[265],
            wctemp: le16(b, 266),
            cctemp: le16(b, 268),
            tnvmcap: le128(b, 280),
            unvmcap: le128(b, 296),
            kas: le16(b, 320),
            anatt: b[342],
            anacap: b[343],
            anagrpmax: le32(b, 344),
            nanagrpid: le32(b, 348),
            sqes: b[512],
            cqes: b[513],
            maxcmd: le16(b, 514),
            nn: le32(b, 516),
            oncs: le16(b, 520),
            fuses: le16(b, 522),
            fna: b[524],
            vwc: b[525],
            awun: le16(b, 526),
            awupf: le16(b, 528),
            icsvscc: b[530],
            nwpc: b[531],
            acwu: le16(b, 532),
            ocfs: le16(b, 534),
            sgls: le32(b, 536),
            mnan: le32(b, 540),
            subnqn: get_nul_padded(&b[768..1024]),
            ioccsz: le32(b, 1792),
            iorcsz: le32(b, 1796),
            icdoff: le16(b, 1800),
            fcatt: b[1802],
            msdbd: b[1803],
            ofcs: le16(b, 1804),
            dctype: b[1806],
            psd0: PowerState::decode(&b[2048..2080])?,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Identify Namespace (CNS 00h)
// ---------------------------------------------------------------------------------------------

/// LBA Format descriptor (4 bytes; NVM Command Set 1.0 Figure 98).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbaFormat {
    /// Metadata Size, bytes 1:0 (bytes per LBA).
    pub ms: u16,
    /// LBA Data Size, byte 2 (log2 of the LBA size; 0 = format not supported).
    pub lbads: u8,
    /// Relative Performance, byte 3 bits 1:0 (0 best .. 3 degraded).
    pub rp: u8,
}

impl LbaFormat {
    /// A format with `1 << lbads`-byte LBAs and no metadata.
    pub const fn new(lbads: u8) -> LbaFormat {
        LbaFormat {
            ms: 0,
            lbads,
            rp: 0,
        }
    }

    /// LBA size in bytes, or 0 when LBADS is 0 or too large to represent.
    pub fn lba_size(&self) -> u32 {
        if self.lbads == 0 {
            0
        } else {
            1u32.checked_shl(u32::from(self.lbads)).unwrap_or(0)
        }
    }
}

/// Namespace Features (NSFEAT) bits.
pub mod nsfeat {
    /// Thin provisioning.
    pub const THINP: u8 = 1 << 0;
    /// NAWUN, NAWUPF and NACWU are valid.
    pub const NSABP: u8 = 1 << 1;
    /// Deallocated or Unwritten Logical Block error supported.
    pub const DAE: u8 = 1 << 2;
    /// NGUID/EUI64 are never reused.
    pub const UIDREUSE: u8 = 1 << 3;
    /// NPWG, NPWA, NPDG, NPDA and NOWS are valid.
    pub const OPTPERF: u8 = 1 << 4;
}

/// Deallocate Logical Block Features (DLFEAT) values.
pub mod dlfeat {
    /// Bits 2:0 = 001b: deallocated blocks read as all zeroes.
    pub const READ_ZEROES: u8 = 0b001;
    /// Write Zeroes supports the Deallocate bit.
    pub const WRITE_ZEROES_DEALLOC: u8 = 1 << 3;
}

/// Identify Namespace data structure for the NVM Command Set (CNS 00h, 4096 bytes; NVM Command
/// Set 1.0 Figure 97).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentifyNamespace {
    /// Namespace Size, byte 0 (logical blocks).
    pub nsze: u64,
    /// Namespace Capacity, byte 8 (logical blocks).
    pub ncap: u64,
    /// Namespace Utilization, byte 16 (logical blocks).
    pub nuse: u64,
    /// Namespace Features, byte 24 ([`nsfeat`]).
    pub nsfeat: u8,
    /// Number of LBA Formats, byte 25 (0's based).
    pub nlbaf: u8,
    /// Formatted LBA Size, byte 26 (bits 3:0 low index, bit 4 extended metadata, 6:5 high index).
    pub flbas: u8,
    /// Metadata Capabilities, byte 27.
    pub mc: u8,
    /// End-to-end Data Protection Capabilities, byte 28.
    pub dpc: u8,
    /// End-to-end Data Protection Type Settings, byte 29.
    pub dps: u8,
    /// Namespace Multi-path I/O and Namespace Sharing Capabilities, byte 30 (bit 0: shared).
    pub nmic: u8,
    /// Reservation Capabilities, byte 31.
    pub rescap: u8,
    /// Format Progress Indicator, byte 32.
    pub fpi: u8,
    /// Deallocate Logical Block Features, byte 33 ([`dlfeat`]).
    pub dlfeat: u8,
    /// Namespace Atomic Write Unit Normal, byte 34 (0's based).
    pub nawun: u16,
    /// Namespace Atomic Write Unit Power Fail, byte 36 (0's based).
    pub nawupf: u16,
    /// Namespace Atomic Compare & Write Unit, byte 38 (0's based).
    pub nacwu: u16,
    /// Namespace Atomic Boundary Size Normal, byte 40.
    pub nabsn: u16,
    /// Namespace Atomic Boundary Offset, byte 42.
    pub nabo: u16,
    /// Namespace Atomic Boundary Size Power Fail, byte 44.
    pub nabspf: u16,
    /// Namespace Optimal I/O Boundary, byte 46 (logical blocks).
    pub noiob: u16,
    /// NVM Capacity, bytes 48..64 (bytes).
    pub nvmcap: u128,
    /// Namespace Preferred Write Granularity, byte 64 (0's based).
    pub npwg: u16,
    /// Namespace Preferred Write Alignment, byte 66 (0's based).
    pub npwa: u16,
    /// Namespace Preferred Deallocate Granularity, byte 68 (0's based).
    pub npdg: u16,
    /// Namespace Preferred Deallocate Alignment, byte 70 (0's based).
    pub npda: u16,
    /// Namespace Optimal Write Size, byte 72 (0's based).
    pub nows: u16,
    /// Maximum Single Source Range Length (Copy), byte 74 (logical blocks; 0 = no Copy).
    pub mssrl: u16,
    /// Maximum Copy Length, byte 76 (logical blocks).
    pub mcl: u32,
    /// Maximum Source Range Count, byte 80 (0's based).
    pub msrc: u8,
    /// ANA Group Identifier, byte 92.
    pub anagrpid: u32,
    /// Namespace Attributes, byte 99 (bit 0: write protected).
    pub nsattr: u8,
    /// NVM Set Identifier, byte 100.
    pub nvmsetid: u16,
    /// Endurance Group Identifier, byte 102.
    pub endgid: u16,
    /// Namespace Globally Unique Identifier, bytes 104..120.
    pub nguid: [u8; 16],
    /// IEEE Extended Unique Identifier, bytes 120..128.
    pub eui64: [u8; 8],
    /// LBA Format 0..63 Support, 4 bytes each from byte 128.
    pub lbaf: [LbaFormat; 64],
    /// ebof's mark in the vendor-specific area (bytes 3840..): what stores the namespace
    /// ([`ebof_vs`]). `None` for other targets.
    pub ebof_backend: Option<ebof_vs::Backend>,
    /// ebof's mark, flags byte 3849 bit 0 ([`ebof_vs::FLAG_ENCRYPTED`]): the namespace is
    /// encrypted at rest (ADR 0029). Written only with `ebof_backend`; `false` for others.
    pub ebof_encrypted: bool,
}

/// ebof's use of the Identify Namespace vendor-specific area (bytes 3840..4095): a signature and
/// the kind of storage behind the namespace, so that ebof's own tools can tell a volatile RAM
/// namespace (whose data nobody can lose) from a file or a device. Other hosts ignore it.
pub mod ebof_vs {
    /// Where the mark starts (the vendor-specific area).
    pub const OFFSET: usize = 3840;
    /// The signature before the kind byte.
    pub const SIGNATURE: &[u8; 8] = b"EBOF-NS1";
    /// The flags byte after the kind byte (byte 3849): bit 0 set, encrypted at rest. Other
    /// bits are reserved (0).
    pub const FLAG_ENCRYPTED: u8 = 0x01;

    /// The storage behind an ebof namespace.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Backend {
        /// RAM backend: the data lives in the target's memory and is lost when it stops.
        Ram,
        /// A regular file.
        File,
        /// A block device.
        Block,
    }

    impl Backend {
        fn code(self) -> u8 {
            match self {
                Backend::Ram => 1,
                Backend::File => 2,
                Backend::Block => 3,
            }
        }
        fn from_code(c: u8) -> Option<Backend> {
            match c {
                1 => Some(Backend::Ram),
                2 => Some(Backend::File),
                3 => Some(Backend::Block),
                _ => None,
            }
        }
    }

    pub(super) fn encode(b: Option<Backend>, encrypted: bool, out: &mut [u8]) {
        if let Some(b) = b {
            out[OFFSET..OFFSET + 8].copy_from_slice(SIGNATURE);
            out[OFFSET + 8] = b.code();
            out[OFFSET + 9] = if encrypted { FLAG_ENCRYPTED } else { 0 };
        }
    }

    /// Whether the mark (signature present) says encrypted.
    pub(super) fn decode_encrypted(b: &[u8]) -> bool {
        b.get(OFFSET..OFFSET + 10)
            .is_some_and(|a| &a[..8] == SIGNATURE && a[9] & FLAG_ENCRYPTED != 0)
    }

    pub(super) fn decode(b: &[u8]) -> Option<Backend> {
        let area = b.get(OFFSET..OFFSET + 9)?;
        if &area[..8] != SIGNATURE {
            return None;
        }
        Backend::from_code(area[8])
    }
}

impl Default for IdentifyNamespace {
    fn default() -> Self {
        IdentifyNamespace {
            nsze: 0,
            ncap: 0,
            nuse: 0,
            nsfeat: 0,
            nlbaf: 0,
            flbas: 0,
            mc: 0,
            dpc: 0,
            dps: 0,
            nmic: 0,
            rescap: 0,
            fpi: 0,
            dlfeat: 0,
            nawun: 0,
            nawupf: 0,
            nacwu: 0,
            nabsn: 0,
            nabo: 0,
            nabspf: 0,
            noiob: 0,
            nvmcap: 0,
            npwg: 0,
            npwa: 0,
            npdg: 0,
            npda: 0,
            nows: 0,
            mssrl: 0,
            mcl: 0,
            msrc: 0,
            anagrpid: 0,
            nsattr: 0,
            nvmsetid: 0,
            endgid: 0,
            nguid: [0; 16],
            eui64: [0; 8],
            lbaf: [LbaFormat::default(); 64],
            ebof_backend: None,
            ebof_encrypted: false,
        }
    }
}

impl IdentifyNamespace {
    /// FLBAS bit 4: metadata is transferred at the end of the data LBA (extended LBA).
    pub const FLBAS_META_EXT: u8 = 1 << 4;

    /// Index of the format in use: FLBAS bits 3:0, plus bits 6:5 as index bits 5:4.
    pub fn lbaf_index(&self) -> usize {
        usize::from((self.flbas & 0x0f) | ((self.flbas & 0x60) >> 1))
    }

    /// The LBA format in use (selected by FLBAS).
    pub fn current_lbaf(&self) -> LbaFormat {
        self.lbaf[self.lbaf_index()]
    }

    /// LBA size in bytes of the format in use, or 0 if that format has LBADS 0 / out of range.
    pub fn lba_size(&self) -> u32 {
        self.current_lbaf().lba_size()
    }

    /// Write the 4096-byte structure into `out`; every unmodelled byte is zeroed.
    pub fn encode(&self, out: &mut [u8; IDENTIFY_DATA_LEN]) {
        out.fill(0);
        put64(out, 0, self.nsze);
        put64(out, 8, self.ncap);
        put64(out, 16, self.nuse);
        out[24] = self.nsfeat;
        out[25] = self.nlbaf;
        out[26] = self.flbas;
        out[27] = self.mc;
        out[28] = self.dpc;
        out[29] = self.dps;
        out[30] = self.nmic;
        out[31] = self.rescap;
        out[32] = self.fpi;
        out[33] = self.dlfeat;
        put16(out, 34, self.nawun);
        put16(out, 36, self.nawupf);
        put16(out, 38, self.nacwu);
        put16(out, 40, self.nabsn);
        put16(out, 42, self.nabo);
        put16(out, 44, self.nabspf);
        put16(out, 46, self.noiob);
        put128(out, 48, self.nvmcap);
        put16(out, 64, self.npwg);
        put16(out, 66, self.npwa);
        put16(out, 68, self.npdg);
        put16(out, 70, self.npda);
        put16(out, 72, self.nows);
        put16(out, 74, self.mssrl);
        put32(out, 76, self.mcl);
        out[80] = self.msrc;
        put32(out, 92, self.anagrpid);
        out[99] = self.nsattr;
        put16(out, 100, self.nvmsetid);
        put16(out, 102, self.endgid);
        out[104..120].copy_from_slice(&self.nguid);
        out[120..128].copy_from_slice(&self.eui64);
        for (i, f) in self.lbaf.iter().enumerate() {
            let o = 128 + 4 * i;
            put16(out, o, f.ms);
            out[o + 2] = f.lbads;
            out[o + 3] = f.rp & 0x03;
        }
        ebof_vs::encode(self.ebof_backend, self.ebof_encrypted, out);
    }

    /// Decode from at least 4096 bytes.
    pub fn decode(b: &[u8]) -> Result<IdentifyNamespace, DecodeError> {
        need(b, IDENTIFY_DATA_LEN)?;
        let mut lbaf = [LbaFormat::default(); 64];
        for (i, f) in lbaf.iter_mut().enumerate() {
            let o = 128 + 4 * i;
            *f = LbaFormat {
                ms: le16(b, o),
                lbads: b[o + 2],
                rp: b[o + 3] & 0x03,
            };
        }
        Ok(IdentifyNamespace {
            nsze: le64(b, 0),
            ncap: le64(b, 8),
            nuse: le64(b, 16),
            nsfeat: b[24],
            nlbaf: b[25],
            flbas: b[26],
            mc: b[27],
            dpc: b[28],
            dps: b[29],
            nmic: b[30],
            rescap: b[31],
            fpi: b[32],
            dlfeat: b[33],
            nawun: le16(b, 34),
            nawupf: le16(b, 36),
            nacwu: le16(b, 38),
            nabsn: le16(b, 40),
            nabo: le16(b, 42),
            nabspf: le16(b, 44),
            noiob: le16(b, 46),
            nvmcap: le128(b, 48),
            npwg: le16(b, 64),
            npwa: le16(b, 66),
            npdg: le16(b, 68),
            npda: le16(b, 70),
            nows: le16(b, 72),
            mssrl: le16(b, 74),
            mcl: le32(b, 76),
            msrc: b[80],
            anagrpid: le32(b, 92),
            nsattr: b[99],
            nvmsetid: le16(b, 100),
            endgid: le16(b, 102),
            nguid: arr(b, 104),
            eui64: arr(b, 120),
            lbaf,
            ebof_backend: ebof_vs::decode(b),
            ebof_encrypted: ebof_vs::decode_encrypted(b),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Namespace ID lists (CNS 02h / 07h)
// ---------------------------------------------------------------------------------------------

/// Maximum number of NSIDs in a namespace list.
pub const NS_LIST_MAX: usize = 1024;

/// Fill `out` with an Active Namespace ID list (CNS 02h/07h): the NSIDs from `nsids` that are
/// strictly greater than `start_after`, ascending, deduplicated, at most 1024, zero-terminated.
/// NSIDs 0 and FFFFFFFFh are never listed. Returns how many NSIDs were written.
///
/// (The spec requires an Invalid Namespace abort for `start_after` FFFFFFFEh/FFFFFFFFh; that
/// check belongs to the caller.)
pub fn encode_active_ns_list(
    nsids: impl Iterator<Item = u32>,
    start_after: u32,
    out: &mut [u8; IDENTIFY_DATA_LEN],
) -> usize {
    out.fill(0);
    let mut v: Vec<u32> = nsids
        .filter(|&n| n > start_after && n != 0 && n != u32::MAX)
        .collect();
    v.sort_unstable();
    v.dedup();
    v.truncate(NS_LIST_MAX);
    for (i, n) in v.iter().enumerate() {
        put32(out, 4 * i, *n);
    }
    v.len()
}

/// Decode a namespace list: NSIDs up to the first zero entry, at most 1024, reading only whole
/// 4-byte entries present in `b`.
pub fn decode_ns_list(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .take(NS_LIST_MAX)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&n| n != 0)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Namespace Identification Descriptor list (CNS 03h)
// ---------------------------------------------------------------------------------------------

/// Namespace Identifier Type (NIDT) values.
pub mod nidt {
    /// IEEE Extended Unique Identifier, 8 bytes.
    pub const EUI64: u8 = 0x01;
    /// Namespace Globally Unique Identifier, 16 bytes.
    pub const NGUID: u8 = 0x02;
    /// Namespace UUID, 16 bytes.
    pub const UUID: u8 = 0x03;
    /// Command Set Identifier (CSI), 1 byte.
    pub const CSI: u8 = 0x04;
}

/// One Namespace Identification Descriptor (NVMe Base 2.0 Figure 279): a 4-byte header (NIDT,
/// NIDL, 2 reserved) followed by NIDL bytes of identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NsIdDescriptor {
    /// NIDT 1, NIDL 8: IEEE Extended Unique Identifier.
    Eui64([u8; 8]),
    /// NIDT 2, NIDL 16: Namespace Globally Unique Identifier.
    Nguid([u8; 16]),
    /// NIDT 3, NIDL 16: Namespace UUID.
    Uuid([u8; 16]),
    /// NIDT 4, NIDL 1: Command Set Identifier ([`csi`]).
    Csi(u8),
}

impl NsIdDescriptor {
    /// NIDT of this descriptor.
    pub fn nidt(&self) -> u8 {
        match self {
            NsIdDescriptor::Eui64(_) => nidt::EUI64,
            NsIdDescriptor::Nguid(_) => nidt::NGUID,
            NsIdDescriptor::Uuid(_) => nidt::UUID,
            NsIdDescriptor::Csi(_) => nidt::CSI,
        }
    }

    /// Identifier bytes (NIDL = their length).
    pub fn value(&self) -> &[u8] {
        match self {
            NsIdDescriptor::Eui64(v) => v,
            NsIdDescriptor::Nguid(v) | NsIdDescriptor::Uuid(v) => v,
            NsIdDescriptor::Csi(v) => std::slice::from_ref(v),
        }
    }
}

/// Fill `out` with the descriptor list, each descriptor immediately following the previous one;
/// the remainder is zero (a zero NIDT terminates the list). Descriptors that would not fit are
/// dropped. Returns the number of bytes used.
pub fn encode_ns_id_descs(descs: &[NsIdDescriptor], out: &mut [u8; IDENTIFY_DATA_LEN]) -> usize {
    out.fill(0);
    let mut off = 0;
    for d in descs {
        let v = d.value();
        let end = off + 4 + v.len();
        if end > out.len() {
            break;
        }
        out[off] = d.nidt();
        out[off + 1] = v.len() as u8;
        out[off + 4..end].copy_from_slice(v);
        off = end;
    }
    off
}

/// Decode a descriptor list from `b` (normally 4096 bytes). Stops at a zero NIDT or when fewer
/// than 4 bytes remain; descriptors of unknown type are skipped by their NIDL. A known type with
/// the wrong NIDL is `Invalid`; a descriptor running past the end of `b` is `Short`.
pub fn decode_ns_id_descs(b: &[u8]) -> Result<Vec<NsIdDescriptor>, DecodeError> {
    let b = &b[..b.len().min(IDENTIFY_DATA_LEN)];
    let mut out = Vec::new();
    let mut off = 0usize;
    while off + 4 <= b.len() {
        let t = b[off];
        if t == 0 {
            break;
        }
        let len = usize::from(b[off + 1]);
        let start = off + 4;
        let end = start + len;
        need(b, end)?;
        let v = &b[start..end];
        let expect = |want: usize, field: &'static str| -> Result<(), DecodeError> {
            if len == want {
                Ok(())
            } else {
                Err(DecodeError::Invalid {
                    field,
                    reason: format!("NIDL {len}, expected {want}"),
                })
            }
        };
        match t {
            nidt::EUI64 => {
                expect(8, "nidl (EUI64)")?;
                out.push(NsIdDescriptor::Eui64(arr(v, 0)));
            }
            nidt::NGUID => {
                expect(16, "nidl (NGUID)")?;
                out.push(NsIdDescriptor::Nguid(arr(v, 0)));
            }
            nidt::UUID => {
                expect(16, "nidl (UUID)")?;
                out.push(NsIdDescriptor::Uuid(arr(v, 0)));
            }
            nidt::CSI => {
                expect(1, "nidl (CSI)")?;
                out.push(NsIdDescriptor::Csi(v[0]));
            }
            _ => {}
        }
        off = end;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// I/O Command Set specific structures (CNS 05h / 06h / 08h / 1Ch)
// ---------------------------------------------------------------------------------------------

/// I/O Command Set specific Identify Controller for the NVM Command Set (CNS 06h, CSI 00h;
/// NVM Command Set 1.0 Figure 102; Linux `struct nvme_id_ctrl_nvm`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdentifyControllerNvm {
    /// Verify Size Limit, byte 0 (power of two, CAP.MPSMIN units; 0 = no limit).
    pub vsl: u8,
    /// Write Zeroes Size Limit, byte 1 (power of two, CAP.MPSMIN units; 0 = no limit).
    pub wzsl: u8,
    /// Write Uncorrectable Size Limit, byte 2.
    pub wusl: u8,
    /// Dataset Management Ranges Limit, byte 3 (0 = no limit reported).
    pub dmrl: u8,
    /// Dataset Management Range Size Limit, byte 4 (logical blocks).
    pub dmrsl: u32,
    /// Dataset Management Size Limit, byte 8 (logical blocks).
    pub dmsl: u64,
}

impl IdentifyControllerNvm {
    /// Write the 4096-byte structure into `out`.
    pub fn encode(&self, out: &mut [u8; IDENTIFY_DATA_LEN]) {
        out.fill(0);
        out[0] = self.vsl;
        out[1] = self.wzsl;
        out[2] = self.wusl;
        out[3] = self.dmrl;
        put32(out, 4, self.dmrsl);
        put64(out, 8, self.dmsl);
    }

    /// Decode from at least 16 bytes (the modelled prefix of the 4096-byte structure).
    pub fn decode(b: &[u8]) -> Result<IdentifyControllerNvm, DecodeError> {
        need(b, 16)?;
        Ok(IdentifyControllerNvm {
            vsl: b[0],
            wzsl: b[1],
            wusl: b[2],
            dmrl: b[3],
            dmrsl: le32(b, 4),
            dmsl: le64(b, 8),
        })
    }
}

/// NVM Command Set specific Identify Namespace (CNS 05h, CSI 00h; NVM Command Set 1.0 Figure 99;
/// Linux `struct nvme_id_ns_nvm`). An all-zero structure is valid (16-bit guard PI only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentifyNamespaceNvm {
    /// Logical Block Storage Tag Mask, byte 0.
    pub lbstm: u64,
    /// Protection Information Capabilities, byte 8.
    pub pic: u8,
    /// Extended LBA Format 0..63 Support, 4 bytes each from byte 12 (STS bits 6:0, PIF 8:7).
    pub elbaf: [u32; 64],
}

impl Default for IdentifyNamespaceNvm {
    fn default() -> Self {
        IdentifyNamespaceNvm {
            lbstm: 0,
            pic: 0,
            elbaf: [0; 64],
        }
    }
}

impl IdentifyNamespaceNvm {
    /// Write the 4096-byte structure into `out`.
    pub fn encode(&self, out: &mut [u8; IDENTIFY_DATA_LEN]) {
        out.fill(0);
        put64(out, 0, self.lbstm);
        out[8] = self.pic;
        for (i, e) in self.elbaf.iter().enumerate() {
            put32(out, 12 + 4 * i, *e);
        }
    }

    /// Decode from at least 268 bytes (the modelled prefix of the 4096-byte structure).
    pub fn decode(b: &[u8]) -> Result<IdentifyNamespaceNvm, DecodeError> {
        need(b, 12 + 4 * 64)?;
        let mut elbaf = [0u32; 64];
        for (i, e) in elbaf.iter_mut().enumerate() {
            *e = le32(b, 12 + 4 * i);
        }
        Ok(IdentifyNamespaceNvm {
            lbstm: le64(b, 0),
            pic: b[8],
            elbaf,
        })
    }
}

/// I/O Command Set Independent Identify Namespace (CNS 08h; NVMe Base 2.0 Figure 280; Linux
/// `struct nvme_id_ns_cs_indep`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdentifyNamespaceCsIndep {
    /// Common Namespace Features, byte 0.
    pub nsfeat: u8,
    /// Namespace Multi-path I/O and Namespace Sharing Capabilities, byte 1.
    pub nmic: u8,
    /// Reservation Capabilities, byte 2.
    pub rescap: u8,
    /// Format Progress Indicator, byte 3.
    pub fpi: u8,
    /// ANA Group Identifier, byte 4.
    pub anagrpid: u32,
    /// Namespace Attributes, byte 8.
    pub nsattr: u8,
    /// NVM Set Identifier, byte 10.
    pub nvmsetid: u16,
    /// Endurance Group Identifier, byte 12.
    pub endgid: u16,
    /// Namespace Status, byte 14 (bit 0: namespace ready).
    pub nstat: u8,
}

impl IdentifyNamespaceCsIndep {
    /// NSTAT bit 0: Namespace Ready.
    pub const NSTAT_NRDY: u8 = 1 << 0;

    /// Write the 4096-byte structure into `out`.
    pub fn encode(&self, out: &mut [u8; IDENTIFY_DATA_LEN]) {
        out.fill(0);
        out[0] = self.nsfeat;
        out[1] = self.nmic;
        out[2] = self.rescap;
        out[3] = self.fpi;
        put32(out, 4, self.anagrpid);
        out[8] = self.nsattr;
        put16(out, 10, self.nvmsetid);
        put16(out, 12, self.endgid);
        out[14] = self.nstat;
    }

    /// Decode from at least 15 bytes (the modelled prefix of the 4096-byte structure).
    pub fn decode(b: &[u8]) -> Result<IdentifyNamespaceCsIndep, DecodeError> {
        need(b, 15)?;
        Ok(IdentifyNamespaceCsIndep {
            nsfeat: b[0],
            nmic: b[1],
            rescap: b[2],
            fpi: b[3],
            anagrpid: le32(b, 4),
            nsattr: b[8],
            nvmsetid: le16(b, 10),
            endgid: le16(b, 12),
            nstat: b[14],
        })
    }
}

/// I/O Command Set vector bits (CNS 1Ch): bit N set = command set with CSI N is in the
/// combination.
pub mod iocs_vector {
    /// NVM Command Set (CSI 00h).
    pub const NVM: u64 = 1 << 0;
    /// Key Value Command Set (CSI 01h).
    pub const KV: u64 = 1 << 1;
    /// Zoned Namespace Command Set (CSI 02h).
    pub const ZNS: u64 = 1 << 2;
}

/// Maximum number of I/O Command Set vectors in the CNS 1Ch structure.
pub const IO_CMD_SET_VECTORS_MAX: usize = 512;

/// Fill `out` with the I/O Command Set data structure (CNS 1Ch): up to 512 little-endian u64
/// vectors; vector index = Command Set Combination Index. Extra vectors are dropped.
pub fn encode_io_cmd_set_vectors(vectors: &[u64], out: &mut [u8; IDENTIFY_DATA_LEN]) {
    out.fill(0);
    for (i, v) in vectors.iter().take(IO_CMD_SET_VECTORS_MAX).enumerate() {
        put64(out, 8 * i, *v);
    }
}

/// Decode the I/O Command Set data structure: the whole 8-byte vectors present in `b` (at most
/// 512), with trailing all-zero vectors removed (indices are preserved).
pub fn decode_io_cmd_set_vectors(b: &[u8]) -> Vec<u64> {
    let mut v: Vec<u64> = b
        .chunks_exact(8)
        .take(IO_CMD_SET_VECTORS_MAX)
        .map(|c| le64(c, 0))
        .collect();
    while v.last() == Some(&0) {
        v.pop();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample_ctrl() -> IdentifyController {
        IdentifyController {
            vid: 0x1b36,
            ssvid: 0x1af4,
            sn: "EBOF0001".into(),
            mn: "ebof NVMe/TCP target".into(),
            fr: "0.1.0".into(),
            rab: 6,
            ieee: [0x11, 0x22, 0x33],
            cmic: cmic::MULTI_PORT | cmic::MULTI_CTRL | cmic::ANA,
            mdts: 5,
            cntlid: 0x1234,
            ver: 0x0002_0000,
            rtd3r: 1,
            rtd3e: 2,
            oaes: oaes::NS_ATTR | oaes::ANA_CHANGE,
            ctratt: 1,
            cntrltype: cntrltype::IO,
            fguid: [7; 16],
            crdt: [1, 2, 3],
            oacs: 0x0008,
            acl: 3,
            aerl: 3,
            frmw: 3,
            lpa: lpa::CMD_EFFECTS | lpa::EXT_DATA,
            elpe: 127,
            npss: 0,
            avscc: 1,
            apsta: 0,
            wctemp: 343,
            cctemp: 373,
            tnvmcap: 1 << 70,
            unvmcap: 12345,
            kas: 10,
            anatt: 10,
            anacap: 0x47,
            anagrpmax: 32,
            nanagrpid: 32,
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: 128,
            nn: 1024,
            oncs: oncs::DSM | oncs::WRITE_ZEROES,
            fuses: 0,
            fna: 0,
            vwc: vwc::PRESENT | vwc::FLUSH_BROADCAST_SUPPORTED,
            awun: 0,
            awupf: 0,
            icsvscc: 1,
            nwpc: 0,
            acwu: 0,
            ocfs: 0,
            sgls: sgls::SUPPORTED | sgls::OFFSET,
            mnan: 0,
            subnqn: "nqn.2024-01.io.ebof:subsys1".into(),
            ioccsz: 4 + 8192 / 16,
            iorcsz: 1,
            icdoff: 0,
            fcatt: 0,
            msdbd: 1,
            ofcs: 1,
            dctype: 0,
            psd0: PowerState {
                mp: 2500,
                flags: 0,
                enlat: 16,
                exlat: 4,
                ..Default::default()
            },
        }
    }

    #[test]
    fn ctrl_round_trip() {
        let c = sample_ctrl();
        let mut b = [0u8; 4096];
        c.encode(&mut b);
        assert_eq!(IdentifyController::decode(&b).unwrap(), c);
    }

    #[test]
    fn ctrl_golden_offsets() {
        let c = sample_ctrl();
        let mut b = [0xAAu8; 4096];
        c.encode(&mut b);
        assert_eq!(&b[0..2], &0x1b36u16.to_le_bytes());
        assert_eq!(&b[4..12], b"EBOF0001");
        assert_eq!(&b[12..24], &[b' '; 12]);
        assert_eq!(&b[24..44], b"ebof NVMe/TCP target");
        assert_eq!(b[63], b' ');
        assert_eq!(&b[64..72], b"0.1.0   ");
        assert_eq!(&b[73..76], &[0x11, 0x22, 0x33]);
        assert_eq!(b[77], 5);
        assert_eq!(&b[78..80], &[0x34, 0x12]);
        assert_eq!(&b[80..84], &0x0002_0000u32.to_le_bytes());
        assert_eq!(b[111], 1);
        assert_eq!(&b[128..134], &[1, 0, 2, 0, 3, 0]);
        assert_eq!(b[261], lpa::CMD_EFFECTS | lpa::EXT_DATA);
        assert_eq!(b[262], 127);
        assert_eq!(&b[266..268], &343u16.to_le_bytes());
        assert_eq!(&b[320..322], &[10, 0]);
        assert_eq!(b[512], 0x66);
        assert_eq!(b[513], 0x44);
        assert_eq!(&b[514..516], &128u16.to_le_bytes());
        assert_eq!(&b[516..520], &1024u32.to_le_bytes());
        assert_eq!(
            &b[520..522],
            &(oncs::DSM | oncs::WRITE_ZEROES).to_le_bytes()
        );
        assert_eq!(b[525], 0x07);
        assert_eq!(&b[536..540], &(1u32 | 1 << 20).to_le_bytes());
        assert_eq!(&b[768..795], b"nqn.2024-01.io.ebof:subsys1");
        assert!(b[795..1024].iter().all(|&x| x == 0));
        assert_eq!(&b[1792..1796], &(4u32 + 512).to_le_bytes());
        assert_eq!(&b[1796..1800], &1u32.to_le_bytes());
        assert_eq!(b[1803], 1);
        assert_eq!(&b[1804..1806], &[1, 0]);
        assert_eq!(&b[2048..2050], &2500u16.to_le_bytes());
        assert_eq!(&b[2052..2056], &16u32.to_le_bytes());
        // Unmodelled bytes are zeroed.
        assert!(b[100..111].iter().all(|&x| x == 0));
        assert!(b[3072..4096].iter().all(|&x| x == 0));
    }

    #[test]
    fn ctrl_short() {
        assert_eq!(
            IdentifyController::decode(&[0u8; 4095]),
            Err(DecodeError::Short {
                need: 4096,
                got: 4095
            })
        );
    }

    #[test]
    fn strings() {
        let mut f = [0u8; 8];
        put_ascii(&mut f, "abc");
        assert_eq!(&f, b"abc     ");
        put_ascii(&mut f, "0123456789");
        assert_eq!(&f, b"01234567");
        put_ascii(&mut f, "é\u{1}x");
        assert_eq!(&f, b"??x     ");
        assert_eq!(get_ascii(b"abc     "), "abc");
        assert_eq!(get_ascii(b"ab\0cd   "), "ab");
        assert_eq!(get_ascii(b"  x  \0\0\0"), "  x");

        let mut n = [0xffu8; 6];
        put_nul_padded(&mut n, "abcdefgh");
        assert_eq!(&n, b"abcde\0");
        put_nul_padded(&mut n, "ab");
        assert_eq!(&n, b"ab\0\0\0\0");
        // Truncation respects UTF-8 boundaries.
        put_nul_padded(&mut n, "abcdé");
        assert_eq!(&n, b"abcd\0\0");
        assert_eq!(get_nul_padded(b"ab\0cd"), "ab");
        assert_eq!(get_nul_padded(b"abcd"), "abcd");
        assert_eq!(get_nul_padded(&[0xff, 0]), "\u{fffd}");
    }

    fn sample_ns() -> IdentifyNamespace {
        let mut ns = IdentifyNamespace {
            nsze: 0x1_0000_0000,
            ncap: 0x1_0000_0000,
            nuse: 0x8000,
            nsfeat: nsfeat::THINP | nsfeat::OPTPERF,
            nlbaf: 1,
            flbas: 1,
            dlfeat: dlfeat::READ_ZEROES | dlfeat::WRITE_ZEROES_DEALLOC,
            noiob: 256,
            nvmcap: 0x1_0000_0000 * 4096,
            npwg: 7,
            nows: 63,
            mssrl: 2048,
            mcl: 16384,
            msrc: 127,
            anagrpid: 1,
            nsattr: 0,
            nvmsetid: 0,
            endgid: 0,
            nguid: [0x5a; 16],
            eui64: [1, 2, 3, 4, 5, 6, 7, 8],
            ..Default::default()
        };
        ns.lbaf[0] = LbaFormat::new(9);
        ns.lbaf[1] = LbaFormat {
            ms: 8,
            lbads: 12,
            rp: 1,
        };
        ns
    }

    #[test]
    fn ebof_mark_says_encrypted_at_byte_3849() {
        let mut ns = IdentifyNamespace {
            ebof_backend: Some(ebof_vs::Backend::File),
            ebof_encrypted: true,
            ..Default::default()
        };
        let mut b = [0u8; 4096];
        ns.encode(&mut b);
        assert_eq!((b[3848], b[3849]), (2, ebof_vs::FLAG_ENCRYPTED));
        assert_eq!(IdentifyNamespace::decode(&b).unwrap(), ns);
        ns.ebof_encrypted = false;
        ns.encode(&mut b);
        assert_eq!(b[3849], 0);
        assert!(!IdentifyNamespace::decode(&b).unwrap().ebof_encrypted);
        // Without ebof's signature the byte means nothing.
        let mut other = [0u8; 4096];
        other[3849] = 0xFF;
        assert!(!IdentifyNamespace::decode(&other).unwrap().ebof_encrypted);
    }

    #[test]
    fn ns_round_trip_and_offsets() {
        let ns = sample_ns();
        let mut b = [0xAAu8; 4096];
        ns.encode(&mut b);
        assert_eq!(IdentifyNamespace::decode(&b).unwrap(), ns);
        assert_eq!(&b[0..8], &0x1_0000_0000u64.to_le_bytes());
        assert_eq!(b[25], 1);
        assert_eq!(b[26], 1);
        assert_eq!(b[33], 0x09);
        assert_eq!(&b[46..48], &256u16.to_le_bytes());
        assert_eq!(&b[48..64], &(0x1_0000_0000u128 * 4096).to_le_bytes());
        // Copy limits (NVM Command Set 1.0 Figure 97): MSSRL, MCL, MSRC.
        assert_eq!(&b[74..76], &2048u16.to_le_bytes());
        assert_eq!(&b[76..80], &16384u32.to_le_bytes());
        assert_eq!(b[80], 127);
        assert_eq!(&b[92..96], &1u32.to_le_bytes());
        assert_eq!(&b[104..120], &[0x5a; 16]);
        assert_eq!(&b[120..128], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[128..132], &[0, 0, 9, 0]);
        assert_eq!(&b[132..136], &[8, 0, 12, 1]);
        assert!(b[136..].iter().all(|&x| x == 0));
        assert_eq!(ns.lba_size(), 4096);
    }

    #[test]
    fn lba_size_from_flbas() {
        let mut ns = IdentifyNamespace::default();
        assert_eq!(ns.lba_size(), 0);
        ns.lbaf[0] = LbaFormat::new(9);
        assert_eq!(ns.lba_size(), 512);
        // FLBAS bits 6:5 are index bits 5:4: 0x21 -> index 0x11 = 17.
        ns.lbaf[17] = LbaFormat::new(12);
        ns.flbas = 0x21 | IdentifyNamespace::FLBAS_META_EXT;
        assert_eq!(ns.lbaf_index(), 17);
        assert_eq!(ns.lba_size(), 4096);
        ns.flbas = 0x7f;
        assert_eq!(ns.lbaf_index(), 63);
        ns.lbaf[63] = LbaFormat::new(200);
        assert_eq!(ns.lba_size(), 0);
    }

    #[test]
    fn active_ns_list() {
        let mut b = [0xffu8; 4096];
        let n = encode_active_ns_list([5u32, 1, 3, 3, 0, u32::MAX, 2].into_iter(), 1, &mut b);
        assert_eq!(n, 3);
        assert_eq!(&b[0..16], &[2, 0, 0, 0, 3, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(decode_ns_list(&b), vec![2, 3, 5]);

        let n = encode_active_ns_list(1..=5000u32, 0, &mut b);
        assert_eq!(n, 1024);
        let l = decode_ns_list(&b);
        assert_eq!(l.len(), 1024);
        assert_eq!(l[1023], 1024);
        let n = encode_active_ns_list(1..=5000u32, 4990, &mut b);
        assert_eq!(n, 10);
        assert_eq!(decode_ns_list(&b), (4991..=5000).collect::<Vec<_>>());
        assert_eq!(decode_ns_list(&[1, 0, 0, 0, 2, 0]), vec![1]);
    }

    #[test]
    fn ns_id_descs() {
        let d = vec![
            NsIdDescriptor::Eui64([1; 8]),
            NsIdDescriptor::Nguid([2; 16]),
            NsIdDescriptor::Uuid([3; 16]),
            NsIdDescriptor::Csi(csi::NVM),
        ];
        let mut b = [0xffu8; 4096];
        let used = encode_ns_id_descs(&d, &mut b);
        assert_eq!(used, 12 + 20 + 20 + 5);
        assert_eq!(&b[0..4], &[1, 8, 0, 0]);
        assert_eq!(&b[12..16], &[2, 16, 0, 0]);
        assert_eq!(&b[32..36], &[3, 16, 0, 0]);
        assert_eq!(&b[52..57], &[4, 1, 0, 0, 0]);
        assert!(b[57..].iter().all(|&x| x == 0));
        assert_eq!(decode_ns_id_descs(&b).unwrap(), d);

        // Unknown type skipped, list continues.
        let mut b = [0u8; 4096];
        b[0..7].copy_from_slice(&[0x7f, 3, 0, 0, 9, 9, 9]);
        b[7..12].copy_from_slice(&[4, 1, 0, 0, 2]);
        assert_eq!(
            decode_ns_id_descs(&b).unwrap(),
            vec![NsIdDescriptor::Csi(2)]
        );
        // Wrong length for a known type.
        let mut b = [0u8; 4096];
        b[0..4].copy_from_slice(&[1, 7, 0, 0]);
        assert!(matches!(
            decode_ns_id_descs(&b),
            Err(DecodeError::Invalid { .. })
        ));
        // Running off the end.
        assert!(matches!(
            decode_ns_id_descs(&[2, 16, 0, 0, 1, 2]),
            Err(DecodeError::Short { need: 20, got: 6 })
        ));
        assert_eq!(decode_ns_id_descs(&[]).unwrap(), vec![]);
    }

    #[test]
    fn cs_structures() {
        let c = IdentifyControllerNvm {
            vsl: 1,
            wzsl: 2,
            wusl: 3,
            dmrl: 4,
            dmrsl: 0x0102_0304,
            dmsl: 0x1122_3344_5566_7788,
        };
        let mut b = [0xffu8; 4096];
        c.encode(&mut b);
        assert_eq!(&b[0..8], &[1, 2, 3, 4, 4, 3, 2, 1]);
        assert_eq!(&b[8..16], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert!(b[16..].iter().all(|&x| x == 0));
        assert_eq!(IdentifyControllerNvm::decode(&b).unwrap(), c);

        let mut n = IdentifyNamespaceNvm {
            lbstm: 9,
            pic: 1,
            ..Default::default()
        };
        n.elbaf[1] = 0x80;
        n.elbaf[63] = 0xdead;
        n.encode(&mut b);
        assert_eq!(b[8], 1);
        assert_eq!(&b[16..20], &0x80u32.to_le_bytes());
        assert_eq!(&b[264..268], &0xdeadu32.to_le_bytes());
        assert_eq!(IdentifyNamespaceNvm::decode(&b).unwrap(), n);

        let i = IdentifyNamespaceCsIndep {
            nsfeat: 1,
            nmic: 1,
            rescap: 0xff,
            fpi: 0x80,
            anagrpid: 2,
            nsattr: 1,
            nvmsetid: 3,
            endgid: 4,
            nstat: IdentifyNamespaceCsIndep::NSTAT_NRDY,
        };
        i.encode(&mut b);
        assert_eq!(
            &b[0..15],
            &[1, 1, 0xff, 0x80, 2, 0, 0, 0, 1, 0, 3, 0, 4, 0, 1]
        );
        assert_eq!(IdentifyNamespaceCsIndep::decode(&b).unwrap(), i);

        encode_io_cmd_set_vectors(&[iocs_vector::NVM], &mut b);
        assert_eq!(&b[0..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
        assert!(b[8..].iter().all(|&x| x == 0));
        assert_eq!(decode_io_cmd_set_vectors(&b), vec![iocs_vector::NVM]);
        encode_io_cmd_set_vectors(&[0, iocs_vector::NVM | iocs_vector::ZNS], &mut b);
        assert_eq!(decode_io_cmd_set_vectors(&b), vec![0, 5]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..4200)) {
            let _ = IdentifyController::decode(&b);
            let _ = IdentifyNamespace::decode(&b);
            let _ = IdentifyControllerNvm::decode(&b);
            let _ = IdentifyNamespaceNvm::decode(&b);
            let _ = IdentifyNamespaceCsIndep::decode(&b);
            let _ = PowerState::decode(&b);
            let _ = decode_ns_list(&b);
            let _ = decode_ns_id_descs(&b);
            let _ = decode_io_cmd_set_vectors(&b);
            if let Ok(ns) = IdentifyNamespace::decode(&b) {
                let _ = ns.lba_size();
            }
        }

        #[test]
        fn ns_id_desc_stream_never_panics(
            // Descriptor-shaped noise: small NIDT and NIDL values hit every branch.
            parts in proptest::collection::vec((0u8..6, 0u8..20, any::<[u8; 20]>()), 0..40)
        ) {
            let mut b = Vec::new();
            for (t, l, v) in parts {
                b.extend_from_slice(&[t, l, 0, 0]);
                b.extend_from_slice(&v[..usize::from(l)]);
            }
            let _ = decode_ns_id_descs(&b);
        }

        #[test]
        fn ctrl_round_trip_strings(
            sn in "[ -~]{0,20}",
            mn in "[ -~]{0,40}",
            fr in "[!-~]{0,8}",
            nqn in "nqn\\.[a-z0-9.:-]{1,200}",
            cntlid in any::<u16>(),
            nn in any::<u32>(),
        ) {
            let c = IdentifyController {
                sn: sn.trim_end_matches(' ').to_string(),
                mn: mn.trim_end_matches(' ').to_string(),
                fr,
                subnqn: nqn,
                cntlid,
                nn,
                ..Default::default()
            };
            let mut b = [0u8; 4096];
            c.encode(&mut b);
            prop_assert_eq!(IdentifyController::decode(&b).unwrap(), c);
        }

        #[test]
        fn ns_round_trip(
            nsze in any::<u64>(),
            nvmcap in any::<u128>(),
            flbas in any::<u8>(),
            lbads in proptest::collection::vec(any::<(u16, u8, u8)>(), 64),
        ) {
            let mut ns = IdentifyNamespace { nsze, nvmcap, flbas, ..Default::default() };
            for (f, (ms, l, rp)) in ns.lbaf.iter_mut().zip(lbads) {
                *f = LbaFormat { ms, lbads: l, rp: rp & 3 };
            }
            let mut b = [0u8; 4096];
            ns.encode(&mut b);
            prop_assert_eq!(IdentifyNamespace::decode(&b).unwrap(), ns);
        }
    }
}
