//! Host identity (NQN, Host Identifier) and connection tunables.

use std::sync::OnceLock;
use std::time::Duration;

/// Where nvme-cli and the Linux host keep the host NQN and Host Identifier.
const HOSTNQN_PATH: &str = "/etc/nvme/hostnqn";
const HOSTID_PATH: &str = "/etc/nvme/hostid";

/// How a host connects: identity, digests, keep-alive and timeouts.
///
/// `HostConfig::default()` reads the host identity the way nvme-cli does (see
/// [`HostIdentity::system`]); every other field has a documented default.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// Host NQN sent in the Connect data (HOSTNQN, bytes 512..768).
    pub hostnqn: String,
    /// Host Identifier sent in the Connect data (HOSTID, bytes 0..16).
    pub hostid: [u8; 16],
    /// Ask for the NVMe/TCP header digest (CRC32C over each PDU header).
    pub hdr_digest: bool,
    /// Ask for the NVMe/TCP data digest (CRC32C over each PDU's data).
    pub data_digest: bool,
    /// Keep Alive Timeout in ms sent in the admin Connect (KATO). 0 disables keep-alive (used
    /// for one-shot discovery). Keep Alive commands are sent every `kato_ms / 2`.
    pub kato_ms: u32,
    /// Number of I/O queues requested with Set Features Number of Queues at connect time
    /// (0 = do not ask; a discovery controller never is asked).
    pub io_queues: u16,
    /// Default I/O queue size in entries (SQSIZE + 1), used by [`crate::Controller::io_queue`]
    /// when asked for 0 entries. At most `queue_size - 1` commands are outstanding.
    pub queue_size: u16,
    /// Keep one Asynchronous Event Request outstanding and report events.
    pub async_events: bool,
    /// Bound on TCP connect + ICReq/ICResp + Fabrics Connect.
    pub connect_timeout: Duration,
    /// Bound on each admin command.
    pub admin_timeout: Duration,
    /// An I/O queue with commands outstanding that sees no byte from the controller for this
    /// long is declared dead ([`crate::HostError::Timeout`]).
    pub io_timeout: Duration,
    /// Bound on a normal shutdown (CC.SHN → CSTS.SHST complete).
    pub shutdown_timeout: Duration,
    /// DH-HMAC-CHAP secrets (`--dhchap-secret`, `--dhchap-ctrl-secret`): used on every queue
    /// whose Connect completion asks for authentication (AUTHREQ.ATR).
    pub dhchap: Option<DhchapKeys>,
    /// NVMe/TCP TLS 1.3 with a PSK (`--tls --tls-key`): every queue starts with a TLS
    /// handshake before its ICReq.
    pub tls: Option<TlsKey>,
    /// The fabric: NVMe/TCP (default) or NVMe/RDMA (RoCE/iWARP/InfiniBand through
    /// libibverbs/librdmacm; needs the `rdma` feature). TLS and digests are TCP-only.
    pub transport: Transport,
}

/// Which NVMe-oF transport a host connects over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Transport {
    /// NVMe/TCP (TRTYPE 3).
    #[default]
    Tcp,
    /// NVMe/RDMA (TRTYPE 1): one RC queue pair per NVMe queue, set up with the RDMA CM.
    Rdma,
}

impl Transport {
    /// The name nvme-cli uses (`-t tcp`, `-t rdma`).
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Rdma => "rdma",
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Transport, String> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Transport::Tcp),
            "rdma" => Ok(Transport::Rdma),
            _ => Err(format!("transport {s:?} (tcp or rdma)")),
        }
    }
}

/// The configured TLS PSK (`NVMeTLSkey-1:HH:…:`) and, optionally, the exact PSK identity to
/// offer (default: the version-0 identity `NVMe0R0H <hostnqn> <subnqn>` the Linux host uses,
/// with nvme-cli's (libnvme ≤ 1.15) key derivation). `Debug` shows no key material.
#[derive(Clone, Debug)]
pub struct TlsKey {
    /// The configured PSK (`NVMeTLSkey-1:HH:<base64>:`): its transform (HH) and key bytes.
    pub key: nvmf_tls::psk::ConfiguredPsk,
    /// The PSK identity to offer instead of the derived version-0 one (nvme-cli's
    /// `--tls-key-identity`).
    pub identity: Option<String>,
    /// How the PSK is derived for a version-0 identity: nvme-cli <= 2.15's encoding (default)
    /// or RFC 8446's HkdfLabel (what SPDK's target expects).
    pub derivation: nvmf_tls::psk::Derivation,
}

