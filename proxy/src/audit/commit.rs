//! The background group commit of upstream-action events (issue 17's product decision).
//!
//! A `tools/call` and its outcome are not security state: nothing a later request depends on
//! is created, consumed or revoked by recording them. So the call does not wait for its event
//! to be durable. [`Audit::write`](super::Audit) builds the record exactly as for any other
//! event (id, clock time, request id, metrics, log line, its place in the trail) and hands it
//! here; one task per sink writes what is pending and makes it durable together (sled: one
//! batch and one flush; PostgreSQL: one statement) once the window has passed since the
//! group's first event, or as soon as `max_events` are pending, whichever comes first. A crash
//! can lose at most the events of the group not yet durable: about one window's worth, never
//! security state (every other event kind keeps the write-then-answer path).
//!
//! Memory is bounded: at most `max_events` wait in the queue (the task holds one group being
//! written, and at most one failed group kept for its retry); past that, recording waits for
//! room (backpressure), it never drops. A group that could not be made durable is logged as an
//! error, counted, and tried once more with the next group (its entries keep their keys, so
//! writing them again replaces them); if that fails too its events are counted as lost. The
//! webhook hears of an event only once its group is durable. [`Committer::drain`] makes
//! everything queued before it durable (shutdown, and readers of the trail).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::{Instant, sleep_until, timeout};

use super::{GroupCommit, Observer};
use crate::store::audit_log::{self, Entry};
use crate::store::{SharedStore, StoreError};

/// One queued event and the webhook to offer it to once it is durable.
pub(super) struct Item {
    pub(super) entry: Entry,
    hook: Option<super::webhook::Webhook>,
    /// When it was recorded: its group's window runs from its first event's recording.
    /// (Monotonic time for a delay only; the event's own time comes from the injected clock.)
    queued: Instant,
}

impl Item {
    /// `entry`, recorded now, to be offered to `hook` once durable.
    pub(super) fn new(entry: Entry, hook: Option<super::webhook::Webhook>) -> Item {
        Item {
            entry,
            hook,
            queued: Instant::now(),
        }
    }
}

enum Msg {
    Event(Item),
    /// Commit everything queued before this now, then answer.
    Drain(oneshot::Sender<()>),
}

/// Where a group goes: the store (a seam so the tests can watch and fail writes).
#[async_trait::async_trait]
pub(super) trait Sink: Send + Sync + 'static {
    async fn write(&self, entries: &[&Entry]) -> Result<(), StoreError>;
}

#[async_trait::async_trait]
impl Sink for SharedStore {
    async fn write(&self, entries: &[&Entry]) -> Result<(), StoreError> {
        audit_log::append_many(self.as_ref(), entries).await
    }
}

/// The handle writers queue into (one, shared by the audit sink). The task ends, after
/// committing what is left, once it is dropped.
pub(super) struct Committer {
    tx: mpsc::Sender<Msg>,
    /// Events queued and not yet durable (or given up): drain returns at once at zero.
    outstanding: Arc<AtomicUsize>,
    /// Ends the task's wait for a group's window early: the group is full, or a drain waits.
    /// Queuing an event does not wake the task (one wake per group, not per event: at many
    /// thousand calls a second a wake per event cost more than writing the event).
    wake: Arc<Notify>,
    /// The most events in one group.
    max_events: usize,
}

