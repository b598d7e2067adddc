//! The management server's TCP listeners (the API with its token, and `/metrics`): each
//! connection is bounded in number, in time and, with `[management] tls_cert`/`tls_key`, spoken
//! over TLS (issue 32, review findings M1 and M4; ADR 0008).
//!
//! Anyone who reaches these ports may connect before any token is checked, so what a
//! connection may hold is bounded:
//! - at most [`Limits::max_connections`] at once per listener; one more is closed at accept
//!   (and counted in the log, rate-limited);
//! - a request head must arrive within [`Limits::header_timeout`] of the connection's start or
//!   of the previous response (hyper's header-read timer: an idle keep-alive connection and a
//!   client that sends `GET / HTTP/1.1\r\n` and nothing more are both closed then);
//! - a TLS handshake, a request body, and the peer taking a response, each within
//!   [`Limits::idle_timeout`] (a body is read whole before the handler runs, at most
//!   [`BODY_MAX`] bytes; a write that makes no progress for that long ends the connection).
//!
//! A request being handled is not timed: a snapshot copy may take an hour.
//!
//! The Unix socket is not served here: its mode (0600) admits only the server's own user.

use crate::api::{ApiError, codes};
use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod};
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt;

/// Largest request body read (axum's own JSON limit, which applies after this anyway).
pub const BODY_MAX: usize = 2 << 20;

/// Bounds on the connections of one TCP listener (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// A request head must arrive within this of the connection's start or the last response.
    pub header_timeout: Duration,
    /// TLS handshake, request body, and each write to the peer: no longer than this without
    /// progress.
    pub idle_timeout: Duration,
    /// Connections open at once; more are closed at accept.
    pub max_connections: usize,
}

impl Default for Limits {
    /// 10 s for a request head, 30 s idle, 64 connections: a person's `ebof ctl`, a CSI
    /// controller and Prometheus need far fewer and far less.
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_connections: 64,
        }
    }
}

/// The server side of HTTPS: an OpenSSL acceptor for a PEM certificate (chain) and key.
#[derive(Clone)]
pub struct TlsServer {
    acceptor: Arc<SslAcceptor>,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsServer")
    }
}

impl TlsServer {
    /// Load `cert` (PEM, the server's certificate first, then any intermediates) and `key`
    /// (PEM). TLS 1.2 and 1.3 with Mozilla's intermediate ciphers. The error names the file.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<TlsServer, String> {
        // The OS's word first (missing, unreadable): OpenSSL's error stack says it obscurely.
        for (what, p) in [("tls_cert", cert), ("tls_key", key)] {
            std::fs::File::open(p)
                .map_err(|e| format!("management {what} {}: {e}", p.display()))?;
        }
        let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server())
            .map_err(|e| format!("TLS: {e}"))?;
        b.set_certificate_chain_file(cert).map_err(|e| {
            format!(
                "management tls_cert {}: not a PEM certificate chain: {e}",
                cert.display()
            )
        })?;
        b.set_private_key_file(key, SslFiletype::PEM).map_err(|e| {
            format!(
                "management tls_key {}: {e} (a PEM key, the one of tls_cert {}?)",
                key.display(),
                cert.display()
            )
        })?;
        b.check_private_key().map_err(|e| {
            format!(
                "management tls_key {} does not match tls_cert {}: {e}",
                key.display(),
                cert.display()
            )
        })?;
        Ok(TlsServer {
            acceptor: Arc::new(b.build()),
        })
    }
}

/// Serve `app` on `l` within `limits` (over TLS with `tls`) until `stop` turns true; then
/// every connection is asked to finish after its request in progress.
pub(crate) async fn serve(
    l: TcpListener,
    app: Router,
    tls: Option<TlsServer>,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
    what: &'static str,
) {
    let app = app.layer(axum::middleware::from_fn_with_state(
        limits.idle_timeout,
        whole_body,
    ));
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let full_log = crate::auth::RateLimit::new(Duration::from_secs(10));
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            r = l.accept() => r,
            _ = async { stop.wait_for(|v| *v).await.is_ok() } => break,
        };
        while conns.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of descriptors, typically: back off rather than spin.
                tracing::warn!(error = %e, "management {what} endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if let Some(suppressed) = full_log.event(std::time::Instant::now()) {
                tracing::warn!(
                    %peer,
                    max = limits.max_connections,
                    suppressed,
                    "management {what} endpoint: connection refused, as many are open as allowed"
                );
            }
            drop(stream);
            continue;
        };
        let (app, tls, stop) = (app.clone(), tls.clone(), stop.clone());
        conns.spawn(async move {
            let _slot = slot;
            connection(stream, peer, app, tls, limits, stop).await;
        });
    }
    while conns.join_next().await.is_some() {}
}

/// One connection: the TLS handshake if any, then HTTP/1.1 until either side ends it.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    tls: Option<TlsServer>,
    limits: Limits,
    stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let Some(tls) = tls else {
        return http(
            Stalled::new(stream, limits.idle_timeout),
            peer,
            app,
            limits,
            stop,
        )
        .await;
    };
    let ssl = match openssl::ssl::Ssl::new(tls.acceptor.context()) {
        Ok(s) => s,
        Err(e) => return tracing::warn!(error = %e, "management API: TLS session not made"),
    };
    let Ok(mut s) = tokio_openssl::SslStream::new(ssl, stream) else {
        return;
    };
    match tokio::time::timeout(limits.idle_timeout, Pin::new(&mut s).accept()).await {
        Ok(Ok(())) => {
            http(
                Stalled::new(s, limits.idle_timeout),
                peer,
                app,
                limits,
                stop,
            )
            .await
        }
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "management API: TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "management API: TLS handshake timed out"),
    }
}

