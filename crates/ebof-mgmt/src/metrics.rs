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
struct LatencyFamily {
    name: &'static str,
    help: &'static str,
    series: Vec<(NsLabels, LatencySnapshot)>,
}

impl Collector for LatencyFamily {
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
    let mut reg = Registry::with_prefix("ebof");
    register_pools(&mut reg, pools);
    let st = ops::stats(t);
    register_namespaces(&mut reg, t, &st);
    register_controllers(&mut reg, t, host_labels);
    register_box(&mut reg, t, &st);
    register_mirrors(&mut reg, t);
    let mut out = String::new();
    encode(&mut out, &reg)?;
    Ok(out)
}

/// A figure of a pool, of a namespace's counters, of the box's counters.
type PoolFigure = fn(&crate::api::PoolView) -> u64;
type NsFigure = fn(&crate::api::NamespaceStats) -> u64;
type BoxFigure = fn(&crate::api::Stats, &Target) -> u64;

/// One gauge per pool and figure.
const POOL_GAUGES: [(&str, &str, PoolFigure); 3] = [
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
                    hostnqn: c.hostnqn.clone(),
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
