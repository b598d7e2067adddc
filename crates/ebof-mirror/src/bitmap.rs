//! The persistent write-intent bitmap: [`Regions`] plus a file whose page is written and
//! fdatasync'd when a bit goes 0→1 (before the data write is issued); clears are lazy (the
//! whole map is rewritten on a sweep). Without a path it is memory only.
//!
//! Setting is a group commit: [`Bitmap::set_span`] sets bits in memory and says which sync
//! makes them durable; one writer at a time takes every page set since the last sync
//! ([`Bitmap::take_sync`]) and writes and syncs them outside the caller's lock, while the other
//! writers wait for its number ([`Bitmap::durable`]). Many first writes to fresh regions then
//! cost one fdatasync, not one each.

use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::regions::Regions;

const PAGE: usize = 4096;
const WORDS_PER_PAGE: usize = PAGE / 8;

/// Dirty regions, optionally backed by a file.
pub struct Bitmap {
    regions: Regions,
    file: Option<Arc<File>>,
    /// A persist failed: the file may be stale, so every region counts as dirty at restart
    /// (the state's `synced` is not trusted); logged once.
    failed: bool,
    /// Pages with a bit set in memory, not yet taken by a sync.
    pending: BTreeSet<usize>,
    /// Pages the sync under way writes (empty: none under way).
    syncing: BTreeSet<usize>,
    /// The number the next sync takes; the last one finished.
    next_sync: u64,
    done_sync: u64,
    /// A sync is under way (its pages may be empty: a page set again meanwhile is pending).
    sync_active: bool,
    /// A bit was set since the last [`Bitmap::quiet_sweeps`].
    touched: bool,
    /// Sweeps in a row that found no bit set since the one before.
    quiet: u32,
}

/// A sync taken by [`Bitmap::take_sync`]: run it without the bitmap's lock, then
/// [`Bitmap::finish_sync`].
pub struct SyncJob {
    file: Arc<File>,
    /// (byte offset, page bytes)
    pages: Vec<(u64, Vec<u8>)>,
    number: u64,
}

impl SyncJob {
    /// This sync's number (for [`Bitmap::finish_sync`]).
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Write the pages and fdatasync.
    pub fn run(&self) -> std::io::Result<()> {
        for (at, bytes) in &self.pages {
            self.file.write_all_at(bytes, *at)?;
        }
        self.file.sync_data()
    }
}

impl Bitmap {
    /// A bitmap over `size` bytes; with `path`, loaded from it (missing file: clean).
    pub fn open(size: u64, region_bytes: u64, path: Option<&Path>) -> std::io::Result<Bitmap> {
        let mut regions = Regions::new(size, region_bytes);
        let file = match path {
            None => None,
            Some(p) => {
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(p)?;
                let mut raw = vec![0u8; regions.words().len() * 8];
                let have = (f.metadata()?.len() as usize).min(raw.len());
                f.read_exact_at(&mut raw[..have], 0)?;
                let words: Vec<u64> = raw
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect();
                regions.load_words(&words);
                f.set_len((regions.words().len() * 8) as u64)?;
                Some(Arc::new(f))
            }
        };
        Ok(Bitmap {
            regions,
            file,
            failed: false,
            pending: BTreeSet::new(),
            syncing: BTreeSet::new(),
            next_sync: 1,
            done_sync: 0,
            sync_active: false,
            touched: false,
            quiet: 0,
        })
    }

    /// The regions.
    pub fn regions(&self) -> &Regions {
        &self.regions
    }

    /// Set region `r` and persist it (a sync of its own, under the caller's lock).
    pub fn set(&mut self, r: u64) {
        if let Some(n) = self.set_span(r..=r) {
            while self.done_sync < n {
                let Some(job) = self.take_sync() else { break };
                let res = job.run();
                self.finish_sync(job.number, res);
            }
        }
    }

    fn page_of(r: u64) -> usize {
        (r / 64) as usize / WORDS_PER_PAGE
    }

    /// Region `r` is set and on disk (or there is no file).
    fn durable_bit(&self, r: u64) -> bool {
        if !self.regions.is_set(r) {
            return false;
        }
        let page = Self::page_of(r);
        !self.pending.contains(&page) && !self.syncing.contains(&page)
    }

    /// Set the regions `span` in memory. None: all are on disk already (or there is no file);
    /// Some(n): they are once sync `n` has finished ([`Bitmap::durable`]).
    pub fn set_span(&mut self, span: std::ops::RangeInclusive<u64>) -> Option<u64> {
        self.touched = true;
        let mut need = None;
        for r in span {
            let changed = self.regions.set(r);
            if self.file.is_none() {
                continue;
            }
            let page = Self::page_of(r);
            // A bit set now is in no sync's copy of its page yet: the next sync. A bit set
            // before is in the next sync if its page waits for one, else in the sync under
            // way if that took its page (numbered `next_sync - 1`), else on disk.
            let n = if changed || self.pending.contains(&page) {
                self.pending.insert(page);
                self.next_sync
            } else if self.syncing.contains(&page) {
                self.next_sync - 1
            } else {
                continue;
            };
            need = need.max(Some(n));
        }
        need
    }

    /// A sync taken by [`Bitmap::take_sync`] has not finished.
    pub fn sync_active(&self) -> bool {
        self.sync_active
    }

    /// Sync `n` has finished: what it made durable is on disk.
    pub fn durable(&self, n: u64) -> bool {
        self.done_sync >= n
    }