impl TlsKey {
    /// Parse nvme-cli's `--tls-key` (and `--tls-key-identity`).
    pub fn parse(key: &str, identity: Option<&str>) -> Result<TlsKey, String> {
        let key =
            nvmf_tls::psk::ConfiguredPsk::parse(key.trim()).map_err(|e| format!("TLS key: {e}"))?;
        if let Some(id) = identity {
            nvmf_tls::psk::PskIdentity::parse(id.as_bytes())
                .map_err(|e| format!("TLS key identity: {e}"))?;
        }
        Ok(TlsKey {
            key,
            identity: identity.map(str::to_string),
            derivation: nvmf_tls::psk::Derivation::Compat,
        })
    }

    /// The identity to offer and its TLS PSK, for a queue of `hostnqn` to `subnqn`.
    pub(crate) fn for_queue(
        &self,
        hostnqn: &str,
        subnqn: &str,
    ) -> Result<(Vec<u8>, nvmf_tls::psk::TlsPsk), String> {
        use nvmf_tls::psk::{IdentityVersion, PskIdentity, tls_psk_for_identity};
        match &self.identity {
            Some(id) => {
                let parsed =
                    PskIdentity::parse(id.as_bytes()).map_err(|e| format!("TLS identity: {e}"))?;
                let (psk, _) = tls_psk_for_identity(&self.key, &parsed, self.derivation)
                    .map_err(|e| format!("TLS PSK: {e}"))?;
                Ok((id.as_bytes().to_vec(), psk))
            }
            None => {
                let (id, psk) = self
                    .key
                    .host_identity(hostnqn, subnqn, IdentityVersion::V0, self.derivation)
                    .map_err(|e| format!("TLS PSK: {e}"))?;
                Ok((id.to_string().into_bytes(), psk))
            }
        }
    }
}

/// The host's DH-HMAC-CHAP secret and, for bidirectional authentication, the controller's.
/// `Debug` shows no key material.
#[derive(Clone, Debug)]
pub struct DhchapKeys {
    /// The host's secret (`DHHC-1:…`): proves the host's identity to the controller.
    pub host: nvme_auth::DhchapSecret,
    /// The controller's secret: when set, the host also challenges the controller
    /// (bidirectional authentication).
    pub ctrl: Option<nvme_auth::DhchapSecret>,
}

impl DhchapKeys {
    /// Parse `DHHC-1:NN:…:` secrets (nvme-cli's `--dhchap-secret` / `--dhchap-ctrl-secret`).
    pub fn parse(host: &str, ctrl: Option<&str>) -> Result<DhchapKeys, String> {
        let host = nvme_auth::DhchapSecret::parse(host)
            .map_err(|e| format!("DH-HMAC-CHAP host secret: {e}"))?;
        let ctrl = ctrl
            .map(|c| {
                nvme_auth::DhchapSecret::parse(c)
                    .map_err(|e| format!("DH-HMAC-CHAP controller secret: {e}"))
            })
            .transpose()?;
        Ok(DhchapKeys { host, ctrl })
    }
}

impl Default for HostConfig {
    fn default() -> Self {
        let id = HostIdentity::system();
        HostConfig {
            hostnqn: id.hostnqn.clone(),
            hostid: id.hostid,
            hdr_digest: false,
            data_digest: false,
            kato_ms: 15_000,
            io_queues: 1,
            queue_size: 128,
            async_events: true,
            connect_timeout: Duration::from_secs(10),
            admin_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(30),
            shutdown_timeout: Duration::from_secs(5),
            dhchap: None,
            tls: None,
            transport: Transport::Tcp,
        }
    }
}

impl HostConfig {
    /// The same identity and timeouts, tuned for a one-shot discovery controller: no keep-alive,
    /// no asynchronous events, no I/O queues (what `nvme discover` does).
    pub fn for_discovery(&self) -> HostConfig {
        HostConfig {
            kato_ms: 0,
            io_queues: 0,
            async_events: false,
            ..self.clone()
        }
    }
}

/// The host's identity as the system knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostIdentity {
    /// Host NQN (`/etc/nvme/hostnqn` or given), sent in every Connect.
    pub hostnqn: String,
    /// Host Identifier (`/etc/nvme/hostid` or given), 128 bits, sent in every Connect.
    pub hostid: [u8; 16],
}

