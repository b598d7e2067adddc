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
use nvme_spec::Status;
use nvmf_target::auth::{AuthCmdError, AuthPolicy, AuthProgress, AuthSession};

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
    /// Keys by (host NQN, subsystem NQN or `None` for the host's other subsystems).
    hosts: HashMap<(String, Option<String>), HostKeys>,
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
            hosts.insert(
                (h.nqn.clone(), h.subsystem.clone()),
                HostKeys { host, ctrl },
            );
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
        let k = self
            .hosts
            .get(&(hostnqn.to_string(), Some(subnqn.to_string())))
            .or_else(|| self.hosts.get(&(hostnqn.to_string(), None)))?;
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
        self.failure
            .clone()
            .or_else(|| self.auth.last_failure().map(|f| f.to_string()))
    }
}

/// The authentication policy of `cfg` for [`nvmf_target::Target::set_auth_policy`].
pub fn auth_policy(cfg: &Config) -> Result<Option<Arc<dyn AuthPolicy>>, String> {
    Ok(DhchapPolicy::from_config(cfg)?.map(|p| Arc::new(p) as Arc<dyn AuthPolicy>))
}

/// The TLS PSKs of `cfg` for [`ebof_runtime::ServerConfig::tls`], or `None` when no listener
/// has TLS. A listener with TLS and no host with a `tls_key` is an error: nobody could connect.
pub fn tls_acceptor(
    cfg: &Config,
) -> Result<Option<Arc<dyn ebof_runtime::tls::TlsAcceptor>>, String> {
    use nvmf_tls::psk::{ConfiguredPsk, Derivation, resolve_identity};
    if cfg.listener_tls.is_empty() {
        return Ok(None);
    }
    type Keys = HashMap<(String, Option<String>), (ConfiguredPsk, Derivation)>;
    let mut keys: Keys = HashMap::new();
    for (i, h) in cfg.hosts.iter().enumerate() {
        let Some(k) = &h.tls_key else { continue };
        let path = format!("hosts[{i}].tls_key");
        let text = k.resolve().map_err(|e| format!("{path}: {e}"))?;
        let psk = ConfiguredPsk::parse(&text).map_err(|e| format!("{path}: {e}"))?;
        let deriv = if h.tls_psk_rfc8446 {
            Derivation::Rfc8446
        } else {
            Derivation::Compat
        };
        keys.insert((h.nqn.clone(), h.subsystem.clone()), (psk, deriv));
    }
    if keys.is_empty() {
        let (l, _) = &cfg.listener_tls[0];
        return Err(format!(
            "listener {l} has TLS but no [[hosts]] entry has a tls_key: no host could connect"
        ));
    }
    // Version-0 identities do not say how the host derived its PSK: the host's
    // `tls_psk_derivation` does (default: nvme-cli <= 2.15's "compat" encoding). Version-1
    // identities carry a digest and both encodings are tried.
    let find = |keys: &Keys, host: &str, sub: &str| -> Option<(ConfiguredPsk, Derivation)> {
        keys.get(&(host.to_string(), Some(sub.to_string())))
            .or_else(|| keys.get(&(host.to_string(), None)))
            .cloned()
    };
    let server = nvmf_tls::TlsServerConfig::with_reasons(move |raw| {
        let id = nvmf_tls::psk::PskIdentity::parse(raw).map_err(|e| e.to_string())?;
        let deriv = find(&keys, &id.hostnqn, &id.subnqn).map_or(Derivation::Compat, |(_, d)| d);
        resolve_identity(raw, deriv, |id| {
            find(&keys, &id.hostnqn, &id.subnqn).map(|(k, _)| k)
        })
        .map(|(_, p)| p)
        .map_err(|e| e.to_string())
    })
    .map_err(|e| format!("TLS: {e}"))?;
    Ok(Some(Arc::new(Acceptor {
        config: server,
        rekey_records: cfg.target.tls_rekey_records,
        key_update: key_update_policy(cfg.target.tls_key_update),
    })))
}

/// `[target] tls_key_update` for the record layer.
pub fn key_update_policy(k: ebof_config::TlsKeyUpdate) -> nvmf_tls::KeyUpdatePolicy {
    match k {
        ebof_config::TlsKeyUpdate::Peer => nvmf_tls::KeyUpdatePolicy::Peer,
        ebof_config::TlsKeyUpdate::Always => nvmf_tls::KeyUpdatePolicy::Always,
    }
}

struct Acceptor {
    config: Arc<nvmf_tls::TlsServerConfig>,
    /// `[target] tls_rekey_records` (full-size-record equivalents per key).
    rekey_records: u64,
    /// `[target] tls_key_update`.
    key_update: nvmf_tls::KeyUpdatePolicy,
}

impl ebof_runtime::tls::TlsAcceptor for Acceptor {
    fn accept(
        &self,
    ) -> Result<Box<dyn ebof_runtime::tls::TlsSession>, ebof_runtime::tls::TlsError> {
        let mut s = nvmf_tls::TlsServer::new(&self.config).map_err(tls_err)?;
        s.set_key_update_interval(self.rekey_records);
        s.set_key_update_policy(self.key_update);
        Ok(Box::new(ServerSession {
            tls: s,
            deferral_told: false,
        }))
    }
}

fn tls_err(e: nvmf_tls::TlsError) -> ebof_runtime::tls::TlsError {
    ebof_runtime::tls::TlsError(e.to_string())
}

/// One connection's TLS, server side.
struct ServerSession {
    tls: nvmf_tls::TlsServer,
    /// The first deferred KeyUpdate was logged.
    deferral_told: bool,
}

