//! File and block-device backend: positional buffered I/O on one descriptor.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::{AlignedBuf, Backend, BackendError, BackendKind, RawIo, check_range, check_size, sys};

/// Largest single `pwrite` of zeroes when the kernel cannot zero a range itself.
const ZERO_CHUNK: usize = 1 << 20;

/// A regular file or a block device, accessed with `pread`/`pwrite` through the page cache, or
/// with `O_DIRECT` ([`FileBackend::into_direct`]).
///
/// Buffered by default: the controller advertises a volatile write cache, so durability comes
/// from [`flush`](Backend::flush) (`fdatasync`). With `O_DIRECT` the page cache is bypassed;
/// reads and writes must then be aligned to [`RawIo::direct`] and go through a page-aligned
/// bounce buffer (the trait takes caller buffers of any alignment). The runtime's io_uring
/// engine uses [`Backend::raw_io`] and submits the same operations itself.
///
/// Zeroing asks the kernel first and falls back to writing zeroes (in chunks of at most 1 MiB)
/// when the file system or device says it cannot; the first such refusal is logged and
/// remembered, so the failing call is not repeated:
///
/// | | regular file | block device |
/// |---|---|---|
/// | `write_zeroes` | `fallocate(ZERO_RANGE)` | `BLKZEROOUT` |
/// | `deallocate` | `fallocate(PUNCH_HOLE)`, then as `write_zeroes` | `fallocate(PUNCH_HOLE)` (the kernel's Write Zeroes with unmap allowed), then as `write_zeroes` |
///
/// Block devices do not use `BLKDISCARD`: Linux does not promise that discarded blocks read
/// back as zero, and we advertise that they do.
///
/// **Resizing** ([`Backend::resize`]) follows the kind the operator configured:
///
/// * [`BackendKind::File`]: the file is truncated or extended (`ftruncate`, sparse) to the new
///   size. Data past a shrunk end is discarded, so a later grow reads zeroes there.
/// * [`BackendKind::Block`] (a block device, or a regular file used as-is): the backend exposes
///   a prefix of the device and nothing on the device changes. The new size must be a
///   multiple of the logical block size (512 for a regular file) and at most the device size,
///   read again at the time of the resize, so a device grown underneath (an LVM extend) can be
///   exposed. Data past a shrunk end stays on the device and is exposed again, as it is, by a
///   later grow.
pub struct FileBackend {
    file: File,
    path: PathBuf,
    /// Capacity in bytes (see [`Backend::size`]); for a block device, the exposed prefix.
    size: AtomicU64,
    /// Serialises resizes; the data path never takes it.
    resize: Mutex<()>,
    kind: BackendKind,
    target: Target,
    /// `fallocate(PUNCH_HOLE)` has not been refused yet.
    punch_hole: AtomicBool,
    /// `fallocate(ZERO_RANGE)` (regular files) or `BLKZEROOUT` (block devices) has not been
    /// refused yet.
    zero_range: AtomicBool,
    /// `Some(granularity)`: opened with `O_DIRECT` (see [`RawIo::direct`]).
    direct: Option<u32>,
}

/// Direct-I/O granularity assumed for a regular file whose file system does not report one
/// (`statx` without `STATX_DIOALIGN`, before Linux 6.1): a page, which every file system that
/// supports `O_DIRECT` accepts.
const DIRECT_GRANULARITY_FALLBACK: u32 = 4096;

/// What the descriptor refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    RegularFile,
    /// A block device whose kernel zeroing calls need `logical_block`-aligned ranges.
    BlockDevice {
        logical_block: u64,
    },
}

