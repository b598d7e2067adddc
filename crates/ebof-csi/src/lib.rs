//! # ebof-csi — a Container Storage Interface driver for a fleet of ebof boxes
//!
//! **What it is**: `ebof csi`, the CSI v1 plugin that lets Kubernetes (or any CSI container
//! orchestrator) provision NVMe-oF volumes on ebof "pool" boxes ([`controller`]) and attach
//! them to nodes with the kernel's NVMe/TCP initiator ([`node`]), over gRPC on a Unix socket
//! ([`server`]). The CSI messages are compiled at build time from `proto/csi.proto` ([`pb`]).
//!
//! **How volumes live on boxes**: one subsystem per volume, its NQN derived from the volume
//! name ([`names`]), holding namespace 1 in one of the box's storage pools. The boxes are the
//! only state: the controller keeps nothing of its own, so it can be killed and restarted at
//! any point; a CreateVolume retried finds what an earlier attempt made, and two controllers
//! racing on one name converge on one volume (see `docs/adr/0023-csi-driver.md`).
//!
//! **What it is not**: no data path. Boxes are reached through their management API
//! ([`ebof_api::Client`] over TCP with a bearer token); nodes through `nvme-cli`, `mount`
//! and the file systems' own tools.

pub mod authority;
pub mod boxes;
pub mod controller;
pub mod identity;
pub mod keys;
pub mod names;
pub mod node;
mod rpc;
pub mod server;
mod sys;

/// The CSI v1 messages and services, generated from `proto/csi.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("csi.v1");
}

/// The driver's default name (`GetPluginInfo`, the Kubernetes CSIDriver object).
pub const DRIVER_NAME: &str = "csi.ebof.io";
/// The topology key the node advertises and volumes are constrained by.
pub const ZONE_KEY: &str = "topology.csi.ebof.io/zone";
