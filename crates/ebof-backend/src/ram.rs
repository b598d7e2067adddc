//! Sparse RAM backend: one anonymous private mapping, lock-free on the data path, resizable in
//! place within an address-space reservation made at creation.

use std::fmt;
use std::io;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::{Backend, BackendError, BackendKind, check_range, check_size};

/// Headroom the default reservation leaves above the size: a namespace can always grow by this
/// much ([`RamBackend::default_max_size`]).
const DEFAULT_HEADROOM: u64 = 16 << 30;
/// The default reservation is at least this many times the size.
const DEFAULT_GROWTH_FACTOR: u64 = 4;
/// The default reservation never exceeds this (unless the size itself does), so that hundreds
/// of namespaces fit into the 128 TiB of a 47-bit user address space.
const DEFAULT_RESERVATION_CAP: u64 = 1 << 40;
/// The read-write part of the reservation grows in steps of this, so that transparent huge
/// pages are not cut off at the end of a namespace whose size is not a multiple of 2 MiB.
const PROTECT_STEP: u64 = 2 << 20;

/// A sparse RAM disk that can grow and shrink while I/O goes on.
///
/// At creation the backend reserves address space for its maximum size
/// ([`RamBackend::max_size`]) with `mmap(PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)`
/// and opens the part up to the size (rounded up to 2 MiB) for reading and writing. Pages
/// materialise on first write, untouched pages read as zero, and
/// [`deallocate`](Backend::deallocate) / [`write_zeroes`](Backend::write_zeroes) hand whole pages
/// back with `madvise(MADV_DONTNEED)` (partial pages at either end are zero-filled). Huge pages
/// are disabled on the mapping (unless asked for) so that one 4 KiB write costs 4 KiB, and the
/// mapping is not inherited by child processes.
///
/// Reads and writes are one atomic load of the size, a bounds check, at most a couple of
/// relaxed atomic loads on the written-page bitmap, and one `memcpy`; no lock, no allocation.
///
/// **Resizing** ([`Backend::resize`]) never moves the mapping: growing opens more of the
/// reservation (`mprotect`) and raises the size, and the grown range reads zero; shrinking
/// lowers the size first and then releases the pages past it. The read-write part only ever
/// grows, so a command validated against an earlier, larger size still touches memory the
/// backend owns: a read sees zeroes or the old bytes, a write lands past the end and is cleared
/// before that range is exposed again. Nothing outside the reservation is ever touched.
pub struct RamBackend {
    /// Start of the reservation; `reserved` bytes, valid until `Drop`.
    base: NonNull<u8>,
    /// Length of the reservation: `max_size` rounded up to whole pages.
    reserved: usize,
    /// Largest size [`Backend::resize`] accepts, a multiple of 512.
    max_size: u64,
    /// Capacity in bytes, a non-zero multiple of 512, at most `max_size`.
    size: AtomicU64,
    /// log2 of the system page size.
    page_shift: u32,
    /// Whether the mapping asked for transparent huge pages.
    huge: bool,
    /// One bit per page of the reservation, set once the page has been written and cleared when
    /// it is dropped: a clear bit means the page reads as zero and is not resident (up to the
    /// races of commands in flight across a resize, see `Backend::resize`).
    written: Box<[AtomicU64]>,
    /// Number of set bits in `written`, kept exact by counting bit transitions.
    written_pages: AtomicU64,
    /// Registered for DMA ([`Backend::pin_for_dma`]): pages are never handed back to the
    /// kernel (zeroed in place instead).
    pinned: std::sync::atomic::AtomicBool,
    /// Serialises resizes with each other (and with the release of a partial last page, see
    /// `zero_range`); the data path never waits for it.
    resize: Mutex<Extent>,
}

/// What the resize lock protects: how far the reservation has been opened and used.
#[derive(Clone, Copy, Debug)]
struct Extent {
    /// Bytes at the start of the reservation that are readable and writable (a multiple of the
    /// page size, at most `reserved`). Never lowered: commands validated against an earlier size
    /// may still be running.
    accessible: u64,
    /// The largest size ever exposed: only memory below it can hold data.
    peak: u64,
}

