//! The management API's routes and their handlers: each handler takes the request's path and
//! body, runs the [`Control`] method of that request (on the blocking pool when it may touch
//! storage), and answers its result as JSON, an [`ApiError`] with its HTTP status otherwise.
//! [`crate::server`] serves [`router`] on the Unix socket and, behind the bearer token, on TCP.

use crate::api::{
    self, AllowAnyHostRequest, ApiError, HostRequest, ListenerRemoveQuery, ListenerRequest,
    NamespaceRequest, ResizeRequest, SaveRequest, SubsystemRequest, codes, routes,
};
use crate::control::Control;
use crate::metrics;
use axum::Router;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use std::sync::Arc;
type Ctx = Arc<Control>;

/// The API's routes (the Unix socket serves all of them).
pub fn router(ctx: Ctx) -> Router {
    Router::new()
        .route(routes::SUBSYSTEMS, post(post_subsystem))
        .route(routes::SUBSYSTEM, delete(delete_subsystem))
        .route(routes::STATE, get(get_state))
        .route(routes::STATS, get(get_stats))
        .route(routes::METRICS, get(get_metrics))
        .route(routes::HOSTS, post(post_host))
        .route(routes::HOST, delete(delete_host))
        .route(routes::ALLOW_ANY_HOST, put(put_allow_any_host))
        .route(routes::CONTROLLER, delete(delete_controller))
        .route(routes::NAMESPACES, post(post_namespace))
        .route(routes::NAMESPACE, delete(delete_namespace))
        .route(routes::NAMESPACE_SIZE, put(put_namespace_size))
        .route(routes::LISTENERS, post(post_listener))
        .route(routes::LISTENER, delete(delete_listener))
        .route(routes::SAVE, post(post_save))
        .route(routes::ANA, put(put_ana))
        .route(routes::MDNS, get(get_mdns).put(put_mdns))
        .route(
            routes::NAMESPACE_HOSTS,
            put(put_namespace_hosts)
                .post(post_namespace_host)
                .delete(delete_namespace_hosts),
        )
        .route(routes::NAMESPACE_HOST, delete(delete_namespace_host))
        .route(
            routes::NAMESPACE_QOS,
            put(put_namespace_qos).delete(delete_namespace_qos),
        )
        .route(routes::REFERRALS, get(get_referrals).post(post_referral))
        .route(routes::REFERRAL, delete(delete_referral))
        .route(routes::REGISTRATIONS, get(get_registrations))
        .route(routes::CDC, get(get_cdc))
        .route(routes::CDC_MEMBERS, post(post_cdc_member))
        .route(routes::CDC_MEMBER, delete(delete_cdc_member))
        .route(
            routes::CDC_TRUSTED,
            get(get_cdc_trusted).put(put_cdc_trusted),
        )
        .route(routes::NAMESPACE_SNAPSHOTS, post(post_namespace_snapshot))
        .route(routes::SNAPSHOTS, get(get_snapshots))
        .route(routes::SNAPSHOT, delete(delete_snapshot))
        .route(routes::SNAPSHOT_CLONES, post(post_snapshot_clone))
        .route(routes::POOLS, get(get_pools))
        .route(
            routes::SUPPORT,
            get(|State(c): State<Ctx>| async move {
                blocking(move || Ok(crate::support::support(&c))).await
            }),
        )
        .merge(hostkeys_router())
        .merge(mirror_router())
        .fallback(unknown_endpoint)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(ctx)
}

/// Only `/metrics` (what the metrics listener serves).
pub(crate) fn metrics_router(ctx: Ctx) -> Router {
    Router::new()
        .route(routes::METRICS, get(get_metrics))
        .fallback(unknown_endpoint)
        .with_state(ctx)
}

/// An [`ApiError`] as an HTTP response.
pub(crate) struct ApiResponse(pub(crate) ApiError);

impl IntoResponse for ApiResponse {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, axum::Json(self.0)).into_response()
    }
}

fn json<T: serde::Serialize>(r: Result<T, ApiError>) -> Response {
    match r {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => ApiResponse(e).into_response(),
    }
}

/// `e` as the response that carries it.
pub(crate) fn error_response(e: ApiError) -> Response {
    ApiResponse(e).into_response()
}

pub(crate) fn bad_body(r: JsonRejection) -> ApiError {
    ApiError::new(codes::BAD_REQUEST, "", r.body_text())
}

pub(crate) fn bad_path(r: PathRejection) -> ApiError {
    ApiError::new(codes::BAD_REQUEST, "", r.body_text())
}