impl FileBackend {
    /// Opens (creating or growing as needed) a regular file; see [`crate::BackendSpec::File`].
    pub fn open_file(path: &Path, size: Option<u64>) -> Result<Self, BackendError> {
        let Some(requested) = size else {
            let file = open_existing(path)?;
            let meta = metadata(&file, path)?;
            if !meta.file_type().is_file() {
                return Err(not_a(
                    path,
                    &meta,
                    "a regular file (use a block backend for devices)",
                ));
            }
            if meta.len() == 0 {
                return Err(unusable(path, "is empty; configure a size to grow it"));
            }
            return Ok(Self::new(
                file,
                path,
                meta.len(),
                BackendKind::File,
                Target::RegularFile,
            ));
        };
        if requested == 0 {
            return Err(BackendError::InvalidSize {
                kind: BackendKind::File,
                size: 0,
                reason: "must not be zero",
            });
        }
        // A new file holds a volume: owner-only whatever the umask (the mode of the open
        // call), never through a symbolic link planted at the name (O_EXCL refuses one, and
        // O_NOFOLLOW says so).
        let (file, created) = match options()
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
        {
            Ok(file) => (file, true),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => (open_existing(path)?, false),
            Err(source) => return Err(open_error("create", path, source)),
        };
        let meta = metadata(&file, path)?;
        if !meta.file_type().is_file() {
            return Err(not_a(
                path,
                &meta,
                "a regular file (use a block backend for devices)",
            ));
        }
        if meta.len() > requested {
            return Err(BackendError::FileTooLarge {
                path: path.to_owned(),
                actual: meta.len(),
                requested,
            });
        }
        if meta.len() < requested {
            // Sparse: no blocks are allocated for the new tail.
            if let Err(source) = file.set_len(requested) {
                if created {
                    drop(file);
                    let _ = fs::remove_file(path);
                }
                return Err(open_error("extend", path, source));
            }
        }
        Ok(Self::new(
            file,
            path,
            requested,
            BackendKind::File,
            Target::RegularFile,
        ))
    }

    /// Opens an existing block device, or regular file used as-is; see
    /// [`crate::BackendSpec::Block`].
    pub fn open_block(path: &Path) -> Result<Self, BackendError> {
        let file = open_existing(path)?;
        let meta = metadata(&file, path)?;
        let file_type = meta.file_type();
        let (size, target) = if file_type.is_block_device() {
            let size = sys::block_size_bytes(&file)
                .map_err(|source| open_error("query the size of", path, source))?;
            let logical_block = sys::logical_block_size(&file)
                .map_err(|source| open_error("query the logical block size of", path, source))?;
            (
                size,
                Target::BlockDevice {
                    logical_block: u64::from(logical_block),
                },
            )
        } else if file_type.is_file() {
            (meta.len(), Target::RegularFile)
        } else {
            return Err(not_a(path, &meta, "a block device or regular file"));
        };
        if size == 0 {
            return Err(unusable(path, "has size 0"));
        }
        Ok(Self::new(file, path, size, BackendKind::Block, target))
    }

    fn new(file: File, path: &Path, size: u64, kind: BackendKind, target: Target) -> Self {
        FileBackend {
            file,
            path: path.to_owned(),
            size: AtomicU64::new(size),
            resize: Mutex::new(()),
            kind,
            target,
            punch_hole: AtomicBool::new(true),
            zero_range: AtomicBool::new(true),
            direct: None,
        }
    }

    /// The same backend with `O_DIRECT` turned on. Fails, naming the path, if the file system
    /// refuses it. The granularity is the block device's logical block size, or what the file
    /// system reports for a regular file (`statx(STATX_DIOALIGN)`, else 4096).
    pub fn into_direct(mut self) -> Result<Self, BackendError> {
        sys::set_direct(&self.file)
            .map_err(|source| open_error("open with O_DIRECT", &self.path, source))?;
        let granularity = match self.target {
            Target::BlockDevice { logical_block } => {
                u32::try_from(logical_block).unwrap_or(DIRECT_GRANULARITY_FALLBACK)
            }
            Target::RegularFile => {
                sys::direct_io_granularity(&self.file).unwrap_or(DIRECT_GRANULARITY_FALLBACK)
            }
        };
        self.direct = Some(granularity);
        Ok(self)
    }

