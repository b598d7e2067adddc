//! A blocking client of the management API (what `ebof ctl` uses): one HTTP/1.1 request per
//! call over the Unix socket, or over TCP with a bearer token, as HTTPS ([`Client::https`]) or
//! plain HTTP ([`Client::tcp`]), each bounded by [`REQUEST_TIMEOUT`].
//!
//! **The token and plain HTTP.** A token is sent over plain HTTP only to a loopback address
//! (where nobody else sees it), unless [`Client::allow_plain_http`] says otherwise (`ebof ctl
//! --insecure-http`, `EBOF_ALLOW_PLAIN_HTTP=1`): anyone on the path could take it and be the
//! box's administrator. Otherwise the request fails with [`ClientError::PlainHttp`] before a
//! byte is sent.

use crate::ApiError;
use crate::token::Token;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use openssl::ssl::{SslConnector, SslMethod};
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

mod calls;

/// Bound on one request, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on a snapshot or clone request: where the file system has no reflinks the data is
/// copied, which takes time in proportion to the namespace's size.
pub const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(3600);

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answers at the socket.
    #[error("no ebof serve at {}: {source} (is it running? `ebof serve` prints its management socket; pass it with --socket)", path.display())]
    NotRunning {
        /// The socket path tried.
        path: PathBuf,
        /// The connect error.
        #[source]
        source: std::io::Error,
    },
    /// Nothing answers at the TCP address.
    #[error(
        "no ebof management API at {addr}: {source} (is ebof serve running with --mgmt-listen {addr}, and is the address reachable from here? On its machine, --socket needs no token)"
    )]
    Unreachable {
        /// The `HOST:PORT` tried.
        addr: String,
        /// The connect error.
        #[source]
        source: std::io::Error,
    },
    /// A token would have gone over plain HTTP to an address that is not loopback.
    #[error(
        "refusing to send the management token over plain HTTP to {addr} ({peer} is not a loopback address): use https://{addr} (ebof serve with [management] tls_cert and tls_key), or, on a network you trust, --insecure-http (EBOF_ALLOW_PLAIN_HTTP=1)"
    )]
    PlainHttp {
        /// The `HOST:PORT` asked for.
        addr: String,
        /// The address it reached.
        peer: std::net::IpAddr,
    },
    /// HTTPS could not be set up or the server's certificate was not accepted.
    #[error("{0}")]
    Tls(String),
    /// The server refused the request.
    #[error("{0}")]
    Api(ApiError),
    /// The exchange itself failed (timeout, broken connection, an answer that is not ours).
    #[error("{endpoint}: {message}")]
    Transport {
        /// The server as a person would name it (socket path or API address).
        endpoint: String,
        /// What went wrong.
        message: String,
    },
}

/// Where the server is.
#[derive(Debug, Clone)]
enum Endpoint {
    /// The Unix socket (no token: its file mode guards it).
    Unix(PathBuf),
    /// `HOST:PORT` of `[management] listen`, with the bearer token to present, over TLS with
    /// `tls`.
    Tcp {
        addr: String,
        token: Option<Token>,
        tls: Option<TlsClient>,
        allow_plain_http: bool,
    },
}

/// The client side of HTTPS: the certificates trusted and the name the server's must carry.
#[derive(Clone)]
struct TlsClient {
    connector: Arc<SslConnector>,
    host: String,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("host", &self.host)
            .finish()
    }
}

/// A client bound to one server (its socket path, or its TCP address and token).
#[derive(Debug, Clone)]
pub struct Client {
    endpoint: Endpoint,
}

/// `HOST:PORT` of `https://HOST:PORT[/]` or `HOST:PORT`; the host alone (brackets of an IPv6
/// literal removed) for the certificate check.
fn split_authority(addr: &str) -> Result<(String, String), ClientError> {
    let bad = || {
        ClientError::Tls(format!(
            "{addr:?} is not HOST:PORT or https://HOST:PORT (the management API's address)"
        ))
    };
    let a = addr.strip_prefix("https://").unwrap_or(addr);
    let a = a.strip_suffix('/').unwrap_or(a);
    if a.is_empty() || a.contains('/') {
        return Err(bad());
    }
    let host = match a.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => h,
        _ => return Err(bad()),
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Ok((a.to_string(), host.to_string()))
}

impl Client {
    /// A client of the server on the Unix socket `path`.
    pub fn new(path: impl Into<PathBuf>) -> Client {
        Client {
            endpoint: Endpoint::Unix(path.into()),
        }
    }

