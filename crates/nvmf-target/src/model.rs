//! The object model: target → subsystems → namespaces, plus the controller registry.

use crate::controller::Controller;
use ebof_backend::Backend;
use nvme_spec::ControllerId;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

/// Limits that shape controllers and queues (from the configuration's `[target]` table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetLimits {
    /// In-capsule data limit for I/O queues, bytes (IOCCSZ = (64 + this) / 16).
    pub io_inline_data: u32,
    /// Maximum number of I/O queues per controller.
    pub max_io_queues: u16,
    /// Maximum entries per I/O queue (CAP.MQES + 1).
    pub max_queue_size: u16,
    /// Maximum data transfer size in bytes (MDTS, a power of two × 4 KiB).
    pub max_transfer: u32,
}

impl Default for TargetLimits {
    fn default() -> Self {
        TargetLimits {
            io_inline_data: 8192,
            max_io_queues: 32,
            max_queue_size: 1024,
            max_transfer: 128 * 1024,
        }
    }
}

/// Entries of the admin queue we accept at most (Linux uses 32: NVMF_AQ_DEPTH).
pub const ADMIN_QUEUE_MAX: u32 = 32;
/// In-capsule data accepted on admin/fabrics commands (NVMe/TCP: 8 KiB).
pub const ADMIN_INLINE_DATA: u32 = 8192;

/// One namespace: a backend with an LBA format and identifiers.
#[derive(Debug)]
pub struct Namespace {
    pub nsid: u32,
    pub backend: Arc<dyn Backend>,
    /// LBA data size in bytes (512 or 4096).
    pub block_size: u32,
    pub uuid: [u8; 16],
    /// Counters for the SMART / Health log (summed over all controllers).
    pub stats: NsStats,
}

impl Namespace {
    pub fn new(nsid: u32, backend: Arc<dyn Backend>, block_size: u32, uuid: [u8; 16]) -> Namespace {
        Namespace {
            nsid,
            backend,
            block_size,
            uuid,
            stats: NsStats::default(),
        }
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

/// SMART counters of a namespace; updated in batches by queues.
#[derive(Debug, Default)]
pub struct NsStats {
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub read_cmds: AtomicU64,
    pub write_cmds: AtomicU64,
    pub media_errors: AtomicU64,
}

/// An NVM subsystem: NQN, identity, host access list and namespaces.
#[derive(Debug)]
pub struct Subsystem {
    pub nqn: String,
    pub serial: String,
    pub model: String,
    pub allow_any_host: bool,
    pub hosts: Vec<String>,
    /// Sorted by nsid.
    pub namespaces: Vec<Arc<Namespace>>,
}

impl Subsystem {
    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        self.allow_any_host || self.hosts.iter().any(|h| h == hostnqn)
    }
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
}

/// A listener as the discovery log reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerInfo {
    pub addr: SocketAddr,
    /// Port ID in the discovery log (1-based position).
    pub portid: u16,
}

/// The whole target: read-only model plus the controller registry. Shared by all cores.
#[derive(Debug)]
pub struct Target {
    pub subsystems: Vec<Arc<Subsystem>>,
    pub listeners: Vec<ListenerInfo>,
    pub limits: TargetLimits,
    /// Discovery log generation counter.
    pub genctr: AtomicU64,
    /// Power-on reference for SMART power-on hours.
    pub started: Instant,
    registry: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    controllers: HashMap<u16, Weak<Controller>>,
    next: u16,
}

impl Target {
    pub fn new(
        mut subsystems: Vec<Subsystem>,
        listeners: Vec<ListenerInfo>,
        limits: TargetLimits,
        now: Instant,
    ) -> Target {
        for s in &mut subsystems {
            s.namespaces.sort_by_key(|n| n.nsid);
        }
        Target {
            subsystems: subsystems.into_iter().map(Arc::new).collect(),
            listeners,
            limits,
            genctr: AtomicU64::new(1),
            started: now,
            registry: Mutex::new(Registry {
                controllers: HashMap::new(),
                next: ControllerId::MIN,
            }),
        }
    }

    pub fn subsystem(&self, nqn: &str) -> Option<&Arc<Subsystem>> {
        self.subsystems.iter().find(|s| s.nqn == nqn)
    }

    /// Allocate a free controller id and register the controller built by `make`.
    /// Returns `None` if every id is in use.
    pub(crate) fn register_controller(
        &self,
        make: impl FnOnce(ControllerId) -> Arc<Controller>,
    ) -> Option<Arc<Controller>> {
        let mut r = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        r.controllers.retain(|_, w| w.strong_count() > 0);
        let span = u32::from(ControllerId::MAX - ControllerId::MIN) + 1;
        for _ in 0..span {
            let id = r.next;
            r.next = if id >= ControllerId::MAX {
                ControllerId::MIN
            } else {
                id + 1
            };
            if let std::collections::hash_map::Entry::Vacant(v) = r.controllers.entry(id) {
                let c = make(ControllerId(id));
                v.insert(Arc::downgrade(&c));
                return Some(c);
            }
        }
        None
    }

    /// Find a live controller by id.
    pub fn controller(&self, id: u16) -> Option<Arc<Controller>> {
        let r = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        r.controllers
            .get(&id)
            .and_then(Weak::upgrade)
            .filter(|c| !c.is_dead())
    }

    /// Number of live controllers (for logs and tests).
    pub fn controller_count(&self) -> usize {
        let r = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        r.controllers
            .values()
            .filter(|w| w.upgrade().is_some_and(|c| !c.is_dead()))
            .count()
    }

    pub fn discovery_genctr(&self) -> u64 {
        self.genctr.load(Ordering::Relaxed)
    }
}
