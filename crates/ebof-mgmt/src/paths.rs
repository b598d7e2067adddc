//! Where the management API may put or open storage, and when two paths are one file
//! (issue 32, review findings M1 and M5; ADR 0008, "management security").
//!
//! **The allowlist.** Holding the management token must not be holding root on the box. So a
//! request may make or open:
//! - a `file` namespace (and a snapshot's clone) only inside a `[[pools]]` directory or a
//!   directory of `[management] data_dirs` ([`check_file`], code `path-not-allowed`);
//! - a `block` namespace only on a device of `[management] block_devices` (or on a regular
//!   file inside those directories, which is no more than a `file` namespace could do)
//!   ([`check_block`], code `device-not-allowed`);
//! - a saved configuration only at the running configuration's own path or inside `data_dirs`
//!   ([`check_save`], code `save-path-not-allowed`).
//!
//! The configuration file is not restricted: what it names at start was put there by whoever
//! may edit it, who is root on the box already.
//!
//! Paths are compared **after resolution** ([`resolve`]): the longest part that exists is
//! canonicalised (so `..` and symbolic links are resolved, the last component too if it
//! exists), so a symbolic link planted inside an allowed directory that points outside it is
//! refused; directories still to be made (the backend makes them) may follow, as plain names
//! only. What cannot be resolved so (a dangling link, `..` past what exists) is refused, and
//! so is a path whose last component is `..` or `.`. The check and the open
//! are two steps: someone who can write in an allowed directory could swap a link in between;
//! the allowed directories are the administrator's, so that is not a boundary this defends.
//!
//! **One file, two names (M5).** The configuration's own duplicate check compares paths as
//! text; [`same_file_as`] compares what they name: device and inode when both exist, else
//! the resolved paths. `/pool/sub/../x.img` and `/pool/x.img` are one file.

use crate::api::{ApiError, codes};
use ebof_config::{BackendChoice, Config, codes as cfg_codes};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// `path` made absolute (against the server's working directory) and resolved: its longest
/// existing prefix canonicalised (`..` and symbolic links resolved, a last component that
/// exists followed to its target), the components that do not exist yet appended, which must
/// be plain names (no `..` past what exists, no dangling link). `None` when it cannot be
/// resolved so, or names no file (`/`, a last component `..` or `.`).
pub fn resolve(path: &Path) -> Option<PathBuf> {
    let abs = std::path::absolute(path).ok()?;
    if !matches!(abs.components().next_back()?, Component::Normal(_)) {
        return None;
    }
    let parts: Vec<Component<'_>> = abs.components().collect();
    for k in (1..=parts.len()).rev() {
        let prefix: PathBuf = parts[..k].iter().collect();
        let Ok(base) = std::fs::canonicalize(&prefix) else {
            // There but not resolvable (a dangling link, no permission): refuse.
            if std::fs::symlink_metadata(&prefix).is_ok() {
                return None;
            }
            continue;
        };
        let rest = &parts[k..];
        if !rest.iter().all(|c| matches!(c, Component::Normal(_))) {
            return None;
        }
        return Some(rest.iter().fold(base, |p, c| p.join(c)));
    }
    None
}

/// The directories a request may make or open `file` namespaces in: the pools' and
/// `data_dirs`, each resolved (one that does not exist holds nothing and is left out).
fn file_roots(cfg: &Config) -> Vec<PathBuf> {
    cfg.pools
        .iter()
        .map(|p| p.directory.as_path())
        .chain(cfg.management.data_dirs.iter().map(PathBuf::as_path))
        .filter_map(|d| std::fs::canonicalize(d).ok())
        .collect()
}

fn data_roots(cfg: &Config) -> Vec<PathBuf> {
    cfg.management
        .data_dirs
        .iter()
        .filter_map(|d| std::fs::canonicalize(d).ok())
        .collect()
}

/// Whether the resolved `p` lies strictly inside one of `roots` (component-wise).
fn inside(p: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| p != r && p.starts_with(r))
}

