//! Where the management socket is, and whether its directory may be trusted: what
//! `ebof serve` binds and `ebof ctl` connects to alike.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where `ebof serve` puts its socket when none is configured, and where `ebof ctl` looks:
/// `/run/ebof/ebof.sock` for root, else `$XDG_RUNTIME_DIR/ebof.sock`, else
/// `/tmp/ebof-UID/ebof.sock`.
pub fn default_socket_path() -> PathBuf {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from("/run/ebof/ebof.sock");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("ebof.sock"),
        _ => PathBuf::from(format!("/tmp/ebof-{uid}/ebof.sock")),
    }
}

/// The private runtime directory `/tmp/ebof-UID` of a non-root user without
/// `XDG_RUNTIME_DIR` (see [`default_socket_path`]).
pub fn tmp_runtime_dir(euid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/ebof-{euid}"))
}

/// Whether the existing directory `dir` of a management socket is safe to serve (or talk)
/// in: a directory (not a link), owned by us or root, writable by nobody else (group or others
/// only with the sticky bit, as `/tmp` has). Our own `/tmp/ebof-UID` is held to what we would
/// have made: ours, mode `& 0o077 == 0`. `Err` says why not.
pub fn check_socket_dir(dir: &Path) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let m = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    let mode = m.mode() & 0o7777;
    if !m.is_dir() {
        return Err("it is not a directory (a symbolic link?)".into());
    }
    if dir == tmp_runtime_dir(euid) {
        if m.uid() != euid {
            return Err(format!(
                "it belongs to uid {}, not to us (uid {euid}): another user made it",
                m.uid()
            ));
        }
        if mode & 0o077 != 0 {
            return Err(format!(
                "its mode is {mode:04o}: group or others have access (chmod 700 it)"
            ));
        }
        return Ok(());
    }
    if m.uid() != euid && m.uid() != 0 {
        return Err(format!(
            "it belongs to uid {}, neither us (uid {euid}) nor root",
            m.uid()
        ));
    }
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(format!(
            "its mode is {mode:04o}: group or others may write in it (and without the sticky bit)"
        ));
    }
    Ok(())
}
