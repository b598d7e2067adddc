//! The management server: axum (HTTP/1.1) on a Unix socket, optionally the same API on a TCP
//! address with a bearer token ([`crate::auth`]), and optionally `/metrics` alone on another TCP
//! address, on one thread with its own current-thread tokio runtime. It reaches the target only
//! through `Arc<Target>`: snapshot loads for reads,
//! [`nvmf_target::Target::update_subsystem`] for changes, atomics for counters and
//! disconnects. The reactors never wait for it. The TCP listeners (HTTPS with
//! [`ApiListener::with_tls`], bounded connections) are served by [`crate::listen`].

use crate::api::{ApiError, codes};
use crate::auth::{self, RateLimit, Refusal, Token};
use crate::control::Control;
use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Why the management server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A live server holds the socket (its lock is taken, or the socket answers).
    #[error(
        "management socket {path}: another ebof serve is running there (stop it, or choose another socket with --mgmt-socket)"
    )]
    SocketInUse {
        /// The socket path.
        path: PathBuf,
    },
    /// Something other than a socket exists at the path; it is left alone.
    #[error(
        "management socket {path}: a file that is not a socket is in the way; remove it or choose another path"
    )]
    NotASocket {
        /// The socket path.
        path: PathBuf,
    },
    /// Creating the directory, the lock file or the socket failed.
    #[error("management socket {path}: {source}")]
    Socket {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The socket's directory exists but others could replace what we put in it.
    #[error(
        "management socket directory {}: {reason}; refusing to serve there (remove it, or choose another socket with --mgmt-socket)",
        dir.display()
    )]
    UnsafeDirectory {
        /// The directory.
        dir: PathBuf,
        /// Why it is refused.
        reason: String,
    },
    /// The Prometheus metrics listener could not be bound.
    #[error("cannot listen for metrics on {addr}: {source}")]
    Metrics {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The management API's TCP listener could not be bound.
    #[error("cannot listen for the management API on {addr}: {source}")]
    ApiTcp {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The API's certificate or key could not be used (the message names the file).
    #[error("{0}")]
    Tls(String),
    /// The server's tokio runtime could not be built, or a bound listener's address read.
    #[error("management runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

pub use ebof_api::socket::{check_socket_dir, default_socket_path};

/// A bound management socket, owner-only (0600), not yet served.
#[derive(Debug)]
pub struct BoundSocket {
    listener: std::os::unix::net::UnixListener,
    path: PathBuf,
    /// (device, inode) of the socket file we created: removed at stop only if still ours.
    id: (u64, u64),
    /// `PATH.lock`, flock'ed for as long as we serve (the kernel drops it when we die).
    lock: std::fs::File,
}

impl BoundSocket {
    /// Where the socket was bound.
    pub fn path(&self) -> &FsPath {
        &self.path
    }

    /// Give the socket up unserved (a start that failed after binding it): the socket file is
    /// removed if it is still the one we created, as [`MgmtServer::stop`] does.
    pub fn close(self) {
        if std::fs::metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Bind the management socket at `path`: the directory is created (0700) if missing; a socket
/// file left by a server that is gone is replaced; a live one is [`ServerError::SocketInUse`].
pub fn bind_socket(path: &FsPath) -> Result<BoundSocket, ServerError> {
    let err = |source| ServerError::Socket {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::symlink_metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(err)?;
            }
            // Whoever can write in the directory can put their own listener at the path.
            _ => check_socket_dir(dir).map_err(|reason| ServerError::UnsafeDirectory {
                dir: dir.to_path_buf(),
                reason,
            })?,
        }
    }
    // Whoever holds PATH.lock owns PATH: two servers starting at once cannot both decide
    // that a stale socket is theirs to replace.
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(PathBuf::from(lock_path))
        .map_err(err)?;
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(ServerError::SocketInUse {
            path: path.to_path_buf(),
        });
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            return Err(ServerError::NotASocket {
                path: path.to_path_buf(),
            });
        }
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(ServerError::SocketInUse {
                    path: path.to_path_buf(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                tracing::info!(path = %path.display(), "replacing a stale management socket");
                match std::fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(err(e)),
                }
            }
            Err(e) => return Err(err(e)),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    // Bind (and listen, and chmod 0600) under a private name, then hard-link it to `path`:
    // the link appears atomically, only if nothing is there, already listening and owner-only,
    // so two servers starting at once cannot both take the path or mistake a half-made socket
    // for a stale one.
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let listener = std::os::unix::net::UnixListener::bind(&tmp).map_err(err)?;
    let linked = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(ServerError::SocketInUse {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(err(e)),
    }
    let m = std::fs::metadata(path).map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    Ok(BoundSocket {
        listener,
        path: path.to_path_buf(),
        id: (m.dev(), m.ino()),
        lock,
    })
}

/// Bind the metrics listener (plain HTTP, `GET /metrics` only).
pub fn bind_metrics(addr: SocketAddr) -> Result<std::net::TcpListener, ServerError> {
    bind_tcp(addr).map_err(|source| ServerError::Metrics { addr, source })
}

fn bind_tcp(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// A bound TCP listener for the whole API, with the bearer token every request must carry,
/// and its TLS certificate when it speaks HTTPS.
#[derive(Debug)]
pub struct ApiListener {
    listener: std::net::TcpListener,
    token: Token,
    tls: Option<crate::listen::TlsServer>,
}

/// Bind the API's TCP listener (`[management] listen`); requests must bring `token`. Plain
/// HTTP until [`ApiListener::with_tls`].
pub fn bind_api_tcp(addr: SocketAddr, token: Token) -> Result<ApiListener, ServerError> {
    let listener = bind_tcp(addr).map_err(|source| ServerError::ApiTcp { addr, source })?;
    Ok(ApiListener {
        listener,
        token,
        tls: None,
    })
}

impl ApiListener {
    /// Speak HTTPS with the PEM certificate (chain) `cert` and key `key` (`[management]
    /// tls_cert`, `tls_key`); a file that cannot be used is an error naming it.
    pub fn with_tls(mut self, cert: &FsPath, key: &FsPath) -> Result<ApiListener, ServerError> {
        self.tls =
            Some(crate::listen::TlsServer::from_pem_files(cert, key).map_err(ServerError::Tls)?);
        Ok(self)
    }

    /// Whether it speaks HTTPS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }
}

/// The running management server. [`MgmtServer::stop`] (or drop) ends it and removes the socket.
#[derive(Debug)]
pub struct MgmtServer {
    stop: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
    socket: Option<(PathBuf, (u64, u64))>,
    /// Held while serving; closed (unlocked) after the socket file is removed.
    lock: Option<std::fs::File>,
    /// Where metrics are served, if anywhere (the bound address: port 0 resolved).
    pub metrics_addr: Option<SocketAddr>,
    /// Where the API is served on TCP, if anywhere (the bound address: port 0 resolved).
    pub api_addr: Option<SocketAddr>,
}

use crate::handlers::ApiResponse;
pub use crate::handlers::router;

/// How often, at most, a refused request on the API's TCP listener is logged.
const REFUSAL_LOG_PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

/// What the bearer-token check needs.
#[derive(Debug)]
struct Auth {
    token: Token,
    log: RateLimit,
}

/// The API's routes behind the bearer-token check (what the TCP listener serves).
fn authenticated_router(ctx: Arc<Control>, token: Token) -> Router {
    let auth = Arc::new(Auth {
        token,
        log: RateLimit::new(REFUSAL_LOG_PERIOD),
    });
    router(ctx).layer(axum::middleware::from_fn_with_state(auth, require_token))
}

/// Pass the request on only with the right `Authorization: Bearer TOKEN`; else 401 with an
/// [`ApiError`] (`unauthorized`), logged at warn (rate-limited, never the token).
async fn require_token(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    let refusal = match auth::check(presented, &auth.token) {
        Ok(()) => return next.run(req).await,
        Err(r) => r,
    };
    if let Some(suppressed) = auth.log.event(std::time::Instant::now()) {
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or_else(|| "unknown".to_string(), |c| c.0.to_string());
        tracing::warn!(
            %peer,
            method = %req.method(),
            path = %req.uri().path(),
            reason = refusal.reason(),
            suppressed,
            "management API: request refused (the count of refusals not logged since the last line is `suppressed`)"
        );
    }
    unauthorized(refusal)
}

fn unauthorized(r: Refusal) -> Response {
    let challenge = match r {
        Refusal::Wrong => r#"Bearer realm="ebof", error="invalid_token""#,
        Refusal::Missing | Refusal::NotBearer => r#"Bearer realm="ebof""#,
    };
    let mut resp = ApiResponse(ApiError::new(codes::UNAUTHORIZED, "", r.message())).into_response();
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static(challenge),
    );
    resp
}

/// Start serving `socket` (the API), `api_tcp` (the API, bearer token required) and `metrics`
/// (only `/metrics`) on a thread of its own, the TCP listeners within the default
/// [`Limits`](crate::listen::Limits).
pub fn start(
    ctx: Arc<Control>,
    socket: Option<BoundSocket>,
    metrics: Option<std::net::TcpListener>,
    api_tcp: Option<ApiListener>,
) -> Result<MgmtServer, ServerError> {
    start_with(
        ctx,
        socket,
        metrics,
        api_tcp,
        crate::listen::Limits::default(),
    )
}

/// [`start`] with the TCP listeners' connections bounded by `limits`.
pub fn start_with(
    ctx: Arc<Control>,
    socket: Option<BoundSocket>,
    metrics: Option<std::net::TcpListener>,
    api_tcp: Option<ApiListener>,
    limits: crate::listen::Limits,
) -> Result<MgmtServer, ServerError> {
    let metrics_addr = match &metrics {
        Some(l) => Some(l.local_addr().map_err(ServerError::Runtime)?),
        None => None,
    };
    let api_addr = match &api_tcp {
        Some(a) => Some(a.listener.local_addr().map_err(ServerError::Runtime)?),
        None => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServerError::Runtime)?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let socket_id = socket.as_ref().map(|s| (s.path.clone(), s.id));
    let (socket, lock) = match socket {
        Some(s) => {
            let lock = s.lock.try_clone().map_err(ServerError::Runtime)?;
            (Some(s), Some(lock))
        }
        None => (None, None),
    };
    let api = router(ctx.clone());
    let api_tcp = api_tcp.map(|a| {
        (
            a.listener,
            authenticated_router(ctx.clone(), a.token),
            a.tls,
        )
    });
    let metrics_only = crate::handlers::metrics_router(ctx);
    let thread = std::thread::Builder::new()
        .name("ebof-mgmt".into())
        .spawn(move || {
            rt.block_on(async move {
                let mut tasks = Vec::new();
                if let Some(s) = socket {
                    match tokio::net::UnixListener::from_std(s.listener) {
                        Ok(l) => tasks.push(tokio::spawn(serve_until(l, api, rx.clone(), "API"))),
                        Err(e) => tracing::error!(error = %e, "management socket unusable"),
                    }
                }
                if let Some((l, app, tls)) = api_tcp {
                    match tokio::net::TcpListener::from_std(l) {
                        Ok(l) => tasks.push(tokio::spawn(crate::listen::serve(
                            l,
                            app,
                            tls,
                            limits,
                            rx.clone(),
                            "API (TCP)",
                        ))),
                        Err(e) => tracing::error!(error = %e, "management TCP listener unusable"),
                    }
                }
                if let Some(m) = metrics {
                    match tokio::net::TcpListener::from_std(m) {
                        Ok(l) => tasks.push(tokio::spawn(crate::listen::serve(
                            l,
                            metrics_only,
                            None,
                            limits,
                            rx,
                            "metrics",
                        ))),
                        Err(e) => tracing::error!(error = %e, "metrics listener unusable"),
                    }
                }
                for t in tasks {
                    let _ = t.await;
                }
            });
        })
        .map_err(ServerError::Runtime)?;
    Ok(MgmtServer {
        stop: Some(tx),
        thread: Some(thread),
        socket: socket_id,
        lock,
        metrics_addr,
        api_addr,
    })
}

/// Serve `app` on `l` until `stop` turns true (requests in progress finish).
async fn serve_until<L>(
    l: L,
    app: Router,
    mut stop: tokio::sync::watch::Receiver<bool>,
    what: &'static str,
) where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let r = axum::serve(l, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|v| *v).await;
        })
        .await;
    if let Err(e) = r {
        tracing::error!(error = %e, "management {what} endpoint stopped");
    }
}

