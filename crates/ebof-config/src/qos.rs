//! Per-namespace QoS limits (`[[subsystems.namespaces]] qos = { … }`, ADR 0020):
//!
//! ```toml
//! [[subsystems.namespaces]]
//! backend = "ram"
//! size = "1G"
//! qos = { iops = 20000, mbps = 400, read_iops = 0, write_iops = 5000, read_mbps = 0, write_mbps = 100 }
//! ```
//!
//! Every key is optional; 0 or absent is unlimited; MB are 10^6 bytes. The limits hold for the
//! namespace as a whole (every queue, core and host); commands over them wait in the target.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::error::{ConfigError, codes};

/// Highest IOPS limit accepted.
pub const QOS_IOPS_MAX: u64 = 1_000_000_000_000;
/// Highest MB/s limit accepted (10^6 bytes per MB).
pub const QOS_MBPS_MAX: u64 = 1_000_000_000;

/// A namespace's QoS limits; 0 is unlimited. The default: no limit. The management API shows
/// them in its namespace views as they are (`ebof_api::QosView`; in JSON an absent key is 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Qos {
    /// Commands per second, reads and writes together.
    pub iops: u64,
    /// Megabytes (10^6 bytes) per second, both directions together.
    pub mbps: u64,
    /// Read commands per second (Read, Compare, Verify).
    pub read_iops: u64,
    /// Write commands per second (Write, Write Zeroes, Dataset Management, Copy, Flush).
    pub write_iops: u64,
    /// Megabytes read per second.
    pub read_mbps: u64,
    /// Megabytes written per second.
    pub write_mbps: u64,
}

impl Qos {
    /// True when no limit is set.
    pub fn is_unlimited(&self) -> bool {
        *self == Qos::default()
    }

    /// The keys and values, in the file's order.
    pub fn fields(&self) -> [(&'static str, u64); 6] {
        [
            ("iops", self.iops),
            ("mbps", self.mbps),
            ("read_iops", self.read_iops),
            ("write_iops", self.write_iops),
            ("read_mbps", self.read_mbps),
            ("write_mbps", self.write_mbps),
        ]
    }

    /// The limits set, as the file writes them: `{ iops = 1000, mbps = 50 }` (`{}` when none).
    pub fn inline_table(&self) -> String {
        let set: Vec<String> = self
            .fields()
            .iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k} = {v}"))
            .collect();
        if set.is_empty() {
            "{}".to_string()
        } else {
            format!("{{ {} }}", set.join(", "))
        }
    }
}

/// `qos = { … }` as written: every key optional, loosely typed (checked by [`QosFields::check`]).
/// The management API's `PUT …/qos` body is this type too (`ebof_api::QosRequest`): one set
/// of keys, checked one way, for the file and the API. In JSON an absent key is left out.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct QosFields {
    /// Commands per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// MB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mbps: Option<i64>,
    /// Read commands per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_iops: Option<i64>,
    /// Write commands per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_iops: Option<i64>,
    /// MB/s read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_mbps: Option<i64>,
    /// MB/s written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_mbps: Option<i64>,
}

/// Check one limit: `path` is the field's path (`…qos.iops`); code `invalid-qos`.
pub fn check_qos_value(v: i64, path: &str, max: u64) -> Result<u64, ConfigError> {
    let field = path.rsplit('.').next().unwrap_or(path);
    u64::try_from(v).ok().filter(|v| *v <= max).ok_or_else(|| {
        ConfigError::new(
            codes::INVALID_QOS,
            path,
            format!("{field} = {v} is out of range (0 = unlimited, up to {max})"),
        )
    })
}

impl QosFields {
    /// The limits, each checked (errors name `{path}.{key}`, or `{key}` for an empty path).
    pub fn check(&self, path: &str) -> Result<Qos, ConfigError> {
        let one = |v: Option<i64>, key: &str, max: u64| {
            let field = if path.is_empty() {
                key.to_string()
            } else {
                format!("{path}.{key}")
            };
            v.map_or(Ok(0), |v| check_qos_value(v, &field, max))
        };
        Ok(Qos {
            iops: one(self.iops, "iops", QOS_IOPS_MAX)?,
            mbps: one(self.mbps, "mbps", QOS_MBPS_MAX)?,
            read_iops: one(self.read_iops, "read_iops", QOS_IOPS_MAX)?,
            write_iops: one(self.write_iops, "write_iops", QOS_IOPS_MAX)?,
            read_mbps: one(self.read_mbps, "read_mbps", QOS_MBPS_MAX)?,
            write_mbps: one(self.write_mbps, "write_mbps", QOS_MBPS_MAX)?,
        })
    }
}

/// Write `qos = { … }` for a namespace with limits (nothing for an unlimited one).
pub(crate) fn emit(out: &mut String, q: &Qos) {
    if !q.is_unlimited() {
        let _ = writeln!(out, "qos = {}", q.inline_table());
    }
}
