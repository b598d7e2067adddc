//! Parsers for the scalar notations shared by the file and the command line:
//! sizes (`1G`), core lists (`0-1,4`), listener addresses (`[::1]:4420`) and
//! NVMe names (NQN, serial, model).
//!
//! They return errors with an empty path; the caller anchors them with
//! [`ConfigError::at`]. None of them panics, whatever the input.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr};

use crate::error::{ConfigError, codes, quote};
use crate::model::{IoEngine, Listener};

/// Highest CPU core id accepted in a core list (Linux's largest `NR_CPUS` is
/// 8192). Bounds the work a range like `0-99999999` can cause.
pub const MAX_CORE_ID: usize = 8191;

/// Longest NQN in bytes (NVMe Base 2.0, 4.5 "NVMe Qualified Names": 223
/// bytes, excluding the NUL terminator of the 256-byte field).
pub const NQN_MAX_LEN: usize = 223;

/// Length of the Identify Controller SN field (bytes 23:04), in bytes.
pub const SERIAL_MAX_LEN: usize = 20;

/// Length of the Identify Controller MN field (bytes 63:24), in bytes.
pub const MODEL_MAX_LEN: usize = 40;

const SIZE_UNITS: [(&str, u32); 5] = [("P", 50), ("T", 40), ("G", 30), ("M", 20), ("K", 10)];

/// Parses an I/O engine name: `io_uring` or `threads` (exactly; names are not guessed).
pub fn parse_io_engine(s: &str) -> Result<IoEngine, ConfigError> {
    match s {
        "io_uring" => Ok(IoEngine::IoUring),
        "threads" => Ok(IoEngine::Threads),
        other => Err(ConfigError::new(
            codes::INVALID_TUNING,
            "",
            format!(
                "unknown io_engine {} (expected \"io_uring\" or \"threads\")",
                quote(other)
            ),
        )),
    }
}

/// Parses a size: integer bytes (`4096`, `4096B`) or a binary multiple with a
/// suffix `K`/`M`/`G`/`T`/`P` or `KiB`/`MiB`/`GiB`/`TiB`/`PiB` (1024-based,
/// case-insensitive, optional space before the suffix).
///
/// `KB`, `MB`, … are rejected as ambiguous (decimal or binary?). Fractions,
/// signs and overflow of `u64` are errors. Zero parses (the caller decides
/// whether zero is allowed).
pub fn parse_size(s: &str) -> Result<u64, ConfigError> {
    let err = |msg: String| ConfigError::new(codes::INVALID_SIZE, "", msg);
    let t = s.trim();
    if t.is_empty() {
        return Err(err("size is empty".into()));
    }
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, rest) = t.split_at(digits_end);
    if digits.is_empty() {
        return Err(err(format!(
            "size {} must start with a number (e.g. 4096, 512M, 1G)",
            quote(s)
        )));
    }
    let number: u64 = digits
        .parse()
        .map_err(|_| err(format!("size {} does not fit in 64 bits", quote(s))))?;
    let suffix = rest.trim_start().to_ascii_lowercase();
    let shift = match suffix.as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        "p" | "pib" => 50,
        "kb" | "mb" | "gb" | "tb" | "pb" => {
            return Err(err(format!(
                "size {}: unit {} is ambiguous; use {} (1024-based)",
                quote(s),
                quote(rest.trim_start()),
                &rest.trim_start()[..1].to_ascii_uppercase()
            )));
        }
        _ => {
            return Err(err(format!(
                "size {}: unknown unit {} (expected K, M, G, T, P or KiB, MiB, GiB, TiB, PiB)",
                quote(s),
                quote(rest.trim_start())
            )));
        }
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| err(format!("size {} does not fit in 64 bits", quote(s))))
}

/// Formats a byte count with the largest binary suffix that divides it
/// exactly (`1073741824` → `"1G"`, `1536` → `"1536"`). Always accepted by
/// [`parse_size`] with the same value.
pub fn format_size(bytes: u64) -> String {
    if bytes != 0 {
        for (suffix, shift) in SIZE_UNITS {
            if bytes.trailing_zeros() >= shift {
                return format!("{}{suffix}", bytes >> shift);
            }
        }
    }
    bytes.to_string()
}

