//! AUTH_Send (05h) and AUTH_Receive (06h) on a queue (NVMe Base 2.x section 8.3.4): when
//! Connect starts an exchange, the commands that carry it, and the gate they open. The
//! exchange itself and the queue's authentication state are in [`crate::auth`] (as Linux
//! nvmet keeps `fabrics-cmd-auth.c` beside `auth.c`).

use crate::auth::{
    AUTH_RECV_MAX, AUTH_SEND_MAX, AuthCmdError, AuthMoved, CONNECT_AUTHREQ_ATR, check_fields, off,
};
use crate::error::{CmdError, CmdResult};
use crate::queue::Queue;
use nvme_spec::{Sqe, Status};

impl Queue {
    /// Start authentication on this queue when its host has a key: called by Connect, it
    /// returns the AUTHREQ bits for the Connect completion.
    pub(crate) fn start_auth(&mut self, hostnqn: &str, subnqn: &str, qid: u16) -> u32 {
        let Some(policy) = self.session.target().auth_policy() else {
            return 0;
        };
        match policy.session(hostnqn, subnqn, qid) {
            Some(session) => {
                self.auth.start(session);
                CONNECT_AUTHREQ_ATR
            }
            None => 0,
        }
    }

    /// Authentication is required and not done: only AUTH_Send / AUTH_Receive may run.
    pub fn auth_pending(&self) -> bool {
        self.auth.gated()
    }

    /// Host→controller bytes of AUTH_Send (phase 1): TL, bounded.
    pub(crate) fn auth_send_len(&self, sqe: &Sqe) -> Result<u32, CmdError> {
        let tl = check_fields(sqe)?;
        if tl > AUTH_SEND_MAX || !self.auth.active() {
            return Err(CmdError::at(Status::INVALID_FIELD, off::TL_AL));
        }
        Ok(tl)
    }

    /// AUTH_Send and AUTH_Receive (phase 2).
    pub(crate) fn execute_auth(
        &mut self,
        idx: u16,
        sqe: &Sqe,
        buf: &mut Vec<u8>,
        receive: bool,
    ) -> CmdResult {
        let len = check_fields(sqe)?;
        let Some(session) = self.auth.session() else {
            // The host has no key here: there is nothing to authenticate (Linux nvmet answers
            // the same to a host that sends AUTH_Send unasked).
            return Err(CmdError::at(Status::INVALID_FIELD, off::SECP));
        };
        let r = if receive {
            match session.receive(len.min(AUTH_RECV_MAX)) {
                Ok(mut msg) => {
                    msg.truncate(len as usize);
                    let n = msg.len() as u32;
                    buf.clear();
                    buf.extend_from_slice(&msg);
                    self.set_c2h(idx, n);
                    Ok((0, 0))
                }
                Err(AuthCmdError(st)) => Err(CmdError::from(st)),
            }
        } else {
            let data = buf.get(..len as usize).unwrap_or(buf);
            session
                .send(data)
                .map(|()| (0, 0))
                .map_err(|AuthCmdError(st)| CmdError::from(st))
        };
        self.auth_progress();
        r
    }

    /// Let the gate follow the exchange, logging (and counting) its outcome once.
    fn auth_progress(&mut self) {
        let Some(moved) = self.auth.progress() else {
            return;
        };
        let qid = self.session.qid();
        let (cntlid, hostnqn) = match self.session.ctrl() {
            Some(c) => (c.cntlid.0, c.hostnqn.as_str()),
            None => (0, ""),
        };
        match moved {
            AuthMoved::Succeeded => {
                tracing::debug!(cntlid, qid, hostnqn, "queue authenticated (DH-HMAC-CHAP)");
            }
            AuthMoved::Failed(why) => {
                self.session
                    .target()
                    .events
                    .auth_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                crate::warn_every!(
                    cntlid,
                    qid,
                    hostnqn,
                    "DH-HMAC-CHAP authentication failed: {why}"
                );
            }
        }
    }
}
