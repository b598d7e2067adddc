//! A small safe layer over libibverbs and librdmacm (through `rdma-mummy-sys`, which loads both
//! with `dlopen` on first use: nothing here needs rdma-core at build time, and a process that
//! never touches RDMA never loads it).
//!
//! What is here is what NVMe/RDMA needs and no more: an event channel and CM ids (listen,
//! accept/reject with private data; resolve, connect, disconnect), a protection domain per
//! device, completion channels and CQs (pollable fds), RC queue pairs made on a CM id, memory
//! registration, and posting lists of receive and send work requests (SEND, SEND with inline
//! data, SEND with invalidate, RDMA READ, RDMA WRITE). Every raw pointer stays inside this
//! module; every call that can fail returns an [`Error`] naming the verb and the OS error.
//!
//! Threading: a CQ, a CM id and its QP are used by one thread at a time (the owner moves them
//! between threads at most once, at set-up); the library itself is thread-safe for that use.

use rdma_mummy_sys as sys;
use std::collections::HashMap;
use std::io;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::ptr::{NonNull, null_mut};
use std::sync::{Arc, Mutex, OnceLock};

/// A failed verb: which, and why.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {err}")]
pub struct Error {
    /// The librdmacm or libibverbs function that failed.
    pub op: &'static str,
    /// The OS error it reported (errno).
    #[source]
    pub err: io::Error,
}

/// The result of a verb.
pub type Result<T> = std::result::Result<T, Error>;

fn last(op: &'static str) -> Error {
    let err = io::Error::last_os_error();
    // librdmacm reports a missing kernel module or device as ENODEV/ENOENT; say what it means.
    Error { op, err }
}

fn check(op: &'static str, rc: i32) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else if rc > 0 {
        // ibv_post_* and ibv_req_notify_cq return the errno itself.
        Err(Error {
            op,
            err: io::Error::from_raw_os_error(rc),
        })
    } else {
        Err(last(op))
    }
}

/// The RDMA devices present (names), or why none can be used: the libraries are missing, or
/// the kernel has no RDMA device (no RNIC driver, no `rdma link add … type rxe`).
pub fn devices() -> std::result::Result<Vec<String>, String> {
    let mut n = 0i32;
    // SAFETY: ibv_get_device_list writes the count and returns a NULL-terminated array (or
    // NULL), freed below.
    let list = unsafe { sys::ibv_get_device_list(&mut n) };
    if list.is_null() {
        let e = io::Error::last_os_error();
        if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::ENODEV)) {
            return Err(format!(
                "no RDMA device: this kernel has no RDMA support ({e}); load an RNIC driver, or soft-RoCE (`modprobe rdma_rxe; rdma link add rxe0 type rxe netdev IFACE`)"
            ));
        }
        return Err(format!(
            "cannot list RDMA devices ({e}): is rdma-core (libibverbs1, ibverbs-providers, librdmacm1) installed and an RDMA driver loaded?"
        ));
    }
    let mut names = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: `i < n` entries are valid device pointers.
        let d = unsafe { *list.add(i) };
        if d.is_null() {
            break;
        }
        // SAFETY: a valid device has a NUL-terminated name.
        let name = unsafe { std::ffi::CStr::from_ptr(sys::ibv_get_device_name(d)) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: `list` came from ibv_get_device_list.
    unsafe { sys::ibv_free_device_list(list) };
    if names.is_empty() {
        return Err("no RDMA device: load an RNIC driver, or soft-RoCE (`modprobe rdma_rxe; rdma link add rxe0 type rxe netdev IFACE`)".into());
    }
    Ok(names)
}

fn set_nonblocking(fd: RawFd) -> Result<()> {
    // SAFETY: fcntl on an fd we own; no memory is passed.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 {
        return Err(last("fcntl(F_GETFL)"));
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
        return Err(last("fcntl(F_SETFL)"));
    }
    Ok(())
}

/// An RDMA CM event channel (the fd is pollable once non-blocking).
pub struct EventChannel(NonNull<sys::rdma_event_channel>);

// SAFETY: the channel is a kernel fd wrapper; librdmacm allows its use from any thread.
unsafe impl Send for EventChannel {}
// SAFETY: as above (get_cm_event is thread-safe).
unsafe impl Sync for EventChannel {}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel; ids on it are destroyed before (they
        // hold an Arc).
        unsafe { sys::rdma_destroy_event_channel(self.0.as_ptr()) };
    }
}

