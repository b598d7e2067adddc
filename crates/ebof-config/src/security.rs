//! Who a host must prove to be, and how the wire is protected: per-host secrets
//! (`[[hosts]]`) and the TLS mode of each listener (`[[listeners]] tls = …`).
//!
//! ```toml
//! [[listeners]]
//! address = "10.0.0.1"
//! port = 4420
//! tls = "required"                  # off (default) | optional | required
//!
//! [[hosts]]
//! nqn = "nqn.2014-08.org.nvmexpress:uuid:…"
//! dhchap_key = "DHHC-1:01:…:"        # DH-HMAC-CHAP: the host must authenticate
//! dhchap_ctrl_key = "DHHC-1:01:…:"   # and the controller too (bidirectional)
//! tls_key = "NVMeTLSkey-1:01:…:"     # the configured PSK for NVMe/TCP TLS
//! # dhchap_key_file / dhchap_ctrl_key_file / tls_key_file: the same, read from a file
//! # subsystem = "nqn.…"              # these keys for this subsystem only (one entry per
//!                                    # host and subsystem; an entry without applies to the
//!                                    # host's other subsystems)
//! ```
//!
//! Secrets are kept as written (or as a file path) and checked for their framing
//! here; the cryptographic checks (base64, CRC, key length) happen where the key
//! is decoded, when `ebof serve` builds the target. They never appear in
//! `Debug` output, error messages or logs; [`Config::to_toml_string`] writes them
//! back as they were given (inline, or the file path).

use std::fmt::{self, Write};
use std::path::PathBuf;

use serde::Deserialize;

use crate::error::{ConfigError, codes, quote};
use crate::model::{Config, Listener};
use crate::parse::check_nqn;

/// How a listener treats TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// Plain NVMe/TCP only (a ClientHello is a protocol error).
    #[default]
    Off,
    /// TLS when the host starts with a ClientHello, plain NVMe/TCP otherwise.
    Optional,
    /// TLS only: a plaintext ICReq is refused.
    Required,
}

impl TlsMode {
    /// Every mode: off, optional, required.
    pub const ALL: [TlsMode; 3] = [TlsMode::Off, TlsMode::Optional, TlsMode::Required];

    /// The mode's name in configuration files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TlsMode::Off => "off",
            TlsMode::Optional => "optional",
            TlsMode::Required => "required",
        }
    }

    /// The mode named `s` (exact, lower case), or `None`.
    pub fn from_name(s: &str) -> Option<TlsMode> {
        TlsMode::ALL.into_iter().find(|m| m.name() == s)
    }
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parse a TLS mode (error code `invalid-tls-mode`, path left empty).
pub fn parse_tls_mode(s: &str) -> Result<TlsMode, ConfigError> {
    TlsMode::from_name(s.trim()).ok_or_else(|| {
        ConfigError::new(
            codes::INVALID_TLS_MODE,
            "",
            format!(
                "unknown TLS mode {} (expected off, optional or required)",
                quote(s)
            ),
        )
    })
}

/// A secret as configured: the value itself, or a file that holds it.
#[derive(Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// The secret written in the configuration (e.g. `dhchap_key = "..."`).
    Inline(String),
    /// A file holding the secret (e.g. `dhchap_key_file`), read by [`SecretSource::resolve`].
    File(PathBuf),
}

impl fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::Inline(_) => f.write_str("Inline(<redacted>)"),
            SecretSource::File(p) => f.debug_tuple("File").field(p).finish(),
        }
    }
}

impl SecretSource {
    /// The secret's text (a file's content without surrounding white space). The error names
    /// the file, never its content.
    pub fn resolve(&self) -> Result<String, String> {
        match self {
            SecretSource::Inline(s) => Ok(s.trim().to_string()),
            SecretSource::File(p) => std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .map_err(|e| format!("cannot read {}: {e}", p.display())),
        }
    }
}