// SAFETY: `RamBackend` owns its mapping exclusively (nothing else knows `base`) and every method
// takes `&self` and touches the mapping only through raw pointers, never through Rust references,
// so the `&mut`-uniqueness and `&`-immutability rules have nothing to apply to. The mapping lives
// until `Drop`, which cannot run while another thread still holds a `&RamBackend`. The bytes are
// plain `u8`, for which every bit pattern is valid. Calls on disjoint ranges touch disjoint bytes
// and do not race at all; the bitmap and the size are atomic. Calls on overlapping ranges from
// different threads (only a host submitting overlapping commands concurrently, or a command in
// flight across a shrink, can cause them) are a data race in the Rust abstract machine, the same
// stance vm-memory takes for guest memory and shared-memory IPC takes for its rings: each access
// is a single `memcpy`/`memset` of dynamic length on memory Rust never reads back as anything but
// bytes, there is no read of the same location twice that the optimiser could fold, so the
// observable effect is torn content in the overlap — what NVMe specifies for overlapping
// concurrent commands. A sound byte-wise atomic memcpy (RFC 3301) is not stable yet; see the
// crate's ADR.
unsafe impl Send for RamBackend {}
// SAFETY: see `Send` above; all shared-state mutation goes through raw pointers, atomics or the
// mutex.
unsafe impl Sync for RamBackend {}

impl RamBackend {
    /// Reserves a sparse RAM disk of `size` bytes (non-zero, a multiple of 512), on 4 KiB pages,
    /// that can grow to [`RamBackend::default_max_size`].
    pub fn new(size: u64) -> Result<Self, BackendError> {
        Self::with_huge_pages(size, false)
    }

    /// As [`RamBackend::new`]; with `huge` the mapping asks for transparent huge pages
    /// (`MADV_HUGEPAGE`), else it refuses them (`MADV_NOHUGEPAGE`).
    ///
    /// If the default reservation cannot be made (an address-space limit, `ulimit -v`), the
    /// backend reserves just `size` and cannot grow.
    pub fn with_huge_pages(size: u64, huge: bool) -> Result<Self, BackendError> {
        let max_size = Self::default_max_size(size);
        match Self::with_max_size(size, max_size, huge) {
            Err(BackendError::Map { source, .. }) if max_size > size => {
                tracing::info!(
                    size,
                    max_size,
                    error = %source,
                    "cannot reserve address space for growing a RAM backend; it cannot grow"
                );
                Self::with_max_size(size, size, huge)
            }
            other => other,
        }
    }

    /// The maximum size [`RamBackend::new`] reserves for a backend of `size` bytes:
    /// `max(4 × size, size + 16 GiB)`, but no more than 1 TiB unless `size` itself is larger
    /// (reserved address space costs no memory, but a 47-bit address space holds 128 TiB).
    pub fn default_max_size(size: u64) -> u64 {
        let wanted = size
            .saturating_mul(DEFAULT_GROWTH_FACTOR)
            .max(size.saturating_add(DEFAULT_HEADROOM));
        wanted.min(DEFAULT_RESERVATION_CAP).max(size) / 512 * 512
    }

