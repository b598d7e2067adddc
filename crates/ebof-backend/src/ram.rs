//! Sparse RAM backend: one anonymous private mapping, lock-free on the data path.

use std::fmt;
use std::io;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Backend, BackendError, BackendKind, check_range};

/// A sparse RAM disk.
///
/// The whole capacity is reserved as address space with
/// `mmap(MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)`: pages materialise on first write,
/// untouched pages read as zero, and [`deallocate`](Backend::deallocate) /
/// [`write_zeroes`](Backend::write_zeroes) hand whole pages back with `madvise(MADV_DONTNEED)`
/// (partial pages at either end are zero-filled). Huge pages are disabled on the mapping so that
/// one 4 KiB write costs 4 KiB, and the mapping is not inherited by child processes.
///
/// Reads and writes are a bounds check, at most a couple of relaxed atomic loads on the
/// written-page bitmap, and one `memcpy`; no lock, no allocation.
pub struct RamBackend {
    /// Start of the mapping; `map_len` bytes, valid until `Drop`.
    base: NonNull<u8>,
    /// Length of the mapping (`size` as `usize`; the kernel rounds it up to whole pages).
    map_len: usize,
    /// Capacity in bytes, a multiple of 512.
    size: u64,
    /// log2 of the system page size.
    page_shift: u32,
    /// One bit per page, set once the page has been written and cleared when it is dropped:
    /// a clear bit means the page reads as zero and is not resident.
    written: Box<[AtomicU64]>,
    /// Number of set bits in `written`, kept exact by counting bit transitions.
    written_pages: AtomicU64,
}

// SAFETY: `RamBackend` owns its mapping exclusively (nothing else knows `base`) and every method
// takes `&self` and touches the mapping only through raw pointers, never through Rust references,
// so the `&mut`-uniqueness and `&`-immutability rules have nothing to apply to. The mapping lives
// until `Drop`, which cannot run while another thread still holds a `&RamBackend`. The bytes are
// plain `u8`, for which every bit pattern is valid. Calls on disjoint ranges touch disjoint bytes
// and do not race at all; the bitmap is atomic. Calls on overlapping ranges from different threads
// (only a host submitting overlapping commands concurrently can cause them) are a data race in the
// Rust abstract machine, the same stance vm-memory takes for guest memory and shared-memory IPC
// takes for its rings: each access is a single `memcpy`/`memset` of dynamic length on memory Rust
// never reads back as anything but bytes, there is no read of the same location twice that the
// optimiser could fold, so the observable effect is torn content in the overlap — what NVMe
// specifies for overlapping concurrent commands. A sound byte-wise atomic memcpy (RFC 3301) is
// not stable yet; see the crate's ADR.
unsafe impl Send for RamBackend {}
// SAFETY: see `Send` above; all shared-state mutation goes through raw pointers or atomics.
unsafe impl Sync for RamBackend {}

impl RamBackend {
    /// Reserves a sparse RAM disk of `size` bytes (non-zero, a multiple of 512), on 4 KiB pages.
    pub fn new(size: u64) -> Result<Self, BackendError> {
        Self::with_huge_pages(size, false)
    }

