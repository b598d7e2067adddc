//! A controller: the association of one host with one subsystem, created by admin Connect and
//! shared (behind `Arc`) by its admin queue and its I/O queues, which may live on other cores.
//! Hot-path state is atomic; the rest sits behind a mutex touched only by admin commands.

use crate::model::Subsystem;
use nvme_spec::fabrics::{cc, csts};
use nvme_spec::log::ErrorLogEntry;
use nvme_spec::{ControllerId, Status};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Entries kept in the Error Information log (ELPE + 1).
pub const ERROR_LOG_ENTRIES: usize = 64;

/// I/O controller for a subsystem, or a discovery controller.
#[derive(Clone, Debug)]
pub enum ControllerKind {
    Io(Arc<Subsystem>),
    Discovery,
}

/// Mutable controller state guarded by a mutex (admin path only).
#[derive(Debug)]
pub struct CtrlState {
    /// Controller Configuration property.
    pub cc: u32,
    /// Controller Status property.
    pub csts: u32,
    /// Keep-alive timeout; `None` disables the timer.
    pub kato: Option<Duration>,
    /// Async Event Configuration feature value.
    pub aec: u32,
    /// Number of I/O queues granted by Set Features (0's based NSQA / NCQA packed as on the wire).
    pub num_queues: Option<u32>,
    /// Error log, newest first.
    pub errors: VecDeque<ErrorLogEntry>,
    pub error_count: u64,
    /// Power management feature value (power state).
    pub power_state: u32,
    /// Temperature threshold feature value.
    pub temp_threshold: u32,
    /// Error recovery feature value.
    pub error_recovery: u32,
}

/// A controller, shared by its queues.
#[derive(Debug)]
pub struct Controller {
    pub cntlid: ControllerId,
    pub kind: ControllerKind,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    /// Largest I/O queue id allowed.
    pub max_qid: u16,
    state: Mutex<CtrlState>,
    /// Set once the controller is torn down; every queue of it closes.
    dead: AtomicBool,
    /// Volatile Write Cache enabled (Set Features 06h); read on every write, so atomic.
    wce: AtomicBool,
    /// Bumped when CC.EN goes 1→0 or a shutdown is requested: I/O queues of an older epoch close.
    io_epoch: AtomicU32,
    /// Last command seen on any queue, in ms since `base`, for traffic-based keep-alive.
    last_activity_ms: AtomicU64,
    base: Instant,
    /// Bitmap of connected I/O queue ids.
    qids: Mutex<Vec<bool>>,
}

impl Controller {
    pub fn new(
        cntlid: ControllerId,
        kind: ControllerKind,
        hostnqn: String,
        hostid: [u8; 16],
        kato: Option<Duration>,
        max_qid: u16,
        now: Instant,
    ) -> Controller {
        Controller {
            cntlid,
            kind,
            hostnqn,
            hostid,
            max_qid,
            state: Mutex::new(CtrlState {
                cc: 0,
                csts: 0,
                kato,
                aec: 0,
                num_queues: None,
                errors: VecDeque::with_capacity(ERROR_LOG_ENTRIES),
                error_count: 0,
                power_state: 0,
                temp_threshold: 0x0157, // 343 K = 70 °C over-temperature threshold
                error_recovery: 0,
            }),
            dead: AtomicBool::new(false),
            wce: AtomicBool::new(true),
            io_epoch: AtomicU32::new(0),
            last_activity_ms: AtomicU64::new(0),
            base: now,
            qids: Mutex::new(vec![false; usize::from(max_qid) + 1]),
        }
    }