/// Parses a CPU core list such as `"0,1"`, `"0-3"` or `"0-1,4"` into sorted,
/// distinct core ids. Ranges are inclusive; spaces around items are allowed.
/// Ids above [`MAX_CORE_ID`], reversed ranges, empty items and cores listed
/// twice are errors. Whether the cores exist is not checked here.
pub fn parse_core_list(s: &str) -> Result<Vec<usize>, ConfigError> {
    let err = |msg: String| ConfigError::new(codes::INVALID_CORES, "", msg);
    if s.trim().is_empty() {
        return Err(err("core list is empty".into()));
    }
    let mut cores = BTreeSet::new();
    for item in s.split(',') {
        let item = item.trim();
        let (lo, hi) = match item.split_once('-') {
            Some((lo, hi)) => (parse_core_id(lo.trim())?, parse_core_id(hi.trim())?),
            None => {
                let id = parse_core_id(item)?;
                (id, id)
            }
        };
        if lo > hi {
            return Err(err(format!(
                "core range {} is reversed (write {hi}-{lo})",
                quote(item)
            )));
        }
        for core in lo..=hi {
            if !cores.insert(core) {
                return Err(err(format!("core {core} is listed twice in {}", quote(s))));
            }
        }
    }
    Ok(cores.into_iter().collect())
}

fn parse_core_id(s: &str) -> Result<usize, ConfigError> {
    let err = |msg: String| ConfigError::new(codes::INVALID_CORES, "", msg);
    if s.is_empty() {
        return Err(err(
            "empty item in core list (expected e.g. \"0,1\", \"0-3\" or \"0-1,4\")".into(),
        ));
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(format!(
            "{} is not a core id (expected e.g. \"0,1\", \"0-3\" or \"0-1,4\")",
            quote(s)
        )));
    }
    match s.parse::<usize>() {
        Ok(id) if id <= MAX_CORE_ID => Ok(id),
        _ => Err(err(format!(
            "core id {} is above the maximum {MAX_CORE_ID}",
            quote(s)
        ))),
    }
}

/// Parses a listener address: `1.2.3.4:4420`, `[::1]:4420`, or a bare IP
/// literal (`1.2.3.4`, `::1`, `[::1]`) which gets `default_port`.
///
/// An IPv6 address with a port needs brackets: `::1:4420` is the IPv6
/// address `::1:4420`. Host names are rejected (no name resolution here).
pub fn parse_listener(s: &str, default_port: u16) -> Result<Listener, ConfigError> {
    let err = |msg: String| ConfigError::new(codes::INVALID_ADDRESS, "", msg);
    let t = s.trim();
    if t.is_empty() {
        return Err(err("address is empty".into()));
    }
    if let Some(inner) = t.strip_prefix('[') {
        let Some((addr, after)) = inner.split_once(']') else {
            return Err(err(format!("{}: missing ']'", quote(s))));
        };
        let address: Ipv6Addr = addr
            .parse()
            .map_err(|_| err(format!("{} is not an IPv6 address", quote(addr))))?;
        let port = match after {
            "" => default_port,
            _ => match after.strip_prefix(':') {
                Some(port) => parse_port(port)?,
                None => {
                    return Err(err(format!("{}: expected ':PORT' after ']'", quote(s))));
                }
            },
        };
        return Ok(Listener {
            address: IpAddr::V6(address),
            port,
        });
    }
    if let Ok(address) = t.parse::<IpAddr>() {
        return Ok(Listener {
            address,
            port: default_port,
        });
    }
    match t.rsplit_once(':') {
        Some((addr, _)) if addr.contains(':') => Err(err(format!(
            "{}: an IPv6 address with a port is written [ADDR]:PORT, e.g. [::1]:4420",
            quote(s)
        ))),
        Some((addr, port)) => {
            let address = parse_ip(addr)?;
            Ok(Listener {
                address,
                port: parse_port(port)?,
            })
        }
        None => Err(err(format!(
            "{} is not an IP address (expected e.g. 127.0.0.1, 127.0.0.1:4420 or [::1]:4420; host names are not resolved)",
            quote(s)
        ))),
    }
}

/// Parses an IP literal (`127.0.0.1`, `::1`, `[::1]`).
pub(crate) fn parse_ip(s: &str) -> Result<IpAddr, ConfigError> {
    let t = s.trim();
    let bare = t
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(t);
    bare.parse().map_err(|_| {
        ConfigError::new(
            codes::INVALID_ADDRESS,
            "",
            format!(
                "{} is not an IP address literal (e.g. 127.0.0.1 or ::1; host names are not resolved)",
                quote(s)
            ),
        )
    })
}

