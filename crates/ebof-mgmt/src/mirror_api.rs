//! The management API's mirror requests (ADR 0028): `GET …/namespaces/{nsid}/mirror` and
//! `POST …/namespaces/{nsid}/mirror/promote` ([`crate::handlers`] routes them).

use std::sync::Arc;

use ebof_mirror::Mirror;
use nvmf_target::Namespace;

use crate::api::{ApiError, MirrorPromoteRequest, MirrorView, codes};
use crate::control::Control;
use crate::mirror::{mirror_of, status_of, view};

fn lookup(c: &Control, nqn: &str, nsid: &str) -> Result<(Arc<Namespace>, Arc<Mirror>), ApiError> {
    let n = crate::lookup::parse_nsid(nsid)?;
    let ns = crate::lookup::live_namespace(&c.target, nqn, n)?;
    let m = mirror_of(&ns).ok_or_else(|| {
        ApiError::new(
            codes::NOT_MIRRORED,
            "",
            format!("namespace {n} of {nqn} is not mirrored"),
        )
    })?;
    Ok((ns, m))
}

/// `GET …/namespaces/{nsid}/mirror`.
pub(crate) fn status(c: &Control, nqn: &str, nsid: &str) -> Result<MirrorView, ApiError> {
    let (ns, m) = lookup(c, nqn, nsid)?;
    Ok(view(&status_of(&ns, &m)))
}

/// `POST …/namespaces/{nsid}/mirror/promote` (blocks while the namespace's commands drain).
pub(crate) fn promote(
    c: &Control,
    nqn: &str,
    nsid: &str,
    req: &MirrorPromoteRequest,
) -> Result<MirrorView, ApiError> {
    let (ns, m) = lookup(c, nqn, nsid)?;
    m.promote(req.force)
        .map_err(|e| ApiError::new(codes::PROMOTE_REFUSED, "", e.to_string()))?;
    tracing::warn!(
        subsystem = nqn,
        nsid,
        force = req.force,
        "mirror promoted by the API"
    );
    Ok(view(&status_of(&ns, &m)))
}
