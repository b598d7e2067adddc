//! Routes, as the server mounts them and the client builds them (version 1, `/v1/…`).

/// Path prefix of this API version.
pub const PREFIX: &str = "/v1";

/// `GET`: the running state ([`crate::State`]).
pub const STATE: &str = "/v1/state";
/// `GET`: counters ([`crate::Stats`]).
pub const STATS: &str = "/v1/stats";
/// `GET`: Prometheus text exposition (also on `--metrics-listen`).
pub const METRICS: &str = "/metrics";
/// `POST` [`crate::SubsystemRequest`]: add a subsystem (no namespaces yet).
pub const SUBSYSTEMS: &str = "/v1/subsystems";
/// `DELETE`: remove a subsystem (its controllers are disconnected).
pub const SUBSYSTEM: &str = "/v1/subsystems/{nqn}";
/// `POST` [`crate::HostRequest`]: allow a host; `DELETE …/hosts/{hostnqn}`: deny it.
pub const HOSTS: &str = "/v1/subsystems/{nqn}/hosts";
/// `DELETE`: deny a host.
pub const HOST: &str = "/v1/subsystems/{nqn}/hosts/{hostnqn}";
/// `PUT` [`crate::hostkeys::HostKeyRequest`]: the host's DH-HMAC-CHAP keys on this
/// subsystem (live, never shown); `DELETE`: remove them.
pub const HOST_DHCHAP: &str = "/v1/subsystems/{nqn}/hosts/{hostnqn}/dhchap";
/// `PUT` [`crate::AllowAnyHostRequest`].
pub const ALLOW_ANY_HOST: &str = "/v1/subsystems/{nqn}/allow_any_host";
/// `DELETE`: disconnect a controller (all its queues close).
pub const CONTROLLER: &str = "/v1/controllers/{cntlid}";
/// `POST` [`crate::NamespaceRequest`]: add a namespace to a running subsystem.
pub const NAMESPACES: &str = "/v1/subsystems/{nqn}/namespaces";
/// `DELETE`: remove a namespace; `PUT` [`crate::ResizeRequest`] …`/size`: resize it.
pub const NAMESPACE: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}";
/// `PUT` [`crate::ResizeRequest`]: change a namespace's size.
pub const NAMESPACE_SIZE: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}/size";
/// `POST` [`crate::ListenerRequest`]: start listening.
pub const LISTENERS: &str = "/v1/listeners";
/// `DELETE`: stop listening on `ADDR:PORT` (connections made through it stay).
pub const LISTENER: &str = "/v1/listeners/{address}";
/// `POST` [`crate::SaveRequest`]: write the running configuration as TOML.
pub const SAVE: &str = "/v1/save";
/// `PUT` [`crate::AnaRequest`]: set the ANA state of a group on a listener.
pub const ANA: &str = "/v1/ana";
/// `GET`: what is published over mDNS ([`crate::MdnsView`]); `PUT`
/// [`crate::MdnsRequest`]: switch publishing on, off or to auto.
pub const MDNS: &str = "/v1/mdns";
/// Per-host namespace masking: `PUT` [`crate::NamespaceHostsRequest`] restricts the
/// namespace to exactly those hosts; `POST` [`crate::HostRequest`] attaches one more host;
/// `DELETE` makes it visible to every host the subsystem admits again.
pub const NAMESPACE_HOSTS: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}/hosts";
/// `DELETE`: detach a host from a namespace (the namespace disappears from its view).
pub const NAMESPACE_HOST: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}/hosts/{hostnqn}";
/// `PUT`: set a namespace's QoS limits ([`crate::QosRequest`]); `DELETE`: remove them.
pub const NAMESPACE_QOS: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}/qos";
/// `GET`: a mirrored namespace's replication state.
pub const NAMESPACE_MIRROR: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}/mirror";
/// `POST`: promote the secondary copy on this box to primary.
pub const NAMESPACE_MIRROR_PROMOTE: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}/mirror/promote";
/// `GET`: the referrals served ([`crate::Referrals`]); `POST` [`crate::ReferralRequest`]:
/// add one.
pub const REFERRALS: &str = "/v1/discovery/referrals";
/// `DELETE`: stop referring hosts to `ADDR:PORT`.
pub const REFERRAL: &str = "/v1/discovery/referrals/{address}";
/// `GET`: the DIM registrations hosts made (`Vec<`[`crate::DimRegistrationView`]`>`).
pub const REGISTRATIONS: &str = "/v1/discovery/registrations";
/// `GET`: the Central Discovery Controller's members ([`crate::CdcView`]).
pub const CDC: &str = "/v1/cdc";
/// `POST` [`crate::CdcMemberRequest`]: add a member to the Central Discovery Controller.
pub const CDC_MEMBERS: &str = "/v1/cdc/members";
/// `DELETE`: remove member `{address}` (`ADDR:PORT`) from the Central Discovery Controller.
pub const CDC_MEMBER: &str = "/v1/cdc/members/{address}";
/// `GET`: who may announce itself to the Central Discovery Controller
/// ([`crate::CdcTrusted`]); `PUT` [`crate::CdcTrusted`]: replace the list (saved as
/// `[cdc] trusted`).
pub const CDC_TRUSTED: &str = "/v1/cdc/trusted";
/// `POST` [`crate::SnapshotRequest`]: take a snapshot of a file namespace
/// ([`crate::SnapshotView`]).
pub const NAMESPACE_SNAPSHOTS: &str = "/v1/subsystems/{nqn}/namespaces/{nsid}/snapshots";
/// `GET`: every snapshot the target knows (`Vec<`[`crate::SnapshotView`]`>`).
pub const SNAPSHOTS: &str = "/v1/snapshots";
/// `DELETE`: delete a snapshot (its file and manifest; clones made from it stay).
pub const SNAPSHOT: &str = "/v1/snapshots/{name}";
/// `POST` [`crate::CloneRequest`]: a writable clone of the snapshot, added as a new file
/// namespace ([`crate::CloneMade`]).
pub const SNAPSHOT_CLONES: &str = "/v1/snapshots/{name}/clones";
/// `GET`: what a support bundle needs from the box ([`crate::SupportView`]: versions, the
/// running configuration with its secrets redacted).
pub const SUPPORT: &str = "/v1/support";
/// `GET`: the storage pools (`Vec<`[`crate::PoolView`]`>`).
pub const POOLS: &str = "/v1/pools";

/// `route` with each `{name}` replaced by the percent-encoded value, in order.
pub fn fill(route: &str, values: &[&str]) -> String {
    let mut out = String::with_capacity(route.len() + 64);
    let mut rest = route;
    let mut values = values.iter();
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        out.push_str(&percent_encode(values.next().copied().unwrap_or("")));
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

/// Percent-encode a path segment (RFC 3986: everything but unreserved characters and `:`,
/// `@`, which NQNs use and paths allow).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' | b'@' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_fill_encodes_segments() {
        assert_eq!(
            fill(HOST, &["nqn.2026-11.io.ebof:a", "nqn.x y/z"]),
            "/v1/subsystems/nqn.2026-11.io.ebof:a/hosts/nqn.x%20y%2Fz"
        );
        assert_eq!(fill(CONTROLLER, &["7"]), "/v1/controllers/7");
        assert_eq!(fill(STATE, &[]), STATE);
    }
}