    /// The path the backend was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the path turned out to be a block device (rather than a regular file).
    pub fn is_block_device(&self) -> bool {
        matches!(self.target, Target::BlockDevice { .. })
    }

    /// The current size. `Acquire` pairs with the `Release` store in `resize`: a command that
    /// sees a grown size also sees the file extended.
    #[inline]
    fn current_size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// [`Backend::resize`] of a regular file (`BackendKind::File`): truncate or extend it.
    fn resize_file(&self, old: u64, new: u64) -> Result<(), BackendError> {
        check_size(self.kind, new, 512)?;
        let set_len = |len| {
            self.file
                .set_len(len)
                .map_err(|source| open_error("resize", &self.path, source))
        };
        if new >= old {
            // A write validated before an earlier shrink may have extended the file again past
            // `old` after the truncation: cut that off first, so the grown range reads zero.
            // Then extend (sparse) and only then let commands reach the new range.
            set_len(old)?;
            set_len(new)?;
            self.size.store(new, Ordering::Release);
        } else {
            // Refuse new commands past `new` first, then truncate. A command already validated
            // against `old` fails on the short read (`UnexpectedEof`) or extends the file past
            // `new` (cut off again by the next resize).
            self.size.store(new, Ordering::Release);
            if let Err(err) = set_len(new) {
                self.size.store(old, Ordering::Release);
                return Err(err);
            }
        }
        Ok(())
    }

    /// [`Backend::resize`] of a block backend (`BackendKind::Block`): expose a prefix of the
    /// device (or of the regular file used as-is), never change it.
    fn resize_prefix(&self, new: u64) -> Result<(), BackendError> {
        let (capacity, block, what) = match self.target {
            Target::BlockDevice { logical_block } => (
                sys::block_size_bytes(&self.file)
                    .map_err(|source| open_error("query the size of", &self.path, source))?,
                logical_block,
                "the size of the device",
            ),
            Target::RegularFile => (
                metadata(&self.file, &self.path)?.len(),
                512,
                "the size of the file",
            ),
        };
        check_size(self.kind, new, block)?;
        if new > capacity {
            return Err(BackendError::ResizeBeyondLimit {
                kind: self.kind,
                path: Some(self.path.clone()),
                requested: new,
                limit: capacity,
                what,
            });
        }
        self.size.store(new, Ordering::Release);
        Ok(())
    }

