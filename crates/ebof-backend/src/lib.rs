//! # ebof-backend — the storage behind NVMe namespaces
//!
//! **What it is.** The byte-addressed stores a namespace reads and writes, behind one object-safe
//! [`Backend`] trait:
//!
//! * [`RamBackend`] — a sparse RAM disk: one anonymous `MAP_NORESERVE` mapping whose pages
//!   materialise on first write and are given back on deallocate, inside an address-space
//!   reservation it can grow into;
//! * [`FileBackend`] — a regular file (`pread`/`pwrite`, `fdatasync`, hole punching) or a block
//!   device (`BLKGETSIZE64`, `BLKZEROOUT`, write-zeroes-with-unmap), through the page cache or,
//!   with [`BackendOptions::direct`], with `O_DIRECT` (aligned bounce buffers, [`AlignedBuf`]).
//!
//! [`open`] turns a [`BackendSpec`] (built by the config layer) into an `Arc<dyn Backend>`;
//! [`open_with`] does the same with [`BackendOptions`].
//!
//! **What it is not.** No NVMe vocabulary: the controller layer (`nvmf-target`) turns LBAs into
//! byte ranges, range-checks them against [`Backend::size`] and maps [`BackendError`] to an NVMe
//! status. No threads and no async: every call is synchronous and [`Backend::may_block`] tells the
//! runtime whether it must run on a worker thread instead of the reactor. The runtime's I/O
//! engine (io_uring, `ebof-runtime`) does not go through [`Backend::read`]/[`Backend::write`]
//! for file and block backends: [`Backend::raw_io`] gives it the descriptor and the alignment
//! `O_DIRECT` needs, and it submits the reads, writes and syncs itself. The synchronous calls
//! stay the reference (tests, the worker-pool fallback, zeroing and deallocation).
//!
//! **Where it sits.** At the bottom of the command flow: reactor → `nvmf-tcp` → `nvmf-target`
//! (prepare, execute) → **backend** → completion funnel.
//!
//! ## Example
//!
//! A 1 MiB RAM namespace: written bytes read back, deallocated bytes read as zeroes, and a range
//! past the end is an error, not a panic.
//!
//! ```
//! use ebof_backend::{BackendError, BackendKind, BackendSpec};
//!
//! let disk = ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 })?;
//! assert_eq!((disk.kind(), disk.size()), (BackendKind::Ram, 1 << 20));
//! assert!(!disk.may_block()); // the runtime may call it on the reactor
//!
//! disk.write(4096, b"hello, namespace")?;
//! let mut buf = [0u8; 16];
//! disk.read(4096, &mut buf)?;
//! assert_eq!(&buf, b"hello, namespace");
//!
//! disk.deallocate(4096, 4096)?;
//! disk.read(4096, &mut buf)?;
//! assert_eq!(buf, [0; 16]);
//!
//! let err = disk.read((1 << 20) - 8, &mut buf).unwrap_err();
//! assert!(matches!(err, BackendError::OutOfRange { .. }));
//!
//! // Grown while in use: the data stays, the new range reads zero.
//! disk.resize(2 << 20)?;
//! disk.read((1 << 20) - 8, &mut buf)?;
//! assert_eq!(buf, [0; 16]);
//! # Ok::<(), BackendError>(())
//! ```
//!
//! ## Semantics shared by every backend
//!
//! * Byte addressed, `0..size()`. A range with `offset + len > size()`, including one whose end
//!   overflows `u64`, fails with [`BackendError::OutOfRange`] before anything is touched; never a
//!   panic. A zero-length range inside (or at the end of) the backend is a successful no-op.
//! * [`Backend::write`] returns once the data is visible to later reads, not once it is durable:
//!   the controller must advertise a volatile write cache (Identify Controller VWC) and send Flush
//!   to [`Backend::flush`].
//! * After [`Backend::write_zeroes`] and [`Backend::deallocate`] the range reads as zeroes, exactly
//!   that range and nothing around it (Identify Namespace DLFEAT "read zeroes after deallocate").
//! * Calls may come from many threads at once. Disjoint ranges never interfere. Overlapping
//!   concurrent commands leave unspecified content in the overlap, as on a real drive (NVMe leaves
//!   the order of concurrently executing commands undefined).
//!
//! ## Resizing a live backend
//!
//! [`Backend::resize`] changes [`Backend::size`] while hosts do I/O (`ebof ctl ns resize`).
//! The size is one atomic; the data path loads it per call and takes no lock. Resizes are
//! serialised with each other. On failure nothing changed. Data below the smaller of the old
//! and new size is never moved or altered.
//!
//! | | RAM | file | block |
//! |---|---|---|---|
//! | valid sizes | non-zero multiple of 512, at most [`RamBackend::max_size`] | non-zero multiple of 512 | non-zero multiple of the logical block size (512 for a regular file), at most the device size read at resize time |
//! | grow | opens more of the reservation (`mprotect`); the new range reads zero | `ftruncate` (sparse); the new range reads zero | exposes more of the device, as it is |
//! | shrink | the pages past the end are released (`MADV_DONTNEED`) | `ftruncate`: the data past the end is discarded | hides the rest of the device; nothing on it changes |
//! | too large | [`BackendError::ResizeBeyondLimit`] naming the reservation | the file system's error ([`BackendError::Open`], op "resize") | [`BackendError::ResizeBeyondLimit`] naming the device size |
//!
//! The RAM maximum is fixed when the backend is created: address space is reserved for it
//! then (it costs no memory until written). [`RamBackend::new`] reserves
//! [`RamBackend::default_max_size`], `max(4 × size, size + 16 GiB)` capped at 1 TiB (or the
//! size, if larger), falling back to the size alone if even the reservation fails;
//! [`RamBackend::with_max_size`] sets it explicitly. The mapping never moves, so pointers from
//! [`Backend::memory`] stay valid across resizes.
//!
//! **Commands in flight across a shrink.** The controller checks every command's range
//! against [`Backend::size`] before it executes it, so a shrink refuses every later command
//! past the new end. Only a command validated just before the shrink can still touch the
//! range past it, and then, never a crash:
//!
//! * RAM: the part of the reservation that was ever exposed stays mapped read-write for the
//!   backend's life; nothing outside the reservation is ever touched. Such a read (including a
//!   zero-copy send from a [`Backend::memory`] pointer) returns the old bytes or zeroes; such a
//!   write lands in the released range and is cleared before a later grow exposes it again.
//! * File: a read past the new end of file comes up short and fails with `UnexpectedEof`
//!   ([`BackendError::Io`], an NVMe error status for that command; the io_uring engine does
//!   the same). A write past it extends the file again (sparse, beyond [`Backend::size`], so
//!   never read); the next resize cuts it off before exposing that range. Until then it counts
//!   in [`Backend::allocated_bytes`].
//! * Block: the device does not change, so the command completes as it would have.
//!
//! ## Layout
//!
//! * `lib.rs` — the trait, [`BackendKind`], [`BackendSpec`], [`BackendError`], [`open`];
//! * `ram.rs` — [`RamBackend`];
//! * `file.rs` — [`FileBackend`] for regular files and block devices;
//! * `aligned.rs` — [`AlignedBuf`], page-aligned memory for `O_DIRECT`;
//! * `crypt/` — [`crypt::CryptBackend`], encryption at rest (AES-XTS-256, dm-crypt's
//!   `aes-xts-plain64`), key files and key headers (ADR 0029);
//! * `sys.rs` — the thin `unsafe` wrappers around `fallocate` and the block-device ioctls.
//!
//! ## Testing
//!
//! `tests/conformance.rs` runs one suite against every backend (RAM, file, block on a regular
//! file); `tests/model.rs` checks random operation sequences against a `Vec<u8>` model. To include
//! a real block device, point `EBOF_TEST_BLOCK_DEV` at a scratch device, **whose contents are
//! destroyed**, e.g. `losetup -f --show -b 4096 scratch.img`.

