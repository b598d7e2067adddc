#![allow(dead_code)] // each test binary uses a part of the fake box
//! A fake ebof box for the controller's tests: the management API routes the CSI controller
//! calls, over plain HTTP/1.1 on loopback, on an in-memory state (subsystems, namespaces with
//! their `mirror` and QoS limits, one pool, hosts, snapshots and clones of them). Every request
//! is logged; a box can be made to drop connections (`set_down`) or to refuse one kind of
//! request once (`fail_next`). Namespaces have no data, only a label (`write`) that snapshots
//! and clones copy, to follow what a clone was made from.

use ebof_api::{
    ApiError, CloneMade, HostKeyView, ListenerView, NamespaceChanged, NamespaceView, PoolView,
    SnapshotDeleted, SnapshotOrigin, SnapshotView, State, SubsystemRemoved, SubsystemView,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One request the box got: method, path, JSON body (`Null` when none).
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub body: Value,
}

#[derive(Default)]
struct Inner {
    subsystems: Vec<SubsystemView>,
    /// nqn → the `mirror` object of namespace 1.
    mirrors: BTreeMap<String, Value>,
    pool_capacity: u64,
    snapshots: Vec<SnapshotView>,
    /// The label of each volume's namespace 1 (by NQN) and of each snapshot (by name).
    data: BTreeMap<String, String>,
    /// Bytes free in the pool's file system (default: plenty).
    fs_available: Option<u64>,
    /// The pool reports `encrypted` (ADR 0029).
    pool_encrypted: bool,
    log: Vec<Call>,
    down: bool,
    /// The bearer token the box takes (`None`: any).
    token: Option<String>,
    /// (method, path suffix, body text, code): refuse the next such request (whose JSON
    /// body holds the text) with this API code.
    fail: Option<(String, String, String, String)>,
}