    /// Runs the kernel zeroing call `op` unless it was refused before. `Ok(true)`: done;
    /// `Ok(false)`: not supported here, the caller falls back.
    fn try_kernel(
        &self,
        supported: &AtomicBool,
        name: &'static str,
        op: impl FnOnce() -> io::Result<()>,
    ) -> Result<bool, BackendError> {
        if !supported.load(Ordering::Relaxed) {
            return Ok(false);
        }
        match op() {
            Ok(()) => Ok(true),
            Err(err) if sys::is_unsupported(&err) => {
                if supported.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        path = %self.path.display(),
                        op = name,
                        error = %err,
                        "not supported here; falling back to a slower equivalent"
                    );
                }
                Ok(false)
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Writes zero buffers over `offset..offset + len`.
    fn write_zero_bytes(&self, mut offset: u64, len: u64) -> Result<(), BackendError> {
        // Aligned, so that it also serves O_DIRECT descriptors.
        static ZEROES: OnceLock<AlignedBuf> = OnceLock::new();
        // Zero-initialised allocations come straight from fresh zero pages: no RSS cost.
        let zeroes = ZEROES
            .get_or_init(|| AlignedBuf::zeroed(ZERO_CHUNK))
            .as_slice();
        let end = offset + len;
        while offset < end {
            let n = (end - offset).min(ZERO_CHUNK as u64) as usize;
            self.file.write_all_at(&zeroes[..n], offset)?;
            offset += n as u64;
        }
        Ok(())
    }

    /// `write_zeroes` without the range check.
    fn zero(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        match self.target {
            Target::RegularFile => {
                let mode = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
                if !self.try_kernel(&self.zero_range, "fallocate(ZERO_RANGE)", || {
                    sys::fallocate(&self.file, mode, offset, len)
                })? {
                    self.write_zero_bytes(offset, len)?;
                }
                Ok(())
            }
            Target::BlockDevice { logical_block } => {
                self.aligned_or_bytes(offset, len, logical_block, |start, len| {
                    self.try_kernel(&self.zero_range, "ioctl(BLKZEROOUT)", || {
                        sys::block_zero_out(&self.file, start, len)
                    })
                })
            }
        }
    }

    /// Zeroes `offset..offset + len` on a block device: the `align`-aligned middle with
    /// `kernel` (falling back to zero writes if it declines), the unaligned edges with zero
    /// writes.
    fn aligned_or_bytes(
        &self,
        offset: u64,
        len: u64,
        align: u64,
        kernel: impl FnOnce(u64, u64) -> Result<bool, BackendError>,
    ) -> Result<(), BackendError> {
        let end = offset + len;
        let start_aligned = offset.next_multiple_of(align);
        let end_aligned = end - end % align;
        if start_aligned >= end_aligned {
            return self.write_zero_bytes(offset, len);
        }
        self.write_zero_bytes(offset, start_aligned - offset)?;
        if !kernel(start_aligned, end_aligned - start_aligned)? {
            self.write_zero_bytes(start_aligned, end_aligned - start_aligned)?;
        }
        self.write_zero_bytes(end_aligned, end - end_aligned)
    }
}

impl Backend for FileBackend {
    fn kind(&self) -> BackendKind {
        self.kind
    }

    #[inline]
    fn size(&self) -> u64 {
        self.current_size()
    }

    fn resize(&self, new_size: u64) -> Result<(), BackendError> {
        let _serialised = self.resize.lock().unwrap_or_else(PoisonError::into_inner);
        let old = self.current_size();
        match self.kind {
            BackendKind::File => self.resize_file(old, new_size)?,
            // `open_block` only builds `Block`; `Ram` cannot occur. Exposing a prefix is the
            // safe reading of either: nothing on disk changes.
            BackendKind::Block | BackendKind::Ram => self.resize_prefix(new_size)?,
        }
        tracing::debug!(
            kind = %self.kind,
            path = %self.path.display(),
            old,
            new = new_size,
            "backend resized"
        );
        Ok(())
    }

    fn may_block(&self) -> bool {
        true
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        check_range(offset, buf.len() as u64, self.current_size())?;
        if self.direct.is_some() {
            let mut bounce = AlignedBuf::zeroed(buf.len());
            self.file.read_exact_at(bounce.as_mut_slice(), offset)?;
            buf.copy_from_slice(bounce.as_slice());
            return Ok(());
        }
        Ok(self.file.read_exact_at(buf, offset)?)
    }

    fn write(&self, offset: u64, buf: &[u8]) -> Result<(), BackendError> {
        check_range(offset, buf.len() as u64, self.current_size())?;
        if self.direct.is_some() {
            let mut bounce = AlignedBuf::zeroed(buf.len());
            bounce.as_mut_slice().copy_from_slice(buf);
            return Ok(self.file.write_all_at(bounce.as_slice(), offset)?);
        }
        Ok(self.file.write_all_at(buf, offset)?)
    }

    fn flush(&self) -> Result<(), BackendError> {
        Ok(self.file.sync_data()?)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        check_range(offset, len, self.current_size())?;
        if len == 0 {
            return Ok(());
        }
        self.zero(offset, len)
    }