/// What a CM event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmEventKind {
    /// `rdma_resolve_addr` finished: the id is bound to a local device.
    AddrResolved,
    /// Address resolution failed.
    AddrError,
    /// `rdma_resolve_route` finished: the id can connect.
    RouteResolved,
    /// Route resolution failed.
    RouteError,
    /// A peer asks to connect (listener side); the event carries the new id.
    ConnectRequest,
    /// The peer answered a connect on an id without a QP (not used with our QPs).
    ConnectResponse,
    /// An error happened while the connection was being established.
    ConnectError,
    /// The peer did not respond to a connect (or the remote endpoint is unreachable).
    Unreachable,
    /// The peer rejected the connect; private data carries the NVMe/RDMA reject status.
    Rejected,
    /// The connection is established.
    Established,
    /// The connection was disconnected (by either side).
    Disconnected,
    /// The RDMA device behind the id was removed: everything on it must be released.
    DeviceRemoval,
    /// The QP left its timewait state and its number can be reused.
    TimewaitExit,
    /// The id's local address changed (e.g. a bonding fail-over).
    AddrChange,
    /// An event type this layer does not name (the raw `rdma_cm_event_type`).
    Other(u32),
}

impl CmEventKind {
    fn from_raw(t: u32) -> CmEventKind {
        use sys::rdma_cm_event_type as e;
        match t {
            e::RDMA_CM_EVENT_ADDR_RESOLVED => CmEventKind::AddrResolved,
            e::RDMA_CM_EVENT_ADDR_ERROR => CmEventKind::AddrError,
            e::RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
            e::RDMA_CM_EVENT_ROUTE_ERROR => CmEventKind::RouteError,
            e::RDMA_CM_EVENT_CONNECT_REQUEST => CmEventKind::ConnectRequest,
            e::RDMA_CM_EVENT_CONNECT_RESPONSE => CmEventKind::ConnectResponse,
            e::RDMA_CM_EVENT_CONNECT_ERROR => CmEventKind::ConnectError,
            e::RDMA_CM_EVENT_UNREACHABLE => CmEventKind::Unreachable,
            e::RDMA_CM_EVENT_REJECTED => CmEventKind::Rejected,
            e::RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established,
            e::RDMA_CM_EVENT_DISCONNECTED => CmEventKind::Disconnected,
            e::RDMA_CM_EVENT_DEVICE_REMOVAL => CmEventKind::DeviceRemoval,
            e::RDMA_CM_EVENT_TIMEWAIT_EXIT => CmEventKind::TimewaitExit,
            e::RDMA_CM_EVENT_ADDR_CHANGE => CmEventKind::AddrChange,
            t => CmEventKind::Other(t),
        }
    }
}

/// One CM event, copied out of librdmacm (the event itself is acknowledged at once).
pub struct CmEvent {
    /// What happened.
    pub kind: CmEventKind,
    /// The event's status (an errno for error events; for `Rejected`, the reject reason).
    pub status: i32,
    /// The token set with [`CmId::set_token`] on the id this event is about (the listener's
    /// token for a connect request).
    pub token: u64,
    /// A connect request's new id: the caller owns it (accept or reject it, then keep or drop).
    pub new_id: Option<CmId>,
    /// Private data of a connect request, response or reject.
    pub private_data: Vec<u8>,
    /// RDMA READs the peer can serve for us at once (its IRD), on connect requests.
    pub responder_resources: u8,
    /// RDMA READs the peer may initiate against us at once (its ORD), on connect requests.
    pub initiator_depth: u8,
}

impl EventChannel {
    /// A new channel, non-blocking (poll [`EventChannel::fd`]).
    pub fn new() -> Result<Arc<EventChannel>> {
        // SAFETY: no arguments; NULL on failure.
        let ch = unsafe { sys::rdma_create_event_channel() };
        let ch = NonNull::new(ch).ok_or_else(|| last("rdma_create_event_channel"))?;
        let ch = EventChannel(ch);
        set_nonblocking(ch.fd())?;
        Ok(Arc::new(ch))
    }

    /// The channel's file descriptor (non-blocking): readable when an event is pending.
    pub fn fd(&self) -> RawFd {
        // SAFETY: the channel is valid for our lifetime.
        unsafe { (*self.0.as_ptr()).fd }
    }

