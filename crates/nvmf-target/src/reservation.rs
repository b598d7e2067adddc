//! Reservations (NVMe Base 2.0 section 8.19): the per-namespace reservation table as a pure
//! state machine, the access table ("Command Behavior in the Presence of a Reservation") as a
//! pure function of (reservation type, the host's role, command class), and the persisted form
//! of the table for Persist Through Power Loss (PTPL).
//!
//! Hosts are named by their 128-bit Host Identifier from Fabrics Connect: every controller of
//! one host shares the host's registration. Nothing here does I/O except [`FileStore`], which
//! the namespace calls through the [`ResvStore`] trait when PTPL is on.
//!
//! The data path asks [`NsReservations::check`]: one relaxed atomic load while no reservation
//! is held on the namespace; the table's mutex only while one is.

use nvme_spec::Status;
use nvme_spec::opcode::io;
use nvme_spec::resv::{
    RegisteredCtrl, ResvCdw10, ResvKeys, ResvStatusExt, cptpl, log_type, racqa, rrega, rrela, rtype,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// A host: its 128-bit Host Identifier.
pub type HostId = [u8; 16];

/// How the access table sees a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdClass {
    /// Read Command Group: Read, Compare, Verify.
    Read,
    /// Write Command Group: Write, Write Zeroes, Write Uncorrectable, Dataset Management,
    /// Copy, Flush.
    Write,
    /// Not restricted by a reservation (the reservation commands check their own rules).
    Unrestricted,
}

/// The class of NVM command set I/O opcode `op`. Commands added later map here by opcode.
pub fn class_of(op: u8) -> CmdClass {
    match op {
        io::READ | io::COMPARE | io::VERIFY => CmdClass::Read,
        io::WRITE
        | io::WRITE_ZEROES
        | io::WRITE_UNCORRECTABLE
        | io::DATASET_MGMT
        | io::COPY
        | io::FLUSH => CmdClass::Write,
        _ => CmdClass::Unrestricted,
    }
}

/// True for the four reservation commands.
pub fn is_reservation_opcode(op: u8) -> bool {
    matches!(
        op,
        io::RESV_REGISTER | io::RESV_REPORT | io::RESV_ACQUIRE | io::RESV_RELEASE
    )
}

/// A host's relation to the reservation on a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Holds the reservation (for the All Registrants types: any registrant).
    Holder,
    /// Registered, not holding the reservation.
    Registrant,
    /// Not registered with the namespace.
    NonRegistrant,
}

/// True for the two "All Registrants" types, where every registrant holds the reservation.
pub fn all_registrants(t: u8) -> bool {
    matches!(
        t,
        rtype::WRITE_EXCLUSIVE_ALL_REGS | rtype::EXCLUSIVE_ACCESS_ALL_REGS
    )
}

/// True for the six valid reservation types.
pub fn valid_type(t: u8) -> bool {
    (rtype::WRITE_EXCLUSIVE..=rtype::EXCLUSIVE_ACCESS_ALL_REGS).contains(&t)
}

/// The access table (NVMe Base 2.0, "Command Behavior in the Presence of a Reservation"): may
/// a host of `role` run a command of `class` while a reservation of type `t` is held?
pub fn access_allowed(t: u8, role: Role, class: CmdClass) -> bool {
    let exclusive_access = matches!(
        t,
        rtype::EXCLUSIVE_ACCESS
            | rtype::EXCLUSIVE_ACCESS_REG_ONLY
            | rtype::EXCLUSIVE_ACCESS_ALL_REGS
    );
    let registrants_may = !matches!(t, rtype::WRITE_EXCLUSIVE | rtype::EXCLUSIVE_ACCESS);
    match (role, class) {
        (_, CmdClass::Unrestricted) | (Role::Holder, _) => true,
        (Role::Registrant, _) if registrants_may => true,
        // Non-registrants, and registrants under Write Exclusive / Exclusive Access.
        (_, CmdClass::Read) => !exclusive_access,
        (_, CmdClass::Write) => false,
    }
}

