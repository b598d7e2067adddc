//! Prometheus text exposition of the target's counters, built at scrape time.
//!
//! Nothing here runs on the data path: queues already add their per-namespace counters to the
//! namespace's atomics in batches (`nvmf-target`'s `StatsBatch`), rare events bump their own
//! atomics, and a scrape reads them all into a fresh `prometheus-client` registry and encodes
//! it (OpenMetrics text, which Prometheus reads).

use crate::ops;
use nvmf_target::latency::{LatencySnapshot, upper_bound_secs};
use nvmf_target::{ControllerKind, Target};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Content type of [`to_text_format`]'s output (Prometheus' classic text format), served to a
/// scraper that asks for `text/plain` and not for OpenMetrics (`promtool check metrics`).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the exposition shows beyond the target itself: the storage pools, the CDC's members
/// (on a Central Discovery Controller) and, with `[metrics] host_labels = true`, host NQNs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extras<'a> {
    /// The storage pools' accounting (`GET /v1/pools`).
    pub pools: &'a [crate::api::PoolView],
    /// Per-controller series carry the host's NQN (`hostnqn`).
    pub host_labels: bool,
    /// The CDC's view, when this box is one.
    pub cdc: Option<&'a crate::api::CdcView>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NsLabels {
    subsystem: String,
    nsid: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CtrlLabels {
    cntlid: String,
    subsystem: String,
}

/// [`CtrlLabels`] with the host's NQN: only with `[metrics] host_labels = true`. `/metrics`
/// needs no token, and a host NQN is the only credential of a host that uses neither
/// DH-HMAC-CHAP nor TLS.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CtrlHostLabels {
    cntlid: String,
    subsystem: String,
    hostnqn: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NsClassLabels {
    subsystem: String,
    nsid: String,
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NsQosLabels {
    subsystem: String,
    nsid: String,
    limit: String,
}

/// Latency histograms of one kind (reads or writes) of every namespace, as they are at scrape
/// time: the buckets were counted by the queues, so they are encoded as they are.
#[derive(Debug)]
struct LatencyFamily<L = NsLabels> {
    name: &'static str,
    help: &'static str,
    series: Vec<(L, LatencySnapshot)>,
}

impl<L: EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static> Collector for LatencyFamily<L> {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            self.name,
            self.help,
            None,
            prometheus_client::metrics::MetricType::Histogram,
        )?;
        for (labels, h) in &self.series {
            let buckets: Vec<(f64, u64)> = h
                .buckets
                .iter()
                .enumerate()
                .map(|(i, c)| (upper_bound_secs(i), *c))
                .collect();
            family
                .encode_family(labels)?
                .encode_histogram::<NoLabelSet>(h.sum_secs, h.count(), &buckets, None)?;
        }
        Ok(())
    }
}

fn counter_family(reg: &mut Registry, name: &str, help: &str) -> Family<NsLabels, Counter<u64>> {
    let f = Family::<NsLabels, Counter<u64>>::default();
    reg.register(name, help, f.clone());
    f
}

fn counter(reg: &mut Registry, name: &str, help: &str, v: u64) {
    let c = Counter::<u64>::default();
    c.inc_by(v);
    reg.register(name, help, c);
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
}

/// The whole exposition, as text (no storage pools: [`render_with_pools`]; no host NQNs).
pub fn render(t: &Target) -> Result<String, std::fmt::Error> {
    render_with_pools(t, &[])
}

/// The whole exposition with the storage pools' gauges (`ebof_pool_capacity_bytes`,
/// `ebof_pool_provisioned_bytes`, `ebof_pool_free_bytes`, label `pool`); no host NQNs.
pub fn render_with_pools(
    t: &Target,
    pools: &[crate::api::PoolView],
) -> Result<String, std::fmt::Error> {
    render_with(t, pools, false)
}

/// [`render_with_pools`]; with `host_labels` (`[metrics] host_labels = true`) the per-controller
/// series also carry the host's NQN (`hostnqn`).
pub fn render_with(
    t: &Target,
    pools: &[crate::api::PoolView],
    host_labels: bool,
) -> Result<String, std::fmt::Error> {
    render_box(
        t,
        &Extras {
            pools,
            host_labels,
            cdc: None,
        },
    )
}