    /// The next event, or `None` when there is none now.
    pub fn next_event(&self) -> Result<Option<CmEvent>> {
        let mut ev: *mut sys::rdma_cm_event = null_mut();
        // SAFETY: valid channel; `ev` receives an event we acknowledge below.
        if unsafe { sys::rdma_get_cm_event(self.0.as_ptr(), &mut ev) } != 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(Error {
                op: "rdma_get_cm_event",
                err,
            });
        }
        // SAFETY: a successful get hands a valid event until it is acked.
        let out = unsafe {
            let e = &*ev;
            let kind = CmEventKind::from_raw(e.event);
            let conn = e.param.conn;
            let private_data = if conn.private_data.is_null() || conn.private_data_len == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    conn.private_data as *const u8,
                    usize::from(conn.private_data_len),
                )
                .to_vec()
            };
            let (token, new_id) = if kind == CmEventKind::ConnectRequest {
                let tok = if e.listen_id.is_null() {
                    0
                } else {
                    (*e.listen_id).context as u64
                };
                (tok, NonNull::new(e.id).map(|raw| CmId { raw, qp: false }))
            } else if e.id.is_null() {
                (0, None)
            } else {
                ((*e.id).context as u64, None)
            };
            CmEvent {
                kind,
                status: e.status,
                token,
                new_id,
                private_data,
                responder_resources: conn.responder_resources,
                initiator_depth: conn.initiator_depth,
            }
        };
        // SAFETY: acknowledged once; the new id (connect request) stays valid after the ack.
        unsafe { sys::rdma_ack_cm_event(ev) };
        Ok(Some(out))
    }
}

/// A CM id (one per listener, one per connection), with the QP made on it.
pub struct CmId {
    raw: NonNull<sys::rdma_cm_id>,
    qp: bool,
}

// SAFETY: used by one thread at a time (see the module doc).
unsafe impl Send for CmId {}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: the QP (if any) was made by rdma_create_qp on this id; the id is ours.
        unsafe {
            if self.qp {
                sys::rdma_destroy_qp(self.raw.as_ptr());
            }
            sys::rdma_destroy_id(self.raw.as_ptr());
        }
    }
}

/// Connection parameters sent with accept or connect.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConnParams {
    /// RDMA READs the peer may have outstanding against us.
    pub responder_resources: u8,
    /// RDMA READs we may have outstanding against the peer.
    pub initiator_depth: u8,
    /// Transport retries on a lost or unacknowledged packet (0..=7).
    pub retry_count: u8,
    /// Retries after a receiver-not-ready NAK (0..=7; 7 means without limit).
    pub rnr_retry_count: u8,
}

