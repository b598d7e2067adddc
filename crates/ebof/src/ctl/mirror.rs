//! `ebof ctl ns mirror status|promote`: replicated namespaces (ADR 0028).

use anyhow::Result;
use ebof_api::{Client, MirrorPromoteRequest, MirrorView};

use super::args::NsMirrorCmd;
use super::err;
use ebof_config::format_size;

/// `ebof ctl ns mirror …`.
pub(super) fn run(c: &Client, json: bool, cmd: NsMirrorCmd) -> Result<()> {
    let (what, v) = match cmd {
        NsMirrorCmd::Status { nqn, nsid } => {
            let v = c.mirror_status(&nqn, &nsid).map_err(err)?;
            (format!("namespace {nsid} of {nqn}"), v)
        }
        NsMirrorCmd::Promote { nqn, nsid, force } => {
            let v = c
                .promote_mirror(&nqn, &nsid, &MirrorPromoteRequest { force })
                .map_err(err)?;
            (format!("namespace {nsid} of {nqn} promoted"), v)
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{what}: {}", text(&v));
    }
    Ok(())
}

/// A mirror's state on one line, as `ebof ctl show` and `ebof ctl ns mirror` print it.
pub(super) fn text(m: &MirrorView) -> String {
    let mut s = format!(
        "{} at epoch {}, peer {} {}",
        m.role, m.epoch, m.peer, m.state
    );
    if m.state == "resyncing" {
        s += &format!(
            " ({} of {})",
            format_size(m.resync_done),
            format_size(m.resync_total)
        );
    }
    if m.dirty_regions > 0 {
        s += &format!(
            ", {} dirty regions ({} to copy)",
            m.dirty_regions,
            format_size(m.resync_bytes_left)
        );
    }
    if let Some(ms) = m.lease_ms_left {
        s += &format!(", lease {:.1} s", ms as f64 / 1000.0);
    }
    if m.fenced {
        s += ", FENCED (no write completes until the lease is back)";
    }
    s
}
