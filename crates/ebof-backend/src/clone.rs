//! Whole-file clones for snapshots: a reflink (`FICLONE`: the copy shares the extents, takes
//! time in proportion to the extent count, not the size, and no space until either side is
//! written), or, where the file system has no reflinks, a copy that keeps holes.
//!
//! The caller decides what the file may hold while this runs (a snapshot holds its namespace's
//! writes for the duration); this module only moves bytes.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// How a clone was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloneMethod {
    /// `FICLONE`: the files share their extents (copy on write).
    Reflink,
    /// Every data byte was read and written (holes stay holes).
    Copy,
}

impl CloneMethod {
    /// `"reflink"` or `"copy"`, as manifests and the management API spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            CloneMethod::Reflink => "reflink",
            CloneMethod::Copy => "copy",
        }
    }
}

/// What to do where the file system cannot reflink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// Copy the data instead.
    Copy,
    /// Fail with the file system's error (`EOPNOTSUPP`, `EXDEV`…).
    Refuse,
}

/// Size of one read/write of the copy fallback.
const COPY_CHUNK: usize = 1 << 20;

/// Whether `err` from `FICLONE` means "no reflink here" (rather than a real failure such as
/// `ENOSPC` or `EIO`).
pub fn reflink_unsupported(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EXDEV | libc::EINVAL | libc::ENOTTY | libc::ENOSYS)
    )
}

/// Make `dst` (an empty file opened for writing) a copy of all of `src` (opened for reading):
/// a reflink when the file system offers one, else, with [`Fallback::Copy`], a copy of the
/// data (all-zero chunks are left as holes) and the same length. `dst` is not synced.
pub fn clone_file(src: &File, dst: &File, fallback: Fallback) -> io::Result<CloneMethod> {
    match crate::sys::ficlone(dst, src) {
        Ok(()) => return Ok(CloneMethod::Reflink),
        Err(e) if reflink_unsupported(&e) && fallback == Fallback::Copy => {}
        Err(e) => return Err(e),
    }
    copy_sparse(src, dst)?;
    Ok(CloneMethod::Copy)
}

/// Copy `src` into `dst` chunk by chunk, skipping chunks that read as zeroes (holes in the
/// source, or written zeroes: either way the destination reads zeroes there).
fn copy_sparse(src: &File, dst: &File) -> io::Result<()> {
    let len = src.metadata()?.len();
    dst.set_len(len)?;
    let mut buf = vec![0u8; COPY_CHUNK];
    let mut off = 0u64;
    while off < len {
        let n = usize::try_from((len - off).min(COPY_CHUNK as u64)).unwrap_or(COPY_CHUNK);
        let chunk = &mut buf[..n];
        src.read_exact_at(chunk, off)?;
        if chunk.iter().any(|&b| b != 0) {
            dst.write_all_at(chunk, off)?;
        }
        off += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_clone_reads_as_its_source_and_keeps_its_length() {
        let dir = tempfile::tempdir().unwrap();
        let sp = dir.path().join("src");
        let mut src = File::create(&sp).unwrap();
        src.set_len(5 << 20).unwrap();
        src.write_all(b"head").unwrap();
        src.write_all_at(b"tail", (5 << 20) - 4).unwrap();
        src.write_all_at(&[7u8; 4096], 2 << 20).unwrap();
        src.flush().unwrap();
        let src = File::open(&sp).unwrap();
        let dp = dir.path().join("dst");
        let dst = File::options()
            .write(true)
            .create_new(true)
            .open(&dp)
            .unwrap();
        let how = clone_file(&src, &dst, Fallback::Copy).unwrap();
        drop(dst);
        assert_eq!(std::fs::read(&sp).unwrap(), std::fs::read(&dp).unwrap());
        // Whatever the file system: reflink where it can, else the copy.
        assert!(matches!(how, CloneMethod::Reflink | CloneMethod::Copy));
    }

    #[test]
    fn refusing_the_fallback_reports_the_file_system_s_error() {
        let dir = tempfile::tempdir().unwrap();
        let sp = dir.path().join("src");
        std::fs::write(&sp, [1u8; 8192]).unwrap();
        let src = File::open(&sp).unwrap();
        let dst = File::create(dir.path().join("dst")).unwrap();
        match clone_file(&src, &dst, Fallback::Refuse) {
            Ok(m) => assert_eq!(m, CloneMethod::Reflink),
            Err(e) => assert!(reflink_unsupported(&e), "{e}"),
        }
    }
}
