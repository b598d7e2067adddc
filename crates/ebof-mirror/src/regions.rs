//! Dirty-region set (the in-memory write-intent bitmap) and per-region copy locks (sans-IO).

/// One bit per region of `region_bytes` bytes.
#[derive(Debug, Clone)]
pub struct Regions {
    region_bytes: u64,
    words: Vec<u64>,
    count: u64,
}

impl Regions {
    /// A clean set covering `size` bytes in regions of `region_bytes` (≥ 1).
    pub fn new(size: u64, region_bytes: u64) -> Regions {
        let region_bytes = region_bytes.max(1);
        let n = size.div_ceil(region_bytes);
        Regions {
            region_bytes,
            words: vec![0; n.div_ceil(64) as usize],
            count: 0,
        }
    }

    /// Bytes per region.
    pub fn region_bytes(&self) -> u64 {
        self.region_bytes
    }

    /// Number of regions.
    pub fn len(&self) -> u64 {
        self.words.len() as u64 * 64
    }

    /// True when no region is dirty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Number of dirty regions.
    pub fn dirty(&self) -> u64 {
        self.count
    }

    /// Regions touched by `offset..offset+len` (at least the one holding `offset`).
    pub fn span(&self, offset: u64, len: u64) -> std::ops::RangeInclusive<u64> {
        let first = offset / self.region_bytes;
        let last = offset.saturating_add(len.max(1) - 1) / self.region_bytes;
        first..=last
    }

    /// Mark region `r`; true when it went 0→1.
    pub fn set(&mut self, r: u64) -> bool {
        let (w, b) = ((r / 64) as usize, r % 64);
        let Some(word) = self.words.get_mut(w) else {
            return false;
        };
        let was = *word & (1 << b) != 0;
        *word |= 1 << b;
        if !was {
            self.count += 1;
        }
        !was
    }

    /// Clear region `r`; true when it was set.
    pub fn clear(&mut self, r: u64) -> bool {
        let (w, b) = ((r / 64) as usize, r % 64);
        let Some(word) = self.words.get_mut(w) else {
            return false;
        };
        let was = *word & (1 << b) != 0;
        *word &= !(1 << b);
        if was {
            self.count -= 1;
        }
        was
    }

    /// Is region `r` dirty?
    pub fn is_set(&self, r: u64) -> bool {
        self.words
            .get((r / 64) as usize)
            .is_some_and(|w| w & (1 << (r % 64)) != 0)
    }

    /// Mark every region covering `size` bytes.
    pub fn set_all(&mut self, size: u64) {
        let n = size.div_ceil(self.region_bytes);
        for r in 0..n {
            self.set(r);
        }
    }

    /// Clear every region.
    pub fn clear_all(&mut self) {
        self.words.iter_mut().for_each(|w| *w = 0);
        self.count = 0;
    }

    /// First dirty region at or after `from`.
    pub fn next_dirty(&self, from: u64) -> Option<u64> {
        (from..self.len()).find(|&r| self.is_set(r))
    }

    /// Raw words (for persisting).
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// Load raw words (from a persisted bitmap); extra words are ignored.
    pub fn load_words(&mut self, words: &[u64]) {
        for (d, s) in self.words.iter_mut().zip(words) {
            *d = *s;
        }
        self.count = self.words.iter().map(|w| u64::from(w.count_ones())).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_clear_count_span() {
        let mut r = Regions::new(10 << 20, 1 << 20);
        assert!(r.is_empty());
        assert_eq!(r.span(0, 4096), 0..=0);
        assert_eq!(r.span((1 << 20) - 512, 1024), 0..=1);
        assert!(r.set(3));
        assert!(!r.set(3));
        assert_eq!(r.dirty(), 1);
        assert_eq!(r.next_dirty(0), Some(3));
        assert_eq!(r.next_dirty(4), None);
        assert!(r.clear(3));
        assert!(!r.clear(3));
        r.set_all(10 << 20);
        assert_eq!(r.dirty(), 10);
        let w = r.words().to_vec();
        let mut r2 = Regions::new(10 << 20, 1 << 20);
        r2.load_words(&w);
        assert_eq!(r2.dirty(), 10);
        r.clear_all();
        assert!(r.is_empty());
        assert!(!r.set(10_000));
    }
}