#[cfg(not(target_os = "linux"))]
compile_error!("ebof-backend uses Linux-only interfaces (fallocate modes, block-device ioctls)");

mod aligned;
pub mod clone;
pub mod crypt;
mod file;
mod ram;
mod sys;

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::Arc;

pub use aligned::{AlignedBuf, DIRECT_IO_ALIGN};

/// A backend that must not complete this command on this box now, although another path to
/// the same data may (a replicated volume's copy that lost its lease, ADR 0028): the host is
/// answered ANA Inaccessible (SCT 3h SC 02h, DNR clear) and retries on another path. Made with
/// [`BackendError::path_inaccessible`], recognised with [`BackendError::is_path_inaccessible`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this path to the namespace is inaccessible (a replicated copy without its lease)")]
pub struct PathInaccessible;

impl BackendError {
    /// The error of a command this path must not complete ([`PathInaccessible`]).
    pub fn path_inaccessible() -> BackendError {
        BackendError::Io(io::Error::other(PathInaccessible))
    }

    /// `self` is [`BackendError::path_inaccessible`]'s error.
    pub fn is_path_inaccessible(&self) -> bool {
        match self {
            BackendError::Io(e) => e
                .get_ref()
                .is_some_and(|inner| inner.downcast_ref::<PathInaccessible>().is_some()),
            _ => false,
        }
    }
}
pub use file::FileBackend;
pub use ram::RamBackend;