/// One registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registrant {
    /// The registered host.
    pub host: HostId,
    /// Its Reservation Key (RKEY).
    pub key: u64,
}

/// The reservation held on a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Reservation type ([`nvme_spec::resv::rtype`]).
    pub rtype: u8,
    /// The host that holds it (for the All Registrants types: the one that acquired it; every
    /// registrant holds such a reservation).
    pub holder: HostId,
}

/// A notification for the controllers of `host` (Reservation Notification log page type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notice {
    /// The host to notify (every controller of it).
    pub host: HostId,
    /// Reservation Notification log page type ([`nvme_spec::resv::log_type`]).
    pub log_type: u8,
}

/// What a successful reservation command did besides changing the table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Notifications to deliver (the masks of each controller apply at delivery).
    pub notices: Vec<Notice>,
    /// Hosts whose registrations a Preempt and Abort removed: their commands are aborted.
    pub aborted: Vec<HostId>,
}

/// The reservation state of one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResvTable {
    /// Registrants in registration order.
    pub regs: Vec<Registrant>,
    /// The reservation held, if any.
    pub reservation: Option<Reservation>,
    /// Reservation generation (PRGEN).
    pub generation: u32,
    /// Persist Through Power Loss state.
    pub ptpl: bool,
}

/// Status for a host that is not registered or gave the wrong key.
const CONFLICT: Status = Status::RESERVATION_CONFLICT;

impl ResvTable {
    /// Some host is registered or holds the reservation ([`NsReservations::in_use`]).
    fn in_use(&self) -> bool {
        !self.regs.is_empty() || self.reservation.is_some()
    }

    /// The registration of `host`, if it is registered.
    pub fn registrant(&self, host: &HostId) -> Option<&Registrant> {
        self.regs.iter().find(|r| &r.host == host)
    }

    /// The host's role now.
    pub fn role(&self, host: &HostId) -> Role {
        let registered = self.registrant(host).is_some();
        match self.reservation {
            Some(r) if registered && (all_registrants(r.rtype) || &r.holder == host) => {
                Role::Holder
            }
            _ if registered => Role::Registrant,
            _ => Role::NonRegistrant,
        }
    }

    /// The access check of an I/O command from `host`.
    pub fn check(&self, host: &HostId, class: CmdClass) -> Result<(), Status> {
        match self.reservation {
            None => Ok(()),
            Some(r) if access_allowed(r.rtype, self.role(host), class) => Ok(()),
            Some(_) => Err(CONFLICT),
        }
    }

    /// The key check shared by every command but Register: the host must be registered with
    /// `crkey` (unless `iekey`).
    fn check_key(&self, host: &HostId, crkey: u64, iekey: bool) -> Result<(), Status> {
        match self.registrant(host) {
            Some(r) if iekey || r.key == crkey => Ok(()),
            _ => Err(CONFLICT),
        }
    }

    /// Other registrants, for notifications.
    fn others(&self, host: &HostId, log_type: u8) -> Vec<Notice> {
        self.regs
            .iter()
            .filter(|r| &r.host != host)
            .map(|r| Notice {
                host: r.host,
                log_type,
            })
            .collect()
    }

    /// Remove `host`'s registration, with what that does to the reservation: a holder of a
    /// non-All-Registrants reservation releases it (Registrants Only types notify the other
    /// registrants); an All Registrants reservation ends with its last registrant.
    fn unregister_one(&mut self, host: &HostId, out: &mut Outcome) {
        self.regs.retain(|r| &r.host != host);
        match self.reservation {
            Some(r) if all_registrants(r.rtype) && self.regs.is_empty() => {
                self.reservation = None;
            }
            Some(r) if all_registrants(r.rtype) => {}
            Some(r) if &r.holder == host => {
                self.reservation = None;
                if matches!(
                    r.rtype,
                    rtype::WRITE_EXCLUSIVE_REG_ONLY | rtype::EXCLUSIVE_ACCESS_REG_ONLY
                ) {
                    out.notices
                        .extend(self.others(host, log_type::RESERVATION_RELEASED));
                }
            }
            _ => {}
        }
    }

