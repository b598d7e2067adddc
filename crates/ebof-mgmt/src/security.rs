//! The configuration's `[[hosts]]` secrets made live: DH-HMAC-CHAP sessions for the
//! controller core ([`nvmf_target::auth`], over the `nvme-auth` crate).
//!
//! Secrets are decoded once, at start (a malformed one stops the start with an error that
//! names its place in the configuration, never its value). A session's keys are transformed
//! once per (host, subsystem) pair and shared by every queue of that pair.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ebof_config::{Config, SecretSource};
use nvme_auth::{AuthConfig, DhGroup, DhchapSecret, HashId, TargetAuth, TargetState};
use nvmf_target::auth::{AuthCmdError, AuthPolicy, AuthProgress, AuthSession};
use nvme_spec::Status;

/// Decode `s`, naming `path` (never the value) when it is malformed.
fn dhchap(s: &SecretSource, path: &str) -> Result<DhchapSecret, String> {
    let text = s.resolve().map_err(|e| format!("{path}: {e}"))?;
    DhchapSecret::parse(&text).map_err(|e| format!("{path}: {e}"))
}

struct HostKeys {
    host: DhchapSecret,
    ctrl: Option<DhchapSecret>,
}

/// DH-HMAC-CHAP for every host with a `dhchap_key`.
pub struct DhchapPolicy {
    hosts: HashMap<String, HostKeys>,
    /// Transformed keys per (host NQN, subsystem NQN).
    configs: Mutex<HashMap<(String, String), Arc<AuthConfig>>>,
}

/// The target's preference: every hash, SHA-256 first; the FFDHE groups before the null
/// group, so the challenge is augmented with a fresh Diffie-Hellman secret unless the host
/// offers no group.
const DH_PREFERENCE: [DhGroup; 6] = [
    DhGroup::Ffdhe2048,
    DhGroup::Ffdhe3072,
    DhGroup::Ffdhe4096,
    DhGroup::Ffdhe6144,
    DhGroup::Ffdhe8192,
    DhGroup::Null,
];

impl DhchapPolicy {
    /// The policy of `cfg`, or `None` when no host has a DH-HMAC-CHAP key.
    pub fn from_config(cfg: &Config) -> Result<Option<DhchapPolicy>, String> {
        let mut hosts = HashMap::new();
        for (i, h) in cfg.hosts.iter().enumerate() {
            let Some(k) = &h.dhchap_key else { continue };
            let host = dhchap(k, &format!("hosts[{i}].dhchap_key"))?;
            let ctrl = h
                .dhchap_ctrl_key
                .as_ref()
                .map(|c| dhchap(c, &format!("hosts[{i}].dhchap_ctrl_key")))
                .transpose()?;
            hosts.insert(h.nqn.clone(), HostKeys { host, ctrl });
        }
        Ok((!hosts.is_empty()).then(|| DhchapPolicy {
            hosts,
            configs: Mutex::new(HashMap::new()),
        }))
    }

    fn config(&self, hostnqn: &str, subnqn: &str, k: &HostKeys) -> Arc<AuthConfig> {
        let mut m = self.configs.lock().unwrap_or_else(|e| e.into_inner());
        m.entry((hostnqn.to_string(), subnqn.to_string()))
            .or_insert_with(|| {
                Arc::new(
                    AuthConfig::new(&k.host, k.ctrl.as_ref(), hostnqn, subnqn)
                        .with_hashes(HashId::ALL.to_vec())
                        .with_dh_groups(DH_PREFERENCE.to_vec()),
                )
            })
            .clone()
    }
}

impl AuthPolicy for DhchapPolicy {
    fn session(&self, hostnqn: &str, subnqn: &str, _qid: u16) -> Option<Box<dyn AuthSession>> {
        let k = self.hosts.get(hostnqn)?;
        let cfg = self.config(hostnqn, subnqn, k);
        Some(Box::new(DhchapSession {
            auth: TargetAuth::with_os_random(cfg),
            failure: None,
        }))
    }
}

/// One queue's DH-HMAC-CHAP exchange.
struct DhchapSession {
    auth: TargetAuth,
    failure: Option<String>,
}

impl AuthSession for DhchapSession {
    fn send(&mut self, payload: &[u8]) -> Result<(), AuthCmdError> {
        // A failed exchange is a protocol message (Failure1 on the next AUTH_Receive); the
        // command itself succeeds, as with Linux nvmet.
        if let Err(f) = self.auth.on_send(payload) {
            self.failure = Some(f.to_string());
        }
        Ok(())
    }

    fn receive(&mut self, al: u32) -> Result<Vec<u8>, AuthCmdError> {
        match self.auth.on_receive(al) {
            Ok(mut msg) => {
                // Zero-padded to AL, as Linux nvmet returns it.
                msg.resize(al as usize, 0);
                Ok(msg)
            }
            Err(_) => Err(AuthCmdError(Status::INVALID_FIELD)),
        }
    }

    fn progress(&self) -> AuthProgress {
        match self.auth.state() {
            TargetState::Authenticated => AuthProgress::Succeeded,
            TargetState::Failed => AuthProgress::Failed,
            _ if self.auth.is_authenticated() => AuthProgress::Succeeded,
            _ => AuthProgress::InProgress,
        }
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone().or_else(|| {
            self.auth
                .last_failure()
                .map(|f| f.to_string())
        })
    }
}

/// The authentication policy of `cfg` for [`nvmf_target::Target::set_auth_policy`].
pub fn auth_policy(cfg: &Config) -> Result<Option<Arc<dyn AuthPolicy>>, String> {
    Ok(DhchapPolicy::from_config(cfg)?.map(|p| Arc::new(p) as Arc<dyn AuthPolicy>))
}
