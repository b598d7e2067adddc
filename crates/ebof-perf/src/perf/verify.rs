//! `perf --verify`: self-describing blocks and the per-unit generation map.
//!
//! Every logical block written under `--verify` carries its own identity, so a read can be
//! checked without keeping a copy of the data:
//!
//! ```text
//!  0..8   magic "EBOFVFY1"
//!  8..16  LBA (u64 LE)           - catches misplaced writes/reads
//! 16..20  generation (u32 LE)    - catches stale data (a lost or reordered write)
//! 20..24  run id (u32 LE)        - catches data left by an earlier run
//! 24..28  CRC32C of bytes 0..24 and 28..end - catches corruption anywhere in the block
//! 28..32  zero
//! 32..    pseudo-random filler derived from (LBA, generation, run id)
//! ```
//!
//! Soundness under concurrency: the range is cut into I/O units (one `--bs` each); a unit with a
//! command in flight is never picked again until that command completes, so a read is never
//! racing a write of the same blocks and the expected generation of a unit is exact. A failed
//! write leaves its unit "unknown" (not checked until written again).

/// The magic at the start of every verify block.
pub const MAGIC: [u8; 8] = *b"EBOFVFY1";
/// Bytes of header before the filler.
const HDR: usize = 32;
/// Generation value meaning "content unknown": never written in this run, or a write failed.
pub const UNKNOWN: u32 = 0;

/// What a checked block held instead of what was expected.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Mismatch {
    /// LBA of the bad block.
    pub lba: u64,
    /// Generation the block should carry.
    pub expected_gen: u32,
    /// Generation found in the block header, if it had one.
    pub found_gen: Option<u32>,
    /// LBA found in the block header, if it had one.
    pub found_lba: Option<u64>,
    /// What is wrong with the block.
    pub reason: &'static str,
}

fn le64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]))
}
fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]))
}

fn crc(sec: &[u8]) -> u32 {
    let c = nvmf_tcp::digest::crc32c(&sec[..24]);
    nvmf_tcp::digest::crc32c_append(c, &sec[28..])
}

/// Write one verify block (`sec.len()` = the LBA size, ≥ 512, a multiple of 8).
pub fn fill_sector(sec: &mut [u8], lba: u64, generation: u32, run: u32) {
    sec[0..8].copy_from_slice(&MAGIC);
    sec[8..16].copy_from_slice(&lba.to_le_bytes());
    sec[16..20].copy_from_slice(&generation.to_le_bytes());
    sec[20..24].copy_from_slice(&run.to_le_bytes());
    sec[28..32].fill(0);
    // A 64-bit LCG: cheap, and different for every (LBA, generation, run).
    let mut x = lba
        ^ (u64::from(generation) << 32)
        ^ u64::from(run).rotate_left(17)
        ^ 0x9E37_79B9_7F4A_7C15;
    for w in sec[HDR..].chunks_exact_mut(8) {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        w.copy_from_slice(&x.to_le_bytes());
    }
    let c = crc(sec);
    sec[24..28].copy_from_slice(&c.to_le_bytes());
}

/// What a block read back holds, judged on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectorView {
    /// No verify header: never written by this tool (or overwritten by something else).
    Foreign,
    /// A verify header whose checksum fails: torn or corrupted.
    Torn,
    /// A whole verify block.
    Block {
        /// The LBA the block says it is.
        lba: u64,
        /// The run that wrote it.
        run: u32,
        /// Its generation.
        generation: u32,
    },
}

/// Read one block's header and check its checksum.
pub fn inspect(sec: &[u8]) -> SectorView {
    if sec.len() < HDR || sec[0..8] != MAGIC {
        return SectorView::Foreign;
    }
    if crc(sec) != le32(sec, 24) {
        return SectorView::Torn;
    }
    SectorView::Block {
        lba: le64(sec, 8),
        run: le32(sec, 20),
        generation: le32(sec, 16),
    }
}

/// Check one block against (LBA, generation, run).
pub fn check_sector(sec: &[u8], lba: u64, generation: u32, run: u32) -> Result<(), Mismatch> {
    let bad = |found_gen, found_lba, reason| Mismatch {
        lba,
        expected_gen: generation,
        found_gen,
        found_lba,
        reason,
    };
    let (found_lba, found_gen, found_run) = match inspect(sec) {
        SectorView::Foreign => {
            return Err(bad(
                None,
                None,
                "no verify header (block not written by this tool, or overwritten)",
            ));
        }
        SectorView::Torn => {
            return Err(bad(
                Some(le32(sec, 16)),
                Some(le64(sec, 8)),
                "checksum mismatch (corrupted block)",
            ));
        }
        SectorView::Block {
            lba,
            run,
            generation,
        } => (lba, generation, run),
    };
    if found_lba != lba {
        return Err(bad(
            Some(found_gen),
            Some(found_lba),
            "block carries another LBA (misdirected write or read)",
        ));
    }
    if found_run != run {
        return Err(bad(
            Some(found_gen),
            Some(found_lba),
            "block written by another run",
        ));
    }
    if found_gen != generation {
        return Err(bad(
            Some(found_gen),
            Some(found_lba),
            "stale generation (a write was lost or reordered)",
        ));
    }
    Ok(())
}

/// Fill `buf` (whole blocks of `lba_size`) starting at `slba`.
pub fn fill_blocks(buf: &mut [u8], slba: u64, lba_size: usize, generation: u32, run: u32) {
    for (i, sec) in buf.chunks_exact_mut(lba_size).enumerate() {
        fill_sector(sec, slba + i as u64, generation, run);
    }
}