    /// Reservation Register. `ptpl_capable`: the namespace can persist its state.
    pub fn register(
        &mut self,
        host: &HostId,
        cdw: ResvCdw10,
        keys: ResvKeys,
        ptpl_capable: bool,
    ) -> Result<Outcome, Status> {
        match cdw.cptpl {
            cptpl::RESERVED => return Err(Status::INVALID_FIELD),
            cptpl::SET if !ptpl_capable => return Err(Status::INVALID_FIELD),
            _ => {}
        }
        let mut out = Outcome::default();
        let nrkey = keys.second;
        match cdw.action {
            rrega::REGISTER => match self.registrant(host) {
                // Registering again with the same key succeeds; another key is a conflict.
                Some(r) if r.key != nrkey => return Err(CONFLICT),
                Some(_) => {}
                None => self.regs.push(Registrant {
                    host: *host,
                    key: nrkey,
                }),
            },
            rrega::UNREGISTER => {
                self.check_key(host, keys.crkey, cdw.iekey)?;
                self.unregister_one(host, &mut out);
            }
            rrega::REPLACE => match self.regs.iter_mut().find(|r| &r.host == host) {
                Some(r) if cdw.iekey || r.key == keys.crkey => r.key = nrkey,
                Some(_) => return Err(CONFLICT),
                // Not registered: with IEKEY the host registers with NRKEY (as SPDK does).
                None if cdw.iekey => self.regs.push(Registrant {
                    host: *host,
                    key: nrkey,
                }),
                None => return Err(CONFLICT),
            },
            _ => return Err(Status::INVALID_FIELD),
        }
        match cdw.cptpl {
            cptpl::SET => self.ptpl = true,
            cptpl::CLEAR => self.ptpl = false,
            _ => {}
        }
        self.generation = self.generation.wrapping_add(1);
        Ok(out)
    }

    /// Unregister every registrant with key `prkey` (but `keep`); conflict if none matched.
    fn preempt_by_key(
        &mut self,
        prkey: u64,
        keep: Option<&HostId>,
        requester: &HostId,
        out: &mut Outcome,
    ) -> Result<(), Status> {
        let victims: Vec<HostId> = self
            .regs
            .iter()
            .filter(|r| r.key == prkey && Some(&r.host) != keep)
            .map(|r| r.host)
            .collect();
        if victims.is_empty() && keep.is_none() {
            return Err(CONFLICT);
        }
        for v in victims {
            self.unregister_one(&v, out);
            if &v != requester {
                out.notices.push(Notice {
                    host: v,
                    log_type: log_type::REGISTRATION_PREEMPTED,
                });
                out.aborted.push(v);
            }
        }
        Ok(())
    }