/// The whole exposition: the target's series and those of [`Extras`].
pub fn render_box(t: &Target, x: &Extras<'_>) -> Result<String, std::fmt::Error> {
    let mut reg = Registry::with_prefix("ebof");
    register_build_info(&mut reg);
    register_pools(&mut reg, x.pools);
    let st = ops::stats(t);
    register_namespaces(&mut reg, t, &st);
    register_controllers(&mut reg, t, x.host_labels);
    register_hosts(&mut reg, t);
    register_box(&mut reg, t, &st);
    register_loops(&mut reg, t);
    register_mirrors(&mut reg, t);
    register_ana(&mut reg, t);
    if let Some(cdc) = x.cdc {
        register_cdc(&mut reg, cdc);
    }
    let mut out = String::new();
    encode(&mut out, &reg)?;
    Ok(out)
}

/// A figure of a pool, of a namespace's counters, of the box's counters.
type PoolFigure = fn(&crate::api::PoolView) -> u64;
type NsFigure = fn(&crate::api::NamespaceStats) -> u64;
type BoxFigure = fn(&crate::api::Stats, &Target) -> u64;

/// One gauge per pool and figure.
const POOL_GAUGES: [(&str, &str, PoolFigure); 4] = [
    (
        "pool_capacity_bytes",
        "Storage pool capacity: its size cap, else its file system's size",
        |p| p.capacity_bytes,
    ),
    (
        "pool_provisioned_bytes",
        "Sizes of the storage pool's namespaces added up",
        |p| p.provisioned_bytes,
    ),
    (
        "pool_free_bytes",
        "What the storage pool can still provision",
        |p| p.free_bytes,
    ),
    (
        "pool_used_bytes",
        "Bytes the storage pool's namespaces hold on disk (thin: written and not deallocated)",
        |p| p.used_bytes,
    ),
];

fn register_pools(reg: &mut Registry, pools: &[crate::api::PoolView]) {
    if pools.is_empty() {
        return;
    }
    for (name, help, get) in POOL_GAUGES {
        let f = Family::<PoolLabels, Gauge>::default();
        reg.register(name, help, f.clone());
        for p in pools {
            f.get_or_create(&PoolLabels {
                pool: p.name.clone(),
            })
            .set(gauge_value(get(p)));
        }
    }
}

type MirrorFigure = fn(&ebof_mirror::MirrorStatus) -> u64;

/// One gauge per mirrored namespace and figure (ADR 0028).
const MIRROR_GAUGES: [(&str, &str, MirrorFigure); 7] = [
    (
        "mirror_role",
        "Role of the copy on this box: 1 primary, 2 secondary",
        |m| match m.role {
            ebof_mirror::Role::Primary => 1,
            ebof_mirror::Role::Secondary => 2,
        },
    ),
    (
        "mirror_epoch",
        "The volume's epoch (raised by each promotion)",
        |m| m.epoch,
    ),
    (
        "mirror_in_sync",
        "1 when every acknowledged write is on both copies (primary)",
        |m| u64::from(m.peer == ebof_mirror::PeerState::InSync),
    ),
    ("mirror_in_flight", "Replicated operations in flight", |m| {
        m.in_flight
    }),
    (
        "mirror_resync_bytes_left",
        "Bytes the peer still lacks (dirty regions times region size)",
        |m| m.resync_bytes_left,
    ),
    (
        "mirror_dirty_regions",
        "Regions marked in the write-intent bitmap",
        |m| m.dirty_regions,
    ),
    (
        "mirror_fenced",
        "1 when the primary lost its lease and completes no write",
        |m| u64::from(m.fenced),
    ),
];

fn register_mirrors(reg: &mut Registry, t: &Target) {
    let mirrors = crate::mirror::statuses(t);
    if mirrors.is_empty() {
        return;
    }
    for (name, help, get) in MIRROR_GAUGES {
        let f = Family::<NsLabels, Gauge>::default();
        reg.register(name, help, f.clone());
        for (nqn, nsid, m) in &mirrors {
            f.get_or_create(&NsLabels {
                subsystem: nqn.clone(),
                nsid: nsid.to_string(),
            })
            .set(gauge_value(get(m)));
        }
    }
}

