//! `GET /v1/support`: what `ebof ctl dump` needs from the box itself — versions, the kernel,
//! and the running configuration with every inline secret replaced by [`REDACTED`] (the
//! DH-HMAC-CHAP keys and TLS PSKs of `[[hosts]]`; the paths of key, token and certificate
//! files stay, their contents never leave). A free function of [`Control`], as features are.

use crate::control::Control;
use ebof_api::{REDACTED, SupportView};
use ebof_config::{Config, SecretSource};

/// The support view of the box `c` controls.
pub fn support(c: &Control) -> SupportView {
    let mut cfg = c.running();
    let redacted = redact(&mut cfg);
    SupportView {
        version: env!("CARGO_PKG_VERSION").to_string(),
        kernel: kernel(),
        config: cfg.to_toml_string(),
        redacted,
    }
}

/// Replace every inline secret of `cfg` by [`REDACTED`]; how many there were.
pub fn redact(cfg: &mut Config) -> usize {
    let mut n = 0;
    for h in &mut cfg.hosts {
        for k in [&mut h.dhchap_key, &mut h.dhchap_ctrl_key, &mut h.tls_key] {
            if let Some(SecretSource::Inline(v)) = k {
                *v = REDACTED.to_string();
                n += 1;
            }
        }
    }
    n
}

/// `uname -srvm` of this machine (also what `ebof ctl dump` says of the machine it runs on).
pub fn kernel() -> String {
    // SAFETY: utsname is plain bytes; uname fills it and cannot overrun it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown (uname failed)".into();
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    format!(
        "{} {} {} {}",
        field(&u.sysname),
        field(&u.release),
        field(&u.version),
        field(&u.machine)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "DHHC-1:00:ia6zGodOr5SEG0Ldz9AqJ1h9pNOEVPsm2hYEbSGnF3m2y8cv:";

    #[test]
    fn inline_secrets_are_redacted_and_paths_stay() {
        let text = format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = 4420\n\
             [[hosts]]\nnqn = \"nqn.2014-08.org.example:h\"\ndhchap_key = \"{KEY}\"\n\
             dhchap_ctrl_key_file = \"/etc/ebof/ctrl.key\"\n\
             [[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:a\"\n\
             [[subsystems.namespaces]]\nnsid = 1\nbackend = \"ram\"\nsize = \"1M\"\n"
        );
        let mut c = Config::from_toml_str(&text).unwrap();
        assert_eq!(redact(&mut c), 1);
        let out = c.to_toml_string();
        assert!(!out.contains("ia6zGodOr5SEG0"), "{out}");
        assert!(
            out.contains(REDACTED) && out.contains("/etc/ebof/ctrl.key"),
            "{out}"
        );
        assert!(kernel().starts_with("Linux "), "{}", kernel());
    }
}