fn shown(dirs: &[PathBuf]) -> String {
    if dirs.is_empty() {
        "none configured".to_string()
    } else {
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Why `path` resolved to `resolved` is refused, for the message.
fn resolution(path: &Path, resolved: Option<&Path>) -> String {
    match resolved {
        Some(r) if r != path => format!("{} (resolved: {})", path.display(), r.display()),
        Some(_) => path.display().to_string(),
        None => format!(
            "{} (its directory does not exist or it names no file)",
            path.display()
        ),
    }
}

/// A `file` namespace (or a clone's file) at `path` may be made or opened by the API: only
/// inside a pool's directory or a `data_dirs` directory, after resolution. `field` is the
/// request's field path for the error (`path-not-allowed`).
pub fn check_file(cfg: &Config, path: &Path, field: &str) -> Result<(), ApiError> {
    let resolved = resolve(path);
    let roots = file_roots(cfg);
    if let Some(r) = &resolved
        && inside(r, &roots)
    {
        return Ok(());
    }
    let pools: Vec<PathBuf> = cfg.pools.iter().map(|p| p.directory.clone()).collect();
    Err(ApiError::new(
        codes::PATH_NOT_ALLOWED,
        field,
        format!(
            "{} is outside the directories the management API may use for file namespaces \
             (pools: {}; [management] data_dirs: {}); add its directory to data_dirs in the \
             configuration file, or make the namespace in a pool",
            resolution(path, resolved.as_deref()),
            shown(&pools),
            shown(&cfg.management.data_dirs),
        ),
    ))
}

/// A `block` namespace on `path` may be opened by the API: only a device listed in
/// `[management] block_devices` (compared after resolution, so `/dev/disk/by-id/…` and the
/// `/dev/vdb` it points to are one), or a regular file inside the `file` directories.
pub fn check_block(cfg: &Config, path: &Path, field: &str) -> Result<(), ApiError> {
    let resolved = resolve(path);
    if let Some(r) = &resolved {
        let listed = cfg
            .management
            .block_devices
            .iter()
            .filter_map(|d| resolve(d))
            .any(|d| &d == r);
        if listed {
            return Ok(());
        }
        if std::fs::metadata(r).is_ok_and(|m| m.is_file()) && inside(r, &file_roots(cfg)) {
            return Ok(());
        }
    }
    Err(ApiError::new(
        codes::DEVICE_NOT_ALLOWED,
        field,
        format!(
            "{} is not a block device the management API may open ([management] \
             block_devices: {}); list it there in the configuration file",
            resolution(path, resolved.as_deref()),
            shown(&cfg.management.block_devices),
        ),
    ))
}

/// The storage a namespace of the running configuration `ns` asks for may be made or opened
/// by the API ([`check_file`] or [`check_block`]; RAM needs no check).
pub fn check_namespace(
    cfg: &Config,
    ns: &ebof_config::Namespace,
    field: &str,
) -> Result<(), ApiError> {
    match &ns.backend {
        BackendChoice::Ram { .. } => Ok(()),
        BackendChoice::File { path, .. } => check_file(cfg, path, field),
        BackendChoice::Block { path } => check_block(cfg, path, field),
    }
}

/// `save` may write `path`: the running configuration's own file (`config_file`), or a file
/// inside `data_dirs`, after resolution (code `save-path-not-allowed`).
pub fn check_save(
    cfg: &Config,
    config_file: Option<&Path>,
    path: &Path,
    field: &str,
) -> Result<(), ApiError> {
    let resolved = resolve(path);
    if let Some(r) = &resolved {
        if config_file.and_then(resolve).as_ref() == Some(r) {
            return Ok(());
        }
        if inside(r, &data_roots(cfg)) {
            return Ok(());
        }
    }
    Err(ApiError::new(
        codes::SAVE_PATH_NOT_ALLOWED,
        field,
        format!(
            "{} is neither the running configuration's file ({}) nor inside [management] \
             data_dirs ({}): the management API saves only there",
            resolution(path, resolved.as_deref()),
            config_file.map_or_else(|| "none".to_string(), |p| p.display().to_string()),
            shown(&cfg.management.data_dirs),
        ),
    ))
}

/// Whether `a` and `b` name one file: same device and inode when both exist, else the same
/// resolved path (see [`resolve`]).
pub fn same_file(a: &Path, b: &Path) -> bool {
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return (x.dev(), x.ino()) == (y.dev(), y.ino());
    }
    match (resolve(a), resolve(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// `duplicate-path` at `field` if the storage of namespace `nsid` of subsystem `nqn` in `cfg`
/// is the file or device of another namespace of `cfg` under another name.
pub fn same_file_as(cfg: &Config, nqn: &str, nsid: u32, field: &str) -> Result<(), ApiError> {
    let Some(path) = cfg
        .subsystems
        .iter()
        .find(|s| s.nqn == nqn)
        .and_then(|s| s.namespaces.iter().find(|n| n.nsid == nsid))
        .and_then(|n| n.backend.path())
    else {
        return Ok(());
    };
    for s in &cfg.subsystems {
        for n in &s.namespaces {
            if s.nqn == nqn && n.nsid == nsid {
                continue;
            }
            if let Some(other) = n.backend.path()
                && same_file(path, other)
            {
                return Err(ApiError::new(
                    cfg_codes::DUPLICATE_PATH,
                    field,
                    format!(
                        "{} is the file of {} namespace {} already (as {})",
                        path.display(),
                        s.nqn,
                        n.nsid,
                        other.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Mode of the files that hold volume data or secrets (snapshots, clones, saved
/// configurations, catalogues), whatever the umask.
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// Mode of the directories made for them.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// Create a new file at `path` for writing: owner-only ([`PRIVATE_FILE_MODE`]) from its first
/// instant, never an existing file (`O_EXCL`) nor through a symbolic link (`O_NOFOLLOW`).
pub fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = std::fs::File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(PRIVATE_FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    // The umask can only have taken bits away; give the owner's back (on the open file).
    f.set_permissions(std::fs::Permissions::from_mode(PRIVATE_FILE_MODE))?;
    Ok(f)
}

/// Make directory `dir` (and missing parents) owner-only ([`PRIVATE_DIR_MODE`]). One that
/// exists already must belong to us and be writable by nobody else, or it is refused: another
/// local user could otherwise swap what we put in it.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::symlink_metadata(dir) {
        Ok(_) => check_owned_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(PRIVATE_DIR_MODE)
            .create(dir),
        Err(e) => Err(e),
    }
}

/// `dir` is a directory (not a link to one) owned by our effective user, writable by nobody
/// else (`mode & 0o022 == 0`).
pub fn check_owned_dir(dir: &Path) -> std::io::Result<()> {
    let m = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let why = if !m.is_dir() {
        "is not a directory".to_string()
    } else if m.uid() != euid {
        format!("belongs to uid {}, not to us (uid {euid})", m.uid())
    } else if m.mode() & 0o022 != 0 {
        format!(
            "can be written by group or others (mode {:04o})",
            m.mode() & 0o7777
        )
    } else {
        return Ok(());
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!("{} {why}: refusing to use it", dir.display()),
    ))
}

/// A temporary name for a file to be renamed to `name` in the same directory: hidden and
/// unpredictable (`.NAME.tmp-` and 16 random hex digits), so nobody can plant a link at it
/// beforehand.
pub fn temp_name(name: &str) -> std::io::Result<String> {
    let mut r = [0u8; 8];
    getrandom::fill(&mut r).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(format!(".{name}.tmp-{:016x}", u64::from_ne_bytes(r)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn cfg(data_dirs: &[&Path], block: &[&Path]) -> Config {
        let mut c = Config::from_toml_str(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n\
             [[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:t\"\n\
             [[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n",
        )
        .unwrap();
        c.management.data_dirs = data_dirs.iter().map(|p| p.to_path_buf()).collect();
        c.management.block_devices = block.iter().map(|p| p.to_path_buf()).collect();
        c
    }

    #[test]
    fn file_paths_resolve_before_they_are_compared() {
        let t = tempfile::tempdir().unwrap();
        let data = t.path().join("data");
        let out = t.path().join("out");
        std::fs::create_dir_all(data.join("sub")).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::os::unix::fs::symlink(&out, data.join("link-dir")).unwrap();
        std::os::unix::fs::symlink(out.join("f.img"), data.join("link-file")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", data.join("hostname")).unwrap();
        let c = cfg(&[&data], &[]);
        for ok in [
            data.join("a.img"),
            data.join("sub/../b.img"),
            data.join("sub/c.img"),
            data.join("new/dir/d.img"),
        ] {
            check_file(&c, &ok, "p").unwrap_or_else(|e| panic!("{}: {e}", ok.display()));
        }
        for bad in [
            out.join("a.img"),
            data.join("../out/a.img"),
            data.join("link-dir/a.img"),
            data.join("link-file"),
            data.join("hostname"),
            data.join("missing/../../out/a.img"),
            data.join("missing/../a.img"),
            data.clone(),
            data.join(".."),
            data.join("sub/.."),
            PathBuf::from("/etc/hostname"),
            PathBuf::from("relative.img"),
        ] {
            let e = check_file(&c, &bad, "p").unwrap_err();
            assert_eq!(
                (e.code.as_str(), e.path.as_str()),
                (codes::PATH_NOT_ALLOWED, "p")
            );
            assert_eq!(e.http_status(), 403);
            assert!(e.message.contains("data_dirs"), "{e}");
        }
        // Nothing configured: nothing allowed.
        let e = check_file(&cfg(&[], &[]), &data.join("a.img"), "p").unwrap_err();
        assert!(e.message.contains("none configured"), "{e}");
    }

    #[test]
    fn block_devices_only_as_listed() {
        let t = tempfile::tempdir().unwrap();
        let link = t.path().join("by-id");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        let c = cfg(&[], &[Path::new("/dev/null")]);
        check_block(&c, Path::new("/dev/null"), "p").unwrap();
        check_block(&c, &link, "p").unwrap();
        for bad in ["/dev/zero", "/etc/hostname", "/dev/../etc/hostname"] {
            let e = check_block(&c, Path::new(bad), "p").unwrap_err();
            assert_eq!(e.code, codes::DEVICE_NOT_ALLOWED, "{bad}");
        }
        // Listed by its link: the device it points to is allowed.
        let c = cfg(&[], &[&link]);
        check_block(&c, Path::new("/dev/null"), "p").unwrap();
    }

    #[test]
    fn save_only_over_the_configuration_or_in_data_dirs() {
        let t = tempfile::tempdir().unwrap();
        let data = t.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let conf = t.path().join("ebof.toml");
        let c = cfg(&[&data], &[]);
        check_save(&c, Some(&conf), &conf, "path").unwrap();
        check_save(&c, Some(&conf), &data.join("../ebof.toml"), "path").unwrap();
        check_save(&c, Some(&conf), &data.join("copy.toml"), "path").unwrap();
        for bad in [t.path().join("other.toml"), PathBuf::from("/etc/passwd")] {
            let e = check_save(&c, Some(&conf), &bad, "path").unwrap_err();
            assert_eq!(e.code, codes::SAVE_PATH_NOT_ALLOWED);
        }
        let e = check_save(&c, None, &conf, "path").unwrap_err();
        assert_eq!(e.code, codes::SAVE_PATH_NOT_ALLOWED);
    }

    #[test]
    fn one_file_under_two_names_is_one_file() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("sub")).unwrap();
        let a = t.path().join("sub/../x.img");
        let b = t.path().join("x.img");
        // Not there yet: the resolved paths.
        assert!(same_file(&a, &b));
        std::fs::write(&b, b"x").unwrap();
        assert!(same_file(&a, &b));
        std::fs::hard_link(&b, t.path().join("y.img")).unwrap();
        assert!(same_file(&b, &t.path().join("y.img")));
        assert!(!same_file(&b, &t.path().join("z.img")));
    }

    /// The umask the reviewers assumed (the usual one outside systemd's `UMask=0077`).
    pub(crate) fn umask_022() {
        // SAFETY: umask has no preconditions; 022 is the usual default, harmless to the
        // other tests of this process.
        unsafe { libc::umask(0o022) };
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn private_files_and_directories_whatever_the_umask() {
        umask_022();
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        create_private(&f).unwrap();
        assert_eq!(mode(&f), 0o600);
        // Never an existing file, never through a link.
        assert!(create_private(&f).is_err());
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, t.path().join("link")).unwrap();
        assert!(create_private(&t.path().join("link")).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");

        let d = t.path().join("a/b");
        private_dir(&d).unwrap();
        assert_eq!(mode(&d), 0o700);
        private_dir(&d).unwrap();
        let shared = t.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&shared).unwrap_err();
        assert!(e.to_string().contains("group or others"), "{e}");

        let (a, b) = (temp_name("x.toml").unwrap(), temp_name("x.toml").unwrap());
        assert!(a.starts_with(".x.toml.tmp-") && a.len() == ".x.toml.tmp-".len() + 16);
        assert_ne!(a, b);
    }
}
