//! The fuzz targets, one module each (see the crate docs).

pub mod auth;
pub mod config_struct;
pub mod config_text;
pub mod csi_authority;
pub mod csi_names;
pub mod dim;
pub mod dim_registry;
pub mod host_queue;
pub mod key_header;
pub mod pdu;
pub mod rdma_wire;
pub mod target_conn;
pub mod tls_psk;
pub mod tls_record;
pub mod vendor_cmds;
pub mod witness_table;