fn sockaddr_of(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            (
                ss,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        SocketAddr::V6(v) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v.port().to_be(),
                sin6_flowinfo: v.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v.ip().octets(),
                },
                sin6_scope_id: v.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            (
                ss,
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}

/// # Safety
/// `sa` points to a valid sockaddr of its family.
unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    // SAFETY: the caller's promise; the family says which struct it is.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let s = &*(sa as *const libc::sockaddr_in);
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(s.sin_addr.s_addr.to_ne_bytes()),
                    u16::from_be(s.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let s = &*(sa as *const libc::sockaddr_in6);
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(s.sin6_addr.s6_addr),
                    u16::from_be(s.sin6_port),
                    s.sin6_flowinfo,
                    s.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

impl CmId {
    /// A new id on `ch` (port space TCP, as NVMe/RDMA uses).
    pub fn new(ch: &EventChannel) -> Result<CmId> {
        let mut id: *mut sys::rdma_cm_id = null_mut();
        // SAFETY: valid channel; `id` receives the new id.
        let rc = unsafe {
            sys::rdma_create_id(
                ch.0.as_ptr(),
                &mut id,
                null_mut(),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(last("rdma_create_id"));
        }
        let raw = NonNull::new(id).ok_or_else(|| last("rdma_create_id"))?;
        Ok(CmId { raw, qp: false })
    }

    /// Deliver this id's later events on `ch` (a connection handed to another thread).
    pub fn migrate(&self, ch: &EventChannel) -> Result<()> {
        // SAFETY: valid id and channel; the channel outlives the id (its owner drops ids first).
        check("rdma_migrate_id", unsafe {
            sys::rdma_migrate_id(self.raw.as_ptr(), ch.0.as_ptr())
        })
    }

    /// Events about this id carry `token` ([`CmEvent::token`]).
    pub fn set_token(&self, token: u64) {
        // SAFETY: `context` is ours to use.
        unsafe { (*self.raw.as_ptr()).context = token as usize as *mut libc::c_void };
    }

    /// Bind to `addr` and listen.
    pub fn listen(&self, addr: SocketAddr, backlog: i32) -> Result<()> {
        let (mut ss, _) = sockaddr_of(addr);
        // SAFETY: a valid sockaddr for the duration of the call.
        let rc = unsafe {
            sys::rdma_bind_addr(self.raw.as_ptr(), &mut ss as *mut _ as *mut libc::sockaddr)
        };
        if rc != 0 {
            let e = last("rdma_bind_addr");
            return Err(if e.err.raw_os_error() == Some(libc::ENODEV) {
                Error {
                    op: "rdma_bind_addr",
                    err: io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("no RDMA device serves {}", addr.ip()),
                    ),
                }
            } else {
                e
            });
        }
        // SAFETY: a bound id.
        check("rdma_listen", unsafe {
            sys::rdma_listen(self.raw.as_ptr(), backlog)
        })
    }

    /// The local address (after bind, resolve or connect request).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the route's address union is valid storage; an unset one has family 0.
        unsafe {
            let a = &(*self.raw.as_ptr()).route.addr.src_addr_union.src_storage;
            from_sockaddr(a as *const _ as *const libc::sockaddr)
        }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as in `local_addr`.
        unsafe {
            let a = &(*self.raw.as_ptr()).route.addr.dst_addr_union.dst_storage;
            from_sockaddr(a as *const _ as *const libc::sockaddr)
        }
    }

    /// The device this id is bound to, with its protection domain.
    pub fn device(&self) -> Result<Arc<Device>> {
        // SAFETY: `verbs` is set once the id is bound to a device (listen on a device address,
        // connect request, address resolved).
        let ctx = unsafe { (*self.raw.as_ptr()).verbs };
        let ctx = NonNull::new(ctx).ok_or_else(|| Error {
            op: "rdma_cm_id",
            err: io::Error::new(io::ErrorKind::NotFound, "not bound to an RDMA device"),
        })?;
        Device::of(ctx)
    }

    /// Make the RC queue pair of this id.
    pub fn create_qp(
        &mut self,
        pd: &Device,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
    ) -> Result<()> {
        // SAFETY: all-zero is a valid init attr; the fields we use are set.
        let mut attr: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = send_cq.cq.as_ptr();
        attr.recv_cq = recv_cq.cq.as_ptr();
        attr.cap.max_send_wr = caps.max_send_wr;
        attr.cap.max_recv_wr = caps.max_recv_wr;
        attr.cap.max_send_sge = caps.max_send_sge;
        attr.cap.max_recv_sge = 1;
        attr.cap.max_inline_data = caps.max_inline_data;
        attr.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
        attr.sq_sig_all = 0;
        // SAFETY: valid id, PD and CQs that outlive the QP (the owner drops the id first).
        let rc = unsafe { sys::rdma_create_qp(self.raw.as_ptr(), pd.pd.as_ptr(), &mut attr) };
        if rc != 0 {
            return Err(last("rdma_create_qp"));
        }
        self.qp = true;
        Ok(())
    }

    /// The QP number (after [`CmId::create_qp`]).
    pub fn qp_num(&self) -> Option<u32> {
        // SAFETY: `qp` is NULL or the QP made on this id.
        unsafe {
            let qp = (*self.raw.as_ptr()).qp;
            (!qp.is_null()).then(|| (*qp).qp_num)
        }
    }

    fn conn_param(private: &[u8], p: ConnParams) -> sys::rdma_conn_param {
        sys::rdma_conn_param {
            private_data: private.as_ptr() as *const libc::c_void,
            private_data_len: private.len().min(255) as u8,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: 1,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: 0,
            qp_num: 0,
        }
    }

    /// Accept a connect request with `private` data.
    pub fn accept(&self, private: &[u8], p: ConnParams) -> Result<()> {
        let mut cp = Self::conn_param(private, p);
        // SAFETY: `private` outlives the call (the CM copies it).
        check("rdma_accept", unsafe {
            sys::rdma_accept(self.raw.as_ptr(), &mut cp)
        })
    }

    /// Reject a connect request with `private` data.
    pub fn reject(&self, private: &[u8]) -> Result<()> {
        // SAFETY: as in `accept`.
        check("rdma_reject", unsafe {
            sys::rdma_reject(
                self.raw.as_ptr(),
                private.as_ptr() as *const libc::c_void,
                private.len().min(255) as u8,
            )
        })
    }

    /// Host side: resolve `dst` (from `src` when given); completes with an `AddrResolved` event.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: i32,
    ) -> Result<()> {
        let mut s = src.map(sockaddr_of);
        let (mut d, _) = sockaddr_of(dst);
        let sp = s
            .as_mut()
            .map_or(null_mut(), |(ss, _)| ss as *mut _ as *mut libc::sockaddr);
        // SAFETY: valid sockaddrs for the duration of the call.
        check("rdma_resolve_addr", unsafe {
            sys::rdma_resolve_addr(
                self.raw.as_ptr(),
                sp,
                &mut d as *mut _ as *mut libc::sockaddr,
                timeout_ms,
            )
        })
    }

    /// Host side: resolve the route; completes with a `RouteResolved` event.
    pub fn resolve_route(&self, timeout_ms: i32) -> Result<()> {
        // SAFETY: an id whose address is resolved.
        check("rdma_resolve_route", unsafe {
            sys::rdma_resolve_route(self.raw.as_ptr(), timeout_ms)
        })
    }

    /// Host side: connect with `private` data; completes with `Established` (or `Rejected`,
    /// `Unreachable`, `ConnectError`).
    pub fn connect(&self, private: &[u8], p: ConnParams) -> Result<()> {
        let mut cp = Self::conn_param(private, p);
        // SAFETY: as in `accept`.
        check("rdma_connect", unsafe {
            sys::rdma_connect(self.raw.as_ptr(), &mut cp)
        })
    }

    /// Disconnect (both sides get `Disconnected`; posted work requests flush with errors).
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: valid id.
        check("rdma_disconnect", unsafe {
            sys::rdma_disconnect(self.raw.as_ptr())
        })
    }

    fn qp_ptr(&self) -> Result<*mut sys::ibv_qp> {
        // SAFETY: valid id.
        let qp = unsafe { (*self.raw.as_ptr()).qp };
        if qp.is_null() {
            return Err(Error {
                op: "ibv_post",
                err: io::Error::new(io::ErrorKind::NotConnected, "no queue pair"),
            });
        }
        Ok(qp)
    }

    /// Post receive buffers (one SGE each).
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<()> {
        let qp = self.qp_ptr()?;
        for chunk in wrs.chunks(POST_BATCH) {
            let mut sges = [sys::ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }; POST_BATCH];
            let mut raw: [MaybeUninit<sys::ibv_recv_wr>; POST_BATCH] =
                [const { MaybeUninit::uninit() }; POST_BATCH];
            let n = chunk.len();
            for (i, w) in chunk.iter().enumerate() {
                sges[i] = sys::ibv_sge {
                    addr: w.addr as u64,
                    length: w.len,
                    lkey: w.lkey,
                };
            }
            for i in 0..n {
                let next = if i + 1 < n {
                    raw[i + 1].as_mut_ptr()
                } else {
                    null_mut()
                };
                raw[i].write(sys::ibv_recv_wr {
                    wr_id: chunk[i].wr_id,
                    next,
                    sg_list: &mut sges[i],
                    num_sge: 1,
                });
            }
            let mut bad: *mut sys::ibv_recv_wr = null_mut();
            // SAFETY: a list of `n` initialised WRs pointing at live SGEs; the buffers are
            // registered memory the caller keeps until their completion.
            check("ibv_post_recv", unsafe {
                sys::ibv_post_recv(qp, raw[0].as_mut_ptr(), &mut bad)
            })?;
        }
        Ok(())
    }

    /// Post send-queue work requests, chained (one doorbell per [`POST_BATCH`]).
    pub fn post_send(&self, wrs: &[SendWr]) -> Result<()> {
        let qp = self.qp_ptr()?;
        for chunk in wrs.chunks(POST_BATCH) {
            let mut sges = [sys::ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }; POST_BATCH];
            let mut raw: [MaybeUninit<sys::ibv_send_wr>; POST_BATCH] =
                [const { MaybeUninit::uninit() }; POST_BATCH];
            let n = chunk.len();
            for (i, w) in chunk.iter().enumerate() {
                sges[i] = sys::ibv_sge {
                    addr: w.sge.addr as u64,
                    length: w.sge.len,
                    lkey: w.sge.lkey,
                };
                let (opcode, remote, inv) = match w.op {
                    SendOp::Send => (sys::ibv_wr_opcode::IBV_WR_SEND, None, 0),
                    SendOp::SendInvalidate(k) => {
                        (sys::ibv_wr_opcode::IBV_WR_SEND_WITH_INV, None, k)
                    }
                    SendOp::Write { addr, rkey } => {
                        (sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE, Some((addr, rkey)), 0)
                    }
                    SendOp::Read { addr, rkey } => {
                        (sys::ibv_wr_opcode::IBV_WR_RDMA_READ, Some((addr, rkey)), 0)
                    }
                };
                let mut flags = 0u32;
                if w.signaled {
                    flags |= sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
                }
                if w.inline {
                    flags |= sys::ibv_send_flags::IBV_SEND_INLINE.0;
                }
                // SAFETY: all-zero is a valid ibv_send_wr; the fields used are set below.
                let mut r: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
                r.wr_id = w.wr_id;
                r.sg_list = &mut sges[i];
                r.num_sge = 1;
                r.opcode = opcode;
                r.send_flags = flags;
                r.imm_data_invalidated_rkey_union.invalidated_rkey = inv;
                if let Some((addr, rkey)) = remote {
                    r.wr.rdma = sys::rdma_t {
                        remote_addr: addr,
                        rkey,
                    };
                }
                raw[i].write(r);
            }
            for i in 0..n {
                let next = if i + 1 < n {
                    raw[i + 1].as_mut_ptr()
                } else {
                    null_mut()
                };
                // SAFETY: entry `i` was initialised above.
                unsafe { (*raw[i].as_mut_ptr()).next = next };
            }
            let mut bad: *mut sys::ibv_send_wr = null_mut();
            // SAFETY: a list of `n` initialised WRs; SGEs live on this stack frame (the
            // provider copies WRs at post time); the memory they name is registered and kept by
            // the caller until completion (or copied now, for inline sends).
            check("ibv_post_send", unsafe {
                sys::ibv_post_send(qp, raw[0].as_mut_ptr(), &mut bad)
            })?;
        }
        Ok(())
    }
}

