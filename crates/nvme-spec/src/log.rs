//! Log pages (NVMe Base 2.0 section 5.16): Error Information, SMART / Health Information,
//! Firmware Slot Information, Changed Namespace List and Commands Supported and Effects, plus the
//! Get Log Page windowing helper [`copy_log_window`].
//!
//! Offsets were checked against the spec figures and Linux `include/linux/nvme.h`
//! (`struct nvme_error_slot`, `nvme_smart_log`, `nvme_fw_slot_info_log`, `nvme_effects_log`).
//! Encoding is infallible; decoding is fallible and never panics.

use crate::identify::{arr, get_ascii, le128, need, put_ascii, put128};
use crate::{le16, le32, le64, put16, put32, put64};

pub use crate::identify::DecodeError;

/// Log Page Identifiers (LID), Get Log Page CDW10 bits 7:0.
pub mod lid {
    /// Supported Log Pages.
    pub const SUPPORTED: u8 = 0x00;
    /// Error Information.
    pub const ERROR: u8 = 0x01;
    /// SMART / Health Information.
    pub const SMART: u8 = 0x02;
    /// Firmware Slot Information.
    pub const FW_SLOT: u8 = 0x03;
    /// Changed Namespace List.
    pub const CHANGED_NS: u8 = 0x04;
    /// Commands Supported and Effects.
    pub const CMD_EFFECTS: u8 = 0x05;
    /// Asymmetric Namespace Access.
    pub const ANA: u8 = 0x0C;
    /// Discovery (NVMe-oF; discovery controllers only).
    pub const DISCOVERY: u8 = 0x70;
    /// Reservation Notification.
    pub const RESERVATION: u8 = 0x80;
}

/// Copy a window of a log page into `out`, as Get Log Page does with LPO (`offset`, bytes) and
/// NUMD (`out.len()`): bytes that exist are copied, the rest of `out` is zero-filled. Returns the
/// number of bytes copied from `full`; an offset at or beyond the end copies nothing.
pub fn copy_log_window(full: &[u8], offset: u64, out: &mut [u8]) -> usize {
    let start = match usize::try_from(offset) {
        Ok(s) if s < full.len() => s,
        _ => {
            out.fill(0);
            return 0;
        }
    };
    let n = out.len().min(full.len() - start);
    out[..n].copy_from_slice(&full[start..start + n]);
    out[n..].fill(0);
    n
}

// ---------------------------------------------------------------------------------------------
// Error Information (LID 01h)
// ---------------------------------------------------------------------------------------------

/// Error Information Log Entry (64 bytes; NVMe Base 2.0 Figure 205). The log page is an array
/// of these, newest first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorLogEntry {
    /// Error Count, byte 0: unique, incrementing identifier of this error (0 = entry invalid).
    pub error_count: u64,
    /// Submission Queue ID, byte 8 (FFFFh if not associated with a command).
    pub sqid: u16,
    /// Command ID, byte 10 (FFFFh if not associated with a command).
    pub cmdid: u16,
    /// Status Field, byte 12: bits 15:1 the completion status (as in CQE DW3 bits 31:17),
    /// bit 0 the Phase Tag posted with it. See [`ErrorLogEntry::pack_status_field`].
    pub status_field: u16,
    /// Parameter Error Location, byte 14: bits 7:0 byte offset in the command, bits 10:8 bit;
    /// FFFFh if not applicable. See [`ErrorLogEntry::pack_pel`].
    pub parm_error_location: u16,
    /// LBA, byte 16: first LBA that experienced the error.
    pub lba: u64,
    /// Namespace, byte 24.
    pub nsid: u32,
    /// Vendor Specific Information Available, byte 28 (log page id, or 0).
    pub vs: u8,
    /// Transport Type, byte 29 (as in the discovery log TRTYPE; 0 = not transport related).
    pub trtype: u8,
    /// Command Set Indicator, byte 30 (newer revisions; 0 in older controllers).
    pub csi: u8,
    /// Opcode of the failed command, byte 31 (newer revisions; 0 in older controllers).
    pub opcode: u8,
    /// Command Specific Information, byte 32.
    pub cs: u64,
    /// Transport Type Specific Information, byte 40.
    pub trtype_spec: u16,
}

