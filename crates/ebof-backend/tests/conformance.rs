//! The conformance suite: every backend (RAM, file, block on a regular file, and a scratch block
//! device when `EBOF_TEST_BLOCK_DEV` names one) must behave identically.

mod common;

use std::fs;
use std::sync::Arc;
use std::thread;

use common::{Fixture, all, assert_matches, pattern};
use ebof_backend::{Backend, BackendError, BackendKind, BackendSpec, open};

/// Not a multiple of the page size, so the last page is partial.
const SIZE: u64 = (1 << 20) + 1536;
/// Largest page size Linux uses (arm64/ppc64 64 KiB pages); boundaries of smaller pages are
/// multiples of it too.
const PAGE_CANDIDATES: [u64; 3] = [4096, 16384, 65536];

/// Writes `data` at `offset` to the backend and the model.
fn write(fixture: &Fixture, model: &mut [u8], offset: u64, data: &[u8]) {
    fixture
        .backend
        .write(offset, data)
        .unwrap_or_else(|e| panic!("{}: write {offset}+{}: {e}", fixture.name, data.len()));
    model[offset as usize..offset as usize + data.len()].copy_from_slice(data);
}

/// Fills the whole backend (and model) with a non-zero pattern.
fn fill(fixture: &Fixture, model: &mut Vec<u8>, seed: u64) {
    *model = pattern(seed, fixture.backend.size() as usize);
    fixture.backend.write(0, model).expect("fill");
}

/// Ranges that start and end on, just before and just after page and sector boundaries.
fn boundary_ranges(size: u64) -> Vec<(u64, u64)> {
    let mut ranges = vec![
        (0, 1),
        (0, 512),
        (1, 510),
        (511, 2),
        (100, 200),
        (0, size),
        (size - 1, 1),
        (size - 512, 512),
        (size - 4096 - 3, 4096 + 3),
    ];
    for page in PAGE_CANDIDATES {
        ranges.extend([
            (page - 1, 2),
            (page - 10, 20),
            (page, page),
            (page - 512, page + 1024),
            (page + 1, page - 2),
            (page + 7, 3 * page + 5),
            (2 * page - 3, 3),
            (page, 2 * page),
        ]);
    }
    ranges.retain(|(offset, len)| offset + len <= size);
    ranges
}

#[test]
fn identity_and_flush() {
    for f in all(SIZE) {
        let b = &f.backend;
        if f.name != "block-device" {
            assert_eq!(b.size(), SIZE, "{}", f.name);
        }
        let expected = match f.name {
            "ram" => BackendKind::Ram,
            "file" => BackendKind::File,
            _ => BackendKind::Block,
        };
        assert_eq!(b.kind(), expected, "{}", f.name);
        assert_eq!(b.may_block(), expected != BackendKind::Ram, "{}", f.name);
        b.flush()
            .unwrap_or_else(|e| panic!("{}: flush: {e}", f.name));
        let _ = b.allocated_bytes();
        assert!(!format!("{b:?}").is_empty());
    }
}

#[test]
fn never_written_areas_read_zero() {
    for f in all(SIZE) {
        let size = f.backend.size();
        let mut model = vec![0; size as usize];
        assert_matches(&f, &model, "fresh backend");
        write(&f, &mut model, 4096 + 100, &pattern(1, 300));
        write(&f, &mut model, size - 1000, &pattern(2, 10));
        assert_matches(&f, &model, "after two small writes");
        let mut buf = vec![0xff; 8192];
        f.backend.read(3 * 65536, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "{}", f.name);
    }
}

#[test]
fn round_trips_at_various_offsets_and_lengths() {
    for f in all(SIZE) {
        let size = f.backend.size();
        let mut model = vec![0; size as usize];
        for (i, (offset, len)) in boundary_ranges(size).into_iter().enumerate() {
            let data = pattern(i as u64 + 10, len as usize);
            write(&f, &mut model, offset, &data);
            let mut back = vec![0; len as usize];
            f.backend.read(offset, &mut back).unwrap();
            assert!(back == data, "{}: read back {offset}+{len}", f.name);
            // Reads that straddle the written range see the neighbours too.
            let lo = offset.saturating_sub(7);
            let hi = (offset + len + 7).min(size);
            let mut around = vec![0; (hi - lo) as usize];
            f.backend.read(lo, &mut around).unwrap();
            assert!(
                around[..] == model[lo as usize..hi as usize],
                "{}: read around {offset}+{len}",
                f.name
            );
        }
        assert_matches(&f, &model, "after boundary writes");
    }
}

