//! Where other threads reach a run loop: new connections and control-plane commands for a
//! reactor, and the waker that interrupts its `epoll_wait` (also used by the I/O engine's
//! worker threads and by the RDMA threads).

use crate::limits::Admitted;
use mio::{Token, Waker};
use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering, fence};

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
    /// The run loop is between polls or spinning (it reaps every round): a completion needs
    /// no eventfd write ([`Mailbox::notify`]). False while it may sleep in `epoll_wait`, and
    /// always for a loop that never says ([`Mailbox::awake`]).
    awake: AtomicBool,
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
            awake: AtomicBool::new(false),
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
    /// A completion was handed over (its channel written before this call): wake the loop
    /// only if it may be asleep. A spinning loop reaps every round, and a write to the
    /// eventfd per completion would cost a syscall each, and on a shared core a switch to
    /// the loop per completion.
    pub fn notify(&self) {
        // Pairs with the fence in `going_to_sleep`: either this load sees `false`, or the
        // loop's reap after its fence sees what was sent before this call.
        fence(Ordering::SeqCst);
        if !self.awake.load(Ordering::Relaxed) {
            let _ = self.waker.wake();
        }
    }
    /// The loop polls without sleeping until [`Mailbox::going_to_sleep`]: completions need
    /// no wake-up.
    pub fn awake(&self) {
        self.awake.store(true, Ordering::Relaxed);
    }
    /// The loop may sleep in its next poll: from now on [`Mailbox::notify`] wakes it. The
    /// caller reaps its completion channels after this call, and does not sleep if it found
    /// any.
    pub fn going_to_sleep(&self) {
        self.awake.store(false, Ordering::Relaxed);
        fence(Ordering::SeqCst);
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
