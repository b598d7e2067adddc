//! The persistent write-intent bitmap: [`Regions`] plus a file whose page is written and
//! fdatasync'd when a bit goes 0→1 (before the data write is issued); clears are lazy (the
//! whole map is rewritten on a sweep). Without a path it is memory only.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::regions::Regions;

const PAGE: usize = 4096;
const WORDS_PER_PAGE: usize = PAGE / 8;

/// Dirty regions, optionally backed by a file.
pub struct Bitmap {
    regions: Regions,
    file: Option<File>,
    /// A persist failed: the file may be stale, so every region counts as dirty at restart
    /// (the state's `synced` is not trusted); logged once.
    failed: bool,
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
                Some(f)
            }
        };
        Ok(Bitmap {
            regions,
            file,
            failed: false,
        })
    }

    /// The regions.
    pub fn regions(&self) -> &Regions {
        &self.regions
    }

    /// Set region `r`; on 0→1 persist its page (fdatasync) before returning.
    pub fn set(&mut self, r: u64) {
        if self.regions.set(r) {
            self.persist_page((r / 64) as usize / WORDS_PER_PAGE, true);
        }
    }

    /// Set region `r` if that needs no write to the file (it is set already, or there is
    /// no file); false: it would (call [`Bitmap::set`]).
    pub fn set_in_memory(&mut self, r: u64) -> bool {
        if self.file.is_some() && !self.regions.is_set(r) {
            return false;
        }
        self.regions.set(r);
        true
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

    fn persist_page(&mut self, page: usize, sync: bool) {
        let words = self.regions.words();
        let lo = (page * WORDS_PER_PAGE).min(words.len());
        let hi = (lo + WORDS_PER_PAGE).min(words.len());
        let bytes: Vec<u8> = words[lo..hi].iter().flat_map(|w| w.to_le_bytes()).collect();
        self.write(&bytes, (lo * 8) as u64, sync);
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
            if !self.failed {
                tracing::error!("mirror write-intent bitmap: {e}");
            }
            self.failed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
