//! # ebof-mgmt — the control plane of `ebof serve`
//!
//! **What it is**: the management API (versioned JSON over HTTP/1.1, served by axum on a Unix
//! socket, owner-only, and optionally on TCP with a bearer token: [`auth`]), its typed vocabulary ([`api`]: requests, responses, [`api::ApiError`]
//! with stable codes and field paths), what each request does to the target ([`ops`]), the
//! Prometheus exposition ([`metrics`]), the server ([`server`]) and the blocking client that
//! `ebof ctl` uses ([`client`]); the mDNS responder that publishes the discovery listeners
//! (NVMe TP 8009, [`mdns`]), kept in step with listener and mode changes by [`Control`];
//! storage pools, the directories namespaces are provisioned in by name and size ([`pools`]);
//! where the API may make or open storage and save, and when two paths are one file
//! ([`paths`]); the TCP listeners' HTTPS, connection cap and timeouts ([`listen`]).
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
pub mod auth;
pub mod build;
pub mod cdc;
pub mod client;
pub mod control;
pub mod hostkeys;
pub mod listen;
pub mod masking;
pub mod mdns;
pub mod metrics;
pub mod ops;
pub mod paths;
pub mod pools;
pub mod qos;
pub mod referrals;
pub mod security;
pub mod server;
pub mod snapshots;

pub use api::{ApiError, State, Stats};
pub use auth::{Token, TokenFileError, load_token_file, read_token_file};
pub use client::{Client, ClientError};
pub use control::Control;
pub use server::{
    ApiListener, MgmtServer, ServerError, bind_api_tcp, bind_metrics, bind_socket,
    default_socket_path, start,
};
