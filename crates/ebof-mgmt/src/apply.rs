//! The one road from configuration to the live target.
//!
//! Each feature whose part of the configuration has live state in the target implements
//! [`Apply`]: given the running configuration before a change (`old`) and after it (`new`,
//! already validated), it makes the live target match `new` for its part. The same appliers run
//! in the same order
//!
//! - at start-up, as the change from an empty configuration to the file
//!   ([`crate::build::build_target`] after the namespaces are opened), and
//! - after every change through the management API (`crate::running::Running::change`: the
//!   request edits a copy of the running configuration and validates it, the appliers run, and
//!   only then is the copy committed),
//!
//! so "the file at start" and "the same change through the API" cannot drift apart. Appliers
//! compare `new` with what is live (not only with `old`) and touch only what differs, so running
//! one twice, or after a request that already changed the target itself, changes nothing.
//!
//! | feature | applier | live state |
//! |---|---|---|
//! | ANA | [`crate::ana::Ana`] | the target's ANA table (listeners of `new` only) |
//! | referrals | [`crate::referrals::Referrals`] | the discovery log's referral entries |
//! | QoS | [`crate::qos::Qos`] | each namespace's limits |
//! | masking | [`crate::masking::Masking`] | each subsystem's per-namespace host lists |
//! | DH-HMAC-CHAP keys | [`crate::hostkeys::HostKeys`] | the target's authentication policy |
//! | CDC | [`crate::cdc::CdcMembers`] | the Central Discovery Controller's members and trust list |
//! | mDNS | [`crate::mdns`] (still `Control::sync_mdns`, after the commit) | the records the responder publishes |
//!
//! Three parts are not diffs of the configuration, and keep one shared function that both roads
//! call instead: **namespaces** are opened whole (backend, ANA group, QoS, host list and
//! reservations) by [`crate::build::open_namespace`], at start and when the API adds one, so a
//! namespace is never live without its limits or its mask; **listeners** are bound by the
//! transport (the port a listener gets feeds back into the configuration,
//! [`crate::build::settle_bound_ports`]); **pools** are directories made before namespaces are
//! opened in them ([`crate::pools::ensure_directories`]). Subsystems and their host lists are
//! changed by [`crate::ops`], the target being the authority on who may connect.

use crate::api::ApiError;
use ebof_config::Config;
use nvmf_target::Target;

/// Applies one feature's part of a configuration change to the live target (see the module
/// docs).
pub trait Apply: Send + Sync + std::fmt::Debug {
    /// Make `live` match `new` for this feature (`old`: the configuration before the change; an
    /// empty one at start-up). `new` is valid; an error leaves the change uncommitted.
    fn apply(&self, old: &Config, new: &Config, live: &Target) -> Result<(), ApiError>;
}

/// Run `appliers` in order; the first error stops them.
pub fn all<'a>(
    appliers: impl IntoIterator<Item = &'a dyn Apply>,
    old: &Config,
    new: &Config,
    live: &Target,
) -> Result<(), ApiError> {
    appliers
        .into_iter()
        .try_for_each(|a| a.apply(old, new, live))
}