/// Storage behind one NVMe namespace.
///
/// Byte-addressed; callers (the NVMe controller layer) have already range-checked LBAs against
/// [`size`](Backend::size), but backends still return [`BackendError::OutOfRange`] instead of
/// panicking.
pub trait Backend: Send + Sync + fmt::Debug + 'static {
    /// Which implementation this is.
    fn kind(&self) -> BackendKind;

    /// Capacity in bytes. Cheap (one atomic load): the controller reads it for every command.
    /// It changes only through [`resize`](Backend::resize).
    fn size(&self) -> u64;

    /// Changes the capacity to `new_size` bytes while I/O goes on (`ebof ctl ns resize`).
    ///
    /// On success [`size`](Backend::size) returns `new_size`; on failure nothing changed.
    /// Data below the smaller of the old and new size is never moved or altered. What a grown
    /// range reads, the limits, and what happens to commands in flight past a shrunk end
    /// differ per backend: see [the crate docs](crate#resizing-a-live-backend). Resizes are
    /// serialised with each other; reads and writes take no lock.
    ///
    /// The default refuses with [`BackendError::Unsupported`], for backends (test doubles,
    /// wrappers) that cannot change size; wrappers should forward it.
    fn resize(&self, new_size: u64) -> Result<(), BackendError> {
        let _ = new_size;
        Err(BackendError::Unsupported {
            kind: self.kind(),
            op: "resize",
        })
    }

    /// `true` if calls may block on a device or filesystem (file, block): the runtime then hands
    /// them to its I/O engine (io_uring through [`raw_io`](Backend::raw_io), or a worker thread)
    /// instead of running them on the reactor. RAM returns `false` (calls are memcpy-fast).
    fn may_block(&self) -> bool;

    /// Whether writes (and flushes, zeroing, deallocation) may block, when reads may not: a
    /// replicated namespace's writes wait for the peer while its reads are local (ADR 0028).
    /// The runtime runs such a backend's writes off the reactor and never lets a host write
    /// land straight in its memory. Default: [`Backend::may_block`].
    fn writes_block(&self) -> bool {
        self.may_block()
    }

    /// Writes that complete later without a thread waiting for them ([`AsyncWrites`]): a
    /// replicated namespace's write waits for its peer on the replication link's thread, not
    /// on a worker thread of the runtime. `None` (the default): blocking writes run on a
    /// worker thread.
    fn async_writes(&self) -> Option<&dyn AsyncWrites> {
        None
    }

    /// Reads `buf.len()` bytes at `offset`.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError>;

    /// Where `offset..offset + len` lives in this process's memory, for backends that are
    /// memory (RAM): the runtime hands that address to the kernel (`writev`) instead of copying
    /// the bytes into a send buffer first. The address stays valid for as long as the backend
    /// lives, also across [`resize`](Backend::resize) (after a shrink, the bytes past the new
    /// end read as zero or as they were). The bytes may change under concurrent writes (as a read racing a write may see
    /// either), so callers must never form a Rust reference to them; they pass the address to
    /// the kernel or copy with `ptr::copy`. `None` (the default): not memory, or out of range.
    fn memory(&self, offset: u64, len: usize) -> Option<std::ptr::NonNull<u8>> {
        let _ = (offset, len);
        None
    }

    /// Memory backends: the whole reservation (address, bytes) for a device to register and
    /// pin for DMA (RDMA), which from now on must keep its physical pages: zeroing, deallocation
    /// and shrinking fill with zeros instead of handing pages back to the kernel (a registered
    /// page that the kernel replaced would leave the device and the CPU looking at different
    /// memory). `None` (the default): not memory.
    fn pin_for_dma(&self) -> Option<(std::ptr::NonNull<u8>, usize)> {
        None
    }

    /// Writes `buf` at `offset`. Returns only once the data is accepted by the backend (visible
    /// to later reads); durability needs [`flush`](Backend::flush).
    fn write(&self, offset: u64, buf: &[u8]) -> Result<(), BackendError>;

    /// Makes all accepted writes durable (`fdatasync` for file and block; no-op for RAM).
    fn flush(&self) -> Result<(), BackendError>;

    /// Subsequent reads of `offset..offset + len` return zeroes.
    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), BackendError>;

    /// Deallocate (discard, TRIM). Afterwards reads of the range return zeroes (advertised as
    /// deterministic read-zeroes after deallocate), and the backend releases the space where it
    /// can.
    fn deallocate(&self, offset: u64, len: u64) -> Result<(), BackendError>;

    /// Bytes currently allocated (RAM: resident pages; file: `st_blocks * 512`; block device: its
    /// size), for statistics; best effort.
    fn allocated_bytes(&self) -> u64;

    /// Whether the backend is thin provisioned: space is taken as blocks are first written and
    /// given back on deallocate, so [`allocated_bytes`](Backend::allocated_bytes) is what the
    /// namespace really uses (Identify Namespace NSFEAT bit 0, NUSE). RAM: yes until it is
    /// pinned for DMA (then deallocation zero-fills in place); regular files: yes (sparse,
    /// hole punching); block devices: no. The default is `false`.
    fn thin(&self) -> bool {
        false
    }

    /// The file system the backend's file lives on (regular files, `fstatvfs`); `None`
    /// (the default) for other backends or if it cannot be read. One system call: for the
    /// management plane, not the data path.
    fn fs_space(&self) -> Option<FsSpace> {
        None
    }

    /// For backends that are one file descriptor (file, block): what an I/O engine needs to
    /// submit reads, writes and syncs itself (io_uring) instead of calling
    /// [`read`](Backend::read)/[`write`](Backend::write)/[`flush`](Backend::flush), with the
    /// same effect. `None` (the default): use the calls.
    fn raw_io(&self) -> Option<RawIo> {
        None
    }

    /// For encrypted backends over one descriptor ([`crypt::CryptBackend`], ADR 0029): the
    /// descriptor and the cipher, so that an I/O engine submits reads and writes itself and
    /// encrypts and decrypts around them ([`crypt::seal_write`], [`crypt::open_read`]). Such a
    /// backend has no [`raw_io`](Backend::raw_io): an engine that does not know about
    /// encryption uses [`read`](Backend::read)/[`write`](Backend::write). `None` (the default):
    /// not encrypted, or not a descriptor.
    fn crypt_io(&self) -> Option<crypt::CryptIo<'_>> {
        None
    }

    /// Whether the data is encrypted at rest (ADR 0029). Default `false`.
    fn encrypted(&self) -> bool {
        false
    }
}