/// A fake box serving until dropped.
pub struct FakeBox {
    /// `127.0.0.1:PORT` of its management API.
    pub api: String,
    /// Its one NVMe/TCP listener, `127.0.0.1:PORT` (nothing listens there).
    pub listener: String,
    inner: Arc<Mutex<Inner>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for FakeBox {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.api);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn err(status: u16, code: &str, message: &str) -> (u16, Value) {
    (
        status,
        serde_json::to_value(ApiError::new(code, "", message)).unwrap(),
    )
}

fn ok<T: serde::Serialize>(v: T) -> (u16, Value) {
    (200, serde_json::to_value(v).unwrap())
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

impl FakeBox {
    /// A box whose NVMe listener port is `nvme_port` and whose pool holds `pool` bytes.
    pub fn start(nvme_port: u16, pool: u64) -> FakeBox {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let api = l.local_addr().unwrap().to_string();
        let inner = Arc::new(Mutex::new(Inner {
            pool_capacity: pool,
            ..Default::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let listener = format!("127.0.0.1:{nvme_port}");
        let (i2, s2, l2) = (inner.clone(), stop.clone(), listener.clone());
        let thread = std::thread::spawn(move || {
            for conn in l.incoming() {
                if s2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (i3, l3) = (i2.clone(), l2.clone());
                std::thread::spawn(move || serve(conn, &i3, &l3));
            }
        });
        FakeBox {
            api,
            listener,
            inner,
            stop,
            thread: Some(thread),
        }
    }

    /// Every request so far.
    pub fn log(&self) -> Vec<Call> {
        self.inner.lock().unwrap().log.clone()
    }

    /// Forget the requests so far.
    pub fn clear_log(&self) {
        self.inner.lock().unwrap().log.clear();
    }

    /// Drop every connection without an answer (a box that is down), or serve again.
    pub fn set_down(&self, down: bool) {
        self.inner.lock().unwrap().down = down;
    }

    /// Take only requests bearing `token` (`None`: any); others get 401 `unauthorized`.
    pub fn set_token(&self, token: Option<&str>) {
        self.inner.lock().unwrap().token = token.map(str::to_string);
    }

    /// Refuse the next `method` request whose path ends with `suffix` with API `code`.
    pub fn fail_next(&self, method: &str, suffix: &str, code: &str) {
        self.fail_next_if(method, suffix, "", code);
    }

    /// [`FakeBox::fail_next`] for a request whose JSON body holds `text`.
    pub fn fail_next_if(&self, method: &str, suffix: &str, text: &str, code: &str) {
        self.inner.lock().unwrap().fail =
            Some((method.into(), suffix.into(), text.into(), code.into()));
    }

    /// No refusal pending.
    pub fn clear_fail(&self) {
        self.inner.lock().unwrap().fail = None;
    }

    /// The subsystem `nqn` as the box holds it.
    pub fn subsystem(&self, nqn: &str) -> Option<SubsystemView> {
        let g = self.inner.lock().unwrap();
        g.subsystems.iter().find(|s| s.nqn == nqn).cloned()
    }

    /// The `mirror` of namespace 1 of `nqn`.
    pub fn mirror(&self, nqn: &str) -> Option<Value> {
        self.inner.lock().unwrap().mirrors.get(nqn).cloned()
    }

    /// Change the role the box reports for `nqn`'s copy (a promotion, say).
    pub fn set_role(&self, nqn: &str, role: &str) {
        if let Some(m) = self.inner.lock().unwrap().mirrors.get_mut(nqn) {
            m["role"] = json!(role);
        }
    }

    /// Remove subsystem `nqn` behind the controller's back (a box rebuilt).
    pub fn forget(&self, nqn: &str) {
        let mut g = self.inner.lock().unwrap();
        g.subsystems.retain(|s| s.nqn != nqn);
        g.mirrors.remove(nqn);
    }

    /// Write `label` on namespace 1 of `nqn` (its "data").
    pub fn write(&self, nqn: &str, label: &str) {
        let mut g = self.inner.lock().unwrap();
        g.data.insert(nqn.to_string(), label.to_string());
    }

    /// The label on namespace 1 of `nqn`.
    pub fn read(&self, nqn: &str) -> Option<String> {
        self.inner.lock().unwrap().data.get(nqn).cloned()
    }

    /// The QoS limits of namespace 1 of `nqn`, as the state shows them.
    pub fn qos(&self, nqn: &str) -> Option<Value> {
        let s = self.subsystem(nqn)?;
        let ns = s.namespaces.iter().find(|n| n.nsid == 1)?;
        ns.qos.as_ref().map(|q| serde_json::to_value(q).unwrap())
    }

    /// Remove namespace 1 of `nqn` behind the controller's back.
    pub fn forget_namespace(&self, nqn: &str) {
        let mut g = self.inner.lock().unwrap();
        if let Some(s) = g.subsystems.iter_mut().find(|s| s.nqn == nqn) {
            s.namespaces.retain(|n| n.nsid != 1);
        }
    }

    /// Bytes free in the pool's file system (`None`: plenty).
    pub fn set_fs_available(&self, bytes: Option<u64>) {
        self.inner.lock().unwrap().fs_available = bytes;
    }

    /// Whether the box's pool reports itself encrypted.
    #[allow(dead_code)]
    pub fn set_pool_encrypted(&self, encrypted: bool) {
        self.inner.lock().unwrap().pool_encrypted = encrypted;
    }

    /// Snapshots on the box.
    pub fn snapshots(&self) -> Vec<String> {
        let g = self.inner.lock().unwrap();
        g.snapshots.iter().map(|s| s.name.clone()).collect()
    }
}

fn serve(mut conn: TcpStream, inner: &Mutex<Inner>, listener: &str) {
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = match (parts.next(), parts.next()) {
        (Some(m), Some(p)) => (m.to_string(), p.to_string()),
        _ => return,
    };
    let mut len = 0usize;
    let mut bearer = None;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap_or(0);
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("authorization")
        {
            bearer = v.trim().strip_prefix("Bearer ").map(str::to_string);
        }
    }
    let mut body = vec![0u8; len];
    if r.read_exact(&mut body).is_err() {
        return;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (status, answer) = {
        let mut g = inner.lock().unwrap();
        if g.down {
            return; // the connection drops unanswered
        }
        if g.token.is_some() && g.token != bearer {
            drop(g);
            let text = serde_json::to_value(ApiError::new("unauthorized", "", "bad token"))
                .unwrap()
                .to_string();
            let _ = write!(
                conn,
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
            return;
        }
        g.log.push(Call {
            method: method.clone(),
            path: path.clone(),
            body: body.clone(),
        });
        let text = body.to_string();
        let failing = g.fail.as_ref().is_some_and(|(m, s, t, _)| {
            *m == method && path.ends_with(s.as_str()) && text.contains(t.as_str())
        });
        if failing {
            let (_, _, _, code) = g.fail.take().unwrap();
            err(409, &code, "refused as the test asked")
        } else {
            route(&mut g, &method, &path, &body, listener)
        }
    };
    let text = answer.to_string();
    let reason = if status < 300 { "OK" } else { "Error" };
    let _ = write!(
        conn,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = conn.flush();
}

fn namespace_view(nsid: u32, size: u64, uuid: &str) -> NamespaceView {
    // From JSON, so the view's later optional fields need no mention here.
    serde_json::from_value(json!({
        "nsid": nsid, "backend": "file", "size": size, "block_size": 512, "uuid": uuid,
        "ana_group": 1, "thin": true, "path": format!("/pool/{uuid}"),
    }))
    .unwrap()
}

/// The QoS view of a `PUT …/qos` (or a namespace's `qos`) body, or why the box refuses it.
fn qos_view(body: &Value) -> Result<Option<ebof_api::QosView>, (u16, Value)> {
    let fields: ebof_api::QosRequest = serde_json::from_value(body.clone())
        .map_err(|e| err(400, "invalid-qos", &e.to_string()))?;
    let limits = fields
        .check("")
        .map_err(|e| err(400, "invalid-qos", &e.to_string()))?;
    if limits.is_unlimited() {
        return Ok(None);
    }
    let mut v = serde_json::to_value(limits).unwrap();
    v["waited"] = json!(0);
    v["wait_us"] = json!(0);
    Ok(Some(serde_json::from_value(v).unwrap()))
}

fn state(g: &Inner, listener: &str) -> Value {
    let provisioned: u64 = g
        .subsystems
        .iter()
        .flat_map(|s| s.namespaces.iter())
        .map(|n| n.size)
        .sum();
    let st = State {
        version: "fake".into(),
        subsystems: g.subsystems.clone(),
        listeners: vec![ListenerView {
            address: listener.into(),
            portid: 1,
            discovery: false,
            tls: "off".into(),
            transport: "tcp".into(),
        }],
        controllers: vec![],
        ana: vec![],
        mdns: None,
        referrals: vec![],
        registrations: vec![],
        cdc: None,
        snapshots: g.snapshots.clone(),
        pools: vec![PoolView {
            name: "default".into(),
            directory: "/pool".into(),
            size_limit: Some(g.pool_capacity),
            capacity_bytes: g.pool_capacity,
            provisioned_bytes: provisioned,
            used_bytes: 0,
            free_bytes: g.pool_capacity.saturating_sub(provisioned),
            namespaces: 0,
            filesystem: g.fs_available.map(|a| ebof_api::FsSpaceView {
                total_bytes: 1 << 40,
                available_bytes: a,
                fsid: 1,
            }),
            encrypted: g.pool_encrypted,
        }],
    };
    let mut v = serde_json::to_value(st).unwrap();
    for s in v["subsystems"].as_array_mut().unwrap() {
        let nqn = s["nqn"].as_str().unwrap().to_string();
        if let Some(m) = g.mirrors.get(&nqn) {
            for n in s["namespaces"].as_array_mut().unwrap() {
                if n["nsid"] == json!(1) {
                    n["mirror"] = m.clone();
                }
            }
        }
    }
    v
}

fn route(g: &mut Inner, method: &str, path: &str, body: &Value, listener: &str) -> (u16, Value) {
    let segs: Vec<String> = path
        .trim_start_matches("/v1/")
        .split('/')
        .map(decode)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let sub_at = |g: &Inner, nqn: &str| g.subsystems.iter().position(|s| s.nqn == nqn);
    match (method, segs.as_slice()) {
        ("GET", ["state"]) => (200, state(g, listener)),
        ("POST", ["subsystems"]) => {
            let nqn = body["nqn"].as_str().unwrap_or("").to_string();
            if sub_at(g, &nqn).is_some() {
                return err(409, "duplicate-nqn", "exists");
            }
            let s = SubsystemView {
                nqn,
                serial: String::new(),
                model: body["model"].as_str().unwrap_or("ebof").into(),
                allow_any_host: false,
                hosts: vec![],
                namespaces: vec![],
            };
            g.subsystems.push(s.clone());
            ok(s)
        }
        ("DELETE", ["subsystems", nqn]) => match sub_at(g, nqn) {
            None => err(404, "unknown-subsystem", "no such subsystem"),
            Some(i) => {
                g.subsystems.remove(i);
                g.mirrors.remove(*nqn);
                g.data.remove(*nqn);
                ok(SubsystemRemoved {
                    nqn: nqn.to_string(),
                    disconnected: vec![],
                })
            }
        },
        ("POST", ["subsystems", nqn, "namespaces"]) => {
            let Some(i) = sub_at(g, nqn) else {
                return err(404, "unknown-subsystem", "no such subsystem");
            };
            let nsid = body["nsid"].as_u64().unwrap_or(1) as u32;
            if g.subsystems[i].namespaces.iter().any(|n| n.nsid == nsid) {
                return err(409, "duplicate-nsid", "exists");
            }
            let size = body["size"].as_u64().unwrap_or(0);
            let free = state(g, listener)["pools"][0]["free_bytes"]
                .as_u64()
                .unwrap();
            if size > free {
                return err(409, "pool-full", "pool full");
            }
            if let Some(m) = body.get("mirror") {
                let role = m["role"].as_str().unwrap_or("");
                let peer = m["peer"].as_str().unwrap_or("");
                if !matches!(role, "primary" | "secondary")
                    || peer.parse::<std::net::SocketAddr>().is_err()
                {
                    return err(400, "invalid-mirror", "bad mirror");
                }
                g.mirrors.insert(
                    nqn.to_string(),
                    json!({"role": role, "peer": peer, "epoch": 1, "state": "in-sync",
                        "resync_done": 0, "resync_total": 0, "resync_bytes_left": 0,
                        "dirty_regions": 0, "in_flight": 0, "lease_ms_left": null,
                        "fenced": false}),
                );
            }
            let mut ns = namespace_view(nsid, size, body["uuid"].as_str().unwrap_or(""));
            if let Some(q) = body.get("qos") {
                ns.qos = match qos_view(q) {
                    Ok(v) => v,
                    Err(e) => return e,
                };
            }
            g.subsystems[i].namespaces.push(ns.clone());
            ok(NamespaceChanged {
                subsystem: nqn.to_string(),
                namespace: ns,
            })
        }
        ("PUT", ["subsystems", nqn, "namespaces", _, "size"]) => {
            let Some(i) = sub_at(g, nqn) else {
                return err(404, "unknown-subsystem", "no such subsystem");
            };
            let size = body["size"].as_u64().unwrap_or(0);
            let Some(ns) = g.subsystems[i].namespaces.first_mut() else {
                return err(404, "unknown-namespace", "no namespace");
            };
            ns.size = size;
            let ns = ns.clone();
            ok(NamespaceChanged {
                subsystem: nqn.to_string(),
                namespace: ns,
            })
        }
        ("PUT", ["subsystems", nqn, "namespaces", _, "qos"]) => {
            let Some(i) = sub_at(g, nqn) else {
                return err(404, "unknown-subsystem", "no such subsystem");
            };
            let q = match qos_view(body) {
                Ok(q) => q,
                Err(e) => return e,
            };
            let Some(ns) = g.subsystems[i].namespaces.first_mut() else {
                return err(404, "unknown-namespace", "no namespace");
            };
            ns.qos = q;
            let ns = ns.clone();
            ok(NamespaceChanged {
                subsystem: nqn.to_string(),
                namespace: ns,
            })
        }
        ("POST", ["snapshots", name, "clones"]) => {
            let Some(snap) = g.snapshots.iter().find(|s| s.name == *name).cloned() else {
                return err(404, "unknown-snapshot", "no such snapshot");
            };
            let nqn = body["subsystem"].as_str().unwrap_or("").to_string();
            let Some(i) = sub_at(g, &nqn) else {
                return err(404, "unknown-subsystem", "no such subsystem");
            };
            let nsid = body["nsid"].as_u64().unwrap_or(1) as u32;
            if g.subsystems[i].namespaces.iter().any(|n| n.nsid == nsid) {
                return err(409, "duplicate-nsid", "exists");
            }
            let free = state(g, listener)["pools"][0]["free_bytes"]
                .as_u64()
                .unwrap();
            if snap.size > free {
                return err(409, "pool-full", "pool full");
            }
            if let Some(m) = body.get("mirror") {
                let role = m["role"].as_str().unwrap_or("");
                let peer = m["peer"].as_str().unwrap_or("");
                if role != "primary" || peer.parse::<std::net::SocketAddr>().is_err() {
                    return err(400, "invalid-mirror", "bad mirror");
                }
                g.mirrors.insert(
                    nqn.clone(),
                    json!({"role": role, "peer": peer, "epoch": 1, "state": "resyncing",
                        "resync_done": 0, "resync_total": snap.size, "resync_bytes_left": snap.size,
                        "dirty_regions": 0, "in_flight": 0, "lease_ms_left": null,
                        "fenced": false}),
                );
            }
            let ns = namespace_view(nsid, snap.size, body["uuid"].as_str().unwrap_or(""));
            g.subsystems[i].namespaces.push(ns.clone());
            if let Some(d) = g.data.get(&format!("snapshot:{name}")).cloned() {
                g.data.insert(nqn.clone(), d);
            }
            ok(CloneMade {
                snapshot: name.to_string(),
                method: "reflink".into(),
                duration_us: 1,
                added: NamespaceChanged {
                    subsystem: nqn,
                    namespace: ns,
                },
            })
        }
        ("DELETE", ["snapshots", name]) => {
            let Some(at) = g.snapshots.iter().position(|s| s.name == *name) else {
                return err(404, "unknown-snapshot", "no such snapshot");
            };
            g.snapshots.remove(at);
            g.data.remove(&format!("snapshot:{name}"));
            ok(SnapshotDeleted {
                name: name.to_string(),
                path: "/pool/snap".into(),
            })
        }
        ("POST", ["subsystems", nqn, "hosts"]) => {
            let Some(i) = sub_at(g, nqn) else {
                return err(404, "unknown-subsystem", "no such subsystem");
            };
            let h = body["hostnqn"].as_str().unwrap_or("").to_string();
            if g.subsystems[i].hosts.contains(&h) {
                return err(409, "duplicate-host", "listed");
            }
            g.subsystems[i].hosts.push(h);
            ok(g.subsystems[i].clone())
        }
        ("DELETE", ["subsystems", nqn, "hosts", h]) => {
            let Some(i) = sub_at(g, nqn) else {
                return err(404, "unknown-subsystem", "no such subsystem");
            };
            if !g.subsystems[i].hosts.iter().any(|x| x == h) {
                return err(404, "unknown-host", "not listed");
            }
            g.subsystems[i].hosts.retain(|x| x != h);
            ok(g.subsystems[i].clone())
        }
        (m, ["subsystems", nqn, "hosts", h, "dhchap"]) if m == "PUT" || m == "DELETE" => {
            if sub_at(g, nqn).is_none() {
                return err(404, "unknown-subsystem", "no such subsystem");
            }
            ok(HostKeyView {
                subsystem: nqn.to_string(),
                hostnqn: h.to_string(),
                dhchap: m == "PUT",
                bidirectional: m == "PUT",
            })
        }
        ("POST", ["subsystems", nqn, "namespaces", _, "snapshots"]) => {
            let Some(i) = sub_at(g, nqn) else {
                return err(404, "unknown-subsystem", "no such subsystem");
            };
            let name = body["name"].as_str().unwrap_or("").to_string();
            if g.snapshots.iter().any(|s| s.name == name) {
                return err(409, "duplicate-snapshot", "exists");
            }
            let Some(ns) = g.subsystems[i].namespaces.first().cloned() else {
                return err(404, "unknown-namespace", "no namespace");
            };
            if let Some(d) = g.data.get(*nqn).cloned() {
                g.data.insert(format!("snapshot:{name}"), d);
            }
            let s = SnapshotView {
                name,
                origin: SnapshotOrigin {
                    subsystem: nqn.to_string(),
                    nsid: 1,
                    uuid: ns.uuid.clone(),
                    path: "/pool/x".into(),
                },
                size: ns.size,
                block_size: 512,
                created: 1,
                method: "reflink".into(),
                path: "/pool/snap".into(),
                pause_us: 0,
                duration_us: 0,
            };
            g.snapshots.push(s.clone());
            ok(s)
        }
        _ => err(404, "unknown-endpoint", "not faked"),
    }
}
