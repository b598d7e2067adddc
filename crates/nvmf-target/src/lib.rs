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
//! (file/block), or submits the operation itself (io_uring) and maps its outcome with
//! [`io_status`], and reports back with [`Queue::complete_io`].
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
//!    ([`C2hData::Read`]) that the encoder reads straight into its send buffer. Once that output
//!    is sent, the driver calls [`Queue::output_sent`].
//!
//! Commands that touch namespace data pass the namespace's [`gate`], which makes fused
//! Compare-and-Write atomic. One that finds it closed is *deferred* ([`Disposition::Parked`]):
//! while [`Queue::has_deferred`], the queue's deadline ([`Queue::poll_timeout`]) is already
//! due, so the driver calls [`Queue::handle_timeout`] (which retries them) every loop
//! iteration and runs the slots it returns like [`Disposition::Execute`] ones.
//!
//! # What a transport driver owes a `Queue` (the duties)
//!
//! A queue never acts on its own; every transport's driver must do the following, and a driver
//! that skips one leaves commands stuck (a deferred command never runs, a Compare-and-Write
//! holds its namespace's gate forever) or queues open (no handshake deadline). The runtime
//! writes them once (`ebof_runtime::duties`: `after_batch`, `io_done`, and for time the pair
//! `poll_timeout`/`handle_timeout`) and both transports (NVMe/TCP `ConnCore`, NVMe/RDMA
//! `RdmaQueueCore`) call that code. Time reaches a queue one way (quinn's shape): the queue
//! never reads the clock; [`Queue::poll_timeout`] is its one deadline and
//! [`Queue::handle_timeout`] does what is due.
//!
//! | when | duty |
//! |---|---|
//! | after each batch of input | run every [`Disposition::Execute`] slot: [`Queue::execute_inline`] if [`IoRequest::may_block`] is false, else offload and later [`Queue::complete_io`] |
//! | after each batch | [`Queue::retry_deferred`] and [`Queue::retry_throttled`], run what they return (this also times out a Compare-and-Write's drain) |
//! | after each batch and each offloaded completion | [`Queue::drain_completions_at`] into the transport's output (latency measured to the driver's clock) |
//! | when output drained so far has been sent | [`Queue::output_sent`] (streamed reads leave the gate) |
//! | when [`Queue::poll_timeout`] comes (deferred commands: every loop round, without sleeping; QoS: the wake-up; otherwise every [`TIMER_PERIOD`]) | [`Queue::handle_timeout`]: deferred and throttled commands, and per period [`Queue::poll_timers`] (keep-alive, AER delivery; `close`: close), then drain completions |
//! | the driver's own deadline, until connected | close after the configured handshake timeout without Fabrics Connect; after Connect, while [`Queue::auth_pending`], after the authentication timeout (30 s) |
//! | each period with no input since the last | [`Queue::release_idle_buffers`] (and the transport's own buffers) |
//! | at close | drop the queue only after offloaded I/O has come back (its buffers belong to the engine until then) |
//!
//! # Layout
//!
//! - the model's leaf data (`model.rs`: [`Namespace`], [`Subsystem`], listeners, limits,
//!   counters), the failure classes (`failure.rs`), controllers (`controller.rs`), [`ana`],
//!   [`reservation`], [`gate`]; on top of them [`Target`] (`target.rs`) with its registries
//!   (controllers, ANA table, auth policy, Central Discovery Controller, referrals, DIM);
//! - [`Queue`] (`queue.rs`) composes typed parts, each owning its fields privately:
//!   `queue/session.rs` (target, connection facts, role and controller, the per-command
//!   checks), `queue/slots.rs` (slot table, completion list, SQHD, the completion funnel),
//!   `queue/ns_cache.rs` (the queue's namespace handles), `queue/fused.rs` (fused pairs,
//!   deferred commands, gate entries held for streamed reads), [`auth`]'s queue state, and
//!   `io.rs`'s SMART counter batch;
//! - the command handlers, `impl Queue` blocks that use those parts: `fabrics.rs`,
//!   `auth_cmd.rs`, `admin.rs` (with the discovery log), `io_cmd.rs`, `resv_cmd.rs`, [`cmds`];
//!   `discovery.rs` holds the discovery types (referrals, DIM, the CDC seam) and entries;
//! - backend I/O and its status mapping: `io.rs` ([`backend_status`]); running a request on
//!   its backend: `cmds.rs` ([`execute_io`], with Compare, Verify, Copy and Compare-and-Write).
//!
//! # Example
//!
//! A target with one subsystem, and a fresh queue receiving Fabrics Connect capsules with no
//! socket in sight: an unknown subsystem is refused with Connect Invalid Parameters pointing at
//! SUBNQN in the Connect data, the right one gets a controller.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Instant;
//! use ebof_backend::BackendSpec;
//! use nvme_spec::fabrics::{ConnectCmd, ConnectData, IATTR_CONNECT_DATA, connect_data_off};
//! use nvme_spec::opcode::{admin, fctype};
//! use nvme_spec::{CommandId, ControllerId, Cqe, QueueId, Sqe, Status};
//! use nvmf_target::{Disposition, Namespace, Queue, QueueRole, Subsystem, Target, TargetLimits};
//!
//! let now = Instant::now();
//! let ram = ebof_backend::open(&BackendSpec::Ram { size: 1 << 20 }).unwrap();
//! let subsystem = Subsystem {
//!     nqn: "nqn.2026-11.io.ebof:doc".into(),
//!     serial: "DOC1".into(),
//!     model: "ebof".into(),
//!     allow_any_host: true,
//!     hosts: vec![],
//!     namespaces: vec![Arc::new(Namespace::new(1, ram, 512, [7; 16]))],
//!     ns_hosts: Default::default(),
//! };
//! let target = Arc::new(Target::new(vec![subsystem], vec![], TargetLimits::default(), now));
//! let mut queue = Queue::new(target, "127.0.0.1:4420".parse().unwrap(), now);
//!
//! // The capsule a host sends on a new admin queue.
//! let connect = |subnqn: &str| {
//!     let mut sqe = Sqe::new(admin::FABRICS, CommandId(1));
//!     sqe.set_fctype(fctype::CONNECT);
//!     sqe.set_sgl_icd(1024);
//!     ConnectCmd { recfmt: 0, qid: QueueId::ADMIN, sqsize: 31, cattr: 0, kato: 0 }
//!         .encode_into(&mut sqe);
//!     let data = ConnectData {
//!         hostid: [1; 16],
//!         cntlid: ControllerId::DYNAMIC,
//!         subnqn: subnqn.into(),
//!         hostnqn: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001".into(),
//!     };
//!     (sqe, data.encode())
//! };
//! let mut completions: Vec<Cqe> = Vec::new();
//!
//! let (sqe, data) = connect("nqn.2026-11.io.ebof:nope");
//! assert_eq!(queue.handle_command(&sqe, &data, now), Disposition::Done);
//! queue.drain_completions(|cqe, _, _| {
//!     completions.push(*cqe);
//!     Ok(())
//! });
//! assert_eq!(completions[0].status, Status::CONNECT_INVALID_PARAM);
//! assert_eq!(completions[0].dw0, u32::from(connect_data_off::SUBNQN) | IATTR_CONNECT_DATA);
//! assert_eq!(queue.role(), QueueRole::Unconnected);
//!
//! let (sqe, data) = connect("nqn.2026-11.io.ebof:doc");
//! assert_eq!(queue.handle_command(&sqe, &data, now), Disposition::Done);
//! queue.drain_completions(|cqe, _, _| {
//!     completions.push(*cqe);
//!     Ok(())
//! });
//! assert!(completions[1].status.is_success());
//! assert_eq!(queue.role(), QueueRole::Admin);
//! assert_eq!(completions[1].dw0 & 0xFFFF, u32::from(queue.controller().unwrap().cntlid.0));
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod admin;
pub mod ana;
pub mod auth;
mod auth_cmd;
pub mod cmds;
mod controller;
mod discovery;
mod error;
mod fabrics;
mod failure;
pub mod gate;
pub mod host_io;
mod io;
mod io_cmd;
pub mod known;
pub mod latency;
pub mod load;
pub mod log_limit;
pub mod mirror;
mod mirror_cmd;
mod model;
pub mod qos;
mod queue;
pub mod reservation;
mod resv_cmd;
mod target;
pub mod witness;
mod witness_cmd;

pub use cmds::execute_io;
pub use controller::{Controller, ControllerKind};
pub use discovery::{
    CURRENT_DISCOVERY_EFLAGS, CentralDiscovery, DIM_STALE, DimDenial, DimRegistration,
    MAX_DIM_DATA, MAX_DIM_ENTRIES, MAX_DIM_PER_HOST, MAX_DIM_PER_PEER, MAX_DIM_RESERVED,
    MAX_DIM_TOTAL, MAX_REFERRALS, Referral, ReferralError,
};
pub use io::{FailureClass, IoOp, IoRequest, NsRef, backend_status, io_status};
pub use mirror::{Admit, MirrorFence, MirrorRole, MirrorSnapshots, PersistFn, PromoteError};
pub use model::{
    ADMIN_QUEUE_MAX, EventCounters, ListenerInfo, ListenerTls, Namespace, Subsystem, TargetLimits,
    UpdateError,
};
pub use queue::{
    C2hData, CAW_DRAIN_TIMEOUT, Disposition, Queue, QueueRole, TIMER_PERIOD, Timeout, Transport,
};
pub use target::Target;
