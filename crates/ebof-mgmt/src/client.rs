//! A blocking client of the management API (what `ebof ctl` uses): one HTTP/1.1 request per
//! call over the Unix socket, or over TCP with a bearer token ([`Client::tcp`]), each bounded by
//! [`REQUEST_TIMEOUT`].

use crate::api::{
    AllowAnyHostRequest, ApiError, Disconnected, HostRequest, ListenerRemoved, ListenerRequest,
    ListenerView, NamespaceChanged, NamespaceRemoved, NamespaceRequest, ResizeRequest, SaveRequest,
    Saved, State, Stats, SubsystemRemoved, SubsystemRequest, SubsystemView, routes,
};
use crate::auth::Token;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

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
    /// `HOST:PORT` of `[management] listen`, with the bearer token to present.
    Tcp { addr: String, token: Option<Token> },
}

/// A client bound to one server (its socket path, or its TCP address and token).
#[derive(Debug, Clone)]
pub struct Client {
    endpoint: Endpoint,
}

impl Client {
    /// A client of the server on the Unix socket `path`.
    pub fn new(path: impl Into<PathBuf>) -> Client {
        Client {
            endpoint: Endpoint::Unix(path.into()),
        }
    }

    /// A client of the server listening on TCP at `addr` (`ADDR:PORT` or `HOST:PORT`),
    /// presenting `token` (`None`: no `Authorization` header, which that server refuses).
    pub fn tcp(addr: impl Into<String>, token: Option<Token>) -> Client {
        Client {
            endpoint: Endpoint::Tcp {
                addr: addr.into(),
                token,
            },
        }
    }

    /// Where this client sends its requests, for messages.
    pub fn endpoint(&self) -> String {
        match &self.endpoint {
            Endpoint::Unix(p) => format!("management socket {}", p.display()),
            Endpoint::Tcp { addr, .. } => format!("management API at {addr}"),
        }
    }

    /// `GET /v1/state`: subsystems, listeners, controllers and ANA states.
    pub fn state(&self) -> Result<State, ClientError> {
        self.json(Method::GET, routes::STATE, None)
    }

    /// `GET /v1/stats`: namespace and connection counters.
    pub fn stats(&self) -> Result<Stats, ClientError> {
        self.json(Method::GET, routes::STATS, None)
    }

    /// The Prometheus text exposition.
    pub fn metrics(&self) -> Result<String, ClientError> {
        let (_, body) = self.request(Method::GET, routes::METRICS, None)?;
        String::from_utf8(body).map_err(|_| self.transport("metrics are not UTF-8"))
    }

    /// `POST /v1/subsystems`: create a subsystem without namespaces.
    pub fn add_subsystem(&self, req: &SubsystemRequest) -> Result<SubsystemView, ClientError> {
        self.json(Method::POST, routes::SUBSYSTEMS, Some(to_json(req)))
    }