impl ErrorLogEntry {
    /// Wire size.
    pub const LEN: usize = 64;
    /// PEL value meaning "not applicable".
    pub const PEL_NONE: u16 = 0xFFFF;

    /// Build a Status Field: `status` is the 15-bit status (CQE DW3 bits 31:17: SC bits 7:0,
    /// SCT bits 10:8, CRD, M, DNR), `phase` the Phase Tag.
    pub const fn pack_status_field(status: u16, phase: bool) -> u16 {
        (status << 1) | phase as u16
    }

    /// The 15-bit status without the Phase Tag.
    pub const fn status(&self) -> u16 {
        self.status_field >> 1
    }

    /// The Phase Tag bit.
    pub const fn phase(&self) -> bool {
        self.status_field & 1 != 0
    }

    /// Build a Parameter Error Location: `byte` offset in the command (0..63), `bit` (0..7).
    pub const fn pack_pel(byte: u8, bit: u8) -> u16 {
        (byte as u16) | (((bit & 0x7) as u16) << 8)
    }

    /// Byte component of the Parameter Error Location (bits 7:0).
    pub const fn pel_byte(&self) -> u8 {
        (self.parm_error_location & 0xff) as u8
    }

    /// Bit component of the Parameter Error Location (bits 10:8).
    pub const fn pel_bit(&self) -> u8 {
        ((self.parm_error_location >> 8) & 0x7) as u8
    }

    /// Write the 64-byte entry into `out`.
    pub fn encode(&self, out: &mut [u8; Self::LEN]) {
        out.fill(0);
        put64(out, 0, self.error_count);
        put16(out, 8, self.sqid);
        put16(out, 10, self.cmdid);
        put16(out, 12, self.status_field);
        put16(out, 14, self.parm_error_location);
        put64(out, 16, self.lba);
        put32(out, 24, self.nsid);
        out[28] = self.vs;
        out[29] = self.trtype;
        out[30] = self.csi;
        out[31] = self.opcode;
        put64(out, 32, self.cs);
        put16(out, 40, self.trtype_spec);
    }

    /// Decode from at least 64 bytes.
    pub fn decode(b: &[u8]) -> Result<ErrorLogEntry, DecodeError> {
        need(b, Self::LEN)?;
        Ok(ErrorLogEntry {
            error_count: le64(b, 0),
            sqid: le16(b, 8),
            cmdid: le16(b, 10),
            status_field: le16(b, 12),
            parm_error_location: le16(b, 14),
            lba: le64(b, 16),
            nsid: le32(b, 24),
            vs: b[28],
            trtype: b[29],
            csi: b[30],
            opcode: b[31],
            cs: le64(b, 32),
            trtype_spec: le16(b, 40),
        })
    }

    /// Encode a whole Error Information log page of `elpe + 1` entries (`ELPE` is 0's based),
    /// taking entries from `entries` in order and zero-filling the remaining slots.
    pub fn encode_page(entries: &[ErrorLogEntry], elpe: u8) -> Vec<u8> {
        let slots = usize::from(elpe) + 1;
        let mut page = vec![0u8; slots * Self::LEN];
        for (e, chunk) in entries.iter().zip(page.chunks_exact_mut(Self::LEN)) {
            let mut a = [0u8; Self::LEN];
            e.encode(&mut a);
            chunk.copy_from_slice(&a);
        }
        page
    }

