//! What each request does to a [`Target`], free of HTTP: read views of the running state and
//! the changes, each validated first and applied whole (one snapshot swap) or not at all.

use crate::api::{
    self, ApiError, ControllerView, Disconnected, LatencyPercentiles, ListenerView, NamespaceStats,
    NamespaceView, State, Stats, SubsystemRemoved, SubsystemRequest, SubsystemView, codes,
};
use crate::lookup::unknown_subsystem;
use ebof_config::codes as cfg;
use nvmf_target::{ControllerKind, Namespace, Subsystem, Target, UpdateError};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// NQN of the discovery subsystem (what a discovery controller reports).
const DISCOVERY_NQN: &str = ebof_config::DISCOVERY_NQN;

pub(crate) fn subsystem_view(s: &Subsystem) -> SubsystemView {
    SubsystemView {
        nqn: s.nqn.clone(),
        serial: s.serial.clone(),
        model: s.model.clone(),
        allow_any_host: s.allow_any_host,
        hosts: s.hosts.clone(),
        namespaces: s
            .namespaces
            .iter()
            .map(|n| {
                let mut v = namespace_view(n, None);
                v.hosts = s.ns_host_list(n.nsid).map(<[String]>::to_vec);
                v
            })
            .collect(),
    }
}

/// A namespace as the API shows it; `path` comes from the configuration (file, block).
pub(crate) fn namespace_view(n: &Namespace, path: Option<String>) -> NamespaceView {
    NamespaceView {
        nsid: n.nsid,
        backend: n.backend.kind().to_string(),
        size: n.backend.size(),
        block_size: n.block_size,
        uuid: api::uuid_string(&n.uuid),
        nguid: api::hex(&n.nguid()),
        eui64: api::hex(&n.eui64()),
        path,
        reservation: reservation_view(n),
        ana_group: n.ana_group(),
        hosts: None,
        thin: n.backend.thin(),
        allocated_bytes: n.backend.allocated_bytes(),
        filesystem: n.backend.fs_space().map(|f| api::FsSpaceView {
            total_bytes: f.total_bytes,
            available_bytes: f.available_bytes,
            fsid: f.fsid,
        }),
        qos: crate::qos::qos_view(n),
        mirror: crate::mirror::view_of(n),
        encrypted: n.backend.encrypted(),
    }
}

/// The reservation state of `n`, if there is any to show.
fn reservation_view(n: &Namespace) -> Option<api::ReservationView> {
    let t = n.resv.snapshot();
    if t.regs.is_empty() && t.reservation.is_none() && !t.ptpl {
        return None;
    }
    Some(api::ReservationView {
        generation: t.generation,
        rtype: t.reservation.map_or(0, |r| r.rtype),
        holder: t.reservation.map(|r| api::hex(&r.holder)),
        ptpl: t.ptpl,
        registrants: t
            .regs
            .iter()
            .map(|r| api::RegistrantView {
                hostid: api::hex(&r.host),
                key: format!("{:#018x}", r.key),
            })
            .collect(),
    })
}

/// The API view of live namespace `n` configured as `c` (path and host list from the
/// configuration).
pub(crate) fn configured_view(n: &Namespace, c: &ebof_config::Namespace) -> NamespaceView {
    let mut v = namespace_view(n, c.backend.path().map(|p| p.display().to_string()));
    v.hosts = c.hosts.clone();
    v
}

/// The answer to a namespace change: live namespace `n` of `nqn`, configured as `c`.
pub(crate) fn namespace_changed(
    nqn: &str,
    n: &Namespace,
    c: &ebof_config::Namespace,
) -> api::NamespaceChanged {
    api::NamespaceChanged {
        subsystem: nqn.to_string(),
        namespace: configured_view(n, c),
    }
}

/// `GET /v1/state`.
/// A listener's TLS mode as the API and the configuration name it.
pub fn tls_name(t: nvmf_target::ListenerTls) -> &'static str {
    match t {
        nvmf_target::ListenerTls::Off => "off",
        nvmf_target::ListenerTls::Optional => "optional",
        nvmf_target::ListenerTls::Required => "required",
    }
}