impl Committer {
    /// Starts the task on the current runtime; `None` outside one (the caller writes each
    /// event durably itself then).
    pub(super) fn start(
        sink: impl Sink,
        policy: GroupCommit,
        metrics: Arc<dyn Observer>,
    ) -> Option<Committer> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        let (tx, rx) = mpsc::channel(policy.max_events.max(1));
        let outstanding = Arc::new(AtomicUsize::new(0));
        let wake = Arc::new(Notify::new());
        let task = Task {
            sink: Box::new(sink),
            policy,
            metrics,
            outstanding: outstanding.clone(),
            retry: Vec::new(),
            wake: wake.clone(),
        };
        rt.spawn(task.run(rx));
        Some(Committer {
            tx,
            outstanding,
            wake,
            max_events: policy.max_events.max(1),
        })
    }

    /// Queues an event; waits only while the queue is full. Hands the item back if the task
    /// is gone (its runtime stopped): the caller then writes it itself. Cancel-safe: until
    /// room is reserved nothing is counted, and once it is the event is queued at once.
    pub(super) async fn enqueue(&self, item: Item, metrics: &dyn Observer) -> Result<(), Item> {
        let Ok(room) = self.tx.reserve().await else {
            return Err(item);
        };
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        metrics.upstream_action_queued();
        room.send(Msg::Event(item));
        // Queued behind the one the task holds: with it, a full group.
        let queued = self.tx.max_capacity() - self.tx.capacity();
        if queued + 1 >= self.max_events {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// Returns once every event queued before the call is durable (or its commit failed and
    /// was logged); at once when nothing is outstanding. Returns how many were outstanding.
    pub(super) async fn drain(&self) -> usize {
        let outstanding = self.outstanding.load(Ordering::Acquire);
        if outstanding == 0 {
            return 0;
        }
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Drain(tx)).await.is_ok() {
            self.wake.notify_one();
            let _ = rx.await;
        }
        outstanding
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        // What is queued is committed now, not at the end of its window.
        self.wake.notify_one();
    }
}

struct Task {
    sink: Box<dyn Sink>,
    policy: GroupCommit,
    metrics: Arc<dyn Observer>,
    outstanding: Arc<AtomicUsize>,
    /// A group whose commit failed once: written again with the next one.
    retry: Vec<Item>,
    /// See [`Committer::wake`].
    wake: Arc<Notify>,
}

