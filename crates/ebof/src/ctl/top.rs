//! `ebof ctl top` (and `ebof ctl --boxes FILE top`): what is busy now, per namespace.
//!
//! Every figure is a difference of two readings of `GET /v1/stats` divided by the time
//! between them: IOPS and bytes per second from the command and byte counters, latency
//! percentiles of the interval from the difference of the latency histograms, and the queue
//! depth — the average number of the namespace's commands in the target — from the
//! difference of the histograms' latency sums (Little's law, as iostat's aqu-sz). Nothing is
//! added to the data path: queues publish these counters in batches already (so a reading is
//! at most about a second behind; the default interval is 2 s).
//!
//! Per-host figures (`--hosts`): the same arithmetic over the per-host counters a box keeps
//! with `[metrics] per_host_io = true` ([`host_rates`]).

use super::args::TopArgs;
use super::fleet::{Member, gather};
use super::render::{self, Column};
use anyhow::Result;
use ebof_api::{Client, HostStats, LatencyBucket, LatencyPercentiles, NamespaceStats, Stats};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Latency of the commands of one interval, µs (bucket upper bounds: at most 25 % high).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IntervalLatency {
    /// Commands completed in the interval.
    pub count: u64,
    /// Mean, µs.
    pub mean_us: f64,
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
}

/// One namespace over one interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NsTop {
    /// NQN of its subsystem.
    pub subsystem: String,
    /// Namespace ID.
    pub nsid: u32,
    /// Reads completed per second.
    pub read_iops: f64,
    /// Writes completed per second.
    pub write_iops: f64,
    /// Bytes read per second.
    pub read_bytes_per_sec: f64,
    /// Bytes written per second.
    pub write_bytes_per_sec: f64,
    /// Average number of the namespace's commands in the target (reads and writes).
    pub queue_depth: f64,
    /// Reads of the interval (absent when there were none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_latency: Option<IntervalLatency>,
    /// Writes of the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_latency: Option<IntervalLatency>,
    /// Commands failed with a media error in the interval.
    pub media_errors: u64,
}

/// One box over one interval: what `ebof ctl top --json` prints per view (with `--boxes`,
/// a list of them under `boxes`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BoxTop {
    /// The box's name in the boxes file (only with `--boxes`).
    #[serde(rename = "box", default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its management API (only with `--boxes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// Why it has no figures this time (unreachable, or its first reading).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Seconds between the two readings.
    pub interval_s: f64,
    /// Live controllers at the second reading.
    pub controllers: usize,
    /// Connected I/O queues at the second reading.
    pub io_queues: usize,
    /// Namespaces, busiest first.
    pub namespaces: Vec<NsTop>,
    /// With `--hosts`: hosts, busiest first (absent when the box counts no I/O per host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<HostTop>>,
}

/// The rates between readings `a` and `b`, `secs` apart (a namespace new in `b` counts from
/// zero; counters that went back — a restarted box — count as zero).
pub fn rates(a: &Stats, b: &Stats, secs: f64) -> Vec<NsTop> {
    let secs = secs.max(1e-3);
    b.namespaces
        .iter()
        .map(|n| {
            let before = a
                .namespaces
                .iter()
                .find(|p| p.subsystem == n.subsystem && p.nsid == n.nsid);
            ns_rates(before, n, secs)
        })
        .collect()
}

fn ns_rates(a: Option<&NamespaceStats>, b: &NamespaceStats, secs: f64) -> NsTop {
    let d = |f: fn(&NamespaceStats) -> u64| f(b).saturating_sub(a.map_or(0, f));
    let per = |f: fn(&NamespaceStats) -> u64| d(f) as f64 / secs;
    let rl = interval_latency(
        a.and_then(|a| a.read_latency.as_ref()),
        b.read_latency.as_ref(),
    );
    let wl = interval_latency(
        a.and_then(|a| a.write_latency.as_ref()),
        b.write_latency.as_ref(),
    );
    // (A fold from 0.0: the sum of no f64 is -0.0.)
    let busy_us: f64 = [&rl, &wl]
        .iter()
        .filter_map(|l| l.as_ref())
        .map(|l| l.mean_us * l.count as f64)
        .fold(0.0, |a, x| a + x);
    NsTop {
        subsystem: b.subsystem.clone(),
        nsid: b.nsid,
        read_iops: per(|n| n.read_commands),
        write_iops: per(|n| n.write_commands),
        read_bytes_per_sec: per(|n| n.bytes_read),
        write_bytes_per_sec: per(|n| n.bytes_written),
        queue_depth: busy_us / (secs * 1e6),
        read_latency: rl,
        write_latency: wl,
        media_errors: d(|n| n.media_errors),
    }
}

