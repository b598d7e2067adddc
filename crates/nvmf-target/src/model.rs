//! The object model's leaf data: subsystems, namespaces, listeners, limits and counters. The
//! [`crate::Target`] that holds them (with the controller registry and the target-wide
//! registries) is in `target.rs`, on top.

use crate::failure::FailureClass;
use ebof_backend::Backend;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Limits that shape controllers and queues (from the configuration's `[target]` table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetLimits {
    /// In-capsule data limit for I/O queues, bytes (IOCCSZ = (64 + this) / 16).
    pub io_inline_data: u32,
    /// Maximum number of I/O queues per controller.
    pub max_io_queues: u16,
    /// Namespaces a subsystem may hold (Identify Controller NN, unless a higher NSID is in
    /// use); the control plane enforces the count.
    pub max_namespaces: u32,
    /// Maximum entries per I/O queue (CAP.MQES + 1).
    pub max_queue_size: u16,
    /// Maximum data transfer size in bytes (MDTS, a power of two × 4 KiB).
    pub max_transfer: u32,
    /// Controller IDs this target hands out: `cntlid_min..=cntlid_max` (within
    /// 1..=FFEFh). Boxes serving one subsystem together (a mirrored namespace, ADR 0028) take
    /// disjoint ranges: a Linux host refuses a second controller with the same CNTLID in one
    /// subsystem.
    pub cntlid_min: u16,
    /// Last controller ID handed out (see [`TargetLimits::cntlid_min`]).
    pub cntlid_max: u16,
}

/// The largest transfer an NVMe/RDMA controller takes (its staging buffers are this size),
/// whatever [`TargetLimits::max_transfer`] says.
pub const RDMA_MAX_TRANSFER: u32 = 128 * 1024;

impl TargetLimits {
    /// The largest data transfer of one command on `transport` (what Identify Controller's
    /// MDTS says there): [`TargetLimits::max_transfer`], at most [`RDMA_MAX_TRANSFER`] on RDMA.
    pub fn max_transfer_on(&self, transport: Transport) -> u32 {
        match transport {
            Transport::Tcp => self.max_transfer,
            Transport::Rdma => self.max_transfer.min(RDMA_MAX_TRANSFER),
        }
    }
}

impl Default for TargetLimits {
    fn default() -> Self {
        TargetLimits {
            io_inline_data: 8192,
            max_io_queues: 32,
            max_namespaces: MAX_NAMESPACES,
            max_queue_size: 1024,
            max_transfer: 128 * 1024,
            cntlid_min: nvme_spec::ControllerId::MIN,
            cntlid_max: nvme_spec::ControllerId::MAX,
        }
    }
}

/// ANA groups are numbered 1..=`MAX_GROUPS`, target-wide ([`crate::ana`]). A mirrored
/// namespace needs a group of its own, so this bounds the replicated volumes a box serves.
/// A Linux host refuses ANA when `16 + NANAGRPID × 32 + MNAN × 4` (its ANA log buffer) is
/// larger than MDTS: 1024 groups and 1024 namespaces need 36 KiB of the 128 KiB.
pub const MAX_GROUPS: u32 = 1024;

/// Default of [`TargetLimits::max_namespaces`] (as Linux nvmet's NVMET_MAX_NAMESPACES).
pub const MAX_NAMESPACES: u32 = 1024;

/// Entries of the admin queue we accept at most (Linux uses 32: NVMF_AQ_DEPTH).
pub const ADMIN_QUEUE_MAX: u32 = 32;
/// In-capsule data accepted on admin/fabrics commands (NVMe/TCP: 8 KiB).
pub const ADMIN_INLINE_DATA: u32 = 8192;

