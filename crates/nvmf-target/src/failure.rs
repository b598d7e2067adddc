//! Backend failure classes: how a backend error counts for the host (status, counters, rate
//! limited warnings). A leaf: the namespace counters ([`crate::Namespace`]) and the I/O path
//! both use it.

use ebof_backend::BackendError;

/// Why a backend operation failed, as far as the host is concerned: the classes that
/// [`crate::backend_status`] maps, and that the data path rate-limits its warnings by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// The range is outside the backend (a bug above the backend: ranges are checked first).
    OutOfRange,
    /// No space left (`ENOSPC`), quota (`EDQUOT`) or file size limit (`EFBIG`).
    NoSpace,
    /// The backing file is shorter than the namespace (truncated under us): a read found EOF.
    Truncated,
    /// Writes refused: read-only file system or device (`EROFS`), or no permission
    /// (`EACCES`, `EPERM`).
    ReadOnly,
    /// The backend does not support the operation (`EOPNOTSUPP`, `EINVAL` from alignment).
    Unsupported,
    /// Worth retrying: out of memory or resources (`ENOMEM`, `EAGAIN`, `EBUSY`).
    Transient,
    /// The device or file is gone (`ENXIO`, `ENODEV`, `ESTALE`).
    Gone,
    /// This path must not complete the command now (a replicated copy without its lease,
    /// [`ebof_backend::PathInaccessible`]): ANA Inaccessible, the host retries elsewhere.
    PathInaccessible,
    /// The medium failed (`EIO` and anything else).
    Media,
}

impl FailureClass {
    /// Number of classes (`Media` is the last variant; keep it so).
    pub const COUNT: usize = FailureClass::Media as usize + 1;

    /// Every class, in index order.
    pub const ALL: [FailureClass; FailureClass::COUNT] = [
        FailureClass::OutOfRange,
        FailureClass::NoSpace,
        FailureClass::Truncated,
        FailureClass::ReadOnly,
        FailureClass::Unsupported,
        FailureClass::Transient,
        FailureClass::Gone,
        FailureClass::PathInaccessible,
        FailureClass::Media,
    ];

    /// Name for metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            FailureClass::OutOfRange => "out_of_range",
            FailureClass::NoSpace => "no_space",
            FailureClass::Truncated => "truncated",
            FailureClass::ReadOnly => "read_only",
            FailureClass::Unsupported => "unsupported",
            FailureClass::Transient => "transient",
            FailureClass::Gone => "gone",
            FailureClass::PathInaccessible => "path_inaccessible",
            FailureClass::Media => "media",
        }
    }

    /// Classify a backend error by its errno (or kind, for errors made in userspace).
    pub fn of(e: &BackendError) -> FailureClass {
        if e.is_path_inaccessible() {
            return FailureClass::PathInaccessible;
        }
        let io = match e {
            BackendError::OutOfRange { .. } => return FailureClass::OutOfRange,
            BackendError::Io(io) | BackendError::Open { source: io, .. } => io,
            _ => return FailureClass::Media,
        };
        match io.raw_os_error() {
            Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => FailureClass::NoSpace,
            Some(libc::EROFS | libc::EACCES | libc::EPERM) => FailureClass::ReadOnly,
            Some(libc::EOPNOTSUPP | libc::EINVAL) => FailureClass::Unsupported,
            Some(libc::ENOMEM | libc::EAGAIN | libc::EBUSY | libc::EINTR) => {
                FailureClass::Transient
            }
            Some(libc::ENXIO | libc::ENODEV | libc::ESTALE) => FailureClass::Gone,
            Some(_) => FailureClass::Media,
            None => match io.kind() {
                std::io::ErrorKind::UnexpectedEof => FailureClass::Truncated,
                std::io::ErrorKind::WriteZero => FailureClass::NoSpace,
                _ => FailureClass::Media,
            },
        }
    }
}
