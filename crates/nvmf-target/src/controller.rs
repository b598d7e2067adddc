//! A controller: the association of one host with one subsystem, created by admin Connect and
//! shared (behind `Arc`) by its admin queue and its I/O queues, which may live on other cores.
//! Hot-path state is atomic; the rest sits behind a mutex touched only by admin commands.

use crate::model::Subsystem;
use arc_swap::ArcSwap;
use nvme_spec::fabrics::{cc, csts};
use nvme_spec::log::{ChangedNsList, ErrorLogEntry, aen, lid};
use nvme_spec::resv::ResvNotificationLog;
use nvme_spec::{ControllerId, Status};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Entries kept in the Error Information log (ELPE + 1).
pub const ERROR_LOG_ENTRIES: usize = 64;

/// I/O controller for a subsystem, or a discovery controller.
#[derive(Debug)]
pub enum ControllerKind {
    /// The subsystem as it is now, as the controller's host sees it ([`Subsystem::view`]:
    /// without the namespaces masked from the host): the control plane stores each new view
    /// here ([`Controller::set_subsystem`]), so admin commands see namespaces added and
    /// removed, attached and detached.
    Io(ArcSwap<Subsystem>),
    /// A discovery controller (connected to the discovery NQN): serves the discovery log page.
    Discovery,
}

/// Asynchronous events of a controller: raised by the control plane, delivered on the admin
/// queue's outstanding Asynchronous Event Requests (retained until there is one), masked per
/// type once reported until the host reads the type's log page (NVMe Base 2.0 5.2).
#[derive(Debug, Default)]
pub struct AsyncEvents {
    /// AER completion Dword 0 values not yet delivered, oldest first.
    pending: VecDeque<u32>,
    /// Event types reported and not yet cleared by reading their log page ([`aen`] CFG bits).
    masked: u32,
    /// The Changed Namespace List (ascending; more than 1024 entries report overflow).
    changed_ns: Vec<u32>,
    changed_ns_overflow: bool,
    /// Reservation Notification log pages not yet read, oldest first.
    resv_log: VecDeque<ResvNotificationLog>,
    /// Reservation notifications counted so far (Log Page Count of the newest).
    resv_count: u64,
    /// Reservation Notification Mask (feature 82h) per NSID; absent: `resv_mask_all`.
    resv_masks: std::collections::HashMap<u32, u32>,
    /// The mask set with NSID FFFFFFFFh (applies to namespaces without their own).
    resv_mask_all: u32,
}

/// Reservation Notification log pages kept per controller; more are lost (counted).
pub const RESV_LOG_MAX: usize = 255;
/// Internal bit of [`AsyncEvents::masked`] for the Reservation Log Page Available event (I/O
/// command specific events have no Asynchronous Event Configuration bit).
const MASK_RESV_EVENT: u32 = 1 << 30;

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
    /// Asynchronous events waiting, masked, and the Changed Namespace List.
    pub events: AsyncEvents,
}

/// The next [`Controller::link_token`] (0 is never handed out).
static NEXT_LINK_TOKEN: AtomicU64 = AtomicU64::new(1);

/// A controller, shared by its queues.
#[derive(Debug)]
pub struct Controller {
    /// Controller ID allocated at admin Connect, unique within the target.
    pub cntlid: ControllerId,
    /// I/O or discovery controller (and, for I/O, its subsystem).
    pub kind: ControllerKind,
    /// Host NQN from the admin queue's Connect data.
    pub hostnqn: String,
    /// Host Identifier (HOSTID) from the admin queue's Connect data; I/O queues must match it.
    pub hostid: [u8; 16],
    /// Local address of the listener the admin queue came in through (set once at Connect).
    local: std::sync::OnceLock<std::net::SocketAddr>,
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
    /// Bumped when the subsystem's namespaces change: I/O queues then refresh their handles.
    ns_gen: AtomicU32,
    /// An asynchronous event is pending (a cheap check for the admin queue's tick).
    event_pending: AtomicBool,
    /// A mirror's replication link (host NQN = `Target::mirror_link_nqn`): its I/O is fenced
    /// by the namespace's [`crate::mirror::MirrorFence`] instead of ANA and reservations.
    replica_link: AtomicBool,
    /// The epoch Mirror Admit (C1h) admitted this link at; 0 until admitted.
    replica_epoch: AtomicU64,
    /// See [`Controller::link_token`].
    link_token: u64,
}