impl ServerSession {
    /// Once per connection: the sending key reached its threshold and was kept (the peer has
    /// not shown it takes a KeyUpdate). One comparison per write.
    fn note_deferral(&mut self) {
        if self.deferral_told {
            return;
        }
        if let Some(st) = self.tls.record_stats()
            && st.key_updates_deferred > 0
        {
            self.deferral_told = true;
            tracing::info!(
                peer = ?self.tls.peer_identity().map(|i| i.hostnqn),
                "TLS: KeyUpdate threshold reached; key kept (the peer has sent no KeyUpdate, \
                 tls_key_update = \"peer\")"
            );
        }
    }
}

impl Drop for ServerSession {
    fn drop(&mut self) {
        if let Some(st) = self.tls.record_stats()
            && (st.key_updates_sent | st.key_updates_received | st.key_updates_deferred) != 0
        {
            tracing::info!(
                key_updates_sent = st.key_updates_sent,
                key_updates_received = st.key_updates_received,
                key_updates_deferred = st.key_updates_deferred,
                "TLS record stats at close"
            );
        }
    }
}

impl ebof_runtime::tls::TlsSession for ServerSession {
    fn feed(&mut self, cipher: &[u8]) -> Result<(), ebof_runtime::tls::TlsError> {
        self.tls.feed(cipher).map(|_| ()).map_err(tls_err)
    }

    fn cipher_space(&mut self) -> Option<&mut [u8]> {
        Some(self.tls.cipher_space())
    }

    fn cipher_filled(&mut self, n: usize) -> Result<(), ebof_runtime::tls::TlsError> {
        self.tls.cipher_filled(n).map_err(tls_err)
    }

    fn read_plain(&mut self, dst: &mut [u8]) -> Result<usize, ebof_runtime::tls::TlsError> {
        self.tls.read_plain(dst).map_err(tls_err)
    }

    fn write_plain(&mut self, bufs: &[&[u8]]) -> Result<(), ebof_runtime::tls::TlsError> {
        let r = self.tls.write_plain(bufs).map(|_| ()).map_err(tls_err);
        self.note_deferral();
        r
    }

    fn pending_cipher(&self) -> &[u8] {
        self.tls.pending_cipher()
    }

    fn consume_cipher(&mut self, n: usize) {
        self.tls.consume_cipher(n)
    }

    fn handshake_done(&self) -> bool {
        self.tls.handshake_done()
    }

    fn peer(&self) -> Option<(String, String)> {
        self.tls.peer_identity().map(|i| (i.hostnqn, i.subnqn))
    }

    fn peer_closed(&self) -> bool {
        self.tls.peer_closed()
    }

    fn read_paused(&self) -> bool {
        self.tls.read_paused()
    }

    fn close_notify(&mut self) {
        let _ = self.tls.close_notify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_tls::psk::{ConfiguredPsk, Derivation, IdentityVersion};

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
    const SUB: &str = "nqn.2024-01.io.ebof:tls";
    const KEY: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";

    fn config(target: &str) -> Config {
        Config::from_toml_str(&format!(
            r#"
{target}

[[listeners]]
address = "127.0.0.1"
port = 4420
tls = "required"

[[hosts]]
nqn = "{HOST}"
tls_key = "{KEY}"

[[subsystems]]
nqn = "{SUB}"

[[subsystems.namespaces]]
backend = "ram"
size = "1M"
"#
        ))
        .unwrap()
    }

    /// KeyUpdates a host receives after 4 MiB from a target session made by the acceptor of
    /// `cfg` (16 thresholds crossed at `tls_rekey_records = 16`).
    fn key_updates_seen_by_host(cfg: &Config) -> u64 {
        let acceptor = tls_acceptor(cfg).unwrap().unwrap();
        let mut s = acceptor.accept().unwrap();
        let (id, psk) = ConfiguredPsk::parse(KEY)
            .unwrap()
            .host_identity(HOST, SUB, IdentityVersion::V0, Derivation::Compat)
            .unwrap();
        let cc = nvmf_tls::TlsClientConfig::new().unwrap();
        let mut c = nvmf_tls::TlsClient::new(&cc, id.to_string().as_bytes(), psk).unwrap();
        while !(s.handshake_done() && c.handshake_done()) {
            s.feed(&c.take_cipher()).unwrap();
            let out = s.pending_cipher().to_vec();
            s.consume_cipher(out.len());
            c.feed(&out).unwrap();
        }
        let chunk = vec![7u8; 128 * 1024];
        let mut plain = Vec::new();
        for _ in 0..32 {
            s.write_plain(&[&chunk]).unwrap();
            let out = s.pending_cipher().to_vec();
            s.consume_cipher(out.len());
            c.feed(&out).unwrap();
            plain.clear();
            c.read_plain_into(&mut plain).unwrap();
            assert_eq!(plain.len(), chunk.len());
        }
        c.record_stats().unwrap().key_updates_received
    }

    /// `[target] tls_rekey_records` and `tls_key_update` reach the target's sessions: by
    /// default none towards a host that sent none; with "always" one per threshold.
    #[test]
    fn rekey_settings_reach_the_sessions() {
        assert_eq!(
            key_updates_seen_by_host(&config("[target]\ntls_rekey_records = 16")),
            0
        );
        assert_eq!(
            key_updates_seen_by_host(&config(
                "[target]\ntls_rekey_records = 16\ntls_key_update = \"always\""
            )),
            15
        );
        // The default threshold (2^24 records) is far away: none either way.
        assert_eq!(
            key_updates_seen_by_host(&config("[target]\ntls_key_update = \"always\"")),
            0
        );
    }
}