    /// As [`RamBackend::new`]; with `huge` the mapping asks for transparent huge pages
    /// (`MADV_HUGEPAGE`), else it refuses them (`MADV_NOHUGEPAGE`).
    pub fn with_huge_pages(size: u64, huge: bool) -> Result<Self, BackendError> {
        let invalid = |reason| BackendError::InvalidSize {
            kind: BackendKind::Ram,
            size,
            reason,
        };
        if size == 0 {
            return Err(invalid("must not be zero"));
        }
        if !size.is_multiple_of(512) {
            return Err(invalid("must be a multiple of 512 bytes"));
        }
        let map_len = usize::try_from(size)
            .ok()
            .filter(|len| isize::try_from(*len).is_ok())
            .ok_or_else(|| invalid("does not fit the address space"))?;
        let page_size = page_size();
        let page_shift = page_size.trailing_zeros();
        let pages = size.div_ceil(page_size);
        let words = usize::try_from(pages.div_ceil(64))
            .map_err(|_| invalid("does not fit the address space"))?;

        // SAFETY: an anonymous mapping at an address of the kernel's choosing: no file
        // descriptor, no existing memory is affected.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(BackendError::Map {
                size,
                source: io::Error::last_os_error(),
            });
        }
        let base = NonNull::new(addr.cast::<u8>()).ok_or_else(|| BackendError::Map {
            size,
            source: io::Error::other("mmap returned a null mapping"),
        })?;
        let thp = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        for advice in [thp, libc::MADV_DONTFORK] {
            // SAFETY: advice on the mapping just created, which we own; neither advice changes
            // its contents. Failure (e.g. a kernel without THP) only costs memory efficiency.
            if unsafe { libc::madvise(addr, map_len, advice) } != 0 {
                tracing::debug!(
                    advice,
                    error = %io::Error::last_os_error(),
                    "madvise on RAM backend failed; continuing"
                );
            }
        }
        Ok(RamBackend {
            base,
            map_len,
            size,
            page_shift,
            written: (0..words).map(|_| AtomicU64::new(0)).collect(),
            written_pages: AtomicU64::new(0),
        })
    }

    /// The page size the backend allocates and releases memory in.
    pub fn page_size(&self) -> u64 {
        1 << self.page_shift
    }

    /// Pointer to byte `offset` of the mapping; `offset <= size` (checked by the caller).
    #[inline]
    fn at(&self, offset: u64) -> *mut u8 {
        debug_assert!(offset <= self.size);
        // SAFETY: `offset <= size == map_len`, so the result stays within (or one past) the
        // mapping, and `map_len` fits `isize` (checked in `new`).
        unsafe { self.base.as_ptr().add(offset as usize) }
    }

    /// Applies `f(word, mask)` to the bitmap words covering pages `first..end` (`first < end`).
    fn for_each_word(&self, first: u64, end: u64, mut f: impl FnMut(&AtomicU64, u64)) {
        let last = end - 1;
        for w in first / 64..=last / 64 {
            let lo = if w == first / 64 { first % 64 } else { 0 };
            let hi = if w == last / 64 { last % 64 } else { 63 };
            let mask = (u64::MAX >> (63 - hi)) & (u64::MAX << lo);
            f(&self.written[w as usize], mask);
        }
    }

    /// Marks the pages under `offset..offset + len` as written (`len > 0`).
    #[inline]
    fn mark_written(&self, offset: u64, len: u64) {
        let first = offset >> self.page_shift;
        let end = ((offset + len - 1) >> self.page_shift) + 1;
        self.for_each_word(first, end, |word, mask| {
            // Rewrites of resident pages, the common case, only load.
            if word.load(Ordering::Relaxed) & mask != mask {
                let old = word.fetch_or(mask, Ordering::Relaxed);
                let added = (mask & !old).count_ones();
                if added > 0 {
                    self.written_pages
                        .fetch_add(u64::from(added), Ordering::Relaxed);
                }
            }
        });
    }

    /// Whether page `page` has been written since it was last dropped.
    fn is_written(&self, page: u64) -> bool {
        self.written[(page / 64) as usize].load(Ordering::Relaxed) & (1 << (page % 64)) != 0
    }

    /// Zero-fills `start..end`, which lies within at most two pages, skipping pages never written
    /// (they already read as zero, and filling them would make them resident).
    fn zero_fill(&self, start: u64, end: u64) {
        let mut pos = start;
        while pos < end {
            let page = pos >> self.page_shift;
            let page_end = ((page + 1) << self.page_shift).min(end);
            if self.is_written(page) {
                // SAFETY: `pos..page_end` lies within `0..size` (checked by the caller); see
                // the `Send` impl for why writing through the raw pointer is sound.
                unsafe { ptr::write_bytes(self.at(pos), 0, (page_end - pos) as usize) };
            }
            pos = page_end;
        }
    }

    /// Releases the whole pages `start..end` (page-aligned offsets, `end` may be the rounded-up
    /// end of the mapping), so they read as zero and stop being resident.
    fn drop_pages(&self, start: u64, end: u64) -> Result<(), BackendError> {
        let (first, last) = (start >> self.page_shift, end >> self.page_shift);
        let mut any_written = false;
        self.for_each_word(first, last, |word, mask| {
            any_written |= word.load(Ordering::Relaxed) & mask != 0;
        });
        if !any_written {
            return Ok(()); // Never written (or already dropped): nothing resident, reads zero.
        }
        // SAFETY: `start..end` is page aligned and within the mapping (the kernel rounded its
        // length up to whole pages). MADV_DONTNEED on a private anonymous mapping makes the
        // pages read as zero afterwards; Rust holds no references into them.
        let rc = unsafe {
            libc::madvise(
                self.at(start).cast(),
                (end - start) as usize,
                libc::MADV_DONTNEED,
            )
        };
        if rc != 0 {
            // Should not happen on a valid range; zeroing by hand keeps reads correct.
            tracing::warn!(error = %io::Error::last_os_error(), "madvise(MADV_DONTNEED) failed; zero-filling");
            let end = end.min(self.size);
            // SAFETY: `start..end` lies within `0..size`.
            unsafe { ptr::write_bytes(self.at(start), 0, (end - start) as usize) };
            return Ok(());
        }
        self.for_each_word(first, last, |word, mask| {
            if word.load(Ordering::Relaxed) & mask != 0 {
                let old = word.fetch_and(!mask, Ordering::Relaxed);
                let removed = (mask & old).count_ones();
                self.written_pages
                    .fetch_sub(u64::from(removed), Ordering::Relaxed);
            }
        });
        Ok(())
    }

    /// Makes `offset..offset + len` read as zero: whole pages are released, partial pages at
    /// either end are zero-filled.
    fn zero_range(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        check_range(offset, len, self.size)?;
        if len == 0 {
            return Ok(());
        }
        let end = offset + len;
        let page_mask = self.page_size() - 1;
        let first_whole = (offset + page_mask) & !page_mask;
        // The tail of the last page lies beyond `size` and is never read: a range ending at
        // `size` may release that page whole.
        let last_whole = if end == self.size {
            (end + page_mask) & !page_mask
        } else {
            end & !page_mask
        };
        if first_whole >= last_whole {
            self.zero_fill(offset, end);
            return Ok(());
        }
        self.zero_fill(offset, first_whole);
        self.drop_pages(first_whole, last_whole)?;
        self.zero_fill(last_whole.min(end), end);
        Ok(())
    }
}