impl MgmtServer {
    /// Stop serving (requests in progress finish), join the thread, remove the socket file if
    /// it is still the one we created.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(true);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some((path, id)) = self.socket.take()
            && std::fs::metadata(&path).is_ok_and(|m| (m.dev(), m.ino()) == id)
        {
            let _ = std::fs::remove_file(&path);
        }
        self.lock = None;
    }
}

impl Drop for MgmtServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{self, routes};
    use crate::client::{Client, ClientError};

    fn control() -> Arc<Control> {
        crate::build::test_control()
    }

    /// M4: connections that send `GET / HTTP/1.1\r\n` and nothing more, or a head and no
    /// body, are closed within the timeouts; past the cap, at once; the API works after.
    #[test]
    fn slow_clients_are_closed_and_capped() {
        use std::io::{Read, Write};
        use std::time::{Duration, Instant};
        let limits = crate::listen::Limits {
            header_timeout: Duration::from_millis(800),
            idle_timeout: Duration::from_millis(800),
            max_connections: 8,
        };
        let token = Token::new("t0k3n-0123456789").unwrap();
        let l = bind_api_tcp("127.0.0.1:0".parse().unwrap(), token.clone()).unwrap();
        let m = bind_metrics("127.0.0.1:0".parse().unwrap()).unwrap();
        let srv = start_with(control(), None, Some(m), Some(l), limits).unwrap();
        let (api, metrics) = (srv.api_addr.unwrap(), srv.metrics_addr.unwrap());
        let open = |addr: SocketAddr, what: &[u8]| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(what).unwrap();
            s
        };
        let started = Instant::now();
        let mut slow = Vec::new();
        for addr in [api, metrics] {
            for _ in 0..12 {
                slow.push(open(addr, b"GET / HTTP/1.1\r\n"));
            }
            slow.push(open(
                addr,
                b"POST /v1/save HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n",
            ));
        }
        for mut s in slow {
            let mut b = Vec::new();
            // Closed (EOF, or reset), perhaps after an error answer; never held.
            let r = s.read_to_end(&mut b);
            assert!(
                r.is_ok()
                    || r.as_ref()
                        .is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock),
                "{r:?}"
            );
        }
        let took = started.elapsed();
        assert!(took < Duration::from_secs(5), "closed after {took:?}");
        let c = Client::tcp(api.to_string(), Some(token));
        assert_eq!(c.state().unwrap().subsystems.len(), 1);
        let mut s = open(
            metrics,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        let mut b = String::new();
        s.read_to_string(&mut b).unwrap();
        assert!(b.starts_with("HTTP/1.1 200"), "{b}");
        srv.stop();
    }

    /// M1: the API on TCP speaks HTTPS with `tls_cert`/`tls_key`; the client checks the
    /// certificate (a private CA through `ca_file`) and the name.
    #[test]
    fn https_with_a_private_ca() {
        let t = tempfile::tempdir().unwrap();
        let (ca, cert, key) = crate::listen::test_pki::make(t.path(), "good");
        let (other_ca, _, other_key) = crate::listen::test_pki::make(t.path(), "other");
        let token = Token::new("t0k3n-0123456789").unwrap();
        let bind = || bind_api_tcp("127.0.0.1:0".parse().unwrap(), token.clone()).unwrap();
        // Unusable files: an error naming the file.
        let e = bind()
            .with_tls(&t.path().join("none.pem"), &key)
            .unwrap_err();
        assert!(e.to_string().contains("none.pem"), "{e}");
        let e = bind().with_tls(&cert, &other_key).unwrap_err();
        assert!(e.to_string().contains("other-key.pem"), "{e}");

        let l = bind().with_tls(&cert, &key).unwrap();
        assert!(l.is_tls());
        let srv = start(control(), None, None, Some(l)).unwrap();
        let port = srv.api_addr.unwrap().port();
        for url in [
            format!("https://127.0.0.1:{port}"),
            format!("https://localhost:{port}/"),
            format!("127.0.0.1:{port}"),
        ] {
            let c = Client::https(&url, Some(&ca), Some(token.clone())).unwrap();
            assert_eq!(c.state().unwrap().subsystems.len(), 1, "{url}");
            assert!(c.endpoint().starts_with("management API at https://"));
        }
        let c = Client::api(&format!("https://127.0.0.1:{port}"), Some(&ca), None).unwrap();
        assert!(
            matches!(c.state(), Err(ClientError::Api(e)) if e.code == codes::UNAUTHORIZED),
            "the token is still required"
        );
        // Not the CA that signed it, or none (the system's): refused, saying why.
        for ca in [Some(other_ca.as_path()), None] {
            let c = Client::https(
                &format!("https://127.0.0.1:{port}"),
                ca,
                Some(token.clone()),
            )
            .unwrap();
            match c.state() {
                Err(ClientError::Tls(m)) => assert!(m.contains("not trusted"), "{m}"),
                other => panic!("{other:?}"),
            }
        }
        // A name the certificate does not carry (it names 127.0.0.1 and localhost).
        let l2 = bind_api_tcp("127.0.0.2:0".parse().unwrap(), token.clone())
            .unwrap()
            .with_tls(&cert, &key)
            .unwrap();
        let srv2 = start(control(), None, None, Some(l2)).unwrap();
        let c = Client::https(
            &format!("https://{}", srv2.api_addr.unwrap()),
            Some(&ca),
            Some(token.clone()),
        )
        .unwrap();
        match c.state() {
            Err(ClientError::Tls(m)) => assert!(m.contains("not trusted"), "{m}"),
            other => panic!("{other:?}"),
        }
        srv2.stop();
        // Plain HTTP to it: an error, not a hang.
        assert!(
            Client::tcp(format!("127.0.0.1:{port}"), Some(token.clone()))
                .state()
                .is_err()
        );
        // Bad input.
        assert!(Client::https("https://127.0.0.1", None, None).is_err());
        assert!(Client::https("https://h:1/x", None, None).is_err());
        assert!(Client::api("http://127.0.0.1:1", Some(&ca), None).is_err());
        assert!(Client::https("h:1", Some(&t.path().join("none.pem")), None).is_err());
        srv.stop();
    }

    /// M1: a token never goes over plain HTTP to an address that is not loopback unless asked.
    #[test]
    fn no_token_in_clear_beyond_loopback() {
        let token = Token::new("t0k3n-0123456789").unwrap();
        // TEST-NET-1: refused before any connection is tried.
        let c = Client::tcp("192.0.2.1:9651", Some(token.clone()));
        let e = c.state().unwrap_err();
        assert!(matches!(e, ClientError::PlainHttp { .. }), "{e:?}");
        assert!(e.to_string().contains("https://192.0.2.1:9651"), "{e}");
        assert!(e.to_string().contains("--insecure-http"), "{e}");
        let e = Client::api("http://[2001:db8::1]:9651", None, Some(token))
            .unwrap()
            .state()
            .unwrap_err();
        assert!(matches!(e, ClientError::PlainHttp { .. }), "{e:?}");
    }

    /// M3: a socket directory another user made (or can write in) is not served in.
    #[test]
    fn a_socket_directory_others_control_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let t = tempfile::tempdir().unwrap();
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = bind_socket(&open.join("ebof.sock")).unwrap_err();
        assert!(
            matches!(&e, ServerError::UnsafeDirectory { reason, .. } if reason.contains("0777")),
            "{e}"
        );
        assert!(!open.join("ebof.sock").exists());
        // Sticky, as /tmp: nobody can replace our file there.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        drop(bind_socket(&open.join("ebof.sock")).unwrap());
        if euid != 0 {
            eprintln!("skipped: a directory of another uid needs root to chown");
            return;
        }
        let theirs = t.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(12345), Some(12345)).unwrap();
        let e = bind_socket(&theirs.join("ebof.sock")).unwrap_err();
        assert!(
            matches!(&e, ServerError::UnsafeDirectory { reason, .. } if reason.contains("uid 12345")),
            "{e}"
        );
        assert!(!theirs.join("ebof.sock").exists());
        // /tmp/ebof-UID is held to what serve makes: ours and 0700.
        let rt = ebof_api::socket::tmp_runtime_dir(euid);
        if std::fs::DirBuilder::new().create(&rt).is_err() {
            eprintln!("skipped: {} exists already", rt.display());
            return;
        }
        std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o755)).unwrap();
        let strict = check_socket_dir(&rt);
        std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o700)).unwrap();
        let fine = check_socket_dir(&rt);
        std::os::unix::fs::chown(&rt, Some(12345), None).unwrap();
        let foreign = check_socket_dir(&rt);
        let _ = std::fs::remove_dir(&rt);
        assert!(strict.unwrap_err().contains("0755"));
        fine.unwrap();
        assert!(foreign.unwrap_err().contains("another user"));
    }

    #[test]
    fn the_tcp_api_serves_everything_only_with_the_token() {
        let token = Token::new("t0k3n-0123456789").unwrap();
        let l = bind_api_tcp("127.0.0.1:0".parse().unwrap(), token.clone()).unwrap();
        let srv = start(control(), None, None, Some(l)).unwrap();
        let addr = srv.api_addr.unwrap().to_string();

        let ok = Client::tcp(addr.clone(), Some(token));
        assert_eq!(
            ok.state().unwrap().subsystems[0].nqn,
            "nqn.2026-11.io.ebof:t"
        );
        assert!(ok.metrics().unwrap().contains("# TYPE"));
        // Errors of the API itself come through as they do on the socket.
        let (st, _) = ok.raw("GET", "/v2/state", None).unwrap();
        assert_eq!(st, 404);

        let refused = [
            (
                Client::tcp(addr.clone(), None),
                "requires `Authorization: Bearer",
            ),
            (
                Client::tcp(addr.clone(), Some(Token::new("t0k3n-0123456780").unwrap())),
                "not the one",
            ),
            (
                Client::tcp(addr.clone(), Some(Token::new("t0k3n").unwrap())),
                "not the one",
            ),
        ];
        for (c, says) in &refused {
            // Every route, known or not, and /metrics, is behind the token.
            for (method, uri) in [
                ("GET", routes::STATE),
                ("GET", routes::METRICS),
                ("GET", routes::SUPPORT),
                ("GET", "/v2/nothing"),
                ("DELETE", routes::STATE),
                ("POST", routes::SAVE),
            ] {
                let (st, body) = c.raw(method, uri, Some("{}".into())).unwrap();
                let e: ApiError = serde_json::from_slice(&body).unwrap();
                assert_eq!((st, e.code.as_str()), (401, codes::UNAUTHORIZED), "{uri}");
                assert!(e.message.contains(says), "{e}");
            }
            match c.add_subsystem(&api::SubsystemRequest {
                nqn: "nqn.2026-11.io.ebof:new".into(),
                serial: None,
                model: None,
                allow_any_host: None,
            }) {
                Err(ClientError::Api(e)) => assert_eq!(e.code, codes::UNAUTHORIZED),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(ok.state().unwrap().subsystems.len(), 1, "nothing changed");

        // A raw request: the challenge header is there, the token in another scheme is not
        // accepted.
        let raw = |auth: &str| {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            write!(
                s,
                "GET /v1/state HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\n"
            )
            .unwrap();
            let mut r = String::new();
            s.read_to_string(&mut r).unwrap();
            r
        };
        let r = raw("Authorization: Basic t0k3n-0123456789\r\n");
        assert!(r.starts_with("HTTP/1.1 401"), "{r}");
        assert!(
            r.to_ascii_lowercase()
                .contains("www-authenticate: bearer realm=\"ebof\""),
            "{r}"
        );
        let r = raw("authorization: bearer t0k3n-0123456789\r\n");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        srv.stop();

        // Nothing listening: a clear error naming the address.
        let e = Client::tcp(addr.clone(), None).state().unwrap_err();
        assert!(matches!(e, ClientError::Unreachable { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with(&format!("no ebof management API at {addr}: ")),
            "{e}"
        );
    }
}