/// Work requests chained in one post.
pub const POST_BATCH: usize = 32;

/// Queue pair capacities.
#[derive(Clone, Copy, Debug)]
pub struct QpCaps {
    /// Send queue depth (work requests outstanding at once).
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Largest payload of an inline SEND, in bytes.
    pub max_inline_data: u32,
}

/// A local memory segment (registered, or copied by an inline send).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Start of the segment in local memory.
    pub addr: *const u8,
    /// Segment length in bytes.
    pub len: u32,
    /// Local key of the memory region holding the segment (unused by inline sends).
    pub lkey: u32,
}

/// A receive buffer to post.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr {
    /// Caller's identifier, given back in the receive's [`Wc`].
    pub wr_id: u64,
    /// Start of the buffer in local memory.
    pub addr: *mut u8,
    /// Buffer length in bytes: the largest message it can receive.
    pub len: u32,
    /// Local key of the memory region holding the buffer.
    pub lkey: u32,
}

/// What a send-queue work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// SEND the local segment to the peer's next posted receive.
    Send,
    /// SEND, and invalidate the peer's `rkey` (the host asked with a keyed SGL subtype Fh).
    SendInvalidate(u32),
    /// RDMA WRITE the local segments to the peer's (addr, rkey).
    Write {
        /// Peer's memory address (remote virtual address).
        addr: u64,
        /// Peer's remote key for that memory.
        rkey: u32,
    },
    /// RDMA READ the peer's (addr, rkey) into the local segments.
    Read {
        /// Peer's memory address (remote virtual address).
        addr: u64,
        /// Peer's remote key for that memory.
        rkey: u32,
    },
}