    /// `DELETE /v1/subsystems/{nqn}`: remove a subsystem, disconnecting its controllers.
    pub fn remove_subsystem(&self, nqn: &str) -> Result<SubsystemRemoved, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::SUBSYSTEM, &[nqn]),
            None,
        )
    }

    /// `POST /v1/subsystems/{nqn}/hosts`: allow host `hostnqn` to connect.
    pub fn allow_host(&self, nqn: &str, hostnqn: &str) -> Result<SubsystemView, ClientError> {
        let body = to_json(&HostRequest {
            hostnqn: hostnqn.into(),
        });
        self.json(
            Method::POST,
            &routes::fill(routes::HOSTS, &[nqn]),
            Some(body),
        )
    }

    /// `DELETE /v1/subsystems/{nqn}/hosts/{hostnqn}`: refuse new Connects of
    /// `hostnqn` (its existing controllers stay).
    pub fn deny_host(&self, nqn: &str, hostnqn: &str) -> Result<SubsystemView, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::HOST, &[nqn, hostnqn]),
            None,
        )
    }

    /// `PUT /v1/subsystems/{nqn}/allow_any_host`: open the subsystem to any host, or close it.
    pub fn set_allow_any_host(&self, nqn: &str, on: bool) -> Result<SubsystemView, ClientError> {
        let body = to_json(&AllowAnyHostRequest { allow_any_host: on });
        self.json(
            Method::PUT,
            &routes::fill(routes::ALLOW_ANY_HOST, &[nqn]),
            Some(body),
        )
    }

    /// `DELETE /v1/controllers/{cntlid}`: tear down a controller and its queues.
    pub fn disconnect(&self, cntlid: &str) -> Result<Disconnected, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::CONTROLLER, &[cntlid]),
            None,
        )
    }

    /// Add a namespace to subsystem `nqn`.
    pub fn add_namespace(
        &self,
        nqn: &str,
        req: &NamespaceRequest,
    ) -> Result<NamespaceChanged, ClientError> {
        self.json(
            Method::POST,
            &routes::fill(routes::NAMESPACES, &[nqn]),
            Some(to_json(req)),
        )
    }

    /// Remove namespace `nsid` of `nqn`.
    pub fn remove_namespace(&self, nqn: &str, nsid: &str) -> Result<NamespaceRemoved, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::NAMESPACE, &[nqn, nsid]),
            None,
        )
    }

    /// `PUT …/namespaces/{nsid}/hosts`: only `hosts` see namespace `nsid` of `nqn`.
    pub fn set_namespace_hosts(
        &self,
        nqn: &str,
        nsid: &str,
        hosts: &[String],
    ) -> Result<NamespaceChanged, ClientError> {
        let body = to_json(&crate::api::NamespaceHostsRequest {
            hosts: hosts.to_vec(),
        });
        self.json(
            Method::PUT,
            &routes::fill(routes::NAMESPACE_HOSTS, &[nqn, nsid]),
            Some(body),
        )
    }

    /// `DELETE …/namespaces/{nsid}/hosts`: namespace `nsid` of `nqn` visible to every host
    /// the subsystem admits again.
    pub fn unmask_namespace(&self, nqn: &str, nsid: &str) -> Result<NamespaceChanged, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::NAMESPACE_HOSTS, &[nqn, nsid]),
            None,
        )
    }

    /// `PUT …/namespaces/{nsid}/qos`: namespace `nsid` of `nqn` gets the limits `req`
    /// (replacing any it had; a key not given is unlimited).
    pub fn set_namespace_qos(
        &self,
        nqn: &str,
        nsid: &str,
        req: &crate::api::QosRequest,
    ) -> Result<NamespaceChanged, ClientError> {
        self.json(
            Method::PUT,
            &routes::fill(routes::NAMESPACE_QOS, &[nqn, nsid]),
            Some(to_json(req)),
        )
    }

    /// `DELETE …/namespaces/{nsid}/qos`: namespace `nsid` of `nqn` unlimited again.
    pub fn clear_namespace_qos(
        &self,
        nqn: &str,
        nsid: &str,
    ) -> Result<NamespaceChanged, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::NAMESPACE_QOS, &[nqn, nsid]),
            None,
        )
    }

    /// `POST …/namespaces/{nsid}/hosts`: host `hostnqn` sees namespace `nsid` of `nqn` too.
    pub fn attach_namespace_host(
        &self,
        nqn: &str,
        nsid: &str,
        hostnqn: &str,
    ) -> Result<NamespaceChanged, ClientError> {
        let body = to_json(&HostRequest {
            hostnqn: hostnqn.into(),
        });
        self.json(
            Method::POST,
            &routes::fill(routes::NAMESPACE_HOSTS, &[nqn, nsid]),
            Some(body),
        )
    }

    /// `DELETE …/namespaces/{nsid}/hosts/{hostnqn}`: host `hostnqn` no longer sees namespace
    /// `nsid` of `nqn`.
    pub fn detach_namespace_host(
        &self,
        nqn: &str,
        nsid: &str,
        hostnqn: &str,
    ) -> Result<NamespaceChanged, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::NAMESPACE_HOST, &[nqn, nsid, hostnqn]),
            None,
        )
    }

    /// Resize namespace `nsid` of `nqn`.
    pub fn resize_namespace(
        &self,
        nqn: &str,
        nsid: &str,
        req: &ResizeRequest,
    ) -> Result<NamespaceChanged, ClientError> {
        self.json(
            Method::PUT,
            &routes::fill(routes::NAMESPACE_SIZE, &[nqn, nsid]),
            Some(to_json(req)),
        )
    }

    /// Start listening on a new address.
    pub fn add_listener(&self, req: &ListenerRequest) -> Result<ListenerView, ClientError> {
        self.json(Method::POST, routes::LISTENERS, Some(to_json(req)))
    }

    /// Stop listening on `address` (`ADDR:PORT`); with `disconnect`, also end the controllers
    /// that came in through it.
    pub fn remove_listener(
        &self,
        address: &str,
        disconnect: bool,
    ) -> Result<ListenerRemoved, ClientError> {
        let mut uri = routes::fill(routes::LISTENER, &[address]);
        if disconnect {
            uri.push_str("?disconnect=true");
        }
        self.json(Method::DELETE, &uri, None)
    }

    /// Set the ANA state of a group on a listener.
    pub fn set_ana(
        &self,
        req: &crate::api::AnaRequest,
    ) -> Result<crate::api::AnaChanged, ClientError> {
        self.json(Method::PUT, routes::ANA, Some(to_json(req)))
    }

    /// What is published over mDNS.
    pub fn mdns(&self) -> Result<crate::api::MdnsView, ClientError> {
        self.json(Method::GET, routes::MDNS, None)
    }

    /// Set the mDNS mode (`on`, `off` or `auto`).
    pub fn set_mdns(
        &self,
        req: &crate::api::MdnsRequest,
    ) -> Result<crate::api::MdnsView, ClientError> {
        self.json(Method::PUT, routes::MDNS, Some(to_json(req)))
    }

    /// The referrals served.
    pub fn referrals(&self) -> Result<crate::api::Referrals, ClientError> {
        self.json(Method::GET, routes::REFERRALS, None)
    }

    /// Refer hosts to the discovery service at `address` (`ADDR[:PORT]`, port 8009).
    pub fn add_referral(&self, address: &str) -> Result<crate::api::Referrals, ClientError> {
        let req = crate::api::ReferralRequest {
            address: address.to_string(),
        };
        self.json(Method::POST, routes::REFERRALS, Some(to_json(&req)))
    }

    /// Stop referring hosts to `address`.
    pub fn remove_referral(&self, address: &str) -> Result<crate::api::Referrals, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::REFERRAL, &[address]),
            None,
        )
    }

    /// The Central Discovery Controller and its members.
    pub fn cdc(&self) -> Result<crate::api::CdcView, ClientError> {
        self.json(Method::GET, routes::CDC, None)
    }

    /// Add a member (`ADDR[:PORT]`) to the Central Discovery Controller.
    pub fn add_cdc_member(&self, address: &str) -> Result<crate::api::CdcMemberView, ClientError> {
        let req = crate::api::CdcMemberRequest {
            address: address.to_string(),
        };
        self.json(Method::POST, routes::CDC_MEMBERS, Some(to_json(&req)))
    }

    /// Who may announce itself to the Central Discovery Controller.
    pub fn cdc_trusted(&self) -> Result<crate::api::CdcTrusted, ClientError> {
        self.json(Method::GET, routes::CDC_TRUSTED, None)
    }

    /// Replace who may announce itself to the Central Discovery Controller.
    pub fn set_cdc_trusted(
        &self,
        trusted: &[String],
    ) -> Result<crate::api::CdcTrusted, ClientError> {
        let req = crate::api::CdcTrusted {
            trusted: trusted.to_vec(),
        };
        self.json(Method::PUT, routes::CDC_TRUSTED, Some(to_json(&req)))
    }

    /// Remove member `address` from the Central Discovery Controller.
    pub fn remove_cdc_member(&self, address: &str) -> Result<crate::api::CdcView, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::CDC_MEMBER, &[address]),
            None,
        )
    }

    /// The DIM registrations hosts made.
    pub fn registrations(&self) -> Result<Vec<crate::api::DimRegistrationView>, ClientError> {
        self.json(Method::GET, routes::REGISTRATIONS, None)
    }

    /// `POST /v1/subsystems/{nqn}/namespaces/{nsid}/snapshots`: snapshot a file namespace.
    pub fn snapshot_namespace(
        &self,
        nqn: &str,
        nsid: &str,
        name: &str,
    ) -> Result<crate::api::SnapshotView, ClientError> {
        let req = crate::api::SnapshotRequest {
            name: name.to_string(),
        };
        self.json_within(
            Method::POST,
            &routes::fill(routes::NAMESPACE_SNAPSHOTS, &[nqn, nsid]),
            Some(to_json(&req)),
            SNAPSHOT_TIMEOUT,
        )
    }

    /// `GET /v1/snapshots`: every snapshot.
    pub fn snapshots(&self) -> Result<Vec<crate::api::SnapshotView>, ClientError> {
        self.json(Method::GET, routes::SNAPSHOTS, None)
    }

    /// `DELETE /v1/snapshots/{name}`.
    pub fn delete_snapshot(&self, name: &str) -> Result<crate::api::SnapshotDeleted, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::SNAPSHOT, &[name]),
            None,
        )
    }

    /// `POST /v1/snapshots/{name}/clones`: a writable clone added as a namespace.
    pub fn clone_snapshot(
        &self,
        name: &str,
        req: &crate::api::CloneRequest,
    ) -> Result<crate::api::CloneMade, ClientError> {
        self.json_within(
            Method::POST,
            &routes::fill(routes::SNAPSHOT_CLONES, &[name]),
            Some(to_json(req)),
            SNAPSHOT_TIMEOUT,
        )
    }

    /// `GET /v1/pools`: every storage pool with its accounting.
    pub fn pools(&self) -> Result<Vec<crate::api::PoolView>, ClientError> {
        self.json(Method::GET, routes::POOLS, None)
    }

    /// Write the running configuration.
    pub fn save(&self, req: &SaveRequest) -> Result<Saved, ClientError> {
        self.json(Method::POST, routes::SAVE, Some(to_json(req)))
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
                    && dir == crate::server::tmp_runtime_dir(euid)
                    && std::fs::symlink_metadata(dir).is_ok()
                    && let Err(why) = crate::server::check_socket_dir(dir)
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
            Endpoint::Tcp { addr, token } => {
                let stream = tokio::net::TcpStream::connect(addr.as_str())
                    .await
                    .map_err(|source| ClientError::Unreachable {
                        addr: addr.clone(),
                        source,
                    })?;
                let _ = stream.set_nodelay(true);
                self.send(stream, addr, token.as_ref(), method, uri, body)
                    .await
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

fn to_json<T: serde::Serialize>(v: &T) -> String {
    // Our request types serialise infallibly (strings and booleans only).
    serde_json::to_string(v).unwrap_or_default()
}
