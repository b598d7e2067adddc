//! The keys, NQNs and algorithm lists one host ↔ subsystem pair authenticates with; the same
//! shape serves the controller ([`crate::TargetConfig`]: what it allows, in preference order)
//! and the host ([`crate::HostConfig`]: what it offers).

use crate::chap::HashId;
use crate::dh::DhGroup;
use crate::secret::{DhchapSecret, TransformedKey};

/// Keys (already transformed), NQNs and algorithms of one host ↔ subsystem pair. Shared by every
/// queue of an association (wrap it in an `Arc`). `Debug` redacts the keys.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    pub(crate) host_key: TransformedKey,
    pub(crate) ctrl_key: Option<TransformedKey>,
    pub(crate) hostnqn: String,
    pub(crate) subnqn: String,
    pub(crate) hashes: Vec<HashId>,
    pub(crate) dh_groups: Vec<DhGroup>,
}

impl AuthConfig {
    /// The host secret (`--dhchap-secret`, transformed with `hostnqn`) and, for bidirectional
    /// authentication, the controller secret (`--dhchap-ctrl-secret`, transformed with
    /// `subnqn`). Algorithms default to every hash (SHA-256, SHA-384, SHA-512) and every DH
    /// group (null, ffdhe2048 … ffdhe8192), in that order — the Linux host's offer, and on the
    /// target Linux nvmet's defaults (SHA-256, null) first.
    pub fn new(
        host_secret: &DhchapSecret,
        ctrl_secret: Option<&DhchapSecret>,
        hostnqn: &str,
        subnqn: &str,
    ) -> Self {
        Self {
            host_key: host_secret.transform(hostnqn),
            ctrl_key: ctrl_secret.map(|s| s.transform(subnqn)),
            hostnqn: hostnqn.to_string(),
            subnqn: subnqn.to_string(),
            hashes: HashId::ALL.to_vec(),
            dh_groups: DhGroup::ALL.to_vec(),
        }
    }

    /// Hashes, most preferred first (target: allowed; host: offered, at most 30 sent). An empty
    /// list makes every exchange fail with "hash function not usable".
    pub fn with_hashes(mut self, hashes: Vec<HashId>) -> Self {
        self.hashes = hashes;
        self
    }

    /// DH groups, most preferred first (target: allowed; host: offered, at most 30 sent). An
    /// empty list makes every exchange fail with "DH group not usable".
    pub fn with_dh_groups(mut self, groups: Vec<DhGroup>) -> Self {
        self.dh_groups = groups;
        self
    }

    /// Whether a controller secret is configured: the target can answer a bidirectional
    /// challenge, the host will send one.
    pub fn has_ctrl_key(&self) -> bool {
        self.ctrl_key.is_some()
    }

    /// Host NQN.
    pub fn hostnqn(&self) -> &str {
        &self.hostnqn
    }

    /// Subsystem NQN.
    pub fn subnqn(&self) -> &str {
        &self.subnqn
    }

    /// The hash list.
    pub fn hashes(&self) -> &[HashId] {
        &self.hashes
    }

    /// The DH group list.
    pub fn dh_groups(&self) -> &[DhGroup] {
        &self.dh_groups
    }
}
