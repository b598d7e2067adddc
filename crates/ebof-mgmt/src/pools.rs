//! Storage pools (ADR 0022): directories of `[[pools]]` that the management API makes file
//! namespaces in, with the accounting that keeps a pool from handing out more than it has.
//!
//! **Accounting.** A pool's namespaces are the running configuration's namespaces that carry
//! `pool = NAME`. *Provisioned* is their sizes added up; *used* is what their files hold now
//! (`st_blocks`, the thin-provisioning figure of `NamespaceView::allocated_bytes`); *free* is
//! what can still be provisioned: the file system's available bytes less the unwritten part of
//! the pool's thin files (`provisioned - used`, which they may still claim), and at most
//! `size - provisioned` for a capped pool; never below 0. A namespace added, cloned into or
//! grown in a pool must fit in *free*, or the request fails with `pool-full` and changes
//! nothing.
//!
//! **Files.** The box names a pool namespace's file itself ([`ebof_config::pool_file_name`],
//! deterministic from NQN and NSID), creates it sparse, and deletes it once the namespace's
//! removal is committed (the pool owns it; files outside pools are never deleted). A file of
//! that name that no namespace of the running configuration uses is an orphan (a crash between
//! its creation and the configuration's commit) and is replaced, with a warning.

use crate::api::{ApiError, FsSpaceView, PoolView, codes};
use ebof_config::{Config, Pool, codes as cfg_codes};
use nvmf_target::Target;
use std::path::{Path, PathBuf};

/// Mode of a pool directory `ebof serve` creates: owner only (it holds volume data).
pub const DIRECTORY_MODE: u32 = 0o700;

/// The view of `pool` in the running configuration `cfg` of `target` (see the module docs).
pub fn pool_view(cfg: &Config, target: &Target, pool: &Pool) -> PoolView {
    let fs = ebof_backend::fs_space_of(&pool.directory).ok();
    let (mut provisioned, mut used, mut namespaces) = (0u64, 0u64, 0u32);
    for s in &cfg.subsystems {
        let live = target.subsystem(&s.nqn);
        for n in s
            .namespaces
            .iter()
            .filter(|n| n.pool.as_deref() == Some(pool.name.as_str()))
        {
            namespaces = namespaces.saturating_add(1);
            match live.as_ref().and_then(|l| l.namespace(n.nsid)) {
                Some(l) => {
                    let size = l.backend.size();
                    provisioned = provisioned.saturating_add(size);
                    used = used.saturating_add(l.backend.allocated_bytes().min(size));
                }
                None => provisioned = provisioned.saturating_add(n.backend.size().unwrap_or(0)),
            }
        }
    }
    let unwritten = provisioned.saturating_sub(used);
    let mut free = fs.map_or(0, |f| f.available_bytes.saturating_sub(unwritten));
    if let Some(limit) = pool.size {
        free = free.min(limit.saturating_sub(provisioned));
    }
    PoolView {
        name: pool.name.clone(),
        directory: pool.directory.display().to_string(),
        size_limit: pool.size,
        capacity_bytes: pool.size.or(fs.map(|f| f.total_bytes)).unwrap_or(0),
        provisioned_bytes: provisioned,
        used_bytes: used,
        free_bytes: free,
        namespaces,
        filesystem: fs.map(|f| FsSpaceView {
            total_bytes: f.total_bytes,
            available_bytes: f.available_bytes,
            fsid: f.fsid,
        }),
        encrypted: pool.encryption.is_some(),
    }
}

/// Every pool of `cfg`, in configuration order.
pub fn pool_views(cfg: &Config, target: &Target) -> Vec<PoolView> {
    cfg.pools
        .iter()
        .map(|p| pool_view(cfg, target, p))
        .collect()
}

