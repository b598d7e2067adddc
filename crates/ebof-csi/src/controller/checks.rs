//! The checks of requests: sizes against capacity ranges, volume capabilities, StorageClass
//! parameters, topology, and list pagination.

use super::{DEFAULT_SIZE, GRANULE, MIN_SIZE};
use crate::keys::AuthMode;
use crate::pb;
use crate::pb::volume_capability::{AccessType, access_mode::Mode};
use crate::rpc::invalid;
use ebof_api::QosRequest;
use tonic::Status;

/// Round `n` up to the granule.
pub(super) fn granule(n: u64) -> u64 {
    n.div_ceil(GRANULE).saturating_mul(GRANULE)
}

/// The size to provision for a capacity range, or why none fits.
pub fn size_for(range: Option<&pb::CapacityRange>) -> Result<u64, Status> {
    let (req, lim) = range.map_or((0, 0), |r| (r.required_bytes, r.limit_bytes));
    if req < 0 || lim < 0 {
        return Err(Status::out_of_range(
            "capacity_range: required_bytes and limit_bytes must not be negative",
        ));
    }
    let (req, lim) = (req as u64, lim as u64);
    if lim > 0 && req > lim {
        return Err(Status::out_of_range(format!(
            "capacity_range: required_bytes {req} is above limit_bytes {lim}"
        )));
    }
    let size = if req == 0 {
        if lim == 0 {
            DEFAULT_SIZE
        } else {
            (lim.min(DEFAULT_SIZE) / GRANULE) * GRANULE
        }
    } else {
        granule(req.max(MIN_SIZE))
    };
    if size < MIN_SIZE || (lim > 0 && size > lim) {
        return Err(Status::out_of_range(format!(
            "capacity_range: volumes are multiples of {GRANULE} bytes from {MIN_SIZE}; none fits required {req}, limit {lim}"
        )));
    }
    Ok(size)
}

/// Whether an existing size satisfies a capacity range.
pub(super) fn size_fits(size: u64, range: Option<&pb::CapacityRange>) -> bool {
    let (req, lim) = range.map_or((0, 0), |r| (r.required_bytes.max(0), r.limit_bytes.max(0)));
    size >= req as u64 && (lim == 0 || size <= lim as u64)
}

/// Check one capability: supported access type, file system and mode.
pub(super) fn check_capability(c: &pb::VolumeCapability) -> Result<(), String> {
    let mode = c
        .access_mode
        .as_ref()
        .ok_or("access_mode is required")?
        .mode;
    let mode = Mode::try_from(mode).map_err(|_| format!("access mode {mode} is unknown"))?;
    if mode == Mode::Unknown {
        return Err("access mode is UNKNOWN".into());
    }
    match &c.access_type {
        Some(AccessType::Block(_)) => Ok(()),
        Some(AccessType::Mount(m)) => {
            crate::rpc::fs_type(&m.fs_type)?;
            if matches!(
                mode,
                Mode::MultiNodeMultiWriter | Mode::MultiNodeSingleWriter
            ) {
                return Err(format!(
                    "{} is only for block volumes: ext4 and xfs cannot be mounted on two nodes",
                    mode.as_str_name()
                ));
            }
            Ok(())
        }
        None => Err("access_type (block or mount) is required".into()),
    }
}

pub(super) fn check_capabilities(caps: &[pb::VolumeCapability]) -> Result<(), Status> {
    if caps.is_empty() {
        return Err(invalid("volume_capabilities is required"));
    }
    for (i, c) in caps.iter().enumerate() {
        check_capability(c).map_err(|e| invalid(format!("volume_capabilities[{i}]: {e}")))?;
    }
    Ok(())
}

/// Whether a capability lets a volume be published on one node only.
pub(super) fn single_node(c: Option<&pb::VolumeCapability>) -> bool {
    c.and_then(|c| c.access_mode.as_ref())
        .and_then(|m| Mode::try_from(m.mode).ok())
        .is_some_and(|m| {
            matches!(
                m,
                Mode::SingleNodeWriter
                    | Mode::SingleNodeReaderOnly
                    | Mode::SingleNodeSingleWriter
                    | Mode::SingleNodeMultiWriter
            )
        })
}

/// StorageClass parameters the driver understands.
#[derive(Clone, Debug)]
pub(super) struct Params {
    /// The pool to make volumes in (`pool`); absent: any.
    pub(super) pool: Option<String>,
    /// QoS limits of the volumes (`iops`, `mbps`, …); absent: none.
    pub(super) qos: Option<QosRequest>,
    /// How nodes authenticate (`auth`).
    pub(super) auth: AuthMode,
    /// Copies of the volume (`replicas`): 1, or 2 for a namespace mirrored on two boxes
    /// (issue 34; [`super::mirror`]).
    pub(super) replicas: u8,
    /// Only encrypted pools (`encrypted: "true"`; issue 37, ADR 0029).
    pub(super) encrypted: bool,
}