fn zeroes_exactly_the_range(op: &str, zero: impl Fn(&dyn Backend, u64, u64)) {
    for f in all(SIZE) {
        let size = f.backend.size();
        let mut model = Vec::new();
        for (i, (offset, len)) in boundary_ranges(size).into_iter().enumerate() {
            // Refill every few ranges so each one starts from non-zero data around it.
            if i % 4 == 0 {
                fill(&f, &mut model, i as u64 + 100);
            }
            zero(&*f.backend, offset, len);
            model[offset as usize..(offset + len) as usize].fill(0);
            assert_matches(&f, &model, &format!("after {op} {offset}+{len}"));
        }
        // Zeroing an area that was never written, then writing next to it.
        fill(&f, &mut model, 7);
        zero(&*f.backend, 0, size);
        model.fill(0);
        zero(&*f.backend, 8192, 4096);
        write(&f, &mut model, 8192 - 1, &[5, 5]);
        assert_matches(&f, &model, &format!("after {op} of a zero area"));
        // Zero length is a no-op, also at the very end.
        zero(&*f.backend, 0, 0);
        zero(&*f.backend, size, 0);
    }
}

#[test]
fn write_zeroes_zeroes_exactly_the_range() {
    zeroes_exactly_the_range("write_zeroes", |b, offset, len| {
        b.write_zeroes(offset, len)
            .unwrap_or_else(|e| panic!("write_zeroes {offset}+{len}: {e}"))
    });
}

#[test]
fn deallocate_zeroes_exactly_the_range() {
    zeroes_exactly_the_range("deallocate", |b, offset, len| {
        b.deallocate(offset, len)
            .unwrap_or_else(|e| panic!("deallocate {offset}+{len}: {e}"))
    });
}

#[test]
fn deallocate_releases_space() {
    for f in all(SIZE) {
        if f.name == "block-device" {
            continue; // A device's own provisioning is not visible.
        }
        let b = &f.backend;
        b.write(0, &pattern(3, SIZE as usize)).unwrap();
        b.flush().unwrap();
        let full = b.allocated_bytes();
        assert!(full >= SIZE, "{}: allocated {full} after filling", f.name);
        b.deallocate(0, SIZE).unwrap();
        let after = b.allocated_bytes();
        // File systems may keep a block or so (metadata); RAM releases everything.
        assert!(
            after <= 64 * 1024,
            "{}: allocated {after} after deallocate",
            f.name
        );
        if f.name == "ram" {
            assert_eq!(after, 0);
        }
    }
}

#[test]
fn out_of_range_is_an_error_not_a_panic() {
    for f in all(SIZE) {
        let b = &f.backend;
        let size = b.size();
        let mut model = Vec::new();
        fill(&f, &mut model, 42);
        let mut buf = [0u8; 16];
        let cases: [(u64, u64); 7] = [
            (size, 1),
            (size - 1, 2),
            (size + 1, 0),
            (u64::MAX, 1),
            (u64::MAX, 0),
            (u64::MAX - 3, 16),
            (1, u64::MAX),
        ];
        for (offset, len) in cases {
            let check = |result: Result<(), BackendError>, op: &str, len: u64| match result {
                Err(BackendError::OutOfRange {
                    offset: o,
                    len: l,
                    size: s,
                }) => assert_eq!((o, l, s), (offset, len, size), "{}: {op}", f.name),
                other => panic!("{}: {op} {offset}+{len}: {other:?}", f.name),
            };
            if len <= buf.len() as u64 {
                let n = len as usize;
                check(b.read(offset, &mut buf[..n]), "read", len);
                check(b.write(offset, &buf[..n]), "write", len);
            }
            check(b.write_zeroes(offset, len), "write_zeroes", len);
            check(b.deallocate(offset, len), "deallocate", len);
        }
        // A write that is only partly in range changes nothing.
        assert!(b.write(size - 8, &[0; 16]).is_err());
        assert_matches(&f, &model, "after rejected requests");
        // Exactly at the end is fine.
        b.read(size, &mut []).unwrap();
        b.write(size, &[]).unwrap();
        b.read(size - 16, &mut buf).unwrap();
        assert_eq!(buf[..], model[size as usize - 16..]);
    }
}

