//! Counters (`GET /v1/stats`).

use serde::{Deserialize, Serialize};

/// `GET /v1/stats`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Counters per namespace.
    pub namespaces: Vec<NamespaceStats>,
    /// Live controllers (I/O and discovery).
    pub controllers: usize,
    /// Connected I/O queues over all controllers.
    pub io_queues: usize,
    /// Controllers torn down because their keep-alive timer expired.
    pub keep_alive_expiries: u64,
    /// Controllers torn down through the management API (`ebof ctl disconnect`).
    pub admin_disconnects: u64,
    /// TCP connections open now (accepted and not yet closed).
    #[serde(default)]
    pub connections_open: u64,
    /// Connections accepted under the connection caps since start (TCP and RDMA).
    #[serde(default)]
    pub connections_accepted: u64,
    /// Refused at accept by the connection caps.
    #[serde(default)]
    pub connections_refused: u64,
    /// Connections terminated for a protocol error.
    #[serde(default)]
    pub protocol_errors: u64,
    /// Connections the host ended with H2CTermReq.
    #[serde(default)]
    pub host_terminations: u64,
    /// Connections closed for missing the ICReq / Connect deadline.
    #[serde(default)]
    pub handshake_timeouts: u64,
    /// Failed DH-HMAC-CHAP authentications (per queue).
    #[serde(default)]
    pub auth_failures: u64,
    /// Connections refused or ended by TLS.
    #[serde(default)]
    pub tls_failures: u64,
    /// I/O per host NQN, with `[metrics] per_host_io = true` (absent when off; an empty
    /// `hostnqn` is the overflow entry of hosts beyond the table's bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<HostStats>>,
}

/// I/O counters of one host (summed over its controllers, subsystems and namespaces; kept
/// across its reconnections; published in batches like [`NamespaceStats`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostStats {
    /// The host's NQN.
    pub hostnqn: String,
    /// Read commands completed.
    pub read_commands: u64,
    /// Write commands completed.
    pub write_commands: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Reads and writes that failed.
    pub media_errors: u64,
    /// Read latency (absent before the first read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_latency: Option<LatencyPercentiles>,
    /// Write latency (absent before the first write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_latency: Option<LatencyPercentiles>,
}

/// Latency percentiles of a namespace's successful reads or writes since the start, in
/// microseconds (upper bounds of the histogram buckets they fall in: at most 25 % high).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyPercentiles {
    /// Commands counted.
    pub count: u64,
    /// Mean latency, µs.
    pub mean_us: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// 99.99th percentile, µs.
    pub p9999_us: f64,
    /// Sum of the latencies counted, µs: the difference of two readings divided by the time
    /// between them is the average number of these commands in the target over that time
    /// (Little's law; iostat's aqu-sz).
    #[serde(default)]
    pub sum_us: f64,
    /// The histogram the percentiles come from: each bucket that counted a command, in
    /// order (the difference of two readings gives the percentiles of the interval).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<LatencyBucket>,
}

/// One bucket of a latency histogram: the commands whose latency was at most `le_us` and
/// above the bound of the bucket before.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyBucket {
    /// Upper bound, µs (the last bucket's is `f64::MAX`).
    pub le_us: f64,
    /// Commands counted in the bucket (not cumulative).
    pub count: u64,
}

/// Counters of one namespace (summed over all controllers, published by queues in batches:
/// at most about a second behind).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NamespaceStats {
    /// NQN of the namespace's subsystem.
    pub subsystem: String,
    /// Namespace ID.
    pub nsid: u32,
    /// Read commands completed.
    pub read_commands: u64,
    /// Write commands completed.
    pub write_commands: u64,
    /// Bytes read by hosts.
    pub bytes_read: u64,
    /// Bytes written by hosts.
    pub bytes_written: u64,
    /// Commands failed with a media error (SMART Media and Data Integrity Errors).
    pub media_errors: u64,
    /// Read latency (absent before the first read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_latency: Option<LatencyPercentiles>,
    /// Write latency (absent before the first write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_latency: Option<LatencyPercentiles>,
    /// Backend failures by class (`no_space`, `media`, …); only classes that happened.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub backend_errors: std::collections::BTreeMap<String, u64>,
}