    /// Decode every whole 64-byte entry in `b` whose Error Count is non-zero.
    pub fn decode_page(b: &[u8]) -> Vec<ErrorLogEntry> {
        b.chunks_exact(Self::LEN)
            .filter_map(|c| ErrorLogEntry::decode(c).ok())
            .filter(|e| e.error_count != 0)
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// SMART / Health Information (LID 02h)
// ---------------------------------------------------------------------------------------------

/// Critical Warning bits (SMART byte 0).
pub mod critical_warning {
    /// Available spare capacity below threshold.
    pub const SPARE: u8 = 1 << 0;
    /// Temperature above over- or below under-temperature threshold.
    pub const TEMPERATURE: u8 = 1 << 1;
    /// NVM subsystem reliability degraded.
    pub const RELIABILITY: u8 = 1 << 2;
    /// All media placed in read-only mode.
    pub const READ_ONLY: u8 = 1 << 3;
    /// Volatile memory backup device failed.
    pub const VOLATILE_BACKUP: u8 = 1 << 4;
    /// Persistent memory region read-only or unreliable.
    pub const PMR_READ_ONLY: u8 = 1 << 5;
}

/// SMART / Health Information log page (512 bytes; NVMe Base 2.0 Figure 207).
///
/// Data Units Read / Written are reported in thousands of 512-byte units, rounded up: a value of
/// 1 means 1000 units of 512 bytes (512,000 bytes), and any non-zero amount below that reports 1
/// (see [`data_units_from_bytes`]). Host Read/Write Commands count commands, not bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SmartLog {
    /// Critical Warning, byte 0 ([`critical_warning`]).
    pub critical_warning: u8,
    /// Composite Temperature, byte 1 (u16, Kelvin).
    pub temperature: u16,
    /// Available Spare, byte 3 (percent, 0..100).
    pub avail_spare: u8,
    /// Available Spare Threshold, byte 4 (percent).
    pub spare_thresh: u8,
    /// Percentage Used, byte 5 (may exceed 100; 255 = 255 or more).
    pub percent_used: u8,
    /// Endurance Group Critical Warning Summary, byte 6.
    pub endu_grp_crit_warn: u8,
    /// Data Units Read, bytes 32..48 (thousands of 512-byte units, rounded up).
    pub data_units_read: u128,
    /// Data Units Written, bytes 48..64 (thousands of 512-byte units, rounded up).
    pub data_units_written: u128,
    /// Host Read Commands, bytes 64..80.
    pub host_reads: u128,
    /// Host Write Commands, bytes 80..96.
    pub host_writes: u128,
    /// Controller Busy Time, bytes 96..112 (minutes).
    pub ctrl_busy_time: u128,
    /// Power Cycles, bytes 112..128.
    pub power_cycles: u128,
    /// Power On Hours, bytes 128..144.
    pub power_on_hours: u128,
    /// Unsafe Shutdowns, bytes 144..160.
    pub unsafe_shutdowns: u128,
    /// Media and Data Integrity Errors, bytes 160..176.
    pub media_errors: u128,
    /// Number of Error Information Log Entries, bytes 176..192 (over the controller's life).
    pub num_err_log_entries: u128,
    /// Warning Composite Temperature Time, byte 192 (minutes).
    pub warning_temp_time: u32,
    /// Critical Composite Temperature Time, byte 196 (minutes).
    pub critical_comp_time: u32,
    /// Temperature Sensors 1..8, bytes 200..216 (Kelvin; 0 = not implemented).
    pub temp_sensor: [u16; 8],
    /// Thermal Management Temperature 1 Transition Count, byte 216.
    pub thm_temp1_trans_count: u32,
    /// Thermal Management Temperature 2 Transition Count, byte 220.
    pub thm_temp2_trans_count: u32,
    /// Total Time For Thermal Management Temperature 1, byte 224 (seconds).
    pub thm_temp1_total_time: u32,
    /// Total Time For Thermal Management Temperature 2, byte 228 (seconds).
    pub thm_temp2_total_time: u32,
}

/// Convert a byte count into SMART Data Units: thousands of 512-byte units, rounded up
/// (`ceil(bytes / 512_000)`).
pub fn data_units_from_bytes(bytes: u128) -> u128 {
    bytes.div_ceil(512_000)
}

impl SmartLog {
    /// Wire size.
    pub const LEN: usize = 512;

    /// Write the 512-byte page into `out`.
    pub fn encode(&self, out: &mut [u8; Self::LEN]) {
        out.fill(0);
        out[0] = self.critical_warning;
        put16(out, 1, self.temperature);
        out[3] = self.avail_spare;
        out[4] = self.spare_thresh;
        out[5] = self.percent_used;
        out[6] = self.endu_grp_crit_warn;
        put128(out, 32, self.data_units_read);
        put128(out, 48, self.data_units_written);
        put128(out, 64, self.host_reads);
        put128(out, 80, self.host_writes);
        put128(out, 96, self.ctrl_busy_time);
        put128(out, 112, self.power_cycles);
        put128(out, 128, self.power_on_hours);
        put128(out, 144, self.unsafe_shutdowns);
        put128(out, 160, self.media_errors);
        put128(out, 176, self.num_err_log_entries);
        put32(out, 192, self.warning_temp_time);
        put32(out, 196, self.critical_comp_time);
        for (i, t) in self.temp_sensor.iter().enumerate() {
            put16(out, 200 + 2 * i, *t);
        }
        put32(out, 216, self.thm_temp1_trans_count);
        put32(out, 220, self.thm_temp2_trans_count);
        put32(out, 224, self.thm_temp1_total_time);
        put32(out, 228, self.thm_temp2_total_time);
    }

