//! Encryption at rest (ADR 0029): `encryption = { key_file = "PATH" }` on a `[[pools]]` entry
//! (every namespace made in the pool is encrypted, each with its own key derived from the
//! pool's) or on a file or block namespace (that namespace, with that key).
//!
//! This module checks the notation (an absolute path without NUL bytes, code
//! `invalid-encryption`); `validate.rs` where it may appear (it imports nothing of the
//! model, so it stays out of the crate's import circle). The key file itself (present, readable,
//! `0600`, owned by root or the running user, 64 bytes) is checked when the namespace is
//! opened, by `ebof_backend::crypt::read_key_file`, with one code per failure
//! (`key-file-missing`, `key-file-unreadable`, `key-file-permissions`, `key-file-malformed`,
//! `wrong-key`, `key-header`). The configuration only ever holds the path, never the key.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{ConfigError, codes, quote};

/// `encryption = { key_file = "PATH" }` as written (the file and the management API).
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EncryptionFields {
    /// The key file: required, an absolute path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
}

/// A checked `encryption` setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encryption {
    /// The key file (absolute). Its content is never part of the configuration.
    pub key_file: PathBuf,
}

impl Encryption {
    /// `encryption = { key_file = "…" }`: the line the emitted file carries, given the
    /// quoting function of the emitter.
    pub(crate) fn line(&self, quote: impl Fn(&str) -> String) -> String {
        format!(
            "encryption = {{ key_file = {} }}",
            quote(&self.key_file.to_string_lossy())
        )
    }
}

impl EncryptionFields {
    /// The typed setting, or `invalid-encryption` / `missing-field` at `path.key_file`.
    pub fn check(&self, path: &str) -> Result<Encryption, ConfigError> {
        let at = format!("{path}.key_file");
        let Some(k) = &self.key_file else {
            return Err(ConfigError::new(
                codes::MISSING_FIELD,
                at,
                "key_file is required: the path of a 64-byte key file (mode 0600)",
            ));
        };
        let p = PathBuf::from(k);
        if !p.is_absolute() || k.contains('\0') {
            return Err(ConfigError::new(
                codes::INVALID_ENCRYPTION,
                at,
                format!(
                    "key_file must be an absolute path without NUL bytes, not {}",
                    quote(k)
                ),
            ));
        }
        Ok(Encryption { key_file: p })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_file_must_be_absolute() {
        let ok = EncryptionFields {
            key_file: Some("/etc/ebof/pool.key".into()),
        };
        assert_eq!(
            ok.check("x").unwrap().key_file,
            PathBuf::from("/etc/ebof/pool.key")
        );
        let rel = EncryptionFields {
            key_file: Some("pool.key".into()),
        };
        let e = rel.check("pools[0].encryption").unwrap_err();
        assert_eq!(
            (e.code, e.path.as_str()),
            (codes::INVALID_ENCRYPTION, "pools[0].encryption.key_file")
        );
        assert_eq!(
            EncryptionFields::default().check("x").unwrap_err().code,
            codes::MISSING_FIELD
        );
    }
}