fn gauge_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The per-namespace counters taken from [`ops::stats`].
const NS_COUNTERS: [(&str, &str, NsFigure); 5] = [
    ("namespace_read_commands", "Read commands completed", |n| {
        n.read_commands
    }),
    (
        "namespace_write_commands",
        "Write commands completed",
        |n| n.write_commands,
    ),
    ("namespace_read_bytes", "Bytes read by hosts", |n| {
        n.bytes_read
    }),
    ("namespace_written_bytes", "Bytes written by hosts", |n| {
        n.bytes_written
    }),
    (
        "namespace_media_errors",
        "Commands failed by the backend (media and data integrity errors)",
        |n| n.media_errors,
    ),
];

/// The per-namespace families read from the live namespaces.
#[derive(Default)]
struct NsFamilies {
    size: Family<NsLabels, Gauge>,
    allocated: Family<NsLabels, Gauge>,
    berr: Family<NsClassLabels, Counter<u64>>,
    qos_waited: Family<NsLabels, Counter<u64>>,
    qos_wait: Family<NsLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    qos_limit: Family<NsQosLabels, Gauge>,
    read_lat: Vec<(NsLabels, LatencySnapshot)>,
    write_lat: Vec<(NsLabels, LatencySnapshot)>,
}

/// Every per-namespace family, registered in exposition order.
fn register_namespaces(reg: &mut Registry, t: &Target, st: &crate::api::Stats) {
    let counters: Vec<_> = NS_COUNTERS
        .iter()
        .map(|(name, help, get)| (counter_family(reg, name, help), get))
        .collect();
    let mut f = NsFamilies::default();
    reg.register(
        "namespace_size_bytes",
        "Namespace capacity in bytes",
        f.size.clone(),
    );
    reg.register(
        "namespace_allocated_bytes",
        "Bytes the namespace's backend holds (thin namespaces: what was written and not deallocated)",
        f.allocated.clone(),
    );
    for n in &st.namespaces {
        let l = NsLabels {
            subsystem: n.subsystem.clone(),
            nsid: n.nsid.to_string(),
        };
        for (family, get) in &counters {
            family.get_or_create(&l).inc_by(get(n));
        }
    }
    reg.register(
        "namespace_backend_errors",
        "Backend failures by class (no_space, read_only, media, ...)",
        f.berr.clone(),
    );
    reg.register(
        "namespace_qos_waited_commands",
        "Commands that waited for the namespace's QoS limits",
        f.qos_waited.clone(),
    );
    reg.register(
        "namespace_qos_wait_seconds",
        "Total time commands waited for the namespace's QoS limits, seconds",
        f.qos_wait.clone(),
    );
    reg.register(
        "namespace_qos_limit",
        "QoS limits set on the namespace (iops: commands/s; mbps: 10^6 bytes/s)",
        f.qos_limit.clone(),
    );
    for s in t.subsystems().iter() {
        for n in &s.namespaces {
            f.read(&s.nqn, n);
        }
    }
    reg.register_collector(Box::new(LatencyFamily {
        name: "namespace_read_latency_seconds",
        help: "Latency of successful reads in the target (receive to completion), seconds",
        series: f.read_lat,
    }));
    reg.register_collector(Box::new(LatencyFamily {
        name: "namespace_write_latency_seconds",
        help: "Latency of successful writes in the target (receive to completion), seconds",
        series: f.write_lat,
    }));
}

