//! The way into the link thread: one queue of [`LinkReq`]s in the order they were made, and a
//! wake-up that a sender may hold back. A reactor starts many writes in one round; it queues
//! them with [`LinkTx::hold`] and wakes the link once at the round's end
//! ([`LinkTx::push`]), so the link takes them together instead of one switch of threads per
//! write (on a shared core, each wake-up would hand the core to the link mid-round).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::pipe::LinkReq;

struct Queue {
    reqs: VecDeque<LinkReq>,
    /// The link is gone: nothing more is taken.
    closed: bool,
}

struct Chan {
    q: Mutex<Queue>,
    ready: Notify,
}

impl Chan {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The senders' end (any thread).
#[derive(Clone)]
pub(crate) struct LinkTx(Arc<Chan>);

/// The link thread's end.
#[derive(Clone)]
pub(crate) struct LinkRx(Arc<Chan>);

/// A new channel.
pub(crate) fn channel() -> (LinkTx, LinkRx) {
    let c = Arc::new(Chan {
        q: Mutex::new(Queue {
            reqs: VecDeque::new(),
            closed: false,
        }),
        ready: Notify::new(),
    });
    (LinkTx(c.clone()), LinkRx(c))
}

impl LinkTx {
    /// Queue `r` and wake the link. Err(r): the link is gone (the caller fails `r`).
    pub(crate) fn send(&self, r: LinkReq) -> Result<(), LinkReq> {
        self.hold(r)?;
        self.0.ready.notify_one();
        Ok(())
    }

    /// Queue `r` without waking the link: it goes with the next [`LinkTx::push`] (or
    /// whatever else wakes the link first). Err(r): the link is gone.
    pub(crate) fn hold(&self, r: LinkReq) -> Result<(), LinkReq> {
        let mut q = self.0.lock();
        if q.closed {
            return Err(r);
        }
        q.reqs.push_back(r);
        Ok(())
    }

    /// Wake the link if anything is queued.
    pub(crate) fn push(&self) {
        if !self.0.lock().reqs.is_empty() {
            self.0.ready.notify_one();
        }
    }
}

impl LinkRx {
    /// The next request, waiting for one; None once closed and empty. Cancel-safe: a request
    /// is taken only when this returns it.
    pub(crate) async fn recv(&self) -> Option<LinkReq> {
        loop {
            if let Some(r) = self.try_recv() {
                return Some(r);
            }
            if self.0.lock().closed {
                return None;
            }
            // A wake-up given since the check above is stored (`notify_one`'s permit).
            self.0.ready.notified().await;
        }
    }

    /// The next request if one is queued.
    pub(crate) fn try_recv(&self) -> Option<LinkReq> {
        self.0.lock().reqs.pop_front()
    }

    /// Take no more requests and fail those queued.
    pub(crate) fn close(&self) {
        let left = {
            let mut q = self.0.lock();
            q.closed = true;
            std::mem::take(&mut q.reqs)
        };
        for r in left {
            r.fail();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn flush(count: &Arc<AtomicUsize>, ok_seen: Arc<Mutex<Vec<bool>>>) -> LinkReq {
        let count = count.clone();
        LinkReq::Flush {
            done: Box::new(move |ok| {
                count.fetch_add(1, Ordering::SeqCst);
                ok_seen.lock().unwrap().push(ok);
            }),
        }
    }

    #[tokio::test]
    async fn held_requests_wait_for_a_push_and_keep_their_order() {
        let (tx, rx) = channel();
        let n = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..3 {
            assert!(tx.hold(flush(&n, seen.clone())).is_ok());
        }
        // Held, not woken: a waiting receiver is not woken, but a taker finds them.
        let woken = tokio::time::timeout(std::time::Duration::from_millis(20), async {
            rx.0.ready.notified().await
        })
        .await;
        assert!(woken.is_err(), "a hold woke the link");
        tx.push();
        let mut got = 0;
        while let Ok(Some(r)) =
            tokio::time::timeout(std::time::Duration::from_millis(20), rx.recv()).await
        {
            r.fail();
            got += 1;
        }
        assert_eq!(got, 3);
        assert_eq!(n.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_closed_link_fails_what_is_queued_and_refuses_more() {
        let (tx, rx) = channel();
        let n = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        assert!(tx.hold(flush(&n, seen.clone())).is_ok());
        rx.close();
        assert_eq!(n.load(Ordering::SeqCst), 1);
        assert_eq!(*seen.lock().unwrap(), vec![false]);
        let back = tx.send(flush(&n, seen.clone()));
        assert!(back.is_err(), "a closed link took a request");
        assert!(rx.recv().await.is_none());
    }
}
