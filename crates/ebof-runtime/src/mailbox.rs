//! Where other threads reach a run loop: new connections and control-plane commands for a
//! reactor, and the waker that interrupts its `epoll_wait` (also used by the I/O engine's
//! worker threads and by the RDMA threads).

use crate::limits::Admitted;
use mio::{Token, Waker};
use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;

/// A connection handed to a reactor.
pub(crate) struct NewConn {
    pub stream: std::net::TcpStream,
    pub admitted: Admitted,
    pub local: SocketAddr,
    pub peer: SocketAddr,
    pub discovery_only: bool,
}

/// Where other threads reach a reactor: new connections, plus the waker that interrupts its
/// `epoll_wait` (also for the I/O engine's worker threads).
pub(crate) struct Mailbox {
    inbox: Mutex<Inbox>,
    waker: Waker,
}

/// What other threads hand a reactor: taken whole once per loop round (one lock).
#[derive(Default)]
pub(crate) struct Inbox {
    /// Accepted connections placed on this reactor.
    pub new_conns: Vec<NewConn>,
    /// Control-plane requests.
    pub commands: Vec<Command>,
}

/// Control-plane requests to a reactor.
pub(crate) enum Command {
    /// Accept on this listener (bound by the caller), discovery-only or not.
    AddListener(
        std::net::TcpListener,
        bool,
        std::sync::mpsc::Sender<io::Result<()>>,
    ),
    /// Stop accepting on the listener bound to this address and close it; answers whether
    /// there was one.
    RemoveListener(SocketAddr, std::sync::mpsc::Sender<bool>),
}

impl Mailbox {
    /// A mailbox whose waker interrupts `registry`'s poll with `token`.
    pub fn new(registry: &mio::Registry, token: Token) -> io::Result<Mailbox> {
        Ok(Mailbox {
            inbox: Mutex::new(Inbox::default()),
            waker: Waker::new(registry, token)?,
        })
    }
    pub fn deliver(&self, c: NewConn) {
        if let Ok(mut v) = self.inbox.lock() {
            v.new_conns.push(c);
        }
        let _ = self.waker.wake();
    }
    pub fn command(&self, c: Command) {
        if let Ok(mut v) = self.inbox.lock() {
            v.commands.push(c);
        }
        let _ = self.waker.wake();
    }
    pub fn wake(&self) {
        let _ = self.waker.wake();
    }
    /// Everything handed over since the last call (one lock; none taken when empty).
    pub fn take(&self) -> Inbox {
        match self.inbox.lock() {
            Ok(mut v) if !v.new_conns.is_empty() || !v.commands.is_empty() => {
                std::mem::take(&mut *v)
            }
            _ => Inbox::default(),
        }
    }
}