/// What one host must present (`[[hosts]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSecurity {
    /// Host NQN the entry is for.
    pub nqn: String,
    /// The subsystem these keys are for; `None`: every subsystem without an entry of its own.
    pub subsystem: Option<String>,
    /// The host's DH-HMAC-CHAP secret (`DHHC-1:…`): when set, the host must authenticate.
    pub dhchap_key: Option<SecretSource>,
    /// The controller's DH-HMAC-CHAP secret: when set, the controller authenticates to the
    /// host too (bidirectional). Needs `dhchap_key`.
    pub dhchap_ctrl_key: Option<SecretSource>,
    /// The configured TLS PSK (`NVMeTLSkey-1:…`) of this host.
    pub tls_key: Option<SecretSource>,
    /// How the host derives its TLS PSK from `tls_key` when it offers a version-0 identity
    /// (`NVMe0R0H …`, which does not say): `true` for RFC 8446's HkdfLabel encoding (SPDK's
    /// initiator, libnvme >= 1.16), `false` (default) for the encoding of nvme-cli <= 2.15
    /// (Linux hosts in the field, Debian trixie). Version-1 identities carry a digest and work
    /// either way.
    pub tls_psk_rfc8446: bool,
}

/// `[[hosts]]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHost {
    nqn: Option<String>,
    subsystem: Option<String>,
    dhchap_key: Option<String>,
    dhchap_key_file: Option<String>,
    dhchap_ctrl_key: Option<String>,
    dhchap_ctrl_key_file: Option<String>,
    tls_key: Option<String>,
    tls_key_file: Option<String>,
    /// "compat" (default) | "rfc8446".
    tls_psk_derivation: Option<String>,
}

/// The framing every secret has: `DHHC-1:NN:…:` or `NVMeTLSkey-1:NN:…:`.
fn check_framing(s: &str, prefix: &str) -> bool {
    let s = s.trim();
    s.starts_with(prefix) && s.ends_with(':') && s.len() > prefix.len() + 4
}

fn secret(
    inline: Option<String>,
    file: Option<String>,
    at: &dyn Fn(&str) -> String,
    field: &str,
    prefix: &str,
) -> Result<Option<SecretSource>, ConfigError> {
    match (inline, file) {
        (Some(_), Some(_)) => Err(ConfigError::new(
            codes::CONFLICTING_SECRETS,
            at(field),
            format!("set {field} or {field}_file, not both"),
        )),
        (Some(s), None) => {
            if !check_framing(&s, prefix) {
                // The value is a secret: say what is expected, never echo it.
                return Err(ConfigError::new(
                    codes::INVALID_SECRET,
                    at(field),
                    format!("not a {prefix}NN:<base64>: secret"),
                ));
            }
            Ok(Some(SecretSource::Inline(s)))
        }
        (None, Some(p)) if p.trim().is_empty() => Err(ConfigError::new(
            codes::INVALID_PATH,
            at(&format!("{field}_file")),
            "the path is empty",
        )),
        (None, Some(p)) => Ok(Some(SecretSource::File(PathBuf::from(p)))),
        (None, None) => Ok(None),
    }
}

pub(crate) fn convert(raw: Vec<RawHost>) -> Result<Vec<HostSecurity>, ConfigError> {
    raw.into_iter()
        .enumerate()
        .map(|(i, h)| {
            let at = |f: &str| format!("hosts[{i}].{f}");
            let nqn = h.nqn.ok_or_else(|| {
                ConfigError::new(codes::MISSING_FIELD, at("nqn"), "nqn is required")
            })?;
            check_nqn(&nqn).map_err(|e| e.at(at("nqn")))?;
            if let Some(s) = &h.subsystem {
                check_nqn(s).map_err(|e| e.at(at("subsystem")))?;
            }
            let dhchap_key = secret(
                h.dhchap_key,
                h.dhchap_key_file,
                &at,
                "dhchap_key",
                "DHHC-1:",
            )?;
            let dhchap_ctrl_key = secret(
                h.dhchap_ctrl_key,
                h.dhchap_ctrl_key_file,
                &at,
                "dhchap_ctrl_key",
                "DHHC-1:",
            )?;
            let tls_key = secret(h.tls_key, h.tls_key_file, &at, "tls_key", "NVMeTLSkey-1:")?;
            let tls_psk_rfc8446 = match h.tls_psk_derivation.as_deref().map(str::trim) {
                None | Some("compat") => false,
                Some("rfc8446") => true,
                Some(other) => {
                    return Err(ConfigError::new(
                        codes::INVALID_TLS_MODE,
                        at("tls_psk_derivation"),
                        format!(
                            "unknown PSK derivation {} (expected compat or rfc8446)",
                            quote(other)
                        ),
                    ));
                }
            };
            Ok(HostSecurity {
                nqn,
                subsystem: h.subsystem,
                dhchap_key,
                dhchap_ctrl_key,
                tls_key,
                tls_psk_rfc8446,
            })
        })
        .collect()
}