/// Called once when an [`AsyncWrites::start_write`] has finished, from any thread: the
/// buffer the write was given, and the write's outcome.
pub type WriteDone = Box<dyn FnOnce(Vec<u8>, Result<(), BackendError>) + Send>;

/// Writes started from a reactor thread and finished on another ([`Backend::async_writes`]).
pub trait AsyncWrites: Send + Sync {
    /// Write `data` at `offset` here and now when that needs no waiting (a replicated
    /// namespace's secondary copy over RAM); `None` (the default): call
    /// [`AsyncWrites::start_write`] instead.
    fn write_now(&self, offset: u64, data: &[u8]) -> Option<Result<(), BackendError>> {
        let _ = (offset, data);
        None
    }

    /// Start writing `buf[..len]` at `offset`, with [`Backend::write`]'s effect. `Ok(())`:
    /// started, and `done` will be called exactly once, on any thread (possibly before this
    /// returns: it must not need what the caller holds). `Err`: not started (the backend cannot
    /// now without blocking): the buffer and `done` come back, and the caller runs the write
    /// the blocking way. Must not block: the caller is a reactor.
    fn start_write(
        &self,
        offset: u64,
        len: usize,
        buf: Vec<u8>,
        done: WriteDone,
    ) -> Result<(), (Vec<u8>, WriteDone)>;

