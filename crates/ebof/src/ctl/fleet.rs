//! `ebof ctl --boxes FILE …`: every box of a fleet, as the CSI driver's boxes file lists them
//! (`ebof_csi::boxes`: its parser and checks, one format for both), asked at the same time,
//! each within a timeout so that one dead box does not stall the view; `show` here, `top` in
//! [`super::top`], `dump` in [`super::dump`].

use super::render::{self, Column};
use anyhow::Result;
use ebof_api::{Client, ClientError, ControllerView, NamespaceView, State};
use serde::Serialize;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a box may take to answer by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

/// One box of the fleet (or the single box of `ebof ctl`, unnamed).
#[derive(Clone, Debug)]
pub struct Member {
    /// Its name in the file (default its API address); empty for the single box.
    pub name: String,
    /// Its management API address.
    pub api: String,
    /// Its topology zone, if the file gives one.
    pub zone: Option<String>,
    /// The client with its token.
    pub client: Client,
    /// Its token file (with `--boxes`).
    pub token_file: Option<std::path::PathBuf>,
}

/// The boxes of the boxes file at `path`.
pub fn load(path: &Path) -> Result<Vec<Member>> {
    let boxes = ebof_csi::boxes::load(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(boxes
        .into_iter()
        .map(|b| Member {
            name: b.name,
            api: b.api,
            zone: b.zone,
            client: b.client,
            token_file: Some(b.tokens.path().to_path_buf()),
        })
        .collect())
}

/// The timeout `--box-timeout SECS` asks for.
pub fn timeout(secs: Option<f64>) -> Result<Duration> {
    match secs {
        None => Ok(DEFAULT_TIMEOUT),
        Some(s) => Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| anyhow::anyhow!("--box-timeout {s}: a number of seconds above 0")),
    }
}

/// `f` asked of every member at once: each answer with when it came, or why there is none
/// (an error, or no answer within `within`), in the members' order. A box that does not
/// answer in time is left to its own request timeout on a thread of its own.
pub fn gather<T: Send + 'static>(
    members: &[Member],
    within: Duration,
    f: fn(&Client) -> Result<T, ClientError>,
) -> Vec<Result<(Instant, T), String>> {
    let (tx, rx) = mpsc::channel();
    for (i, m) in members.iter().enumerate() {
        let tx = tx.clone();
        let c = m.client.clone();
        std::thread::spawn(move || {
            let r = f(&c).map(|v| (Instant::now(), v));
            let _ = tx.send((i, r.map_err(|e| e.to_string())));
        });
    }
    drop(tx);
    let mut out: Vec<Option<Result<(Instant, T), String>>> = members.iter().map(|_| None).collect();
    let deadline = Instant::now() + within;
    let mut left = members.len();
    while left > 0 {
        let wait = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok((i, r)) => {
                out[i] = Some(r);
                left -= 1;
            }
            Err(_) => break,
        }
    }
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(format!("no answer within {within:?}"))))
        .collect()
}

/// One box in `ebof ctl --boxes FILE show --json`.
#[derive(Debug, Serialize)]
pub struct BoxState {
    /// Its name.
    #[serde(rename = "box")]
    pub name: String,
    /// Its management API.
    pub api: String,
    /// Its zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Why it could not be asked (then `state` is absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What it serves (`ebof ctl show --json` of the box).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
}

/// `ebof ctl --boxes FILE show`.
pub fn show(members: &[Member], within: Duration, json: bool) -> Result<()> {
    let answers = gather(members, within, Client::state);
    let boxes: Vec<BoxState> = members
        .iter()
        .zip(answers)
        .map(|(m, r)| {
            let (state, error) = match r {
                Ok((_, s)) => (Some(s), None),
                Err(e) => (None, Some(e)),
            };
            BoxState {
                name: m.name.clone(),
                api: m.api.clone(),
                zone: m.zone.clone(),
                error,
                state,
            }
        })
        .collect();
    if json {
        let v = serde_json::json!({ "boxes": boxes });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", show_text(&boxes));
    }
    Ok(())
}

/// A namespace or controller with the box it is on.
type OnBox<'a, T> = (&'a str, &'a str, &'a T);

