//! Arbitrary text into `ebof-config`'s TOML parser and validation.
//!
//! Input: any bytes, read as UTF-8 (invalid sequences replaced).
//!
//! Checked, beyond "never panics": an accepted configuration passes `validate()` and
//! survives emit → parse unchanged; a rejected one carries a known stable code, a message, and
//! a field path unless it concerns the whole document (TOML syntax, I/O).

use crate::Features;
use ebof_config::{Config, ConfigError, codes};

const F_OK: u8 = 20;
const F_CODE: u8 = 21;
const F_PATH: u8 = 22;

/// Every stable code a refusal may carry (`ebof_config::codes::ALL`).
const CODES: &[&str] = codes::ALL;

/// One input: the bytes as configuration text; what is accepted validates and survives emit
/// and parse, what is refused carries a known code (see the module docs).
pub fn run(data: &[u8], feat: &mut Features) {
    check_text(&String::from_utf8_lossy(data), feat);
}

/// Parse `text`; check the result as described in the module docs.
pub fn check_text(text: &str, feat: &mut Features) -> Option<Config> {
    match Config::from_toml_str(text) {
        Ok(c) => {
            check_accepted(&c);
            feat.add(
                F_OK,
                (c.subsystems.len() as u64) << 8 | c.listeners.len() as u64,
            );
            Some(c)
        }
        Err(e) => {
            check_error(&e, feat);
            None
        }
    }
}

/// An accepted configuration is valid and round-trips through its TOML form.
pub fn check_accepted(c: &Config) {
    if let Err(e) = c.validate() {
        panic!("accepted a configuration that validate() rejects: {e}");
    }
    let text = c.to_toml_string();
    match Config::from_toml_str(&text) {
        Ok(back) => assert_eq!(&back, c, "parse → emit → parse changed it:\n{text}"),
        Err(e) => panic!("the emitted configuration does not parse: {e}\n{text}"),
    }
}

/// A rejection is clean: known code, message, and a field path where one exists.
pub fn check_error(e: &ConfigError, feat: &mut Features) {
    assert!(CODES.contains(&e.code), "unknown error code {:?}", e.code);
    assert!(!e.message.is_empty(), "error without a message: {e:?}");
    let whole_document = e.code == codes::PARSE || e.code == codes::IO;
    // A key named "" at the top level has the empty path (and the message names it, with its
    // line and column).
    let empty_key = e.code == codes::UNKNOWN_FIELD && e.message.contains("field ``");
    assert!(
        whole_document || empty_key || !e.path.is_empty(),
        "{} error without a field path: {e}",
        e.code
    );
    let shown = e.to_string();
    assert!(shown.contains(e.code), "{shown}");
    feat.add_str(F_CODE, e.code);
    // Where, roughly: the first path component and the depth (not the arbitrary key names
    // themselves, which would make every input "new").
    const TOP: [&str; 5] = ["target", "listeners", "discovery", "subsystems", ""];
    let first = e
        .path
        .split(['.', '['])
        .next()
        .filter(|f| TOP.contains(f))
        .unwrap_or("?");
    let depth = e.path.matches(['.', '[']).count() as u64;
    feat.add(F_PATH, crate::fnv1a(first.as_bytes()) ^ depth);
}