impl Params {
    /// Whether pool `p` may hold a volume of these parameters: the `pool` named (if any)
    /// and, for `encrypted`, an encrypted pool.
    pub(super) fn fits_pool(&self, p: &ebof_api::PoolView) -> bool {
        self.pool.as_ref().is_none_or(|w| *w == p.name) && (!self.encrypted || p.encrypted)
    }
}

impl Default for Params {
    fn default() -> Params {
        Params {
            pool: None,
            qos: None,
            auth: AuthMode::DEFAULT,
            replicas: 1,
            encrypted: false,
        }
    }
}

pub(super) fn parse_params(
    p: &std::collections::HashMap<String, String>,
) -> Result<Params, Status> {
    let mut out = Params::default();
    let mut qos = QosRequest::default();
    let mut any_qos = false;
    let mut keys: Vec<&String> = p.keys().collect();
    keys.sort();
    for k in keys {
        let v = &p[k];
        if k.starts_with("csi.storage.k8s.io/") {
            continue;
        }
        let num = || {
            v.parse::<i64>().ok().filter(|&n| n >= 0).ok_or_else(|| {
                invalid(format!(
                    "parameter {k}: {v:?} is not a non-negative integer"
                ))
            })
        };
        match k.as_str() {
            "pool" => {
                if !crate::boxes::valid_label(v) {
                    return Err(invalid(format!("parameter pool: {v:?} is not a pool name")));
                }
                out.pool = Some(v.clone());
            }
            "iops" => (qos.iops, any_qos) = (Some(num()?), true),
            "mbps" => (qos.mbps, any_qos) = (Some(num()?), true),
            "readIops" | "read_iops" => (qos.read_iops, any_qos) = (Some(num()?), true),
            "writeIops" | "write_iops" => (qos.write_iops, any_qos) = (Some(num()?), true),
            "readMbps" | "read_mbps" => (qos.read_mbps, any_qos) = (Some(num()?), true),
            "writeMbps" | "write_mbps" => (qos.write_mbps, any_qos) = (Some(num()?), true),
            "auth" => out.auth = AuthMode::parse(v).map_err(invalid)?,
            "replicas" => {
                out.replicas = match v.trim() {
                    "1" => 1,
                    "2" => 2,
                    _ => {
                        return Err(invalid(format!(
                            "parameter replicas: {v:?} is not a number of copies the driver makes: \"1\" (the default) or \"2\" (mirrored on two boxes)"
                        )));
                    }
                }
            }
            "encrypted" => {
                out.encrypted = match v.as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(invalid(format!(
                            "parameter encrypted: {v:?} is not \"true\" (only encrypted pools) or \"false\" (the default)"
                        )));
                    }
                }
            }
            _ => {
                return Err(invalid(format!(
                    "unknown parameter {k:?}: the driver takes pool, iops, mbps, readIops, writeIops, readMbps, writeMbps, auth, replicas, encrypted"
                )));
            }
        }
    }
    if any_qos {
        out.qos = Some(qos);
    }
    Ok(out)
}

/// The QoS keys a VolumeAttributesClass may change (`mutable_parameters` of CreateVolume and
/// ControllerModifyVolume): the StorageClass's QoS keys, read by [`parse_params`]; `None`
/// when there are none. Any other key (`pool`, `auth`, `replicas`: fixed when the volume is
/// made) is INVALID_ARGUMENT, and so is a limit the box would refuse.
pub(super) fn parse_mutable(
    p: &std::collections::HashMap<String, String>,
) -> Result<Option<QosRequest>, Status> {
    let mut keys: Vec<&String> = p.keys().collect();
    keys.sort();
    for k in keys {
        if matches!(k.as_str(), "pool" | "auth" | "replicas" | "encrypted") {
            return Err(invalid(format!(
                "mutable parameter {k:?} cannot change on a volume: the mutable parameters are iops, mbps, readIops, writeIops, readMbps, writeMbps"
            )));
        }
    }
    let qos = parse_params(p)
        .map_err(|e| invalid(format!("mutable parameters: {}", e.message())))?
        .qos;
    if let Some(q) = &qos {
        q.check("")
            .map_err(|e| invalid(format!("mutable parameters: {e}")))?;
    }
    Ok(qos)
}