    /// Reservation Acquire: acquire, preempt, preempt and abort.
    pub fn acquire(
        &mut self,
        host: &HostId,
        cdw: ResvCdw10,
        keys: ResvKeys,
    ) -> Result<Outcome, Status> {
        // IEKEY is obsolete for Acquire since NVMe 1.3 (RESCAP.IEKEY): Invalid Field.
        if cdw.iekey || !valid_type(cdw.rtype) {
            return Err(Status::INVALID_FIELD);
        }
        if !matches!(
            cdw.action,
            racqa::ACQUIRE | racqa::PREEMPT | racqa::PREEMPT_AND_ABORT
        ) {
            return Err(Status::INVALID_FIELD);
        }
        self.check_key(host, keys.crkey, false)?;
        let mut out = Outcome::default();
        if cdw.action == racqa::ACQUIRE {
            return match self.reservation {
                None => {
                    self.reservation = Some(Reservation {
                        rtype: cdw.rtype,
                        holder: *host,
                    });
                    Ok(out)
                }
                Some(r) if r.rtype == cdw.rtype && self.role(host) == Role::Holder => Ok(out),
                Some(_) => Err(CONFLICT),
            };
        }
        let prkey = keys.second;
        let new = Reservation {
            rtype: cdw.rtype,
            holder: *host,
        };
        match self.reservation {
            None => self.preempt_by_key(prkey, None, host, &mut out)?,
            Some(r) if all_registrants(r.rtype) => {
                if prkey == 0 {
                    // PRKEY 0 preempts every other registrant: a new reservation.
                    self.reservation = Some(new);
                    let others: Vec<HostId> = self
                        .regs
                        .iter()
                        .map(|r| r.host)
                        .filter(|h| h != host)
                        .collect();
                    for v in others {
                        self.regs.retain(|r| r.host != v);
                        out.notices.push(Notice {
                            host: v,
                            log_type: log_type::REGISTRATION_PREEMPTED,
                        });
                        out.aborted.push(v);
                    }
                } else {
                    self.preempt_by_key(prkey, None, host, &mut out)?;
                }
            }
            Some(r) => {
                let holder_key = self.registrant(&r.holder).map(|h| h.key);
                if holder_key == Some(prkey) {
                    // The holder is preempted: the requester holds a reservation of the new
                    // type, every other registrant with PRKEY goes.
                    self.reservation = Some(new);
                    self.preempt_by_key(prkey, Some(host), host, &mut out)?;
                    if r.rtype != cdw.rtype {
                        out.notices
                            .extend(self.others(host, log_type::RESERVATION_RELEASED));
                    }
                } else if prkey != 0 {
                    self.preempt_by_key(prkey, None, host, &mut out)?;
                } else {
                    return Err(Status::INVALID_FIELD);
                }
            }
        }
        if cdw.action != racqa::PREEMPT_AND_ABORT {
            out.aborted.clear();
        }
        self.generation = self.generation.wrapping_add(1);
        Ok(out)
    }

    /// Reservation Release: release, clear.
    pub fn release(
        &mut self,
        host: &HostId,
        cdw: ResvCdw10,
        keys: ResvKeys,
    ) -> Result<Outcome, Status> {
        if cdw.iekey || !matches!(cdw.action, rrela::RELEASE | rrela::CLEAR) {
            return Err(Status::INVALID_FIELD);
        }
        self.check_key(host, keys.crkey, false)?;
        let mut out = Outcome::default();
        if cdw.action == rrela::CLEAR {
            out.notices = self.others(host, log_type::RESERVATION_PREEMPTED);
            self.regs.clear();
            self.reservation = None;
            self.generation = self.generation.wrapping_add(1);
            return Ok(out);
        }
        match self.reservation {
            // No reservation, or the host does not hold it: success, nothing changes.
            None => {}
            Some(_) if self.role(host) != Role::Holder => {}
            Some(r) if r.rtype != cdw.rtype => return Err(Status::INVALID_FIELD),
            Some(r) => {
                self.reservation = None;
                if !matches!(r.rtype, rtype::WRITE_EXCLUSIVE | rtype::EXCLUSIVE_ACCESS) {
                    out.notices = self.others(host, log_type::RESERVATION_RELEASED);
                }
            }
        }
        Ok(out)
    }

    /// Reservation Report data (extended form): one entry per registered host, controller ID
    /// FFFFh (dynamic controller model: a host's controllers share its registration).
    pub fn report(&self) -> ResvStatusExt {
        ResvStatusExt {
            generation: self.generation,
            rtype: self.reservation.map_or(0, |r| r.rtype),
            ptpls: self.ptpl,
            regs: self
                .regs
                .iter()
                .map(|r| RegisteredCtrl {
                    cntlid: 0xFFFF,
                    holds: self.role(&r.host) == Role::Holder,
                    rkey: r.key,
                    hostid: r.host,
                })
                .collect(),
        }
    }

    // ------------------------------------------------------------ persisted form