/// The fleet as tables: the boxes, then every namespace and every controller with its box.
pub fn show_text(boxes: &[BoxState]) -> String {
    let mut out = String::new();
    let cols: &[Column<BoxState>] = &[
        ("BOX", &|b| b.name.clone()),
        ("API", &|b| b.api.clone()),
        ("ZONE", &|b| b.zone.clone().unwrap_or_else(|| "-".into())),
        ("STATUS", &|b| match &b.error {
            None => "up".into(),
            Some(e) => format!("unreachable: {e}"),
        }),
        ("VERSION", &|b| figure(b, |s| s.version.clone())),
        ("SUBSYSTEMS", &|b| {
            figure(b, |s| s.subsystems.len().to_string())
        }),
        ("NAMESPACES", &|b| {
            figure(b, |s| {
                let n: usize = s.subsystems.iter().map(|x| x.namespaces.len()).sum();
                n.to_string()
            })
        }),
        ("CONTROLLERS", &|b| {
            figure(b, |s| s.controllers.len().to_string())
        }),
        ("LISTENERS", &|b| {
            figure(b, |s| {
                let l: Vec<&str> = s.listeners.iter().map(|l| l.address.as_str()).collect();
                l.join(",")
            })
        }),
    ];
    // The status column holds the error: last, so a long message does not widen the table.
    let mut order: Vec<Column<BoxState>> = cols.to_vec();
    let status = order.remove(3);
    order.push(status);
    render::columns(&mut out, "", boxes, &order);
    let mut nss: Vec<OnBox<NamespaceView>> = Vec::new();
    let mut ctrls: Vec<OnBox<ControllerView>> = Vec::new();
    for b in boxes {
        let Some(s) = &b.state else { continue };
        for sub in &s.subsystems {
            nss.extend(
                sub.namespaces
                    .iter()
                    .map(|n| (b.name.as_str(), sub.nqn.as_str(), n)),
            );
        }
        ctrls.extend(s.controllers.iter().map(|c| (b.name.as_str(), "", c)));
    }
    if !nss.is_empty() {
        out.push_str("\nnamespaces\n");
        let cols: &[Column<OnBox<NamespaceView>>] = &[
            ("BOX", &|(b, _, _)| b.to_string()),
            ("SUBSYSTEM", &|(_, s, _)| s.to_string()),
            ("NSID", &|(_, _, n)| n.nsid.to_string()),
            ("BACKEND", &|(_, _, n)| n.backend.clone()),
            ("SIZE", &|(_, _, n)| ebof_config::format_size(n.size)),
            ("ANAGRP", &|(_, _, n)| n.ana_group.to_string()),
            ("PATH", &|(_, _, n)| n.path.clone().unwrap_or_default()),
        ];
        render::columns(&mut out, "  ", &nss, cols);
    }
    if ctrls.is_empty() {
        out.push_str("\ncontrollers: none connected\n");
    } else {
        out.push_str("\ncontrollers\n");
        let cols: &[Column<OnBox<ControllerView>>] = &[
            ("BOX", &|(b, _, _)| b.to_string()),
            ("CNTLID", &|(_, _, c)| c.cntlid.to_string()),
            ("KIND", &|(_, _, c)| c.kind.clone()),
            ("SUBSYSTEM", &|(_, _, c)| c.subsystem.clone()),
            ("HOST", &|(_, _, c)| c.hostnqn.clone()),
            ("IOQ", &|(_, _, c)| c.io_queues.to_string()),
            ("LISTENER", &|(_, _, c)| {
                c.listener.clone().unwrap_or_default()
            }),
        ];
        render::columns(&mut out, "  ", &ctrls, cols);
    }
    out
}

/// A cell of a box's row: `f` of its state, `-` when it did not answer.
fn figure(b: &BoxState, f: impl Fn(&State) -> String) -> String {
    b.state.as_ref().map_or_else(|| "-".into(), f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, api: &str) -> Member {
        Member {
            name: name.into(),
            api: api.into(),
            zone: None,
            client: Client::tcp(api, None),
            token_file: None,
        }
    }

    #[test]
    fn a_dead_box_is_an_error_row_and_the_live_order_stays() {
        // Port 1 on loopback: refused at once.
        let m = [
            member("dead", "127.0.0.1:1"),
            member("dead2", "127.0.0.1:1"),
        ];
        let r = gather(&m, Duration::from_secs(5), Client::state);
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|r| r.is_err()));
        let boxes: Vec<BoxState> = m
            .iter()
            .zip(r)
            .map(|(m, r)| BoxState {
                name: m.name.clone(),
                api: m.api.clone(),
                zone: None,
                error: r.err(),
                state: None,
            })
            .collect();
        let t = show_text(&boxes);
        assert!(
            t.contains("unreachable: no ebof management API at 127.0.0.1:1"),
            "{t}"
        );
        assert!(t.lines().nth(1).unwrap().starts_with("dead "), "{t}");
    }

    #[test]
    fn timeouts_are_positive_seconds() {
        assert_eq!(timeout(None).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(timeout(Some(0.5)).unwrap(), Duration::from_millis(500));
        assert!(timeout(Some(0.0)).is_err() && timeout(Some(-1.0)).is_err());
    }
}
