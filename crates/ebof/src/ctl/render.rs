//! `ebof ctl`'s text output: the API's answers as tables and sentences (with `--json` the
//! answers are printed as they are instead).
//!
//! Every table is a list of columns, each a heading with the cell it shows for one item
//! ([`Column`]), drawn by [`columns`]: adding a column is one line.

use ebof_api::{
    CdcMemberView, CdcView, ControllerView, DimRegistrationView, FsSpaceView, LatencyPercentiles,
    ListenerView, MdnsRecordView, MdnsView, NamespaceStats, NamespaceView, PoolView, QosView,
    SnapshotView, State, Stats,
};
use ebof_config::format_size;

/// One column of a table: its heading, and its cell for one item.
pub(super) type Column<'a, T> = (&'static str, &'a dyn Fn(&T) -> String);

/// `items` as a table of `cols` (a heading line, then a line per item) after `indent`.
pub(super) fn columns<T>(out: &mut String, indent: &str, items: &[T], cols: &[Column<T>]) {
    let mut rows = vec![cols.iter().map(|c| c.0.to_string()).collect()];
    rows.extend(
        items
            .iter()
            .map(|i| cols.iter().map(|c| (c.1)(i)).collect()),
    );
    table(out, indent, &rows);
}

/// Columns padded to their widest cell, two spaces apart.
pub(super) fn table(out: &mut String, indent: &str, rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = indent.to_string();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// A namespace's QoS limits as `ebof ctl show` and `ebof ctl ns qos` print them.
pub fn qos_text(q: Option<&QosView>) -> String {
    let Some(q) = q else {
        return "unlimited".to_string();
    };
    let set: Vec<String> = q
        .limits
        .fields()
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let limits = if set.is_empty() {
        "unlimited".to_string()
    } else {
        set.join(", ")
    };
    if q.waited == 0 {
        return limits;
    }
    format!(
        "{limits} ({} commands waited, {:.3} s in all)",
        q.waited,
        q.wait_us as f64 / 1e6
    )
}

/// A namespace's host list in words.
pub fn ns_hosts_text(hosts: Option<&[String]>) -> String {
    match hosts {
        None => "every host of the subsystem".to_string(),
        Some([]) => "no host".to_string(),
        Some(h) => h.join(", "),
    }
}

/// The USED column: what a thin namespace holds, with its share of the size (`-` for a
/// namespace that is not thin: it always holds its whole size).
fn used_text(n: &NamespaceView) -> String {
    if !n.thin {
        return "-".into();
    }
    let pct = if n.size == 0 {
        0.0
    } else {
        n.allocated_bytes.min(n.size) as f64 * 100.0 / n.size as f64
    };
    format!("{} ({pct:.0}%)", approx_size(n.allocated_bytes))
}

/// `bytes` to three significant figures with a binary suffix (`33.5M`, `912K`, `0`): for
/// figures that are not configured sizes (allocation, free space).
fn approx_size(bytes: u64) -> String {
    // A round figure as the configuration writes it (`1G`, `256M`), else rounded.
    let exact = format_size(bytes);
    if exact.len() <= 5 {
        return exact;
    }
    const UNITS: [&str; 7] = ["", "K", "M", "G", "T", "P", "E"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        bytes.to_string()
    } else if v < 10.0 {
        format!("{v:.2}{}", UNITS[u])
    } else if v < 100.0 {
        format!("{v:.1}{}", UNITS[u])
    } else {
        format!("{v:.0}{}", UNITS[u])
    }
}

/// A file system under file namespaces: who is on it, its space, and what they hold.
struct FsGroup {
    fs: FsSpaceView,
    who: Vec<String>,
    provisioned: u64,
    used: u64,
}

/// One line per file system under file namespaces: its free space, shared by every namespace
/// on it (a thin namespace can grow only into that).
fn filesystems_text(s: &State, out: &mut String) {
    let mut groups: Vec<FsGroup> = Vec::new();
    for sub in &s.subsystems {
        for n in &sub.namespaces {
            let Some(fs) = n.filesystem else { continue };
            let who = format!("{}:{}", sub.nqn, n.nsid);
            // One row per file system (some report no id: their size tells them apart).
            match groups
                .iter_mut()
                .find(|g| (g.fs.fsid, g.fs.total_bytes) == (fs.fsid, fs.total_bytes))
            {
                Some(g) => {
                    g.who.push(who);
                    g.provisioned += n.size;
                    g.used += n.allocated_bytes;
                }
                None => groups.push(FsGroup {
                    fs,
                    who: vec![who],
                    provisioned: n.size,
                    used: n.allocated_bytes,
                }),
            }
        }
    }
    if groups.is_empty() {
        return;
    }
    out.push_str("file systems\n");
    columns(
        out,
        "  ",
        &groups,
        &[
            ("NAMESPACES", &|g| g.who.join(", ")),
            ("FS SIZE", &|g| approx_size(g.fs.total_bytes)),
            ("FS FREE", &|g| approx_size(g.fs.available_bytes)),
            ("PROVISIONED", &|g| approx_size(g.provisioned)),
            ("USED", &|g| approx_size(g.used)),
        ],
    );
}

/// `ebof ctl show`: subsystems with their namespaces, file systems, pools, listeners, ANA,
/// mDNS, CDC, controllers, referrals, DIM registrations and snapshots.
pub fn show_text(s: &State) -> String {
    let mut out = String::new();
    for sub in &s.subsystems {
        let hosts = if sub.allow_any_host {
            "any".to_string()
        } else if sub.hosts.is_empty() {
            "none".to_string()
        } else {
            sub.hosts.join(", ")
        };
        out.push_str(&format!(
            "subsystem {}  serial {}  model {}\n  hosts: {hosts}\n",
            sub.nqn, sub.serial, sub.model
        ));
        namespaces_text(&sub.namespaces, &mut out);
    }
    filesystems_text(s, &mut out);
    if !s.pools.is_empty() {
        out.push_str(&pools_text(&s.pools));
    }
    out.push_str("listeners\n");
    columns(&mut out, "  ", &s.listeners, LISTENER_COLUMNS);
    if s.ana.is_empty() {
        out.push_str("ana: every group optimized on every listener\n");
    } else {
        out.push_str("ana (groups not listed are optimized)\n");
        columns(
            &mut out,
            "  ",
            &s.ana,
            &[
                ("LISTENER", &|a| a.listener.clone()),
                ("GROUP", &|a| a.group.to_string()),
                ("STATE", &|a| a.state.clone()),
            ],
        );
    }
    if let Some(m) = &s.mdns {
        out.push_str(&mdns_text(m));
    }
    if let Some(v) = &s.cdc {
        out.push_str(&cdc_text(v));
    }
    if s.controllers.is_empty() {
        out.push_str("controllers: none connected\n");
    } else {
        out.push_str("controllers\n");
        columns(&mut out, "  ", &s.controllers, CONTROLLER_COLUMNS);
    }
    out.push_str(&referrals_text(&s.referrals));
    out.push_str(&registrations_text(&s.registrations));
    if !s.snapshots.is_empty() {
        out.push_str(&snapshots_text(&s.snapshots));
    }
    out
}

/// The namespaces of one subsystem in `ebof ctl show`: a table, then a line for each that is
/// masked, has QoS limits or a reservation.
fn namespaces_text(l: &[NamespaceView], out: &mut String) {
    columns(out, "  ", l, NAMESPACE_COLUMNS);
    for n in l {
        if let Some(h) = &n.hosts {
            out.push_str(&format!(
                "  nsid {} masked: visible to {}\n",
                n.nsid,
                ns_hosts_text(Some(h))
            ));
        }
    }
    for n in l {
        if let Some(m) = &n.mirror {
            out.push_str(&format!(
                "  nsid {} mirror: {}\n",
                n.nsid,
                super::mirror::text(m)
            ));
        }
    }
    for n in l.iter().filter(|n| n.encrypted) {
        out.push_str(&format!(
            "  nsid {} encrypted: aes-xts-plain64 (ADR 0029)\n",
            n.nsid
        ));
    }
    for n in l {
        if n.qos.is_some() {
            out.push_str(&format!(
                "  nsid {} qos: {}\n",
                n.nsid,
                qos_text(n.qos.as_ref())
            ));
        }
    }
    for n in l {
        if let Some(r) = &n.reservation {
            out.push_str(&format!(
                "  nsid {} reservation: type {}{}, generation {}, ptpl {}, registrants {}\n",
                n.nsid,
                r.rtype,
                r.holder
                    .as_ref()
                    .map(|h| format!(" held by {h}"))
                    .unwrap_or_default(),
                r.generation,
                if r.ptpl { "on" } else { "off" },
                r.registrants
                    .iter()
                    .map(|g| format!("{} key {}", g.hostid, g.key))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
}

const NAMESPACE_COLUMNS: &[Column<NamespaceView>] = &[
    ("NSID", &|n| n.nsid.to_string()),
    ("BACKEND", &|n| n.backend.clone()),
    ("SIZE", &|n| format_size(n.size)),
    ("USED", &used_text),
    ("BLOCK", &|n| n.block_size.to_string()),
    ("ANAGRP", &|n| n.ana_group.to_string()),
    ("UUID", &|n| n.uuid.clone()),
    ("PATH", &|n| n.path.clone().unwrap_or_default()),
];

const LISTENER_COLUMNS: &[Column<ListenerView>] = &[
    ("ADDRESS", &|l| l.address.clone()),
    ("PORTID", &|l| {
        if l.discovery {
            "-".to_string()
        } else {
            l.portid.to_string()
        }
    }),
    ("KIND", &|l| {
        if l.discovery { "discovery" } else { "nvme" }.to_string()
    }),
    ("TRANSPORT", &|l| l.transport.clone()),
    ("TLS", &|l| l.tls.clone()),
];

const CONTROLLER_COLUMNS: &[Column<ControllerView>] = &[
    ("CNTLID", &|c| c.cntlid.to_string()),
    ("KIND", &|c| c.kind.clone()),
    ("SUBSYSTEM", &|c| c.subsystem.clone()),
    ("KATO", &|c| {
        c.kato_ms
            .map_or_else(|| "off".to_string(), |ms| format!("{ms}ms"))
    }),
    ("IOQ", &|c| c.io_queues.to_string()),
    ("LISTENER", &|c| {
        c.listener.clone().unwrap_or_else(|| "-".into())
    }),
    ("HOSTNQN", &|c| c.hostnqn.clone()),
];

/// The storage pools as a table (`ebof ctl pool list`, `ebof ctl show`).
pub fn pools_text(l: &[PoolView]) -> String {
    if l.is_empty() {
        return "pools: none\n".into();
    }
    let mut out = "pools\n".to_string();
    columns(&mut out, "  ", l, POOL_COLUMNS);
    out
}

const POOL_COLUMNS: &[Column<PoolView>] = &[
    ("NAME", &|p| p.name.clone()),
    ("DIRECTORY", &|p| p.directory.clone()),
    ("CAPACITY", &|p| match p.size_limit {
        Some(_) => approx_size(p.capacity_bytes),
        None => format!("{} (fs)", approx_size(p.capacity_bytes)),
    }),
    ("PROVISIONED", &|p| approx_size(p.provisioned_bytes)),
    ("USED", &|p| approx_size(p.used_bytes)),
    ("FREE", &|p| approx_size(p.free_bytes)),
    ("NAMESPACES", &|p| p.namespaces.to_string()),
    ("ENCRYPTED", &|p| {
        if p.encrypted { "yes" } else { "no" }.into()
    }),
];

/// The snapshots as a table (`ebof ctl snapshot list`, `ebof ctl show`).
pub fn snapshots_text(l: &[SnapshotView]) -> String {
    if l.is_empty() {
        return "snapshots: none\n".into();
    }
    let mut out = "snapshots\n".to_string();
    columns(&mut out, "  ", l, SNAPSHOT_COLUMNS);
    out
}

const SNAPSHOT_COLUMNS: &[Column<SnapshotView>] = &[
    ("NAME", &|v| v.name.clone()),
    ("SUBSYSTEM", &|v| v.origin.subsystem.clone()),
    ("NSID", &|v| v.origin.nsid.to_string()),
    ("UUID", &|v| v.origin.uuid.clone()),
    ("SIZE", &|v| format_size(v.size)),
    ("BLOCK", &|v| v.block_size.to_string()),
    ("CREATED", &|v| utc_text(v.created)),
    ("METHOD", &|v| v.method.clone()),
    ("PATH", &|v| v.path.clone()),
];

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC); the number itself if it is
/// past what a date can hold.
pub fn utc_text(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map_or_else(
            || secs.to_string(),
            |d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        )
}

/// The referrals, one line each.
pub fn referrals_text(r: &[String]) -> String {
    if r.is_empty() {
        return "referrals: none\n".into();
    }
    let mut out = "referrals (discovery log SUBTYPE 1)\n".to_string();
    for a in r {
        out.push_str(&format!("  {a}\n"));
    }
    out
}

/// The DIM registrations as a table.
pub fn registrations_text(r: &[DimRegistrationView]) -> String {
    if r.is_empty() {
        return "dim registrations: none\n".into();
    }
    let mut out = "dim registrations\n".to_string();
    columns(&mut out, "  ", r, REGISTRATION_COLUMNS);
    out
}

const REGISTRATION_COLUMNS: &[Column<DimRegistrationView>] = &[
    ("HOSTNQN", &|g| g.host.clone()),
    ("TYPE", &|g| g.entity_type.clone()),
    ("ENTITY", &|g| {
        if g.entity == g.host {
            "=".to_string()
        } else {
            g.entity.clone()
        }
    }),
    ("NAME", &|g| match &g.symname {
        Some(s) => format!("{} ({s})", g.name),
        None => g.name.clone(),
    }),
    ("VERSION", &|g| g.version.clone()),
    ("ADDRESSES", &registration_addresses),
    ("AGE", &|g| format!("{}s", g.updated_secs_ago)),
];

/// A registration's entries: `TRANSPORT ADDRESS[:SERVICE]`, comma-separated.
fn registration_addresses(g: &DimRegistrationView) -> String {
    let addrs: Vec<String> = g
        .entries
        .iter()
        .map(|e| {
            let a = if e.service.is_empty() {
                e.address.clone()
            } else {
                format!("{}:{}", e.address, e.service)
            };
            format!("{} {a}", e.transport)
        })
        .collect();
    addrs.join(", ")
}

/// The mDNS section of `ebof ctl show` (and `ebof ctl mdns`).
pub fn mdns_text(m: &MdnsView) -> String {
    let mut out = format!("mdns: {}", m.mode);
    if let Some(e) = &m.error {
        out.push_str(&format!("  error: {e}"));
    }
    out.push('\n');
    if m.records.is_empty() {
        return out;
    }
    columns(&mut out, "  ", &m.records, MDNS_COLUMNS);
    for r in m.records.iter().filter(|r| r.reason.is_some()) {
        out.push_str(&format!(
            "  {} {}: {}\n",
            r.listener,
            r.state,
            r.reason.as_deref().unwrap_or_default()
        ));
    }
    out
}

const MDNS_COLUMNS: &[Column<MdnsRecordView>] = &[
    ("LISTENER", &|r| r.listener.clone()),
    ("STATE", &|r| r.state.clone()),
    ("SERVICE", &|r| r.service.clone()),
    ("INSTANCE", &|r| r.instance.clone()),
    ("ADDRESSES", &|r| {
        if r.addresses.is_empty() {
            "-".into()
        } else {
            r.addresses.join(",")
        }
    }),
    ("TXT", &|r| r.txt.join(" ")),
];

/// The Central Discovery Controller's members as `ebof ctl cdc list` and `show` print them.
pub fn cdc_text(v: &CdcView) -> String {
    let mut out = format!(
        "central discovery controller (host NQN {}, {} host view(s))\n",
        v.hostnqn, v.hosts
    );
    if v.members.is_empty() {
        out.push_str("  no members\n");
        return out;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let cols: &[Column<CdcMemberView>] = &[
        ("MEMBER", &|m| m.address.clone()),
        ("STATE", &|m| {
            if m.connected { "connected" } else { "down" }.to_string()
        }),
        ("ENTRIES", &|m| m.entries.to_string()),
        ("LAST CHANGE", &|m| {
            m.last_change.map_or_else(
                || "-".to_string(),
                |t| format!("{}s ago", now.saturating_sub(t)),
            )
        }),
        ("LAST ERROR", &|m| {
            m.last_error.clone().unwrap_or_else(|| "-".into())
        }),
    ];
    columns(&mut out, "  ", &v.members, cols);
    out
}

/// `ebof ctl stats`: a line per namespace, then the target's counters and any backend errors.
pub fn stats_text(s: &Stats) -> String {
    let mut out = String::new();
    columns(&mut out, "", &s.namespaces, STATS_COLUMNS);
    out.push_str(&format!(
        "controllers {}  io queues {}  connections {} open ({} refused)  protocol errors {}  \
         keep-alive expiries {}  disconnects {}\n",
        s.controllers,
        s.io_queues,
        s.connections_open,
        s.connections_refused,
        s.protocol_errors,
        s.keep_alive_expiries,
        s.admin_disconnects
    ));
    for n in s.namespaces.iter().filter(|n| !n.backend_errors.is_empty()) {
        let e: Vec<String> = n
            .backend_errors
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out.push_str(&format!(
            "backend errors {} nsid {}: {}\n",
            n.subsystem,
            n.nsid,
            e.join(", ")
        ));
    }
    out
}

/// Latency percentiles as `p50/p99/p99.99` in microseconds (`-` when there are none).
fn latency_text(l: &Option<LatencyPercentiles>) -> String {
    l.as_ref().map_or_else(
        || "-".to_string(),
        |l| format!("{:.0}/{:.0}/{:.0}", l.p50_us, l.p99_us, l.p9999_us),
    )
}

const STATS_COLUMNS: &[Column<NamespaceStats>] = &[
    ("SUBSYSTEM", &|n| n.subsystem.clone()),
    ("NSID", &|n| n.nsid.to_string()),
    ("READS", &|n| n.read_commands.to_string()),
    ("WRITES", &|n| n.write_commands.to_string()),
    ("READ", &|n| format_size(n.bytes_read)),
    ("WRITTEN", &|n| format_size(n.bytes_written)),
    ("ERRORS", &|n| n.media_errors.to_string()),
    ("READ p50/p99/p99.99 us", &|n| latency_text(&n.read_latency)),
    ("WRITE p50/p99/p99.99 us", &|n| {
        latency_text(&n.write_latency)
    }),
];

#[cfg(test)]
mod tests {
    #[test]
    fn utc_text_is_iso_8601() {
        assert_eq!(super::utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc_text(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::utc_text(1_790_000_000), "2026-09-21T14:13:20Z");
    }
}
