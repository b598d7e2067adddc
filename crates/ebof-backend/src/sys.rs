//! Thin wrappers around the Linux calls `std` does not expose: `fallocate` modes and the
//! block-device ioctls. Each takes a borrowed `File`, so the descriptor is open for the whole
//! call, retries on `EINTR` and returns `io::Result`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `ioctl` request encoding (`include/uapi/asm-generic/ioctl.h` and the arch overrides).
mod ioctl {
    #[cfg(any(
        target_arch = "powerpc",
        target_arch = "powerpc64",
        target_arch = "mips",
        target_arch = "mips64",
        target_arch = "sparc",
        target_arch = "sparc64"
    ))]
    mod arch {
        pub const SIZE_BITS: u32 = 13;
        pub const NONE: u32 = 1;
        pub const READ: u32 = 2;
    }
    #[cfg(not(any(
        target_arch = "powerpc",
        target_arch = "powerpc64",
        target_arch = "mips",
        target_arch = "mips64",
        target_arch = "sparc",
        target_arch = "sparc64"
    )))]
    mod arch {
        pub const SIZE_BITS: u32 = 14;
        pub const NONE: u32 = 0;
        pub const READ: u32 = 2;
    }

    const fn ioc(dir: u32, ty: u32, nr: u32, size: usize) -> libc::Ioctl {
        (dir << (16 + arch::SIZE_BITS) | (size as u32) << 16 | ty << 8 | nr) as libc::Ioctl
    }

    /// `BLKSSZGET = _IO(0x12, 104)`: logical block size, an `int`.
    pub const BLKSSZGET: libc::Ioctl = ioc(arch::NONE, 0x12, 104, 0);
    /// `BLKGETSIZE64 = _IOR(0x12, 114, size_t)`: device size in bytes, a `u64`.
    pub const BLKGETSIZE64: libc::Ioctl =
        ioc(arch::READ, 0x12, 114, std::mem::size_of::<libc::size_t>());
    /// `BLKZEROOUT = _IO(0x12, 127)`: zero `[start, len]` bytes, both multiples of 512.
    pub const BLKZEROOUT: libc::Ioctl = ioc(arch::NONE, 0x12, 127, 0);

    #[cfg(all(test, target_arch = "x86_64"))]
    #[test]
    fn request_numbers_match_the_kernel_headers() {
        assert_eq!(BLKSSZGET, 0x1268);
        assert_eq!(BLKGETSIZE64, 0x8008_1272);
        assert_eq!(BLKZEROOUT, 0x127f);
    }
}

/// Retries `f` while it fails with `EINTR`; maps `-1` to the thread's `errno`.
fn retry(mut f: impl FnMut() -> libc::c_int) -> io::Result<libc::c_int> {
    loop {
        let rc = f();
        if rc != -1 {
            return Ok(rc);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn to_off(value: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(value).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// `fallocate(fd, mode, offset, len)`.
pub(crate) fn fallocate(file: &File, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
    let (offset, len) = (to_off(offset)?, to_off(len)?);
    // SAFETY: plain syscall on a descriptor kept open by the `&File` borrow; no memory is passed.
    retry(|| unsafe { libc::fallocate(file.as_raw_fd(), mode, offset, len) }).map(drop)
}

/// Size in bytes of the block device behind `file` (`BLKGETSIZE64`).
pub(crate) fn block_size_bytes(file: &File) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points to a live local.
    retry(|| unsafe { libc::ioctl(file.as_raw_fd(), ioctl::BLKGETSIZE64, &mut size as *mut u64) })?;
    Ok(size)
}

/// Logical block size of the block device behind `file` (`BLKSSZGET`).
pub(crate) fn logical_block_size(file: &File) -> io::Result<u32> {
    let mut lbs: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which points to a live local.
    retry(|| unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            ioctl::BLKSSZGET,
            &mut lbs as *mut libc::c_int,
        )
    })?;
    u32::try_from(lbs)
        .ok()
        .filter(|lbs| lbs.is_power_of_two() && *lbs >= 512)
        .ok_or_else(|| io::Error::other(format!("implausible logical block size {lbs}")))
}

/// Zeroes `offset..offset + len` of a block device (`BLKZEROOUT`). The kernel writes zeroes with
/// the device's Write Zeroes command if it has one (without unmapping), else with zero pages,
/// and drops the range from the page cache. Both values must be logical-block aligned.
pub(crate) fn block_zero_out(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let range: [u64; 2] = [offset, len];
    // SAFETY: BLKZEROOUT reads two u64 (start, length) through the pointer, which points to a
    // live local array.
    retry(|| unsafe { libc::ioctl(file.as_raw_fd(), ioctl::BLKZEROOUT, range.as_ptr()) }).map(drop)
}

/// Whether `err` means "this file system, device or kernel does not offer the operation", so a
/// slower equivalent should be used instead.
pub(crate) fn is_unsupported(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::ENOTTY | libc::EINVAL)
    )
}