    /// The persisted form: a small line-oriented text, closed by an `end` line that counts the
    /// lines before it, so a truncated or edited file is refused rather than half-read.
    pub fn encode_state(&self) -> String {
        let mut lines = vec![
            STATE_MAGIC.to_string(),
            format!("generation {}", self.generation),
            format!("ptpl {}", u8::from(self.ptpl)),
        ];
        if let Some(r) = self.reservation {
            lines.push(format!("reservation {} {}", r.rtype, hex(&r.holder)));
        }
        for r in &self.regs {
            lines.push(format!("registrant {} {:016x}", hex(&r.host), r.key));
        }
        lines.push(format!("end {}", lines.len()));
        let mut s = lines.join("\n");
        s.push('\n');
        s
    }

    /// Parse [`ResvTable::encode_state`]'s output; every defect is an error naming the line.
    pub fn decode_state(text: &str) -> Result<ResvTable, String> {
        let lines: Vec<&str> = text.lines().collect();
        if lines.first() != Some(&STATE_MAGIC) {
            return Err(format!(
                "not an ebof reservation state file (first line must be {STATE_MAGIC:?})"
            ));
        }
        let mut t = ResvTable::default();
        let (mut saw_gen, mut saw_ptpl, mut end) = (false, false, false);
        for (i, line) in lines.iter().enumerate().skip(1) {
            let bad = |what: &str| format!("line {}: {what}: {line:?}", i + 1);
            if end {
                return Err(bad("data after the end line"));
            }
            let w: Vec<&str> = line.split_ascii_whitespace().collect();
            match w.as_slice() {
                ["generation", g] => {
                    t.generation = g.parse().map_err(|_| bad("bad generation"))?;
                    saw_gen = true;
                }
                ["ptpl", p] => {
                    t.ptpl = match *p {
                        "0" => false,
                        "1" => true,
                        _ => return Err(bad("bad ptpl")),
                    };
                    saw_ptpl = true;
                }
                ["reservation", ty, h] => {
                    let rtype: u8 = ty.parse().map_err(|_| bad("bad reservation type"))?;
                    if !valid_type(rtype) || t.reservation.is_some() {
                        return Err(bad("bad or repeated reservation"));
                    }
                    let holder = unhex(h).ok_or_else(|| bad("bad host identifier"))?;
                    t.reservation = Some(Reservation { rtype, holder });
                }
                ["registrant", h, k] => {
                    let host = unhex(h).ok_or_else(|| bad("bad host identifier"))?;
                    let key = u64::from_str_radix(k, 16).map_err(|_| bad("bad key"))?;
                    if t.registrant(&host).is_some() {
                        return Err(bad("host registered twice"));
                    }
                    t.regs.push(Registrant { host, key });
                }
                ["end", n] if n.parse() == Ok(i) => end = true,
                _ => return Err(bad("unexpected line")),
            }
        }
        if !end || !saw_gen || !saw_ptpl {
            return Err("incomplete (truncated?): missing generation, ptpl or end line".into());
        }
        if let Some(r) = t.reservation
            && !all_registrants(r.rtype)
            && t.registrant(&r.holder).is_none()
        {
            return Err("the reservation holder is not a registrant".into());
        }
        if t.reservation.is_some() && t.regs.is_empty() {
            return Err("a reservation without registrants".into());
        }
        Ok(t)
    }
}

const STATE_MAGIC: &str = "ebof-reservations 1";

fn hex(b: &[u8; 16]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Where a namespace's reservation state persists while PTPL is on.
pub trait ResvStore: Send + Sync + std::fmt::Debug {
    /// Replace the stored state by `state`, durably, before returning.
    fn save(&self, state: &str) -> std::io::Result<()>;
    /// For messages.
    fn describe(&self) -> String;
}

/// A state file, replaced atomically: write a temporary file beside it, fsync, rename over,
/// fsync the directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    /// The state file.
    pub path: PathBuf,
}

impl FileStore {
    /// A store at `path` (nothing is read or written until used).
    pub fn new(path: impl Into<PathBuf>) -> FileStore {
        FileStore { path: path.into() }
    }