impl NsFamilies {
    /// The series of namespace `n` of subsystem `nqn`.
    fn read(&mut self, nqn: &str, n: &nvmf_target::Namespace) {
        let l = NsLabels {
            subsystem: nqn.to_string(),
            nsid: n.nsid.to_string(),
        };
        let (waited, wait) = n.qos.waits();
        if waited > 0 {
            self.qos_waited.get_or_create(&l).inc_by(waited);
            self.qos_wait.get_or_create(&l).inc_by(wait.as_secs_f64());
        }
        let lim = crate::qos::qos_view(n).unwrap_or_default();
        for (limit, v) in lim.limits.fields() {
            if v > 0 {
                self.qos_limit
                    .get_or_create(&NsQosLabels {
                        subsystem: nqn.to_string(),
                        nsid: n.nsid.to_string(),
                        limit: limit.to_string(),
                    })
                    .set(gauge_value(v));
            }
        }
        self.size
            .get_or_create(&l)
            .set(gauge_value(n.backend.size()));
        self.allocated
            .get_or_create(&l)
            .set(gauge_value(n.backend.allocated_bytes()));
        for c in nvmf_target::FailureClass::ALL {
            let v = n.stats.backend_errors[c as usize].load(std::sync::atomic::Ordering::Relaxed);
            if v > 0 {
                self.berr
                    .get_or_create(&NsClassLabels {
                        subsystem: nqn.to_string(),
                        nsid: n.nsid.to_string(),
                        class: c.name().to_string(),
                    })
                    .inc_by(v);
            }
        }
        self.read_lat
            .push((l.clone(), n.stats.read_latency.snapshot()));
        self.write_lat.push((l, n.stats.write_latency.snapshot()));
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostLabels {
    hostnqn: String,
}

/// `v` escaped as the exposition formats want a label value (`\\`, `\"`, `\n`):
/// `prometheus-client` writes label values as they are, and a host NQN is the host's to choose.
pub fn label_value(v: &str) -> String {
    if !v.contains(['\\', '"', '\n']) {
        return v.to_string();
    }
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Per-host I/O counters and latency histograms (`[metrics] per_host_io = true`; nothing
/// otherwise). One series per host NQN the target's table holds ([`nvmf_target::host_io`]:
/// at most `MAX_HOSTS`, entries kept across reconnections, so counters do not go back).
fn register_hosts(reg: &mut Registry, t: &Target) {
    use nvmf_target::host_io::HostIo;
    use std::sync::atomic::{AtomicU64, Ordering};
    type HostFigure = fn(&HostIo) -> &AtomicU64;
    const HOST_COUNTERS: [(&str, &str, HostFigure); 5] = [
        (
            "host_read_commands",
            "Read commands completed, per host",
            |h| &h.read_cmds,
        ),
        (
            "host_write_commands",
            "Write commands completed, per host",
            |h| &h.write_cmds,
        ),
        ("host_read_bytes", "Bytes read, per host", |h| &h.bytes_read),
        ("host_written_bytes", "Bytes written, per host", |h| {
            &h.bytes_written
        }),
        (
            "host_media_errors",
            "Reads and writes failed, per host",
            |h| &h.media_errors,
        ),
    ];
    let Some(hosts) = t.host_io.snapshot() else {
        return;
    };
    let hosts: Vec<(HostLabels, _)> = hosts
        .into_iter()
        .map(|(nqn, h)| {
            (
                HostLabels {
                    hostnqn: label_value(&nqn),
                },
                h,
            )
        })
        .collect();
    for (name, help, get) in HOST_COUNTERS {
        let f = Family::<HostLabels, Counter<u64>>::default();
        reg.register(name, help, f.clone());
        for (l, h) in &hosts {
            f.get_or_create(l).inc_by(get(h).load(Ordering::Relaxed));
        }
    }
    reg.register_collector(Box::new(LatencyFamily {
        name: "host_read_latency_seconds",
        help: "Latency of successful reads in the target, per host, seconds",
        series: hosts
            .iter()
            .map(|(l, h)| (l.clone(), h.read_latency.snapshot()))
            .collect(),
    }));
    reg.register_collector(Box::new(LatencyFamily {
        name: "host_write_latency_seconds",
        help: "Latency of successful writes in the target, per host, seconds",
        series: hosts
            .iter()
            .map(|(l, h)| (l.clone(), h.write_latency.snapshot()))
            .collect(),
    }));
}

/// Controllers by kind, and I/O queues per controller.
fn register_controllers(reg: &mut Registry, t: &Target, host_labels: bool) {
    let ctrls = Family::<KindLabels, Gauge>::default();
    reg.register("controllers", "Live controllers", ctrls.clone());
    let queues = Family::<CtrlLabels, Gauge>::default();
    let host_queues = Family::<CtrlHostLabels, Gauge>::default();
    let help = "I/O queues connected, per controller";
    if host_labels {
        reg.register("controller_io_queues", help, host_queues.clone());
    } else {
        reg.register("controller_io_queues", help, queues.clone());
    }
    // Both kinds are always present, so a dashboard sees 0 rather than nothing.
    for k in ["io", "discovery"] {
        ctrls.get_or_create(&KindLabels { kind: k.into() }).set(0);
    }
    for c in t.controllers() {
        let (kind, subsystem) = match &c.kind {
            ControllerKind::Io(s) => ("io", s.load().nqn.clone()),
            ControllerKind::Discovery => ("discovery", ebof_config::DISCOVERY_NQN.to_string()),
        };
        ctrls.get_or_create(&KindLabels { kind: kind.into() }).inc();
        let n = i64::try_from(c.io_queue_count()).unwrap_or(i64::MAX);
        let cntlid = c.cntlid.0.to_string();
        if host_labels {
            host_queues
                .get_or_create(&CtrlHostLabels {
                    cntlid,
                    subsystem,
                    hostnqn: label_value(&c.hostnqn),
                })
                .set(n);
        } else {
            queues
                .get_or_create(&CtrlLabels { cntlid, subsystem })
                .set(n);
        }
    }
}

/// The box's event counters, in exposition order.
const BOX_COUNTERS: [(&str, &str, BoxFigure); 10] = [
    (
        "keep_alive_expiries",
        "Controllers torn down because their keep-alive timer expired",
        |s, _| s.keep_alive_expiries,
    ),
    (
        "admin_disconnects",
        "Controllers disconnected through the management API",
        |s, _| s.admin_disconnects,
    ),
    (
        "connections_accepted",
        "TCP connections accepted",
        |s, _| s.connections_accepted,
    ),
    (
        "connections_refused",
        "TCP connections refused by the connection caps",
        |s, _| s.connections_refused,
    ),
    (
        "protocol_errors",
        "Connections terminated for an NVMe/TCP protocol error",
        |s, _| s.protocol_errors,
    ),
    (
        "host_terminations",
        "Connections the host ended with H2CTermReq",
        |s, _| s.host_terminations,
    ),
    (
        "handshake_timeouts",
        "Connections closed for missing the ICReq / Connect deadline",
        |s, _| s.handshake_timeouts,
    ),
    (
        "auth_failures",
        "Failed in-band authentications (DH-HMAC-CHAP), per queue",
        |s, _| s.auth_failures,
    ),
    (
        "tls_failures",
        "Connections refused or ended by TLS (handshake, unknown PSK, plaintext on a TLS-only listener)",
        |s, _| s.tls_failures,
    ),
    (
        "dim_refusals",
        "Discovery Information Management commands refused (untrusted discovery controller, change from another address, no room)",
        |_, t| {
            t.events
                .dim_refusals
                .load(std::sync::atomic::Ordering::Relaxed)
        },
    ),
];

/// The box: subsystems served, event counters, connections open.
fn register_box(reg: &mut Registry, t: &Target, st: &crate::api::Stats) {
    let subsystems = Gauge::<i64>::default();
    subsystems.set(gauge_value(t.subsystems().len() as u64));
    reg.register("subsystems", "Subsystems served", subsystems);
    for (name, help, get) in BOX_COUNTERS {
        counter(reg, name, help, get(st, t));
    }
    let open = Gauge::<i64>::default();
    open.set(gauge_value(st.connections_open));
    reg.register("connections_open", "TCP connections open", open);
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LoopLabels {
    core: String,
    r#loop: String,
}

type SecondsFamily = Family<LoopLabels, Counter<f64, std::sync::atomic::AtomicU64>>;

/// `ebof_reactor_seconds_total{core,loop}` and `ebof_reactor_busy_seconds_total{core,loop}`:
/// how long each run loop has run and the part of it spent on turns that did work
/// (`nvmf_target::load`). A polling loop uses its whole core either way; the rate of the busy
/// series over the rate of the other is how loaded the loop is.
fn register_loops(reg: &mut Registry, t: &Target) {
    let run = SecondsFamily::default();
    let busy = SecondsFamily::default();
    reg.register(
        "reactor_seconds",
        "Time each run loop (TCP reactor, RDMA poller) has run",
        run.clone(),
    );
    reg.register(
        "reactor_busy_seconds",
        "Time each run loop spent on turns that did work",
        busy.clone(),
    );
    for f in t.loads.snapshot() {
        let l = LoopLabels {
            core: f.core.to_string(),
            r#loop: f.kind.as_str().to_string(),
        };
        run.get_or_create(&l).inc_by(f.run.as_secs_f64());
        busy.get_or_create(&l).inc_by(f.busy.as_secs_f64());
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
}

/// `ebof_build_info{version} 1`: which release a box runs (join it onto other series).
fn register_build_info(reg: &mut Registry) {
    let f = Family::<BuildLabels, Gauge>::default();
    reg.register(
        "build_info",
        "The ebof release this box runs (always 1; the version is the label)",
        f.clone(),
    );
    f.get_or_create(&BuildLabels {
        version: env!("CARGO_PKG_VERSION").to_string(),
    })
    .set(1);
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnaLabels {
    listener: String,
    group: String,
    state: String,
}

/// `ebof_ana_state{listener,group,state} 1` for each NVMe listener and each ANA group that a
/// namespace uses or that is not optimized there; and the DIM registrations held.
fn register_ana(reg: &mut Registry, t: &Target) {
    let f = Family::<AnaLabels, Gauge>::default();
    reg.register(
        "ana_state",
        "ANA state of each group in use on each listener (always 1; the state is the label: optimized, non-optimized, inaccessible, persistent-loss, change)",
        f.clone(),
    );
    let used: std::collections::BTreeSet<u32> = t
        .subsystems()
        .iter()
        .flat_map(|s| s.namespaces.iter().map(|n| n.ana_group()))
        .collect();
    for l in t.listeners().iter() {
        let mut groups = used.clone();
        groups.extend(t.ana.non_optimized(l.addr).into_iter().map(|(g, _)| g));
        for g in groups {
            f.get_or_create(&AnaLabels {
                listener: l.addr.to_string(),
                group: g.to_string(),
                state: t.ana.state(l.addr, g).name().to_string(),
            })
            .set(1);
        }
    }
    let dim = Gauge::<i64>::default();
    dim.set(gauge_value(t.dim_registrations().len() as u64));
    reg.register(
        "dim_registrations",
        "Discovery Information Management registrations this discovery controller holds",
        dim,
    );
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    member: String,
}

type MemberFigure = fn(&crate::api::CdcMemberView) -> u64;

/// One gauge per CDC member and figure.
const CDC_MEMBER_GAUGES: [(&str, &str, MemberFigure); 3] = [
    (
        "cdc_member_up",
        "1 when the CDC's discovery connection to the member is up",
        |m| u64::from(m.connected),
    ),
    (
        "cdc_member_entries",
        "Distinct subsystem entries the member shows over every known host",
        |m| m.entries as u64,
    ),
    (
        "cdc_member_announced",
        "1 when the member announced itself by DIM rather than being configured",
        |m| u64::from(m.announced),
    ),
];

/// A Central Discovery Controller's members and the hosts it keeps a view for.
fn register_cdc(reg: &mut Registry, cdc: &crate::api::CdcView) {
    let hosts = Gauge::<i64>::default();
    hosts.set(gauge_value(cdc.hosts as u64));
    reg.register("cdc_hosts", "Hosts the CDC keeps a view for", hosts);
    for (name, help, get) in CDC_MEMBER_GAUGES {
        let f = Family::<MemberLabels, Gauge>::default();
        reg.register(name, help, f.clone());
        for m in &cdc.members {
            f.get_or_create(&MemberLabels {
                member: m.address.clone(),
            })
            .set(gauge_value(get(m)));
        }
    }
}

/// Whether an `Accept` header asks for Prometheus' classic text format rather than OpenMetrics:
/// it names `text/plain` and no `application/openmetrics-text`. Anything else (no header,
/// `*/*`, Prometheus' own list) gets OpenMetrics, as before.
pub fn wants_text_format(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("text/plain") && !a.contains("application/openmetrics-text"))
}

/// [`render`]'s OpenMetrics text in Prometheus' classic text format (0.0.4): counters are
/// described under their sample name (`_total`), no `# EOF`, no `# UNIT`; samples unchanged.
pub fn to_text_format(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let described = ["# HELP ", "# TYPE "]
            .iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match described {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let name = if counters.contains(name) {
                    format!("{name}_total")
                } else {
                    name.to_string()
                };
                let tail = match (*p, tail) {
                    ("# TYPE ", "info" | "stateset") => "gauge",
                    ("# TYPE ", "unknown") => "untyped",
                    ("# TYPE ", "gaugehistogram") => "histogram",
                    (_, t) => t,
                };
                out.push_str(&format!("{p}{name} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}
