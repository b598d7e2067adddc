//! DH-HMAC-CHAP keys of one host on one subsystem, installed and removed live:
//! `PUT /v1/subsystems/{nqn}/hosts/{hostnqn}/dhchap` ([`HostKeyRequest`]) and `DELETE` on the
//! same route. What the CSI controller uses to give each (volume, node) pair its own secret.
//!
//! A key is a `[[hosts]]` entry with `subsystem = nqn` in the running configuration (so `save`
//! and autosave persist it as they persist every host setting, inline) and takes effect at the
//! host's next Connect: the target's authentication policy is rebuilt from the configuration
//! ([`crate::security::auth_policy`]) and swapped in. Controllers already connected stay
//! connected (authentication happens at Connect; `DELETE /v1/controllers/{cntlid}` ends them).
//!
//! The keys travel only in the request body. They are never returned (answers say whether a
//! key is set, [`HostKeyView`]), logged, shown in `GET /v1/state` or in metrics, and a
//! malformed one is refused without echoing it.

use crate::api::{ApiError, codes};
use crate::apply::Apply;
use crate::lookup::{check, subsystem_index};
use crate::running::Running;
use ebof_config::{Config, HostSecurity, SecretSource, codes as cfg_codes};
use nvmf_target::Target;

pub use ebof_api::hostkeys::{HostKeyRequest, HostKeyView};

/// The entry of (`hostnqn`, `nqn`) in `[[hosts]]`.
fn entry_index(cfg: &ebof_config::Config, nqn: &str, hostnqn: &str) -> Option<usize> {
    cfg.hosts
        .iter()
        .position(|h| h.nqn == hostnqn && h.subsystem.as_deref() == Some(nqn))
}

/// `s` checked as a DH-HMAC-CHAP secret; the error names `field`, never the value.
fn secret(s: &str, field: &str) -> Result<SecretSource, ApiError> {
    nvme_auth::DhchapSecret::parse(s).map_err(|e| {
        ApiError::new(
            cfg_codes::INVALID_SECRET,
            field,
            format!("not a DH-HMAC-CHAP secret (DHHC-1:NN:<base64>:): {e}"),
        )
    })?;
    Ok(SecretSource::Inline(s.trim().to_string()))
}

/// The authentication applier ([`crate::apply`]): when the `[[hosts]]` entries change, the
/// target's policy is rebuilt from them ([`crate::security::auth_policy`]) and swapped in; it
/// takes effect at each host's next Connect. A secret that cannot be decoded fails the change.
#[derive(Debug)]
pub struct HostKeys;

impl Apply for HostKeys {
    fn apply(&self, old: &Config, new: &Config, live: &Target) -> Result<(), ApiError> {
        if old.hosts == new.hosts {
            return Ok(());
        }
        let policy = crate::security::auth_policy(new)
            .map_err(|e| ApiError::new(cfg_codes::INVALID_SECRET, "", e))?;
        live.set_auth_policy(policy);
        Ok(())
    }
}

/// `PUT /v1/subsystems/{nqn}/hosts/{hostnqn}/dhchap`: from the next Connect on, `hostnqn` must
/// authenticate with these keys on `nqn` (and only there). Host entries of subsystems that no
/// longer exist are dropped on the way.
pub(crate) fn set_key(
    r: &Running,
    nqn: &str,
    hostnqn: &str,
    req: &HostKeyRequest,
) -> Result<HostKeyView, ApiError> {
    ebof_config::check_nqn(hostnqn).map_err(|e| ApiError::from_config(&e, "hostnqn"))?;
    let host = secret(&req.dhchap_key, "dhchap_key")?;
    let ctrl = req
        .dhchap_ctrl_key
        .as_deref()
        .map(|c| secret(c, "dhchap_ctrl_key"))
        .transpose()?;
    let bidirectional = ctrl.is_some();
    r.change(|cfg| {
        subsystem_index(cfg, nqn)?;
        let live: Vec<String> = cfg.subsystems.iter().map(|s| s.nqn.clone()).collect();
        cfg.hosts
            .retain(|h| h.subsystem.as_ref().is_none_or(|s| live.contains(s)));
        match entry_index(cfg, nqn, hostnqn) {
            Some(i) => {
                cfg.hosts[i].dhchap_key = Some(host);
                cfg.hosts[i].dhchap_ctrl_key = ctrl;
            }
            None => cfg.hosts.push(HostSecurity {
                nqn: hostnqn.to_string(),
                subsystem: Some(nqn.to_string()),
                dhchap_key: Some(host),
                dhchap_ctrl_key: ctrl,
                tls_key: None,
                tls_psk_rfc8446: false,
            }),
        }
        check(cfg)
    })?;
    tracing::info!(
        subsystem = nqn,
        host = hostnqn,
        bidirectional,
        "DH-HMAC-CHAP key set"
    );
    Ok(HostKeyView {
        subsystem: nqn.to_string(),
        hostnqn: hostnqn.to_string(),
        dhchap: true,
        bidirectional,
    })
}