async fn get_state(State(c): State<Ctx>) -> Response {
    json(Ok(c.state()))
}

async fn get_pools(State(c): State<Ctx>) -> Response {
    blocking(move || Ok(c.pools())).await
}

async fn get_stats(State(c): State<Ctx>) -> Response {
    json(Ok(c.stats()))
}

async fn get_metrics(State(c): State<Ctx>, headers: axum::http::HeaderMap) -> Response {
    // The pools' figures take the control plane's lock and an fstatvfs: off the runtime.
    let pools = {
        let c = c.clone();
        tokio::task::spawn_blocking(move || c.pools())
            .await
            .unwrap_or_default()
    };
    let host_labels = c.lock().metrics_host_labels;
    let cdc = c.cdc_view();
    let x = metrics::Extras {
        pools: &pools,
        host_labels,
        cdc: cdc.as_ref(),
    };
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    match metrics::render_box(&c.target, &x) {
        Ok(text) if metrics::wants_text_format(accept) => (
            [(header::CONTENT_TYPE, metrics::TEXT_CONTENT_TYPE)],
            metrics::to_text_format(&text),
        )
            .into_response(),
        Ok(text) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(_) => ApiResponse(ApiError::new(
            codes::INTERNAL,
            "",
            "metrics could not be encoded",
        ))
        .into_response(),
    }
}

type PathArg<T> = Result<Path<T>, PathRejection>;
type Body<T> = Result<axum::Json<T>, JsonRejection>;

/// Run a change on the blocking pool: it may open, create or flush storage.
pub(crate) async fn blocking<T: serde::Serialize + Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Response {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => json(r),
        Err(_) => json::<()>(Err(ApiError::new(
            codes::INTERNAL,
            "",
            "the request failed on the server's side",
        ))),
    }
}

async fn post_subsystem(State(c): State<Ctx>, body: Body<SubsystemRequest>) -> Response {
    let req = match body {
        Ok(axum::Json(r)) => r,
        Err(e) => return json::<()>(Err(bad_body(e))),
    };
    blocking(move || c.add_subsystem(&req)).await
}

async fn delete_subsystem(State(c): State<Ctx>, path: PathArg<String>) -> Response {
    let Path(nqn) = match path {
        Ok(p) => p,
        Err(e) => return json::<()>(Err(bad_path(e))),
    };
    blocking(move || c.remove_subsystem(&nqn)).await
}

async fn post_host(
    State(c): State<Ctx>,
    path: PathArg<String>,
    body: Body<HostRequest>,
) -> Response {
    let (Path(nqn), axum::Json(req)) = match (path, body) {
        (Ok(p), Ok(b)) => (p, b),
        (Err(e), _) => return json::<()>(Err(bad_path(e))),
        (_, Err(e)) => return json::<()>(Err(bad_body(e))),
    };
    blocking(move || c.allow_host(&nqn, &req.hostnqn)).await
}

async fn delete_host(State(c): State<Ctx>, path: PathArg<(String, String)>) -> Response {
    let Path((nqn, host)) = match path {
        Ok(p) => p,
        Err(e) => return json::<()>(Err(bad_path(e))),
    };
    blocking(move || c.deny_host(&nqn, &host)).await
}

async fn put_allow_any_host(
    State(c): State<Ctx>,
    path: PathArg<String>,
    body: Body<AllowAnyHostRequest>,
) -> Response {
    let (Path(nqn), axum::Json(req)) = match (path, body) {
        (Ok(p), Ok(b)) => (p, b),
        (Err(e), _) => return json::<()>(Err(bad_path(e))),
        (_, Err(e)) => return json::<()>(Err(bad_body(e))),
    };
    blocking(move || c.set_allow_any_host(&nqn, req.allow_any_host)).await
}

async fn delete_controller(State(c): State<Ctx>, path: PathArg<String>) -> Response {
    let Path(id) = match path {
        Ok(p) => p,
        Err(e) => return json::<()>(Err(bad_path(e))),
    };
    json(c.disconnect(&id))
}

async fn post_namespace(
    State(c): State<Ctx>,
    path: PathArg<String>,
    body: Body<NamespaceRequest>,
) -> Response {
    let (Path(nqn), axum::Json(req)) = match (path, body) {
        (Ok(p), Ok(b)) => (p, b),
        (Err(e), _) => return json::<()>(Err(bad_path(e))),
        (_, Err(e)) => return json::<()>(Err(bad_body(e))),
    };
    blocking(move || c.add_namespace(&nqn, &req)).await
}

