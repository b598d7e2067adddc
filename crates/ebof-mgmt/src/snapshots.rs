//! Snapshots and clones of file namespaces (ADR 0021).
//!
//! A snapshot is two files in a `.ebof-snapshots` directory beside its origin's file (same
//! file system, so a reflink is possible): `NAME.img`, the data, and `NAME.json`, its
//! [`Manifest`]. The manifest is written last, atomically (temporary file, sync, rename, sync
//! of the directory): it is what makes a snapshot exist. A data file without one is left over
//! from a crash and is never listed (its name stays taken until it is removed by hand).
//!
//! **Consistency.** Taking one: `fdatasync` of the origin first (outside any hold, so the hold
//! is short), then the origin's namespace gate ([`nvmf_target::gate`], the mechanism that
//! makes Compare-and-Write atomic) is closed and drained: every data command that entered it
//! (including writes in flight in the reactors' io_uring rings or worker pools) has finished
//! its backend operation, every later one waits, deferred by its queue, without being
//! acknowledged. Every command acknowledged to a host was inside the gate before (a command
//! completes only after its backend operation), so it is in the file when `FICLONE` runs;
//! no write is half in. The gate is opened again as soon as the clone (or the copy fallback)
//! returns; syncing the new file and writing the manifest happen after.
//!
//! **Finding them.** The directories scanned are: `.ebof-snapshots` beside every file
//! namespace of the running configuration, every directory a snapshot was made in since start,
//! and the catalogue `snapshot-dirs.json` in `[target] state_dir` (when configured) that
//! remembers every directory ever used, so a snapshot outlives its origin across restarts.

use crate::api::{
    ApiError, CloneMade, CloneRequest, NamespaceRequest, SnapshotDeleted, SnapshotRequest,
    SnapshotView, codes,
};
use crate::lookup::{live_namespace, namespace_index, parse_nsid, subsystem_index};
use crate::running::Running;
use ebof_backend::clone::{CloneMethod, Fallback, clone_file};
use ebof_backend::crypt::KeyHeader;
use ebof_config::{BackendChoice, Config};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub(crate) use crate::snapshot_store::Book;
pub use crate::snapshot_store::{
    CATALOGUE, DIR_NAME, Found, MANIFEST_VERSION, Manifest, ManifestOrigin, NAME_MAX, scan_dir,
    validate_name, write_atomic,
};
use crate::snapshot_store::{find_all, sync_dir};
pub use crate::snapshot_take::{HOLD_TIMEOUT, PRE_FLUSH_PASSES, PRE_FLUSH_QUICK};
use crate::snapshot_take::{Undo, io_error, micros};
pub(crate) use crate::snapshot_take::{remove_found, take};

/// Sanitised last part of an NQN for a file name.
fn nqn_tail(nqn: &str) -> String {
    let tail = nqn.rsplit(':').next().unwrap_or(nqn);
    let s: String = tail
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(48)
        .collect();
    if s.is_empty() { "ns".into() } else { s }
}

/// `GET /v1/snapshots`: every snapshot, by name.
pub(crate) fn list(r: &Running, book: &Book) -> Vec<SnapshotView> {
    let cfg = r.lock();
    find_all(book, &cfg)
        .iter()
        .map(|f| f.manifest.view(&f.dir))
        .collect()
}

