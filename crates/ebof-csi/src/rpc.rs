//! What the Controller and Node services share: one operation per key at a time (the spec's
//! ABORTED for a second one), argument errors, and the file systems the driver makes.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tonic::{Response, Status};

/// The file systems a mount volume may ask for; the first is the default.
pub(crate) const FS_TYPES: [&str; 2] = ["ext4", "xfs"];

/// The file system a mount capability asks for (`""` means the default), or why it is not
/// one the driver makes.
pub(crate) fn fs_type(asked: &str) -> Result<&str, String> {
    match asked {
        "" => Ok(FS_TYPES[0]),
        f if FS_TYPES.contains(&f) => Ok(f),
        f => Err(format!("fs_type {f:?} is not supported: ext4 or xfs")),
    }
}

/// INVALID_ARGUMENT with `msg`.
pub(crate) fn invalid(msg: impl Into<String>) -> Status {
    Status::invalid_argument(msg.into())
}

/// INVALID_ARGUMENT naming `what` when `v` is empty.
pub(crate) fn required(v: &str, what: &str) -> Result<(), Status> {
    if v.is_empty() {
        Err(invalid(format!("{what} is required")))
    } else {
        Ok(())
    }
}

/// INVALID_ARGUMENT naming `what` unless `v` is an absolute path (what kubelet passes): a
/// relative path would be resolved against the plugin's working directory, and one starting
/// with `-` could be read as an option by the tools it is given to.
pub(crate) fn absolute(v: &str, what: &str) -> Result<(), Status> {
    required(v, what)?;
    if !v.starts_with('/') || v.contains('\0') {
        return Err(invalid(format!("{what} {v:?} is not an absolute path")));
    }
    Ok(())
}

/// For the calls about a volume already published at `v` (NodeGetVolumeStats,
/// NodeExpandVolume): INVALID_ARGUMENT naming `what` when `v` is empty, NOT_FOUND when it is
/// not an absolute path (no volume is published there; the spec's code for a volume not at
/// the path, what csi-sanity checks). Nothing is run for such a path either way.
pub(crate) fn published_path(v: &str, what: &str) -> Result<(), Status> {
    required(v, what)?;
    if !v.starts_with('/') || v.contains('\0') {
        return Err(Status::not_found(format!(
            "{what} {v:?} is not an absolute path: no volume is published there"
        )));
    }
    Ok(())
}

/// A successful answer.
pub(crate) fn ok<T>(v: T) -> Result<Response<T>, Status> {
    Ok(Response::new(v))
}

/// The keys (volume or snapshot IDs, names) with an operation running now.
#[derive(Debug, Clone, Default)]
pub(crate) struct BusySet(Arc<Mutex<HashSet<String>>>);

/// Held while an operation on one key runs.
pub(crate) struct Busy {
    set: BusySet,
    key: String,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Ok(mut s) = self.set.0.lock() {
            s.remove(&self.key);
        }
    }
}

impl BusySet {
    /// Mark `key` busy until the guard drops, or ABORTED if an operation on it runs already
    /// (the CO retries).
    pub(crate) fn hold(&self, key: &str) -> Result<Busy, Status> {
        let mut s = self
            .0
            .lock()
            .map_err(|_| Status::internal("operation lock poisoned"))?;
        if !s.insert(key.to_string()) {
            return Err(Status::aborted(format!(
                "an operation on {key} is already in progress"
            )));
        }
        Ok(Busy {
            set: self.clone(),
            key: key.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_held_once_until_released() {
        let b = BusySet::default();
        let g = b.hold("v").unwrap();
        assert_eq!(b.hold("v").err().unwrap().code(), tonic::Code::Aborted);
        assert!(b.hold("w").is_ok());
        drop(g);
        assert!(b.hold("v").is_ok());
    }

    #[test]
    fn paths_are_absolute() {
        assert!(absolute("/var/lib/kubelet/x", "p").is_ok());
        for bad in ["", "-oremount", "rel/x", "/a\0b"] {
            assert_eq!(
                absolute(bad, "p").unwrap_err().code(),
                tonic::Code::InvalidArgument,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn file_systems() {
        assert_eq!(fs_type("").unwrap(), "ext4");
        assert_eq!(fs_type("xfs").unwrap(), "xfs");
        assert!(fs_type("btrfs").unwrap_err().contains("btrfs"));
    }
}
