//! `ebof ctl top --hosts`: the same figures per host NQN instead of per namespace (iostat's
//! device table, one line per host), from the per-host counters a box keeps with
//! `[metrics] per_host_io = true` (`GET /v1/stats`' `hosts`). A box without them says so.

use super::render::{self, Column};
use super::top::{BoxTop, IntervalLatency, NsTop};
use ebof_api::{HostStats, NamespaceStats, Stats};
use serde::{Deserialize, Serialize};

/// One host over one interval (every subsystem and namespace it used).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostTop {
    /// The host's NQN (empty: hosts beyond the box's table, counted together).
    pub hostnqn: String,
    /// Reads completed per second.
    pub read_iops: f64,
    /// Writes completed per second.
    pub write_iops: f64,
    /// Bytes read per second.
    pub read_bytes_per_sec: f64,
    /// Bytes written per second.
    pub write_bytes_per_sec: f64,
    /// Average number of the host's commands in the target.
    pub queue_depth: f64,
    /// Reads of the interval (absent when there were none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_latency: Option<IntervalLatency>,
    /// Writes of the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_latency: Option<IntervalLatency>,
    /// Reads and writes failed in the interval.
    pub media_errors: u64,
}

/// A host's counters in the shape of a namespace's, so the namespace arithmetic applies.
fn as_ns(h: &HostStats) -> NamespaceStats {
    NamespaceStats {
        subsystem: h.hostnqn.clone(),
        nsid: 0,
        read_commands: h.read_commands,
        write_commands: h.write_commands,
        bytes_read: h.bytes_read,
        bytes_written: h.bytes_written,
        media_errors: h.media_errors,
        read_latency: h.read_latency.clone(),
        write_latency: h.write_latency.clone(),
        backend_errors: Default::default(),
    }
}

/// The per-host rates between readings `a` and `b`, `secs` apart, busiest first by `by`;
/// `None` when the box counts no I/O per host.
pub fn host_rates(a: &Stats, b: &Stats, secs: f64, by: &str) -> Option<Vec<HostTop>> {
    let now = b.hosts.as_ref()?;
    let before = a.hosts.as_deref().unwrap_or_default();
    let mut l: Vec<NsTop> = now
        .iter()
        .map(|h| {
            let p = before.iter().find(|x| x.hostnqn == h.hostnqn).map(as_ns);
            super::top::ns_rates(p.as_ref(), &as_ns(h), secs.max(1e-3))
        })
        .collect();
    super::top::sort(&mut l, by);
    Some(
        l.into_iter()
            .map(|n| HostTop {
                hostnqn: n.subsystem,
                read_iops: n.read_iops,
                write_iops: n.write_iops,
                read_bytes_per_sec: n.read_bytes_per_sec,
                write_bytes_per_sec: n.write_bytes_per_sec,
                queue_depth: n.queue_depth,
                read_latency: n.read_latency,
                write_latency: n.write_latency,
                media_errors: n.media_errors,
            })
            .collect(),
    )
}

/// The views as text: a line per box, then every host, busiest first.
pub fn text(boxes: &[BoxTop], fleet: bool, interval: f64) -> String {
    let mut out = String::new();
    for b in boxes {
        let who = b
            .name
            .as_deref()
            .map_or(String::new(), |n| format!("{n}: "));
        match (&b.error, &b.hosts) {
            (Some(e), _) => out.push_str(&format!("{who}{e}\n")),
            (None, None) => out.push_str(&format!(
                "{who}per-host I/O is off (set [metrics] per_host_io = true)\n"
            )),
            (None, Some(h)) => out.push_str(&format!(
                "{who}controllers {}, I/O queues {}, hosts {}; rates over {:.1} s\n",
                b.controllers,
                b.io_queues,
                h.len(),
                b.interval_s
            )),
        }
    }
    let rows: Vec<(String, HostTop)> = boxes
        .iter()
        .flat_map(|b| {
            let on = b.name.clone().unwrap_or_default();
            b.hosts
                .iter()
                .flatten()
                .map(move |h| (on.clone(), h.clone()))
        })
        .collect();
    if rows.is_empty() {
        out.push_str(&format!("no host figures (interval {interval} s)\n"));
        return out;
    }
    let mut cols: Vec<Column<(String, HostTop)>> = Vec::new();
    if fleet {
        cols.push(("BOX", &|(b, _)| b.clone()));
    }
    cols.extend_from_slice(HOST_TOP_COLUMNS);
    render::columns(&mut out, "", &rows, &cols);
    out
}

const HOST_TOP_COLUMNS: &[Column<(String, HostTop)>] = &[
    ("HOST", &|(_, h)| {
        if h.hostnqn.is_empty() {
            "(other hosts)".into()
        } else {
            h.hostnqn.clone()
        }
    }),
    ("R/s", &|(_, h)| format!("{:.0}", h.read_iops)),
    ("W/s", &|(_, h)| format!("{:.0}", h.write_iops)),
    ("RMB/s", &|(_, h)| {
        format!("{:.1}", h.read_bytes_per_sec / 1e6)
    }),
    ("WMB/s", &|(_, h)| {
        format!("{:.1}", h.write_bytes_per_sec / 1e6)
    }),
    ("QD", &|(_, h)| format!("{:.2}", h.queue_depth)),
    ("READ p50/p99/p99.9 us", &|(_, h)| {
        super::top::lat(&h.read_latency)
    }),
    ("WRITE p50/p99/p99.9 us", &|(_, h)| {
        super::top::lat(&h.write_latency)
    }),
    ("ERR", &|(_, h)| h.media_errors.to_string()),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn host(nqn: &str, reads: u64) -> HostStats {
        HostStats {
            hostnqn: nqn.into(),
            read_commands: reads,
            write_commands: 0,
            bytes_read: reads * 4096,
            bytes_written: 0,
            media_errors: 0,
            read_latency: None,
            write_latency: None,
        }
    }

    fn stats(hosts: Option<Vec<HostStats>>) -> Stats {
        let mut s: Stats = serde_json::from_value(serde_json::json!({
            "namespaces": [], "controllers": 2, "io_queues": 2,
            "keep_alive_expiries": 0, "admin_disconnects": 0
        }))
        .unwrap();
        s.hosts = hosts;
        s
    }

    #[test]
    fn hosts_are_rated_apart_busiest_first_and_off_says_so() {
        let a = stats(Some(vec![host("h1", 10), host("h2", 10)]));
        let b = stats(Some(vec![host("h1", 20), host("h2", 110), host("h3", 4)]));
        let r = host_rates(&a, &b, 2.0, "iops").unwrap();
        let got: Vec<_> = r
            .iter()
            .map(|h| (h.hostnqn.as_str(), h.read_iops))
            .collect();
        assert_eq!(got, [("h2", 50.0), ("h1", 5.0), ("h3", 2.0)]);
        assert!(host_rates(&a, &stats(None), 1.0, "iops").is_none());
        let mut on = BoxTop {
            name: Some("b1".into()),
            api: None,
            error: None,
            interval_s: 2.0,
            controllers: 2,
            io_queues: 2,
            namespaces: vec![],
            hosts: Some(r),
        };
        let t = text(std::slice::from_ref(&on), true, 2.0);
        assert!(
            t.lines()
                .any(|l| l.starts_with("BOX") && l.contains("HOST")),
            "{t}"
        );
        assert!(
            t.contains("b1: controllers 2, I/O queues 2, hosts 3"),
            "{t}"
        );
        on.hosts = None;
        let t = text(&[on], true, 2.0);
        assert!(t.contains("b1: per-host I/O is off"), "{t}");
    }
}