    /// A sparse RAM disk of `size` bytes that can grow to `max_size` bytes (both non-zero
    /// multiples of 512, `size <= max_size`). The address space for `max_size` is reserved now;
    /// it costs no memory until written.
    pub fn with_max_size(size: u64, max_size: u64, huge: bool) -> Result<Self, BackendError> {
        validate_size(size)?;
        validate_size(max_size)?;
        if size > max_size {
            return Err(BackendError::InvalidSize {
                kind: BackendKind::Ram,
                size,
                reason: "must not exceed the maximum size",
            });
        }
        let too_big = || BackendError::InvalidSize {
            kind: BackendKind::Ram,
            size: max_size,
            reason: "does not fit the address space",
        };
        let page_size = page_size();
        let page_shift = page_size.trailing_zeros();
        let reserved = usize::try_from(max_size.next_multiple_of(page_size))
            .ok()
            .filter(|len| isize::try_from(*len).is_ok())
            .ok_or_else(too_big)?;
        let pages = max_size.div_ceil(page_size);
        let words = usize::try_from(pages.div_ceil(64)).map_err(|_| too_big())?;
        // One bit per page of the whole reservation, so that no resize ever reallocates it.
        let written = zeroed_bitmap(words);

        // SAFETY: an anonymous mapping at an address of the kernel's choosing: no file
        // descriptor, no existing memory is affected.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                reserved,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(BackendError::Map {
                size: max_size,
                source: io::Error::last_os_error(),
            });
        }
        let Some(base) = NonNull::new(addr.cast::<u8>()) else {
            return Err(BackendError::Map {
                size: max_size,
                source: io::Error::other("mmap returned a null mapping"),
            });
        };
        // From here on `Drop` unmaps the reservation, also on the error paths below.
        let backend = RamBackend {
            base,
            reserved,
            max_size,
            size: AtomicU64::new(size),
            page_shift,
            huge,
            written,
            written_pages: AtomicU64::new(0),
            pinned: std::sync::atomic::AtomicBool::new(false),
            resize: Mutex::new(Extent {
                accessible: 0,
                peak: size,
            }),
        };
        let thp = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        for advice in [thp, libc::MADV_DONTFORK] {
            // SAFETY: advice on the reservation just created, which we own; neither advice
            // changes its contents. Failure (e.g. a kernel without THP) only costs memory
            // efficiency.
            if unsafe { libc::madvise(addr, reserved, advice) } != 0 {
                tracing::debug!(
                    advice,
                    error = %io::Error::last_os_error(),
                    "madvise on RAM backend failed; continuing"
                );
            }
        }
        {
            let mut extent = backend.lock_extent();
            backend
                .open_up_to(&mut extent, size)
                .map_err(|source| BackendError::Map { size, source })?;
        }
        Ok(backend)
    }

    /// The page size the backend allocates and releases memory in.
    pub fn page_size(&self) -> u64 {
        1 << self.page_shift
    }

    /// The largest size [`Backend::resize`] accepts: the address space reserved at creation.
    pub fn max_size(&self) -> u64 {
        self.max_size
    }

    /// The current size (the data path's one atomic load). `Acquire` pairs with the `Release`
    /// store in `resize`: a command that sees a grown size also sees the memory opened for it.
    #[inline]
    fn current_size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    fn lock_extent(&self) -> MutexGuard<'_, Extent> {
        // The lock guards plain numbers that are updated only after the step they describe
        // succeeded; a panic elsewhere cannot leave them half-written.
        self.resize.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `0..size` (rounded up to the protection step) readable and writable, if it is not
    /// yet. The rest of the reservation stays `PROT_NONE`: it costs no commit charge even
    /// where the kernel ignores `MAP_NORESERVE` (`vm.overcommit_memory = 2`).
    fn open_up_to(&self, extent: &mut Extent, size: u64) -> io::Result<()> {
        let want = size
            .next_multiple_of(PROTECT_STEP)
            .min(self.reserved as u64);
        if want <= extent.accessible {
            return Ok(());
        }
        // SAFETY: `accessible..want` lies within the reservation we own (`want <= reserved`),
        // starts page aligned (`accessible` is a multiple of the page size or of the step), and
        // nothing uses it yet: no size so far exposed any of it. Only the protection changes.
        let rc = unsafe {
            libc::mprotect(
                self.at(extent.accessible).cast(),
                (want - extent.accessible) as usize,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        extent.accessible = want;
        Ok(())
    }

    /// Pointer to byte `offset` of the reservation; `offset <= reserved` (checked by the
    /// caller).
    #[inline]
    fn at(&self, offset: u64) -> *mut u8 {
        debug_assert!(offset <= self.reserved as u64);
        // SAFETY: `offset <= reserved`, so the result stays within (or one past) the
        // reservation, and `reserved` fits `isize` (checked at creation).
        unsafe { self.base.as_ptr().add(offset as usize) }
    }

    /// Rounds `offset` up to a page boundary.
    fn page_up(&self, offset: u64) -> u64 {
        offset.next_multiple_of(self.page_size())
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

    /// Clears the written bits of pages `first..end` (`first < end`), keeping the count exact.
    fn unmark(&self, first: u64, end: u64) {
        self.for_each_word(first, end, |word, mask| {
            if word.load(Ordering::Relaxed) & mask != 0 {
                let old = word.fetch_and(!mask, Ordering::Relaxed);
                let removed = (mask & old).count_ones();
                self.written_pages
                    .fetch_sub(u64::from(removed), Ordering::Relaxed);
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
                // SAFETY: `pos..page_end` lies within the accessible part of the reservation
                // (checked by the caller); see the `Send` impl for why writing through the raw
                // pointer is sound.
                unsafe { ptr::write_bytes(self.at(pos), 0, (page_end - pos) as usize) };
            }
            pos = page_end;
        }
    }

    /// Releases the whole pages `start..end` (page-aligned offsets within the accessible part
    /// of the reservation), so they read as zero and stop being resident. Unless `force`, pages
    /// whose bits say they were never written are left alone (nothing to release).
    fn drop_pages(&self, start: u64, end: u64, force: bool) {
        if start >= end {
            return;
        }
        let (first, last) = (start >> self.page_shift, end >> self.page_shift);
        if !force {
            let mut any_written = false;
            self.for_each_word(first, last, |word, mask| {
                any_written |= word.load(Ordering::Relaxed) & mask != 0;
            });
            if !any_written {
                return; // Never written (or already dropped): nothing resident, reads zero.
            }
        }
        if self.pinned.load(Ordering::Acquire) {
            // A device holds these physical pages (RDMA registration): zero them in place.
            // SAFETY: `start..end` lies within the accessible part of the reservation.
            unsafe { ptr::write_bytes(self.at(start), 0, (end - start) as usize) };
            return;
        }
        // SAFETY: `start..end` is page aligned and within the accessible part of the
        // reservation. MADV_DONTNEED on a private anonymous mapping makes the pages read as
        // zero afterwards; Rust holds no references into them.
        let rc = unsafe {
            libc::madvise(
                self.at(start).cast(),
                (end - start) as usize,
                libc::MADV_DONTNEED,
            )
        };
        if rc != 0 {
            // Should not happen on a valid range; zeroing by hand keeps reads correct (and
            // leaves the pages resident, so their bits stay set).
            tracing::warn!(error = %io::Error::last_os_error(), "madvise(MADV_DONTNEED) failed; zero-filling");
            // SAFETY: `start..end` lies within the accessible part of the reservation.
            unsafe { ptr::write_bytes(self.at(start), 0, (end - start) as usize) };
            return;
        }
        self.unmark(first, last);
    }

    /// Makes `offset..offset + len` read as zero: whole pages are released, partial pages at
    /// either end are zero-filled.
    fn zero_range(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        let size = self.current_size();
        check_range(offset, len, size)?;
        if len == 0 {
            return Ok(());
        }
        let end = offset + len;
        let page_mask = self.page_size() - 1;
        let first_whole = (offset + page_mask) & !page_mask;
        // A range ending at a `size` that is not page aligned may release the last page whole:
        // its tail beyond `size` is never read. Only while no resize runs, though: a grow could
        // otherwise expose that tail and a write land there just before the release. Never
        // waits: if a resize holds the lock, the partial page is zero-filled instead.
        let tail_guard = (end == size && end & page_mask != 0 && first_whole <= end)
            .then(|| self.resize.try_lock().ok())
            .flatten()
            .filter(|_| self.current_size() == size);
        let last_whole = if tail_guard.is_some() {
            (end + page_mask) & !page_mask
        } else {
            end & !page_mask
        };
        if first_whole >= last_whole {
            self.zero_fill(offset, end);
            return Ok(());
        }
        self.zero_fill(offset, first_whole);
        self.drop_pages(first_whole, last_whole, false);
        self.zero_fill(last_whole.min(end), end);
        drop(tail_guard);
        Ok(())
    }

    /// Grows from `old` to `new` bytes (`old < new <= max_size`), with the resize lock held.
    fn grow(&self, extent: &mut Extent, old: u64, new: u64) -> Result<(), BackendError> {
        // Memory past the old end may hold data: from before an earlier shrink if it was not
        // released yet, or from a write that was validated before that shrink and landed after
        // it. Clear what the new size exposes, before exposing it.
        let dirty_end = new.min(extent.peak);
        if old < dirty_end {
            let partial_end = self.page_up(old).min(dirty_end);
            if partial_end > old {
                // The page also holds live data below `old`: zero only the bytes past it, even
                // if the page's bit is clear (a write racing the shrink may have set it after
                // the bit was cleared). Writing makes the page resident; count it.
                self.mark_written(old, partial_end - old);
                // SAFETY: `old..partial_end` lies below `peak <= accessible`, within the
                // reservation; no command is validated against it (it is past `size`), so
                // only commands in flight across the earlier shrink can touch it.
                unsafe { ptr::write_bytes(self.at(old), 0, (partial_end - old) as usize) };
            }
            // Whole pages, regardless of their bits (same race); the last one may extend past
            // `new`, which is past the end as well.
            self.drop_pages(self.page_up(old), self.page_up(dirty_end), true);
        }
        self.open_up_to(extent, new).map_err(|source| {
            // Address space is reserved; only a kernel out of memory for page tables or a
            // strict commit limit (`vm.overcommit_memory = 2`) gets here.
            BackendError::Map { size: new, source }
        })?;
        extent.peak = extent.peak.max(new);
        self.size.store(new, Ordering::Release);
        Ok(())
    }

    /// Shrinks from `old` to `new` bytes (`new < old`), with the resize lock held.
    fn shrink(&self, old: u64, new: u64) {
        // Refuse new commands past `new` first, then give the memory back. The partial page
        // at `new` keeps live data and stays; `grow` clears its tail before exposing it.
        self.size.store(new, Ordering::Release);
        self.drop_pages(self.page_up(new), self.page_up(old), false);
    }
}

/// `words` zeroed bitmap words (`words > 0`). Allocated zeroed, so that a large bitmap comes
/// from fresh zero pages and costs no memory until written: the default reservation gives a
/// 1 MiB namespace half a mebibyte of bitmap, nearly all of it never touched.
fn zeroed_bitmap(words: usize) -> Box<[AtomicU64]> {
    let Ok(layout) = std::alloc::Layout::array::<AtomicU64>(words.max(1)) else {
        // Only a reservation beyond the address space gets here; `mmap` would refuse it too.
        std::alloc::handle_alloc_error(std::alloc::Layout::new::<AtomicU64>());
    };
    // SAFETY: `layout` has a non-zero size (at least one word).
    let raw = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<AtomicU64>();
    if raw.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: `raw` was allocated by the global allocator with the layout of `[AtomicU64;
    // words.max(1)]`, which is what `Box<[AtomicU64]>` of that length frees with; all its bytes
    // are zero, and an all-zero `AtomicU64` is a valid zero.
    unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(raw, words.max(1))) }
}

/// A RAM size must be non-zero and a multiple of 512 (the smallest logical block).
fn validate_size(size: u64) -> Result<(), BackendError> {
    check_size(BackendKind::Ram, size, 512)
}

impl Backend for RamBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Ram
    }

    #[inline]
    fn size(&self) -> u64 {
        self.current_size()
    }

    fn resize(&self, new_size: u64) -> Result<(), BackendError> {
        validate_size(new_size)?;
        if new_size > self.max_size {
            return Err(BackendError::ResizeBeyondLimit {
                kind: BackendKind::Ram,
                path: None,
                requested: new_size,
                limit: self.max_size,
                what: "the address space the RAM backend reserved when it was created \
                       (recreate the namespace to go beyond it)",
            });
        }
        let mut extent = self.lock_extent();
        let old = self.current_size();
        match new_size.cmp(&old) {
            std::cmp::Ordering::Greater => self.grow(&mut extent, old, new_size)?,
            std::cmp::Ordering::Less => self.shrink(old, new_size),
            std::cmp::Ordering::Equal => {}
        }
        tracing::debug!(old, new = new_size, "RAM backend resized");
        Ok(())
    }

    fn may_block(&self) -> bool {
        false
    }

    fn memory(&self, offset: u64, len: usize) -> Option<NonNull<u8>> {
        check_range(offset, len as u64, self.current_size()).ok()?;
        NonNull::new(self.at(offset))
    }

    fn pin_for_dma(&self) -> Option<(NonNull<u8>, usize)> {
        self.pinned.store(true, Ordering::Release);
        // The accessible part may grow up to the reservation; register what is accessible now
        // (registering inaccessible pages fails).
        let len = usize::try_from(self.current_size()).ok()?;
        Some((self.base, len))
    }

    #[inline]
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        check_range(offset, buf.len() as u64, self.current_size())?;
        // SAFETY: `offset..offset + buf.len()` lies below a size that was current a moment ago,
        // so within the accessible part of the reservation (never made inaccessible again);
        // `buf` is a live exclusive slice that cannot overlap the mapping because no Rust
        // reference into the mapping ever exists. Concurrency: see the `Send` impl.
        unsafe { ptr::copy_nonoverlapping(self.at(offset), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    #[inline]
    fn write(&self, offset: u64, buf: &[u8]) -> Result<(), BackendError> {
        check_range(offset, buf.len() as u64, self.current_size())?;
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

    fn thin(&self) -> bool {
        !self.pinned.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for RamBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RamBackend")
            .field("size", &self.current_size())
            .field("max_size", &self.max_size)
            .field("page_size", &self.page_size())
            .field("huge_pages", &self.huge)
            .field("allocated", &self.allocated_bytes())
            .finish_non_exhaustive()
    }
}

impl Drop for RamBackend {
    fn drop(&mut self) {
        // SAFETY: the reservation was created in `with_max_size` with this address and length
        // and is unmapped exactly once; `&mut self` guarantees no call is still using it.
        let rc = unsafe { libc::munmap(self.base.as_ptr().cast(), self.reserved) };
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
    fn pinned_memory_keeps_its_pages_and_zeroes_in_place() {
        let ram = RamBackend::new(1 << 20).unwrap();
        let page = 1u64 << ram.page_shift;
        ram.write(0, &vec![0xAA; (4 * page) as usize]).unwrap();
        let (p, len) = ram.pin_for_dma().unwrap();
        assert_eq!(len, 1 << 20);
        assert_eq!(p, ram.memory(0, 1).unwrap());
        let before = ram.allocated_bytes();
        ram.deallocate(0, 2 * page).unwrap();
        ram.write_zeroes(2 * page, page).unwrap();
        // Still resident (a registered device keeps pointing at these pages)...
        assert_eq!(ram.allocated_bytes(), before);
        // ...and they read as zero, the rest untouched.
        let mut b = vec![1u8; (4 * page) as usize];
        ram.read(0, &mut b).unwrap();
        assert!(b[..(3 * page) as usize].iter().all(|&x| x == 0));
        assert!(b[(3 * page) as usize..].iter().all(|&x| x == 0xAA));
        // Without pinning the same deallocation hands the pages back.
        let free = RamBackend::new(1 << 20).unwrap();
        free.write(0, &vec![0xAA; (4 * page) as usize]).unwrap();
        let before = free.allocated_bytes();
        free.deallocate(0, 2 * page).unwrap();
        assert!(free.allocated_bytes() < before);
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

    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
            .collect()
    }

    fn read_vec(ram: &RamBackend, offset: u64, len: u64) -> Vec<u8> {
        let mut buf = vec![0xEE; len as usize];
        ram.read(offset, &mut buf).unwrap();
        buf
    }

    #[test]
    fn default_reservation() {
        const GIB: u64 = 1 << 30;
        assert_eq!(RamBackend::default_max_size(1 << 20), (1 << 20) + 16 * GIB);
        assert_eq!(RamBackend::default_max_size(16 * GIB), 64 * GIB);
        assert_eq!(RamBackend::default_max_size(512 * GIB), 1024 * GIB);
        assert_eq!(RamBackend::default_max_size(2048 * GIB), 2048 * GIB);
        let ram = RamBackend::new(1 << 20).unwrap();
        assert_eq!(ram.max_size(), RamBackend::default_max_size(1 << 20));
        assert_eq!(ram.allocated_bytes(), 0);
    }

    #[test]
    fn grow_keeps_data_and_the_new_range_reads_zero() {
        let size = 3 * 4096 + 512; // last page partial
        let ram = RamBackend::with_max_size(size, 8 << 20, false).unwrap();
        let data = pattern(1, size as usize);
        ram.write(0, &data).unwrap();
        ram.resize(5 << 20).unwrap();
        assert_eq!(ram.size(), 5 << 20);
        assert_eq!(read_vec(&ram, 0, size), data);
        assert!(
            read_vec(&ram, size, (5 << 20) - size)
                .iter()
                .all(|&b| b == 0)
        );
        // The grown range is usable, up to the new end and no further.
        ram.write((5 << 20) - 512, &[7; 512]).unwrap();
        assert!(matches!(
            ram.write(5 << 20, &[7]),
            Err(BackendError::OutOfRange { .. })
        ));
        // Up to the maximum exactly: across the 2 MiB protection steps.
        ram.resize(8 << 20).unwrap();
        ram.write((8 << 20) - 4096, &[8; 4096]).unwrap();
        assert_eq!(read_vec(&ram, (5 << 20) - 512, 512), vec![7; 512]);
        assert_eq!(read_vec(&ram, 0, size), data);
    }

    #[test]
    fn shrink_releases_memory_and_a_later_grow_reads_zero() {
        let page = page_size();
        let size = 64 * page;
        let ram = RamBackend::with_max_size(size, 4 * size, false).unwrap();
        let data = pattern(2, size as usize);
        ram.write(0, &data).unwrap();
        assert_eq!(ram.allocated_bytes(), size);
        // Shrink to an end inside a page: that page keeps its live head.
        let small = 10 * page + 512;
        ram.resize(small).unwrap();
        assert_eq!(ram.size(), small);
        assert_eq!(ram.allocated_bytes(), 11 * page);
        assert!(matches!(
            ram.read(small, &mut [0]),
            Err(BackendError::OutOfRange { .. })
        ));
        assert_eq!(read_vec(&ram, 0, small), data[..small as usize]);
        // Grow past the old size: everything past `small` reads zero, the head is intact.
        ram.resize(2 * size).unwrap();
        assert_eq!(read_vec(&ram, 0, small), data[..small as usize]);
        assert!(
            read_vec(&ram, small, 2 * size - small)
                .iter()
                .all(|&b| b == 0)
        );
        assert_eq!(ram.allocated_bytes(), 11 * page);
        // Shrinking to a page boundary and back releases and clears exactly the tail.
        ram.resize(4 * page).unwrap();
        assert_eq!(ram.allocated_bytes(), 4 * page);
        ram.resize(size).unwrap();
        assert_eq!(read_vec(&ram, 0, 4 * page), data[..4 * page as usize]);
        assert!(
            read_vec(&ram, 4 * page, size - 4 * page)
                .iter()
                .all(|&b| b == 0)
        );
        // Same size: a no-op.
        ram.resize(size).unwrap();
        assert_eq!(ram.size(), size);
    }

    /// A write validated before a shrink that lands after it (simulated through the
    /// `memory` pointer taken before the shrink) is not visible after a later grow, and a
    /// zero-copy read through such a pointer does not fault.
    #[test]
    fn writes_in_flight_across_a_shrink_are_cleared_before_regrowing() {
        let page = page_size();
        let size = 16 * page;
        let ram = RamBackend::with_max_size(size, size, false).unwrap();
        let data = pattern(3, size as usize);
        ram.write(0, &data).unwrap();
        let (at, len) = (5 * page + 100, 8 * page);
        let late = ram.memory(at, len as usize).unwrap();
        ram.resize(6 * page).unwrap();
        // SAFETY: the reservation stays mapped read-write up to the largest size ever
        // exposed (16 pages), which is what the backend promises commands in flight.
        unsafe {
            ptr::write_bytes(late.as_ptr(), 0xAB, len as usize);
            let mut copy = vec![0u8; len as usize];
            ptr::copy_nonoverlapping(late.as_ptr(), copy.as_mut_ptr(), copy.len());
        }
        ram.resize(size).unwrap();
        let mut expected = data;
        expected[at as usize..6 * page as usize].fill(0xAB); // below the shrunk end: kept
        expected[6 * page as usize..].fill(0);
        assert!(read_vec(&ram, 0, size) == expected);
    }

    #[test]
    fn resize_beyond_the_reservation_names_the_limit() {
        let ram = RamBackend::with_max_size(1 << 20, 4 << 20, false).unwrap();
        ram.write(0, &[1; 512]).unwrap();
        let err = ram.resize((4 << 20) + 512).unwrap_err();
        assert!(
            matches!(
                err,
                BackendError::ResizeBeyondLimit {
                    kind: BackendKind::Ram,
                    requested,
                    limit: 4194304,
                    ..
                } if requested == (4 << 20) + 512
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("4194304") && text.contains("reserved"),
            "{text}"
        );
        assert_eq!(ram.size(), 1 << 20);
        ram.resize(4 << 20).unwrap();
        assert_eq!(read_vec(&ram, 0, 512), vec![1; 512]);
    }

    #[test]
    fn bad_sizes_are_refused_and_change_nothing() {
        let ram = RamBackend::new(1 << 20).unwrap();
        for bad in [0, 1, 511, 1000, (1 << 20) + 1] {
            assert!(
                matches!(ram.resize(bad), Err(BackendError::InvalidSize { size, .. }) if size == bad),
                "{bad}"
            );
            assert_eq!(ram.size(), 1 << 20);
        }
        assert!(matches!(
            RamBackend::with_max_size(8192, 4096, false),
            Err(BackendError::InvalidSize { size: 8192, .. })
        ));
        assert!(matches!(
            RamBackend::with_max_size(4096, 5000, false),
            Err(BackendError::InvalidSize { size: 5000, .. })
        ));
        ram.resize(512).unwrap();
        assert_eq!(ram.size(), 512);
    }

    #[test]
    fn huge_pages_resize_the_same_way() {
        let ram = RamBackend::with_max_size(3 << 20, 16 << 20, true).unwrap();
        let data = pattern(4, 3 << 20);
        ram.write(0, &data).unwrap();
        ram.resize((1 << 20) + 4096).unwrap();
        ram.resize(16 << 20).unwrap();
        assert_eq!(
            read_vec(&ram, 0, (1 << 20) + 4096),
            data[..(1 << 20) + 4096]
        );
        assert!(
            read_vec(&ram, (1 << 20) + 4096, (15 << 20) - 4096)
                .iter()
                .all(|&b| b == 0)
        );
    }

    /// Readers, writers, zero-copy readers and deallocators run while another thread resizes
    /// in a loop: nothing crashes, nothing fails except with `OutOfRange`, and every stripe
    /// below the smallest size holds what its writer last wrote.
    #[test]
    fn concurrent_io_while_resizing() {
        use std::sync::Arc;
        const STRIPES: u64 = 3;
        const ITERATIONS: u64 = 3000;
        const MIN_RESIZES: u64 = 1000;
        let page = page_size();
        let min = 8 * page + 512;
        let max = 64 * page;
        let ram = Arc::new(RamBackend::with_max_size(max, max, false).unwrap());
        let stripe = min / STRIPES;
        let workers: Vec<_> = (0..STRIPES)
            .map(|t| {
                let ram = Arc::clone(&ram);
                std::thread::spawn(move || {
                    let base = t * stripe;
                    let mut model = vec![0u8; stripe as usize];
                    for i in 1..=ITERATIONS {
                        let data = pattern((t * 50 + i) as u8, stripe as usize);
                        ram.write(base, &data).unwrap();
                        model.copy_from_slice(&data);
                        assert_eq!(read_vec(&ram, base, stripe), model, "stripe {t}");
                        // Past the smallest size: may be in or out of range at any moment.
                        let far = min + (i * 4099 + t * 977) % (max - min);
                        let len = 4096.min(max - far);
                        let result = match i % 4 {
                            0 => ram.write(far, &data[..len as usize]),
                            1 => ram.deallocate(far, len),
                            2 => ram.read(far, &mut vec![0; len as usize]),
                            _ => match ram.memory(far, len as usize) {
                                Some(p) => {
                                    let mut copy = vec![0u8; len as usize];
                                    // SAFETY: a zero-copy read, as the runtime does it; the
                                    // pointer stays valid across resizes.
                                    unsafe {
                                        ptr::copy_nonoverlapping(
                                            p.as_ptr(),
                                            copy.as_mut_ptr(),
                                            copy.len(),
                                        )
                                    };
                                    Ok(())
                                }
                                None => Ok(()),
                            },
                        };
                        assert!(
                            matches!(result, Ok(()) | Err(BackendError::OutOfRange { .. })),
                            "{result:?}"
                        );
                    }
                    (t, model)
                })
            })
            .collect();
        // Resize for as long as any worker runs (workers run a bounded number of iterations).
        let mut i = 0u64;
        while i < MIN_RESIZES || !workers.iter().all(|w| w.is_finished()) {
            let new = min + (i * 7 * 4096 + i * 512) % (max - min + 512);
            ram.resize(new).unwrap();
            assert_eq!(ram.size(), new);
            i += 1;
        }
        for worker in workers {
            let (t, model) = worker.join().expect("worker panicked");
            assert_eq!(read_vec(&ram, t * stripe, stripe), model, "stripe {t}");
        }
        assert!(ram.allocated_bytes() <= max);
    }

    #[test]
    fn zeroing_unwritten_partial_pages_does_not_allocate() {
        let ram = RamBackend::new(64 * 4096).unwrap();
        ram.write_zeroes(100, 200).unwrap();
        ram.write_zeroes(ram.page_size() - 10, 20).unwrap();
        assert_eq!(ram.allocated_bytes(), 0);
    }
}
