//! [`AlignedBuf`]: heap memory aligned for `O_DIRECT` I/O.

use std::alloc::{self, Layout};
use std::fmt;
use std::ptr::NonNull;

/// Alignment of every [`AlignedBuf`]: a page, which satisfies the memory alignment `O_DIRECT`
/// asks for on every Linux file system and block device (at most the logical block size,
/// itself at most a page on the devices we accept).
pub const DIRECT_IO_ALIGN: usize = 4096;

/// A zero-initialised byte buffer whose start is aligned to [`DIRECT_IO_ALIGN`], for
/// `O_DIRECT` transfers (a `Vec<u8>` only promises 1-byte alignment and may not be given a
/// different layout). Its address never changes while it lives, so it may be handed to the
/// kernel (io_uring) for as long as the owner keeps it.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// The allocation's layout (its size is the capacity).
    layout: Layout,
}

// SAFETY: the buffer is uniquely owned heap memory (like a `Box<[u8]>`); shared access only
// hands out `&[u8]`.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above; `&AlignedBuf` gives no mutable access.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` zero bytes (at least one page is reserved, so an empty buffer still has a valid
    /// aligned address).
    pub fn zeroed(len: usize) -> AlignedBuf {
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size (at least DIRECT_IO_ALIGN).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        AlignedBuf { ptr, len, layout }
    }

    fn layout(len: usize) -> Layout {
        let size = len.max(1).next_multiple_of(DIRECT_IO_ALIGN);
        match Layout::from_size_align(size, DIRECT_IO_ALIGN) {
            Ok(l) => l,
            // Only for lengths near usize::MAX, which no allocation could satisfy anyway.
            Err(_) => alloc::handle_alloc_error(Layout::new::<[u8; DIRECT_IO_ALIGN]>()),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes it can hold without reallocating.
    pub fn capacity(&self) -> usize {
        self.layout.size()
    }

    /// Resizes to `len` bytes: within the capacity the memory stays where it is (and keeps its
    /// contents; bytes past the old length are whatever was last written there, never
    /// uninitialised); beyond it a fresh zeroed buffer replaces it (contents not kept).
    pub fn set_len(&mut self, len: usize) {
        if len <= self.capacity() {
            self.len = len;
        } else {
            *self = AlignedBuf::zeroed(len);
        }
    }

    /// Start of the buffer, for handing to the kernel.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of at least `len` initialised (zeroed) bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this layout, and not freed since.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_resizable() {
        for len in [0, 1, 512, 4096, 4097, 128 * 1024] {
            let mut b = AlignedBuf::zeroed(len);
            assert_eq!(b.as_mut_ptr() as usize % DIRECT_IO_ALIGN, 0);
            assert_eq!(b.len(), len);
            assert!(b.capacity() >= len.max(1));
            assert!(b.as_slice().iter().all(|&x| x == 0));
            b.as_mut_slice().fill(7);
            let cap = b.capacity();
            let at = b.as_mut_ptr();
            b.set_len(cap);
            assert_eq!(
                (b.as_mut_ptr(), b.len()),
                (at, cap),
                "within capacity: same memory"
            );
            b.set_len(cap + 1);
            assert_eq!(b.len(), cap + 1);
            assert_eq!(b.as_mut_ptr() as usize % DIRECT_IO_ALIGN, 0);
        }
    }
}