/// `DELETE /v1/subsystems/{nqn}/hosts/{hostnqn}/dhchap`: the keys of `hostnqn` on `nqn` go (the
/// entry goes with them unless it holds a TLS key). `unknown-host` when there are none; the
/// subsystem need not exist any more.
pub(crate) fn remove_key(r: &Running, nqn: &str, hostnqn: &str) -> Result<HostKeyView, ApiError> {
    r.change(|cfg| {
        let Some(i) = entry_index(cfg, nqn, hostnqn).filter(|&i| {
            cfg.hosts[i].dhchap_key.is_some() || cfg.hosts[i].dhchap_ctrl_key.is_some()
        }) else {
            return Err(ApiError::new(
                codes::UNKNOWN_HOST,
                "hostnqn",
                format!("{hostnqn:?} has no DH-HMAC-CHAP key of its own on {nqn}"),
            ));
        };
        if cfg.hosts[i].tls_key.is_some() {
            cfg.hosts[i].dhchap_key = None;
            cfg.hosts[i].dhchap_ctrl_key = None;
        } else {
            cfg.hosts.remove(i);
        }
        check(cfg)
    })?;
    tracing::info!(subsystem = nqn, host = hostnqn, "DH-HMAC-CHAP key removed");
    Ok(HostKeyView {
        subsystem: nqn.to_string(),
        hostnqn: hostnqn.to_string(),
        dhchap: false,
        bidirectional: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::routes;
    use crate::client::{Client, ClientError};
    use crate::control::Control;
    use nvme_auth::{DhchapSecret, KeyTransform};
    use std::sync::Arc;

    const SUB: &str = "nqn.2026-11.io.ebof:t";
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0c5ea000-0000-4000-8000-00000000000a";
    const OTHER: &str = "nqn.2014-08.org.nvmexpress:uuid:0c5ea000-0000-4000-8000-00000000000b";

    fn control() -> Arc<Control> {
        crate::build::test_control()
    }

    fn key(byte: u8) -> String {
        DhchapSecret::from_key(KeyTransform::Sha256, &[byte; 32])
            .unwrap()
            .encode()
            .to_string()
    }

    fn requires(c: &Control, host: &str, sub: &str) -> bool {
        c.target
            .auth_policy()
            .is_some_and(|p| p.session(host, sub, 0).is_some())
    }

    #[test]
    fn a_key_is_live_persisted_never_shown_and_removed() {
        let c = control();
        assert!(!requires(&c, HOST, SUB));
        let req = HostKeyRequest {
            dhchap_key: key(1),
            dhchap_ctrl_key: Some(key(2)),
        };
        let v = c.set_host_key(SUB, HOST, &req).unwrap();
        assert!(v.dhchap && v.bidirectional);
        assert!(requires(&c, HOST, SUB), "live at the next Connect");
        assert!(!requires(&c, OTHER, SUB), "only that host");
        assert!(!requires(&c, HOST, "nqn.2026-11.io.ebof:u"), "only there");
        let saved = c.running().to_toml_string();
        assert!(
            saved.contains(&key(1)) && saved.contains(&key(2)),
            "save keeps it"
        );
        // Never in the state, the metrics, a Debug or a view.
        let shown = [
            serde_json::to_string(&c.state()).unwrap(),
            crate::metrics::render(&c.target).unwrap(),
            format!("{req:?} {v:?} {:?}", c.running()),
            serde_json::to_string(&v).unwrap(),
        ];
        let b64 = |k: &str| k.split(':').nth(2).unwrap().to_string();
        for s in &shown {
            assert!(
                !s.contains(&b64(&key(1))) && !s.contains(&b64(&key(2))),
                "{s}"
            );
        }
        // Replaced: one entry, the new key.
        let req2 = HostKeyRequest {
            dhchap_key: key(3),
            dhchap_ctrl_key: None,
        };
        assert!(!c.set_host_key(SUB, HOST, &req2).unwrap().bidirectional);
        let cfg = c.running();
        assert_eq!(cfg.hosts.len(), 1);
        assert_eq!(cfg.hosts[0].dhchap_key, Some(SecretSource::Inline(key(3))));
        // Removed: the host connects without authentication again (if the host list allows).
        c.remove_host_key(SUB, HOST).unwrap();
        assert!(!requires(&c, HOST, SUB));
        assert!(c.running().hosts.is_empty());
        assert_eq!(
            c.remove_host_key(SUB, HOST).unwrap_err().code,
            codes::UNKNOWN_HOST
        );
    }

    #[test]
    fn bad_requests_are_refused_without_echoing_the_secret() {
        let c = control();
        let bad = "DHHC-1:01:c2VjcmV0LXZhbHVlLXRoYXQtaXMtd3Jvbmc=:";
        let e = c
            .set_host_key(
                SUB,
                HOST,
                &HostKeyRequest {
                    dhchap_key: bad.into(),
                    dhchap_ctrl_key: None,
                },
            )
            .unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.path.as_str()),
            (cfg_codes::INVALID_SECRET, "dhchap_key")
        );
        assert!(!e.to_string().contains("c2VjcmV0"), "{e}");
        let e = c
            .set_host_key(
                SUB,
                HOST,
                &HostKeyRequest {
                    dhchap_key: key(1),
                    dhchap_ctrl_key: Some("nope".into()),
                },
            )
            .unwrap_err();
        assert_eq!(e.path, "dhchap_ctrl_key");
        let ok = HostKeyRequest {
            dhchap_key: key(1),
            dhchap_ctrl_key: None,
        };
        let e = c
            .set_host_key("nqn.2026-11.io.ebof:none", HOST, &ok)
            .unwrap_err();
        assert_eq!(e.code, codes::UNKNOWN_SUBSYSTEM);
        assert_eq!(
            c.set_host_key(SUB, "not an nqn", &ok).unwrap_err().path,
            "hostnqn"
        );
        assert!(c.running().hosts.is_empty(), "nothing changed");
        assert!(c.target.auth_policy().is_none());
    }

    #[test]
    fn the_routes_and_the_client() {
        let dir = tempfile::tempdir().unwrap();
        let c = control();
        let sock = crate::server::bind_socket(&dir.path().join("s.sock")).unwrap();
        let path = sock.path().to_path_buf();
        let srv = crate::server::start(c.clone(), Some(sock), None, None).unwrap();
        let cl = Client::new(&path);
        let req = HostKeyRequest {
            dhchap_key: key(7),
            dhchap_ctrl_key: None,
        };
        assert!(cl.set_host_key(SUB, HOST, &req).unwrap().dhchap);
        assert!(requires(&c, HOST, SUB));
        let (status, body) = cl
            .raw(
                "PUT",
                &routes::fill(routes::HOST_DHCHAP, &[SUB, HOST]),
                Some("{\"dhchap_key\": 5, \"x\": \"DHHC-1:00:leak\"}".into()),
            )
            .unwrap();
        assert_eq!(status, 400);
        assert!(!String::from_utf8_lossy(&body).contains("leak"));
        assert!(!cl.remove_host_key(SUB, HOST).unwrap().dhchap);
        assert!(!requires(&c, HOST, SUB));
        match cl.remove_host_key(SUB, HOST) {
            Err(ClientError::Api(e)) => assert_eq!(e.code, codes::UNKNOWN_HOST),
            other => panic!("{other:?}"),
        }
        srv.stop();
    }
}
