//! `ebof ctl dump -o FILE.tar.gz`: a support bundle of one box, safe to attach to a ticket.
//!
//! What is in it: `state.json` (`ebof ctl show --json`), `stats.json`, `config.toml` (the
//! running configuration from `GET /v1/support`: the box replaces every inline secret by
//! `<redacted>`; paths of key, token and certificate files stay, their contents are never
//! read), `metrics.txt` (a scrape), `versions.txt`, `logs.txt` where logs can be had, and a
//! `MANIFEST` listing each file and what could not be collected. Nothing secret: besides
//! the box's own redaction, every file passes through [`scrub`], which removes anything
//! shaped like a DH-HMAC-CHAP secret (`DHHC-1:…`) or a TLS PSK (`NVMeTLSkey-1:…`), and the
//! API token `ebof ctl` holds.
//!
//! `ebof ctl --boxes FILE dump -o FILE.tar.gz` ([`run_fleet`]): the same for every box of a
//! fleet, at the same time, one directory per box in one bundle, each box bounded by
//! `--box-timeout` (default [`FLEET_TIMEOUT`]); a top-level `MANIFEST` lists the boxes and,
//! for each one that could not be collected, why. Every file is scrubbed of every box's token.

use super::CtlArgs;
use super::fleet::Member;
use anyhow::{Context, Result};
use ebof_api::{Client, REDACTED, SupportView};
use std::io::Write;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// One file of the bundle: its name, what it is, and its content (or why there is none).
struct Part {
    name: &'static str,
    what: &'static str,
    body: Result<String, String>,
}

/// How long one box of `--boxes … dump` may take to give its whole bundle, by default.
pub const FLEET_TIMEOUT: Duration = Duration::from_secs(20);

/// `ebof ctl dump -o FILE`.
pub fn run(c: &Client, a: &CtlArgs, output: &Path) -> Result<()> {
    let parts = collect(c, a.api.is_some()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let tokens: Vec<String> = held_token(a).into_iter().collect();
    let now = unix_now();
    let mut tar = open(output)?;
    let dir = format!("ebof-dump-{now}");
    box_files(&mut tar, &dir, &parts, &tokens, now)?;
    finish(tar)?;
    println!(
        "support bundle written to {} ({} files; see its MANIFEST)",
        output.display(),
        parts.iter().filter(|p| p.body.is_ok()).count() + 1
    );
    Ok(())
}

/// `ebof ctl --boxes FILE dump -o FILE`: every box at once, each within `box_timeout` secs.
pub fn run_fleet(members: &[Member], box_timeout: Option<f64>, output: &Path) -> Result<()> {
    let within = match box_timeout {
        None => FLEET_TIMEOUT,
        s => super::fleet::timeout(s)?,
    };
    let (tx, rx) = mpsc::channel();
    for (i, m) in members.iter().enumerate() {
        let (tx, c) = (tx.clone(), m.client.clone());
        std::thread::spawn(move || {
            let _ = tx.send((i, collect(&c, true)));
        });
    }
    drop(tx);
    let mut got: Vec<Option<Result<Vec<Part>, String>>> = members.iter().map(|_| None).collect();
    let deadline = Instant::now() + within;
    for _ in 0..members.len() {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((i, r)) => got[i] = Some(r),
            Err(_) => break,
        }
    }
    // Every token of the fleet is kept out of every box's files.
    let tokens: Vec<String> = members
        .iter()
        .filter_map(|m| m.token_file.as_ref())
        .filter_map(|p| ebof_api::read_token_file(p).ok())
        .map(|t| t.expose().to_string())
        .collect();
    let now = unix_now();
    let top = format!("ebof-dump-{now}");
    let mut tar = open(output)?;
    let mut manifest = format!(
        "ebof fleet support bundle, made {} by ebof ctl --boxes FILE dump {}\n\
         A directory per box, each what `ebof ctl dump` gives of that box (its own MANIFEST);\n\
         each box had {within:?} to answer.\n\nBOX  DIRECTORY  API  STATUS\n",
        super::render::utc_text(now),
        env!("CARGO_PKG_VERSION")
    );
    let mut ok = 0;
    for (m, r) in members.iter().zip(got) {
        let dir = dir_name(&m.name);
        let status = match r {
            Some(Ok(parts)) => {
                box_files(&mut tar, &format!("{top}/{dir}"), &parts, &tokens, now)?;
                ok += 1;
                format!(
                    "collected ({} files)",
                    parts.iter().filter(|p| p.body.is_ok()).count() + 1
                )
            }
            Some(Err(e)) => format!("unreachable: {e}"),
            None => format!("unreachable: no answer within {within:?}"),
        };
        let line = format!(
            "{}  {dir}/  {}  {status}
",
            m.name, m.api
        );
        manifest.push_str(&scrub_all(&line, &tokens));
    }
    add(
        &mut tar,
        &format!("{top}/MANIFEST"),
        manifest.as_bytes(),
        now,
    )?;
    finish(tar)?;
    println!(
        "fleet support bundle written to {} ({ok} of {} boxes; see its MANIFEST)",
        output.display(),
        members.len()
    );
    Ok(())
}