#[test]
fn concurrent_disjoint_writers_and_readers() {
    const THREADS: u64 = 8;
    for f in all(SIZE) {
        let size = f.backend.size();
        // Stripes deliberately not page aligned: neighbours share pages.
        let stripe = size / THREADS - 3;
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let backend = Arc::clone(&f.backend);
                let name = f.name;
                thread::spawn(move || {
                    let base = t * stripe;
                    let mut model = vec![0u8; stripe as usize];
                    for i in 0..60u64 {
                        let seed = t * 1000 + i;
                        let offset = (seed * 7919) % stripe;
                        let len = ((seed * 104_729) % (stripe - offset)).max(1);
                        let (lo, hi) = (offset as usize, (offset + len) as usize);
                        match i % 5 {
                            3 => {
                                backend.write_zeroes(base + offset, len).unwrap();
                                model[lo..hi].fill(0);
                            }
                            4 => {
                                backend.deallocate(base + offset, len).unwrap();
                                model[lo..hi].fill(0);
                            }
                            _ => {
                                let data = pattern(seed, len as usize);
                                backend.write(base + offset, &data).unwrap();
                                model[lo..hi].copy_from_slice(&data);
                            }
                        }
                        let mut back = vec![0; stripe as usize];
                        backend.read(base, &mut back).unwrap();
                        assert!(back == model, "{name}: thread {t} iteration {i}");
                    }
                    model
                })
            })
            .collect();
        let mut model = vec![0u8; size as usize];
        for (t, handle) in handles.into_iter().enumerate() {
            let stripe_model = handle.join().expect("worker panicked");
            let base = t * stripe as usize;
            model[base..base + stripe as usize].copy_from_slice(&stripe_model);
        }
        assert_matches(&f, &model, "after concurrent stripes");
    }
}

/// `size` rounded down to a multiple of 4096, which every logical block size divides.
fn block_multiple(size: u64) -> u64 {
    size / 4096 * 4096
}

#[test]
fn resize_keeps_data_below_the_smaller_size() {
    for f in all(SIZE) {
        let b = &f.backend;
        let full = b.size();
        let mut model = Vec::new();
        fill(&f, &mut model, 11);
        let half = block_multiple(full / 2);
        b.resize(half)
            .unwrap_or_else(|e| panic!("{}: shrink: {e}", f.name));
        assert_eq!(b.size(), half, "{}", f.name);
        assert!(
            matches!(b.read(half, &mut [0]), Err(BackendError::OutOfRange { .. })),
            "{}",
            f.name
        );
        assert_matches(&f, &model[..half as usize], "after shrinking");
        // Writes below the new end still work.
        write(&f, &mut model, half - 4096, &pattern(12, 4096));
        b.resize(full)
            .unwrap_or_else(|e| panic!("{}: grow: {e}", f.name));
        assert_eq!(b.size(), full, "{}", f.name);
        // RAM and file discard what a shrink cut off; a block backend exposed a prefix of the
        // device and shows the rest again as it is.
        if b.kind() != BackendKind::Block {
            model[half as usize..].fill(0);
        }
        assert_matches(&f, &model, "after growing back");
    }
}

#[test]
fn resize_refuses_bad_sizes_and_changes_nothing() {
    for f in all(SIZE) {
        let b = &f.backend;
        let full = b.size();
        let mut model = Vec::new();
        fill(&f, &mut model, 13);
        for bad in [0, 1, 511, 1000, full - 1] {
            match b.resize(bad) {
                Err(BackendError::InvalidSize { size, .. }) => assert_eq!(size, bad, "{}", f.name),
                other => panic!("{}: resize to {bad}: {other:?}", f.name),
            }
            assert_eq!(b.size(), full, "{}", f.name);
        }
        if b.kind() == BackendKind::Block {
            // Never past the device.
            let err = b.resize(full + 4096).unwrap_err();
            assert!(
                matches!(err, BackendError::ResizeBeyondLimit { limit, .. } if limit == full),
                "{}: {err:?}",
                f.name
            );
        }
        assert_eq!(b.size(), full, "{}", f.name);
        assert_matches(&f, &model, "after refused resizes");
    }
}