impl Controller {
    /// A mirror's replication link controller (set at Connect).
    #[inline]
    pub fn is_replica_link(&self) -> bool {
        self.replica_link.load(Ordering::Relaxed)
    }
    /// Mark it a replication link (Connect, before any queue of it runs a command).
    pub(crate) fn set_replica_link(&self) {
        self.replica_link.store(true, Ordering::SeqCst);
    }
    /// The epoch this link was admitted at (0: not admitted).
    #[inline]
    pub fn replica_epoch(&self) -> u64 {
        self.replica_epoch.load(Ordering::SeqCst)
    }
    /// Record the epoch Mirror Admit admitted this link at.
    pub(crate) fn set_replica_epoch(&self, epoch: u64) {
        self.replica_epoch.store(epoch, Ordering::SeqCst);
    }
    /// This controller's link token for [`crate::MirrorFence::admit`]: unique in the
    /// process, never 0.
    pub(crate) fn link_token(&self) -> u64 {
        self.link_token
    }
    /// A controller for host `hostnqn`/`hostid`, with write cache enabled and no I/O queue
    /// connected; `kato` `None` disables the keep-alive timer, `max_qid` is the highest I/O
    /// queue id it accepts.
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
            local: std::sync::OnceLock::new(),
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
                events: AsyncEvents::default(),
            }),
            dead: AtomicBool::new(false),
            wce: AtomicBool::new(true),
            io_epoch: AtomicU32::new(0),
            last_activity_ms: AtomicU64::new(0),
            base: now,
            qids: Mutex::new(vec![false; usize::from(max_qid) + 1]),
            ns_gen: AtomicU32::new(0),
            replica_link: AtomicBool::new(false),
            replica_epoch: AtomicU64::new(0),
            link_token: NEXT_LINK_TOKEN.fetch_add(1, Ordering::Relaxed),
            event_pending: AtomicBool::new(false),
        }
    }

    /// The listener address the host connected to (`None` before Connect completes).
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.local.get().copied()
    }

    pub(crate) fn set_local_addr(&self, a: std::net::SocketAddr) {
        let _ = self.local.set(a);
    }

    /// Lock the mutable state (CC, CSTS, features, error log, events); a poisoned lock is taken
    /// over rather than panicking.
    pub fn state(&self) -> MutexGuard<'_, CtrlState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The subsystem as it is now (`None` for a discovery controller).
    pub fn subsystem(&self) -> Option<Arc<Subsystem>> {
        match &self.kind {
            ControllerKind::Io(s) => Some(s.load_full()),
            ControllerKind::Discovery => None,
        }
    }

    /// NQN of the subsystem (the discovery NQN for a discovery controller).
    pub fn subnqn(&self) -> String {
        match &self.kind {
            ControllerKind::Io(s) => s.load().nqn.clone(),
            ControllerKind::Discovery => nvme_spec::DISCOVERY_NQN.to_string(),
        }
    }

    /// Install the subsystem's new snapshot; `changed` are the NSIDs added, removed or
    /// resized. I/O queues pick the new namespace set up before their next command, and the
    /// host is told with a Namespace Attribute Changed event.
    pub fn set_subsystem(&self, new: Arc<Subsystem>, changed: &[u32]) {
        let ControllerKind::Io(s) = &self.kind else {
            return;
        };
        // A namespace changed in place (resized), or a new snapshot (or host view) with the
        // same namespaces, keeps queues' handles valid.
        let replaced = !crate::model::same_namespaces(&s.load(), &new);
        s.store(new);
        if changed.is_empty() {
            return;
        }
        if replaced {
            self.ns_gen.fetch_add(1, Ordering::AcqRel);
        }
        let mut st = self.state();
        let ev = &mut st.events;
        for &n in changed {
            if let Err(i) = ev.changed_ns.binary_search(&n) {
                ev.changed_ns.insert(i, n);
            }
        }
        if ev.changed_ns.len() > ChangedNsList::MAX {
            ev.changed_ns.clear();
            ev.changed_ns_overflow = true;
        }
        let aec = st.aec;
        self.raise(
            &mut st,
            aec,
            aen::CFG_NS_ATTR,
            aen::result(aen::TYPE_NOTICE, aen::NOTICE_NS_CHANGED, lid::CHANGED_NS),
        );
    }

    /// Namespace generation: changes whenever [`Controller::set_subsystem`] changed namespaces.
    pub fn ns_gen(&self) -> u32 {
        self.ns_gen.load(Ordering::Acquire)
    }

    /// The discovery log changed: a discovery controller with Discovery Log Page Change
    /// Notices enabled gets the event.
    pub fn discovery_changed(&self) {
        if !self.is_discovery() {
            return;
        }
        self.notice(
            aen::CFG_DISC_CHANGE,
            aen::NOTICE_DISC_CHANGE,
            lid::DISCOVERY,
        );
    }

    /// An ANA group state of this controller's path changed: ANA Change notice (log 0Ch).
    pub fn ana_changed(&self) {
        if self.is_discovery() {
            return;
        }
        self.notice(aen::CFG_ANA_CHANGE, aen::NOTICE_ANA_CHANGE, lid::ANA);
    }

    /// Raise Notice `info` (log page `log`) of event type `bit`.
    fn notice(&self, bit: u32, info: u8, log: u8) {
        let mut st = self.state();
        let aec = st.aec;
        self.raise(&mut st, aec, bit, aen::result(aen::TYPE_NOTICE, info, log));
    }

    /// Queue event `dw0` of type `bit` unless the host disabled the type (AEC) or an event of
    /// the type is already reported and not yet cleared.
    fn raise(&self, st: &mut CtrlState, aec: u32, bit: u32, dw0: u32) {
        if aec & bit == 0 || st.events.masked & bit != 0 {
            return;
        }
        st.events.masked |= bit;
        st.events.pending.push_back(dw0);
        self.event_pending.store(true, Ordering::Release);
    }

    /// Take the oldest undelivered asynchronous event, if any.
    pub fn take_event(&self) -> Option<u32> {
        if !self.event_pending.load(Ordering::Acquire) {
            return None;
        }
        let mut st = self.state();
        let e = st.events.pending.pop_front();
        if st.events.pending.is_empty() {
            self.event_pending.store(false, Ordering::Release);
        }
        e
    }

    /// An asynchronous event waits for an AER.
    pub fn has_event(&self) -> bool {
        self.event_pending.load(Ordering::Acquire)
    }

    /// Get Log Page read log `log_id`: unless `rae` (Retain Asynchronous Event) is set, the
    /// event type it belongs to is unmasked, and the Changed Namespace List is cleared. Returns
    /// the Changed Namespace List as it was.
    pub fn log_page_read(&self, log_id: u8, rae: bool) -> ChangedNsList {
        let mut st = self.state();
        let ev = &mut st.events;
        let list = if ev.changed_ns_overflow {
            ChangedNsList {
                nsids: vec![ChangedNsList::OVERFLOW],
            }
        } else {
            ChangedNsList {
                nsids: ev.changed_ns.clone(),
            }
        };
        if !rae {
            match log_id {
                lid::CHANGED_NS => {
                    ev.masked &= !aen::CFG_NS_ATTR;
                    ev.changed_ns.clear();
                    ev.changed_ns_overflow = false;
                }
                lid::DISCOVERY => ev.masked &= !aen::CFG_DISC_CHANGE,
                lid::ANA => ev.masked &= !aen::CFG_ANA_CHANGE,
                lid::RESERVATION => ev.masked &= !MASK_RESV_EVENT,
                _ => {}
            }
        }
        list
    }

    /// A reservation notification for namespace `nsid` (NVMe Base 2.0 8.19 "Reservation
    /// Notification"): unless the host masked its type for the namespace, a log page is
    /// queued and the Reservation Log Page Available event raised.
    pub fn reservation_notice(&self, nsid: u32, log_type: u8) {
        let mut st = self.state();
        let ev = &mut st.events;
        let mask = ev
            .resv_masks
            .get(&nsid)
            .copied()
            .unwrap_or(ev.resv_mask_all);
        if mask & (1u32 << log_type) != 0 {
            return;
        }
        ev.resv_count = ev.resv_count.wrapping_add(1).max(1);
        if ev.resv_log.len() < RESV_LOG_MAX {
            let count = ev.resv_count;
            ev.resv_log.push_back(ResvNotificationLog {
                count,
                log_type,
                available: 0,
                nsid,
            });
        }
        self.raise(
            &mut st,
            u32::MAX,
            MASK_RESV_EVENT,
            aen::result(
                aen::TYPE_IO_CMD_SPECIFIC,
                aen::IO_RESV_LOG_AVAILABLE,
                lid::RESERVATION,
            ),
        );
    }

    /// Get Log Page 80h: the oldest unread Reservation Notification log page (an empty page
    /// when none), with the number still available after it; reading consumes it.
    pub fn take_resv_log(&self, rae: bool) -> ResvNotificationLog {
        let mut st = self.state();
        let ev = &mut st.events;
        let mut page = ev.resv_log.pop_front().unwrap_or_default();
        if page.count != 0 {
            page.available = u8::try_from(ev.resv_log.len()).unwrap_or(u8::MAX);
        }
        drop(st);
        self.log_page_read(lid::RESERVATION, rae);
        page
    }

    /// Reservation Notification Mask of namespace `nsid` for this controller.
    pub fn resv_mask(&self, nsid: u32) -> u32 {
        let st = self.state();
        st.events
            .resv_masks
            .get(&nsid)
            .copied()
            .unwrap_or(st.events.resv_mask_all)
    }

    /// Set the Reservation Notification Mask of `nsid` (FFFFFFFFh: every namespace).
    pub fn set_resv_mask(&self, nsid: u32, mask: u32) {
        let mut st = self.state();
        if nsid == u32::MAX {
            st.events.resv_masks.clear();
            st.events.resv_mask_all = mask;
        } else {
            st.events.resv_masks.insert(nsid, mask);
        }
    }

    /// True for a discovery controller.
    pub fn is_discovery(&self) -> bool {
        matches!(self.kind, ControllerKind::Discovery)
    }

    /// Volatile write cache enabled.
    pub fn wce(&self) -> bool {
        self.wce.load(Ordering::Relaxed)
    }

    /// Enable or disable the volatile write cache (Set Features 06h, WCE bit).
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

    /// Mark I/O queue `qid` as no longer connected, so a new Connect may take it.
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

impl crate::mirror::LinkAlive for Controller {
    fn link_alive(&self) -> bool {
        !self.is_dead()
    }
}
