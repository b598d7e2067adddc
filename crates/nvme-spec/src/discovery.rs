//! Discovery Log Page (LID 70h; NVMe-oF 1.1 section 5.3, Figures 37 and 38; Linux
//! `struct nvmf_disc_rsp_page_hdr` / `nvmf_disc_rsp_page_entry`).
//!
//! The page is a 1024-byte header followed by NUMREC 1024-byte entries. The target builds the
//! whole page with [`encode_discovery_log`] and serves Get Log Page windows of it with
//! [`crate::log::copy_log_window`]; the host decodes with [`decode_discovery_header`] (to learn
//! NUMREC and GENCTR) and [`decode_discovery_log`].

use crate::identify::{get_ascii, get_nul_padded, need, put_ascii, put_nul_padded};
use crate::{le16, le64, put16, put64};

pub use crate::identify::DecodeError;

/// Size of the Discovery Log Page header.
pub const DISCOVERY_HEADER_LEN: usize = 1024;
/// Size of one Discovery Log Page entry.
pub const DISCOVERY_ENTRY_LEN: usize = 1024;

/// Transport Type (TRTYPE) values.
pub mod trtype {
    /// RDMA transport (NVMe/RDMA: InfiniBand, RoCE, iWARP).
    pub const RDMA: u8 = 1;
    /// Fibre Channel transport.
    pub const FC: u8 = 2;
    /// TCP transport (NVMe/TCP).
    pub const TCP: u8 = 3;
    /// Intra-host transport (loopback), reserved for host use.
    pub const LOOP: u8 = 254;
}

/// Address Family (ADRFAM) values.
pub mod adrfam {
    /// PCI Express (reserved for intra-host use).
    pub const PCI: u8 = 0;
    /// AF_INET: TRADDR is an IPv4 address in dotted decimal.
    pub const IPV4: u8 = 1;
    /// AF_INET6: TRADDR is an IPv6 address.
    pub const IPV6: u8 = 2;
    /// AF_IB: InfiniBand address.
    pub const IB: u8 = 3;
    /// Fibre Channel address.
    pub const FC: u8 = 4;
    /// Intra-host transport (loopback).
    pub const LOOP: u8 = 254;
}

/// Subsystem Type (SUBTYPE) values.
pub mod subtype {
    /// Referral to another discovery service.
    pub const REFERRAL: u8 = 1;
    /// NVM subsystem (I/O).
    pub const NVME: u8 = 2;
    /// The discovery subsystem returning this log page (current discovery subsystem).
    pub const CURRENT_DISCOVERY: u8 = 3;
}

/// Transport Requirements (TREQ) values.
pub mod treq {
    /// Bits 1:0 mask: secure channel requirement.
    pub const SECURE_CHANNEL_MASK: u8 = 0x3;
    /// Secure channel: not specified.
    pub const NOT_SPECIFIED: u8 = 0;
    /// Secure channel: required.
    pub const REQUIRED: u8 = 1;
    /// Secure channel: not required.
    pub const NOT_REQUIRED: u8 = 2;
    /// Bit 2: SQ flow control disable supported.
    pub const DISABLE_SQFLOW: u8 = 1 << 2;
}

/// Entry Flags (EFLAGS) bits.
pub mod eflags {
    /// Duplicate Returned Information: this entry describes the same discovery information as
    /// other entries with this flag set.
    pub const DUPRETINFO: u16 = 1 << 0;
    /// Explicit Persistent Connection Support for Discovery.
    pub const EPCSD: u16 = 1 << 1;
    /// No CDC Connectivity (TP8010).
    pub const NCC: u16 = 1 << 2;
}

/// NVMe/TCP security type (TSAS byte 0 for TRTYPE TCP).
pub mod tcp_sectype {
    /// No security.
    pub const NONE: u8 = 0;
    /// TLS 1.2.
    pub const TLS12: u8 = 1;
    /// TLS 1.3.
    pub const TLS13: u8 = 2;
}