    /// Decode from at least 512 bytes.
    pub fn decode(b: &[u8]) -> Result<SmartLog, DecodeError> {
        need(b, Self::LEN)?;
        let mut temp_sensor = [0u16; 8];
        for (i, t) in temp_sensor.iter_mut().enumerate() {
            *t = le16(b, 200 + 2 * i);
        }
        Ok(SmartLog {
            critical_warning: b[0],
            temperature: le16(b, 1),
            avail_spare: b[3],
            spare_thresh: b[4],
            percent_used: b[5],
            endu_grp_crit_warn: b[6],
            data_units_read: le128(b, 32),
            data_units_written: le128(b, 48),
            host_reads: le128(b, 64),
            host_writes: le128(b, 80),
            ctrl_busy_time: le128(b, 96),
            power_cycles: le128(b, 112),
            power_on_hours: le128(b, 128),
            unsafe_shutdowns: le128(b, 144),
            media_errors: le128(b, 160),
            num_err_log_entries: le128(b, 176),
            warning_temp_time: le32(b, 192),
            critical_comp_time: le32(b, 196),
            temp_sensor,
            thm_temp1_trans_count: le32(b, 216),
            thm_temp2_trans_count: le32(b, 220),
            thm_temp1_total_time: le32(b, 224),
            thm_temp2_total_time: le32(b, 228),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Firmware Slot Information (LID 03h)
// ---------------------------------------------------------------------------------------------

/// Firmware Slot Information log page (512 bytes; NVMe Base 2.0 Figure 208).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FwSlotLog {
    /// Active Firmware Info, byte 0: bits 2:0 active slot, bits 6:4 slot activated at next reset.
    pub afi: u8,
    /// Firmware Revision for Slot 1..7, 8 ASCII bytes each from byte 8 (space padded; an empty
    /// string encodes as all zeroes = slot empty/unsupported).
    pub frs: [String; 7],
}

impl FwSlotLog {
    /// Wire size.
    pub const LEN: usize = 512;

    /// Write the 512-byte page into `out`.
    pub fn encode(&self, out: &mut [u8; Self::LEN]) {
        out.fill(0);
        out[0] = self.afi;
        for (i, s) in self.frs.iter().enumerate() {
            if !s.is_empty() {
                put_ascii(&mut out[8 + 8 * i..16 + 8 * i], s);
            }
        }
    }

    /// Decode from at least 512 bytes (all-zero slots decode as empty strings).
    pub fn decode(b: &[u8]) -> Result<FwSlotLog, DecodeError> {
        need(b, Self::LEN)?;
        let frs = std::array::from_fn(|i| get_ascii(&b[8 + 8 * i..16 + 8 * i]));
        Ok(FwSlotLog { afi: b[0], frs })
    }

    /// Raw 8 bytes of slot `i` (0-based; slot 1 is index 0), for callers that want the bytes.
    pub fn frs_raw(b: &[u8], i: usize) -> Option<[u8; 8]> {
        let off = 8 + 8 * i;
        (i < 7 && b.len() >= off + 8).then(|| arr(b, off))
    }
}

// ---------------------------------------------------------------------------------------------
// Changed Namespace List (LID 04h)
// ---------------------------------------------------------------------------------------------

/// Changed Namespace List log page (4096 bytes; NVMe Base 2.0 5.16.1.5): up to 1024 NSIDs in
/// ascending order, zero-terminated. If more than 1024 namespaces changed, the page holds only
/// FFFFFFFFh in the first entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangedNsList {
    /// The changed NSIDs. More than 1024 entries encode as the overflow marker; a decoded
    /// overflow page yields `[0xFFFF_FFFF]`.
    pub nsids: Vec<u32>,
}

impl ChangedNsList {
    /// Wire size.
    pub const LEN: usize = 4096;
    /// Maximum number of NSIDs listed.
    pub const MAX: usize = 1024;
    /// First-entry marker for "more than 1024 namespaces changed".
    pub const OVERFLOW: u32 = 0xFFFF_FFFF;

    /// True if the list reports (or would report) more than 1024 changes.
    pub fn is_overflow(&self) -> bool {
        self.nsids.len() > Self::MAX || self.nsids.first() == Some(&Self::OVERFLOW)
    }

    /// Write the 4096-byte page into `out`. NSIDs are written in the given order (callers keep
    /// them ascending); zero NSIDs would terminate the list early and are skipped.
    pub fn encode(&self, out: &mut [u8; Self::LEN]) {
        out.fill(0);
        if self.is_overflow() {
            put32(out, 0, Self::OVERFLOW);
            return;
        }
        for (i, n) in self.nsids.iter().filter(|&&n| n != 0).enumerate() {
            put32(out, 4 * i, *n);
        }
    }

    /// Decode the whole 4-byte entries present in `b` (normally 4096 bytes) up to the first
    /// zero. Accepts a short buffer (a host may read only part of the page).
    pub fn decode(b: &[u8]) -> Result<ChangedNsList, DecodeError> {
        let nsids: Vec<u32> = b
            .chunks_exact(4)
            .take(Self::MAX)
            .map(|c| le32(c, 0))
            .take_while(|&n| n != 0)
            .collect();
        if nsids.first() == Some(&Self::OVERFLOW) {
            return Ok(ChangedNsList {
                nsids: vec![Self::OVERFLOW],
            });
        }
        Ok(ChangedNsList { nsids })
    }
}

// ---------------------------------------------------------------------------------------------
// Commands Supported and Effects (LID 05h)
// ---------------------------------------------------------------------------------------------

/// Commands Supported and Effects Data Structure bits (NVMe Base 2.0 Figure 211).
pub mod effects {
    /// Command Supported.
    pub const CSUPP: u32 = 1 << 0;
    /// Logical Block Content Change.
    pub const LBCC: u32 = 1 << 1;
    /// Namespace Capability Change.
    pub const NCC: u32 = 1 << 2;
    /// Namespace Inventory Change.
    pub const NIC: u32 = 1 << 3;
    /// Controller Capability Change.
    pub const CCC: u32 = 1 << 4;
    /// Command Submission and Execution (bits 18:16) shift.
    pub const CSE_SHIFT: u32 = 16;
    /// Command Submission and Execution mask.
    pub const CSE_MASK: u32 = 0x7 << CSE_SHIFT;
    /// CSE 000b: no restriction.
    pub const CSE_NONE: u32 = 0;
    /// CSE 001b: submit only when no other command is outstanding to the same namespace.
    pub const CSE_SAME_NS: u32 = 1 << CSE_SHIFT;
    /// CSE 010b: submit only when no other command is outstanding to any namespace.
    pub const CSE_ANY_NS: u32 = 2 << CSE_SHIFT;
    /// UUID Selection Supported.
    pub const USS: u32 = 1 << 19;
}

/// Commands Supported and Effects log page (4096 bytes; NVMe Base 2.0 Figure 210), indexed by
/// opcode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmdEffectsLog {
    /// Admin Command Supported entries, byte 0 + 4 * opcode ([`effects`]).
    pub acs: [u32; 256],
    /// I/O Command Supported entries, byte 1024 + 4 * opcode ([`effects`]).
    pub iocs: [u32; 256],
}

impl Default for CmdEffectsLog {
    fn default() -> Self {
        CmdEffectsLog {
            acs: [0; 256],
            iocs: [0; 256],
        }
    }
}

impl CmdEffectsLog {
    /// Wire size.
    pub const LEN: usize = 4096;