/// `POST /v1/subsystems/{nqn}/namespaces/{nsid}/snapshots`: a crash-consistent
/// point-in-time copy of file namespace `nsid` of `nqn` (see the module docs). On the primary
/// of a replicated volume the secondary takes the same-named snapshot while the writes are
/// held ([`crate::mirror_snap`]); on its secondary the request is refused.
pub(crate) fn snapshot_namespace(
    r: &Running,
    book: &Book,
    nqn: &str,
    nsid: &str,
    req: &SnapshotRequest,
) -> Result<SnapshotView, ApiError> {
    let nsid = parse_nsid(nsid)?;
    validate_name(&req.name)?;
    // The configuration lock serialises snapshots, deletes and namespace changes.
    let cfg = r.lock();
    let si = subsystem_index(&cfg, nqn)?;
    let nc = &cfg.subsystems[si].namespaces[namespace_index(&cfg, si, nsid)?];
    let origin = origin_file(nc, nqn)?;
    let live = live_namespace(r.target(), nqn, nsid)?;
    if let Some(f) = find_all(book, &cfg)
        .into_iter()
        .find(|f| f.manifest.name == req.name)
    {
        return Err(ApiError::new(
            codes::DUPLICATE_SNAPSHOT,
            "name",
            format!(
                "snapshot {} exists already (of {} namespace {}, in {})",
                req.name,
                f.manifest.origin.subsystem,
                f.manifest.origin.nsid,
                f.dir.display()
            ),
        ));
    }
    let peer = crate::mirror_snap::primary_of(&live, nqn)?;
    let peer = peer
        .as_ref()
        .map(|p| p as &dyn crate::snapshot_take::PeerCopy);
    let (m, dir) = take(&live, &origin, nqn, &req.name, peer)?;
    book.remember(&dir, cfg.target.state_dir.as_deref());
    Ok(m.view(&dir))
}

/// The file of file namespace `nc` of `nqn`, or `snapshot-unsupported`.
fn origin_file(nc: &ebof_config::Namespace, nqn: &str) -> Result<PathBuf, ApiError> {
    match &nc.backend {
        BackendChoice::File { path, .. } => Ok(path.clone()),
        other => Err(ApiError::new(
            codes::SNAPSHOT_UNSUPPORTED,
            "nsid",
            format!(
                "namespace {} of {nqn} is a {} namespace: only file namespaces \
                 have snapshots",
                nc.nsid,
                other.kind()
            ),
        )),
    }
}

/// `DELETE /v1/snapshots/{name}`: remove the manifest (the snapshot is gone from then on),
/// then the data. Clones made from it are files of their own and stay. A snapshot of a
/// replicated volume's primary is deleted on its secondary first (best effort).
pub(crate) fn delete(r: &Running, book: &Book, name: &str) -> Result<SnapshotDeleted, ApiError> {
    validate_name(name)?;
    let cfg = r.lock();
    let f = find_all(book, &cfg)
        .into_iter()
        .find(|f| f.manifest.name == name)
        .ok_or_else(|| unknown_snapshot(name))?;
    crate::mirror_snap::delete_with_peer(r.target(), &f.manifest);
    remove_found(&f)
}

/// `POST /v1/snapshots/{name}/clones`: copy (reflink) the snapshot into a new file and add
/// it as a file namespace exactly as `POST …/namespaces` adds one (events, masking). If
/// the namespace cannot be added, the new file is removed.
pub(crate) fn clone(
    r: &Running,
    book: &Book,
    name: &str,
    req: &CloneRequest,
) -> Result<CloneMade, ApiError> {
    let started = Instant::now();
    validate_name(name)?;
    if let Some(pool) = &req.pool {
        return clone_into_pool(r, book, name, req, pool, started);
    }
    let (found, nsid, snap_data, key) = {
        let cfg = r.lock();
        let f = find_all(book, &cfg)
            .into_iter()
            .find(|f| f.manifest.name == name)
            .ok_or_else(|| unknown_snapshot(name))?;
        let nsid = clone_nsid(&cfg, req)?;
        let data = f.dir.join(&f.manifest.data);
        let key = origin_key(&cfg, &f);
        (f, nsid, data, key)
    };
    let src = File::open(&snap_data)
        .map_err(|e| io_error(&e, "name", format!("cannot open {}", snap_data.display())))?;
    let running = r.get();
    let (path, dst) =
        clone_destination(&running, &found, &req.subsystem, nsid, req.path.as_deref())?;
    let undo = Undo(vec![path.clone(), KeyHeader::path_for(&path)]);
    let method = fill_clone(&src, &snap_data, &dst, &path, "path")?;
    let mut add = clone_namespace(&found, nsid, req, Some(path.display().to_string()), None);
    add.encryption = key;
    let added = crate::namespaces::add(r, &req.subsystem, &add)?;
    undo.disarm();
    tracing::info!(
        snapshot = name,
        subsystem = %req.subsystem,
        nsid,
        path = %path.display(),
        method = method.as_str(),
        "clone added as a namespace"
    );
    Ok(CloneMade {
        snapshot: name.to_string(),
        method: method.as_str().to_string(),
        duration_us: micros(started.elapsed()),
        added,
    })
}