/// Each host once; a controller key only with a host key; TLS modes only on listeners.
pub(crate) fn validate(cfg: &Config) -> Result<(), ConfigError> {
    for (i, h) in cfg.hosts.iter().enumerate() {
        if cfg.hosts[..i]
            .iter()
            .any(|o| o.nqn == h.nqn && o.subsystem == h.subsystem)
        {
            return Err(ConfigError::new(
                codes::DUPLICATE_HOST,
                format!("hosts[{i}].nqn"),
                match &h.subsystem {
                    None => format!("host {} is listed twice in [[hosts]]", quote(&h.nqn)),
                    Some(s) => format!(
                        "host {} is listed twice in [[hosts]] for subsystem {}",
                        quote(&h.nqn),
                        quote(s)
                    ),
                },
            ));
        }
        if h.dhchap_ctrl_key.is_some() && h.dhchap_key.is_none() {
            return Err(ConfigError::new(
                codes::MISSING_FIELD,
                format!("hosts[{i}].dhchap_key"),
                "dhchap_ctrl_key (bidirectional authentication) needs the host's dhchap_key",
            ));
        }
    }
    for (i, (l, _)) in cfg.listener_tls.iter().enumerate() {
        if !cfg.listeners.contains(l) {
            return Err(ConfigError::new(
                codes::INVALID_TLS_MODE,
                format!("listeners[{i}].tls"),
                format!("{l} is not a listener"),
            ));
        }
    }
    Ok(())
}

impl Config {
    /// The TLS mode of listener `l` (off unless configured).
    pub fn tls_mode(&self, l: &Listener) -> TlsMode {
        self.listener_tls
            .iter()
            .find(|(x, _)| x == l)
            .map(|(_, m)| *m)
            .unwrap_or_default()
    }

    /// The `[[hosts]]` entry of host `nqn` for subsystem `subnqn`: its own entry for that
    /// subsystem, else its entry without a subsystem.
    pub fn host_security(&self, nqn: &str, subnqn: &str) -> Option<&HostSecurity> {
        self.hosts
            .iter()
            .find(|h| h.nqn == nqn && h.subsystem.as_deref() == Some(subnqn))
            .or_else(|| {
                self.hosts
                    .iter()
                    .find(|h| h.nqn == nqn && h.subsystem.is_none())
            })
    }
}

fn emit_secret(out: &mut String, field: &str, s: &Option<SecretSource>) {
    match s {
        None => {}
        Some(SecretSource::Inline(v)) => {
            let _ = writeln!(out, "{field} = {}", crate::emit::string(v));
        }
        Some(SecretSource::File(p)) => {
            let _ = writeln!(
                out,
                "{field}_file = {}",
                crate::emit::string(&p.to_string_lossy())
            );
        }
    }
}