/// `GET /v1/state` of `t`: subsystems, listeners, live controllers and non-optimized ANA states.
pub fn state(t: &Target) -> State {
    State {
        version: env!("CARGO_PKG_VERSION").to_string(),
        subsystems: t.subsystems().iter().map(|s| subsystem_view(s)).collect(),
        listeners: t
            .listeners()
            .iter()
            .map(|l| ListenerView {
                address: l.addr.to_string(),
                portid: l.portid,
                discovery: false,
                tls: tls_name(l.tls).into(),
                transport: match l.transport {
                    nvmf_target::Transport::Tcp => "tcp".into(),
                    nvmf_target::Transport::Rdma => "rdma".into(),
                },
            })
            .collect(),
        controllers: t
            .controllers()
            .iter()
            .map(|c| {
                let (kind, subsystem) = match &c.kind {
                    ControllerKind::Io(s) => ("io", s.load().nqn.clone()),
                    ControllerKind::Discovery => ("discovery", DISCOVERY_NQN.to_string()),
                };
                let kato_ms = c
                    .state()
                    .kato
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                ControllerView {
                    cntlid: c.cntlid.0,
                    kind: kind.to_string(),
                    subsystem,
                    hostnqn: c.hostnqn.clone(),
                    kato_ms,
                    io_queues: c.io_queue_count(),
                    listener: c.local_addr().map(|a| a.to_string()),
                }
            })
            .collect(),
        ana: crate::ana::views(t),
        mdns: None,
        referrals: crate::referrals::list(t),
        registrations: crate::referrals::registrations(t),
        cdc: None,
        snapshots: Vec::new(),
        pools: Vec::new(),
    }
}

/// Percentiles of a latency histogram, `None` when it is empty.
pub fn percentiles(h: &nvmf_target::latency::LatencySnapshot) -> Option<LatencyPercentiles> {
    let count = h.count();
    let us = |q: f64| h.quantile(q).map_or(0.0, |s| s * 1e6);
    (count > 0).then(|| LatencyPercentiles {
        count,
        mean_us: h.sum_secs * 1e6 / count as f64,
        p50_us: us(0.5),
        p99_us: us(0.99),
        p999_us: us(0.999),
        p9999_us: us(0.9999),
        sum_us: h.sum_secs * 1e6,
        buckets: h
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| ebof_api::LatencyBucket {
                le_us: nvmf_target::latency::upper_bound_secs(i) * 1e6,
                count: *c,
            })
            .collect(),
    })
}

/// `GET /v1/stats`.
pub fn stats(t: &Target) -> Stats {
    let mut namespaces = Vec::new();
    for s in t.subsystems().iter() {
        for n in &s.namespaces {
            let st = &n.stats;
            let backend_errors = nvmf_target::FailureClass::ALL
                .iter()
                .map(|c| {
                    (
                        c.name().to_string(),
                        st.backend_errors[*c as usize].load(Ordering::Relaxed),
                    )
                })
                .filter(|(_, v)| *v > 0)
                .collect();
            namespaces.push(NamespaceStats {
                subsystem: s.nqn.clone(),
                nsid: n.nsid,
                read_commands: st.read_cmds.load(Ordering::Relaxed),
                write_commands: st.write_cmds.load(Ordering::Relaxed),
                bytes_read: st.bytes_read.load(Ordering::Relaxed),
                bytes_written: st.bytes_written.load(Ordering::Relaxed),
                media_errors: st.media_errors.load(Ordering::Relaxed),
                read_latency: percentiles(&st.read_latency.snapshot()),
                write_latency: percentiles(&st.write_latency.snapshot()),
                backend_errors,
            });
        }
    }
    let controllers = t.controllers();
    let e = &t.events;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    Stats {
        namespaces,
        controllers: controllers.len(),
        io_queues: controllers.iter().map(|c| c.io_queue_count()).sum(),
        keep_alive_expiries: load(&e.keep_alive_expiries),
        admin_disconnects: load(&e.admin_disconnects),
        connections_open: load(&e.connections_accepted).saturating_sub(load(&e.connections_closed)),
        connections_accepted: load(&e.connections_accepted),
        connections_refused: load(&e.connections_refused),
        protocol_errors: load(&e.protocol_errors),
        host_terminations: load(&e.host_terminations),
        handshake_timeouts: load(&e.handshake_timeouts),
        auth_failures: load(&e.auth_failures),
        tls_failures: load(&e.tls_failures),
        hosts: host_stats(t),
    }
}

