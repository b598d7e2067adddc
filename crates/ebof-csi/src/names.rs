//! Names the driver derives, all stable functions of the CSI names so that a retried or
//! racing request lands on the same objects: the subsystem NQN of a volume (which is also
//! its volume ID), the namespace UUID, and the box-side name of a snapshot.

use sha2::{Digest, Sha256};

/// Every volume's subsystem NQN starts with this; nothing else on a box does.
pub const NQN_PREFIX: &str = "nqn.2026-11.io.ebof:csi:";
/// Every snapshot the driver takes is named with this prefix on its box.
pub const SNAPSHOT_PREFIX: &str = "csi-";
/// Namespace ID of a volume's data in its subsystem.
pub const NSID: u32 = 1;

/// UUID namespace for volume UUIDs (UUID v5 of the volume name).
const VOLUME_UUID_NS: uuid::Uuid = uuid::uuid!("6c1e0b2a-0e1f-4f5b-9a5e-eb0f00c51000");

/// Up to `max` characters of `name` a person can recognise, lowercased, everything outside
/// `[a-z0-9.-]` as `-`.
fn slug(name: &str, max: usize) -> String {
    name.chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(max)
        .collect()
}

/// 16 hex digits of SHA-256 of `name`: what makes a derived name unique.
fn digest16(name: &str) -> String {
    let d = Sha256::digest(name.as_bytes());
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The subsystem NQN (and volume ID) of CSI volume `name`: readable prefix of the name, then
/// a digest of the whole of it; at most 81 bytes, well inside CSI's 128-byte ID limit.
pub fn volume_nqn(name: &str) -> String {
    format!("{NQN_PREFIX}{}-{}", slug(name, 40), digest16(name))
}

/// Whether `id` is a volume ID this driver could have made.
pub fn is_volume_id(id: &str) -> bool {
    derived_after(id, NQN_PREFIX)
}

/// Whether `id` is `prefix` followed by what [`slug`] and [`digest16`] make: 1 to 57 of
/// `[a-z0-9.-]`.
fn derived_after(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix).is_some_and(|rest| {
        !rest.is_empty()
            && rest.len() <= 57
            && rest
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
    })
}

/// The namespace UUID of CSI volume `name` (UUID v5), the same on every attempt: the node
/// finds the block device by it.
pub fn volume_uuid(name: &str) -> String {
    uuid::Uuid::new_v5(&VOLUME_UUID_NS, name.as_bytes())
        .hyphenated()
        .to_string()
}

/// The box-side name (and snapshot ID) of CSI snapshot `name`: `[A-Za-z0-9._-]`, at most 61
/// characters, as the box's snapshot names require.
pub fn snapshot_name(name: &str) -> String {
    format!("{SNAPSHOT_PREFIX}{}-{}", slug(name, 40), digest16(name))
}

/// The box-side name of the temporary snapshot a clone of a volume is made from, for the
/// clone whose volume ID is `volume_id` (`csiclone-` and 16 hex digits): one per clone, so a
/// retried CreateVolume finds it; never a snapshot ID ([`is_snapshot_id`] refuses it), so
/// ListSnapshots does not show it.
pub fn clone_point_name(volume_id: &str) -> String {
    format!("csiclone-{}", digest16(volume_id))
}

/// Whether `id` is a snapshot ID this driver could have made.
pub fn is_snapshot_id(id: &str) -> bool {
    derived_after(id, SNAPSHOT_PREFIX)
}