    /// Run a write that [`AsyncWrites::start_write`] declined, on a thread that may block
    /// (a worker's, not a reactor's), with [`Backend::write`]'s effect; `done` is called
    /// exactly once, from any thread, possibly after this returns (a replicated write frees
    /// the worker once the local copy has it, and completes when the peer has it too).
    fn run_declined(&self, offset: u64, len: usize, buf: Vec<u8>, done: WriteDone);

    /// Send on what [`AsyncWrites::start_write`] has held back since the last call. A backend
    /// may gather the writes a reactor starts in one run-loop round and hand them on together
    /// (a replicated namespace wakes its link thread once per round, not once per write); the
    /// reactor calls this at the end of every round in which it started one. Default: nothing
    /// is held.
    fn push_started(&self) {}
}

/// Size and free space of the file system under a file backend ([`Backend::fs_space`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsSpace {
    /// Bytes the file system holds in all (`f_blocks × f_frsize`).
    pub total_bytes: u64,
    /// Bytes an unprivileged writer can still allocate (`f_bavail × f_frsize`).
    pub available_bytes: u64,
    /// The file system's id (`f_fsid`): equal for backends on the same file system.
    pub fsid: u64,
}

/// Size and free space of the file system holding `path` (a file or a directory, e.g. a
/// storage pool's directory before any namespace is made in it).
pub fn fs_space_of(path: &std::path::Path) -> io::Result<FsSpace> {
    sys::fs_space(&std::fs::File::open(path)?)
}

/// The descriptor behind a file or block backend ([`Backend::raw_io`]).
///
/// Byte `offset` of the backend is byte `offset` of the descriptor; the valid range is
/// `0..`[`Backend::size`], which [`Backend::resize`] may change while operations are in flight
/// (see [the crate docs](crate#resizing-a-live-backend)). The descriptor stays open for as long as the backend lives, so an
/// engine keeps the backend (its `Arc`) alive until every submitted operation has completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawIo {
    /// Open read-write.
    pub fd: RawFd,
    /// `Some(align)`: opened with `O_DIRECT`; offsets and lengths must be multiples of
    /// `align` (the logical block size, or the file system's direct-I/O granularity) and
    /// memory must be aligned to [`DIRECT_IO_ALIGN`] ([`AlignedBuf`] is). `None`: buffered
    /// I/O through the page cache, any alignment.
    pub direct: Option<u32>,
}

/// How to open a file or block backend ([`open_with`]); RAM ignores it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendOptions {
    /// Bypass the page cache (`O_DIRECT`). Reads and writes must then be aligned to the
    /// device's logical block size (or the file system's direct-I/O granularity, see
    /// [`RawIo::direct`]); the backend copies through an aligned bounce buffer, so callers'
    /// buffers need no alignment. Opening fails if the file system refuses `O_DIRECT`
    /// (tmpfs on older kernels, for example).
    pub direct: bool,
}

/// Which implementation a [`Backend`] is.
///
/// A [`BackendSpec::Block`] that names a regular file reports [`BackendKind::Block`]: the kind
/// follows what the operator configured, not what the path turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// Sparse anonymous memory; lost on exit.
    Ram,
    /// A regular file, created or grown to the configured size.
    File,
    /// A block device, or an existing regular file used as-is.
    Block,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Ram => "ram",
            BackendKind::File => "file",
            BackendKind::Block => "block",
        })
    }
}