async fn delete_namespace(State(c): State<Ctx>, path: PathArg<(String, String)>) -> Response {
    let Path((nqn, nsid)) = match path {
        Ok(p) => p,
        Err(e) => return json::<()>(Err(bad_path(e))),
    };
    blocking(move || c.remove_namespace(&nqn, &nsid)).await
}

async fn put_namespace_size(
    State(c): State<Ctx>,
    path: PathArg<(String, String)>,
    body: Body<ResizeRequest>,
) -> Response {
    let (Path((nqn, nsid)), axum::Json(req)) = match (path, body) {
        (Ok(p), Ok(b)) => (p, b),
        (Err(e), _) => return json::<()>(Err(bad_path(e))),
        (_, Err(e)) => return json::<()>(Err(bad_body(e))),
    };
    blocking(move || c.resize_namespace(&nqn, &nsid, &req)).await
}

async fn put_namespace_hosts(
    State(c): State<Ctx>,
    path: PathArg<(String, String)>,
    body: Body<api::NamespaceHostsRequest>,
) -> Response {
    let (Path((nqn, nsid)), axum::Json(req)) = match (path, body) {
        (Ok(p), Ok(b)) => (p, b),
        (Err(e), _) => return json::<()>(Err(bad_path(e))),
        (_, Err(e)) => return json::<()>(Err(bad_body(e))),
    };
    blocking(move || c.set_namespace_hosts(&nqn, &nsid, &req.hosts)).await
}

async fn post_namespace_host(
    State(c): State<Ctx>,
    path: PathArg<(String, String)>,
    body: Body<HostRequest>,
) -> Response {
    let (Path((nqn, nsid)), axum::Json(req)) = match (path, body) {
        (Ok(p), Ok(b)) => (p, b),
        (Err(e), _) => return json::<()>(Err(bad_path(e))),
        (_, Err(e)) => return json::<()>(Err(bad_body(e))),
    };
    blocking(move || c.attach_namespace_host(&nqn, &nsid, &req.hostnqn)).await
}

async fn delete_namespace_hosts(State(c): State<Ctx>, path: PathArg<(String, String)>) -> Response {
    let Path((nqn, nsid)) = match path {
        Ok(p) => p,
        Err(e) => return json::<()>(Err(bad_path(e))),
    };
    blocking(move || c.unmask_namespace(&nqn, &nsid)).await
}

async fn put_namespace_qos(
    State(c): State<Ctx>,
    path: PathArg<(String, String)>,
    body: Body<api::QosRequest>,
) -> Response {
    let (Path((nqn, nsid)), axum::Json(req)) = match (path, body) {
        (Ok(p), Ok(b)) => (p, b),
        (Err(e), _) => return json::<()>(Err(bad_path(e))),
        (_, Err(e)) => return json::<()>(Err(bad_body(e))),
    };
    blocking(move || c.set_namespace_qos(&nqn, &nsid, &req)).await
}

async fn delete_namespace_qos(State(c): State<Ctx>, path: PathArg<(String, String)>) -> Response {
    let Path((nqn, nsid)) = match path {
        Ok(p) => p,
        Err(e) => return json::<()>(Err(bad_path(e))),
    };
    blocking(move || c.clear_namespace_qos(&nqn, &nsid)).await
}

async fn delete_namespace_host(
    State(c): State<Ctx>,
    path: PathArg<(String, String, String)>,
) -> Response {
    let Path((nqn, nsid, host)) = match path {
        Ok(p) => p,
        Err(e) => return json::<()>(Err(bad_path(e))),
    };
    blocking(move || c.detach_namespace_host(&nqn, &nsid, &host)).await
}

async fn post_listener(State(c): State<Ctx>, body: Body<ListenerRequest>) -> Response {
    let req = match body {
        Ok(axum::Json(r)) => r,
        Err(e) => return json::<()>(Err(bad_body(e))),
    };
    blocking(move || c.add_listener(&req)).await
}

async fn delete_listener(
    State(c): State<Ctx>,
    path: PathArg<String>,
    query: Result<Query<ListenerRemoveQuery>, QueryRejection>,
) -> Response {
    let (Path(addr), Query(q)) = match (path, query) {
        (Ok(p), Ok(q)) => (p, q),
        (Err(e), _) => return json::<()>(Err(bad_path(e))),
        (_, Err(e)) => {
            return json::<()>(Err(ApiError::new(codes::BAD_REQUEST, "", e.body_text())));
        }
    };
    blocking(move || c.remove_listener(&addr, q.disconnect)).await
}