/// Turns on `O_DIRECT` for the open file description behind `file` (`fcntl(F_SETFL)`), keeping
/// its other status flags. Fails with `EINVAL` where the file system does not support it.
pub(crate) fn set_direct(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: plain fcntl calls on a descriptor kept open by the `&File` borrow.
    let flags = retry(|| unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: as above.
    retry(|| unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_DIRECT) }).map(drop)
}

/// The offset/length granularity of `O_DIRECT` I/O on the regular file behind `file`
/// (`statx(STATX_DIOALIGN)`, Linux 6.1), or `None` when the kernel or file system does not say
/// (the caller then assumes a conservative value).
pub(crate) fn direct_io_granularity(file: &File) -> Option<u32> {
    // SAFETY: a zeroed statx is a valid value for the kernel to fill in.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: `fd` is open (borrowed), the path is an empty C string with AT_EMPTY_PATH (stat
    // the descriptor itself) and `stx` is a live, writable statx.
    let rc = retry(|| unsafe {
        libc::statx(
            file.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    });
    match rc {
        Ok(_) if stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align != 0 => {
            Some(stx.stx_dio_offset_align)
        }
        _ => None,
    }
}

/// Size and free space of the file system holding `fd` (`fstatvfs`).
// statvfs's fields are `fsblkcnt_t`/`c_ulong`: u64 on 64-bit Linux, narrower elsewhere.
#[allow(clippy::useless_conversion)]
pub(crate) fn fs_space(file: &File) -> io::Result<crate::FsSpace> {
    // SAFETY: an all-zero statvfs is a valid value of the plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatvfs writes only into the struct we pass, on a descriptor kept open by the
    // `&File` borrow.
    retry(|| unsafe { libc::fstatvfs(file.as_raw_fd(), &mut st) })?;
    let frsize = u64::from(st.f_frsize);
    Ok(crate::FsSpace {
        total_bytes: u64::from(st.f_blocks).saturating_mul(frsize),
        available_bytes: u64::from(st.f_bavail).saturating_mul(frsize),
        fsid: u64::from(st.f_fsid),
    })
}

/// `ioctl(dst, FICLONE, src)`: make `dst` share all of `src`'s extents (a reflink), replacing
/// its content. Both on the same file system, which must support it (XFS with `reflink=1`,
/// btrfs); elsewhere `EOPNOTSUPP`, `EXDEV`, `EINVAL` or `ENOTTY`.
pub(crate) fn ficlone(dst: &File, src: &File) -> io::Result<()> {
    let s = src.as_raw_fd();
    // SAFETY: FICLONE takes the source descriptor as its integer argument, no memory; both
    // descriptors are kept open by the borrows.
    retry(|| unsafe { libc::ioctl(dst.as_raw_fd(), libc::FICLONE, s) }).map(drop)
}
