//! Arbitrary bytes into the Discovery Information Management decoder of `nvme-spec`
//! ([`DimData::decode`], admin opcode 21h, TP 8010): what a host sends a discovery controller
//! with `nvme dim` or nvme-stas.
//!
//! Input: the DIM data as a discovery controller receives it.
//!
//! Checked, beyond "never panics":
//! - refused ⇒ the offset named is inside the header or the data (never past it), and the
//!   status is Invalid Field or Invalid Discovery Information;
//! - accepted ⇒ TDL fits the input, every entry fits TDL (NUMENT × the smallest entry), the
//!   entity NQN is an NQN, and the data survives a round trip: encoding it decodes again, and
//!   after that first normalisation (strings cut to their fields, values padded to 4 bytes)
//!   encode → decode is the identity.

use crate::Features;
use nvme_spec::dim::{DIM_HEADER_LEN, DimData, EXT_ENTRY_FIXED_LEN, EntryFormat};
use nvme_spec::{Status, is_valid_nqn, le32};

/// Feature families.
const F_ERR: u8 = 1;
const F_OK: u8 = 2;
const F_ENTRIES: u8 = 3;

/// One input: decode it as DIM data and check what the decoder says.
pub fn run(data: &[u8], feat: &mut Features) {
    match DimData::decode(data) {
        Err(e) => {
            feat.add_variant(F_ERR, &e.kind);
            assert!(
                (e.offset as usize) < data.len().max(DIM_HEADER_LEN),
                "offset {} past the data ({} bytes)",
                e.offset,
                data.len()
            );
            assert!(
                e.status() == Status::INVALID_FIELD || e.status() == Status::INVALID_DISCOVERY_INFO
            );
        }
        Ok(d) => {
            feat.add(
                F_OK,
                u64::from(d.etype.code()) << 8 | u64::from(d.format.code()),
            );
            feat.add(F_ENTRIES, d.entries.len().min(16) as u64);
            let tdl = le32(data, 0) as usize;
            assert!(tdl <= data.len() && tdl >= DIM_HEADER_LEN);
            let min = match d.format {
                EntryFormat::Basic => 1024,
                EntryFormat::Extended => EXT_ENTRY_FIXED_LEN,
            };
            assert!(DIM_HEADER_LEN + d.entries.len() * min <= tdl);
            assert!(is_valid_nqn(&d.eid));
            let once = DimData::decode(&d.encode())
                .unwrap_or_else(|e| panic!("re-encoded data refused: {e}"));
            let twice = DimData::decode(&once.encode())
                .unwrap_or_else(|e| panic!("normalised data refused: {e}"));
            assert_eq!(once, twice, "encode/decode not stable");
            assert_eq!(once.entries.len(), d.entries.len());
        }
    }
}