/// The pool a request names, or `invalid-pool` / `unknown-pool` at `field`.
pub(crate) fn requested_pool(cfg: &Config, name: &str, field: &str) -> Result<Pool, ApiError> {
    ebof_config::check_pool_name(name).map_err(|e| ApiError::from_config(&e.at(field), ""))?;
    cfg.pool(name).cloned().ok_or_else(|| {
        let known: Vec<&str> = cfg.pools.iter().map(|p| p.name.as_str()).collect();
        ApiError::new(
            cfg_codes::UNKNOWN_POOL,
            field,
            format!(
                "no pool named {name:?} on this box (pools: {}; see `ebof ctl pool list`)",
                if known.is_empty() {
                    "none configured".to_string()
                } else {
                    known.join(", ")
                }
            ),
        )
    })
}

/// `pool-full` unless `bytes` more fit in the pool as `view` shows it.
pub(crate) fn ensure_room(
    view: &PoolView,
    bytes: u64,
    what: &str,
    field: &str,
) -> Result<(), ApiError> {
    if bytes <= view.free_bytes {
        return Ok(());
    }
    let cap = match view.size_limit {
        Some(l) => format!("capped at {}", human(l)),
        None => "no cap: bounded by its file system".to_string(),
    };
    Err(ApiError::new(
        codes::POOL_FULL,
        field,
        format!(
            "pool {} has {} free ({} bytes), not enough for {what} of {} ({bytes} bytes): \
             {} provisioned, {} used, {cap}; nothing was changed",
            view.name,
            human(view.free_bytes),
            view.free_bytes,
            human(bytes),
            human(view.provisioned_bytes),
            human(view.used_bytes),
        ),
    ))
}

/// A size for a message: exact when a binary unit divides it (`64M`), else bytes.
fn human(bytes: u64) -> String {
    ebof_config::format_size(bytes)
}

/// Make room for a new pool file at `path`: a file already there that no namespace of the
/// running configuration uses (validation has made sure of that) is an orphan of a crash
/// between its creation and the commit, and is removed with a warning.
pub(crate) fn clear_orphan(path: &Path, field: &str) -> Result<(), ApiError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() || m.file_type().is_symlink() => {
            tracing::warn!(
                path = %path.display(),
                bytes = m.len(),
                "orphan pool file (no namespace uses it; left by a crash?) replaced"
            );
            std::fs::remove_file(path).map_err(|e| {
                ApiError::new(
                    codes::BACKEND_FAILED,
                    field,
                    format!("cannot remove the orphan file {}: {e}", path.display()),
                )
            })
        }
        Ok(_) => Err(ApiError::new(
            codes::FILE_EXISTS,
            field,
            format!(
                "{} exists and is not a regular file: the pool cannot make the namespace's file there",
                path.display()
            ),
        )),
        Err(_) => Ok(()),
    }
}

/// Delete the files of removed pool namespaces (after the removal is committed). A failure is
/// logged: the namespace is gone either way, and a file left is replaced as an orphan later.
pub(crate) fn delete_files(files: &[PathBuf]) {
    crate::crypt::erase_headers(files);
    for f in files {
        match std::fs::remove_file(f) {
            Ok(()) => tracing::info!(path = %f.display(), "pool file deleted"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %f.display(), error = %e, "pool file not deleted"),
        }
    }
}