    /// The state stored at `path`: `Ok(None)` when there is no file (nothing persisted),
    /// an error when the file exists but cannot be read or parsed.
    pub fn load(path: &Path) -> Result<Option<ResvTable>, String> {
        let text = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let text = std::str::from_utf8(&text)
            .map_err(|_| format!("{}: not UTF-8 text", path.display()))?;
        ResvTable::decode_state(text)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

impl ResvStore for FileStore {
    fn save(&self, state: &str) -> std::io::Result<()> {
        use std::io::Write;
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(state.as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        // The rename is the commit point: the file now holds the new state and a restart
        // loads it, so the change must take effect even if the directory cannot be synced.
        if let Err(e) = std::fs::File::open(&dir).and_then(|d| d.sync_all()) {
            tracing::warn!(dir = %dir.display(), error = %e,
                "reservation state saved, but its directory could not be synced");
        }
        Ok(())
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

/// A namespace's reservations: the table, flags the data path reads, and the PTPL store.
#[derive(Debug, Default)]
pub struct NsReservations {
    /// A reservation is held: I/O must consult the table.
    active: AtomicBool,
    /// Some host is registered (so a reservation may be acquired at any moment): host data
    /// is not written straight into the namespace, so that the check right before the write
    /// decides ([`NsReservations::in_use`]).
    registered: AtomicBool,
    /// What I/O checks against. Held only for a check or to install a new table, never
    /// across a save.
    table: Mutex<ResvTable>,
    /// Serialises the reservation commands of the namespace, saves included.
    updating: Mutex<()>,
    store: Option<Arc<dyn ResvStore>>,
    /// A mirrored namespace's link to its peer ([`NsReservations::set_replica`]).
    replica: OnceLock<Arc<dyn ResvReplica>>,
    /// The table an update is replicating (not current yet).
    replicating: Mutex<Option<ResvTable>>,
}

impl NsReservations {
    /// Reservations persisted in `store`, starting from `loaded`.
    pub fn with_store(store: Arc<dyn ResvStore>, loaded: ResvTable) -> NsReservations {
        let loaded = if loaded.ptpl {
            loaded
        } else {
            // PTPL off: a restart is a power loss, nothing survives but the generation.
            ResvTable {
                generation: loaded.generation,
                ..Default::default()
            }
        };
        NsReservations {
            active: AtomicBool::new(loaded.reservation.is_some()),
            registered: AtomicBool::new(loaded.in_use()),
            table: Mutex::new(loaded),
            updating: Mutex::new(()),
            store: Some(store),
            replica: OnceLock::new(),
            replicating: Mutex::new(None),
        }
    }

    /// Some host is registered, or a reservation is held: one relaxed load.
    #[inline]
    pub fn in_use(&self) -> bool {
        self.registered.load(Ordering::Relaxed)
    }

    /// The namespace can persist its reservations (RESCAP.PTPL).
    pub fn ptpl_capable(&self) -> bool {
        self.store.is_some()
    }

    /// The access check of an I/O command: one relaxed load while no reservation is held.
    #[inline]
    pub fn check(&self, host: &HostId, op: u8) -> Result<(), Status> {
        if !self.active.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.check_slow(host, op)
    }

    #[cold]
    fn check_slow(&self, host: &HostId, op: u8) -> Result<(), Status> {
        self.lock().check(host, class_of(op))
    }

    fn lock(&self) -> MutexGuard<'_, ResvTable> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of the table now.
    pub fn snapshot(&self) -> ResvTable {
        self.lock().clone()
    }

    /// Apply `f` to a copy of the table; when it succeeds, replicate the result to the mirror's
    /// peer (a mirrored namespace, [`NsReservations::set_replica`]), persist it (if PTPL is or
    /// was on) and only then make it current. A failed replication answers its status, a
    /// failed save Internal Error; either leaves the table as it was (a peer may already hold
    /// the new table: the next push replaces it, see ADR 0028).
    ///
    /// Updates are serialised by their own lock, so the table I/O checks against is locked
    /// only to copy it and to install the result: a save's fsync (or the peer's round trip)
    /// stalls other reservation commands of the namespace, not its I/O.
    pub fn update(
        &self,
        f: impl FnOnce(&mut ResvTable) -> Result<Outcome, Status>,
    ) -> Result<Outcome, Status> {
        let _serial = self.updating.lock().unwrap_or_else(|e| e.into_inner());
        // No other update can run until `_serial` goes: `cur` stays the current table.
        let cur = self.snapshot();
        let mut next = cur.clone();
        let out = f(&mut next)?;
        if next == cur {
            return Ok(out);
        }
        if let Some(r) = self.replica.get() {
            *self.pending() = Some(next.clone());
            if let Err(s) = r.replicate(&next) {
                *self.pending() = None;
                return Err(s);
            }
        }
        let r = self.commit(&cur, next);
        *self.pending() = None;
        r.map(|()| out)
    }

    /// Persist `next` (if PTPL is or was on), then make it current.
    fn commit(&self, cur: &ResvTable, next: ResvTable) -> Result<(), Status> {
        if let Some(store) = &self.store
            && (cur.ptpl || next.ptpl)
            && let Err(e) = store.save(&next.encode_state())
        {
            tracing::error!(store = %store.describe(), error = %e,
                "cannot persist reservation state; command failed");
            return Err(Status::INTERNAL);
        }
        let mut table = self.lock();
        self.registered.store(next.in_use(), Ordering::Relaxed);
        self.active
            .store(next.reservation.is_some(), Ordering::Relaxed);
        *table = next;
        Ok(())
    }

    /// Replace the whole table by `table` (a mirror's secondary taking its primary's table,
    /// Mirror Reservations): persisted first when PTPL is or was on, not replicated.
    pub fn install(&self, table: ResvTable) -> Result<(), Status> {
        let _serial = self.updating.lock().unwrap_or_else(|e| e.into_inner());
        let cur = self.snapshot();
        if table == cur {
            return Ok(());
        }
        self.commit(&cur, table)
    }

    /// Replicate every change of the table through `replica` before it takes effect (the
    /// primary of a mirrored namespace; first call wins).
    pub fn set_replica(&self, replica: Arc<dyn ResvReplica>) {
        let _ = self.replica.set(replica);
    }

    /// The table a replication push must carry now: the one being replicated by an update in
    /// progress (not current yet, and about to be), else the current one.
    pub fn replication_state(&self) -> ResvTable {
        let pending = self.pending().clone();
        pending.unwrap_or_else(|| self.snapshot())
    }

    fn pending(&self) -> MutexGuard<'_, Option<ResvTable>> {
        self.replicating.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where a mirrored namespace's reservation changes go before they take effect (ADR 0028):
/// the mirror's link to its peer.
pub trait ResvReplica: Send + Sync + std::fmt::Debug {
    /// Make the peer hold `next` (the table an update is about to make current; the push may
    /// read [`NsReservations::replication_state`] instead, which is `next` until it returns).
    /// Ok: the peer has it, or this box may go on alone (degraded); Err: the command fails
    /// with that status and the table stays as it was. Blocks the caller until then.
    fn replicate(&self, next: &ResvTable) -> Result<(), Status>;
}

impl ResvTable {
    /// The table as Mirror Reservations (C9h) carries it.
    pub fn to_image(&self) -> nvme_spec::ebof_vendor::ResvImage {
        nvme_spec::ebof_vendor::ResvImage {
            generation: self.generation,
            ptpl: self.ptpl,
            reservation: self.reservation.map(|r| (r.rtype, r.holder)),
            regs: self.regs.iter().map(|r| (r.host, r.key)).collect(),
        }
    }

    /// The table a decoded image describes (its decoder checked what a table must be).
    pub fn from_image(img: nvme_spec::ebof_vendor::ResvImage) -> ResvTable {
        ResvTable {
            regs: img
                .regs
                .into_iter()
                .map(|(host, key)| Registrant { host, key })
                .collect(),
            reservation: img
                .reservation
                .map(|(rtype, holder)| Reservation { rtype, holder }),
            generation: img.generation,
            ptpl: img.ptpl,
        }
    }
}

#[cfg(test)]
mod tests;