/// A send-queue work request.
#[derive(Clone, Copy, Debug)]
pub struct SendWr {
    /// Caller's identifier, given back in the request's [`Wc`].
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// The local memory: NVMe/RDMA moves each command's data, and each capsule, as one
    /// segment (no allocation per work request).
    pub sge: Sge,
    /// Ask for a completion ([`Wc`]) when this request is done; unsignaled requests complete
    /// silently.
    pub signaled: bool,
    /// Copy the data into the WR (small SENDs: no registration needed).
    pub inline: bool,
}

/// An opened RDMA device (owned by librdmacm) and our protection domain on it.
pub struct Device {
    ctx: NonNull<sys::ibv_context>,
    pd: NonNull<sys::ibv_pd>,
}

// SAFETY: contexts and PDs may be used from any thread.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

/// One PD per device context for the whole process (memory registered once serves every
/// connection on the device). Never freed: devices live as long as the process.
fn devices_table() -> &'static Mutex<HashMap<usize, Arc<Device>>> {
    static T: OnceLock<Mutex<HashMap<usize, Arc<Device>>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Device {
    fn of(ctx: NonNull<sys::ibv_context>) -> Result<Arc<Device>> {
        let mut t = devices_table().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = t.get(&(ctx.as_ptr() as usize)) {
            return Ok(d.clone());
        }
        // SAFETY: a valid device context.
        let pd = unsafe { sys::ibv_alloc_pd(ctx.as_ptr()) };
        let pd = NonNull::new(pd).ok_or_else(|| last("ibv_alloc_pd"))?;
        let d = Arc::new(Device { ctx, pd });
        t.insert(ctx.as_ptr() as usize, d.clone());
        Ok(d)
    }

    /// A stable identity for this device (to key per-device tables).
    pub fn id(&self) -> usize {
        self.ctx.as_ptr() as usize
    }

    /// Register `len` bytes at `addr` for local writes and remote reads and writes.
    ///
    /// # Safety
    /// The memory must stay allocated (and not be remapped) until the returned [`Mr`] is
    /// dropped.
    pub unsafe fn register(&self, addr: *mut u8, len: usize) -> Result<Mr> {
        let access = (sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE)
            .0 as i32;
        // SAFETY: the caller keeps the memory alive; the PD is valid.
        let mr =
            unsafe { sys::ibv_reg_mr(self.pd.as_ptr(), addr as *mut libc::c_void, len, access) };
        let mr = NonNull::new(mr).ok_or_else(|| last("ibv_reg_mr"))?;
        Ok(Mr { mr, addr, len })
    }

    /// A completion channel on this device.
    pub fn comp_channel(&self) -> Result<CompChannel> {
        // SAFETY: a valid context.
        let ch = unsafe { sys::ibv_create_comp_channel(self.ctx.as_ptr()) };
        let ch = NonNull::new(ch).ok_or_else(|| last("ibv_create_comp_channel"))?;
        // SAFETY: a valid channel.
        set_nonblocking(unsafe { (*ch.as_ptr()).fd })?;
        Ok(CompChannel { ch })
    }

    /// A CQ of `entries`, notifying `ch` when armed.
    pub fn cq(&self, entries: i32, ch: Option<&CompChannel>) -> Result<Cq> {
        let chp = ch.map_or(null_mut(), |c| c.ch.as_ptr());
        // SAFETY: valid context and channel.
        let cq = unsafe { sys::ibv_create_cq(self.ctx.as_ptr(), entries, null_mut(), chp, 0) };
        let cq = NonNull::new(cq).ok_or_else(|| last("ibv_create_cq"))?;
        Ok(Cq { cq, unacked: 0 })
    }
}