/// [`Control::clone_snapshot`] into storage pool `pool`: the whole of it under the
/// configuration lock (room checked, file made in the pool, namespace added), so no other
/// request can take the room or the file name meanwhile.
fn clone_into_pool(
    r: &Running,
    book: &Book,
    name: &str,
    req: &CloneRequest,
    pool: &str,
    started: Instant,
) -> Result<CloneMade, ApiError> {
    if req.path.is_some() {
        return Err(ApiError::new(
            ebof_config::codes::FORBIDDEN_FIELD,
            "path",
            format!("a clone made in pool {pool} gets its file from the pool: leave `path` out"),
        ));
    }
    let mut method = CloneMethod::Copy;
    let added = r.change(|cfg| {
        let found = find_all(book, cfg)
            .into_iter()
            .find(|f| f.manifest.name == name)
            .ok_or_else(|| unknown_snapshot(name))?;
        let nsid = clone_nsid(cfg, req)?;
        let p = crate::pools::requested_pool(cfg, pool, "pool")?;
        let view = crate::pools::pool_view(cfg, r.target(), &p);
        crate::pools::ensure_room(&view, found.manifest.size, "a clone", "pool")?;
        let path = p.file_for(&req.subsystem, nsid);
        if let Some(other) = cfg.subsystems.iter().find_map(|s| {
            s.namespaces
                .iter()
                .find(|n| n.backend.path() == Some(path.as_path()))
                .map(|n| format!("{} namespace {}", s.nqn, n.nsid))
        }) {
            return Err(ApiError::new(
                codes::FILE_EXISTS,
                "pool",
                format!("{} is the file of {other} already", path.display()),
            ));
        }
        crate::pools::clear_orphan(&path, "pool")?;
        let snap_data = found.dir.join(&found.manifest.data);
        let src = File::open(&snap_data)
            .map_err(|e| io_error(&e, "name", format!("cannot open {}", snap_data.display())))?;
        let dst = crate::paths::create_private(&path)
            .map_err(|e| io_error(&e, "pool", format!("cannot create {}", path.display())))?;
        let undo = Undo(vec![path.clone(), KeyHeader::path_for(&path)]);
        method = fill_clone(&src, &snap_data, &dst, &path, "pool")?;
        let add = clone_namespace(&found, nsid, req, None, Some(pool.to_string()));
        let added = crate::namespaces::add_in(r.target(), cfg, &req.subsystem, &add, Some(&path))?;
        undo.disarm();
        Ok(added)
    })?;
    tracing::info!(
        snapshot = name,
        subsystem = %req.subsystem,
        nsid = added.namespace.nsid,
        pool,
        method = method.as_str(),
        "clone added as a namespace in a pool"
    );
    Ok(CloneMade {
        snapshot: name.to_string(),
        method: method.as_str().to_string(),
        duration_us: micros(started.elapsed()),
        added,
    })
}