fn parse_port(s: &str) -> Result<u16, ConfigError> {
    if !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_digit())
        && let Ok(port) = s.parse::<u16>()
    {
        return Ok(port);
    }
    Err(ConfigError::new(
        codes::INVALID_PORT,
        "",
        format!("{} is not a port number (0..=65535)", quote(s)),
    ))
}

/// Checks an NVMe Qualified Name: starts with `nqn.`, something after it, at
/// most [`NQN_MAX_LEN`] bytes, printable ASCII without spaces.
///
/// NVMe allows UTF-8 in NQNs; we accept only printable ASCII so that every
/// NQN can be typed on a command line and shown in a log unambiguously.
pub fn check_nqn(s: &str) -> Result<(), ConfigError> {
    let err = |msg: String| ConfigError::new(codes::INVALID_NQN, "", msg);
    if !s.starts_with("nqn.") || s.len() == 4 {
        return Err(err(format!(
            "{} is not an NQN (expected e.g. \"nqn.2026-11.io.ebof:default\")",
            quote(s)
        )));
    }
    if s.len() > NQN_MAX_LEN {
        return Err(err(format!(
            "NQN {} is {} bytes long; the limit is {NQN_MAX_LEN}",
            quote(s),
            s.len()
        )));
    }
    if let Some(c) = s.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(err(format!(
            "NQN {} contains {c:?}; only printable ASCII without spaces is allowed",
            quote(s)
        )));
    }
    Ok(())
}