    fn deallocate(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        check_range(offset, len, self.current_size())?;
        if len == 0 {
            return Ok(());
        }
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        let punch = |start, len| {
            self.try_kernel(&self.punch_hole, "fallocate(PUNCH_HOLE)", || {
                sys::fallocate(&self.file, mode, start, len)
            })
        };
        match self.target {
            // File systems punch unaligned ranges themselves (zeroing partial blocks).
            Target::RegularFile => {
                if !punch(offset, len)? {
                    self.zero(offset, len)?;
                }
                Ok(())
            }
            // On a block device this is the kernel's Write Zeroes with unmap allowed and no
            // fallback (BLKDEV_ZERO_NOFALLBACK): zeroes guaranteed, space released on devices
            // that can. If the device cannot, `zero` writes zeroes instead.
            Target::BlockDevice { logical_block } => {
                self.aligned_or_bytes(offset, len, logical_block, |start, len| {
                    if punch(start, len)? {
                        Ok(true)
                    } else {
                        self.zero(start, len).map(|()| true)
                    }
                })
            }
        }
    }

    fn allocated_bytes(&self) -> u64 {
        match self.target {
            Target::RegularFile => self
                .file
                .metadata()
                .map(|meta| meta.blocks().saturating_mul(512))
                .unwrap_or(0),
            // The device's own thin provisioning, if any, is not visible from here.
            Target::BlockDevice { .. } => self.current_size(),
        }
    }

    fn thin(&self) -> bool {
        matches!(self.target, Target::RegularFile)
    }

    fn fs_space(&self) -> Option<crate::FsSpace> {
        match self.target {
            Target::RegularFile => crate::sys::fs_space(&self.file).ok(),
            Target::BlockDevice { .. } => None,
        }
    }

    fn raw_io(&self) -> Option<RawIo> {
        Some(RawIo {
            fd: self.file.as_raw_fd(),
            direct: self.direct,
        })
    }
}

impl fmt::Debug for FileBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileBackend")
            .field("path", &self.path)
            .field("fd", &self.file.as_raw_fd())
            .field("size", &self.current_size())
            .field("kind", &self.kind)
            .field("target", &self.target)
            .field("punch_hole", &self.punch_hole.load(Ordering::Relaxed))
            .field("zero_range", &self.zero_range.load(Ordering::Relaxed))
            .field("direct", &self.direct)
            .finish()
    }
}

/// Read-write, close-on-exec (`std` always adds `O_CLOEXEC`).
fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true).write(true);
    options
}

fn open_existing(path: &Path) -> Result<File, BackendError> {
    options()
        .open(path)
        .map_err(|source| open_error("open", path, source))
}

fn metadata(file: &File, path: &Path) -> Result<fs::Metadata, BackendError> {
    file.metadata()
        .map_err(|source| open_error("stat", path, source))
}

fn open_error(op: &'static str, path: &Path, source: io::Error) -> BackendError {
    BackendError::Open {
        op,
        path: path.to_owned(),
        source,
    }
}