/// The clone's new file, created (never an existing one): `path` as asked, else in the
/// directory that holds the snapshot directory, named after subsystem, NSID and snapshot.
fn clone_destination(
    cfg: &Config,
    found: &Found,
    nqn: &str,
    nsid: u32,
    path: Option<&str>,
) -> Result<(PathBuf, File), ApiError> {
    let create = |p: &Path| crate::paths::create_private(p);
    if let Some(p) = path {
        if p.is_empty() || p.contains('\0') {
            return Err(ApiError::new(
                ebof_config::codes::INVALID_PATH,
                "path",
                "the path must be a non-empty path without NUL bytes",
            ));
        }
        let p = PathBuf::from(p);
        crate::paths::check_file(cfg, &p, "path")?;
        return match create(&p) {
            Ok(f) => Ok((p, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(ApiError::new(
                codes::FILE_EXISTS,
                "path",
                format!(
                    "{} exists already: a clone never overwrites a file",
                    p.display()
                ),
            )),
            Err(e) => Err(io_error(
                &e,
                "path",
                format!("cannot create {}", p.display()),
            )),
        };
    }
    let home = found
        .dir
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let stem = format!("{}-ns{nsid}-{}", nqn_tail(nqn), found.manifest.name);
    // Beside the snapshot's origin, if the API may make files there.
    crate::paths::check_file(cfg, &home.join(format!("{stem}.img")), "path")?;
    for i in 1..=100u32 {
        let file = if i == 1 {
            format!("{stem}.img")
        } else {
            format!("{stem}-{i}.img")
        };
        let p = home.join(file);
        match create(&p) {
            Ok(f) => return Ok((p, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(io_error(
                    &e,
                    "path",
                    format!("cannot create {}", p.display()),
                ));
            }
        }
    }
    Err(ApiError::new(
        codes::FILE_EXISTS,
        "path",
        format!(
            "{}/{stem}.img and 99 numbered variants exist: say where with path",
            home.display()
        ),
    ))
}

/// The NSID of a clone in `req.subsystem`: as asked (and free), else the lowest free one.
fn clone_nsid(cfg: &Config, req: &CloneRequest) -> Result<u32, ApiError> {
    let si = subsystem_index(cfg, &req.subsystem).map_err(|mut e| {
        e.path = "subsystem".into();
        e
    })?;
    let used = |n: u32| cfg.subsystems[si].namespaces.iter().any(|x| x.nsid == n);
    match req.nsid {
        Some(n) => {
            let n = parse_nsid(&n.to_string())?;
            if used(n) {
                return Err(ApiError::new(
                    ebof_config::codes::DUPLICATE_NSID,
                    "nsid",
                    format!("{} has a namespace {n} already", req.subsystem),
                ));
            }
            Ok(n)
        }
        None => (1..=ebof_config::NSID_MAX)
            .find(|n| !used(*n))
            .ok_or_else(|| {
                ApiError::new(
                    ebof_config::codes::INVALID_NSID,
                    "nsid",
                    format!("{} has no free namespace id", req.subsystem),
                )
            }),
    }
}

fn unknown_snapshot(name: &str) -> ApiError {
    ApiError::new(
        codes::UNKNOWN_SNAPSHOT,
        "name",
        format!("no snapshot named {name} (see `ebof ctl snapshot list`)"),
    )
}

/// Copy the snapshot's data (`src`, read from `snap_data`) into the clone's new file `dst` at
/// `path`, by reflink where the file system can, and make it durable (the file and its
/// directory entry); errors name the request's `field`.
fn fill_clone(
    src: &File,
    snap_data: &Path,
    dst: &File,
    path: &Path,
    field: &str,
) -> Result<CloneMethod, ApiError> {
    let method = clone_file(src, dst, Fallback::Copy).map_err(|e| {
        io_error(
            &e,
            field,
            format!(
                "cannot clone {} into {}",
                snap_data.display(),
                path.display()
            ),
        )
    })?;
    dst.sync_all()
        .map_err(|e| io_error(&e, field, format!("cannot sync {}", path.display())))?;
    // A clone shares its snapshot's (so its origin's) key (ADR 0029).
    crate::crypt::copy_header(snap_data, path).map_err(|e| {
        io_error(
            &e,
            field,
            format!("cannot copy the key header of {}", snap_data.display()),
        )
    })?;
    if let Some(d) = path.parent() {
        let _ = sync_dir(d);
    }
    Ok(method)
}

/// The key of a clone made outside a pool: its origin's own key (`encryption = { key_file }`)
/// while the origin is configured, as the copied key header says the data is under it (ADR
/// 0029). None: the origin is not encrypted by a key of its own, or is gone (the clone is then
/// refused if its data is encrypted: `crypt::prepare`).
fn origin_key(cfg: &Config, f: &Found) -> Option<ebof_config::EncryptionFields> {
    let o = &f.manifest.origin;
    let n = cfg
        .subsystems
        .iter()
        .filter(|s| s.nqn == o.subsystem)
        .flat_map(|s| s.namespaces.iter())
        .find(|n| n.nsid == o.nsid && n.backend.path() == Some(Path::new(&o.path)))?;
    let e = n.encryption.as_ref()?;
    Some(ebof_config::EncryptionFields {
        key_file: Some(e.key_file.to_string_lossy().into_owned()),
    })
}

/// The namespace a clone of `found` is added as: the snapshot's size and block size, at
/// `path` or in `pool`.
fn clone_namespace(
    found: &Found,
    nsid: u32,
    req: &CloneRequest,
    path: Option<String>,
    pool: Option<String>,
) -> NamespaceRequest {
    NamespaceRequest {
        nsid: Some(nsid),
        backend: "file".into(),
        size: Some(found.manifest.size),
        path,
        block_size: Some(found.manifest.block_size),
        uuid: req.uuid.clone(),
        direct: None,
        ana_group: req.ana_group,
        hosts: req.hosts.clone(),
        // A clone starts unlimited, like any new namespace (`ns qos` sets limits).
        qos: None,
        pool,
        // Mirrored when asked (a replicated volume restored from a snapshot: the primary
        // copies itself whole to its new secondary).
        mirror: req.mirror.clone(),
        // In a pool: encrypted by the pool, with its origin's key (the copied key header, ADR
        // 0029); outside one, the caller sets its origin's own key (`origin_key`).
        encryption: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Control;

    fn manifest(name: &str) -> Manifest {
        Manifest {
            version: MANIFEST_VERSION,
            name: name.into(),
            origin: ManifestOrigin {
                subsystem: "nqn.2026-11.io.ebof:t".into(),
                nsid: 1,
                uuid: "12345678-9abc-def0-0123-456789abcdef".into(),
                path: "/srv/ns1.img".into(),
            },
            size: 1 << 20,
            block_size: 512,
            created: 1_790_000_000,
            method: "reflink".into(),
            data: format!("{name}.img"),
            pause_us: 120,
            duration_us: 900,
        }
    }

    #[test]
    fn names_allow_only_the_safe_alphabet() {
        for ok in [
            "a",
            "snap-1",
            "Daily_2026.11.27",
            "9",
            &"x".repeat(NAME_MAX),
        ] {
            validate_name(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        for (bad, why) in [
            ("", "empty"),
            ("..", "start with a letter"),
            (".hidden", "start with a letter"),
            ("-opt", "start with a letter"),
            ("a/b", "path separator"),
            ("a\\b", "path separator"),
            ("../etc", "path separator"),
            ("a\nb", "control character (U+000A)"),
            ("a\0", "control character (U+0000)"),
            ("a b", "' '"),
            ("é", "'é'"),
            (&"x".repeat(NAME_MAX + 1), "65 characters"),
        ] {
            let e = validate_name(bad).unwrap_err();
            assert_eq!(e.code, codes::INVALID_SNAPSHOT_NAME, "{bad:?}");
            assert_eq!(e.path, "name");
            assert!(e.message.contains(why), "{bad:?}: {}", e.message);
        }
    }

    #[test]
    fn a_manifest_round_trips() {
        let m = manifest("s1");
        let text = m.to_json();
        assert_eq!(Manifest::parse(&text, "s1").unwrap(), m);
        // Fields a later version 1 adds are ignored.
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["later"] = serde_json::json!(true);
        assert_eq!(Manifest::parse(&v.to_string(), "s1").unwrap(), m);
    }

    #[test]
    fn a_wrong_manifest_is_refused_with_the_reason() {
        let m = manifest("s1");
        let mut v: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        v["version"] = serde_json::json!(2);
        let e = Manifest::parse(&v.to_string(), "s1").unwrap_err();
        assert!(e.contains("manifest version 2 is not supported"), "{e}");
        assert!(
            Manifest::parse("{ not json", "s1")
                .unwrap_err()
                .contains("not JSON")
        );
        assert!(
            Manifest::parse(r#"{"name":"s1"}"#, "s1")
                .unwrap_err()
                .contains("no manifest version")
        );
        assert!(
            Manifest::parse(r#"{"version":1,"name":"s1"}"#, "s1")
                .unwrap_err()
                .contains("not a snapshot manifest")
        );
        assert!(
            Manifest::parse(&m.to_json(), "other")
                .unwrap_err()
                .contains("its file says")
        );
        let mut v: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        v["data"] = serde_json::json!("../../etc/passwd");
        assert!(
            Manifest::parse(&v.to_string(), "s1")
                .unwrap_err()
                .contains("unexpected data file")
        );
    }

    #[test]
    fn a_scan_skips_corrupt_manifests_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write_atomic(d, "good.json", manifest("good").to_json().as_bytes()).unwrap();
        std::fs::write(d.join("bad.json"), "{ corrupt").unwrap();
        std::fs::write(d.join("good.img"), b"").unwrap();
        std::fs::write(d.join(".tmpfile.json"), "x").unwrap();
        let (found, warnings) = scan_dir(d);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].manifest.name, "good");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("bad.json") && warnings[0].contains("skipped"));
        // No temporary file is left by the atomic write.
        let left: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        assert!(scan_dir(&d.join("missing")).0.is_empty());
    }

    const NQN: &str = "nqn.2026-11.io.ebof:unit";

    fn control(dir: &Path) -> Control {
        let toml = format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n[[subsystems]]\nnqn = \"{NQN}\"\n\
             [[subsystems.namespaces]]\nbackend = \"file\"\npath = {:?}\nsize = \"1M\"\n\
             [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n\
             [management]\ndata_dirs = [{:?}]\n",
            dir.join("a.img").display().to_string(),
            dir.display().to_string()
        );
        let cfg = Config::from_toml_str(&toml).unwrap();
        let target = std::sync::Arc::new(crate::build::build_target(&cfg).unwrap());
        Control::new(target, cfg, None)
    }

    fn snap(c: &Control, nsid: &str, name: &str) -> Result<SnapshotView, ApiError> {
        c.snapshot_namespace(NQN, nsid, &SnapshotRequest { name: name.into() })
    }

    #[test]
    fn snapshot_clone_and_delete_through_the_control_plane() {
        use std::os::unix::fs::FileExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let c = control(dir);
        let origin = dir.join("a.img");
        File::options()
            .write(true)
            .open(&origin)
            .unwrap()
            .write_all_at(b"point in time", 4096)
            .unwrap();
        let v = snap(&c, "1", "s").unwrap();
        assert!(v.method == "reflink" || v.method == "copy", "{v:?}");
        assert_eq!((v.size, v.block_size, v.origin.nsid), (1 << 20, 512, 1));
        assert_eq!(
            std::fs::read(&v.path).unwrap(),
            std::fs::read(&origin).unwrap()
        );
        assert_eq!(c.snapshots(), vec![v.clone()]);
        assert_eq!(c.state().snapshots, vec![v.clone()]);

        let code = |r: Result<SnapshotView, ApiError>| r.unwrap_err().code;
        assert_eq!(code(snap(&c, "1", "s")), codes::DUPLICATE_SNAPSHOT);
        assert_eq!(code(snap(&c, "2", "r")), codes::SNAPSHOT_UNSUPPORTED);
        assert_eq!(code(snap(&c, "9", "x")), codes::UNKNOWN_NAMESPACE);
        assert_eq!(code(snap(&c, "0", "x")), ebof_config::codes::INVALID_NSID);
        assert_eq!(code(snap(&c, "1", "a/b")), codes::INVALID_SNAPSHOT_NAME);
        let e = c
            .snapshot_namespace(
                "nqn.2026-11.io.ebof:none",
                "1",
                &SnapshotRequest { name: "x".into() },
            )
            .unwrap_err();
        assert_eq!(e.code, codes::UNKNOWN_SUBSYSTEM);

        // Overwritten after the snapshot; the clone has the old data.
        File::options()
            .write(true)
            .open(&origin)
            .unwrap()
            .write_all_at(b"later writes!", 4096)
            .unwrap();
        let req = CloneRequest {
            subsystem: NQN.into(),
            ..Default::default()
        };
        let made = c.clone_snapshot("s", &req).unwrap();
        assert_eq!(made.added.namespace.nsid, 3);
        let clone = PathBuf::from(made.added.namespace.path.clone().unwrap());
        assert_eq!(clone, dir.join("unit-ns3-s.img"));
        let mut b = [0u8; 13];
        File::open(&clone)
            .unwrap()
            .read_exact_at(&mut b, 4096)
            .unwrap();
        assert_eq!(&b, b"point in time");
        assert_ne!(
            made.added.namespace.uuid, v.origin.uuid,
            "a clone is another namespace"
        );

        // Refused clones leave no file and no namespace.
        let files = |d: &Path| std::fs::read_dir(d).unwrap().count();
        let before = (files(dir), c.state().subsystems[0].namespaces.len());
        let taken = CloneRequest {
            path: Some(clone.display().to_string()),
            ..req.clone()
        };
        assert_eq!(
            c.clone_snapshot("s", &taken).unwrap_err().code,
            codes::FILE_EXISTS
        );
        let used = CloneRequest {
            nsid: Some(1),
            ..req.clone()
        };
        let e = c.clone_snapshot("s", &used).unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.path.as_str()),
            (ebof_config::codes::DUPLICATE_NSID, "nsid")
        );
        assert_eq!(
            c.clone_snapshot("nope", &req).unwrap_err().code,
            codes::UNKNOWN_SNAPSHOT
        );
        // Adding fails after the file was made (a bad UUID): the file is removed again.
        let bad_uuid = CloneRequest {
            uuid: Some("not-a-uuid".into()),
            ..req.clone()
        };
        assert!(c.clone_snapshot("s", &bad_uuid).is_err());
        // Outside the data directories (issue 32, M1): refused before any file is made.
        let elsewhere = tempfile::tempdir().unwrap();
        let outside = elsewhere.path().join("outside.img");
        let e = c
            .clone_snapshot(
                "s",
                &CloneRequest {
                    path: Some(outside.display().to_string()),
                    ..req.clone()
                },
            )
            .unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.path.as_str()),
            (codes::PATH_NOT_ALLOWED, "path")
        );
        assert!(!outside.exists());
        assert_eq!(
            before,
            (files(dir), c.state().subsystems[0].namespaces.len())
        );

        // Deleted: gone from the list, its files removed, the clone stays.
        let d = c.delete_snapshot("s").unwrap();
        assert_eq!(d.path, v.path);
        assert!(c.snapshots().is_empty());
        assert!(!Path::new(&v.path).exists());
        assert!(clone.exists());
        assert_eq!(
            c.delete_snapshot("s").unwrap_err().code,
            codes::UNKNOWN_SNAPSHOT
        );
    }

    /// M2: with umask 022, a snapshot of a 0600 namespace file, its manifest and a clone of
    /// it are 0600, and the snapshot directory 0700.
    #[test]
    fn snapshots_and_clones_are_owner_only() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        crate::paths::tests::umask_022();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let c = control(dir);
        let origin = dir.join("a.img");
        std::fs::set_permissions(&origin, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
        let v = snap(&c, "1", "s").unwrap();
        assert_eq!(mode(Path::new(&v.path)), 0o600);
        assert_eq!(mode(&dir.join(DIR_NAME)), 0o700);
        assert_eq!(mode(&dir.join(DIR_NAME).join("s.json")), 0o600);
        let made = c
            .clone_snapshot(
                "s",
                &CloneRequest {
                    subsystem: NQN.into(),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(mode(Path::new(&made.added.namespace.path.unwrap())), 0o600);
        // A snapshot directory someone else can write in is not used.
        let shared = tempfile::tempdir().unwrap();
        let c2 = control(shared.path());
        let d = shared.path().join(DIR_NAME);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = snap(&c2, "1", "t").unwrap_err();
        assert_eq!(e.code, codes::SNAPSHOT_FAILED, "{e}");
        assert!(e.message.contains("group or others"), "{e}");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
    }

    #[test]
    fn clone_file_names_come_from_the_nqn() {
        assert_eq!(nqn_tail("nqn.2026-11.io.ebof:vol/1"), "vol_1");
        assert_eq!(nqn_tail("nqn.2026-11.io.ebof:"), "ns");
    }
}