/// A CSI name (volume or snapshot) the spec allows: not empty, at most 128 bytes here (the
/// IDs we derive have their own bound, but Kubernetes names are far shorter), no control
/// characters other than common whitespace.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is required".into());
    }
    if name.len() > 128 {
        return Err(format!("the name is {} bytes; at most 128", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| matches!(c as u32, 0x00..=0x08 | 0x0b | 0x0c | 0x0e..=0x1f | 0x7f..=0x9f))
    {
        return Err(format!(
            "the name holds control character U+{:04X}",
            c as u32
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_are_stable_distinct_and_recognised() {
        let a = volume_nqn("pvc-0b5d2f4e-1111-4222-8333-944455556666");
        assert_eq!(a, volume_nqn("pvc-0b5d2f4e-1111-4222-8333-944455556666"));
        assert!(a.starts_with("nqn.2026-11.io.ebof:csi:pvc-0b5d2f4e-1111-4222-8333-94445"));
        assert!(a.len() <= 81, "{a}");
        assert!(is_volume_id(&a));
        assert_ne!(
            volume_nqn("Vol_1"),
            volume_nqn("vol-1"),
            "the digest keeps them apart"
        );
        let long = "x".repeat(128);
        assert!(volume_nqn(&long).len() <= 81);
        assert!(is_volume_id(&volume_nqn("ünïcödé name/with spaces")));
        assert!(!is_volume_id("nqn.2026-11.io.ebof:fleet-box1"));
        assert!(!is_volume_id(""));
        assert!(!is_volume_id(NQN_PREFIX));

        let s = snapshot_name("snapshot-1234");
        assert!(s.len() <= 61 && is_snapshot_id(&s), "{s}");
        assert!(!is_snapshot_id("nightly"));
        let c = clone_point_name(&volume_nqn("pvc-clone"));
        assert_eq!(c, clone_point_name(&volume_nqn("pvc-clone")));
        assert_eq!(c.len(), 25);
        assert!(!is_snapshot_id(&c), "a clone's point is never listed: {c}");

        assert_eq!(volume_uuid("a"), volume_uuid("a"));
        assert_ne!(volume_uuid("a"), volume_uuid("b"));
        assert_eq!(volume_uuid("a").len(), 36);
    }

    #[test]
    fn names_are_checked_as_the_spec_says() {
        assert!(check_name("pvc-1").is_ok());
        assert!(check_name("with space\tand tab").is_ok());
        assert!(check_name("").unwrap_err().contains("required"));
        assert!(check_name("bad\u{1}").unwrap_err().contains("U+0001"));
        assert!(check_name(&"n".repeat(129)).unwrap_err().contains("129"));
    }
}

/// Keys of the volume context CreateVolume returns and the node reads.
pub mod ctx {
    /// The volume's subsystem NQN.
    pub const NQN: &str = "nqn";
    /// The namespace UUID (how the node finds the block device).
    pub const UUID: &str = "uuid";
    /// The box's NVMe/TCP listeners, `tcp:ADDR:PORT` separated by commas (IPv6 in brackets).
    pub const LISTENERS: &str = "listeners";
    /// The box that holds the volume (for people; the node does not need it); a replicated
    /// volume's two boxes, the primary's first, separated by a comma.
    pub const BOX: &str = "box";
    /// `2` for a replicated volume (its listeners are those of both boxes); absent: one copy.
    pub const REPLICAS: &str = "replicas";
    /// The pool on that box.
    pub const POOL: &str = "pool";
    /// How the node authenticates ([`crate::keys::AuthMode`]: `none`, `dhchap`); absent:
    /// the default, `dhchap`.
    pub const AUTH: &str = "auth";
}

/// Keys of the publish context ControllerPublishVolume returns for one node (kubelet passes
/// it to NodeStageVolume). Secret values: never logged.
pub mod publish {
    /// The node's DH-HMAC-CHAP secret for this volume (`nvme connect --dhchap-secret`).
    pub const DHCHAP_SECRET: &str = "dhchapSecret";
    /// The box's DH-HMAC-CHAP secret for this volume (`--dhchap-ctrl-secret`).
    pub const DHCHAP_CTRL_SECRET: &str = "dhchapCtrlSecret";
}

/// The start of every read-only marker host NQN.
pub const RO_MARKER: &str = "nqn.2014-08.io.ebof.csi:readonly:";

/// The marker host NQN recording that `node` has the volume read-only.
pub fn ro_marker(node: &str) -> String {
    let ns = uuid::Uuid::from_u128(0x6562_6f66_2d63_7369_2d72_6561_646f_6e6c);
    format!("{RO_MARKER}{}", uuid::Uuid::new_v5(&ns, node.as_bytes()))
}

/// The host NQN of a replicated volume's replication link (the boxes' default `[mirror]
/// link_hostnqn`): a box adds it to the hosts of a subsystem with a mirrored namespace. It is
/// no node.
pub const MIRROR_LINK_NQN: &str = "nqn.2026-11.io.ebof:mirror-link";

/// The nodes of a host list (without read-only markers and the replication link's host).
pub fn nodes(hosts: &[String]) -> Vec<String> {
    hosts
        .iter()
        .filter(|h| !h.starts_with(RO_MARKER) && h.as_str() != MIRROR_LINK_NQN)
        .cloned()
        .collect()
}

/// One NVMe/TCP path of a volume: address and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Path {
    /// IP address (no brackets).
    pub addr: String,
    /// TCP port.
    pub port: u16,
}

/// Format listeners for [`ctx::LISTENERS`].
pub fn format_listeners(paths: &[Path]) -> String {
    paths
        .iter()
        .map(|p| {
            if p.addr.contains(':') {
                format!("tcp:[{}]:{}", p.addr, p.port)
            } else {
                format!("tcp:{}:{}", p.addr, p.port)
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Parse [`ctx::LISTENERS`]; a message naming the bad entry otherwise.
pub fn parse_listeners(s: &str) -> Result<Vec<Path>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let rest = item
            .strip_prefix("tcp:")
            .ok_or_else(|| format!("listener {item:?}: only tcp:ADDR:PORT is understood"))?;
        let (addr, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("listener {item:?}: no port"))?;
        let addr = addr.trim_start_matches('[').trim_end_matches(']');
        let ip: std::net::IpAddr = addr
            .parse()
            .map_err(|_| format!("listener {item:?}: {addr:?} is not an IP address"))?;
        let port: u16 = port
            .parse()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("listener {item:?}: bad port"))?;
        out.push(Path {
            addr: ip.to_string(),
            port,
        });
    }
    if out.is_empty() {
        return Err("no listener".into());
    }
    Ok(out)
}

#[cfg(test)]
mod listener_tests {
    use super::*;

    #[test]
    fn listeners_round_trip_and_bad_ones_are_named() {
        let p = vec![
            Path {
                addr: "10.0.0.1".into(),
                port: 4420,
            },
            Path {
                addr: "fd00::1".into(),
                port: 4421,
            },
        ];
        let s = format_listeners(&p);
        assert_eq!(s, "tcp:10.0.0.1:4420,tcp:[fd00::1]:4421");
        assert_eq!(parse_listeners(&s).unwrap(), p);
        for bad in [
            "",
            "rdma:1.2.3.4:4420",
            "tcp:1.2.3.4",
            "tcp:host:4420",
            "tcp:1.2.3.4:0",
        ] {
            assert!(parse_listeners(bad).is_err(), "{bad}");
        }
    }
}