/// One namespace: a backend with an LBA format and identifiers.
#[derive(Debug)]
pub struct Namespace {
    /// Namespace ID (NSID), unique within its subsystem; never 0 or FFFFFFFFh.
    pub nsid: u32,
    /// The storage the namespace reads and writes.
    pub backend: Arc<dyn Backend>,
    /// LBA data size in bytes (512 or 4096).
    pub block_size: u32,
    /// Namespace UUID, reported as the NIDT UUID descriptor of Identify CNS 03h.
    pub uuid: [u8; 16],
    /// Set when the control plane removed the namespace: commands still in flight on it fail
    /// with Invalid Namespace (later ones find no namespace at all).
    pub(crate) removed: AtomicBool,
    /// Counters for the SMART / Health log (summed over all controllers).
    pub stats: NsStats,
    /// Reservations on the namespace (NVMe Base 2.0 8.19); see [`crate::reservation`].
    pub resv: crate::reservation::NsReservations,
    /// ANA group (1..=[`crate::ana::MAX_GROUPS`]); see [`Namespace::with_ana_group`].
    ana_group: u32,
    /// What makes fused Compare-and-Write atomic against every other command on the namespace
    /// ([`crate::gate`]).
    pub gate: crate::gate::Gate,
    /// Per-namespace QoS limits and their shared budgets ([`crate::qos`]); unlimited unless
    /// set.
    pub qos: crate::qos::NsQos,
    /// The fence of a mirrored namespace ([`crate::mirror`]); None: not mirrored. Set with
    /// [`Namespace::with_mirror`].
    pub mirror: Option<Arc<crate::mirror::MirrorFence>>,
}

impl Namespace {
    /// A namespace `nsid` over `backend` with LBA data size `block_size`, in ANA group 1,
    /// not removed, with empty counters and reservations.
    pub fn new(nsid: u32, backend: Arc<dyn Backend>, block_size: u32, uuid: [u8; 16]) -> Namespace {
        Namespace {
            nsid,
            backend,
            block_size,
            uuid,
            removed: AtomicBool::new(false),
            stats: NsStats::default(),
            resv: Default::default(),
            ana_group: 1,
            gate: crate::gate::Gate::default(),
            qos: crate::qos::NsQos::default(),
            mirror: None,
        }
    }
    /// The namespace mirrored, fenced by `fence` (replica-link sessions write only through it).
    pub fn with_mirror(mut self, fence: Arc<crate::mirror::MirrorFence>) -> Namespace {
        self.mirror = Some(fence);
        self
    }
    /// Promote the namespace's mirror fence to primary at `new_epoch` after draining its gate
    /// ([`crate::mirror::MirrorFence::promote`]). Not mirrored: Ok, nothing done.
    pub fn promote_mirror(
        &self,
        new_epoch: u64,
        timeout: std::time::Duration,
    ) -> Result<(), crate::mirror::PromoteError> {
        match &self.mirror {
            Some(f) => f.promote(&self.gate, new_epoch, timeout),
            None => Ok(()),
        }
    }
    /// The namespace with reservations persisted through `store` (PTPL capable), starting
    /// from the state loaded from it.
    pub fn with_reservations(mut self, resv: crate::reservation::NsReservations) -> Namespace {
        self.resv = resv;
        self
    }
    /// The namespace in ANA group `grpid` (default 1; out-of-range values are clamped to
    /// 1..=[`crate::ana::MAX_GROUPS`], the configuration rejects them first).
    pub fn with_ana_group(mut self, grpid: u32) -> Namespace {
        self.ana_group = grpid.clamp(1, MAX_GROUPS);
        self
    }
    /// ANA group (Identify Namespace ANAGRPID).
    pub fn ana_group(&self) -> u32 {
        self.ana_group
    }
    /// Column of the namespace's group in the ANA table ([`crate::ana::AnaTable::path_status`]).
    #[inline]
    pub fn ana_index(&self) -> usize {
        self.ana_group as usize - 1
    }
    /// True once the namespace was removed from its subsystem.
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Relaxed)
    }
    /// Size in logical blocks (NSZE).
    pub fn blocks(&self) -> u64 {
        self.backend.size() / u64::from(self.block_size)
    }
    /// log2 of the block size (LBADS).
    pub fn lbads(&self) -> u8 {
        self.block_size.trailing_zeros() as u8
    }
    /// NGUID: derived from the UUID so both are stable across restarts.
    pub fn nguid(&self) -> [u8; 16] {
        let mut g = self.uuid;
        g.reverse();
        g
    }
    /// EUI-64: eight bytes derived from the UUID, with an IEEE OUI-less local prefix.
    pub fn eui64(&self) -> [u8; 8] {
        let mut e = [0u8; 8];
        for (i, b) in self.uuid.iter().enumerate() {
            e[i % 8] ^= *b;
        }
        e[0] = (e[0] & 0xF0) | 0x02;
        e
    }
}