/// `[[hosts]]` as TOML.
pub(crate) fn emit(out: &mut String, cfg: &Config) {
    for h in &cfg.hosts {
        out.push_str("\n[[hosts]]\n");
        let _ = writeln!(out, "nqn = {}", crate::emit::string(&h.nqn));
        if let Some(s) = &h.subsystem {
            let _ = writeln!(out, "subsystem = {}", crate::emit::string(s));
        }
        emit_secret(out, "dhchap_key", &h.dhchap_key);
        emit_secret(out, "dhchap_ctrl_key", &h.dhchap_ctrl_key);
        emit_secret(out, "tls_key", &h.tls_key);
        if h.tls_psk_rfc8446 {
            out.push_str("tls_psk_derivation = \"rfc8446\"\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0000000a-0000-0000-0000-00000000000a";
    const KEY: &str = "DHHC-1:00:ia6zGodOr5SEG0Ldz9AqJ1h9pNOEVPsm2hYEbSGnF3m2y8cv:";

    fn base(extra: &str) -> String {
        format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = 4420\n{extra}\n\
             [[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:a\"\n\
             [[subsystems.namespaces]]\nnsid = 1\nbackend = \"ram\"\nsize = \"1M\"\n"
        )
    }

    #[test]
    fn hosts_and_tls_modes_round_trip() {
        let text = base(&format!(
            "tls = \"required\"\n[[hosts]]\nnqn = \"{HOST}\"\ndhchap_key = \"{KEY}\"\n\
             dhchap_ctrl_key_file = \"/etc/ebof/ctrl.key\"\ntls_psk_derivation = \"rfc8446\"\n"
        ));
        let c = Config::from_toml_str(&text).unwrap();
        assert_eq!(c.tls_mode(&c.listeners[0]), TlsMode::Required);
        let h = c.host_security(HOST, "nqn.2026-11.io.ebof:a").unwrap();
        assert_eq!(h.dhchap_key, Some(SecretSource::Inline(KEY.into())));
        assert_eq!(
            h.dhchap_ctrl_key,
            Some(SecretSource::File("/etc/ebof/ctrl.key".into()))
        );
        assert!(h.tls_psk_rfc8446);
        assert!(!format!("{c:?}").contains("ia6zGod"), "a secret in Debug");
        let again = Config::from_toml_str(&c.to_toml_string()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn bad_security_settings_are_clear_errors_without_the_secret() {
        let cases = [
            (
                "tls = \"yes\"\n",
                codes::INVALID_TLS_MODE,
                "listeners[0].tls",
            ),
            (
                "[[hosts]]\nnqn = \"nqn.x\"\ndhchap_key = \"DHHC-1:00:secretvalue\"\n",
                codes::INVALID_SECRET,
                "hosts[0].dhchap_key",
            ),
            (
                &format!(
                    "[[hosts]]\nnqn = \"{HOST}\"\ndhchap_key = \"{KEY}\"\ndhchap_key_file = \"/k\"\n"
                ),
                codes::CONFLICTING_SECRETS,
                "hosts[0].dhchap_key",
            ),
            (
                &format!("[[hosts]]\nnqn = \"{HOST}\"\ndhchap_ctrl_key = \"{KEY}\"\n"),
                codes::MISSING_FIELD,
                "hosts[0].dhchap_key",
            ),
            (
                &format!("[[hosts]]\nnqn = \"{HOST}\"\n[[hosts]]\nnqn = \"{HOST}\"\n"),
                codes::DUPLICATE_HOST,
                "hosts[1].nqn",
            ),
            (
                "[[hosts]]\nnqn = \"nqn.2014-08.org.nvmexpress:uuid:1\"\ntls_key = \"DHHC-1:01:abcdefgh:\"\n",
                codes::INVALID_SECRET,
                "hosts[0].tls_key",
            ),
        ];
        for (extra, code, path) in cases {
            let e = Config::from_toml_str(&base(extra)).unwrap_err();
            assert_eq!(e.code, code, "{extra}: {e}");
            assert_eq!(e.path, path, "{extra}: {e}");
            assert!(!e.to_string().contains("secretvalue"), "{e}");
            assert!(!e.to_string().contains("abcdefgh"), "{e}");
        }
    }

    #[test]
    fn per_subsystem_entries_come_before_the_host_wide_one() {
        let text = base(&format!(
            "[[hosts]]\nnqn = \"{HOST}\"\ndhchap_key = \"{KEY}\"\n\
             [[hosts]]\nnqn = \"{HOST}\"\nsubsystem = \"nqn.2026-11.io.ebof:b\"\n\
             dhchap_key_file = \"/k/b\"\n"
        ));
        let c = Config::from_toml_str(&text).unwrap();
        let b = c.host_security(HOST, "nqn.2026-11.io.ebof:b").unwrap();
        assert_eq!(b.dhchap_key, Some(SecretSource::File("/k/b".into())));
        let a = c.host_security(HOST, "nqn.2026-11.io.ebof:a").unwrap();
        assert_eq!(a.dhchap_key, Some(SecretSource::Inline(KEY.into())));
        assert!(
            c.host_security("nqn.2014-08.org.x:other", "nqn.2026-11.io.ebof:a")
                .is_none()
        );
        assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
        let dup = base(&format!(
            "[[hosts]]\nnqn = \"{HOST}\"\nsubsystem = \"nqn.2026-11.io.ebof:b\"\n\
             [[hosts]]\nnqn = \"{HOST}\"\nsubsystem = \"nqn.2026-11.io.ebof:b\"\n"
        ));
        let e = Config::from_toml_str(&dup).unwrap_err();
        assert_eq!(e.code, codes::DUPLICATE_HOST, "{e}");
    }

    #[test]
    fn a_key_file_is_read_and_its_error_names_the_file_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        std::fs::write(&p, format!("{KEY}\n")).unwrap();
        assert_eq!(SecretSource::File(p.clone()).resolve().unwrap(), KEY);
        let e = SecretSource::File(dir.path().join("missing"))
            .resolve()
            .unwrap_err();
        assert!(e.contains("missing"), "{e}");
    }
}