async fn put_ana(State(c): State<Ctx>, body: Body<api::AnaRequest>) -> Response {
    match body {
        Ok(axum::Json(r)) => blocking(move || c.set_ana(&r)).await,
        Err(e) => json::<()>(Err(bad_body(e))),
    }
}

async fn get_mdns(State(c): State<Ctx>) -> Response {
    json(Ok(c.mdns()))
}

async fn put_mdns(State(c): State<Ctx>, body: Body<api::MdnsRequest>) -> Response {
    match body {
        Ok(axum::Json(r)) => blocking(move || c.set_mdns(&r)).await,
        Err(e) => json::<()>(Err(bad_body(e))),
    }
}

async fn get_referrals(State(c): State<Ctx>) -> Response {
    json::<_>(Ok(c.referrals()))
}

async fn post_referral(State(c): State<Ctx>, body: Body<api::ReferralRequest>) -> Response {
    match body {
        Ok(axum::Json(r)) => blocking(move || c.add_referral(&r)).await,
        Err(e) => json::<()>(Err(bad_body(e))),
    }
}

async fn delete_referral(State(c): State<Ctx>, path: PathArg<String>) -> Response {
    match path {
        Ok(Path(addr)) => blocking(move || c.remove_referral(&addr)).await,
        Err(e) => json::<()>(Err(bad_path(e))),
    }
}

async fn get_registrations(State(c): State<Ctx>) -> Response {
    json::<_>(Ok(c.registrations()))
}

async fn post_save(State(c): State<Ctx>, body: Body<SaveRequest>) -> Response {
    let req = match body {
        Ok(axum::Json(r)) => r,
        Err(e) => return json::<()>(Err(bad_body(e))),
    };
    blocking(move || c.save(&req)).await
}

async fn get_cdc(State(c): State<Ctx>) -> Response {
    blocking(move || c.cdc()).await
}

async fn post_cdc_member(State(c): State<Ctx>, body: Body<api::CdcMemberRequest>) -> Response {
    match body {
        Ok(axum::Json(r)) => blocking(move || c.add_cdc_member(&r)).await,
        Err(e) => json::<()>(Err(bad_body(e))),
    }
}

async fn get_cdc_trusted(State(c): State<Ctx>) -> Response {
    blocking(move || c.cdc_trusted()).await
}

async fn put_cdc_trusted(State(c): State<Ctx>, body: Body<api::CdcTrusted>) -> Response {
    match body {
        Ok(axum::Json(r)) => blocking(move || c.set_cdc_trusted(&r)).await,
        Err(e) => json::<()>(Err(bad_body(e))),
    }
}

async fn delete_cdc_member(State(c): State<Ctx>, path: PathArg<String>) -> Response {
    match path {
        Ok(Path(addr)) => blocking(move || c.remove_cdc_member(&addr)).await,
        Err(e) => json::<()>(Err(bad_path(e))),
    }
}

async fn post_namespace_snapshot(
    State(c): State<Ctx>,
    path: PathArg<(String, String)>,
    body: Body<api::SnapshotRequest>,
) -> Response {
    let (Path((nqn, nsid)), axum::Json(req)) = match (path, body) {
        (Ok(p), Ok(b)) => (p, b),
        (Err(e), _) => return json::<()>(Err(bad_path(e))),
        (_, Err(e)) => return json::<()>(Err(bad_body(e))),
    };
    blocking(move || c.snapshot_namespace(&nqn, &nsid, &req)).await
}

async fn get_snapshots(State(c): State<Ctx>) -> Response {
    blocking(move || Ok(c.snapshots())).await
}

async fn delete_snapshot(State(c): State<Ctx>, path: PathArg<String>) -> Response {
    let Path(name) = match path {
        Ok(p) => p,
        Err(e) => return json::<()>(Err(bad_path(e))),
    };
    blocking(move || c.delete_snapshot(&name)).await
}

async fn post_snapshot_clone(
    State(c): State<Ctx>,
    path: PathArg<String>,
    body: Body<api::CloneRequest>,
) -> Response {
    let (Path(name), axum::Json(req)) = match (path, body) {
        (Ok(p), Ok(b)) => (p, b),
        (Err(e), _) => return json::<()>(Err(bad_path(e))),
        (_, Err(e)) => return json::<()>(Err(bad_body(e))),
    };
    blocking(move || c.clone_snapshot(&name, &req)).await
}