/// The latency of the commands counted between readings `a` and `b` of one histogram.
fn interval_latency(
    a: Option<&LatencyPercentiles>,
    b: Option<&LatencyPercentiles>,
) -> Option<IntervalLatency> {
    let b = b?;
    let empty = Vec::new();
    let before = a.map_or(&empty, |a| &a.buckets);
    let diff: Vec<LatencyBucket> = b
        .buckets
        .iter()
        .map(|x| {
            let was = before
                .iter()
                .find(|p| p.le_us == x.le_us)
                .map_or(0, |p| p.count);
            LatencyBucket {
                le_us: x.le_us,
                count: x.count.saturating_sub(was),
            }
        })
        .collect();
    let count: u64 = diff.iter().map(|x| x.count).sum();
    if count == 0 {
        return None;
    }
    let sum = (b.sum_us - a.map_or(0.0, |a| a.sum_us)).max(0.0);
    let q = |q: f64| {
        let want = ((q * count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        diff.iter()
            .find(|x| {
                seen += x.count;
                seen >= want
            })
            .map_or(f64::MAX, |x| x.le_us)
    };
    Some(IntervalLatency {
        count,
        mean_us: sum / count as f64,
        p50_us: q(0.5),
        p99_us: q(0.99),
        p999_us: q(0.999),
    })
}

/// How busy a namespace is, by `--sort`.
fn load(n: &NsTop, by: &str) -> f64 {
    let p99 = |l: &Option<IntervalLatency>| l.as_ref().map_or(0.0, |l| l.p99_us);
    match by {
        "bw" => n.read_bytes_per_sec + n.write_bytes_per_sec,
        "qd" => n.queue_depth,
        "lat" => p99(&n.read_latency).max(p99(&n.write_latency)),
        _ => n.read_iops + n.write_iops,
    }
}

/// Busiest first (ties: by bytes, then by name).
pub fn sort(l: &mut [NsTop], by: &str) {
    l.sort_by(|a, b| {
        load(b, by)
            .total_cmp(&load(a, by))
            .then(
                (b.read_bytes_per_sec + b.write_bytes_per_sec)
                    .total_cmp(&(a.read_bytes_per_sec + a.write_bytes_per_sec)),
            )
            .then_with(|| (&a.subsystem, a.nsid).cmp(&(&b.subsystem, b.nsid)))
    });
}

/// One reading of a box: when it came and what it said, or why there is none.
type Reading = Result<(Instant, Stats), String>;

/// `ebof ctl top`: `members` is the one box (unnamed), or the fleet of `--boxes`.
pub fn run(
    members: &[Member],
    fleet: bool,
    a: &TopArgs,
    json: bool,
    within: Duration,
) -> Result<()> {
    let interval = Duration::try_from_secs_f64(a.interval)
        .ok()
        .filter(|d| *d >= Duration::from_millis(100))
        .ok_or_else(|| anyhow::anyhow!("--interval {}: at least 0.1 seconds", a.interval))?;
    let views = if a.once {
        1
    } else {
        a.count.unwrap_or(u32::MAX)
    };
    let mut asked = Instant::now();
    let mut prev = read(members, fleet, within, true)?;
    if a.hosts
        && !fleet
        && let Some(Ok((_, s))) = prev.first()
        && s.hosts.is_none()
    {
        anyhow::bail!("per-host I/O is off on this box: set [metrics] per_host_io = true");
    }
    for _ in 0..views {
        // One view per interval, however long the boxes took to answer.
        std::thread::sleep((asked + interval).saturating_duration_since(Instant::now()));
        asked = Instant::now();
        let now = read(members, fleet, within, false)?;
        let mut boxes: Vec<BoxTop> = members
            .iter()
            .zip(prev.iter().zip(&now))
            .map(|(m, (p, n))| box_top(m, fleet, p, n, a))
            .collect();
        if fleet {
            boxes.sort_by(|x, y| {
                let busy = |b: &BoxTop| b.namespaces.iter().map(|n| load(n, &a.sort)).sum::<f64>();
                busy(y).total_cmp(&busy(x))
            });
        }
        if json {
            let line = if fleet {
                serde_json::to_string(&serde_json::json!({ "boxes": boxes }))?
            } else {
                serde_json::to_string(&boxes[0])?
            };
            println!("{line}");
        } else {
            if views == u32::MAX {
                print!("\x1b[H\x1b[2J");
            }
            if a.hosts {
                print!("{}", hosts_text(&boxes, fleet, a.interval));
            } else {
                print!("{}", text(&boxes, fleet, a.interval));
            }
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        prev = now;
    }
    Ok(())
}

/// A reading of every member. For the single box, a failure of the `first` reading is the
/// command's (nothing there to watch); a later one is shown in the view, which goes on (a
/// box restarting comes back).
fn read(members: &[Member], fleet: bool, within: Duration, first: bool) -> Result<Vec<Reading>> {
    if fleet {
        return Ok(gather(members, within, Client::stats));
    }
    let r = members[0].client.stats();
    if first {
        r.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(vec![
        r.map(|s| (Instant::now(), s)).map_err(|e| e.to_string()),
    ])
}

/// The view of one box from readings `p` and `n`.
fn box_top(m: &Member, fleet: bool, p: &Reading, n: &Reading, a: &TopArgs) -> BoxTop {
    let (by, hosts) = (a.sort.as_str(), a.hosts);
    let mut t = BoxTop {
        name: fleet.then(|| m.name.clone()),
        api: fleet.then(|| m.api.clone()),
        error: None,
        interval_s: 0.0,
        controllers: 0,
        io_queues: 0,
        namespaces: Vec::new(),
        hosts: None,
    };
    match (p, n) {
        (_, Err(e)) => t.error = Some(format!("unreachable: {e}")),
        (Err(_), Ok((_, s))) => {
            t.error = Some("first reading: figures in the next view".into());
            t.controllers = s.controllers;
            t.io_queues = s.io_queues;
        }
        (Ok((t0, a)), Ok((t1, b))) => {
            let secs = t1.duration_since(*t0).as_secs_f64();
            t.interval_s = secs;
            t.controllers = b.controllers;
            t.io_queues = b.io_queues;
            t.namespaces = rates(a, b, secs);
            sort(&mut t.namespaces, by);
            if hosts {
                t.hosts = host_rates(a, b, secs, by);
            }
        }
    }
    t
}

/// The views as text: a line per box, then every namespace, busiest first.
pub fn text(boxes: &[BoxTop], fleet: bool, interval: f64) -> String {
    let mut out = String::new();
    for b in boxes {
        let who = b
            .name
            .as_deref()
            .map_or(String::new(), |n| format!("{n}: "));
        match &b.error {
            Some(e) => out.push_str(&format!("{who}{e}\n")),
            None => out.push_str(&format!(
                "{who}controllers {}, I/O queues {}, namespaces {}; rates over {:.1} s\n",
                b.controllers,
                b.io_queues,
                b.namespaces.len(),
                b.interval_s
            )),
        }
    }
    let rows: Vec<(String, NsTop)> = boxes
        .iter()
        .flat_map(|b| {
            let on = b.name.clone().unwrap_or_default();
            b.namespaces.iter().map(move |n| (on.clone(), n.clone()))
        })
        .collect();
    if rows.is_empty() {
        out.push_str(&format!("no namespace figures (interval {interval} s)\n"));
        return out;
    }
    let mut cols: Vec<Column<(String, NsTop)>> = Vec::new();
    if fleet {
        cols.push(("BOX", &|(b, _)| b.clone()));
    }
    cols.extend_from_slice(NS_TOP_COLUMNS);
    render::columns(&mut out, "", &rows, &cols);
    out
}

const NS_TOP_COLUMNS: &[Column<(String, NsTop)>] = &[
    ("SUBSYSTEM", &|(_, n)| n.subsystem.clone()),
    ("NSID", &|(_, n)| n.nsid.to_string()),
    ("R/s", &|(_, n)| format!("{:.0}", n.read_iops)),
    ("W/s", &|(_, n)| format!("{:.0}", n.write_iops)),
    ("RMB/s", &|(_, n)| {
        format!("{:.1}", n.read_bytes_per_sec / 1e6)
    }),
    ("WMB/s", &|(_, n)| {
        format!("{:.1}", n.write_bytes_per_sec / 1e6)
    }),
    ("QD", &|(_, n)| format!("{:.2}", n.queue_depth)),
    ("READ p50/p99/p99.9 us", &|(_, n)| lat(&n.read_latency)),
    ("WRITE p50/p99/p99.9 us", &|(_, n)| lat(&n.write_latency)),
    ("ERR", &|(_, n)| n.media_errors.to_string()),
];

fn lat(l: &Option<IntervalLatency>) -> String {
    l.as_ref().map_or_else(
        || "-".into(),
        |l| format!("{:.0}/{:.0}/{:.0}", l.p50_us, l.p99_us, l.p999_us),
    )
}

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
            ns_rates(p.as_ref(), &as_ns(h), secs.max(1e-3))
        })
        .collect();
    sort(&mut l, by);
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

/// The `--hosts` views as text: a line per box, then every host, busiest first.
pub fn hosts_text(boxes: &[BoxTop], fleet: bool, interval: f64) -> String {
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
    ("READ p50/p99/p99.9 us", &|(_, h)| lat(&h.read_latency)),
    ("WRITE p50/p99/p99.9 us", &|(_, h)| lat(&h.write_latency)),
    ("ERR", &|(_, h)| h.media_errors.to_string()),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn lp(buckets: &[(f64, u64)], sum_us: f64) -> LatencyPercentiles {
        LatencyPercentiles {
            count: buckets.iter().map(|b| b.1).sum(),
            mean_us: 0.0,
            p50_us: 0.0,
            p99_us: 0.0,
            p999_us: 0.0,
            p9999_us: 0.0,
            sum_us,
            buckets: buckets
                .iter()
                .map(|&(le_us, count)| LatencyBucket { le_us, count })
                .collect(),
        }
    }

    fn ns(nsid: u32, reads: u64, bytes: u64, rl: Option<LatencyPercentiles>) -> NamespaceStats {
        NamespaceStats {
            subsystem: "nqn.x".into(),
            nsid,
            read_commands: reads,
            write_commands: 0,
            bytes_read: bytes,
            bytes_written: 0,
            media_errors: 0,
            read_latency: rl,
            write_latency: None,
            backend_errors: Default::default(),
        }
    }

    fn stats(n: Vec<NamespaceStats>) -> Stats {
        serde_json::from_value(serde_json::json!({
            "namespaces": n, "controllers": 1, "io_queues": 2,
            "keep_alive_expiries": 0, "admin_disconnects": 0
        }))
        .unwrap()
    }

    #[test]
    fn rates_latency_and_queue_depth_are_of_the_interval() {
        // Before: 100 slow reads (1 ms). During: 1000 reads of 10 µs, 10 of 100 µs.
        let a = stats(vec![ns(
            1,
            100,
            409_600,
            Some(lp(&[(1000.0, 100)], 100_000.0)),
        )]);
        let b = stats(vec![
            ns(
                1,
                1110,
                409_600 + 1010 * 4096,
                Some(lp(
                    &[(10.0, 1000), (100.0, 10), (1000.0, 100)],
                    100_000.0 + 11_000.0,
                )),
            ),
            ns(2, 5, 0, None),
        ]);
        let r = rates(&a, &b, 2.0);
        assert_eq!(r[0].read_iops, 505.0);
        assert_eq!(r[0].read_bytes_per_sec, 1010.0 * 4096.0 / 2.0);
        let l = r[0].read_latency.as_ref().unwrap();
        assert_eq!(
            (l.count, l.p50_us, l.p99_us, l.p999_us),
            (1010, 10.0, 10.0, 100.0)
        );
        // 11 ms of commands in the target over 2 s.
        assert!(
            (r[0].queue_depth - 0.0055).abs() < 1e-9,
            "{}",
            r[0].queue_depth
        );
        assert_eq!(r[1].read_iops, 2.5, "a new namespace counts from zero");
        // A restarted box: counters went back.
        assert_eq!(rates(&b, &a, 1.0)[0].read_iops, 0.0);
    }

    #[test]
    fn busiest_first_and_the_fleet_table_has_a_box_column() {
        let a = stats(vec![ns(1, 0, 0, None), ns(2, 0, 0, None)]);
        let b = stats(vec![ns(1, 10, 0, None), ns(2, 50, 0, None)]);
        let mut r = rates(&a, &b, 1.0);
        sort(&mut r, "iops");
        assert_eq!(r[0].nsid, 2);
        let boxes = vec![
            BoxTop {
                name: Some("b1".into()),
                api: Some("127.0.0.1:1".into()),
                error: None,
                interval_s: 1.0,
                controllers: 1,
                io_queues: 2,
                namespaces: r,
                hosts: None,
            },
            BoxTop {
                name: Some("b2".into()),
                api: None,
                error: Some("unreachable: refused".into()),
                interval_s: 0.0,
                controllers: 0,
                io_queues: 0,
                namespaces: vec![],
                hosts: None,
            },
        ];
        let t = text(&boxes, true, 1.0);
        assert!(t.contains("b2: unreachable: refused"), "{t}");
        let head = t.lines().find(|l| l.starts_with("BOX")).unwrap();
        assert!(head.contains("R/s") && head.contains("QD"), "{t}");
        let v: BoxTop = serde_json::from_str(&serde_json::to_string(&boxes[0]).unwrap()).unwrap();
        assert_eq!(v, boxes[0]);
    }
}

#[cfg(test)]
mod host_tests {
    use super::*;

    fn host(nqn: &str, reads: u64) -> ebof_api::HostStats {
        ebof_api::HostStats {
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

    fn stats(hosts: Option<Vec<ebof_api::HostStats>>) -> Stats {
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
        let t = hosts_text(std::slice::from_ref(&on), true, 2.0);
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
        let t = hosts_text(&[on], true, 2.0);
        assert!(t.contains("b1: per-host I/O is off"), "{t}");
    }
}