impl Task {
    async fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        let window = self.policy.window();
        loop {
            // Wait for a group's first event; a group waiting for its retry waits one window.
            let first = if self.retry.is_empty() {
                rx.recv().await
            } else {
                match timeout(window, rx.recv()).await {
                    Ok(m) => m,
                    Err(_) => {
                        self.commit(Vec::new(), Vec::new()).await;
                        continue;
                    }
                }
            };
            let Some(first) = first else { break };
            let deadline = match &first {
                Msg::Event(i) => i.queued + window,
                Msg::Drain(_) => Instant::now(),
            };
            let mut group = Vec::new();
            let mut waiters = Vec::new();
            let mut closed = false;
            take(first, &mut group, &mut waiters);
            if waiters.is_empty() && self.policy.max_events > 1 {
                // The window, unless the group fills or a drain comes first (`Committer::wake`).
                tokio::select! {
                    () = sleep_until(deadline) => {}
                    () = self.wake.notified() => {}
                }
            }
            while waiters.is_empty() && group.len() < self.policy.max_events {
                match rx.try_recv() {
                    Ok(m) => take(m, &mut group, &mut waiters),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            self.commit(group, waiters).await;
            if closed {
                break;
            }
        }
        // Every handle is gone: what was retried last gets its second attempt.
        if !self.retry.is_empty() {
            self.commit(Vec::new(), Vec::new()).await;
        }
    }

    /// Writes the retried group and `group` together; answers `waiters` afterwards.
    async fn commit(&mut self, group: Vec<Item>, waiters: Vec<oneshot::Sender<()>>) {
        let retried = std::mem::take(&mut self.retry);
        let second = retried.len();
        let mut items = retried;
        items.extend(group);
        if !items.is_empty() {
            let entries: Vec<&Entry> = items.iter().map(|i| &i.entry).collect();
            match self.sink.write(&entries).await {
                Ok(()) => {
                    self.settle(items.len());
                    self.metrics.upstream_actions_committed(items.len());
                    // Only now: what the webhook announces is always in the trail.
                    for i in &items {
                        if let Some(hook) = &i.hook {
                            hook.offer(i.entry.record());
                        }
                    }
                }
                Err(e) => {
                    let lost = second;
                    tracing::error!(
                        error = %e,
                        events = items.len(),
                        retried = second,
                        "could not make upstream-action audit events durable; {}",
                        if lost > 0 {
                            "the retried ones are lost, the others are tried once more"
                        } else {
                            "trying once more with the next group"
                        }
                    );
                    let fresh = items.split_off(second);
                    self.metrics
                        .upstream_actions_commit_failed(fresh.len() + lost, lost);
                    if lost > 0 {
                        self.settle(lost);
                    }
                    self.retry = fresh;
                }
            }
        }
        for w in waiters {
            let _ = w.send(());
        }
    }

    fn settle(&self, n: usize) {
        self.outstanding.fetch_sub(n, Ordering::AcqRel);
        self.metrics.upstream_actions_settled(n);
    }
}

fn take(m: Msg, group: &mut Vec<Item>, waiters: &mut Vec<oneshot::Sender<()>>) {
    match m {
        Msg::Event(i) => group.push(i),
        Msg::Drain(w) => waiters.push(w),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::tests::Seen;
    use crate::clock::UnixTime;
    use crate::store::records::AuditRecord;
    use std::sync::Mutex;
    use std::time::Duration;

    /// Records each group written (event ids); fails the first `fail` writes; while `gate` is
    /// closed, a write waits.
    #[derive(Clone, Default)]
    struct Groups {
        written: Arc<Mutex<Vec<Vec<String>>>>,
        fail: Arc<AtomicUsize>,
        gate: Option<Arc<tokio::sync::Semaphore>>,
    }

    #[async_trait::async_trait]
    impl Sink for Groups {
        async fn write(&self, entries: &[&Entry]) -> Result<(), StoreError> {
            if let Some(g) = &self.gate {
                g.acquire().await.unwrap().forget();
            }
            let ids = entries.iter().map(|e| e.record().id.clone()).collect();
            if self.fail.load(Ordering::Acquire) > 0 {
                self.fail.fetch_sub(1, Ordering::AcqRel);
                return Err(StoreError::Backend("disk full".to_owned()));
            }
            self.written.lock().unwrap().push(ids);
            Ok(())
        }
    }

    impl Groups {
        fn groups(&self) -> Vec<Vec<String>> {
            self.written.lock().unwrap().clone()
        }
    }

    fn item(id: &str) -> Item {
        let rec = AuditRecord {
            id: id.to_owned(),
            at: UnixTime(1_800_000_000),
            request_id: None,
            kind: "upstream_action".to_owned(),
            event: serde_json::json!({"event": "upstream_action"}),
        };
        Item::new(Entry::new(rec, UnixTime(1_900_000_000)), None)
    }

    fn policy(window_ms: u64, max_events: usize) -> GroupCommit {
        GroupCommit {
            window_ms,
            max_events,
        }
    }

    /// Lets the committer task run to its next wait (time does not move: it is paused).
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_is_made_durable_once_its_window_has_passed_and_not_before() {
        let sink = Groups::default();
        let seen = Seen::default();
        let c = Committer::start(sink.clone(), policy(10, 256), Arc::new(seen.clone())).unwrap();
        for id in ["a", "b", "c"] {
            c.enqueue(item(id), &seen).await.ok().unwrap();
        }
        settle().await;
        assert!(
            sink.groups().is_empty(),
            "nothing written before the window"
        );
        tokio::time::advance(Duration::from_millis(9)).await;
        settle().await;
        assert!(sink.groups().is_empty(), "9 ms: still within the window");
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
        assert_eq!(
            sink.groups(),
            [ids(&["a", "b", "c"])],
            "one group, in order"
        );
        assert_eq!(seen.count("queued"), 3);
        assert_eq!(seen.count("committed 3"), 1);
        assert_eq!(seen.count("settled 3"), 1);
        // The next event opens a new window of its own.
        c.enqueue(item("d"), &seen).await.ok().unwrap();
        tokio::time::advance(Duration::from_millis(5)).await;
        settle().await;
        assert_eq!(sink.groups().len(), 1);
        tokio::time::advance(Duration::from_millis(5)).await;
        settle().await;
        assert_eq!(sink.groups(), [ids(&["a", "b", "c"]), ids(&["d"])]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_group_is_made_durable_at_once_without_waiting_for_the_window() {
        let sink = Groups::default();
        let seen = Seen::default();
        let c = Committer::start(sink.clone(), policy(1000, 4), Arc::new(seen.clone())).unwrap();
        let started = Instant::now();
        for id in ["a", "b", "c", "d", "e"] {
            c.enqueue(item(id), &seen).await.ok().unwrap();
        }
        settle().await;
        assert_eq!(sink.groups(), [ids(&["a", "b", "c", "d"])]);
        assert_eq!(started.elapsed(), Duration::ZERO, "by count, not by time");
        // The fifth waits for its own window.
        tokio::time::advance(Duration::from_millis(999)).await;
        settle().await;
        assert_eq!(sink.groups().len(), 1);
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
        assert_eq!(sink.groups(), [ids(&["a", "b", "c", "d"]), ids(&["e"])]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_makes_the_writer_wait_and_drops_nothing() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let sink = Groups {
            gate: Some(gate.clone()),
            ..Groups::default()
        };
        let seen = Seen::default();
        let c = Arc::new(
            Committer::start(sink.clone(), policy(10, 2), Arc::new(seen.clone())).unwrap(),
        );
        // Two fill a group, which the committer is now writing (the gate holds the write).
        for id in ["a", "b"] {
            c.enqueue(item(id), &seen).await.ok().unwrap();
        }
        settle().await;
        // Two more fill the queue; the fifth writer waits.
        for id in ["c", "d"] {
            c.enqueue(item(id), &seen).await.ok().unwrap();
        }
        let c2 = Arc::clone(&c);
        let seen2 = seen.clone();
        let fifth = tokio::spawn(async move { c2.enqueue(item("e"), &seen2).await.is_ok() });
        settle().await;
        assert!(!fifth.is_finished(), "the writer waits for room");
        gate.add_permits(10);
        assert!(fifth.await.unwrap(), "then it is queued");
        c.drain().await;
        let all: Vec<String> = sink.groups().concat();
        assert_eq!(all, ids(&["a", "b", "c", "d", "e"]), "nothing dropped");
        assert!(sink.groups().iter().all(|g| g.len() <= 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_group_is_counted_and_written_again_with_the_next_then_given_up() {
        let sink = Groups::default();
        sink.fail.store(1, Ordering::Release);
        let seen = Seen::default();
        let c = Committer::start(sink.clone(), policy(10, 256), Arc::new(seen.clone())).unwrap();
        c.enqueue(item("a"), &seen).await.ok().unwrap();
        c.enqueue(item("b"), &seen).await.ok().unwrap();
        tokio::time::advance(Duration::from_millis(10)).await;
        settle().await;
        assert!(sink.groups().is_empty());
        assert_eq!(seen.count("failed 2 lost 0"), 1);
        assert_eq!(seen.count("settled 2"), 0, "still pending");
        // The retry goes with the next group, in order.
        c.enqueue(item("c"), &seen).await.ok().unwrap();
        tokio::time::advance(Duration::from_millis(10)).await;
        settle().await;
        assert_eq!(sink.groups(), [ids(&["a", "b", "c"])]);
        assert_eq!(seen.count("committed 3"), 1);

        // Failing twice: given up, counted as lost; without a next event the retry still
        // comes one window later.
        sink.fail.store(2, Ordering::Release);
        c.enqueue(item("d"), &seen).await.ok().unwrap();
        tokio::time::advance(Duration::from_millis(10)).await;
        settle().await;
        assert_eq!(seen.count("failed 1 lost 0"), 1);
        tokio::time::advance(Duration::from_millis(10)).await;
        settle().await;
        assert_eq!(seen.count("failed 1 lost 1"), 1);
        assert_eq!(seen.count("settled 1"), 1);
        assert_eq!(sink.groups().len(), 1, "d never reached the trail");
        c.drain().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_makes_everything_queued_before_it_durable_without_waiting_for_the_window() {
        let sink = Groups::default();
        let seen = Seen::default();
        let c = Committer::start(sink.clone(), policy(1000, 256), Arc::new(seen.clone())).unwrap();
        c.drain().await; // nothing outstanding: at once
        for id in ["a", "b"] {
            c.enqueue(item(id), &seen).await.ok().unwrap();
        }
        let started = Instant::now();
        c.drain().await;
        assert_eq!(sink.groups(), [ids(&["a", "b"])]);
        assert_eq!(started.elapsed(), Duration::ZERO);
        // Dropping the last handle commits what is left, too.
        c.enqueue(item("c"), &seen).await.ok().unwrap();
        drop(c);
        settle().await;
        assert_eq!(sink.groups(), [ids(&["a", "b"]), ids(&["c"])]);
    }
}