/// What to open (built by the config layer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendSpec {
    /// Sparse RAM of `size` bytes: non-zero and a multiple of 512.
    Ram {
        /// Capacity in bytes.
        size: u64,
    },
    /// RAM as [`BackendSpec::Ram`], backed by transparent huge pages (`MADV_HUGEPAGE`): fewer
    /// TLB misses on random access, memory taken in 2 MiB steps (deallocation still works on
    /// 4 KiB pages; the kernel splits the huge page).
    RamHugePages {
        /// Capacity in bytes.
        size: u64,
    },
    /// Regular file. Created (sparse, `set_len`) if missing when `size` is `Some`; if it exists
    /// and is smaller it is extended; if it is larger, opening fails (user data is never
    /// truncated). With `size: None` the file must exist and its size is used.
    File {
        /// Path of the file.
        path: PathBuf,
        /// Capacity in bytes; `None` to use the existing file's size.
        size: Option<u64>,
    },
    /// Block device, or existing regular file, used as-is: size from the `BLKGETSIZE64` ioctl
    /// for block devices, from the metadata for files. Never created.
    Block {
        /// Path of the device or file.
        path: PathBuf,
    },
}

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The byte range lies (partly) outside the backend, or its end overflows `u64`.
    #[error("range {offset}+{len} outside backend of {size} bytes")]
    OutOfRange {
        /// First byte of the range.
        offset: u64,
        /// Length of the range in bytes.
        len: u64,
        /// Size of the backend in bytes.
        size: u64,
    },
    /// A read, write, flush or zeroing call failed in the kernel.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// Opening, preparing or resizing a file or device failed: `op` says which step ("open",
    /// "create", "extend", "resize", …).
    #[error("cannot {op} {}: {source}", path.display())]
    Open {
        /// The step that failed, as a verb.
        op: &'static str,
        /// The configured path.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
    /// The path exists but cannot back a namespace of this kind (a directory, a character
    /// device, an empty file, …).
    #[error("{}: {reason}", path.display())]
    Unusable {
        /// The configured path.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// The existing file is larger than the configured size; it is left untouched.
    #[error(
        "{}: existing file is {actual} bytes, larger than the configured {requested} bytes \
         (refusing to truncate user data)",
        path.display()
    )]
    FileTooLarge {
        /// The configured path.
        path: PathBuf,
        /// Current size of the file.
        actual: u64,
        /// Configured size.
        requested: u64,
    },
    /// The configured size, or the size asked for by a resize, cannot be used.
    #[error("invalid {kind} backend size {size}: {reason}")]
    InvalidSize {
        /// The backend kind being opened or resized.
        kind: BackendKind,
        /// The configured or requested size.
        size: u64,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// A resize asked for more than the backend can ever hold: the address space a RAM
    /// backend reserved when it was created, or the size of the block device (read again at
    /// the time of the resize).
    #[error(
        "cannot resize {kind} backend{} to {requested} bytes: larger than {limit} bytes, {what}",
        path_suffix(path.as_deref())
    )]
    ResizeBeyondLimit {
        /// The backend kind being resized.
        kind: BackendKind,
        /// The configured path, for file and block backends.
        path: Option<PathBuf>,
        /// The size asked for.
        requested: u64,
        /// The largest size this backend accepts.
        limit: u64,
        /// What the limit is.
        what: &'static str,
    },
    /// A wrapper refuses the change in its present state; the reason says why and what to do
    /// (a replicated namespace asked to shrink, or to grow before its secondary did).
    #[error("{reason}")]
    Refused {
        /// Why, and what to do instead.
        reason: String,
    },
    /// The backend does not implement the operation (see [`Backend::resize`]'s default).
    #[error("{kind} backend does not support {op}")]
    Unsupported {
        /// The backend kind.
        kind: BackendKind,
        /// The operation, as a verb.
        op: &'static str,
    },
    /// The anonymous mapping of a RAM backend failed.
    #[error("cannot map {size} bytes for a RAM backend: {source}")]
    Map {
        /// The configured size.
        size: u64,
        /// What `mmap` said.
        source: io::Error,
    },
}