/// A box name as a directory name: letters, digits, `.`, `_` and `-`; anything else `_`.
fn dir_name(name: &str) -> String {
    let d: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if d.is_empty() || d.starts_with('.') {
        format!("box{d}")
    } else {
        d
    }
}

/// The files of one box's bundle; an error when the box cannot be asked at all. `remote`:
/// asked over TCP (its log cannot be had from here).
fn collect(c: &Client, remote: bool) -> Result<Vec<Part>, String> {
    let state = c.state().map_err(|e| e.to_string())?;
    // Asked once: the configuration and the box's kernel both come from it.
    let support = c.support().map_err(|e| e.to_string());
    Ok(vec![
        Part {
            name: "state.json",
            what: "ebof ctl show --json",
            body: Ok(pretty(&state)),
        },
        Part {
            name: "stats.json",
            what: "ebof ctl stats --json",
            body: c.stats().map(|s| pretty(&s)).map_err(|e| e.to_string()),
        },
        Part {
            name: "config.toml",
            what: "the running configuration, inline secrets redacted by the box",
            body: support
                .as_ref()
                .map(|s| {
                    format!(
                        "# running configuration of the box ({} secret(s) replaced by {REDACTED})\n{}",
                        s.redacted, s.config
                    )
                })
                .map_err(Clone::clone),
        },
        Part {
            name: "metrics.txt",
            what: "a scrape of GET /metrics",
            body: c.metrics().map_err(|e| e.to_string()),
        },
        Part {
            name: "versions.txt",
            what: "versions of ebof (box and ctl) and the kernels",
            body: Ok(versions(c, &state.version, &support)),
        },
        Part {
            name: "logs.txt",
            what: "the box's recent log",
            body: logs(remote),
        },
    ])
}

/// An answer as pretty JSON.
fn pretty<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("(not JSON: {e})"))
}

/// The token `ebof ctl` sends, to be sure it is nowhere in the bundle.
fn held_token(a: &CtlArgs) -> Option<String> {
    a.api.as_ref()?;
    match &a.token_file {
        Some(p) => ebof_api::read_token_file(p)
            .ok()
            .map(|t| t.expose().to_string()),
        None => std::env::var(super::TOKEN_ENV).ok(),
    }
}

/// `versions.txt`.
fn versions(c: &Client, box_version: &str, support: &Result<SupportView, String>) -> String {
    let kernel = match support {
        Ok(s) => s.kernel.clone(),
        Err(e) => format!("unknown ({e})"),
    };
    format!(
        "box: ebof {box_version}\nbox kernel: {kernel}\nebof ctl: ebof {}\nctl kernel: {}\nasked: {}\n",
        env!("CARGO_PKG_VERSION"),
        ebof_mgmt::support::kernel(),
        c.endpoint()
    )
}

/// The box's recent log: `ebof serve` logs to its standard error (the journal under the
/// systemd unit `ebof.service`) and keeps no log file itself, so the log is had only on the
/// box's machine (the management socket), from the journal.
fn logs(remote: bool) -> Result<String, String> {
    if remote {
        return Err(
            "not collected: ebof serve keeps no log itself (it logs to standard error, the \
             journal under systemd); run `ebof ctl dump` on the box, or `journalctl -u ebof` there"
                .into(),
        );
    }
    let out = std::process::Command::new("journalctl")
        .args(["-u", "ebof.service", "-n", "2000", "--no-pager", "-o", "short-iso"])
        .output()
        .map_err(|e| {
            format!("not collected: ebof serve keeps no log itself (standard error) and journalctl cannot be run: {e}")
        })?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || text.trim().is_empty() || text.contains("-- No entries --") {
        return Err(
            "not collected: ebof serve keeps no log itself (it logs to standard error) and the \
             journal has nothing of ebof.service (started by hand? its standard error is the log)"
                .into(),
        );
    }
    Ok(text)
}