fn unusable(path: &Path, reason: &str) -> BackendError {
    BackendError::Unusable {
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}

fn not_a(path: &Path, meta: &fs::Metadata, wanted: &str) -> BackendError {
    let file_type = meta.file_type();
    let what = if file_type.is_dir() {
        "a directory"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_file() {
        "a regular file"
    } else {
        "of an unknown file type"
    };
    unusable(path, &format!("is {what}, not {wanted}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZE: u64 = 64 * 1024 + 512;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8 + 1).collect()
    }

    /// A backend on a fresh temporary file, as `target`, with the kernel zeroing calls enabled
    /// or not.
    fn backend(dir: &tempfile::TempDir, target: Target, kernel: bool) -> FileBackend {
        let path = dir.path().join("t.img");
        let file = options().create(true).truncate(true).open(&path).unwrap();
        file.set_len(SIZE).unwrap();
        let b = FileBackend::new(file, &path, SIZE, BackendKind::Block, target);
        b.punch_hole.store(kernel, Ordering::Relaxed);
        b.zero_range.store(kernel, Ordering::Relaxed);
        b
    }

    /// Zeroing through every path (kernel calls, their fallbacks, and the block-device edge
    /// splitting, which on a regular file gets ENOTTY from BLKZEROOUT) zeroes exactly the range.
    #[test]
    fn every_zeroing_path_zeroes_exactly_the_range() {
        let targets = [
            Target::RegularFile,
            Target::BlockDevice { logical_block: 512 },
            Target::BlockDevice {
                logical_block: 4096,
            },
        ];
        let ranges = [
            (0, 1),
            (1, 4094),
            (4095, 2),
            (4096, 4096),
            (100, 9000),
            (512, 512),
            (513, 3 * 4096),
            (0, SIZE),
            (SIZE - 700, 700),
            (10, (1 << 20) + 1), // out of range
        ];
        for target in targets {
            for kernel in [true, false] {
                let dir = tempfile::tempdir().unwrap();
                let b = backend(&dir, target, kernel);
                for (offset, len) in ranges {
                    for dealloc in [false, true] {
                        let mut model = pattern(SIZE as usize);
                        b.write(0, &model).unwrap();
                        let result = if dealloc {
                            b.deallocate(offset, len)
                        } else {
                            b.write_zeroes(offset, len)
                        };
                        if offset + len > SIZE {
                            assert!(matches!(result, Err(BackendError::OutOfRange { .. })));
                        } else {
                            result.unwrap();
                            model[offset as usize..(offset + len) as usize].fill(0);
                        }
                        let mut back = vec![0; SIZE as usize];
                        b.read(0, &mut back).unwrap();
                        assert!(
                            back == model,
                            "{target:?} kernel={kernel} dealloc={dealloc} {offset}+{len}"
                        );
                    }
                }
            }
        }
    }

    fn read_vec(b: &FileBackend, offset: u64, len: u64) -> Vec<u8> {
        let mut buf = vec![0xEE; len as usize];
        b.read(offset, &mut buf).unwrap();
        buf
    }

    #[test]
    fn file_resize_follows_on_disk_and_regrown_ranges_read_zero() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.img");
        let b = FileBackend::open_file(&path, Some(SIZE)).unwrap();
        let data = pattern(SIZE as usize);
        b.write(0, &data).unwrap();
        b.flush().unwrap();
        let full = b.allocated_bytes();
        assert!(full >= SIZE, "{full}");

        // Grow: sparse, the data stays, the new range reads zero.
        let big = 4 * SIZE;
        b.resize(big).unwrap();
        assert_eq!((b.size(), fs::metadata(&path).unwrap().len()), (big, big));
        assert!(
            b.allocated_bytes() < full + 64 * 1024,
            "{}",
            b.allocated_bytes()
        );
        assert_eq!(read_vec(&b, 0, SIZE), data);
        assert!(read_vec(&b, SIZE, big - SIZE).iter().all(|&x| x == 0));

        // Shrink: the file is truncated and its blocks given back; then grow again.
        let small = 8192 + 512;
        b.resize(small).unwrap();
        assert_eq!(
            (b.size(), fs::metadata(&path).unwrap().len()),
            (small, small)
        );
        assert!(b.allocated_bytes() <= 64 * 1024, "{}", b.allocated_bytes());
        assert!(matches!(
            b.read(small, &mut [0]),
            Err(BackendError::OutOfRange { .. })
        ));
        b.resize(SIZE).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), SIZE);
        assert_eq!(read_vec(&b, 0, small), data[..small as usize]);
        assert!(read_vec(&b, small, SIZE - small).iter().all(|&x| x == 0));
    }

    /// A write validated before a shrink and landing after it extends the file again; the next
    /// grow cuts that off, so the grown range still reads zero.
    #[test]
    fn writes_in_flight_across_a_shrink_are_cut_off_before_regrowing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("late.img");
        let b = FileBackend::open_file(&path, Some(SIZE)).unwrap();
        b.resize(8192).unwrap();
        // What the io_uring engine would do with a write validated against the old size.
        b.file.write_all_at(&[0xAB; 4096], 16384).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 16384 + 4096);
        assert_eq!(b.size(), 8192);
        b.resize(SIZE).unwrap();
        assert!(read_vec(&b, 8192, SIZE - 8192).iter().all(|&x| x == 0));
    }

    #[test]
    fn file_resize_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.img");
        let b = FileBackend::open_file(&path, Some(SIZE)).unwrap();
        for bad in [0, 1, 1000, SIZE + 1] {
            assert!(
                matches!(b.resize(bad), Err(BackendError::InvalidSize { size, kind: BackendKind::File, .. }) if size == bad),
                "{bad}"
            );
        }
        // Larger than any file can be (`off_t`): the error names the path and the step.
        let err = b.resize(u64::MAX - 511).unwrap_err();
        assert!(
            matches!(err, BackendError::Open { op: "resize", .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("bad.img"), "{err}");
        assert_eq!((b.size(), fs::metadata(&path).unwrap().len()), (SIZE, SIZE));
    }

    #[test]
    fn block_resize_exposes_a_prefix_of_the_device() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev.img");
        let data = pattern(SIZE as usize);
        fs::write(&path, &data).unwrap();
        let b = FileBackend::open_block(&path).unwrap();
        assert_eq!(b.size(), SIZE);

        // Shrinking hides the rest; nothing on the device changes; growing shows it again.
        b.resize(4096).unwrap();
        assert_eq!(b.size(), 4096);
        assert!(matches!(
            b.write(4096, &[0]),
            Err(BackendError::OutOfRange { .. })
        ));
        assert_eq!(fs::metadata(&path).unwrap().len(), SIZE);
        b.resize(SIZE).unwrap();
        assert_eq!(read_vec(&b, 0, SIZE), data);

        // Not past the device, which is read again at resize time.
        let err = b.resize(SIZE + 512).unwrap_err();
        assert!(
            matches!(
                err,
                BackendError::ResizeBeyondLimit {
                    kind: BackendKind::Block,
                    limit: SIZE,
                    ..
                }
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("dev.img") && text.contains(&SIZE.to_string()),
            "{text}"
        );
        for bad in [0, 1000] {
            assert!(
                matches!(b.resize(bad), Err(BackendError::InvalidSize { size, .. }) if size == bad),
                "{bad}"
            );
        }
        assert_eq!(b.size(), SIZE);

        // The device grew underneath (an LVM extend): the new part can be exposed.
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(2 * SIZE)
            .unwrap();
        b.resize(2 * SIZE).unwrap();
        assert_eq!(read_vec(&b, 0, SIZE), data);
        assert!(read_vec(&b, SIZE, SIZE).iter().all(|&x| x == 0));
    }

    #[test]
    fn debug_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir, Target::RegularFile, true);
        let text = format!("{b:?}");
        assert!(text.contains("t.img"), "{text}");
        assert_eq!(b.path(), dir.path().join("t.img"));
        assert!(!b.is_block_device());
    }

    /// Issue 32 (M2): a namespace file the backend makes is owner-only whatever the umask,
    /// and a link planted at its name is not followed.
    #[test]
    fn new_files_are_owner_only_and_links_are_not_followed() {
        // SAFETY: umask has no preconditions; 022 is the usual default.
        unsafe { libc::umask(0o022) };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("new.img");
        FileBackend::open_file(&p, Some(1 << 20)).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o600);
        let victim = dir.path().join("victim");
        fs::write(&victim, b"keep").unwrap();
        let link = dir.path().join("link.img");
        std::os::unix::fs::symlink(dir.path().join("absent"), &link).unwrap();
        assert!(FileBackend::open_file(&link, Some(1 << 20)).is_err());
        assert!(
            !dir.path().join("absent").exists(),
            "no file made through the link"
        );
    }
}