/// Writers and readers on stripes below the smallest size, and operations past it, run a
/// bounded number of times while the main thread resizes in a loop: nothing crashes, operations past the end fail only as
/// the crate documents, and every stripe holds what its writer last wrote.
#[test]
fn concurrent_io_while_resizing() {
    const THREADS: u64 = 3;
    const ITERATIONS: u64 = 300;
    const MIN_RESIZES: u64 = 100;
    for f in all(SIZE) {
        let full = f.backend.size();
        let min = block_multiple(full / 2);
        let stripe = min / THREADS;
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let backend = Arc::clone(&f.backend);
                let name = f.name;
                thread::spawn(move || {
                    let base = t * stripe;
                    let mut model = vec![0u8; stripe as usize];
                    for i in 1..=ITERATIONS {
                        let data = pattern(t * 100_000 + i, stripe as usize);
                        backend.write(base, &data).unwrap();
                        model.copy_from_slice(&data);
                        let mut back = vec![0; stripe as usize];
                        backend.read(base, &mut back).unwrap();
                        assert!(back == model, "{name}: stripe {t} iteration {i}");
                        // Past the smallest size: in or out of range from one moment to the
                        // next.
                        let far = min + (i * 4099 + t * 977) % (full - min);
                        let len = 4096.min(full - far);
                        let result = match i % 3 {
                            0 => backend.write(far, &data[..len as usize]),
                            1 => backend.deallocate(far, len),
                            _ => backend.read(far, &mut vec![0; len as usize]),
                        };
                        match result {
                            Ok(()) | Err(BackendError::OutOfRange { .. }) => {}
                            // A read validated just before a file was truncated under it.
                            Err(BackendError::Io(e))
                                if e.kind() == std::io::ErrorKind::UnexpectedEof
                                    && backend.kind() == BackendKind::File => {}
                            Err(e) => panic!("{name}: {far}+{len}: {e}"),
                        }
                    }
                    model
                })
            })
            .collect();
        // Resize for as long as any worker runs (workers run a bounded number of iterations).
        let mut i = 0u64;
        while i < MIN_RESIZES || !handles.iter().all(|h| h.is_finished()) {
            let new = min + block_multiple((i * 8 * 4096) % (full - min + 4096));
            let new = new.min(full);
            f.backend
                .resize(new)
                .unwrap_or_else(|e| panic!("{}: resize to {new}: {e}", f.name));
            assert_eq!(f.backend.size(), new, "{}", f.name);
            i += 1;
        }
        let mut models = Vec::new();
        for handle in handles {
            models.extend(handle.join().expect("worker panicked"));
        }
        let mut head = vec![0; models.len()];
        f.backend.read(0, &mut head).unwrap();
        assert!(head == models, "{}: stripes after resizing", f.name);
    }
}

#[test]
fn file_data_persists_across_drop_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("persist.img");
    let spec = BackendSpec::File {
        path: path.clone(),
        size: Some(SIZE),
    };
    let data = pattern(77, 10_000);
    {
        let b = open(&spec).unwrap();
        b.write(12_345, &data).unwrap();
        b.deallocate(0, 4096).unwrap();
        b.flush().unwrap();
    }
    for spec in [
        spec.clone(),
        BackendSpec::File {
            path: path.clone(),
            size: None,
        },
        BackendSpec::Block { path: path.clone() },
    ] {
        let b = open(&spec).unwrap();
        assert_eq!(b.size(), SIZE, "{spec:?}");
        let mut back = vec![0; data.len()];
        b.read(12_345, &mut back).unwrap();
        assert!(back == data, "{spec:?}");
        let mut head = vec![1; 4096];
        b.read(0, &mut head).unwrap();
        assert!(head.iter().all(|&x| x == 0), "{spec:?}");
    }
}

#[test]
fn new_file_is_sparse_and_smaller_file_is_extended() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grow.img");
    let big = 1 << 30;
    let b = open(&BackendSpec::File {
        path: path.clone(),
        size: Some(big),
    })
    .unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), big);
    assert!(b.allocated_bytes() < 1 << 20, "{}", b.allocated_bytes());
    drop(b);

    let path = dir.path().join("small.img");
    let data = pattern(5, 3000);
    fs::write(&path, &data).unwrap();
    let b = open(&BackendSpec::File {
        path: path.clone(),
        size: Some(8192),
    })
    .unwrap();
    assert_eq!(b.size(), 8192);
    let mut back = vec![0xff; 8192];
    b.read(0, &mut back).unwrap();
    assert_eq!(back[..3000], data[..]);
    assert!(back[3000..].iter().all(|&x| x == 0));
    // Same size again: opened as-is.
    drop(b);
    let b = open(&BackendSpec::File {
        path,
        size: Some(8192),
    })
    .unwrap();
    assert_eq!(b.size(), 8192);
}

#[test]
fn ram_is_sparse() {
    let size = 16 << 30;
    let b = open(&BackendSpec::Ram { size }).unwrap();
    assert_eq!(b.allocated_bytes(), 0);
    b.write(size - 512, &[1; 512]).unwrap();
    b.write(size / 2, &[1; 512]).unwrap();
    assert!(b.allocated_bytes() <= 2 * 65536);
    let mut buf = [1u8; 512];
    b.read(size / 3, &mut buf).unwrap();
    assert_eq!(buf, [0; 512]);
}