/// Create every missing pool directory (mode [`DIRECTORY_MODE`], parents too) and check that
/// each one is a directory. Run by `ebof serve` before it serves.
pub fn ensure_directories(cfg: &Config) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    for (i, p) in cfg.pools.iter().enumerate() {
        let d = &p.directory;
        match std::fs::metadata(d) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "pools[{i}].directory: {} exists and is not a directory",
                    d.display()
                ));
            }
            Err(_) => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(DIRECTORY_MODE)
                    .create(d)
                    .map_err(|e| {
                        format!(
                            "pools[{i}].directory: cannot create {} (pool {}): {e}",
                            d.display(),
                            p.name
                        )
                    })?;
                tracing::info!(pool = %p.name, directory = %d.display(), "pool directory created");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NamespaceRequest;
    use crate::control::Control;
    use std::sync::Arc;

    const NQN: &str = "nqn.2026-11.io.ebof:vol";
    const MIB: u64 = 1 << 20;

    /// A pool box with pool `p` (64 MiB cap) in `dir` and one empty subsystem, autosaving to
    /// `dir/ebof.toml`.
    fn control(dir: &Path) -> Control {
        let text = format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n\
             [management]\nautosave = true\ndata_dirs = [{:?}]\n\
             [[pools]]\nname = \"p\"\ndirectory = {:?}\nsize = \"64M\"\n\
             [[subsystems]]\nnqn = \"{NQN}\"\n",
            dir.display().to_string(),
            dir.join("pool").display().to_string()
        );
        let file = dir.join("ebof.toml");
        std::fs::write(&file, &text).unwrap();
        let cfg = Config::from_toml_str(&text).unwrap();
        let target = Arc::new(crate::build::build_target(&cfg).unwrap());
        Control::new(target, cfg, Some(file))
    }

    fn in_pool(size: u64) -> NamespaceRequest {
        NamespaceRequest {
            pool: Some("p".into()),
            size: Some(size),
            ..Default::default()
        }
    }

    #[test]
    fn the_pool_directory_is_made_with_mode_0700() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let c = control(dir.path());
        let m = std::fs::metadata(dir.path().join("pool")).unwrap();
        assert!(m.is_dir());
        // The umask may take bits away, never add any.
        assert_eq!(m.permissions().mode() & 0o077, 0);
        let v = c.pools();
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].capacity_bytes, v[0].provisioned_bytes, v[0].free_bytes),
            (64 * MIB, 0, 64 * MIB)
        );
        assert_eq!(v[0].size_limit, Some(64 * MIB));
        assert!(v[0].filesystem.is_some());
    }

    #[test]
    fn add_resize_remove_in_a_pool() {
        let dir = tempfile::tempdir().unwrap();
        let c = control(dir.path());
        let added = c.add_namespace(NQN, &in_pool(16 * MIB)).unwrap();
        let file = dir
            .path()
            .join("pool")
            .join("nqn.2026-11.io.ebof_vol.ns1.img");
        assert_eq!(added.namespace.path.as_deref(), file.to_str());
        assert_eq!(added.namespace.backend, "file");
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 16 * MIB);
        let v = &c.pools()[0];
        assert_eq!((v.provisioned_bytes, v.namespaces), (16 * MIB, 1));
        assert_eq!(v.free_bytes, 48 * MIB);
        // Sparse: nothing written, nothing held.
        assert!(v.used_bytes < MIB, "{v:?}");
        // Saved, with the pool key, and it loads back.
        let saved = Config::load(&dir.path().join("ebof.toml")).unwrap();
        assert_eq!(saved, c.running());
        assert_eq!(saved.subsystems[0].namespaces[0].pool.as_deref(), Some("p"));

        // Too big: pool-full, nothing changed, no file.
        let before = c.running();
        let e = c.add_namespace(NQN, &in_pool(49 * MIB)).unwrap_err();
        assert_eq!(e.code, codes::POOL_FULL);
        assert_eq!(e.http_status(), 507);
        assert!(
            e.message.contains("pool p") && e.message.contains("49M") && e.message.contains("48M"),
            "{e}"
        );
        assert_eq!(c.running(), before);
        assert!(
            !dir.path()
                .join("pool/nqn.2026-11.io.ebof_vol.ns2.img")
                .exists()
        );

        // Growth beyond free: pool-full; within: fine.
        let grow = |size| crate::api::ResizeRequest {
            size,
            shrink: false,
        };
        let e = c.resize_namespace(NQN, "1", &grow(65 * MIB)).unwrap_err();
        assert_eq!(e.code, codes::POOL_FULL, "{e}");
        assert_eq!(c.running(), before);
        c.resize_namespace(NQN, "1", &grow(64 * MIB)).unwrap();
        assert_eq!(c.pools()[0].free_bytes, 0);
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 64 * MIB);

        // Removal deletes the file (the pool owns it) and gives the room back.
        c.remove_namespace(NQN, "1").unwrap();
        assert!(!file.exists());
        let v = &c.pools()[0];
        assert_eq!(
            (v.provisioned_bytes, v.free_bytes, v.namespaces),
            (0, 64 * MIB, 0)
        );
    }

    #[test]
    fn refusals_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let c = control(dir.path());
        let before = c.running();
        let cases = [
            (
                NamespaceRequest {
                    pool: Some("q".into()),
                    ..in_pool(MIB)
                },
                ebof_config::codes::UNKNOWN_POOL,
                "pool",
            ),
            (
                NamespaceRequest {
                    pool: Some("a b".into()),
                    ..in_pool(MIB)
                },
                ebof_config::codes::INVALID_POOL,
                "pool",
            ),
            (
                NamespaceRequest {
                    path: Some("/tmp/x.img".into()),
                    ..in_pool(MIB)
                },
                ebof_config::codes::FORBIDDEN_FIELD,
                "path",
            ),
            (
                NamespaceRequest {
                    size: None,
                    ..in_pool(MIB)
                },
                ebof_config::codes::MISSING_FIELD,
                "size",
            ),
            (
                NamespaceRequest {
                    backend: "ram".into(),
                    ..in_pool(MIB)
                },
                ebof_config::codes::FORBIDDEN_FIELD,
                "pool",
            ),
            (in_pool(1000), ebof_config::codes::INVALID_SIZE, "size"),
            (
                NamespaceRequest {
                    size: Some(MIB),
                    ..Default::default()
                },
                ebof_config::codes::MISSING_FIELD,
                "backend",
            ),
        ];
        for (req, code, field) in cases {
            let e = c.add_namespace(NQN, &req).unwrap_err();
            assert_eq!(
                (e.code.as_str(), e.path.as_str()),
                (
                    code,
                    format!("subsystems[0].namespaces[0].{field}").as_str()
                ),
                "{req:?}: {e}"
            );
        }
        assert_eq!(
            ApiError::new(ebof_config::codes::UNKNOWN_POOL, "", "").http_status(),
            404
        );
        assert_eq!(c.running(), before);
        assert_eq!(
            std::fs::read_dir(dir.path().join("pool")).unwrap().count(),
            0
        );
    }

    #[test]
    fn an_orphan_file_is_replaced_and_a_subsystem_removal_deletes_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let c = control(dir.path());
        let orphan = dir.path().join("pool/nqn.2026-11.io.ebof_vol.ns3.img");
        std::fs::write(&orphan, vec![0xAB; 8192]).unwrap();
        let outside = dir.path().join("outside.img");
        c.add_namespace(
            NQN,
            &NamespaceRequest {
                nsid: Some(3),
                ..in_pool(MIB)
            },
        )
        .unwrap();
        let data = std::fs::read(&orphan).unwrap();
        assert_eq!(data.len() as u64, MIB);
        assert!(data.iter().all(|b| *b == 0), "the orphan's data is gone");
        c.add_namespace(
            NQN,
            &NamespaceRequest {
                backend: "file".into(),
                path: Some(outside.display().to_string()),
                size: Some(MIB),
                ..Default::default()
            },
        )
        .unwrap();
        c.remove_subsystem(NQN).unwrap();
        assert!(!orphan.exists(), "the pool file goes with its subsystem");
        assert!(outside.exists(), "a file outside any pool is never deleted");
    }

    #[test]
    fn metrics_show_the_pools() {
        let dir = tempfile::tempdir().unwrap();
        let c = control(dir.path());
        c.add_namespace(NQN, &in_pool(4 * MIB)).unwrap();
        let text = crate::metrics::render_with_pools(&c.target, &c.pools()).unwrap();
        for line in [
            "ebof_pool_capacity_bytes{pool=\"p\"} 67108864",
            "ebof_pool_provisioned_bytes{pool=\"p\"} 4194304",
            "ebof_pool_free_bytes{pool=\"p\"} 62914560",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert!(
            !crate::metrics::render(&c.target)
                .unwrap()
                .contains("ebof_pool_")
        );
    }
}