/// SMART counters and latency histograms of a namespace; updated in batches by queues.
#[derive(Debug, Default)]
pub struct NsStats {
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub read_cmds: AtomicU64,
    pub write_cmds: AtomicU64,
    pub media_errors: AtomicU64,
    /// Latency of successful reads and writes (see [`crate::latency`]).
    pub read_latency: crate::latency::LatencyHistogram,
    pub write_latency: crate::latency::LatencyHistogram,
    /// Backend failures by [`FailureClass`] (indexed by the class).
    pub backend_errors: [AtomicU64; FailureClass::COUNT],
}

/// An NVM subsystem: NQN, identity, host access list and namespaces.
///
/// Immutable once published in a [`crate::Target`]: the control plane changes a subsystem by building
/// a new value (namespaces are shared `Arc`s, so their counters carry over) and swapping it in
/// with [`crate::Target::update_subsystem`]. A controller keeps the snapshot it connected with.
#[derive(Clone, Debug)]
pub struct Subsystem {
    /// NVM Subsystem NQN (SUBNQN), what hosts connect to.
    pub nqn: String,
    /// Serial Number (Identify Controller SN, ASCII, at most 20 bytes).
    pub serial: String,
    /// Model Number (Identify Controller MN, ASCII, at most 40 bytes).
    pub model: String,
    /// Any host NQN may connect; `hosts` is then not consulted.
    pub allow_any_host: bool,
    /// Host NQNs allowed to connect when `allow_any_host` is false.
    pub hosts: Vec<String>,
    /// Sorted by nsid.
    pub namespaces: Vec<Arc<Namespace>>,
    /// Per-host namespace masking: a namespace with an entry here is visible only to the
    /// host NQNs listed (none, for an empty list); a namespace without one is visible to every
    /// host the subsystem admits. Entries for NSIDs the subsystem does not have are ignored
    /// ([`crate::Target::update_subsystem`] drops them). See [`Subsystem::view`].
    pub ns_hosts: BTreeMap<u32, Vec<String>>,
}

impl Subsystem {
    /// May the host with NQN `hostnqn` connect?
    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        self.allow_any_host || self.hosts.iter().any(|h| h == hostnqn)
    }
    /// The namespace `nsid`, if the subsystem has it (binary search).
    pub fn namespace(&self, nsid: u32) -> Option<&Arc<Namespace>> {
        self.namespaces
            .binary_search_by_key(&nsid, |n| n.nsid)
            .ok()
            .map(|i| &self.namespaces[i])
    }
    /// Highest NSID in use (Identify Controller NN).
    pub fn max_nsid(&self) -> u32 {
        self.namespaces.last().map_or(0, |n| n.nsid)
    }
    /// May host `hostnqn` see namespace `nsid` (masking only: whether the host may connect
    /// at all is [`Subsystem::host_allowed`])?
    pub fn ns_visible(&self, nsid: u32, hostnqn: &str) -> bool {
        self.ns_hosts
            .get(&nsid)
            .is_none_or(|hosts| hosts.iter().any(|h| h == hostnqn))
    }
    /// The host lists of namespace `nsid` (`None`: visible to every admitted host).
    pub fn ns_host_list(&self, nsid: u32) -> Option<&[String]> {
        self.ns_hosts.get(&nsid).map(Vec::as_slice)
    }
    /// The subsystem as host `hostnqn` sees it: the same value without the namespaces masked
    /// from it. This is what an I/O controller of the host holds ([`crate::Controller::subsystem`]),
    /// so every command (Identify, logs, I/O, reservations) finds exactly the host's
    /// namespaces with no per-command check. Without masking the snapshot itself is returned
    /// (the same `Arc`); the namespaces of a view are the subsystem's own `Arc`s.
    pub fn view(self: &Arc<Self>, hostnqn: &str) -> Arc<Subsystem> {
        if self.ns_hosts.is_empty() {
            return self.clone();
        }
        let mut v = Subsystem::clone(self);
        v.namespaces.retain(|n| self.ns_visible(n.nsid, hostnqn));
        Arc::new(v)
    }
}

/// True when `a` and `b` hold the very same namespaces (the same `Arc`s, in order).
pub(crate) fn same_namespaces(a: &Subsystem, b: &Subsystem) -> bool {
    a.namespaces.len() == b.namespaces.len()
        && a.namespaces
            .iter()
            .zip(&b.namespaces)
            .all(|(x, y)| Arc::ptr_eq(x, y))
}