    /// The pages set since the last sync, to write and sync now, if no sync is under way and
    /// there are any.
    pub fn take_sync(&mut self) -> Option<SyncJob> {
        if self.sync_active || self.pending.is_empty() {
            return None;
        }
        let file = self.file.clone()?;
        self.syncing = std::mem::take(&mut self.pending);
        let words = self.regions.words();
        let pages = self
            .syncing
            .iter()
            .map(|&page| {
                let lo = (page * WORDS_PER_PAGE).min(words.len());
                let hi = (lo + WORDS_PER_PAGE).min(words.len());
                let bytes = words[lo..hi].iter().flat_map(|w| w.to_le_bytes()).collect();
                ((lo * 8) as u64, bytes)
            })
            .collect();
        let number = self.next_sync;
        self.next_sync += 1;
        self.sync_active = true;
        Some(SyncJob {
            file,
            pages,
            number,
        })
    }

    /// The sync `number` ended with `res` (a failure is logged once and the map is not
    /// trusted at restart; the writes go on, as with any persist failure).
    pub fn finish_sync(&mut self, number: u64, res: std::io::Result<()>) {
        if let Err(e) = res {
            self.note_failure(&e);
        }
        self.done_sync = self.done_sync.max(number);
        self.syncing.clear();
        self.sync_active = false;
    }

    /// Set region `r` if that needs no write to the file (it is set and on disk already, or
    /// there is no file); false: it would (call [`Bitmap::set_span`]).
    pub fn set_in_memory(&mut self, r: u64) -> bool {
        if self.file.is_some() && !self.durable_bit(r) {
            return false;
        }
        self.regions.set(r);
        self.touched = true;
        true
    }

    /// Syncs finished so far (for tests and figures).
    pub fn syncs_done(&self) -> u64 {
        self.done_sync
    }

    /// A sweep: how many sweeps in a row, this one included, found no bit set since the one
    /// before (0: one was set).
    pub fn quiet_sweeps(&mut self) -> u32 {
        self.quiet = if std::mem::take(&mut self.touched) {
            0
        } else {
            self.quiet.saturating_add(1)
        };
        self.quiet
    }

    /// Set every region over `size` bytes and persist.
    pub fn set_all(&mut self, size: u64) {
        self.regions.set_all(size);
        self.persist_all(true);
    }

    /// Clear region `r` (persisted lazily, at the next sweep).
    pub fn clear(&mut self, r: u64) {
        self.regions.clear(r);
    }

    /// Clear everything and write the map (no sync: a stale set bit only costs a copy).
    pub fn clear_all(&mut self) {
        if self.regions.is_empty() {
            return;
        }
        self.regions.clear_all();
        self.persist_all(false);
    }

    fn persist_all(&mut self, sync: bool) {
        let bytes: Vec<u8> = self
            .regions
            .words()
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        self.write(&bytes, 0, sync);
    }

    fn write(&mut self, bytes: &[u8], at: u64, sync: bool) {
        let Some(f) = &self.file else { return };
        let r = f
            .write_all_at(bytes, at)
            .and_then(|()| if sync { f.sync_data() } else { Ok(()) });
        if let Err(e) = r {
            self.note_failure(&e);
        }
    }

    fn note_failure(&mut self, e: &std::io::Error) {
        if !self.failed {
            tracing::error!("mirror write-intent bitmap: {e}");
        }
        self.failed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sync_makes_every_mark_before_it_durable_and_a_later_one_waits() {
        let p = std::env::temp_dir().join(format!("ebof-mirror-gc1-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let mut b = Bitmap::open(64 << 30, 1 << 20, Some(&p)).expect("open");
        let a = b.set_span(3..=3).expect("a fresh bit needs a sync");
        let c = b.set_span(40_000..=40_000).expect("on another page");
        assert_eq!(a, c, "marks before a sync share it");
        assert_eq!(b.set_span(3..=3), Some(a), "set, not yet on disk");
        assert!(
            !b.set_in_memory(3),
            "not on disk: the reactor may not skip the sync"
        );
        let job = b.take_sync().expect("pages wait");
        assert!(b.take_sync().is_none(), "one sync at a time");
        // Set while the sync runs: region 3's page copy is taken, so 3 waits for this
        // sync; region 4 (same page, set after the copy) waits for the next one.
        assert_eq!(b.set_span(3..=3), Some(job.number()));
        let later = b.set_span(4..=4).expect("set after the copy");
        assert!(later > job.number());
        job.run().expect("sync");
        b.finish_sync(job.number(), Ok(()));
        assert!(b.durable(a) && !b.durable(later));
        assert!(b.set_in_memory(40_000), "on disk now");
        let job = b.take_sync().expect("region 4's page");
        job.run().expect("sync");
        b.finish_sync(job.number(), Ok(()));
        assert!(b.durable(later));
        assert_eq!(b.set_span(4..=4), None, "on disk: nothing to wait for");
        let back = Bitmap::open(64 << 30, 1 << 20, Some(&p)).expect("reopen");
        assert!([3, 4, 40_000].iter().all(|&r| back.regions().is_set(r)));
        std::fs::remove_file(&p).expect("cleanup");
    }

    #[test]
    fn persists_and_reloads() {
        let p = std::env::temp_dir().join(format!("ebof-mirror-bitmap-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        {
            let mut b = Bitmap::open(1 << 30, 1 << 20, Some(&p)).expect("open");
            b.set(5);
            b.set(700);
            b.clear(5);
        }
        let mut b = Bitmap::open(1 << 30, 1 << 20, Some(&p)).expect("reopen");
        // The clear of 5 was lazy: it may still read as dirty; 700 must.
        assert!(b.regions().is_set(700));
        b.clear_all();
        let b = Bitmap::open(1 << 30, 1 << 20, Some(&p)).expect("reopen");
        assert!(b.regions().is_empty());
        let m = Bitmap::open(1 << 30, 1 << 20, None).expect("memory");
        assert!(m.regions().is_empty());
        std::fs::remove_file(&p).expect("cleanup");
    }
}