async fn unknown_endpoint(uri: axum::http::Uri) -> Response {
    ApiResponse(ApiError::new(
        codes::UNKNOWN_ENDPOINT,
        "",
        format!(
            "no endpoint {} (this server speaks {})",
            uri.path(),
            api::PREFIX
        ),
    ))
    .into_response()
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    ApiResponse(ApiError::new(
        codes::METHOD_NOT_ALLOWED,
        "",
        format!("{method} is not allowed on {}", uri.path()),
    ))
    .into_response()
}

/// The routes of the DH-HMAC-CHAP keys ([`crate::hostkeys`]), merged into the API's router.
fn hostkeys_router() -> axum::Router<Arc<Control>> {
    use axum::extract::{Path, State};
    use axum::response::{IntoResponse, Response};
    type PathArg = Result<Path<(String, String)>, axum::extract::rejection::PathRejection>;

    fn answer(r: Result<crate::hostkeys::HostKeyView, ApiError>) -> Response {
        match r {
            Ok(v) => axum::Json(v).into_response(),
            Err(e) => {
                let status = axum::http::StatusCode::from_u16(e.http_status())
                    .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
                (status, axum::Json(e)).into_response()
            }
        }
    }
    async fn blocking(
        f: impl FnOnce() -> Result<crate::hostkeys::HostKeyView, ApiError> + Send + 'static,
    ) -> Response {
        answer(tokio::task::spawn_blocking(f).await.unwrap_or_else(|_| {
            Err(ApiError::new(
                codes::INTERNAL,
                "",
                "the request failed on the server's side",
            ))
        }))
    }
    async fn put_key(
        State(c): State<Arc<Control>>,
        path: PathArg,
        body: Result<
            axum::Json<crate::hostkeys::HostKeyRequest>,
            axum::extract::rejection::JsonRejection,
        >,
    ) -> Response {
        let (Path((nqn, host)), axum::Json(req)) = match (path, body) {
            (Ok(p), Ok(b)) => (p, b),
            (Err(e), _) => {
                return answer(Err(ApiError::new(codes::BAD_REQUEST, "", e.body_text())));
            }
            // Never the body's text: it may hold a secret.
            (_, Err(_)) => {
                return answer(Err(ApiError::new(
                    codes::BAD_REQUEST,
                    "",
                    "the body must be {\"dhchap_key\": \"DHHC-1:…\", \"dhchap_ctrl_key\": \"DHHC-1:…\" (optional)}",
                )));
            }
        };
        blocking(move || c.set_host_key(&nqn, &host, &req)).await
    }
    async fn delete_key(State(c): State<Arc<Control>>, path: PathArg) -> Response {
        match path {
            Ok(Path((nqn, host))) => blocking(move || c.remove_host_key(&nqn, &host)).await,
            Err(e) => answer(Err(ApiError::new(codes::BAD_REQUEST, "", e.body_text()))),
        }
    }
    axum::Router::new().route(
        crate::api::routes::HOST_DHCHAP,
        axum::routing::put(put_key).delete(delete_key),
    )
}

/// `GET …/namespaces/{nsid}/mirror`, `POST …/namespaces/{nsid}/mirror/promote`
/// ([`crate::mirror_api`]).
fn mirror_router() -> axum::Router<Arc<Control>> {
    type PathArg = Result<Path<(String, String)>, PathRejection>;
    async fn get_status(State(c): State<Ctx>, p: PathArg) -> Response {
        let (nqn, nsid) = match p {
            Ok(Path(v)) => v,
            Err(r) => return error_response(bad_path(r)),
        };
        blocking(move || crate::mirror_api::status(&c, &nqn, &nsid)).await
    }
    async fn post_promote(
        State(c): State<Ctx>,
        p: PathArg,
        body: Result<axum::Json<api::MirrorPromoteRequest>, JsonRejection>,
    ) -> Response {
        let (nqn, nsid) = match p {
            Ok(Path(v)) => v,
            Err(r) => return error_response(bad_path(r)),
        };
        let req = match body {
            Ok(axum::Json(r)) => r,
            Err(r) => return error_response(bad_body(r)),
        };
        blocking(move || crate::mirror_api::promote(&c, &nqn, &nsid, &req)).await
    }
    Router::new()
        .route(routes::NAMESPACE_MIRROR, get(get_status))
        .route(routes::NAMESPACE_MIRROR_PROMOTE, post(post_promote))
}