    pub fn state(&self) -> MutexGuard<'_, CtrlState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn subsystem(&self) -> Option<&Arc<Subsystem>> {
        match &self.kind {
            ControllerKind::Io(s) => Some(s),
            ControllerKind::Discovery => None,
        }
    }

    pub fn is_discovery(&self) -> bool {
        matches!(self.kind, ControllerKind::Discovery)
    }

    /// Volatile write cache enabled.
    pub fn wce(&self) -> bool {
        self.wce.load(Ordering::Relaxed)
    }

    pub fn set_wce(&self, on: bool) {
        self.wce.store(on, Ordering::Relaxed);
    }

    /// True once the controller was torn down (admin queue gone, keep-alive expired, fatal error).
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Tear the controller down: every queue of it will close.
    pub fn kill(&self) {
        self.dead.store(true, Ordering::Release);
    }

    /// Current I/O queue epoch; an I/O queue remembers the epoch it connected in.
    pub fn io_epoch(&self) -> u32 {
        self.io_epoch.load(Ordering::Acquire)
    }

    /// Ready for commands (CC.EN = 1 and CSTS.RDY = 1, no shutdown).
    pub fn is_ready(&self) -> bool {
        let s = self.state();
        s.csts & csts::RDY != 0 && s.csts & csts::CFS == 0 && cc::shn(s.cc) == 0
    }

    /// Record traffic for keep-alive (any command on any queue).
    pub fn touch(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.base).as_millis() as u64;
        self.last_activity_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// True if the keep-alive timer has expired at `now`.
    pub fn keep_alive_expired(&self, now: Instant) -> bool {
        let Some(kato) = self.state().kato else {
            return false;
        };
        let last = self.base + Duration::from_millis(self.last_activity_ms.load(Ordering::Relaxed));
        now.saturating_duration_since(last) > kato
    }

    /// Claim an I/O queue id; false if out of range or already connected.
    pub fn claim_qid(&self, qid: u16) -> bool {
        let mut q = self.qids.lock().unwrap_or_else(|e| e.into_inner());
        match q.get_mut(usize::from(qid)) {
            Some(slot) if !*slot => {
                *slot = true;
                true
            }
            _ => false,
        }
    }

    /// Number of I/O queues connected now.
    pub fn io_queue_count(&self) -> usize {
        let q = self.qids.lock().unwrap_or_else(|e| e.into_inner());
        q.iter().filter(|b| **b).count()
    }

    pub fn release_qid(&self, qid: u16) {
        let mut q = self.qids.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = q.get_mut(usize::from(qid)) {
            *slot = false;
        }
    }

    /// Property Set of CC, with the transitions of NVMe Base 2.0 3.5 (enable, reset, shutdown).
    /// Returns a status for the Property Set command itself (which succeeds even when the new
    /// configuration is rejected: that is reported through CSTS.CFS, as Linux nvmet does).
    pub fn set_cc(&self, new: u32) -> Status {
        let mut s = self.state();
        let old = s.cc;
        s.cc = new;
        let en_old = old & cc::EN != 0;
        let en_new = new & cc::EN != 0;
        if en_new && !en_old {
            let ok = cc::iosqes(new) == 6
                && cc::iocqes(new) == 4
                && cc::mps(new) == 0
                && cc::ams(new) == 0
                && (cc::css(new) == 0 || cc::css(new) == 6 || cc::css(new) == 7);
            if ok {
                s.csts = csts::RDY;
            } else {
                s.csts |= csts::CFS;
            }
        }
        if !en_new && en_old {
            // Controller reset: quiesce and drop the I/O queues.
            self.io_epoch.fetch_add(1, Ordering::AcqRel);
            s.csts &= !(csts::RDY | csts::SHST_MASK | csts::CFS);
        }
        if cc::shn(new) != 0 && cc::shn(old) == 0 {
            self.io_epoch.fetch_add(1, Ordering::AcqRel);
            s.csts = (s.csts & !csts::SHST_MASK) | csts::SHST_COMPLETE;
        }
        if cc::shn(new) == 0 && cc::shn(old) != 0 {
            s.csts &= !csts::SHST_MASK;
        }
        Status::SUCCESS
    }

    /// Record a failed command in the Error Information log.
    pub fn record_error(
        &self,
        sqid: u16,
        cid: u16,
        status: Status,
        param_loc: u16,
        lba: u64,
        nsid: u32,
    ) {
        let mut s = self.state();
        s.error_count += 1;
        let e = ErrorLogEntry {
            error_count: s.error_count,
            sqid,
            cmdid: cid,
            status_field: status.to_field(),
            parm_error_location: param_loc,
            lba,
            nsid,
            ..Default::default()
        };
        if s.errors.len() == ERROR_LOG_ENTRIES {
            s.errors.pop_back();
        }
        s.errors.push_front(e);
    }
}