impl Backend for RamBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Ram
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn may_block(&self) -> bool {
        false
    }

    fn memory(&self, offset: u64, len: usize) -> Option<NonNull<u8>> {
        check_range(offset, len as u64, self.size).ok()?;
        NonNull::new(self.at(offset))
    }

    #[inline]
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        check_range(offset, buf.len() as u64, self.size)?;
        // SAFETY: `offset..offset + buf.len()` lies within the mapping (checked above); `buf` is
        // a live exclusive slice that cannot overlap the mapping because no Rust reference into
        // the mapping ever exists. Concurrency: see the `Send` impl.
        unsafe { ptr::copy_nonoverlapping(self.at(offset), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    #[inline]
    fn write(&self, offset: u64, buf: &[u8]) -> Result<(), BackendError> {
        check_range(offset, buf.len() as u64, self.size)?;
        if buf.is_empty() {
            return Ok(());
        }
        self.mark_written(offset, buf.len() as u64);
        // SAFETY: as in `read`, with source and destination swapped.
        unsafe { ptr::copy_nonoverlapping(buf.as_ptr(), self.at(offset), buf.len()) };
        Ok(())
    }

    fn flush(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.zero_range(offset, len)
    }

    fn deallocate(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.zero_range(offset, len)
    }

    fn allocated_bytes(&self) -> u64 {
        self.written_pages.load(Ordering::Relaxed) << self.page_shift
    }
}

impl fmt::Debug for RamBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RamBackend")
            .field("size", &self.size)
            .field("page_size", &self.page_size())
            .field("allocated", &self.allocated_bytes())
            .finish_non_exhaustive()
    }
}

impl Drop for RamBackend {
    fn drop(&mut self) {
        // SAFETY: the mapping was created in `new` with this address and length and is unmapped
        // exactly once; `&mut self` guarantees no call is still using it.
        let rc = unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
        if rc != 0 {
            tracing::warn!(error = %io::Error::last_os_error(), "munmap of RAM backend failed");
        }
    }
}