    /// Write the 4096-byte page into `out`.
    pub fn encode(&self, out: &mut [u8; Self::LEN]) {
        out.fill(0);
        for (i, v) in self.acs.iter().enumerate() {
            put32(out, 4 * i, *v);
        }
        for (i, v) in self.iocs.iter().enumerate() {
            put32(out, 1024 + 4 * i, *v);
        }
    }

    /// Decode from at least 2048 bytes (the two tables; bytes 2048..4096 are reserved).
    pub fn decode(b: &[u8]) -> Result<CmdEffectsLog, DecodeError> {
        need(b, 2048)?;
        let mut l = CmdEffectsLog::default();
        for (i, v) in l.acs.iter_mut().enumerate() {
            *v = le32(b, 4 * i);
        }
        for (i, v) in l.iocs.iter_mut().enumerate() {
            *v = le32(b, 1024 + 4 * i);
        }
        Ok(l)
    }
}

/// Asynchronous Event Request completions (NVMe Base 2.0 5.2): the CQE's Dword 0 says the event
/// type, its information and the log page that tells more.
pub mod aen {
    /// Asynchronous Event Type: Notice.
    pub const TYPE_NOTICE: u8 = 0x02;
    /// Notice: Namespace Attribute Changed (log page [`super::lid::CHANGED_NS`]).
    pub const NOTICE_NS_CHANGED: u8 = 0x00;
    /// Notice: Asymmetric Namespace Access Change (log page [`super::lid::ANA`]).
    pub const NOTICE_ANA_CHANGE: u8 = 0x03;
    /// Notice: Discovery Log Page Change (log page [`super::lid::DISCOVERY`]).
    pub const NOTICE_DISC_CHANGE: u8 = 0xF0;
    /// Asynchronous Event Type: I/O Command specific status.
    pub const TYPE_IO_CMD_SPECIFIC: u8 = 0x06;
    /// I/O Command specific status: Reservation Log Page Available (log page
    /// [`super::lid::RESERVATION`]).
    pub const IO_RESV_LOG_AVAILABLE: u8 = 0x00;
    /// Async Event Configuration (feature 0Bh) bit enabling Namespace Attribute Notices.
    pub const CFG_NS_ATTR: u32 = 1 << 8;
    /// Async Event Configuration bit enabling ANA Change Notices.
    pub const CFG_ANA_CHANGE: u32 = 1 << 11;
    /// Async Event Configuration bit enabling Discovery Log Page Change Notices.
    pub const CFG_DISC_CHANGE: u32 = 1 << 31;
    /// Get Log Page CDW10 bit 15: Retain Asynchronous Event.
    pub const RAE: u32 = 1 << 15;