/// RDMA transport specific address subtype (TSAS bytes 0..3 of an RDMA entry; NVMe-oF RDMA
/// binding; Linux `enum nvmf_rdma_qptype / _prtype / _cms`).
pub mod rdma_tsas {
    /// QP service type: reliable connected.
    pub const QPTYPE_CONNECTED: u8 = 1;
    /// QP service type: reliable datagram.
    pub const QPTYPE_DATAGRAM: u8 = 2;
    /// Provider type: not specified (what Linux nvmet and SPDK advertise).
    pub const PRTYPE_NOT_SPECIFIED: u8 = 1;
    /// Provider type: InfiniBand.
    pub const PRTYPE_IB: u8 = 2;
    /// Provider type: RoCE v1 (InfiniBand transport over Ethernet).
    pub const PRTYPE_ROCE: u8 = 3;
    /// Provider type: RoCE v2 (over UDP/IP).
    pub const PRTYPE_ROCEV2: u8 = 4;
    /// Provider type: iWARP.
    pub const PRTYPE_IWARP: u8 = 5;
    /// Connection management service: RDMA_CM.
    pub const CMS_RDMA_CM: u8 = 1;
}

/// Controller ID value meaning "dynamic controller model" (any controller).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;
/// Controller ID value meaning "static controller model, any controller".
pub const CNTLID_STATIC_ANY: u16 = 0xFFFE;

/// Discovery Log Page header (first 1024 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiscoveryLogHeader {
    /// Generation Counter, byte 0: changes whenever the log contents change.
    pub genctr: u64,
    /// Number of Records, byte 8.
    pub numrec: u64,
    /// Record Format, byte 16 (0 is the only defined format).
    pub recfmt: u16,
}

impl DiscoveryLogHeader {
    /// Write the header into the first 1024 bytes of `out` (zeroing the reserved bytes).
    pub fn encode(&self, out: &mut [u8; DISCOVERY_HEADER_LEN]) {
        out.fill(0);
        put64(out, 0, self.genctr);
        put64(out, 8, self.numrec);
        put16(out, 16, self.recfmt);
    }
}

/// One Discovery Log Page entry (1024 bytes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiscoveryLogEntry {
    /// Transport Type, byte 0 ([`trtype`]).
    pub trtype: u8,
    /// Address Family, byte 1 ([`adrfam`]).
    pub adrfam: u8,
    /// Subsystem Type, byte 2 ([`subtype`]).
    pub subtype: u8,
    /// Transport Requirements, byte 3 ([`treq`]).
    pub treq: u8,
    /// Port ID, byte 4.
    pub portid: u16,
    /// Controller ID, byte 6 ([`CNTLID_DYNAMIC`] for the dynamic model).
    pub cntlid: u16,
    /// Admin Max SQ Size, byte 8.
    pub asqsz: u16,
    /// Entry Flags, byte 10 ([`eflags`]).
    pub eflags: u16,
    /// Transport Service Identifier, bytes 32..64 (ASCII, space padded; TCP port, e.g. "4420").
    pub trsvcid: String,
    /// NVM Subsystem Qualified Name, bytes 256..512 (NUL padded).
    pub subnqn: String,
    /// Transport Address, bytes 512..768 (ASCII, space padded; e.g. "192.168.1.10").
    pub traddr: String,
    /// TSAS byte 0 (byte 768): for TCP the Security Type ([`tcp_sectype`]); for RDMA the QP
    /// service type ([`rdma_tsas`]).
    pub tcp_sectype: u8,
    /// RDMA only: provider type, TSAS byte 1 (byte 769; [`rdma_tsas`]).
    pub rdma_prtype: u8,
    /// RDMA only: connection management service, TSAS byte 2 (byte 770; [`rdma_tsas`]).
    pub rdma_cms: u8,
}

impl DiscoveryLogEntry {
    /// Write the entry into `out` (zeroing reserved bytes).
    pub fn encode(&self, out: &mut [u8; DISCOVERY_ENTRY_LEN]) {
        out.fill(0);
        out[0] = self.trtype;
        out[1] = self.adrfam;
        out[2] = self.subtype;
        out[3] = self.treq;
        put16(out, 4, self.portid);
        put16(out, 6, self.cntlid);
        put16(out, 8, self.asqsz);
        put16(out, 10, self.eflags);
        put_ascii(&mut out[32..64], &self.trsvcid);
        put_nul_padded(&mut out[256..512], &self.subnqn);
        put_ascii(&mut out[512..768], &self.traddr);
        out[768] = self.tcp_sectype;
        out[769] = self.rdma_prtype;
        out[770] = self.rdma_cms;
    }

