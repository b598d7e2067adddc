//! A mirror's background thread: its own current-thread tokio runtime running one loop, a
//! channel into it, and a stop flag with a wake-up (the replication link and the lease loop).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::{Notify, mpsc};

/// What the loop gets: its requests, the stop flag and the wake-up that comes with a stop.
pub(crate) struct Inbox<T> {
    pub(crate) rx: mpsc::UnboundedReceiver<T>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) wake: Arc<Notify>,
}

/// The thread and the channel to it.
pub(crate) struct Worker<T> {
    tx: mpsc::UnboundedSender<T>,
    stop: Arc<AtomicBool>,
    wake: Arc<Notify>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl<T: Send + 'static> Worker<T> {
    /// Thread `name` runs `body(inbox)` to its end on a runtime of its own.
    pub(crate) fn spawn<F, Fut>(name: String, body: F) -> std::io::Result<Worker<T>>
    where
        F: FnOnce(Inbox<T>) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let stop = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(Notify::new());
        let inbox = Inbox {
            rx,
            stop: stop.clone(),
            wake: wake.clone(),
        };
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return tracing::error!("mirror runtime: {e}"),
            };
            rt.block_on(body(inbox));
        })?;
        Ok(Worker {
            tx,
            stop,
            wake,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// A sender into the loop.
    pub(crate) fn sender(&self) -> mpsc::UnboundedSender<T> {
        self.tx.clone()
    }

    /// Set the stop flag, wake the loop and join the thread (idempotent).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake.notify_one();
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}
