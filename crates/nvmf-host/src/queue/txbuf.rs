//! The transmit buffer of a TCP queue: PDU bytes, with large write data spliced in from the
//! command slots (sent from the slot's buffer by `writev`, not copied), each slot pinned until
//! its data is out.

use super::slots::{Slot, Slots};
use crate::error::HostError;

/// Most iovec entries one `writev` is given.
pub(super) const TX_IOV_MAX: usize = 64;
/// [`TxBuf::slices`] found a spliced range outside its slot's buffer (cannot happen: a pinned
/// slot is neither reused nor resized).
pub(super) const SPLICE_LOST: HostError =
    HostError::Unsupported("transmit buffer lost spliced write data");

/// Output waiting to be sent: PDU bytes, with write data spliced in from command slots.
#[derive(Default)]
pub(super) struct TxBuf {
    pub(super) bytes: Vec<u8>,
    /// Slot data sent right after `bytes[..at]`, in order of `at`.
    pub(super) ext: Splices,
    /// Bytes of the output, in wire order, already sent.
    sent: usize,
    /// `ext[..released]` is sent and its slots unpinned; `released_len` is its total length.
    released: usize,
    released_len: usize,
}

/// `slots[slot].buf[start..start + len]`, spliced into the output at `at`.
struct TxExt {
    at: usize,
    slot: u16,
    start: usize,
    len: usize,
}

/// The spliced pieces of a [`TxBuf`] and their total length.
#[derive(Default)]
pub(super) struct Splices {
    list: Vec<TxExt>,
    pub(super) len: usize,
}

impl Splices {
    /// Record `slots[slot].buf[range]` at offset `at` of the bytes (the caller pins the slot).
    pub(super) fn push(&mut self, at: usize, slot: u16, range: std::ops::Range<usize>) {
        self.len += range.len();
        self.list.push(TxExt {
            at,
            slot,
            start: range.start,
            len: range.len(),
        });
    }
}

impl TxBuf {
    pub(super) fn pending(&self) -> bool {
        self.sent < self.bytes.len() + self.ext.len
    }

    /// Splice `slots[slot].buf[range]` in at offset `at` of the bytes (not before any earlier
    /// splice), pinning the slot.
    pub(super) fn splice_at(
        &mut self,
        slots: &mut [Slot],
        at: usize,
        slot: u16,
        range: std::ops::Range<usize>,
    ) {
        if let Some(s) = slots.get_mut(usize::from(slot)) {
            s.pins += 1;
        }
        self.ext.push(at, slot, range);
    }

