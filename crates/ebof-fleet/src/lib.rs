//! # ebof-fleet — the fleet's discovery: how a box makes itself known, and the controller that
//! gathers what every box shows
//!
//! - [`cdc`]: a Central Discovery Controller (NVMe TP 8010), one discovery service that shows
//!   each host the NVM subsystems every member of the fleet would show *that host* ([`Cdc`]);
//! - [`announce`]: the member side, a box registering its discovery service with a CDC by DIM
//!   pull registration ([`Announcer`]);
//! - [`mdns`]: the member side on its link, the discovery listeners published over mDNS /
//!   DNS-SD (NVMe TP 8009) for hosts with an empty configuration ([`mdns::Responder`]).
//!
//! No `unsafe` but one function, [`mdns::interfaces`] (`getifaddrs(3)`).

#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod announce;
pub mod cdc;
pub mod mdns;

pub use announce::{AnnounceConfig, Announcer};
pub use cdc::{Cdc, CdcConfig, DEFAULT_MEMBER_PORT, MemberStatus, Trusted, default_hostnqn};
pub use nvmf_host::DhchapKeys;

/// First reconnect delay (a CDC to its members, an announcer to its CDC); doubled after every
/// failure up to the configured maximum.
const BACKOFF_MIN: std::time::Duration = std::time::Duration::from_millis(250);

/// A Host Identifier for `hostnqn`, the same every time (two FNV-1a hashes): the CDC reads a
/// member's log on behalf of a host whose real Host Identifier it does not know.
pub(crate) fn derived_hostid(hostnqn: &str) -> [u8; 16] {
    let fnv = |seed: u64| {
        hostnqn.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
        })
    };
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_be_bytes());
    id[8..].copy_from_slice(&fnv(0x6c62_272e_07bb_0142).to_be_bytes());
    id
}