/// Opens the backend described by `spec`.
///
/// Errors name the path and the step that failed, so they can be shown to the operator as they
/// are. Nothing is created or modified unless opening succeeds, except that a newly created
/// file that cannot be grown is removed again.
pub fn open(spec: &BackendSpec) -> Result<Arc<dyn Backend>, BackendError> {
    open_with(spec, BackendOptions::default())
}

/// [`open`] with [`BackendOptions`] (`O_DIRECT` for file and block backends).
pub fn open_with(
    spec: &BackendSpec,
    options: BackendOptions,
) -> Result<Arc<dyn Backend>, BackendError> {
    let direct = |b: FileBackend| -> Result<FileBackend, BackendError> {
        if options.direct {
            b.into_direct()
        } else {
            Ok(b)
        }
    };
    let backend: Arc<dyn Backend> = match spec {
        BackendSpec::Ram { size } => Arc::new(RamBackend::new(*size)?),
        BackendSpec::RamHugePages { size } => Arc::new(RamBackend::with_huge_pages(*size, true)?),
        BackendSpec::File { path, size } => Arc::new(direct(FileBackend::open_file(path, *size)?)?),
        BackendSpec::Block { path } => Arc::new(direct(FileBackend::open_block(path)?)?),
    };
    // Values a person reads (kind, size, path), not the backend's Debug dump; `ebof serve`
    // logs each namespace at info level with the same facts.
    match spec {
        BackendSpec::Ram { .. } | BackendSpec::RamHugePages { .. } => {
            tracing::debug!(kind = %backend.kind(), bytes = backend.size(), "backend opened")
        }
        BackendSpec::File { path, .. } | BackendSpec::Block { path } => tracing::debug!(
            kind = %backend.kind(),
            bytes = backend.size(),
            path = %path.display(),
            "backend opened"
        ),
    }
    Ok(backend)
}

/// Checks a size a backend is created or resized with: non-zero and a multiple of `granularity`
/// (512, the smallest logical block, or a block device's logical block size).
pub(crate) fn check_size(
    kind: BackendKind,
    size: u64,
    granularity: u64,
) -> Result<(), BackendError> {
    let reason = if size == 0 {
        "must not be zero"
    } else if !size.is_multiple_of(granularity) {
        if granularity == 512 {
            "must be a multiple of 512 bytes"
        } else {
            "must be a multiple of the device's logical block size"
        }
    } else {
        return Ok(());
    };
    Err(BackendError::InvalidSize { kind, size, reason })
}

/// `" <path>"` for error messages that name an optional path.
fn path_suffix(path: Option<&std::path::Path>) -> String {
    path.map(|p| format!(" {}", p.display()))
        .unwrap_or_default()
}

/// Checks that `offset..offset + len` lies within `0..size`, overflow included.
#[inline]
pub(crate) fn check_range(offset: u64, len: u64, size: u64) -> Result<(), BackendError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(BackendError::OutOfRange { offset, len, size }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_range_edges() {
        assert!(check_range(0, 0, 0).is_ok());
        assert!(check_range(0, 512, 512).is_ok());
        assert!(check_range(512, 0, 512).is_ok());
        assert!(check_range(511, 1, 512).is_ok());
        assert!(check_range(511, 2, 512).is_err());
        assert!(check_range(513, 0, 512).is_err());
        assert!(check_range(u64::MAX, 1, 512).is_err());
        assert!(check_range(1, u64::MAX, u64::MAX).is_err());
        assert!(check_range(u64::MAX, 0, u64::MAX).is_ok());
    }

    #[test]
    fn error_messages_name_the_path() {
        let err = BackendError::Open {
            op: "open",
            path: PathBuf::from("/nope/disk.img"),
            source: io::Error::from_raw_os_error(libc::ENOENT),
        };
        let text = err.to_string();
        assert!(text.starts_with("cannot open /nope/disk.img: "), "{text}");
        let err = BackendError::OutOfRange {
            offset: 10,
            len: 20,
            size: 16,
        };
        assert_eq!(err.to_string(), "range 10+20 outside backend of 16 bytes");
    }
}