    /// The unsent output in wire order, as at most `N` slices into `out`; returns how many.
    /// `None` if a spliced range is no longer inside its slot's buffer (a bug: pinned slots are
    /// not resized).
    pub(super) fn slices<'a, const N: usize>(
        &'a self,
        slots: &'a [Slot],
        out: &mut [&'a [u8]; N],
    ) -> Option<usize> {
        let mut n = 0;
        let mut skip = self.sent;
        let mut push = |piece: &'a [u8]| {
            if n == N || piece.is_empty() {
                return;
            }
            if skip >= piece.len() {
                skip -= piece.len();
                return;
            }
            out[n] = &piece[skip..];
            skip = 0;
            n += 1;
        };
        let mut pos = 0;
        for e in &self.ext.list {
            push(&self.bytes[pos..e.at]);
            let buf = &slots.get(usize::from(e.slot))?.buf;
            push(buf.get(e.start..e.start.checked_add(e.len)?)?);
            pos = e.at;
        }
        push(&self.bytes[pos..]);
        Some(n)
    }

    /// `n` more bytes were sent. When that was all of it, clear the output and unpin its slots.
    /// Slots whose spliced data is all out are unpinned at once (not when the whole output is),
    /// so that a queue kept busy never runs short of slots.
    pub(super) fn advance(&mut self, n: usize, st: &mut Slots) {
        self.sent += n;
        if !self.pending() {
            self.clear(st);
            return;
        }
        while let Some(e) = self.ext.list.get(self.released) {
            // Wire offset of the end of `e`: its place in the bytes plus all spliced data up to
            // and including it.
            if e.at + self.released_len + e.len > self.sent {
                break;
            }
            st.unpin(usize::from(e.slot));
            self.released_len += e.len;
            self.released += 1;
        }
    }

    /// Forget the output (sent or abandoned) and unpin the slots not unpinned yet.
    pub(super) fn clear(&mut self, st: &mut Slots) {
        for e in self.ext.list.drain(..).skip(self.released) {
            st.unpin(usize::from(e.slot));
        }
        self.bytes.clear();
        self.ext.len = 0;
        self.sent = 0;
        self.released = 0;
        self.released_len = 0;
    }

    /// The unsent output as one byte vector (slot data copied in); the output is cleared.
    pub(super) fn take(&mut self, st: &mut Slots) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.bytes.len() + self.ext.len);
        while self.pending() {
            let mut pieces = [&[][..]; 16];
            let Some(n) = self.slices(&st.slots, &mut pieces).filter(|&n| n > 0) else {
                break;
            };
            let mut k = 0;
            for p in &pieces[..n] {
                v.extend_from_slice(p);
                k += p.len();
            }
            self.sent += k;
        }
        self.clear(st);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::QueueId;

    fn concat(tx: &TxBuf, st: &Slots) -> Vec<u8> {
        let mut pieces = [&[][..]; TX_IOV_MAX];
        let n = tx.slices(&st.slots, &mut pieces).unwrap();
        pieces[..n].concat()
    }

    /// Two commands' write data spliced between PDU bytes: the slices are the wire order, a
    /// partial send resumes mid-piece, and a slot released before its data is out only becomes
    /// free once the data is sent.
    #[test]
    fn spliced_data_pins_its_slot_until_sent() {
        let mut st = Slots::new(QueueId(1), 4, 0, 0);
        st.slots[0].buf = vec![0xAA; 5000];
        st.slots[1].buf = vec![0xBB; 3000];
        for i in [0u16, 1] {
            st.free.retain(|&f| f != i);
            st.slots[usize::from(i)].busy = true;
            st.in_flight += 1;
        }
        let mut tx = TxBuf::default();
        tx.bytes.extend_from_slice(b"head0");
        tx.splice_at(&mut st.slots, 5, 0, 100..4100);
        tx.bytes.extend_from_slice(b"mid");
        tx.splice_at(&mut st.slots, 8, 1, 0..3000);
        tx.bytes.extend_from_slice(b"tail");
        let mut want = b"head0".to_vec();
        want.extend_from_slice(&[0xAA; 4000]);
        want.extend_from_slice(b"mid");
        want.extend_from_slice(&[0xBB; 3000]);
        want.extend_from_slice(b"tail");
        assert_eq!(concat(&tx, &st), want);
        {
            let mut two = [&[][..]; 2];
            assert_eq!(tx.slices(&st.slots, &mut two), Some(2));
            assert_eq!(two[1].len(), 4000);
        }

        // Command 0 completes before its data is out: its slot is not reusable yet.
        st.release(0);
        assert!(!st.free.contains(&0));
        tx.advance(5 + 3999, &mut st);
        assert!(!st.free.contains(&0));
        assert_eq!(concat(&tx, &st), want[5 + 3999..]);
        tx.advance(1, &mut st);
        assert!(st.free.contains(&0), "slot 0's data is out");
        assert_eq!(st.slots[1].pins, 1);
        st.release(1);
        tx.advance(3 + 3000, &mut st);
        assert!(st.free.contains(&1));
        assert_eq!(concat(&tx, &st), b"tail");
        tx.advance(4, &mut st);
        assert!(!tx.pending());
        assert!(tx.ext.list.is_empty() && tx.bytes.is_empty());
        assert_eq!(st.in_flight, 0);
    }

    /// A chunked transfer pins its slot once per piece; abandoning the output unpins all, and
    /// `take` copies the spliced data in.
    #[test]
    fn abandoned_and_taken_output_unpins() {
        let mut st = Slots::new(QueueId(1), 3, 0, 0);
        st.slots[0].buf = (0..9000u32).map(|i| i as u8).collect();
        st.free.retain(|&f| f != 0);
        st.slots[0].busy = true;
        st.in_flight = 1;
        let mut tx = TxBuf::default();
        for (i, r) in [0..4096, 4096..8192, 8192..9000].into_iter().enumerate() {
            tx.bytes.push(i as u8);
            let at = tx.bytes.len();
            tx.splice_at(&mut st.slots, at, 0, r);
        }
        assert_eq!(st.slots[0].pins, 3);
        st.release(0);
        tx.advance(1 + 4096 + 1, &mut st);
        assert_eq!(st.slots[0].pins, 2);
        let rest = tx.take(&mut st);
        let mut expect = Vec::new();
        expect.extend_from_slice(&st.slots[0].buf[4096..8192]);
        expect.push(2);
        expect.extend_from_slice(&st.slots[0].buf[8192..9000]);
        assert_eq!(rest, expect);
        assert_eq!(st.slots[0].pins, 0);
        assert!(st.free.contains(&0));
    }

    /// A spliced range no longer inside its slot's buffer is reported, never sliced past.
    #[test]
    fn lost_splice_is_an_error() {
        let mut st = Slots::new(QueueId(1), 2, 0, 0);
        st.slots[0].buf = vec![1; 100];
        let mut tx = TxBuf::default();
        tx.splice_at(&mut st.slots, 0, 0, 50..100);
        st.slots[0].buf.truncate(60);
        assert_eq!(tx.slices(&st.slots, &mut [&[][..]; 4]), None);
        tx.splice_at(&mut st.slots, 0, 7, 0..1);
        st.slots[0].buf = vec![1; 100];
        assert_eq!(tx.slices(&st.slots, &mut [&[][..]; 4]), None);
    }
}
