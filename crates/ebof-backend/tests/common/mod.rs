//! Fixtures shared by the conformance suite and the model property test: one instance of every
//! backend kind, plus a byte-vector model to compare against.

#![allow(dead_code)] // Each test binary uses a different subset.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use ebof_backend::{Backend, BackendSpec, open};
use tempfile::TempDir;

/// Environment variable naming a scratch block device (e.g. a loop device) to include in the
/// suite. **Its contents are destroyed.** Unset: block devices are not tested.
pub const BLOCK_DEV_ENV: &str = "EBOF_TEST_BLOCK_DEV";

/// One backend under test, with whatever keeps it valid (temporary directory, device lock).
pub struct Fixture {
    pub name: &'static str,
    pub backend: Arc<dyn Backend>,
    /// The backing file or device, if any.
    pub path: Option<PathBuf>,
    _dir: Option<TempDir>,
    _device: Option<MutexGuard<'static, ()>>,
}

/// Serialises tests that share the scratch block device.
static DEVICE: Mutex<()> = Mutex::new(());

pub fn ram(size: u64) -> Fixture {
    Fixture {
        name: "ram",
        backend: open(&BackendSpec::Ram { size }).expect("open RAM backend"),
        path: None,
        _dir: None,
        _device: None,
    }
}

pub fn file(size: u64) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ns.img");
    let backend = open(&BackendSpec::File {
        path: path.clone(),
        size: Some(size),
    })
    .expect("open file backend");
    Fixture {
        name: "file",
        backend,
        path: Some(path),
        _dir: Some(dir),
        _device: None,
    }
}

/// A block backend on an existing regular file.
pub fn block_on_file(size: u64) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("disk.img");
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(size))
        .expect("create backing file");
    let backend = open(&BackendSpec::Block { path: path.clone() }).expect("open block backend");
    Fixture {
        name: "block-on-file",
        backend,
        path: Some(path),
        _dir: Some(dir),
        _device: None,
    }
}

/// The scratch block device from [`BLOCK_DEV_ENV`], zeroed, if configured.
pub fn block_device() -> Option<Fixture> {
    let path = PathBuf::from(std::env::var_os(BLOCK_DEV_ENV)?);
    let guard = DEVICE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let backend = open(&BackendSpec::Block { path: path.clone() }).expect("open block device");
    backend
        .write_zeroes(0, backend.size())
        .expect("zero the scratch device");
    Some(Fixture {
        name: "block-device",
        backend,
        path: Some(path),
        _dir: None,
        _device: Some(guard),
    })
}

/// Every backend kind, each `size` bytes (the scratch device keeps its own size).
pub fn all(size: u64) -> Vec<Fixture> {
    let mut fixtures = vec![ram(size), file(size), block_on_file(size)];
    fixtures.extend(block_device());
    fixtures
}

/// Deterministic non-zero bytes, different for every `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 255) as u8 + 1
        })
        .collect()
}

/// Reads the whole backend.
pub fn read_all(backend: &dyn Backend) -> Vec<u8> {
    let mut buf = vec![0; backend.size() as usize];
    backend.read(0, &mut buf).expect("read whole backend");
    buf
}

/// Index of the first differing byte, for readable failures on megabyte buffers.
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

/// Asserts the backend holds exactly `model`.
#[track_caller]
pub fn assert_matches(fixture: &Fixture, model: &[u8], context: &str) {
    let actual = read_all(&*fixture.backend);
    if let Some(at) = first_difference(&actual, model) {
        let hi = (at + 8).min(model.len()).min(actual.len());
        panic!(
            "{}: {context}: first difference at byte {at}: backend {:?} vs model {:?}",
            fixture.name,
            &actual[at..hi],
            &model[at..hi]
        );
    }
}