impl HostIdentity {
    /// The identity nvme-cli would use, computed once per process so that every connection of
    /// one program (admin and I/O queues) presents the same host:
    /// - host NQN: `/etc/nvme/hostnqn` if readable and valid, else
    ///   `nqn.2014-08.org.nvmexpress:uuid:<uuid>`;
    /// - host ID: `/etc/nvme/hostid` (a UUID) if readable, else the UUID inside the host NQN,
    ///   else the generated UUID.
    pub fn system() -> &'static HostIdentity {
        static ID: OnceLock<HostIdentity> = OnceLock::new();
        ID.get_or_init(|| {
            let nqn = std::fs::read_to_string(HOSTNQN_PATH)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| nvme_spec::is_valid_nqn(s));
            let file_id = std::fs::read_to_string(HOSTID_PATH)
                .ok()
                .and_then(|s| uuid::Uuid::parse_str(s.trim()).ok());
            Self::derive(nqn, file_id)
        })
    }

    /// The derivation rules of [`HostIdentity::system`], without the file system.
    pub fn derive(hostnqn: Option<String>, hostid: Option<uuid::Uuid>) -> HostIdentity {
        let nqn_uuid = hostnqn
            .as_deref()
            .and_then(|n| n.rsplit_once(":uuid:"))
            .and_then(|(_, u)| uuid::Uuid::parse_str(u).ok());
        let generated = uuid::Uuid::new_v4();
        let id = hostid.or(nqn_uuid).unwrap_or(generated);
        let hostnqn = hostnqn.unwrap_or_else(|| uuid_nqn(&id));
        HostIdentity {
            hostnqn,
            hostid: *id.as_bytes(),
        }
    }
}

/// `nqn.2014-08.org.nvmexpress:uuid:<uuid>`, the UUID-based NQN format (NVMe Base 2.0, 4.5).
pub fn uuid_nqn(id: &uuid::Uuid) -> String {
    format!("nqn.2014-08.org.nvmexpress:uuid:{}", id.hyphenated())
}

/// Where and how to open one queue's connection (derived from a [`HostConfig`]).
#[derive(Clone, Debug)]
pub(crate) struct LinkParams {
    pub addr: std::net::SocketAddr,
    pub digests: nvmf_tcp::Digests,
    /// Largest C2HData DATA accepted in one PDU; bounds the receive buffer.
    pub max_c2h_data: u32,
    pub connect_timeout: Duration,
    /// TLS: the configured key (the identity and PSK are derived per queue from the NQNs).
    pub tls: Option<TlsKey>,
}

/// What one queue's Fabrics Connect carries.
#[derive(Clone, Debug)]
pub(crate) struct ConnectParams {
    pub qid: nvme_spec::QueueId,
    /// SQ entries (SQSIZE + 1), ≥ 2.
    pub entries: u16,
    pub dissqfc: bool,
    pub kato_ms: u32,
    pub cntlid: nvme_spec::ControllerId,
    pub hostid: [u8; 16],
    pub hostnqn: String,
    pub subnqn: String,
    /// In-capsule data limit for this queue (admin: 8 KiB; I/O: IOCCSZ*16 - 64).
    pub icd_max: usize,
    /// DH-HMAC-CHAP secrets, for a controller that asks for authentication.
    pub dhchap: Option<DhchapKeys>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derive_identity() {
        let u = uuid::Uuid::parse_str("0c3a7b0e-1f7f-4c49-9d0b-29a9a7f0a8e1").unwrap();
        let nqn = uuid_nqn(&u);
        // hostid from the NQN's UUID when no hostid file
        let id = HostIdentity::derive(Some(nqn.clone()), None);
        assert_eq!(id.hostnqn, nqn);
        assert_eq!(id.hostid, *u.as_bytes());
        // explicit hostid wins
        let other = uuid::Uuid::new_v4();
        let id = HostIdentity::derive(Some(nqn.clone()), Some(other));
        assert_eq!(id.hostid, *other.as_bytes());
        // nothing: a generated UUID used for both
        let id = HostIdentity::derive(None, None);
        assert!(nvme_spec::is_valid_nqn(&id.hostnqn));
        let tail = id.hostnqn.rsplit_once(":uuid:").unwrap().1;
        assert_eq!(uuid::Uuid::parse_str(tail).unwrap().as_bytes(), &id.hostid);
    }

    #[test]
    fn system_identity_is_stable() {
        assert_eq!(HostIdentity::system(), HostIdentity::system());
        let d = HostConfig::default().for_discovery();
        assert_eq!(d.kato_ms, 0);
        assert!(!d.async_events);
    }
}