    /// Decode from at least 1024 bytes. String fields are trimmed (NUL or space padding both
    /// accepted).
    pub fn decode(b: &[u8]) -> Result<DiscoveryLogEntry, DecodeError> {
        need(b, DISCOVERY_ENTRY_LEN)?;
        Ok(DiscoveryLogEntry {
            trtype: b[0],
            adrfam: b[1],
            subtype: b[2],
            treq: b[3],
            portid: le16(b, 4),
            cntlid: le16(b, 6),
            asqsz: le16(b, 8),
            eflags: le16(b, 10),
            trsvcid: get_ascii(&b[32..64]),
            subnqn: get_nul_padded(&b[256..512]),
            traddr: get_ascii(&b[512..768]),
            tcp_sectype: b[768],
            rdma_prtype: b[769],
            rdma_cms: b[770],
        })
    }
}

/// Build the full Discovery Log Page: header (GENCTR `genctr`, NUMREC `entries.len()`, RECFMT 0)
/// followed by every entry. Length is `1024 * (1 + entries.len())`.
pub fn encode_discovery_log(genctr: u64, entries: &[DiscoveryLogEntry]) -> Vec<u8> {
    let mut page = vec![0u8; DISCOVERY_HEADER_LEN + DISCOVERY_ENTRY_LEN * entries.len()];
    let hdr = DiscoveryLogHeader {
        genctr,
        numrec: entries.len() as u64,
        recfmt: 0,
    };
    let mut h = [0u8; DISCOVERY_HEADER_LEN];
    hdr.encode(&mut h);
    page[..DISCOVERY_HEADER_LEN].copy_from_slice(&h);
    let mut e = [0u8; DISCOVERY_ENTRY_LEN];
    for (entry, chunk) in entries
        .iter()
        .zip(page[DISCOVERY_HEADER_LEN..].chunks_exact_mut(DISCOVERY_ENTRY_LEN))
    {
        entry.encode(&mut e);
        chunk.copy_from_slice(&e);
    }
    page
}

/// Decode the header fields; needs only the first 18 bytes (GENCTR, NUMREC, RECFMT), so a host
/// may read a short first window.
pub fn decode_discovery_header(b: &[u8]) -> Result<DiscoveryLogHeader, DecodeError> {
    need(b, 18)?;
    Ok(DiscoveryLogHeader {
        genctr: le64(b, 0),
        numrec: le64(b, 8),
        recfmt: le16(b, 16),
    })
}

