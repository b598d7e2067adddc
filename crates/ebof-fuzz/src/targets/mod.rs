//! The fuzz targets, one module each (see the crate docs).

pub mod config_struct;
pub mod config_text;
pub mod host_queue;
pub mod pdu;
pub mod target_conn;
