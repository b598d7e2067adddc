//! Taking and removing one copy's snapshot (ADR 0021), apart from the API's requests in
//! [`crate::snapshots`]: the hold on the namespace's gate, the clone, the manifest. Also what a
//! replicated volume's secondary does when its primary asks (ADR 0028 decision 16,
//! [`CopySnapshots`]), and the [`PeerCopy`] a primary's snapshot takes the secondary's
//! through ([`crate::mirror_snap`]). A leaf of the crate's modules, so the mirror can use it.

use crate::api::{self, ApiError, SnapshotDeleted, codes};
use crate::snapshot_store::{
    Found, MANIFEST_VERSION, Manifest, ManifestOrigin, data_file_name, manifest_file_name,
    scan_dir, snapshot_dir_of, sync_dir, validate_name, write_atomic,
};
use ebof_backend::clone::{CloneMethod, Fallback, clone_file};
use ebof_config::BackendChoice;
use nvme_spec::ebof_vendor::SnapshotOp;
use nvmf_target::gate::Gate;
use nvmf_target::{MirrorSnapshots, Namespace};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The other copy of a replicated volume, as a primary's snapshot sees it.
pub(crate) trait PeerCopy {
    /// Take snapshot `name` of the other copy now (this copy's writes are held).
    fn take(&self, name: &str) -> Result<(), ApiError>;
    /// Delete the other copy's snapshot `name` (best effort).
    fn delete(&self, name: &str);
}

/// Longest wait for the origin's commands in flight to drain before a snapshot gives up.
pub const HOLD_TIMEOUT: Duration = Duration::from_secs(5);

/// Most flushes of the origin before its writes are held (see [`PRE_FLUSH_QUICK`]).
pub const PRE_FLUSH_PASSES: u32 = 3;

/// A flush this quick left little dirty data: hold the writes now.
pub const PRE_FLUSH_QUICK: Duration = Duration::from_millis(10);

/// The origin's gate, closed and drained; opened again when dropped.
struct Hold<'a>(&'a Gate);

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.0.unlock();
    }
}

