//! # nvmf-target — the NVMe-oF controller, transport-agnostic and sans-IO
//!
//! **What it is**: everything a target knows about NVMe commands. The object model
//! ([`Target`] → [`Subsystem`] → [`Namespace`], built once from configuration and shared
//! read-only), controllers ([`Controller`]: registers, features, keep-alive, error log, SMART
//! counters) and the per-connection [`Queue`] state machine that prepares each command
//! (Connect, Property Get/Set, admin, discovery, I/O), tracks its slot through data transfer and
//! execution, and funnels every completion through one place.
//!
//! **What it is not**: it never touches sockets or clocks (time is a parameter) and does not
//! know TCP exists. It does not execute backend I/O on its own schedule: it hands the driver an
//! [`IoRequest`] per slot, and the driver runs [`execute_io`] inline (RAM) or on a worker thread
//! (file/block) and reports back with [`Queue::complete_io`].
//!
//! **Where it sits**: below the runtime driver, above `nvme-spec` and the backends.
//!
//! The command flow through a [`Queue`]:
//! 1. [`Queue::handle_command`] validates and classifies. Commands that need no more data or
//!    backend work complete at once; writes without in-capsule data answer
//!    [`Disposition::NeedData`] (the transport sends R2T with `ttag` = slot); I/O answers
//!    [`Disposition::Execute`].
//! 2. [`Queue::handle_h2c_data`] collects host data into the slot buffer.
//! 3. The driver executes I/O ([`Queue::io_request`] + [`execute_io`]) then calls
//!    [`Queue::complete_io`]; for backends that do not block it calls
//!    [`Queue::execute_inline`] instead, which runs everything but reads: those complete as
//!    "ready to stream".
//! 4. [`Queue::drain_completions`] hands each finished command's CQE and read data to the
//!    transport encoder, and frees the slot: bytes ([`C2hData::Bytes`]), or a backend range
//!    ([`C2hData::Read`]) that the encoder reads straight into its send buffer.

mod admin;
mod controller;
mod discovery;
mod fabrics;
mod io;
mod model;
mod queue;

pub use controller::{Controller, ControllerKind};
pub use io::{IoOp, IoRequest, execute_io};
pub use model::{ListenerInfo, Namespace, Subsystem, Target, TargetLimits};
pub use queue::{C2hData, Disposition, Queue, QueueRole};
