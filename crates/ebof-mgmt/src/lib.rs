//! # ebof-mgmt — the control plane of `ebof serve`
//!
//! **What it is**: the server side of the management API (versioned JSON over HTTP/1.1, served
//! by axum on a Unix socket, owner-only, and optionally on TCP with a bearer token: [`server`],
//! [`listen`] for the TCP listeners' HTTPS, connection cap and timeouts), and the one road from
//! configuration to the live target. Its vocabulary, client and token live in `ebof-api`
//! (re-exported at [`api`], [`client`], [`auth`]).
//!
//! - **The road** ([`apply`]): start-up ([`build`]: open the namespaces, build the target, run
//!   the appliers from nothing to the file) and every change through the API
//!   (`running::Running::change`: edit a copy of the running configuration, validate it as the
//!   file is validated, run the same appliers, commit) apply a feature's part of the
//!   configuration in one place.
//! - **The request surface**: [`Control`], one thin method per request, over the feature
//!   modules: subsystems and their hosts ([`subsystems`], [`ops`]), namespaces ([`namespaces`]),
//!   QoS ([`qos`]), per-host masking ([`masking`]), DH-HMAC-CHAP keys ([`hostkeys`],
//!   [`security`]), NVMe listeners ([`listeners`]), ANA states ([`ana`]), discovery referrals and
//!   DIM registrations ([`referrals`]), the mDNS responder that publishes the discovery
//!   listeners (NVMe TP 8009, [`mdns`]), storage pools ([`pools`]), snapshots and clones
//!   ([`snapshots`], kept on disk by [`snapshot_store`]), the Central Discovery Controller
//!   adapter ([`cdc`]); where the API may make or open storage and save, and when two paths are
//!   one file ([`paths`]).
//! - **Reads**: the state and counters ([`ops`]) and the Prometheus exposition ([`metrics`]).
//! - **The box** ([`node`]): [`Node::start`] starts the target, the NVMe servers, the control
//!   plane (given the services it steers at construction, [`Services`]), the management API,
//!   the CDC, the DIM announcer and mDNS in one order; [`Node::stop`] stops them in reverse.
//!
//! **What it is not**: no protocol logic and nothing on the data path. It runs on one thread
//! with its own tokio runtime and reaches the target through `Arc<nvmf_target::Target>` only:
//! reads load the current model snapshot, changes build a new subsystem and swap it in
//! ([`nvmf_target::Target::update_subsystem`]), disconnects flip a controller's dead flag that
//! its queues already check. No reactor waits for it.
//!
//! **Where it sits**: beside the runtime, wired by `ebof serve` (server) and `ebof ctl`
//! (client). See `docs/adr/` ("management API") for the choices.

pub mod ana;
pub mod api;
pub mod apply;
pub mod auth;
pub mod build;
pub mod cdc;
pub mod client;
pub mod control;
mod crypt;
mod handlers;
pub mod hostkeys;
pub mod listen;
pub mod listeners;
mod lookup;
pub mod masking;
pub mod mdns;
pub mod metrics;
pub mod mirror;
pub mod mirror_api;
mod mirror_snap;
pub mod namespaces;
pub mod node;
pub mod ops;
pub mod paths;
pub mod pools;
pub mod qos;
pub mod referrals;
pub mod running;
pub mod security;
pub mod server;
pub mod snapshot_store;
mod snapshot_take;
pub mod snapshots;
pub mod subsystems;
pub mod support;
mod witness_store;

pub use api::{ApiError, State, Stats};
pub use auth::{Token, TokenFileError, load_token_file, read_token_file};
pub use client::{Client, ClientError};
pub use control::{Control, Services};
pub use node::{Node, NodeError, NodeOptions};
pub use server::{
    ApiListener, MgmtServer, ServerError, bind_api_tcp, bind_metrics, bind_socket,
    default_socket_path, start,
};
