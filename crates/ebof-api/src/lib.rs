//! # ebof-api — the management API as its clients see it
//!
//! **What it is**: the versioned JSON vocabulary of `ebof serve`'s management API ([`routes`],
//! requests and responses by area, [`ApiError`] with its stable [`codes`]), the bearer token
//! and its file ([`token`]), where the management socket is ([`socket`]), and the blocking
//! client that `ebof ctl`, the CSI driver and the tests use ([`Client`]).
//!
//! **What it is not**: the server. It depends on `ebof-config` (one vocabulary of codes and
//! field types for the file and the API) and an HTTP client only, so a client links neither
//! the target, its runtime and backends, nor axum, Prometheus or mDNS. The server side lives in
//! `ebof-mgmt`, which re-exports these items at their old paths (`ebof_mgmt::api`,
//! `ebof_mgmt::client`, `ebof_mgmt::Token`, …).
//!
//! Version 1 (`/v1/…`). Requests and responses are JSON objects; an error is always an
//! [`ApiError`] body with an HTTP status that matches its code. Adding a field to a response
//! is compatible; renaming or removing one needs `/v2`.

pub mod client;
pub mod discovery;
pub mod error;
pub mod hostkeys;
pub mod listener;
pub mod namespace;
pub mod routes;
pub mod socket;
pub mod state;
pub mod stats;
pub mod storage;
pub mod subsystem;
pub mod token;

pub use client::{Client, ClientError, REQUEST_TIMEOUT, SNAPSHOT_TIMEOUT};
pub use discovery::{
    CdcMemberRequest, CdcMemberView, CdcTrusted, CdcView, DimEntryView, DimRegistrationView,
    MdnsRecordView, MdnsRequest, MdnsView, ReferralRequest, Referrals,
};
pub use ebof_config::MirrorFields;
pub use error::{ApiError, codes};
pub use hostkeys::{HostKeyRequest, HostKeyView};
pub use listener::{
    AnaChanged, AnaRequest, AnaView, ListenerRemoveQuery, ListenerRemoved, ListenerRequest,
    ListenerView,
};
pub use namespace::{
    FsSpaceView, MirrorPromoteRequest, MirrorView, NamespaceChanged, NamespaceHostsRequest,
    NamespaceRemoved, NamespaceRequest, NamespaceView, QosRequest, QosView, RegistrantView,
    ReservationView, ResizeRequest,
};
pub use routes::{PREFIX, percent_encode};
pub use socket::{check_socket_dir, default_socket_path};
pub use state::{REDACTED, SaveRequest, Saved, State, SupportView, hex, uuid_string};
pub use stats::{HostStats, LatencyBucket, LatencyPercentiles, NamespaceStats, Stats};
pub use storage::{
    CloneMade, CloneRequest, PoolView, SnapshotDeleted, SnapshotOrigin, SnapshotRequest,
    SnapshotView,
};
pub use subsystem::{
    AllowAnyHostRequest, ControllerView, Disconnected, HostRequest, SubsystemRemoved,
    SubsystemRequest, SubsystemView,
};
pub use token::{Token, TokenError, TokenFileError, load_token_file, read_token_file};