/// `text` without anything shaped like a secret: DH-HMAC-CHAP secrets (`DHHC-1:…`), TLS
/// PSKs in their interchange form (`NVMeTLSkey-1:…`), and `token`.
pub fn scrub(text: &str, token: Option<&str>) -> String {
    let mut out = text.to_string();
    if let Some(t) = token.filter(|t| !t.is_empty()) {
        out = out.replace(t, REDACTED);
    }
    for prefix in ["DHHC-1:", "NVMeTLSkey-1:"] {
        let mut done = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(i) = rest.find(prefix) {
            done.push_str(&rest[..i]);
            done.push_str(REDACTED);
            let tail = &rest[i + prefix.len()..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, ':' | '+' | '/' | '=')))
                .unwrap_or(tail.len());
            rest = &tail[end..];
        }
        done.push_str(rest);
        out = done;
    }
    out
}

/// `text` scrubbed ([`scrub`]) of every token in `tokens` too.
fn scrub_all(text: &str, tokens: &[String]) -> String {
    tokens
        .iter()
        .fold(scrub(text, None), |t, tok| scrub(&t, Some(tok)))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

type Bundle = tar::Builder<flate2::write::GzEncoder<std::fs::File>>;

/// The bundle at `output`, created owner-only.
fn open(output: &Path) -> Result<Bundle> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(output)
        .with_context(|| format!("cannot create {}", output.display()))?;
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    Ok(tar::Builder::new(gz))
}

/// The bundle written out and synced.
fn finish(tar: Bundle) -> Result<()> {
    let gz = tar.into_inner().context("writing the bundle")?;
    let mut file = gz.finish().context("writing the bundle")?;
    file.flush().context("writing the bundle")?;
    file.sync_all().context("writing the bundle")?;
    Ok(())
}

/// One box's `parts` and its MANIFEST in directory `dir` of the bundle, scrubbed.
fn box_files(
    tar: &mut Bundle,
    dir: &str,
    parts: &[Part],
    tokens: &[String],
    now: u64,
) -> Result<()> {
    let mut manifest = format!(
        "ebof support bundle, made {} by ebof ctl dump {}\n\
         Secrets: inline keys of the configuration are redacted by the box; every file is\n\
         scrubbed of DH-HMAC-CHAP secrets, TLS PSKs and the API token. Paths of key files\n\
         stay; their contents are never read.\n\nFILE  BYTES  WHAT\n",
        super::render::utc_text(now),
        env!("CARGO_PKG_VERSION")
    );
    let mut missing = String::new();
    for p in parts {
        match &p.body {
            Ok(body) => {
                let body = scrub_all(body, tokens);
                manifest.push_str(&format!("{}  {}  {}\n", p.name, body.len(), p.what));
                add(tar, &format!("{dir}/{}", p.name), body.as_bytes(), now)?;
            }
            Err(why) => missing.push_str(&format!(
                "{} ({}): {}\n",
                p.name,
                p.what,
                scrub_all(why, tokens)
            )),
        }
    }
    if !missing.is_empty() {
        manifest.push_str("\nNot in the bundle:\n");
        manifest.push_str(&missing);
    }
    add(tar, &format!("{dir}/MANIFEST"), manifest.as_bytes(), now)
}

/// One regular file, mode 0644, in the archive.
fn add<W: Write>(tar: &mut tar::Builder<W>, path: &str, body: &[u8], mtime: u64) -> Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(body.len() as u64);
    h.set_mode(0o644);
    h.set_mtime(mtime);
    h.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut h, path, body)
        .with_context(|| format!("adding {path} to the bundle"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_names_make_safe_directory_names() {
        assert_eq!(dir_name("box-1.a_b"), "box-1.a_b");
        assert_eq!(dir_name("https://10.0.0.1:9651"), "https___10.0.0.1_9651");
        assert_eq!(dir_name(".."), "box..");
        assert_eq!(dir_name(""), "box");
        assert_eq!(
            scrub_all("t1 t2 DHHC-1:00:abc:", &["t1".into(), "t2".into()]),
            "<redacted> <redacted> <redacted>"
        );
    }

    #[test]
    fn secrets_are_scrubbed() {
        let key = "DHHC-1:00:ia6zGodOr5SEG0Ldz9AqJ1h9pNOEVPsm2hYEbSGnF3m2y8cv:";
        let psk = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
        let text = format!("dhchap_key = \"{key}\"\ntls_key = \"{psk}\"\ntoken abc123tok end\n");
        let s = scrub(&text, Some("abc123tok"));
        assert!(
            !s.contains("ia6zGod") && !s.contains("VRLbtnN9") && !s.contains("abc123tok"),
            "{s}"
        );
        assert_eq!(
            s,
            "dhchap_key = \"<redacted>\"\ntls_key = \"<redacted>\"\ntoken <redacted> end\n"
        );
    }
}