/// Check every block of `buf`, appending a [`Mismatch`] for each bad one.
pub fn check_blocks(
    buf: &[u8],
    slba: u64,
    lba_size: usize,
    generation: u32,
    run: u32,
    bad: &mut Vec<Mismatch>,
) {
    for (i, sec) in buf.chunks_exact(lba_size).enumerate() {
        if let Err(m) = check_sector(sec, slba + i as u64, generation, run) {
            bad.push(m);
        }
    }
}

/// Per I/O unit: the generation of its last successful write, whether a command on it is
/// outstanding, and (for `--verify-log`) whether it was written since the last Flush was
/// submitted.
pub struct GenMap {
    gens: Vec<u32>,
    busy: Vec<bool>,
    next: u32,
    dirty: Vec<bool>,
    dirty_list: Vec<u32>,
}

impl GenMap {
    /// `units` units, none written, none busy.
    pub fn new(units: usize) -> GenMap {
        GenMap {
            gens: vec![UNKNOWN; units],
            busy: vec![false; units],
            next: UNKNOWN,
            dirty: vec![false; units],
            dirty_list: Vec::new(),
        }
    }
    /// A write to `unit` completed successfully since the last [`GenMap::take_dirty`].
    pub fn mark_dirty(&mut self, unit: u64) {
        let u = unit as usize;
        if !self.dirty[u] {
            self.dirty[u] = true;
            self.dirty_list.push(unit as u32);
        }
    }
    /// The units written since the last call, each once with its current generation (units
    /// whose content became unknown since are left out), numbered from `base`.
    pub fn take_dirty(&mut self, base: u32) -> Vec<(u32, u32)> {
        let list = std::mem::take(&mut self.dirty_list);
        let mut out = Vec::with_capacity(list.len());
        for u in list {
            self.dirty[u as usize] = false;
            let g = self.gens[u as usize];
            if g != UNKNOWN {
                out.push((base + u, g));
            }
        }
        out
    }
    /// A command is in flight on `unit`.
    pub fn is_busy(&self, unit: u64) -> bool {
        self.busy[unit as usize]
    }
    /// Mark `unit` busy (a command in flight) or not.
    pub fn set_busy(&mut self, unit: u64, b: bool) {
        self.busy[unit as usize] = b;
    }
    /// Expected generation of a unit (`UNKNOWN` = do not check).
    pub fn expected(&self, unit: u64) -> u32 {
        self.gens[unit as usize]
    }
    /// `unit` now holds `generation`.
    pub fn set_expected(&mut self, unit: u64, generation: u32) {
        self.gens[unit as usize] = generation;
    }
    /// A fresh generation number for a write (never `UNKNOWN`).
    pub fn next_gen(&mut self) -> u32 {
        self.next = self.next.wrapping_add(1);
        if self.next == UNKNOWN {
            self.next = 1;
        }
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_every_failure_kind() {
        for size in [512usize, 4096] {
            let mut b = vec![0u8; size * 4];
            fill_blocks(&mut b, 100, size, 7, 42);
            let mut bad = Vec::new();
            check_blocks(&b, 100, size, 7, 42, &mut bad);
            assert!(bad.is_empty());
            // stale generation, other run, wrong LBA
            check_blocks(&b, 100, size, 8, 42, &mut bad);
            assert_eq!(bad.len(), 4);
            assert_eq!(
                bad[0].reason,
                "stale generation (a write was lost or reordered)"
            );
            assert_eq!(bad[0].found_gen, Some(7));
            bad.clear();
            check_blocks(&b, 100, size, 7, 43, &mut bad);
            assert_eq!(bad[0].reason, "block written by another run");
            bad.clear();
            check_blocks(&b, 101, size, 7, 42, &mut bad);
            assert_eq!((bad[0].lba, bad[0].found_lba), (101, Some(100)));
            bad.clear();
            // one flipped bit in the filler of block 2
            b[size * 2 + 300] ^= 0x10;
            check_blocks(&b, 100, size, 7, 42, &mut bad);
            assert_eq!(bad.len(), 1);
            assert_eq!(
                (bad[0].lba, bad[0].reason),
                (102, "checksum mismatch (corrupted block)")
            );
            bad.clear();
            // never written
            check_blocks(&vec![0u8; size], 5, size, 1, 42, &mut bad);
            assert_eq!(bad[0].found_gen, None);
        }
    }

    #[test]
    fn generations_skip_unknown() {
        let mut m = GenMap::new(4);
        m.next = u32::MAX - 1;
        assert_eq!(m.next_gen(), u32::MAX);
        assert_eq!(m.next_gen(), 1);
        m.set_busy(2, true);
        assert!(m.is_busy(2) && !m.is_busy(1));
        assert_eq!(m.expected(3), UNKNOWN);
    }

    #[test]
    fn dirty_units_are_taken_once_with_their_latest_generation() {
        let mut m = GenMap::new(4);
        m.set_expected(1, 5);
        m.mark_dirty(1);
        m.set_expected(1, 6);
        m.mark_dirty(1);
        m.set_expected(3, 2);
        m.mark_dirty(3);
        m.mark_dirty(0); // its write then failed: content unknown
        assert_eq!(m.take_dirty(100), vec![(101, 6), (103, 2)]);
        assert!(m.take_dirty(100).is_empty());
        m.mark_dirty(3);
        assert_eq!(m.take_dirty(0), vec![(3, 2)]);
    }
}
