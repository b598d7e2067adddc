//! Bytes read from disk into the encryption-at-rest decoders (ADR 0029): the key header
//! beside an encrypted namespace's file (`KeyHeader::decode`) and a key file's content
//! (`parse_key`: 64 raw bytes or 128 hex digits).
//!
//! Input: the first byte picks the decoder (even: header, odd: key file); the rest is the file.
//!
//! Checked, beyond "never panics": a header accepted is exactly 80 bytes and encodes back to
//! the same bytes; a key accepted came from 64 bytes, or from 128 hex digits (and a newline)
//! whose value it is.

use crate::Features;
use ebof_backend::crypt::{HEADER_LEN, KeyHeader, parse_key};

const F_HEADER_OK: u8 = 1;
const F_HEADER_ERR: u8 = 2;
const F_KEY_OK: u8 = 3;
const F_KEY_ERR: u8 = 4;

/// One input: decode it and check what the decoder says.
pub fn run(data: &[u8], feat: &mut Features) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel & 1 == 0 {
        match KeyHeader::decode(rest) {
            Some(h) => {
                feat.add(F_HEADER_OK, u64::from(h.derived));
                assert_eq!(rest.len(), HEADER_LEN);
                assert_eq!(
                    &h.encode()[..],
                    rest,
                    "a header must encode back to its bytes"
                );
            }
            None => feat.add(F_HEADER_ERR, rest.len().min(HEADER_LEN + 1) as u64),
        }
    } else {
        match parse_key(rest) {
            Some(k) => {
                feat.add(F_KEY_OK, rest.len() as u64);
                if rest.len() != 64 {
                    let hex = rest.strip_suffix(b"\n").unwrap_or(rest);
                    assert_eq!(hex.len(), 128);
                    let text: String = k.iter().map(|b| format!("{b:02x}")).collect();
                    assert!(text.eq_ignore_ascii_case(std::str::from_utf8(hex).unwrap_or("")));
                }
            }
            None => {
                feat.add(F_KEY_ERR, rest.len().min(200) as u64);
                assert_ne!(rest.len(), 64, "64 raw bytes are always a key");
            }
        }
    }
}

/// A derived and an own-key header, a raw and a hex key file, and near misses.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut header = KeyHeader {
        derived: true,
        salt: [7; 32],
        check: ebof_backend::crypt::CheckValue([9; 32]),
    };
    let mut v = Vec::new();
    let with = |sel: u8, b: &[u8]| [&[sel][..], b].concat();
    v.push(("header-derived".into(), with(0, &header.encode())));
    header.derived = false;
    header.salt = [0; 32];
    v.push(("header-own".into(), with(0, &header.encode())));
    v.push(("header-short".into(), with(0, &header.encode()[..40])));
    let raw: Vec<u8> = (0..64u8).collect();
    v.push(("key-raw".into(), with(1, &raw)));
    let hex: String = raw.iter().map(|b| format!("{b:02X}")).collect::<String>() + "\n";
    v.push(("key-hex".into(), with(1, hex.as_bytes())));
    v.push(("key-short".into(), with(1, &raw[..32])));
    v
}