/// Per-host I/O of `GET /v1/stats` (`None` without `[metrics] per_host_io`).
fn host_stats(t: &Target) -> Option<Vec<ebof_api::HostStats>> {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let hosts = t.host_io.snapshot()?;
    Some(
        hosts
            .into_iter()
            .map(|(hostnqn, h)| ebof_api::HostStats {
                hostnqn,
                read_commands: load(&h.read_cmds),
                write_commands: load(&h.write_cmds),
                bytes_read: load(&h.bytes_read),
                bytes_written: load(&h.bytes_written),
                media_errors: load(&h.media_errors),
                read_latency: percentiles(&h.read_latency.snapshot()),
                write_latency: percentiles(&h.write_latency.snapshot()),
            })
            .collect(),
    )
}

/// Apply `f` to subsystem `nqn` as one snapshot swap.
fn update(
    t: &Target,
    nqn: &str,
    f: impl FnOnce(&Subsystem) -> Result<Subsystem, ApiError>,
) -> Result<SubsystemView, ApiError> {
    match t.update_subsystem(nqn, f) {
        Ok(s) => Ok(subsystem_view(&s)),
        Err(UpdateError::UnknownSubsystem) => Err(unknown_subsystem(nqn)),
        Err(UpdateError::Rejected(e)) => Err(e),
    }
}

/// `POST /v1/subsystems/{nqn}/hosts`: allow `hostnqn` to connect. Connected controllers are
/// not affected.
pub fn allow_host(t: &Target, nqn: &str, hostnqn: &str) -> Result<SubsystemView, ApiError> {
    ebof_config::check_nqn(hostnqn).map_err(|e| ApiError::from_config(&e, "hostnqn"))?;
    update(t, nqn, |s| {
        if s.allow_any_host {
            return Err(ApiError::new(
                cfg::CONFLICTING_HOSTS,
                "hostnqn",
                format!(
                    "{nqn} allows any host, so a host list would be ignored; \
                     turn that off first (`ebof ctl host allow-any {nqn} off`)"
                ),
            ));
        }
        if s.hosts.iter().any(|h| h == hostnqn) {
            return Err(ApiError::new(
                cfg::DUPLICATE_HOST,
                "hostnqn",
                format!("{hostnqn} is already allowed on {nqn}"),
            ));
        }
        let mut n = s.clone();
        n.hosts.push(hostnqn.to_string());
        Ok(n)
    })
}

/// `DELETE /v1/subsystems/{nqn}/hosts/{hostnqn}`: new Connects of that host are refused;
/// controllers it already has stay (as with Linux nvmet; `disconnect` ends them).
pub fn deny_host(t: &Target, nqn: &str, hostnqn: &str) -> Result<SubsystemView, ApiError> {
    update(t, nqn, |s| {
        let Some(i) = s.hosts.iter().position(|h| h == hostnqn) else {
            return Err(ApiError::new(
                codes::UNKNOWN_HOST,
                "hostnqn",
                format!("{hostnqn:?} is not in the host list of {nqn}"),
            ));
        };
        let mut n = s.clone();
        n.hosts.remove(i);
        Ok(n)
    })
}

/// `PUT /v1/subsystems/{nqn}/allow_any_host`.
pub fn set_allow_any_host(t: &Target, nqn: &str, on: bool) -> Result<SubsystemView, ApiError> {
    update(t, nqn, |s| {
        if on && !s.hosts.is_empty() {
            return Err(ApiError::new(
                cfg::CONFLICTING_HOSTS,
                "allow_any_host",
                format!(
                    "{nqn} has a host list ({}); allowing any host would ignore it: \
                     deny those hosts first",
                    s.hosts.join(", ")
                ),
            ));
        }
        let mut n = s.clone();
        n.allow_any_host = on;
        Ok(n)
    })
}

