//! The host toolkit subcommands, shaped like nvme-cli: `ebof discover`, `ebof identify` and
//! `ebof perf`. Wiring only: the NVMe/TCP initiator is the `nvmf-host` library, perf's load
//! generator the `ebof-perf` library.

pub(crate) mod common;
mod discover;
mod identify;
mod perf;

pub use discover::{DiscoverArgs, discover};
pub use identify::{IdentifyArgs, identify};
pub use perf::{PerfArgs, perf};