/// `over`'s limits on top of `base`'s: a key `over` gives replaces the one in `base`.
pub(super) fn overlay(base: Option<&QosRequest>, over: &QosRequest) -> QosRequest {
    let b = base.cloned().unwrap_or_default();
    QosRequest {
        iops: over.iops.or(b.iops),
        mbps: over.mbps.or(b.mbps),
        read_iops: over.read_iops.or(b.read_iops),
        write_iops: over.write_iops.or(b.write_iops),
        read_mbps: over.read_mbps.or(b.read_mbps),
        write_mbps: over.write_mbps.or(b.write_mbps),
    }
}

/// The zones a topology requirement allows (requisite), in preference order; empty: any.
pub(super) fn zones(req: Option<&pb::TopologyRequirement>) -> (Vec<String>, Vec<String>) {
    let pick = |v: &[pb::Topology]| -> Vec<String> {
        v.iter()
            .filter_map(|t| t.segments.get(crate::ZONE_KEY).cloned())
            .collect()
    };
    match req {
        Some(r) => (pick(&r.requisite), pick(&r.preferred)),
        None => (Vec::new(), Vec::new()),
    }
}

/// A token for list pagination: the index of the next entry.
pub(super) fn page<T: Clone>(all: &[T], max: i32, token: &str) -> Result<(Vec<T>, String), Status> {
    if max < 0 {
        return Err(invalid("max_entries must not be negative"));
    }
    let start = if token.is_empty() {
        0
    } else {
        token
            .parse::<usize>()
            .ok()
            .filter(|&s| s <= all.len())
            .ok_or_else(|| Status::aborted(format!("starting_token {token:?} is not valid")))?
    };
    let end = if max == 0 {
        all.len()
    } else {
        (start + max as usize).min(all.len())
    };
    let next = if end < all.len() {
        end.to_string()
    } else {
        String::new()
    };
    Ok((all[start..end].to_vec(), next))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(req: i64, lim: i64) -> pb::CapacityRange {
        pb::CapacityRange {
            required_bytes: req,
            limit_bytes: lim,
        }
    }

    #[test]
    fn sizes_follow_the_capacity_range() {
        assert_eq!(size_for(None).unwrap(), DEFAULT_SIZE);
        assert_eq!(size_for(Some(&range(0, 0))).unwrap(), DEFAULT_SIZE);
        assert_eq!(size_for(Some(&range(10 << 20, 0))).unwrap(), 10 << 20);
        assert_eq!(size_for(Some(&range(1, 0))).unwrap(), MIN_SIZE);
        assert_eq!(
            size_for(Some(&range((10 << 20) + 1, 0))).unwrap(),
            (10 << 20) + 4096
        );
        assert_eq!(size_for(Some(&range(0, 64 << 20))).unwrap(), 64 << 20);
        assert_eq!(size_for(Some(&range(0, 5 << 30))).unwrap(), DEFAULT_SIZE);
        for bad in [
            range(-1, 0),
            range(0, -1),
            range(10, 5),
            range(0, 4096),
            range(5000, 6000),
        ] {
            assert_eq!(
                size_for(Some(&bad)).unwrap_err().code(),
                tonic::Code::OutOfRange,
                "{bad:?}"
            );
        }
        assert!(size_fits(10 << 20, Some(&range(10 << 20, 0))));
        assert!(!size_fits(10 << 20, Some(&range(20 << 20, 0))));
        assert!(!size_fits(10 << 20, Some(&range(0, 5 << 20))));
    }

    #[test]
    fn parameters_are_checked() {
        let p = |kv: &[(&str, &str)]| {
            parse_params(
                &kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        let ok = p(&[
            ("pool", "fast"),
            ("iops", "5000"),
            ("csi.storage.k8s.io/pvc/name", "x"),
        ])
        .unwrap();
        assert_eq!(ok.pool.as_deref(), Some("fast"));
        assert_eq!(ok.qos.unwrap().iops, Some(5000));
        assert!(p(&[]).unwrap().qos.is_none());
        assert_eq!(p(&[]).unwrap().auth, AuthMode::Dhchap, "the default");
        assert_eq!(p(&[("auth", "none")]).unwrap().auth, AuthMode::None);
        let tls = p(&[("auth", "tls")]).unwrap_err();
        assert_eq!(tls.code(), tonic::Code::InvalidArgument);
        assert!(tls.message().contains("not supported"), "{tls:?}");
        assert_eq!(p(&[]).unwrap().replicas, 1, "the default");
        assert_eq!(p(&[("replicas", "1")]).unwrap().replicas, 1);
        assert_eq!(p(&[("replicas", "2")]).unwrap().replicas, 2);
        assert!(!p(&[]).unwrap().encrypted, "the default");
        assert!(p(&[("encrypted", "true")]).unwrap().encrypted);
        assert!(!p(&[("encrypted", "false")]).unwrap().encrypted);
        // Both copies of a replicated volume in encrypted pools (each box its own key).
        let both = p(&[("encrypted", "true"), ("replicas", "2")]).unwrap();
        assert!(both.encrypted && both.replicas == 2, "{both:?}");
        let yes = p(&[("encrypted", "yes")]).unwrap_err();
        assert!(yes.message().contains("parameter encrypted"), "{yes:?}");
        for bad in [
            &[("pool", "")][..],
            &[("iops", "-1")],
            &[("mbps", "x")],
            &[("colour", "red")],
            &[("replicas", "3")],
            &[("replicas", "0")],
            &[("replicas", "two")],
            &[("replicas", "")],
            &[("encrypted", "yes")],
            &[("encrypted", "TRUE")],
            &[("encrypted", "")],
            &[("encrypted", "true"), ("replicas", "3")],
        ] {
            assert_eq!(
                p(bad).unwrap_err().code(),
                tonic::Code::InvalidArgument,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn mutable_parameters_are_qos_keys_only() {
        let p = |kv: &[(&str, &str)]| {
            parse_mutable(
                &kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        assert!(p(&[]).unwrap().is_none());
        let q = p(&[("iops", "100"), ("writeMbps", "5")]).unwrap().unwrap();
        assert_eq!((q.iops, q.write_mbps, q.mbps), (Some(100), Some(5), None));
        for bad in [
            &[("pool", "fast")][..],
            &[("auth", "none")],
            &[("replicas", "2")],
            &[("encrypted", "true")],
            &[("colour", "red")],
            &[("iops", "-5")],
            &[("iops", "lots")],
            &[("iops", "99999999999999")],
        ] {
            let e = p(bad).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad:?}");
            assert!(e.message().contains(bad[0].0), "{bad:?}: {e:?}");
        }
        let base = QosRequest {
            iops: Some(10),
            mbps: Some(20),
            ..Default::default()
        };
        let over = QosRequest {
            mbps: Some(0),
            read_iops: Some(5),
            ..Default::default()
        };
        let m = overlay(Some(&base), &over);
        assert_eq!(
            (m.iops, m.mbps, m.read_iops, m.write_iops),
            (Some(10), Some(0), Some(5), None)
        );
    }

    #[test]
    fn capabilities_are_checked() {
        use pb::volume_capability::{AccessMode, BlockVolume, MountVolume};
        let cap = |block: bool, fs: &str, mode: Mode| pb::VolumeCapability {
            access_type: Some(if block {
                AccessType::Block(BlockVolume {})
            } else {
                AccessType::Mount(MountVolume {
                    fs_type: fs.into(),
                    ..Default::default()
                })
            }),
            access_mode: Some(AccessMode { mode: mode as i32 }),
        };
        assert!(check_capability(&cap(false, "", Mode::SingleNodeWriter)).is_ok());
        assert!(check_capability(&cap(false, "xfs", Mode::MultiNodeReaderOnly)).is_ok());
        assert!(check_capability(&cap(true, "", Mode::MultiNodeMultiWriter)).is_ok());
        assert!(check_capability(&cap(false, "ext4", Mode::MultiNodeMultiWriter)).is_err());
        assert!(check_capability(&cap(false, "zfs", Mode::SingleNodeWriter)).is_err());
        assert!(check_capability(&cap(true, "", Mode::Unknown)).is_err());
        assert!(check_capabilities(&[]).is_err());
        assert!(single_node(Some(&cap(false, "", Mode::SingleNodeWriter))));
        assert!(!single_node(Some(&cap(
            true,
            "",
            Mode::MultiNodeMultiWriter
        ))));
    }

    #[test]
    fn pages_walk_the_list_and_bad_tokens_abort() {
        let all: Vec<u32> = (0..5).collect();
        let (a, t) = page(&all, 2, "").unwrap();
        assert_eq!((a, t.as_str()), (vec![0, 1], "2"));
        let (b, t) = page(&all, 2, &t).unwrap();
        assert_eq!((b, t.as_str()), (vec![2, 3], "4"));
        let (c, t) = page(&all, 2, &t).unwrap();
        assert_eq!((c, t.as_str()), (vec![4], ""));
        assert_eq!(page(&all, 0, "").unwrap().0.len(), 5);
        assert_eq!(page(&all, 1, "x").unwrap_err().code(), tonic::Code::Aborted);
        assert_eq!(page(&all, 1, "9").unwrap_err().code(), tonic::Code::Aborted);
        assert_eq!(
            page(&all, -1, "").unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }
}
