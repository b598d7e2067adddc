//! A fixed-size worker pool per reactor: at most `max` threads, started when jobs wait and no
//! thread is idle, kept until the reactor stops. Jobs beyond the threads wait in a queue.

use super::{Done, Job};
use crate::mailbox::Mailbox;
use ebof_backend::BackendError;
use nvmf_target::{execute_io, io_status};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread::JoinHandle;

pub(super) struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    max: usize,
    core: usize,
    done: mpsc::Sender<Done>,
    mailbox: Arc<Mailbox>,
}

struct Shared {
    state: Mutex<State>,
    work: Condvar,
}

/// What a worker thread runs: an I/O job, or a call that reports for itself (a write an
/// asynchronous backend declined, see `Engine::start_async`).
enum Work {
    Io(Job),
    Call(Box<dyn FnOnce() + Send>),
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Work>,
    /// Threads waiting for a job.
    idle: usize,
    stop: bool,
}

impl Pool {
    pub fn new(core: usize, max: usize, done: mpsc::Sender<Done>, mailbox: Arc<Mailbox>) -> Pool {
        Pool {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                work: Condvar::new(),
            }),
            threads: Vec::new(),
            max,
            core,
            done,
            mailbox,
        }
    }

    /// Queue `job`; start a thread if jobs outnumber idle threads and the pool is not full.
    pub fn spawn(&mut self, job: Job) {
        self.queue(Work::Io(job));
    }

    /// Queue a call that reports its own completion.
    pub fn spawn_call(&mut self, call: Box<dyn FnOnce() + Send>) {
        self.queue(Work::Call(call));
    }

    fn queue(&mut self, work: Work) {
        let need_thread = {
            let Ok(mut st) = self.shared.state.lock() else {
                // A worker panicked while holding the lock: fail the job rather than lose it.
                return self.fail(work, std::io::Error::other("I/O worker pool is poisoned"));
            };
            st.jobs.push_back(work);
            st.jobs.len() > st.idle && self.threads.len() < self.max
        };
        if need_thread && let Err(e) = self.start_thread() {
            tracing::warn!(core = self.core, error = %e, "cannot start an I/O worker thread");
            if self.threads.is_empty() {
                // Nobody will ever run the queue: fail what waits.
                let jobs: Vec<Work> = match self.shared.state.lock() {
                    Ok(mut st) => st.jobs.drain(..).collect(),
                    Err(_) => Vec::new(),
                };
                for job in jobs {
                    self.fail(job, std::io::Error::other("no I/O worker thread"));
                }
                return;
            }
        }
        self.shared.work.notify_one();
    }

    fn fail(&self, work: Work, e: std::io::Error) {
        match work {
            Work::Io(job) => {
                let status = io_status(&job.req, Err(BackendError::Io(e)));
                let _ = self.done.send(job.done(status));
                self.mailbox.notify();
            }
            // No thread to run it on: run it here (a write the backend declined to start
            // without blocking; it completes, slowly, rather than being lost).
            Work::Call(call) => call(),
        }
    }

    fn start_thread(&mut self) -> std::io::Result<()> {
        let shared = self.shared.clone();
        let done = self.done.clone();
        let mailbox = self.mailbox.clone();
        let t = std::thread::Builder::new()
            .name(format!("ebof-io{}", self.core))
            .spawn(move || worker(&shared, &done, &mailbox))?;
        self.threads.push(t);
        Ok(())
    }
}

fn worker(shared: &Shared, done: &mpsc::Sender<Done>, mailbox: &Mailbox) {
    let Ok(mut st) = shared.state.lock() else {
        return;
    };
    loop {
        if let Some(work) = st.jobs.pop_front() {
            drop(st);
            match work {
                Work::Io(mut job) => {
                    let status = execute_io(&job.req, &mut job.buf);
                    let _ = done.send(job.done(status));
                    mailbox.notify();
                }
                Work::Call(call) => call(),
            }
            st = match shared.state.lock() {
                Ok(st) => st,
                Err(_) => return,
            };
        } else if st.stop {
            return;
        } else {
            st.idle += 1;
            st = match shared.work.wait(st) {
                Ok(st) => st,
                Err(_) => return,
            };
            st.idle -= 1;
        }
    }
}

impl Drop for Pool {
    /// Let the threads finish what is queued, then end them.
    fn drop(&mut self) {
        if let Ok(mut st) = self.shared.state.lock() {
            st.stop = true;
        }
        self.shared.work.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