/// Registered memory.
pub struct Mr {
    mr: NonNull<sys::ibv_mr>,
    addr: *mut u8,
    len: usize,
}

// SAFETY: an MR is an immutable handle.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// Local key: names this registration in local work requests ([`Sge::lkey`]).
    pub fn lkey(&self) -> u32 {
        // SAFETY: valid MR.
        unsafe { (*self.mr.as_ptr()).lkey }
    }
    /// Remote key: lets the peer access this memory by RDMA READ or WRITE.
    pub fn rkey(&self) -> u32 {
        // SAFETY: valid MR.
        unsafe { (*self.mr.as_ptr()).rkey }
    }
    /// Start of the registered memory.
    pub fn addr(&self) -> *mut u8 {
        self.addr
    }
    /// Length of the registered memory in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for a zero-length registration.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// True if `[p, p + len)` lies inside this registration.
    pub fn contains(&self, p: *const u8, len: usize) -> bool {
        let (a, b) = (self.addr as usize, self.addr as usize + self.len);
        let p = p as usize;
        p >= a && p.checked_add(len).is_some_and(|e| e <= b)
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by us, once.
        unsafe { sys::ibv_dereg_mr(self.mr.as_ptr()) };
    }
}

/// A completion channel (pollable fd).
pub struct CompChannel {
    ch: NonNull<sys::ibv_comp_channel>,
}

// SAFETY: a kernel fd wrapper.
unsafe impl Send for CompChannel {}

impl CompChannel {
    /// The channel's file descriptor: readable when a CQ on it has a completion event.
    pub fn fd(&self) -> RawFd {
        // SAFETY: valid channel.
        unsafe { (*self.ch.as_ptr()).fd }
    }