/// The system page size (a power of two; 4 KiB if `sysconf` cannot tell).
fn page_size() -> u64 {
    // SAFETY: sysconf only reads system configuration.
    let raw = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(raw)
        .ok()
        .filter(|size| size.is_power_of_two() && *size >= 512)
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_must_be_nonzero_multiple_of_512() {
        assert!(matches!(
            RamBackend::new(0),
            Err(BackendError::InvalidSize { size: 0, .. })
        ));
        assert!(matches!(
            RamBackend::new(1000),
            Err(BackendError::InvalidSize { size: 1000, .. })
        ));
        assert!(RamBackend::new(512).is_ok());
    }

    #[test]
    fn huge_pages_keep_the_same_semantics() {
        let ram = RamBackend::with_huge_pages(8 << 20, true).unwrap();
        let data = vec![0x5Au8; 3 * 4096];
        ram.write(2 << 20, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        ram.read(2 << 20, &mut back).unwrap();
        assert_eq!(back, data);
        // Deallocating one 4 KiB page inside a (possibly huge) page zeroes exactly that page.
        ram.deallocate((2 << 20) + 4096, 4096).unwrap();
        ram.read(2 << 20, &mut back).unwrap();
        assert!(back[..4096].iter().all(|&b| b == 0x5A));
        assert!(back[4096..8192].iter().all(|&b| b == 0));
        assert!(back[8192..].iter().all(|&b| b == 0x5A));
    }

    #[test]
    fn memory_is_the_bytes_reads_return() {
        let ram = RamBackend::new(64 * 1024).unwrap();
        let data: Vec<u8> = (0..8192u32).map(|i| (i * 31 + 7) as u8).collect();
        ram.write(4096, &data).unwrap();
        let p = ram.memory(4096, data.len()).unwrap();
        let mut copy = vec![0u8; data.len()];
        // SAFETY: `memory` returned a range of `data.len()` bytes inside the live mapping;
        // nothing writes to it concurrently in this test.
        unsafe { ptr::copy_nonoverlapping(p.as_ptr(), copy.as_mut_ptr(), copy.len()) };
        assert_eq!(copy, data);
        assert!(ram.memory(64 * 1024 - 512, 512).is_some());
        assert!(ram.memory(64 * 1024 - 512, 513).is_none());
        assert!(ram.memory(u64::MAX, 1).is_none());
    }

    #[test]
    fn written_page_accounting_is_exact() {
        let ram = RamBackend::new(256 * 4096 + 512).unwrap();
        let page = ram.page_size();
        assert_eq!(ram.allocated_bytes(), 0);
        ram.write(0, &[1]).unwrap();
        assert_eq!(ram.allocated_bytes(), page);
        ram.write(0, &[1; 3]).unwrap(); // same page again
        assert_eq!(ram.allocated_bytes(), page);
        // Spanning a page boundary touches two pages, one of them new.
        ram.write(page - 1, &[2, 2]).unwrap();
        assert_eq!(ram.allocated_bytes(), 2 * page);
        // A run across a bitmap word boundary (pages 60..70).
        ram.write(60 * page, &vec![3; 10 * page as usize]).unwrap();
        assert_eq!(ram.allocated_bytes(), 12 * page);
        // Partial-page zeroing keeps the page.
        ram.write_zeroes(1, 10).unwrap();
        assert_eq!(ram.allocated_bytes(), 12 * page);
        // Whole pages are released.
        ram.deallocate(60 * page, 10 * page).unwrap();
        assert_eq!(ram.allocated_bytes(), 2 * page);
        ram.deallocate(0, ram.size()).unwrap();
        assert_eq!(ram.allocated_bytes(), 0);
        // The last, partial page is released by a range ending at `size`.
        ram.write(ram.size() - 1, &[9]).unwrap();
        assert_eq!(ram.allocated_bytes(), page);
        ram.deallocate(ram.size() - 512, 512).unwrap();
        assert_eq!(ram.allocated_bytes(), 0);
    }

    #[test]
    fn zeroing_unwritten_partial_pages_does_not_allocate() {
        let ram = RamBackend::new(64 * 4096).unwrap();
        ram.write_zeroes(100, 200).unwrap();
        ram.write_zeroes(ram.page_size() - 10, 20).unwrap();
        assert_eq!(ram.allocated_bytes(), 0);
    }
}