/// Checks a text field of Identify Controller (SN, MN): non-empty, at most
/// `max` bytes of printable ASCII, no leading or trailing space (the field is
/// space-padded on the wire, so trailing spaces would be lost).
pub fn check_id_text(
    what: &str,
    s: &str,
    max: usize,
    code: &'static str,
) -> Result<(), ConfigError> {
    let err = |msg: String| ConfigError::new(code, "", msg);
    if s.is_empty() {
        return Err(err(format!("{what} is empty")));
    }
    if s.len() > max {
        return Err(err(format!(
            "{what} {} is {} bytes long; the limit is {max}",
            quote(s),
            s.len()
        )));
    }
    if let Some(c) = s.chars().find(|c| !(c.is_ascii_graphic() || *c == ' ')) {
        return Err(err(format!(
            "{what} {} contains {c:?}; only printable ASCII is allowed",
            quote(s)
        )));
    }
    if s.starts_with(' ') || s.ends_with(' ') {
        return Err(err(format!(
            "{what} {} has leading or trailing spaces",
            quote(s)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let ok = [
            ("0", 0),
            ("4096", 4096),
            ("4096B", 4096),
            ("1K", 1024),
            ("1k", 1024),
            ("1KiB", 1024),
            ("1 kib", 1024),
            (" 2M ", 2 << 20),
            ("1G", 1 << 30),
            ("1GiB", 1 << 30),
            ("3T", 3 << 40),
            ("1TiB", 1 << 40),
            ("2P", 2 << 50),
            ("0001G", 1 << 30),
            ("16383P", 16383 << 50),
            ("18446744073709551615", u64::MAX),
        ];
        for (s, v) in ok {
            assert_eq!(parse_size(s).unwrap(), v, "{s}");
        }
        let bad = [
            "",
            "  ",
            "G",
            "-1",
            "+1G",
            "1.5G",
            "1GB",
            "1kb",
            "1X",
            "1 G B",
            "99999999999T",
            "16384P",
            "18446744073709551616",
            "99999999999999999999999999",
            "1e9",
            "0x10",
            "1G1",
            "١",
        ];
        for s in bad {
            let e = parse_size(s).unwrap_err();
            assert_eq!(e.code, codes::INVALID_SIZE, "{s}");
        }
        assert!(
            parse_size("99999999999T")
                .unwrap_err()
                .message
                .contains("64 bits")
        );
        assert!(parse_size("1GB").unwrap_err().message.contains("ambiguous"));
    }

    #[test]
    fn format_size_round_trips() {
        for v in [
            0,
            1,
            512,
            1024,
            1536,
            1 << 30,
            3 << 40,
            5 << 50,
            u64::MAX,
            u64::MAX - 511,
        ] {
            assert_eq!(parse_size(&format_size(v)).unwrap(), v, "{v}");
        }
        assert_eq!(format_size(1 << 30), "1G");
        assert_eq!(format_size(1536), "1536");
        assert_eq!(format_size(3 << 20), "3M");
    }

    #[test]
    fn core_lists() {
        assert_eq!(parse_core_list("0,1").unwrap(), vec![0, 1]);
        assert_eq!(parse_core_list("0-3").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(parse_core_list("0-1,4").unwrap(), vec![0, 1, 4]);
        assert_eq!(parse_core_list(" 4 , 0 - 1 ").unwrap(), vec![0, 1, 4]);
        assert_eq!(parse_core_list("7").unwrap(), vec![7]);
        assert_eq!(parse_core_list("8191").unwrap(), vec![8191]);
        for bad in [
            "",
            " ",
            ",",
            "0,",
            "0,,1",
            "a",
            "-1",
            "1-",
            "3-0",
            "0-3,2",
            "1,1",
            "8192",
            "0-99999999999999999999",
            "0-1-2",
            "+1",
            "0x1",
        ] {
            assert_eq!(
                parse_core_list(bad).unwrap_err().code,
                codes::INVALID_CORES,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn listeners() {
        let l = |s, p| parse_listener(s, p).unwrap().socket_addr().to_string();
        assert_eq!(l("1.2.3.4:4420", 1), "1.2.3.4:4420");
        assert_eq!(l("1.2.3.4", 4420), "1.2.3.4:4420");
        assert_eq!(l("[::1]:4421", 1), "[::1]:4421");
        assert_eq!(l("[::1]", 8009), "[::1]:8009");
        assert_eq!(l("::1", 8009), "[::1]:8009");
        assert_eq!(l("0.0.0.0:0", 1), "0.0.0.0:0");
        assert_eq!(l(" 10.0.0.1:1 ", 1), "10.0.0.1:1");
        for (bad, code) in [
            ("", codes::INVALID_ADDRESS),
            ("localhost", codes::INVALID_ADDRESS),
            ("localhost:4420", codes::INVALID_ADDRESS),
            ("1.2.3.4:", codes::INVALID_PORT),
            ("1.2.3.4:65536", codes::INVALID_PORT),
            ("1.2.3.4:-1", codes::INVALID_PORT),
            ("1.2.3.4:+1", codes::INVALID_PORT),
            ("1.2.3.4:x", codes::INVALID_PORT),
            ("[::1", codes::INVALID_ADDRESS),
            ("[::1]x", codes::INVALID_ADDRESS),
            ("[::1]:", codes::INVALID_PORT),
            ("[1.2.3.4]:1", codes::INVALID_ADDRESS),
            ("fe80::1%eth0:4420", codes::INVALID_ADDRESS),
            ("1.2.3:4420", codes::INVALID_ADDRESS),
            ("[]", codes::INVALID_ADDRESS),
        ] {
            assert_eq!(parse_listener(bad, 4420).unwrap_err().code, code, "{bad:?}");
        }
    }

    #[test]
    fn nqns() {
        check_nqn("nqn.2014-08.org.nvmexpress:uuid:0f8f4c2e-0000-0000-0000-000000000000").unwrap();
        check_nqn(&format!("nqn.{}", "a".repeat(NQN_MAX_LEN - 4))).unwrap();
        for bad in [
            "",
            "nqn.",
            "nqn",
            "NQN.x",
            "foo",
            "nqn.a b",
            "nqn.\u{e9}",
            "nqn.\tx",
        ] {
            assert_eq!(
                check_nqn(bad).unwrap_err().code,
                codes::INVALID_NQN,
                "{bad:?}"
            );
        }
        let long = format!("nqn.{}", "a".repeat(NQN_MAX_LEN - 3));
        assert_eq!(check_nqn(&long).unwrap_err().code, codes::INVALID_NQN);
    }

    #[test]
    fn id_text() {
        check_id_text("serial", "EBOF 01", 20, codes::INVALID_SERIAL).unwrap();
        for bad in ["", " x", "x ", "\u{e9}", "a\nb", &"x".repeat(21)] {
            assert!(check_id_text("serial", bad, 20, codes::INVALID_SERIAL).is_err());
        }
    }
}