    /// Consume pending notifications for `cq` (call when the fd is readable, then
    /// [`Cq::arm`] and poll). Returns how many there were.
    pub fn drain(&self, cq: &mut Cq) -> usize {
        let mut n = 0;
        loop {
            let mut got: *mut sys::ibv_cq = null_mut();
            let mut ctx: *mut libc::c_void = null_mut();
            // SAFETY: valid channel (non-blocking: fails with EAGAIN when empty).
            if unsafe { sys::ibv_get_cq_event(self.ch.as_ptr(), &mut got, &mut ctx) } != 0 {
                break;
            }
            n += 1;
            cq.unacked += 1;
        }
        if cq.unacked >= 64 {
            // SAFETY: acknowledging events we got for this CQ.
            unsafe { sys::ibv_ack_cq_events(cq.cq.as_ptr(), cq.unacked) };
            cq.unacked = 0;
        }
        n
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: CQs on it are dropped first (their owner holds both, CQ first).
        unsafe { sys::ibv_destroy_comp_channel(self.ch.as_ptr()) };
    }
}

/// One work completion, copied out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wc {
    /// The `wr_id` of the work request this completes.
    pub wr_id: u64,
    /// 0 is success (`IBV_WC_SUCCESS`).
    pub status: u32,
    /// The kind of work request completed.
    pub opcode: WcOp,
    /// Bytes transferred: meaningful for receives and RDMA READs only.
    pub byte_len: u32,
    /// Number of the local QP the work request was posted to.
    pub qp_num: u32,
    /// The rkey the peer invalidated with its SEND (receive completions).
    pub invalidated_rkey: Option<u32>,
}

/// The kind of work request a completion is for (`ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WcOp {
    /// A SEND (with or without invalidate).
    #[default]
    Send,
    /// An RDMA WRITE.
    Write,
    /// An RDMA READ.
    Read,
    /// A receive (the peer's SEND arrived).
    Recv,
    /// Any other opcode (atomics, memory window binds, ...).
    Other,
}

impl Wc {
    /// True when the work request succeeded (`IBV_WC_SUCCESS`).
    pub fn ok(&self) -> bool {
        self.status == sys::ibv_wc_status::IBV_WC_SUCCESS
    }
    /// The status as text.
    pub fn status_str(&self) -> String {
        // SAFETY: returns a static string for any value.
        unsafe {
            std::ffi::CStr::from_ptr(sys::ibv_wc_status_str(self.status))
                .to_string_lossy()
                .into_owned()
        }
    }
}

/// A completion queue.
pub struct Cq {
    cq: NonNull<sys::ibv_cq>,
    unacked: u32,
}

// SAFETY: used by one thread at a time.
unsafe impl Send for Cq {}

impl Cq {
    /// Ask for a notification on the channel at the next completion.
    pub fn arm(&self) -> Result<()> {
        // SAFETY: valid CQ.
        check("ibv_req_notify_cq", unsafe {
            sys::ibv_req_notify_cq(self.cq.as_ptr(), 0)
        })
    }

    /// Poll up to `out.len()` completions; returns how many.
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        const N: usize = 32;
        let mut raw: [MaybeUninit<sys::ibv_wc>; N] = [const { MaybeUninit::uninit() }; N];
        let want = out.len().min(N) as i32;
        // SAFETY: `raw` has room for `want` entries.
        let n = unsafe { sys::ibv_poll_cq(self.cq.as_ptr(), want, raw[0].as_mut_ptr()) };
        if n < 0 {
            return Err(Error {
                op: "ibv_poll_cq",
                err: io::Error::other("CQ error"),
            });
        }
        let n = n as usize;
        for i in 0..n {
            // SAFETY: the first `n` entries were written by the provider.
            let w = unsafe { raw[i].assume_init_ref() };
            use sys::ibv_wc_opcode as o;
            let opcode = match w.opcode {
                o::IBV_WC_SEND => WcOp::Send,
                o::IBV_WC_RDMA_WRITE => WcOp::Write,
                o::IBV_WC_RDMA_READ => WcOp::Read,
                o::IBV_WC_RECV => WcOp::Recv,
                _ => WcOp::Other,
            };
            let inv = (w.wc_flags & sys::ibv_wc_flags::IBV_WC_WITH_INV.0) != 0;
            out[i] = Wc {
                wr_id: w.wr_id,
                status: w.status,
                opcode,
                byte_len: w.byte_len,
                qp_num: w.qp_num,
                // SAFETY: both union members are plain u32s: any bit pattern is valid; it holds
                // the rkey when WITH_INV is set.
                invalidated_rkey: inv
                    .then_some(unsafe { w.imm_data_invalidated_rkey_union.invalidated_rkey }),
            };
        }
        Ok(n)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: QPs using this CQ are destroyed first (their owner drops ids before CQs).
        unsafe {
            if self.unacked > 0 {
                sys::ibv_ack_cq_events(self.cq.as_ptr(), self.unacked);
            }
            sys::ibv_destroy_cq(self.cq.as_ptr());
        }
    }
}
