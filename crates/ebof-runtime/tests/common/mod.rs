//! Test helpers shared by the integration tests (each test crate uses a subset).
#![allow(dead_code)]

pub mod client;

use ebof_backend::{Backend, BackendError, BackendKind, BackendSpec};
use nvmf_target::{Namespace, Subsystem};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A RAM backend whose reads fail when they touch `bad` (byte range): a medium error the
/// target must report as a command status, not as data.
#[derive(Debug)]
pub struct FailingBackend {
    inner: Arc<dyn Backend>,
    bad: Range<u64>,
    /// Reads that failed.
    pub failures: AtomicU64,
}

impl FailingBackend {
    pub fn new(size: u64, bad: Range<u64>) -> Arc<FailingBackend> {
        Arc::new(FailingBackend {
            inner: ebof_backend::open(&BackendSpec::Ram { size }).unwrap(),
            bad,
            failures: AtomicU64::new(0),
        })
    }
}

impl Backend for FailingBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Ram
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn resize(&self, new_size: u64) -> Result<(), BackendError> {
        self.inner.resize(new_size)
    }
    fn may_block(&self) -> bool {
        false
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        if offset < self.bad.end && offset + buf.len() as u64 > self.bad.start {
            self.failures.fetch_add(1, Ordering::Relaxed);
            return Err(BackendError::Io(std::io::Error::other(
                "injected medium error",
            )));
        }
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, buf: &[u8]) -> Result<(), BackendError> {
        self.inner.write(offset, buf)
    }
    fn flush(&self) -> Result<(), BackendError> {
        self.inner.flush()
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.inner.write_zeroes(offset, len)
    }
    fn deallocate(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.inner.deallocate(offset, len)
    }
    fn allocated_bytes(&self) -> u64 {
        self.inner.allocated_bytes()
    }
}

/// A sparse RAM backend of `size` bytes.
pub fn ram(size: u64) -> Arc<dyn Backend> {
    ebof_backend::open(&BackendSpec::Ram { size }).unwrap()
}

/// A subsystem `nqn` with one namespace (NSID 1, 512-byte blocks) on `backend`; any host may
/// connect unless `hosts` lists the allowed ones.
pub fn subsystem(nqn: &str, backend: Arc<dyn Backend>, hosts: Option<Vec<String>>) -> Subsystem {
    Subsystem {
        nqn: nqn.into(),
        serial: "EBOFTEST".into(),
        model: "ebof-test".into(),
        allow_any_host: hosts.is_none(),
        hosts: hosts.unwrap_or_default(),
        namespaces: vec![Arc::new(Namespace::new(1, backend, 512, [0x11; 16]))],
        ns_hosts: Default::default(),
    }
}

/// A scratch file path under the target directory (a real file system: tmpfs may refuse
/// O_DIRECT), removed on drop.
pub struct Scratch(pub std::path::PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        Scratch(
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
                "ebof-loopback-{tag}-{}-{}.img",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos())
            )),
        )
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A 32 MiB file namespace at `path` (O_DIRECT if `direct`).
pub fn file_backend(path: &std::path::Path, direct: bool) -> Result<Arc<dyn Backend>, String> {
    let spec = BackendSpec::File {
        path: path.to_owned(),
        size: Some(32 << 20),
    };
    ebof_backend::open_with(&spec, ebof_backend::BackendOptions { direct })
        .map_err(|e| e.to_string())
}

/// Both engines, each with an event-driven and a polling reactor.
pub fn engines() -> Vec<(ebof_runtime::EngineConfig, Duration)> {
    let mut v = Vec::new();
    for kind in [
        ebof_runtime::IoEngineKind::IoUring,
        ebof_runtime::IoEngineKind::Threads,
    ] {
        for poll in [Duration::ZERO, Duration::from_micros(50)] {
            v.push((
                ebof_runtime::EngineConfig {
                    kind,
                    io_threads: 2,
                },
                poll,
            ));
        }
    }
    v
}