/// `POST /v1/subsystems`: add a subsystem without namespaces, validated as the configuration
/// file's `[[subsystems]]` are (`serial_prefix` is the running configuration's).
pub fn add_subsystem(
    t: &Target,
    req: &SubsystemRequest,
    serial_prefix: &str,
) -> Result<SubsystemView, ApiError> {
    use ebof_config::{MODEL_MAX_LEN, SERIAL_MAX_LEN, check_id_text, check_nqn};
    check_nqn(&req.nqn).map_err(|e| ApiError::from_config(&e, "nqn"))?;
    if req.nqn == DISCOVERY_NQN {
        return Err(ApiError::new(
            cfg::RESERVED_NQN,
            "nqn",
            format!("{DISCOVERY_NQN} is the discovery subsystem's NQN"),
        ));
    }
    let serial = req
        .serial
        .clone()
        .unwrap_or_else(|| ebof_config::derived_serial(serial_prefix, &req.nqn));
    check_id_text("serial", &serial, SERIAL_MAX_LEN, cfg::INVALID_SERIAL)
        .map_err(|e| ApiError::from_config(&e, "serial"))?;
    let model = req
        .model
        .clone()
        .unwrap_or_else(|| ebof_config::DEFAULT_MODEL.to_string());
    check_id_text("model", &model, MODEL_MAX_LEN, cfg::INVALID_MODEL)
        .map_err(|e| ApiError::from_config(&e, "model"))?;
    let new = Arc::new(Subsystem {
        nqn: req.nqn.clone(),
        serial,
        model,
        allow_any_host: req.allow_any_host.unwrap_or(true),
        hosts: Vec::new(),
        namespaces: Vec::new(),
        ns_hosts: Default::default(),
    });
    let view = subsystem_view(&new);
    t.update_table(|table| {
        if table.iter().any(|s| s.nqn == new.nqn) {
            return Err(ApiError::new(
                cfg::DUPLICATE_NQN,
                "nqn",
                format!("subsystem {} already exists", new.nqn),
            ));
        }
        if let Some(s) = table.iter().find(|s| s.serial == new.serial) {
            return Err(ApiError::new(
                cfg::DUPLICATE_SERIAL,
                "serial",
                format!("serial {} is already used by {}", new.serial, s.nqn),
            ));
        }
        let mut next = table.to_vec();
        next.push(new.clone());
        Ok(next)
    })?;
    tracing::info!(nqn = %view.nqn, "subsystem added by the management API");
    Ok(view)
}

/// `DELETE /v1/subsystems/{nqn}`: remove a subsystem; its controllers are disconnected.
pub fn remove_subsystem(t: &Target, nqn: &str) -> Result<SubsystemRemoved, ApiError> {
    let victims: Vec<u16> = t
        .controllers()
        .iter()
        .filter(|c| c.subsystem().is_some_and(|s| s.nqn == nqn))
        .map(|c| c.cntlid.0)
        .collect();
    t.update_table(|table| {
        if !table.iter().any(|s| s.nqn == nqn) {
            return Err(unknown_subsystem(nqn));
        }
        Ok(table.iter().filter(|s| s.nqn != nqn).cloned().collect())
    })?;
    tracing::info!(nqn, controllers = ?victims, "subsystem removed by the management API");
    Ok(SubsystemRemoved {
        nqn: nqn.to_string(),
        disconnected: victims,
    })
}