async fn http<S>(
    io: Stalled<S>,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let mut req = req.map(axum::body::Body::new);
        req.extensions_mut().insert(ConnectInfo(peer));
        app.clone().oneshot(req)
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = async { stop.wait_for(|v| *v).await.is_ok() } => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.idle_timeout, conn).await;
        }
    }
}

/// Read the request body whole, within the idle timeout and [`BODY_MAX`], before the handler
/// runs: a client that sends a head and then trickles (or withholds) its body holds nothing.
async fn whole_body(
    axum::extract::State(within): axum::extract::State<Duration>,
    req: Request,
    next: Next,
) -> Response {
    let (parts, body) = req.into_parts();
    let limited = http_body_util::Limited::new(body, BODY_MAX);
    match tokio::time::timeout(within, limited.collect()).await {
        Ok(Ok(b)) => {
            next.run(Request::from_parts(
                parts,
                axum::body::Body::from(b.to_bytes()),
            ))
            .await
        }
        Ok(Err(e)) => refuse(format!("the request body could not be read: {e}")),
        Err(_) => refuse(format!(
            "the request body did not arrive within {} s",
            within.as_secs()
        )),
    }
}

fn refuse(message: String) -> Response {
    let e = ApiError::new(codes::BAD_REQUEST, "", message);
    let mut r = axum::Json(e).into_response();
    *r.status_mut() = axum::http::StatusCode::BAD_REQUEST;
    r.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    r
}

/// A stream whose writes fail with `TimedOut` once one has made no progress for `limit` (a
/// peer that does not take its responses).
struct Stalled<S> {
    inner: S,
    limit: Duration,
    since: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> Stalled<S> {
    fn new(inner: S, limit: Duration) -> Stalled<S> {
        Stalled {
            inner,
            limit,
            since: None,
        }
    }

    /// `r` of a write or flush: progress clears the timer; pending arms it (and fails once it
    /// has run out).
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if r.is_ready() {
            self.since = None;
            return r;
        }
        let limit = self.limit;
        let t = self
            .since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match t.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the peer took nothing for too long",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Stalled<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Stalled<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, r)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, r)
    }
}

/// Certificates for tests: a private CA and a server certificate it signed for `127.0.0.1`
/// and `localhost`.
#[cfg(test)]
pub(crate) mod test_pki {
    use openssl::asn1::Asn1Time;
    use openssl::bn::BigNum;
    use openssl::ec::{EcGroup, EcKey};
    use openssl::hash::MessageDigest;
    use openssl::nid::Nid;
    use openssl::pkey::{PKey, Private};
    use openssl::x509::extension::{BasicConstraints, KeyUsage, SubjectAlternativeName};
    use openssl::x509::{X509, X509NameBuilder};
    use std::path::{Path, PathBuf};

    fn key() -> PKey<Private> {
        let g = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
        PKey::from_ec_key(EcKey::generate(&g).unwrap()).unwrap()
    }

    fn cert(cn: &str, key: &PKey<Private>, issuer: Option<(&X509, &PKey<Private>)>) -> X509 {
        let mut name = X509NameBuilder::new().unwrap();
        name.append_entry_by_text("CN", cn).unwrap();
        let name = name.build();
        let mut b = X509::builder().unwrap();
        b.set_version(2).unwrap();
        let serial = BigNum::from_u32(rand_u32())
            .unwrap()
            .to_asn1_integer()
            .unwrap();
        b.set_serial_number(&serial).unwrap();
        b.set_subject_name(&name).unwrap();
        b.set_issuer_name(issuer.map_or(&*name, |(c, _)| c.subject_name()))
            .unwrap();
        b.set_pubkey(key).unwrap();
        b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        b.set_not_after(&Asn1Time::days_from_now(2).unwrap())
            .unwrap();
        match issuer {
            None => {
                b.append_extension(BasicConstraints::new().critical().ca().build().unwrap())
                    .unwrap();
                b.append_extension(
                    KeyUsage::new()
                        .critical()
                        .key_cert_sign()
                        .crl_sign()
                        .build()
                        .unwrap(),
                )
                .unwrap();
            }
            Some((ca, _)) => {
                let san = SubjectAlternativeName::new()
                    .ip("127.0.0.1")
                    .dns("localhost")
                    .build(&b.x509v3_context(Some(ca), None))
                    .unwrap();
                b.append_extension(san).unwrap();
            }
        }
        b.sign(issuer.map_or(key, |(_, k)| k), MessageDigest::sha256())
            .unwrap();
        b.build()
    }

    fn rand_u32() -> u32 {
        let mut r = [0u8; 4];
        getrandom::fill(&mut r).unwrap();
        u32::from_ne_bytes(r) >> 1
    }

    /// `(ca.pem, cert.pem, key.pem)` in `dir`, named with `prefix`.
    pub(crate) fn make(dir: &Path, prefix: &str) -> (PathBuf, PathBuf, PathBuf) {
        let ca_key = key();
        let ca = cert(&format!("{prefix} test CA"), &ca_key, None);
        let k = key();
        let c = cert("ebof test server", &k, Some((&ca, &ca_key)));
        let paths = (
            dir.join(format!("{prefix}-ca.pem")),
            dir.join(format!("{prefix}-cert.pem")),
            dir.join(format!("{prefix}-key.pem")),
        );
        std::fs::write(&paths.0, ca.to_pem().unwrap()).unwrap();
        std::fs::write(&paths.1, c.to_pem().unwrap()).unwrap();
        std::fs::write(&paths.2, k.private_key_to_pem_pkcs8().unwrap()).unwrap();
        paths
    }
}