/// NSIDs that differ between two snapshots of a subsystem: added, removed or replaced.
pub(crate) fn changed_namespaces(old: &Subsystem, new: &Subsystem) -> Vec<u32> {
    let mut v: Vec<u32> = old
        .namespaces
        .iter()
        .filter(|n| !new.namespaces.iter().any(|m| Arc::ptr_eq(m, n)))
        .chain(
            new.namespaces
                .iter()
                .filter(|n| !old.namespaces.iter().any(|m| Arc::ptr_eq(m, n))),
        )
        .map(|n| n.nsid)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// A listener as the discovery log reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerInfo {
    /// Listening socket address (TRADDR and TRSVCID of the discovery log entry).
    pub addr: SocketAddr,
    /// Port ID in the discovery log (1-based position).
    pub portid: u16,
    /// NVMe/TCP TLS on this listener, as the discovery log advertises it (TREQ, TSAS).
    pub tls: ListenerTls,
    /// The fabric (discovery log TRTYPE and TSAS).
    pub transport: Transport,
}

/// A listener's TLS policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ListenerTls {
    /// Plain NVMe/TCP only.
    #[default]
    Off,
    /// TLS 1.3 when the host asks for it, plain NVMe/TCP otherwise.
    Optional,
    /// TLS 1.3 only.
    Required,
}

/// Counters of rare events, for metrics (each touched only when the event happens).
#[derive(Debug, Default)]
pub struct EventCounters {
    /// Controllers torn down because their keep-alive timer expired.
    pub keep_alive_expiries: AtomicU64,
    /// Controllers torn down by the management API (`ebof ctl disconnect`).
    pub admin_disconnects: AtomicU64,
    /// TCP connections accepted (under the connection caps).
    pub connections_accepted: AtomicU64,
    /// TCP connections refused at accept by the connection caps.
    pub connections_refused: AtomicU64,
    /// Accepted connections that have closed since (open = accepted − closed).
    pub connections_closed: AtomicU64,
    /// Connections terminated for a protocol error (C2HTermReq sent).
    pub protocol_errors: AtomicU64,
    /// Connections the host ended with H2CTermReq.
    pub host_terminations: AtomicU64,
    /// Connections closed for missing the ICReq / Connect deadline.
    pub handshake_timeouts: AtomicU64,
    /// Failed in-band authentications (DH-HMAC-CHAP), queues of every controller.
    pub auth_failures: AtomicU64,
    /// Connections refused or ended by TLS (bad handshake, unknown PSK, plaintext on a
    /// TLS-only listener).
    pub tls_failures: AtomicU64,
    /// Discovery Information Management commands refused: an untrusted discovery controller
    /// (pull registration), a change from another address, or no room.
    pub dim_refusals: AtomicU64,
}

/// Why [`crate::Target::update_subsystem`] changed nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum UpdateError<E> {
    /// No subsystem has this NQN.
    UnknownSubsystem,
    /// The update function refused the change.
    Rejected(E),
}

/// The fabric a queue runs on: what its SGLs for command data look like.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// NVMe/TCP: Transport SGL Data Block (5Ah): R2T/H2CData and C2HData.
    #[default]
    Tcp,
    /// NVMe/RDMA: Keyed SGL Data Block (40h, 4Fh with invalidate): RDMA READ and WRITE.
    Rdma,
}

impl Transport {
    /// Whether an SGL1 of type byte `t` describes data moved by the transport (not in the
    /// capsule).
    #[inline]
    pub fn data_sgl(self, t: u8) -> bool {
        match self {
            Transport::Tcp => t == nvme_spec::sqe::SGL_TRANSPORT,
            Transport::Rdma => t == 0x40 || t == 0x4F,
        }
    }

    /// The transport type (TRTYPE) of discovery log entries.
    pub fn trtype(self) -> u8 {
        match self {
            Transport::Tcp => nvme_spec::discovery::trtype::TCP,
            Transport::Rdma => nvme_spec::discovery::trtype::RDMA,
        }
    }
}

#[cfg(test)]
mod limits_tests {
    use super::*;

    #[test]
    fn rdma_controllers_never_report_more_than_their_staging_buffers() {
        let l = TargetLimits {
            max_transfer: 1 << 20,
            ..TargetLimits::default()
        };
        assert_eq!(l.max_transfer_on(Transport::Tcp), 1 << 20);
        assert_eq!(l.max_transfer_on(Transport::Rdma), RDMA_MAX_TRANSFER);
        let small = TargetLimits {
            max_transfer: 64 << 10,
            ..TargetLimits::default()
        };
        assert_eq!(small.max_transfer_on(Transport::Rdma), 64 << 10);
    }
}