/// `DELETE /v1/controllers/{cntlid}`: tear the controller down; its queues close within a
/// reactor tick.
pub fn disconnect(t: &Target, cntlid: &str) -> Result<Disconnected, ApiError> {
    let id: u16 = cntlid
        .parse()
        .ok()
        .filter(|id| (1..=0xFFEF).contains(id))
        .ok_or_else(|| {
            ApiError::new(
                codes::INVALID_CNTLID,
                "cntlid",
                format!("{cntlid:?} is not a controller id (1 to 65519)"),
            )
        })?;
    let c = t.controller(id).ok_or_else(|| {
        ApiError::new(
            codes::UNKNOWN_CONTROLLER,
            "cntlid",
            format!("no live controller {id} (see `ebof ctl show`)"),
        )
    })?;
    c.kill();
    t.events.admin_disconnects.fetch_add(1, Ordering::Relaxed);
    tracing::info!(cntlid = id, hostnqn = %c.hostnqn, "controller disconnected by the management API");
    Ok(Disconnected {
        cntlid: id,
        hostnqn: c.hostnqn.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_target::{Namespace, TargetLimits};
    use std::sync::Arc;
    use std::time::Instant;

    const NQN: &str = "nqn.2026-11.io.ebof:t";
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";

    fn target(allow_any: bool) -> Target {
        let ram = ebof_backend::open(&ebof_backend::BackendSpec::Ram { size: 1 << 20 }).unwrap();
        let s = Subsystem {
            nqn: NQN.into(),
            serial: "S1".into(),
            model: "ebof".into(),
            allow_any_host: allow_any,
            hosts: vec![],
            namespaces: vec![Arc::new(Namespace::new(1, ram, 512, [7; 16]))],
            ns_hosts: Default::default(),
        };
        Target::new(vec![s], vec![], TargetLimits::default(), Instant::now())
    }

    #[test]
    fn host_allow_deny_swap_the_snapshot_and_move_genctr() {
        let t = target(false);
        let before = t.subsystem(NQN).unwrap();
        let g0 = t.discovery_genctr();
        let v = allow_host(&t, NQN, HOST).unwrap();
        assert_eq!(v.hosts, vec![HOST.to_string()]);
        assert!(t.subsystem(NQN).unwrap().host_allowed(HOST));
        // The old snapshot is untouched (a controller holding it sees no change) and the
        // namespace is the same object, so its counters carry over.
        assert!(before.hosts.is_empty());
        assert!(Arc::ptr_eq(
            &before.namespaces[0],
            &t.subsystem(NQN).unwrap().namespaces[0]
        ));
        assert_eq!(t.discovery_genctr(), g0 + 1);
        deny_host(&t, NQN, HOST).unwrap();
        assert!(!t.subsystem(NQN).unwrap().host_allowed(HOST));
        assert_eq!(t.discovery_genctr(), g0 + 2);
    }

    #[test]
    fn invalid_requests_change_nothing() {
        let t = target(false);
        let g0 = t.discovery_genctr();
        let e = allow_host(&t, NQN, "bogus").unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.path.as_str()),
            (cfg::INVALID_NQN, "hostnqn")
        );
        let e = allow_host(&t, "nqn.2026-11.io.ebof:none", HOST).unwrap_err();
        assert_eq!(e.code, codes::UNKNOWN_SUBSYSTEM);
        allow_host(&t, NQN, HOST).unwrap();
        let g1 = t.discovery_genctr();
        assert_eq!(g1, g0 + 1);
        let e = allow_host(&t, NQN, HOST).unwrap_err();
        assert_eq!(e.code, cfg::DUPLICATE_HOST);
        let e = set_allow_any_host(&t, NQN, true).unwrap_err();
        assert_eq!(e.code, cfg::CONFLICTING_HOSTS);
        let e = deny_host(&t, NQN, "nqn.2014-08.org.nvmexpress:other").unwrap_err();
        assert_eq!(e.code, codes::UNKNOWN_HOST);
        assert_eq!(t.discovery_genctr(), g1);
        assert_eq!(t.subsystem(NQN).unwrap().hosts, vec![HOST.to_string()]);
        assert!(!t.subsystem(NQN).unwrap().allow_any_host);
    }

    #[test]
    fn allow_any_conflicts_with_host_list() {
        let t = target(true);
        assert_eq!(
            allow_host(&t, NQN, HOST).unwrap_err().code,
            cfg::CONFLICTING_HOSTS
        );
        set_allow_any_host(&t, NQN, false).unwrap();
        allow_host(&t, NQN, HOST).unwrap();
        assert!(
            !t.subsystem(NQN)
                .unwrap()
                .host_allowed("nqn.2014-08.org.nvmexpress:x")
        );
    }

    #[test]
    fn disconnect_validates_the_id() {
        let t = target(true);
        for bad in ["0", "65520", "x", "-1", ""] {
            assert_eq!(
                disconnect(&t, bad).unwrap_err().code,
                codes::INVALID_CNTLID,
                "{bad}"
            );
        }
        assert_eq!(
            disconnect(&t, "1").unwrap_err().code,
            codes::UNKNOWN_CONTROLLER
        );
    }

    #[test]
    fn subsystem_add_remove() {
        let t = target(true);
        let req = |nqn: &str| SubsystemRequest {
            nqn: nqn.into(),
            serial: None,
            model: None,
            allow_any_host: None,
        };
        let g0 = t.discovery_genctr();
        let v = add_subsystem(&t, &req("nqn.2026-11.io.ebof:new"), "EBOF").unwrap();
        assert!(v.serial.starts_with("EBOF") && v.allow_any_host && v.namespaces.is_empty());
        assert_eq!(t.subsystems().len(), 2);
        assert_eq!(t.discovery_genctr(), g0 + 1);
        for (r, code, path) in [
            (req(NQN), cfg::DUPLICATE_NQN, "nqn"),
            (req("nope"), cfg::INVALID_NQN, "nqn"),
            (req(DISCOVERY_NQN), cfg::RESERVED_NQN, "nqn"),
            (
                SubsystemRequest {
                    serial: Some("S1".into()),
                    ..req("nqn.2026-11.io.ebof:x")
                },
                cfg::DUPLICATE_SERIAL,
                "serial",
            ),
            (
                SubsystemRequest {
                    model: Some(String::new()),
                    ..req("nqn.2026-11.io.ebof:x")
                },
                cfg::INVALID_MODEL,
                "model",
            ),
        ] {
            let e = add_subsystem(&t, &r, "EBOF").unwrap_err();
            assert_eq!((e.code.as_str(), e.path.as_str()), (code, path), "{e}");
        }
        assert_eq!(t.subsystems().len(), 2);
        assert_eq!(t.discovery_genctr(), g0 + 1);
        let r = remove_subsystem(&t, "nqn.2026-11.io.ebof:new").unwrap();
        assert!(r.disconnected.is_empty());
        assert_eq!(t.subsystems().len(), 1);
        assert_eq!(
            remove_subsystem(&t, "nqn.2026-11.io.ebof:new")
                .unwrap_err()
                .code,
            codes::UNKNOWN_SUBSYSTEM
        );
    }

    #[test]
    fn state_and_stats_views() {
        let t = target(true);
        let s = state(&t);
        assert_eq!(s.subsystems[0].namespaces[0].size, 1 << 20);
        assert_eq!(s.subsystems[0].namespaces[0].backend, "ram");
        assert!(s.controllers.is_empty());
        let st = stats(&t);
        assert_eq!(st.namespaces[0].nsid, 1);
        assert_eq!(st.controllers, 0);
    }

    #[test]
    fn the_state_shows_reservations() {
        use nvme_spec::resv::{ResvCdw10, ResvKeys, racqa, rrega, rtype};
        let t = target(true);
        assert_eq!(state(&t).subsystems[0].namespaces[0].reservation, None);
        let ns = t.subsystems()[0].namespaces[0].clone();
        let host = [0xAB; 16];
        let keys = ResvKeys {
            crkey: 0x42,
            second: 0x42,
        };
        let reg = ResvCdw10::from_cdw10(u32::from(rrega::REGISTER));
        ns.resv
            .update(|r| r.register(&host, reg, keys, false))
            .unwrap();
        let acq = ResvCdw10::from_cdw10(
            u32::from(racqa::ACQUIRE) | u32::from(rtype::WRITE_EXCLUSIVE) << 8,
        );
        ns.resv.update(|r| r.acquire(&host, acq, keys)).unwrap();
        let v = state(&t).subsystems[0].namespaces[0]
            .reservation
            .clone()
            .unwrap();
        assert_eq!(
            (v.rtype, v.generation, v.ptpl),
            (rtype::WRITE_EXCLUSIVE, 1, false)
        );
        assert_eq!(v.holder.as_deref(), Some("ab".repeat(16).as_str()));
        assert_eq!(v.registrants.len(), 1);
        assert_eq!(v.registrants[0].key, "0x0000000000000042");
    }
}
