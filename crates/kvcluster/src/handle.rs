//! [`ClusterHandle`]: starts, steers and stops the control thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::session::{self, Shared};
use crate::{ClusterConfig, ClusterError, ClusterView, TimedEvent};

/// The owner of a node's control thread. Dropping it leaves the cluster gracefully (the
/// lease is revoked, so a master's successor is elected at once) and joins the thread.
pub struct ClusterHandle {
    shared: Arc<Shared>,
    events: Receiver<TimedEvent>,
    thread: Option<JoinHandle<()>>,
}

impl ClusterHandle {
    /// Validates `cfg` and starts the control thread. Returns at once: the node joins
    /// the cluster in the background (the view says `Fenced` until it knows its role).
    /// An unreachable etcd is not an error here; it is retried and reported as
    /// [`crate::ClusterEvent::EtcdUnavailable`].
    pub fn start(cfg: ClusterConfig) -> Result<(ClusterHandle, Arc<ClusterView>), ClusterError> {
        cfg.validate()?;
        let view = Arc::new(ClusterView::new(cfg.node_id));
        let shared = Arc::new(Shared {
            view: view.clone(),
            stop: AtomicBool::new(false),
            revoke_on_stop: AtomicBool::new(true),
            paused: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
        });
        let (tx, rx) = mpsc::channel();
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("kvcluster-{}", cfg.node_id))
            .spawn(move || session::run(cfg, sh, tx))
            .map_err(|e| ClusterError::Thread(e.to_string()))?;
        Ok((
            ClusterHandle {
                shared,
                events: rx,
                thread: Some(thread),
            },
            view,
        ))
    }

    /// The view the lcores read.
    pub fn view(&self) -> &Arc<ClusterView> {
        &self.shared.view
    }

    /// The next event, if one is pending.
    pub fn try_event(&self) -> Option<TimedEvent> {
        self.events.try_recv().ok()
    }

    /// The next event, waiting up to `timeout`.
    pub fn next_event(&self, timeout: Duration) -> Option<TimedEvent> {
        self.events.recv_timeout(timeout).ok()
    }

    /// Requests a planned switchover to `target` (or the best replica): see
    /// [`ClusterView::request_switchover`].
    pub fn request_switchover(&self, target: Option<u32>) {
        self.shared.view.request_switchover(target);
        self.shared.wake.notify_one();
    }

    /// Test hook: freezes the control thread (no lease renewal, no etcd traffic, no view
    /// updates) as if its process were stopped, while the lcores (the caller) go on.
    pub fn pause(&self) {
        self.shared.paused.store(true, Ordering::Release);
    }

    /// Test hook: undoes [`ClusterHandle::pause`].
    pub fn resume(&self) {
        self.shared.paused.store(false, Ordering::Release);
        self.shared.wake.notify_one();
    }

    /// Leaves the cluster gracefully (lease revoked) and joins the control thread.
    pub fn shutdown(mut self) {
        self.stop(true);
    }

    /// Test hook: stops the control thread without revoking the lease, as a crashed
    /// process would: the lease (and a master's leader key) lapse after the TTL.
    pub fn abandon(mut self) {
        self.stop(false);
    }

    fn stop(&mut self, revoke: bool) {
        self.shared.revoke_on_stop.store(revoke, Ordering::Release);
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ClusterHandle {
    fn drop(&mut self) {
        self.stop(true);
    }
}