    /// Dword 0 of an AER completion: type in bits 2:0, information in 15:8, log page in 23:16.
    pub const fn result(event_type: u8, info: u8, log_page: u8) -> u32 {
        (event_type as u32 & 0x7) | ((info as u32) << 8) | ((log_page as u32) << 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn window() {
        let full: Vec<u8> = (1..=10).collect();
        let mut out = [0xffu8; 4];
        assert_eq!(copy_log_window(&full, 0, &mut out), 4);
        assert_eq!(out, [1, 2, 3, 4]);
        assert_eq!(copy_log_window(&full, 8, &mut out), 2);
        assert_eq!(out, [9, 10, 0, 0]);
        out = [0xff; 4];
        assert_eq!(copy_log_window(&full, 10, &mut out), 0);
        assert_eq!(out, [0; 4]);
        out = [0xff; 4];
        assert_eq!(copy_log_window(&full, u64::MAX, &mut out), 0);
        assert_eq!(out, [0; 4]);
        let mut big = [0xffu8; 16];
        assert_eq!(copy_log_window(&full, 3, &mut big), 7);
        assert_eq!(&big[..7], &[4, 5, 6, 7, 8, 9, 10]);
        assert!(big[7..].iter().all(|&x| x == 0));
        assert_eq!(copy_log_window(&full, 0, &mut []), 0);
    }

    #[test]
    fn error_entry() {
        let e = ErrorLogEntry {
            error_count: 0x0102_0304_0506_0708,
            sqid: 1,
            cmdid: 0xabcd,
            status_field: ErrorLogEntry::pack_status_field(0x4002, true),
            parm_error_location: ErrorLogEntry::pack_pel(44, 3),
            lba: 0x1122_3344,
            nsid: 7,
            vs: 0,
            trtype: 3,
            csi: 0,
            opcode: 0x02,
            cs: 0x55,
            trtype_spec: 0x77,
        };
        let mut b = [0xffu8; 64];
        e.encode(&mut b);
        assert_eq!(&b[0..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&b[8..10], &[1, 0]);
        assert_eq!(&b[10..12], &[0xcd, 0xab]);
        assert_eq!(&b[12..14], &((0x4002u16 << 1) | 1).to_le_bytes());
        assert_eq!(&b[14..16], &[44, 3]);
        assert_eq!(&b[16..24], &0x1122_3344u64.to_le_bytes());
        assert_eq!(&b[24..28], &[7, 0, 0, 0]);
        assert_eq!(b[29], 3);
        assert_eq!(b[31], 2);
        assert_eq!(&b[32..40], &0x55u64.to_le_bytes());
        assert_eq!(&b[40..42], &[0x77, 0]);
        assert!(b[42..].iter().all(|&x| x == 0));
        let d = ErrorLogEntry::decode(&b).unwrap();
        assert_eq!(d, e);
        assert_eq!(d.status(), 0x4002);
        assert!(d.phase());
        assert_eq!((d.pel_byte(), d.pel_bit()), (44, 3));

        let page = ErrorLogEntry::encode_page(&[e], 3);
        assert_eq!(page.len(), 256);
        assert_eq!(ErrorLogEntry::decode_page(&page), vec![e]);
        assert!(ErrorLogEntry::decode(&b[..63]).is_err());
    }

    #[test]
    fn smart() {
        let mut s = SmartLog {
            critical_warning: critical_warning::TEMPERATURE,
            temperature: 0x0135,
            avail_spare: 100,
            spare_thresh: 10,
            percent_used: 3,
            endu_grp_crit_warn: 0,
            data_units_read: data_units_from_bytes(512_001),
            data_units_written: u128::MAX,
            host_reads: 0xdead_beef,
            host_writes: 2,
            ctrl_busy_time: 3,
            power_cycles: 4,
            power_on_hours: 0x1_0000_0000_0000_0000,
            unsafe_shutdowns: 6,
            media_errors: 7,
            num_err_log_entries: 8,
            warning_temp_time: 9,
            critical_comp_time: 10,
            ..Default::default()
        };
        s.temp_sensor[0] = 300;
        s.temp_sensor[7] = 310;
        s.thm_temp2_total_time = 99;
        let mut b = [0xffu8; 512];
        s.encode(&mut b);
        assert_eq!(b[0], 2);
        assert_eq!(&b[1..3], &[0x35, 0x01]);
        assert_eq!(&b[3..7], &[100, 10, 3, 0]);
        assert!(b[7..32].iter().all(|&x| x == 0));
        assert_eq!(&b[32..48], &2u128.to_le_bytes());
        assert_eq!(&b[48..64], &[0xff; 16]);
        assert_eq!(&b[64..80], &0xdead_beefu128.to_le_bytes());
        assert_eq!(&b[128..144], &0x1_0000_0000_0000_0000u128.to_le_bytes());
        assert_eq!(&b[192..196], &9u32.to_le_bytes());
        assert_eq!(&b[200..202], &300u16.to_le_bytes());
        assert_eq!(&b[214..216], &310u16.to_le_bytes());
        assert_eq!(&b[228..232], &99u32.to_le_bytes());
        assert!(b[232..].iter().all(|&x| x == 0));
        assert_eq!(SmartLog::decode(&b).unwrap(), s);

        assert_eq!(data_units_from_bytes(0), 0);
        assert_eq!(data_units_from_bytes(1), 1);
        assert_eq!(data_units_from_bytes(512_000), 1);
        assert_eq!(data_units_from_bytes(512_001), 2);
    }

    #[test]
    fn fw_slot() {
        let f = FwSlotLog {
            afi: 0x01,
            frs: [
                "1.0.0".into(),
                String::new(),
                "ABCDEFGH".into(),
                String::new(),
                String::new(),
                String::new(),
                "x".into(),
            ],
        };
        let mut b = [0xffu8; 512];
        f.encode(&mut b);
        assert_eq!(b[0], 1);
        assert!(b[1..8].iter().all(|&x| x == 0));
        assert_eq!(&b[8..16], b"1.0.0   ");
        assert_eq!(&b[16..24], &[0; 8]);
        assert_eq!(&b[24..32], b"ABCDEFGH");
        assert_eq!(&b[56..64], b"x       ");
        assert!(b[64..].iter().all(|&x| x == 0));
        assert_eq!(FwSlotLog::decode(&b).unwrap(), f);
        assert_eq!(FwSlotLog::frs_raw(&b, 2), Some(*b"ABCDEFGH"));
        assert_eq!(FwSlotLog::frs_raw(&b, 7), None);
    }

    #[test]
    fn changed_ns() {
        let c = ChangedNsList {
            nsids: vec![1, 5, 9],
        };
        let mut b = [0xffu8; 4096];
        c.encode(&mut b);
        assert_eq!(&b[0..16], &[1, 0, 0, 0, 5, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(ChangedNsList::decode(&b).unwrap(), c);

        let full = ChangedNsList {
            nsids: (1..=1024).collect(),
        };
        full.encode(&mut b);
        assert!(!full.is_overflow());
        assert_eq!(ChangedNsList::decode(&b).unwrap(), full);

        let over = ChangedNsList {
            nsids: (1..=1025).collect(),
        };
        assert!(over.is_overflow());
        over.encode(&mut b);
        assert_eq!(&b[0..8], &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        let d = ChangedNsList::decode(&b).unwrap();
        assert!(d.is_overflow());
        assert_eq!(d.nsids, vec![0xFFFF_FFFF]);
        assert_eq!(
            ChangedNsList::decode(&[]).unwrap(),
            ChangedNsList::default()
        );
    }

    #[test]
    fn effects_log() {
        let mut l = CmdEffectsLog::default();
        l.acs[0x06] = effects::CSUPP;
        l.acs[0x09] = effects::CSUPP | effects::CCC;
        l.iocs[0x01] = effects::CSUPP | effects::LBCC;
        l.iocs[0xff] = effects::CSUPP | effects::CSE_SAME_NS;
        let mut b = [0xffu8; 4096];
        l.encode(&mut b);
        assert_eq!(&b[24..28], &[1, 0, 0, 0]);
        assert_eq!(&b[36..40], &[0x11, 0, 0, 0]);
        assert_eq!(&b[1028..1032], &[3, 0, 0, 0]);
        assert_eq!(&b[2044..2048], &[1, 0, 1, 0]);
        assert!(b[2048..].iter().all(|&x| x == 0));
        assert_eq!(CmdEffectsLog::decode(&b).unwrap(), l);
        assert!(CmdEffectsLog::decode(&b[..2047]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..4200)) {
            let _ = ErrorLogEntry::decode(&b);
            let _ = ErrorLogEntry::decode_page(&b);
            let _ = SmartLog::decode(&b);
            let _ = FwSlotLog::decode(&b);
            let _ = ChangedNsList::decode(&b);
            let _ = CmdEffectsLog::decode(&b);
        }

        #[test]
        fn window_matches_slice(
            full in proptest::collection::vec(any::<u8>(), 0..300),
            off in 0u64..400,
            len in 0usize..300,
        ) {
            let mut out = vec![0xAAu8; len];
            let n = copy_log_window(&full, off, &mut out);
            let off = off as usize;
            let expect: Vec<u8> = (0..len).map(|i| full.get(off + i).copied().unwrap_or(0)).collect();
            prop_assert_eq!(&out, &expect);
            prop_assert_eq!(n, full.len().saturating_sub(off).min(len));
        }

        #[test]
        fn error_entry_round_trip(
            a in any::<(u64, u16, u16, u16, u16, u64, u32)>(),
            c in any::<(u8, u8, u8, u8, u64, u16)>(),
        ) {
            let e = ErrorLogEntry {
                error_count: a.0, sqid: a.1, cmdid: a.2, status_field: a.3,
                parm_error_location: a.4, lba: a.5, nsid: a.6,
                vs: c.0, trtype: c.1, csi: c.2, opcode: c.3, cs: c.4, trtype_spec: c.5,
            };
            let mut b = [0u8; 64];
            e.encode(&mut b);
            prop_assert_eq!(ErrorLogEntry::decode(&b).unwrap(), e);
        }

        #[test]
        fn smart_round_trip(
            t in any::<u16>(),
            c in proptest::collection::vec(any::<u128>(), 10),
            s in any::<[u16; 8]>(),
        ) {
            let l = SmartLog {
                temperature: t,
                data_units_read: c[0], data_units_written: c[1], host_reads: c[2],
                host_writes: c[3], ctrl_busy_time: c[4], power_cycles: c[5],
                power_on_hours: c[6], unsafe_shutdowns: c[7], media_errors: c[8],
                num_err_log_entries: c[9], temp_sensor: s,
                ..Default::default()
            };
            let mut b = [0u8; 512];
            l.encode(&mut b);
            prop_assert_eq!(SmartLog::decode(&b).unwrap(), l);
        }
    }
}