    /// A client of the server listening on TCP at `addr` (`ADDR:PORT` or `HOST:PORT`) over
    /// plain HTTP, presenting `token` (`None`: no `Authorization` header, which that server
    /// refuses). The token goes only to a loopback address unless
    /// [`Client::allow_plain_http`].
    pub fn tcp(addr: impl Into<String>, token: Option<Token>) -> Client {
        Client {
            endpoint: Endpoint::Tcp {
                addr: addr.into(),
                token,
                tls: None,
                allow_plain_http: false,
            },
        }
    }

    /// A client of the server speaking HTTPS at `addr` (`https://HOST:PORT` or `HOST:PORT`),
    /// presenting `token`. The server's certificate must chain to the system's trusted
    /// certificates, or to those of `ca_file` (PEM: a private CA) when given, and name `HOST`
    /// (a DNS name, or an IP address in its subjectAltName). TLS 1.2 or later.
    pub fn https(
        addr: &str,
        ca_file: Option<&Path>,
        token: Option<Token>,
    ) -> Result<Client, ClientError> {
        let (authority, host) = split_authority(addr)?;
        let mut b = SslConnector::builder(SslMethod::tls_client())
            .map_err(|e| ClientError::Tls(format!("TLS: {e}")))?;
        b.set_min_proto_version(Some(openssl::ssl::SslVersion::TLS1_2))
            .map_err(|e| ClientError::Tls(format!("TLS: {e}")))?;
        if let Some(ca) = ca_file {
            if !ca.is_file() {
                return Err(ClientError::Tls(format!(
                    "CA file {}: not a readable file",
                    ca.display()
                )));
            }
            b.set_ca_file(ca).map_err(|e| {
                ClientError::Tls(format!(
                    "CA file {}: not PEM certificates: {e}",
                    ca.display()
                ))
            })?;
        }
        Ok(Client {
            endpoint: Endpoint::Tcp {
                addr: authority,
                token,
                tls: Some(TlsClient {
                    connector: Arc::new(b.build()),
                    host,
                }),
                allow_plain_http: false,
            },
        })
    }

    /// The client `api` names: `https://HOST:PORT` ([`Client::https`], with `ca_file`), else
    /// `http://HOST:PORT` or `HOST:PORT` over plain HTTP ([`Client::tcp`]; a `ca_file` is then
    /// an error: it would be ignored).
    pub fn api(
        api: &str,
        ca_file: Option<&Path>,
        token: Option<Token>,
    ) -> Result<Client, ClientError> {
        if api.starts_with("https://") {
            return Client::https(api, ca_file, token);
        }
        let addr = api.strip_prefix("http://").unwrap_or(api);
        let addr = addr.strip_suffix('/').unwrap_or(addr);
        if let Some(ca) = ca_file {
            return Err(ClientError::Tls(format!(
                "a CA file ({}) is for HTTPS: write the address as https://{addr}",
                ca.display()
            )));
        }
        Ok(Client::tcp(addr, token))
    }

    /// Whether a token may go over plain HTTP to an address that is not loopback (see the
    /// module docs). Off by default; no effect on HTTPS or the Unix socket.
    pub fn allow_plain_http(mut self, allow: bool) -> Client {
        if let Endpoint::Tcp {
            allow_plain_http, ..
        } = &mut self.endpoint
        {
            *allow_plain_http = allow;
        }
        self
    }

    /// Where this client sends its requests, for messages.
    pub fn endpoint(&self) -> String {
        match &self.endpoint {
            Endpoint::Unix(p) => format!("management socket {}", p.display()),
            Endpoint::Tcp {
                addr, tls: None, ..
            } => format!("management API at {addr}"),
            Endpoint::Tcp { addr, .. } => format!("management API at https://{addr}"),
        }
    }

    /// Send a raw request (for tests and tools): the status and body as they came.
    pub fn raw(
        &self,
        method: &str,
        uri: &str,
        body: Option<String>,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        let m = Method::from_bytes(method.as_bytes())
            .map_err(|_| self.transport(format!("bad method {method:?}")))?;
        self.request(m, uri, body)
    }

    fn transport(&self, message: impl Into<String>) -> ClientError {
        ClientError::Transport {
            endpoint: self.endpoint(),
            message: message.into(),
        }
    }

    fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        uri: &str,
        body: Option<String>,
    ) -> Result<T, ClientError> {
        self.json_within(method, uri, body, REQUEST_TIMEOUT)
    }

    fn json_within<T: DeserializeOwned>(
        &self,
        method: Method,
        uri: &str,
        body: Option<String>,
        timeout: Duration,
    ) -> Result<T, ClientError> {
        let (status, bytes) = self.request_within(method, uri, body, timeout)?;
        if (200..300).contains(&status) {
            serde_json::from_slice(&bytes)
                .map_err(|e| self.transport(format!("unexpected answer to {uri}: {e}")))
        } else {
            match serde_json::from_slice::<ApiError>(&bytes) {
                Ok(e) => Err(ClientError::Api(e)),
                Err(_) => Err(self.transport(format!(
                    "HTTP {status} from {uri}: {}",
                    String::from_utf8_lossy(&bytes)
                ))),
            }
        }
    }

    fn request(
        &self,
        method: Method,
        uri: &str,
        body: Option<String>,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        self.request_within(method, uri, body, REQUEST_TIMEOUT)
    }

    fn request_within(
        &self,
        method: Method,
        uri: &str,
        body: Option<String>,
        timeout: Duration,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| self.transport(format!("runtime: {e}")))?;
        rt.block_on(async {
            tokio::time::timeout(timeout, self.exchange(method, uri, body))
                .await
                .unwrap_or_else(|_| Err(self.transport(format!("no answer within {timeout:?}"))))
        })
    }

    async fn exchange(
        &self,
        method: Method,
        uri: &str,
        body: Option<String>,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        match &self.endpoint {
            Endpoint::Unix(path) => {
                // Our /tmp/ebof-UID made by someone else: whoever listens there is not serve.
                // SAFETY: geteuid has no preconditions and cannot fail.
                let euid = unsafe { libc::geteuid() };
                if let Some(dir) = path.parent()
                    && dir == crate::socket::tmp_runtime_dir(euid)
                    && std::fs::symlink_metadata(dir).is_ok()
                    && let Err(why) = crate::socket::check_socket_dir(dir)
                {
                    return Err(self.transport(format!(
                        "not connecting: the socket's directory {}: {why}",
                        dir.display()
                    )));
                }
                let stream = tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(|source| ClientError::NotRunning {
                        path: path.clone(),
                        source,
                    })?;
                self.send(stream, "ebof", None, method, uri, body).await
            }
            Endpoint::Tcp {
                addr,
                token,
                tls,
                allow_plain_http,
            } => {
                let unreachable = |source| ClientError::Unreachable {
                    addr: addr.clone(),
                    source,
                };
                let peers: Vec<std::net::SocketAddr> = tokio::net::lookup_host(addr.as_str())
                    .await
                    .map_err(unreachable)?
                    .collect();
                // Decided before a connection is made: the token never leaves in clear.
                if tls.is_none()
                    && token.is_some()
                    && !allow_plain_http
                    && let Some(p) = peers.iter().find(|p| !p.ip().to_canonical().is_loopback())
                {
                    return Err(ClientError::PlainHttp {
                        addr: addr.clone(),
                        peer: p.ip(),
                    });
                }
                let stream = tokio::net::TcpStream::connect(&peers[..])
                    .await
                    .map_err(unreachable)?;
                let _ = stream.set_nodelay(true);
                let Some(tls) = tls else {
                    return self
                        .send(stream, addr, token.as_ref(), method, uri, body)
                        .await;
                };
                let ssl = tls
                    .connector
                    .configure()
                    .and_then(|c| c.into_ssl(&tls.host))
                    .map_err(|e| ClientError::Tls(format!("TLS to {addr}: {e}")))?;
                let mut s = tokio_openssl::SslStream::new(ssl, stream)
                    .map_err(|e| ClientError::Tls(format!("TLS to {addr}: {e}")))?;
                if let Err(e) = std::pin::Pin::new(&mut s).connect().await {
                    let verify = s.ssl().verify_result();
                    let why = if verify == openssl::x509::X509VerifyResult::OK {
                        e.to_string()
                    } else {
                        format!(
                            "the server's certificate is not trusted: {} (a private CA? pass it with --ca-file)",
                            verify.error_string()
                        )
                    };
                    return Err(ClientError::Tls(format!(
                        "TLS handshake with https://{addr}: {why}"
                    )));
                }
                self.send(s, addr, token.as_ref(), method, uri, body).await
            }
        }
    }

    /// One request on a connected `stream` (Unix or TCP alike).
    async fn send<S>(
        &self,
        stream: S,
        host: &str,
        token: Option<&Token>,
        method: Method,
        uri: &str,
        body: Option<String>,
    ) -> Result<(u16, Vec<u8>), ClientError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.transport(e.to_string()))?;
        let conn = tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header(hyper::header::HOST, host);
        if let Some(t) = token {
            let mut v = hyper::header::HeaderValue::try_from(format!("Bearer {}", t.expose()))
                .map_err(|_| self.transport("the token cannot be sent in a header"))?;
            v.set_sensitive(true);
            req = req.header(hyper::header::AUTHORIZATION, v);
        }
        if body.is_some() {
            req = req.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| self.transport(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| self.transport(e.to_string()))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| self.transport(e.to_string()))?
            .to_bytes();
        conn.abort();
        Ok((status, bytes.to_vec()))
    }
}
