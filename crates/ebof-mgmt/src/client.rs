//! The blocking client of the management API (what `ebof ctl` uses). It lives in the
//! `ebof-api` crate and is re-exported here at its old path.

pub use ebof_api::client::{Client, ClientError, REQUEST_TIMEOUT, SNAPSHOT_TIMEOUT};