/// Decode the header (needs the full 1024 bytes) and `min(NUMREC, whole entries present in b)`
/// entries. NUMREC larger than the buffer is not an error: the caller compares `numrec` with
/// the returned count to learn whether it must fetch more.
pub fn decode_discovery_log(
    b: &[u8],
) -> Result<(DiscoveryLogHeader, Vec<DiscoveryLogEntry>), DecodeError> {
    need(b, DISCOVERY_HEADER_LEN)?;
    let hdr = decode_discovery_header(b)?;
    let present = (b.len() - DISCOVERY_HEADER_LEN) / DISCOVERY_ENTRY_LEN;
    let count = usize::try_from(hdr.numrec).map_or(present, |n| n.min(present));
    let entries = b[DISCOVERY_HEADER_LEN..]
        .chunks_exact(DISCOVERY_ENTRY_LEN)
        .take(count)
        .map(DiscoveryLogEntry::decode)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((hdr, entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::copy_log_window;
    use proptest::prelude::*;

    fn entry(i: u16) -> DiscoveryLogEntry {
        DiscoveryLogEntry {
            trtype: trtype::TCP,
            adrfam: adrfam::IPV4,
            subtype: subtype::NVME,
            treq: treq::NOT_REQUIRED | treq::DISABLE_SQFLOW,
            portid: i,
            cntlid: CNTLID_DYNAMIC,
            asqsz: 32,
            eflags: eflags::DUPRETINFO | eflags::EPCSD,
            trsvcid: "4420".into(),
            subnqn: format!("nqn.2024-01.io.ebof:subsys{i}"),
            traddr: "192.168.1.10".into(),
            tcp_sectype: tcp_sectype::NONE,
            ..Default::default()
        }
    }

    #[test]
    fn entry_golden_offsets() {
        let e = entry(7);
        let mut b = [0xffu8; 1024];
        e.encode(&mut b);
        assert_eq!(&b[0..12], &[3, 1, 2, 6, 7, 0, 0xff, 0xff, 32, 0, 3, 0]);
        assert!(b[12..32].iter().all(|&x| x == 0));
        assert_eq!(&b[32..36], b"4420");
        assert!(b[36..64].iter().all(|&x| x == b' '));
        assert!(b[64..256].iter().all(|&x| x == 0));
        assert_eq!(&b[256..284], b"nqn.2024-01.io.ebof:subsys7\0");
        assert!(b[284..512].iter().all(|&x| x == 0));
        assert_eq!(&b[512..524], b"192.168.1.10");
        assert!(b[524..768].iter().all(|&x| x == b' '));
        assert!(b[768..].iter().all(|&x| x == 0));
        assert_eq!(DiscoveryLogEntry::decode(&b).unwrap(), e);
    }

    #[test]
    fn nul_padded_fields_accepted() {
        // Linux nvmet pads TRSVCID/TRADDR with NULs; both forms decode the same.
        let e = entry(1);
        let mut b = [0u8; 1024];
        e.encode(&mut b);
        b[32..64].fill(0);
        b[32..36].copy_from_slice(b"4420");
        b[512..768].fill(0);
        b[512..524].copy_from_slice(b"192.168.1.10");
        assert_eq!(DiscoveryLogEntry::decode(&b).unwrap(), e);
    }

    #[test]
    fn page_round_trip() {
        let entries: Vec<_> = (1..=3).map(entry).collect();
        let page = encode_discovery_log(42, &entries);
        assert_eq!(page.len(), 4 * 1024);
        assert_eq!(&page[0..8], &42u64.to_le_bytes());
        assert_eq!(&page[8..16], &3u64.to_le_bytes());
        assert_eq!(&page[16..18], &[0, 0]);
        assert!(page[18..1024].iter().all(|&x| x == 0));
        assert_eq!(page[1024], trtype::TCP);
        assert_eq!(&page[2048 + 4..2048 + 6], &[2, 0]);

        let (h, d) = decode_discovery_log(&page).unwrap();
        assert_eq!(
            h,
            DiscoveryLogHeader {
                genctr: 42,
                numrec: 3,
                recfmt: 0
            }
        );
        assert_eq!(d, entries);

        // Truncated buffer: only whole entries present are decoded.
        let (h, d) = decode_discovery_log(&page[..2048 + 1000]).unwrap();
        assert_eq!(h.numrec, 3);
        assert_eq!(d, entries[..1].to_vec());

        // Host reads the header window first, then the whole page in windows.
        let mut first = [0u8; 20];
        copy_log_window(&page, 0, &mut first);
        assert_eq!(decode_discovery_header(&first).unwrap(), h);
        let mut w = vec![0u8; 2048];
        assert_eq!(copy_log_window(&page, 2048, &mut w), 2048);
        assert_eq!(DiscoveryLogEntry::decode(&w[1024..]).unwrap(), entries[2]);

        let empty = encode_discovery_log(1, &[]);
        assert_eq!(empty.len(), 1024);
        assert_eq!(decode_discovery_log(&empty).unwrap().1, vec![]);
    }

    #[test]
    fn short_and_huge_numrec() {
        assert_eq!(
            decode_discovery_header(&[0u8; 17]),
            Err(DecodeError::Short { need: 18, got: 17 })
        );
        assert!(decode_discovery_log(&[0u8; 1023]).is_err());
        let mut page = encode_discovery_log(1, &[entry(1)]);
        page[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        let (h, d) = decode_discovery_log(&page).unwrap();
        assert_eq!(h.numrec, u64::MAX);
        assert_eq!(d.len(), 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..5200)) {
            let _ = decode_discovery_header(&b);
            let _ = decode_discovery_log(&b);
            let _ = DiscoveryLogEntry::decode(&b);
        }

        #[test]
        fn entry_round_trip(
            f in any::<(u8, u8, u8, u8, u16, u16, u16, u16, u8)>(),
            trsvcid in "[!-~]{0,32}",
            traddr in "[!-~]{0,256}",
            subnqn in "nqn\\.[a-z0-9.:-]{1,200}",
            genctr in any::<u64>(),
        ) {
            let e = DiscoveryLogEntry {
                trtype: f.0, adrfam: f.1, subtype: f.2, treq: f.3, portid: f.4,
                cntlid: f.5, asqsz: f.6, eflags: f.7, trsvcid, subnqn, traddr,
                tcp_sectype: f.8,
                ..Default::default()
            };
            let page = encode_discovery_log(genctr, std::slice::from_ref(&e));
            let (h, d) = decode_discovery_log(&page).unwrap();
            prop_assert_eq!(h.genctr, genctr);
            prop_assert_eq!(h.numrec, 1);
            prop_assert_eq!(d, vec![e]);
        }
    }
}