/// Asserts that `result` failed and its message names `path`; returns the error.
#[track_caller]
fn expect_error_naming(
    result: Result<Arc<dyn Backend>, BackendError>,
    path: &std::path::Path,
) -> BackendError {
    match result {
        Ok(b) => panic!("opened {b:?}, expected an error"),
        Err(err) => {
            let text = err.to_string();
            assert!(
                text.contains(&*path.to_string_lossy()),
                "message {text:?} does not name {path:?}"
            );
            err
        }
    }
}

#[test]
fn open_errors_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing_dir = dir.path().join("no-such-dir").join("ns.img");
    for spec in [
        BackendSpec::File {
            path: missing_dir.clone(),
            size: Some(SIZE),
        },
        BackendSpec::File {
            path: missing_dir.clone(),
            size: None,
        },
        BackendSpec::Block {
            path: missing_dir.clone(),
        },
    ] {
        let err = expect_error_naming(open(&spec), &missing_dir);
        assert!(
            matches!(&err, BackendError::Open { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
            "{spec:?}: {err:?}"
        );
    }
    assert!(!missing_dir.parent().unwrap().exists());

    // A directory.
    let path = dir.path().to_owned();
    for spec in [
        BackendSpec::File {
            path: path.clone(),
            size: Some(SIZE),
        },
        BackendSpec::File {
            path: path.clone(),
            size: None,
        },
        BackendSpec::Block { path: path.clone() },
    ] {
        expect_error_naming(open(&spec), &path);
    }

    // A character device is neither a file nor a block device.
    let null = std::path::Path::new("/dev/null");
    for spec in [
        BackendSpec::File {
            path: null.to_owned(),
            size: None,
        },
        BackendSpec::File {
            path: null.to_owned(),
            size: Some(SIZE),
        },
        BackendSpec::Block {
            path: null.to_owned(),
        },
    ] {
        let err = expect_error_naming(open(&spec), null);
        assert!(
            err.to_string().contains("character device"),
            "{spec:?}: {err}"
        );
    }

    // Empty existing file without a size; zero sizes.
    let empty = dir.path().join("empty.img");
    fs::write(&empty, b"").unwrap();
    for spec in [
        BackendSpec::File {
            path: empty.clone(),
            size: None,
        },
        BackendSpec::Block {
            path: empty.clone(),
        },
    ] {
        expect_error_naming(open(&spec), &empty);
    }
    let zero = dir.path().join("zero.img");
    assert!(matches!(
        open(&BackendSpec::File {
            path: zero.clone(),
            size: Some(0)
        }),
        Err(BackendError::InvalidSize { size: 0, .. })
    ));
    assert!(!zero.exists(), "a rejected spec must not create the file");
    for size in [0, 1, 511, 4097] {
        assert!(
            matches!(
                open(&BackendSpec::Ram { size }),
                Err(BackendError::InvalidSize { .. })
            ),
            "RAM size {size}"
        );
    }
}

#[test]
fn existing_larger_file_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.img");
    let data = pattern(9, 10_000);
    fs::write(&path, &data).unwrap();
    let before = fs::metadata(&path).unwrap();
    let err = expect_error_naming(
        open(&BackendSpec::File {
            path: path.clone(),
            size: Some(8192),
        }),
        &path,
    );
    assert!(
        matches!(
            err,
            BackendError::FileTooLarge {
                actual: 10_000,
                requested: 8192,
                ..
            }
        ),
        "{err:?}"
    );
    let after = fs::metadata(&path).unwrap();
    assert_eq!(after.len(), 10_000);
    assert_eq!(after.modified().unwrap(), before.modified().unwrap());
    assert_eq!(fs::read(&path).unwrap(), data);
}

#[test]
fn block_spec_on_a_regular_file_uses_its_size_and_never_creates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("exact.img");
    fs::write(&path, pattern(4, 5000)).unwrap();
    let b = open(&BackendSpec::Block { path: path.clone() }).unwrap();
    assert_eq!(b.size(), 5000);
    assert_eq!(b.kind(), BackendKind::Block);

    let missing = dir.path().join("missing.img");
    expect_error_naming(
        open(&BackendSpec::Block {
            path: missing.clone(),
        }),
        &missing,
    );
    assert!(!missing.exists());
}