/// Close `gate` (waiting for a Compare-and-Write that holds it) and wait until no data
/// command is inside. `None` after `timeout` (the gate is open again then).
fn hold(gate: &Gate, timeout: Duration) -> Option<Hold<'_>> {
    let deadline = Instant::now() + timeout;
    while !gate.try_lock() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    let held = Hold(gate);
    let mut spins = 0u32;
    while !gate.drained() {
        if Instant::now() > deadline {
            return None;
        }
        if spins < 2000 {
            spins += 1;
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    Some(held)
}

/// An I/O error while making a snapshot or clone as an API error on `field`.
pub(crate) fn io_error(e: &io::Error, field: &str, what: String) -> ApiError {
    let full = matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || e.kind() == io::ErrorKind::StorageFull
        || e.kind() == io::ErrorKind::QuotaExceeded;
    if full {
        ApiError::new(
            codes::NO_SPACE,
            field,
            format!("{what}: the file system is full ({e}); nothing was made"),
        )
    } else {
        ApiError::new(
            codes::SNAPSHOT_FAILED,
            field,
            format!("{what}: {e}; nothing was made"),
        )
    }
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Removes the files it names when dropped, unless disarmed: nothing half-made is left.
pub(crate) struct Undo(pub(crate) Vec<PathBuf>);

impl Undo {
    pub(crate) fn disarm(mut self) {
        self.0.clear();
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Take snapshot `name` of namespace `live` (file `origin`) of `nqn` in the snapshot
/// directory beside `origin`: its manifest and the directory it is in. With `peer`, the
/// mirror's secondary takes its own while the writes are held; if this copy's then fails, the
/// peer's is deleted again.
pub(crate) fn take(
    live: &nvmf_target::Namespace,
    origin: &Path,
    nqn: &str,
    name: &str,
    peer: Option<&dyn PeerCopy>,
) -> Result<(Manifest, PathBuf), ApiError> {
    let peer_took = std::cell::Cell::new(false);
    let on_peer = || -> Result<(), ApiError> {
        if let Some(p) = peer {
            p.take(name)?;
            peer_took.set(true);
        }
        Ok(())
    };
    let r = take_here(live, origin, nqn, name, &on_peer);
    if r.is_err()
        && peer_took.get()
        && let Some(p) = peer
    {
        p.delete(name);
    }
    r
}

pub(crate) fn take_here(
    live: &nvmf_target::Namespace,
    origin: &Path,
    nqn: &str,
    name: &str,
    on_peer: &dyn Fn() -> Result<(), ApiError>,
) -> Result<(Manifest, PathBuf), ApiError> {
    let started = Instant::now();
    let nsid = live.nsid;
    let dir = snapshot_dir_of(origin);
    let (data, dst) = create_data_file(&dir, name)?;
    let undo = Undo(vec![data.clone()]);
    let src = File::open(origin)
        .map_err(|e| io_error(&e, "nsid", format!("cannot open {}", origin.display())))?;
    let (cloned, pause, size) = copy_held(live, &src, &dst, origin, nqn, on_peer)?;
    let method = cloned.map_err(|e| {
        io_error(
            &e,
            "name",
            format!("cannot clone {} into {}", origin.display(), data.display()),
        )
    })?;
    dst.sync_all()
        .map_err(|e| io_error(&e, "name", format!("cannot sync {}", data.display())))?;
    // An encrypted origin's key goes with its ciphertext (ADR 0029).
    crate::crypt::copy_header(origin, &data).map_err(|e| {
        io_error(
            &e,
            "name",
            format!("cannot copy the key header of {}", origin.display()),
        )
    })?;
    let mut m = Manifest {
        version: MANIFEST_VERSION,
        name: name.to_string(),
        origin: ManifestOrigin {
            subsystem: nqn.to_string(),
            nsid,
            uuid: api::uuid_string(&live.uuid),
            path: origin.display().to_string(),
        },
        size,
        block_size: live.block_size,
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        method: method.as_str().to_string(),
        data: data_file_name(name),
        pause_us: micros(pause),
        duration_us: 0,
    };
    m.duration_us = micros(started.elapsed());
    write_atomic(&dir, &manifest_file_name(name), m.to_json().as_bytes()).map_err(|e| {
        io_error(
            &e,
            "name",
            format!("cannot write the manifest in {}", dir.display()),
        )
    })?;
    undo.disarm();
    tracing::info!(
        subsystem = nqn,
        nsid,
        snapshot = %name,
        method = method.as_str(),
        pause_us = m.pause_us,
        duration_us = m.duration_us,
        "snapshot taken"
    );
    Ok((m, dir))
}

/// Create the data file of snapshot `name` in `dir` (and `dir`), owner-only and new.
pub(crate) fn create_data_file(dir: &Path, name: &str) -> Result<(PathBuf, File), ApiError> {
    crate::paths::private_dir(dir)
        .map_err(|e| io_error(&e, "name", format!("cannot create {}", dir.display())))?;
    let data = dir.join(data_file_name(name));
    match crate::paths::create_private(&data) {
        Ok(f) => Ok((data, f)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(ApiError::new(
            codes::DUPLICATE_SNAPSHOT,
            "name",
            format!(
                "{} exists already (left by an earlier snapshot without its manifest? \
                 remove it or choose another name)",
                data.display()
            ),
        )),
        Err(e) => Err(io_error(
            &e,
            "name",
            format!("cannot create {}", data.display()),
        )),
    }
}

/// Copy the origin `src` (namespace `live`, file `origin`, of `nqn`) into `dst` while its
/// commands are held (see the module docs): the clone's outcome, how long I/O was held and
/// the size copied.
pub(crate) fn copy_held(
    live: &nvmf_target::Namespace,
    src: &File,
    dst: &File,
    origin: &Path,
    nqn: &str,
    on_peer: &dyn Fn() -> Result<(), ApiError>,
) -> Result<(io::Result<CloneMethod>, Duration, u64), ApiError> {
    let nsid = live.nsid;
    // Flush first, outside the hold: FICLONE writes back the dirty pages of the file while
    // the writes are held, so the less is dirty then, the shorter the hold. A flush that
    // took long means writes dirtied pages meanwhile: flush again, a few times at most.
    for _ in 0..PRE_FLUSH_PASSES {
        let t = Instant::now();
        if let Err(e) = live.backend.flush() {
            return Err(ApiError::new(
                codes::SNAPSHOT_FAILED,
                "nsid",
                format!(
                    "flush of {} failed: {e}; nothing was made",
                    origin.display()
                ),
            ));
        }
        if t.elapsed() < PRE_FLUSH_QUICK {
            break;
        }
    }
    let Some(held) = hold(&live.gate, HOLD_TIMEOUT) else {
        return Err(ApiError::new(
            codes::SNAPSHOT_BUSY,
            "nsid",
            format!(
                "the commands in flight on namespace {nsid} of {nqn} did not finish within \
                 {} s; nothing was made, try again",
                HOLD_TIMEOUT.as_secs()
            ),
        ));
    };
    let paused = Instant::now();
    // A replicated volume's secondary takes its copy now, while ours is held: both are the
    // same point in time (every write acknowledged before is on both, none after is on either).
    on_peer()?;
    let size = live.backend.size();
    let cloned = clone_file(src, dst, Fallback::Copy);
    drop(held);
    let pause = paused.elapsed();
    Ok((cloned, pause, size))
}

/// Remove snapshot `f`: its manifest, then its data.
pub(crate) fn remove_found(f: &Found) -> Result<SnapshotDeleted, ApiError> {
    let name = f.manifest.name.as_str();
    let manifest = f.dir.join(manifest_file_name(name));
    std::fs::remove_file(&manifest).map_err(|e| {
        ApiError::new(
            codes::SNAPSHOT_FAILED,
            "name",
            format!("cannot remove {}: {e}", manifest.display()),
        )
    })?;
    let data = f.dir.join(&f.manifest.data);
    crate::crypt::erase_header_of(&data);
    if let Err(e) = std::fs::remove_file(&data)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %data.display(), error = %e, "snapshot data not removed");
    }
    let _ = sync_dir(&f.dir);
    tracing::info!(snapshot = name, "snapshot deleted");
    Ok(SnapshotDeleted {
        name: name.to_string(),
        path: data.display().to_string(),
    })
}

/// A secondary's side of Mirror Snapshot: snapshots of this copy's file namespace, taken and
/// deleted when its primary asks.
pub(crate) struct CopySnapshots {
    nqn: String,
    nsid: u32,
    origin: PathBuf,
    ns: OnceLock<Weak<Namespace>>,
}

impl CopySnapshots {
    /// For namespace `n` of `nqn`: None unless it is a file namespace (only those have
    /// snapshots; a Mirror Snapshot on another is refused).
    pub(crate) fn new(nqn: &str, n: &ebof_config::Namespace) -> Option<Arc<CopySnapshots>> {
        let BackendChoice::File { path, .. } = &n.backend else {
            return None;
        };
        Some(Arc::new(CopySnapshots {
            nqn: nqn.to_string(),
            nsid: n.nsid,
            origin: path.clone(),
            ns: OnceLock::new(),
        }))
    }

    /// The namespace is built: snapshots hold its commands.
    pub(crate) fn attach(&self, ns: &Arc<Namespace>) {
        let _ = self.ns.set(Arc::downgrade(ns));
    }

    fn delete(&self, name: &str) -> Result<(), String> {
        let (found, _) = scan_dir(&snapshot_dir_of(&self.origin));
        let Some(f) = found.into_iter().find(|f| f.manifest.name == name) else {
            return Ok(()); // Already gone: the primary's delete goes on.
        };
        if f.manifest.origin.subsystem != self.nqn || f.manifest.origin.nsid != self.nsid {
            return Err(format!(
                "snapshot {name} here is of {} namespace {}, not of this volume",
                f.manifest.origin.subsystem, f.manifest.origin.nsid
            ));
        }
        remove_found(&f).map(|_| ()).map_err(|e| e.message)
    }
}

impl MirrorSnapshots for CopySnapshots {
    fn snapshot(&self, op: SnapshotOp, name: &str) -> Result<(), String> {
        validate_name(name).map_err(|e| e.message)?;
        match op {
            SnapshotOp::Take => {
                let ns = self
                    .ns
                    .get()
                    .and_then(Weak::upgrade)
                    .ok_or("the namespace is gone")?;
                take(&ns, &self.origin, &self.nqn, name, None)
                    .map(|_| ())
                    .map_err(|e| e.message)
            }
            SnapshotOp::Delete => self.delete(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_waits_for_commands_inside_and_gives_up_cleanly() {
        let g = Gate::default();
        assert!(g.enter(), "a command inside");
        assert!(
            hold(&g, Duration::from_millis(30)).is_none(),
            "it never drains"
        );
        assert!(!g.is_locked(), "a failed hold opens the gate again");
        g.exit(1);
        let h = hold(&g, Duration::from_millis(30)).expect("drained");
        assert!(!g.enter(), "commands wait while held");
        drop(h);
        assert!(g.enter(), "and go on after");
        g.exit(1);
    }
}
