//! How replicas on one PostgreSQL database keep each other's record caches exact
//! (`store::cache`), so that a revocation written by one is honoured by the next request on
//! every other.
//!
//! - A trigger on `mop_kv` (migration 2) sends `k <keyspace> <key>` on the channel
//!   `mop_<schema>` for every changed row of a cached keyspace, whoever changed it (a replica,
//!   the sweeper, `store-migrate`, an operator with `psql`). PostgreSQL delivers notifications
//!   at commit, to every listener, in commit order, and refuses a commit whose notification
//!   it could not queue: none is lost while a listener is connected.
//! - Each replica listens on one dedicated connection and drops each named key as the
//!   notification arrives, in order.
//! - **Lease.** Every [`HEARTBEAT`] a replica notifies `h <id> <n>`; when its own heartbeat
//!   comes back, it has applied every notification committed before it, and may answer from
//!   its cache until [`LEASE`] after it *sent* that heartbeat. A replica whose listener is
//!   down or behind stops answering from its cache within [`LEASE`]; after a reconnect it
//!   starts empty.
//! - **Settle.** After a write to a cached keyspace, before the response leaves, the writer
//!   notifies `b <id> <n>` and waits until its own listener has seen it (so it has heard the
//!   heartbeats of every replica that started before the write), then until each replica
//!   heard from within [`LEASE`] + [`MARGIN`] answers `a <peer> <id> <n>` (sent after it
//!   applied everything up to the barrier, the write's keys included). It never waits past
//!   [`LEASE`] + [`MARGIN`] from the barrier: by then any replica that has not answered has
//!   lost its lease (its leases come from heartbeats sent before the write committed; any
//!   later heartbeat it sees comes after the write's notification). That full wait is also
//!   what a listener younger than [`LEASE`] + [`MARGIN`] does (it may not yet have heard a
//!   replica whose last heartbeat came before it listened), and a barrier that could not be
//!   sent.
//! - Only a heartbeat that the listener's own server process sent earns a lease, and a
//!   listener that has not heard itself for 3 × [`LEASE`] reconnects.
//!
//! Times are the replica's own monotonic clock (`tokio::time::Instant`, paused in tests); the
//! argument needs only that replicas' clocks run at about the same rate ([`MARGIN`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_postgres::AsyncMessage;

use super::cache::{Peers, RecordCache};
use super::{Keyspace, StoreError};

/// How often a replica renews its lease.
pub const HEARTBEAT: Duration = Duration::from_millis(200);
/// How long a heartbeat's echo lets the cache answer, from when the heartbeat was sent.
pub const LEASE: Duration = Duration::from_millis(1000);
/// Slack for replicas' clocks running at slightly different rates, and for scheduling.
pub const MARGIN: Duration = Duration::from_millis(250);
/// How long a lost listener waits before connecting again.
const RECONNECT: Duration = Duration::from_millis(500);

/// The trigger's channel for a schema.
pub fn channel(schema: &str) -> String {
    format!("mop_{schema}")
}

/// A waiting settle.
struct Barrier {
    /// Our own listener has seen the barrier.
    echoed: bool,
    /// Replicas that have yet to answer.
    waiting: Vec<String>,
    /// Our listener had not been listening for a whole lease when the barrier came back, so
    /// it may not have heard every live replica: wait for the deadline.
    full_wait: bool,
}

impl Barrier {
    fn new() -> Barrier {
        Barrier {
            echoed: false,
            waiting: Vec::new(),
            full_wait: false,
        }
    }

    /// Whether the settle may end before its deadline.
    fn settled(&self) -> bool {
        self.echoed && !self.full_wait && self.waiting.is_empty()
    }
}

#[derive(Default)]
struct State {
    /// Since when connected and listening.
    listening_since: Option<Instant>,
    /// The listener connection's server process: only heartbeats it sent itself renew the
    /// lease (through a transaction pooler, LISTEN and NOTIFY could run on different server
    /// connections, and the echo would prove nothing).
    backend_pid: Option<i32>,
    lease_until: Option<Instant>,
    /// When our own heartbeat last came back (or listening began).
    last_echo: Option<Instant>,
    /// Heartbeats sent and not yet back: number, when sent.
    sent: VecDeque<(u64, Instant)>,
    next_heartbeat: u64,
    /// Other replicas, by when we last heard their heartbeat.
    peers: HashMap<String, Instant>,
    barriers: HashMap<u64, Barrier>,
    next_barrier: u64,
}

struct Shared {
    me: String,
    channel: String,
    cache: Arc<RecordCache>,
    state: Mutex<State>,
    changed: Notify,
}

/// [`Peers`] on PostgreSQL (see the module).
pub struct PgPeers {
    shared: Arc<Shared>,
    /// For the barrier notifications (any connection: a notification's order is its commit's).
    pool: Pool,
}

/// What connecting the listener needs (TLS or not is the store's choice).
pub type Connect = Arc<
    dyn Fn() -> std::pin::Pin<
            Box<
                dyn std::future::Future<
                        Output = Result<
                            (
                                tokio_postgres::Client,
                                mpsc::UnboundedReceiver<AsyncMessage>,
                            ),
                            String,
                        >,
                    > + Send,
            >,
        > + Send
        + Sync,
>;

impl PgPeers {
    /// Starts the listener of replica `me` for `schema`'s channel.
    pub fn start(
        me: String,
        schema: &str,
        cache: Arc<RecordCache>,
        pool: Pool,
        connect: Connect,
    ) -> PgPeers {
        let shared = Arc::new(Shared {
            me,
            channel: channel(schema),
            cache,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        });
        let listener = shared.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = listen(&listener, &connect).await {
                    tracing::warn!(error = %e, "store cache listener lost; answering from the store until it is back");
                }
                listener.lost();
                tokio::time::sleep(RECONNECT).await;
            }
        });
        PgPeers { shared, pool }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every change under the lock is a field assignment or one map operation.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The listener is gone: nothing it might have missed may be answered.
    fn lost(&self) {
        {
            let mut s = self.state();
            s.listening_since = None;
            s.last_echo = None;
            s.backend_pid = None;
            s.lease_until = None;
            s.sent.clear();
        }
        self.cache.clear();
        self.changed.notify_waiters();
    }

    /// One notification, sent by server process `pid`, applied in the order PostgreSQL sent
    /// it; returns an answer owed to another replica's barrier.
    fn heard(&self, payload: &str, pid: i32) -> Option<(String, u64)> {
        let mut parts = payload.split(' ');
        let kind = parts.next()?;
        if kind == "k" {
            let ks = parts.next().and_then(Keyspace::from_name)?;
            // The key is the rest (keys have no spaces today; the split keeps any).
            let key = payload.splitn(3, ' ').nth(2)?;
            self.cache.drop_key(ks, key);
            return None;
        }
        let now = Instant::now();
        let owed = {
            let mut s = self.state();
            match (kind, parts.next(), parts.next(), parts.next()) {
                ("h", Some(id), Some(n), None) => {
                    let n: u64 = n.parse().ok()?;
                    if id == self.me {
                        while let Some((m, at)) = s.sent.front().copied() {
                            if m > n {
                                break;
                            }
                            s.sent.pop_front();
                            if m == n && s.listening_since.is_some() && s.backend_pid == Some(pid) {
                                s.lease_until = Some(at + LEASE);
                                s.last_echo = Some(now);
                            }
                        }
                    } else {
                        s.peers.insert(id.to_owned(), now);
                    }
                    None
                }
                ("b", Some(id), Some(n), None) => {
                    let n: u64 = n.parse().ok()?;
                    if id == self.me {
                        let recent = |heard: &Instant| {
                            now.saturating_duration_since(*heard) < LEASE + MARGIN
                        };
                        let live: Vec<String> = s
                            .peers
                            .iter()
                            .filter(|(_, heard)| recent(heard))
                            .map(|(p, _)| p.clone())
                            .collect();
                        s.peers
                            .retain(|_, heard| now.saturating_duration_since(*heard) < LEASE * 4);
                        let full_wait = s
                            .listening_since
                            .is_none_or(|t| now.saturating_duration_since(t) < LEASE + MARGIN);
                        if let Some(b) = s.barriers.get_mut(&n) {
                            b.echoed = true;
                            b.waiting = live;
                            b.full_wait = full_wait;
                        }
                        None
                    } else {
                        Some((id.to_owned(), n))
                    }
                }
                ("a", Some(from), Some(to), Some(n)) if to == self.me => {
                    let n: u64 = n.parse().ok()?;
                    if let Some(b) = s.barriers.get_mut(&n) {
                        b.waiting.retain(|p| p != from);
                    }
                    None
                }
                _ => None,
            }
        };
        if owed.is_none() {
            self.changed.notify_waiters();
        }
        owed
    }

    fn usable(&self) -> bool {
        let s = self.state();
        s.listening_since.is_some() && s.lease_until.is_some_and(|t| Instant::now() < t)
    }
}

/// One connection's life: LISTEN, then heartbeats and answers until it fails.
async fn listen(shared: &Arc<Shared>, connect: &Connect) -> Result<(), String> {
    let (client, mut messages) = connect().await?;
    let err = |e: tokio_postgres::Error| e.to_string();
    // One simple query, one implicit transaction, so one server connection: the pid is the
    // listening one's.
    let answers = client
        .simple_query(&format!(
            "LISTEN \"{}\"; SELECT pg_backend_pid()",
            shared.channel
        ))
        .await
        .map_err(err)?;
    let pid: i32 = answers
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0)?.parse().ok(),
            _ => None,
        })
        .ok_or_else(|| "no backend pid".to_owned())?;
    // Anything cached before this point may have changed unheard.
    shared.cache.clear();
    {
        let mut s = shared.state();
        s.listening_since = Some(Instant::now());
        s.last_echo = s.listening_since;
        s.backend_pid = Some(pid);
    }
    let notify = client
        .prepare("SELECT pg_notify($1, $2)")
        .await
        .map_err(err)?;
    // Heartbeats and answers go out from their own task, in order, so that applying what
    // arrives never waits for a send.
    let (out, mut outgoing) = mpsc::unbounded_channel::<String>();
    let client = Arc::new(client);
    let sender = {
        let client = client.clone();
        let channel = shared.channel.clone();
        tokio::spawn(async move {
            while let Some(payload) = outgoing.recv().await {
                if let Err(e) = client.execute(&notify, &[&channel, &payload]).await {
                    return e.to_string();
                }
            }
            "stopped".to_owned()
        })
    };
    let mut sender = std::pin::pin!(sender);
    let mut beat = tokio::time::interval(HEARTBEAT);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            ended = &mut sender => {
                return Err(ended.unwrap_or_else(|e| e.to_string()));
            }
            _ = beat.tick() => {
                let payload = {
                    let mut s = shared.state();
                    // A connection that stopped hearing itself (half-open TCP, a stuck
                    // server) is given up and made again.
                    if s.last_echo.is_none_or(|t| t.elapsed() > LEASE * 3) {
                        return Err("no heartbeat came back for 3 s".to_owned());
                    }
                    s.next_heartbeat += 1;
                    let n = s.next_heartbeat;
                    s.sent.push_back((n, Instant::now()));
                    // Echoes that never came (a slow moment) must not pile up.
                    while s.sent.len() > 64 {
                        s.sent.pop_front();
                    }
                    format!("h {} {n}", shared.me)
                };
                // Sent after it was noted: the lease it earns runs from before the send.
                out.send(payload).map_err(|_| "sender stopped".to_owned())?;
            }
            m = messages.recv() => {
                let Some(m) = m else { return Err("connection closed".to_owned()) };
                if let AsyncMessage::Notification(n) = m
                    && n.channel() == shared.channel
                    && let Some((to, b)) = shared.heard(n.payload(), n.process_id())
                {
                    // Everything before the barrier is applied: answer it.
                    out.send(format!("a {} {to} {b}", shared.me))
                        .map_err(|_| "sender stopped".to_owned())?;
                }
            }
        }
    }
}

/// Drives a listener connection, handing its notifications over in order; ends when the
/// connection does.
pub async fn drive<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    to: mpsc::UnboundedSender<AsyncMessage>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            Some(Ok(m)) => {
                if to.send(m).is_err() {
                    return;
                }
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "store cache listener connection failed");
                return;
            }
            None => return,
        }
    }
}

#[async_trait]
impl Peers for PgPeers {
    fn cache_usable(&self) -> bool {
        self.shared.usable()
    }

    async fn settle(&self) -> Result<(), StoreError> {
        let shared = &self.shared;
        let n = {
            let mut s = shared.state();
            s.next_barrier += 1;
            let n = s.next_barrier;
            s.barriers.insert(n, Barrier::new());
            n
        };
        // Whether it ends or its request goes away, the barrier is forgotten.
        let _forget = Forget { shared, n };
        let started = Instant::now();
        let deadline = started + LEASE + MARGIN;
        let sent = async {
            let conn = self
                .pool
                .get()
                .await
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            let payload = format!("b {} {n}", shared.me);
            // Prepared once per connection: as text it would be parsed and planned on every
            // barrier, one more round trip on every request that wrote a cached record.
            let notify = conn
                .prepare_cached("SELECT pg_notify($1, $2)")
                .await
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            conn.execute(&notify, &[&shared.channel, &payload])
                .await
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            Ok::<(), StoreError>(())
        }
        .await;
        if let Err(e) = sent {
            // The write is done either way: without answers, waiting out the lease is what
            // makes every other replica's copy unanswerable.
            tracing::warn!(error = %e, "store cache barrier not sent; waiting out the lease");
            tokio::time::sleep_until(deadline).await;
            return Ok(());
        }
        loop {
            let woken = shared.changed.notified();
            {
                let s = shared.state();
                let done = s.barriers.get(&n).is_none_or(Barrier::settled);
                if done || Instant::now() >= deadline {
                    return Ok(());
                }
            }
            let _ = tokio::time::timeout_at(deadline, woken).await;
        }
    }
}

/// Removes a settle's barrier when the settle ends, however it ends.
struct Forget<'a> {
    shared: &'a Shared,
    n: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.shared.state().barriers.remove(&self.n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::clock::UnixTime;

    const PID: i32 = 4242;

    fn shared(me: &str) -> Shared {
        Shared {
            me: me.to_owned(),
            channel: channel("public"),
            cache: RecordCache::new(10, ManualClock::new(UnixTime(1))),
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        }
    }

    /// Listening on server process [`PID`] since `ago`.
    fn listening(s: &Shared, ago: Duration) {
        let mut st = s.state();
        st.listening_since = Some(Instant::now().checked_sub(ago).unwrap());
        st.backend_pid = Some(PID);
    }

    fn beat(s: &Shared) -> String {
        let mut st = s.state();
        st.next_heartbeat += 1;
        let n = st.next_heartbeat;
        st.sent.push_back((n, Instant::now()));
        format!("h {} {n}", s.me)
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_answers_only_within_a_lease_from_an_echoed_heartbeat() {
        let a = shared("a");
        assert!(!a.usable(), "not before listening");
        listening(&a, Duration::ZERO);
        let h = beat(&a);
        assert!(!a.usable(), "not before the heartbeat came back");
        tokio::time::advance(Duration::from_millis(300)).await;
        a.heard(&h, PID);
        assert!(a.usable());
        // The lease runs from the sending, not from the echo.
        tokio::time::advance(LEASE - Duration::from_millis(300)).await;
        assert!(
            !a.usable(),
            "a listener that stopped hearing itself stops answering"
        );
        let h = beat(&a);
        a.heard(&h, PID);
        assert!(a.usable());
        a.lost();
        assert!(!a.usable(), "a lost listener answers nothing");
    }

    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_echoed_by_another_server_connection_earns_no_lease() {
        // Behind a transaction pooler the NOTIFY may run on a connection other than the
        // LISTEN's, and notifications sent meanwhile to the listener's are lost.
        let a = shared("a");
        listening(&a, Duration::ZERO);
        let h = beat(&a);
        a.heard(&h, PID + 1);
        assert!(!a.usable());
    }

    #[tokio::test(start_paused = true)]
    async fn a_barrier_waits_for_replicas_heard_within_the_lease_and_for_no_one_else() {
        let a = shared("a");
        listening(&a, LEASE * 3);
        a.heard("h b 1", 1);
        tokio::time::advance(LEASE * 2).await;
        a.heard("h c 7", 2);
        a.state().barriers.insert(1, Barrier::new());
        a.heard("b a 1", PID);
        let waiting = a.state().barriers[&1].waiting.clone();
        assert_eq!(waiting, ["c"], "b has been silent longer than a lease");
        assert!(!a.state().barriers[&1].settled(), "c has not answered");
        assert_eq!(a.heard("a b a 1", 1), None);
        assert_eq!(a.state().barriers[&1].waiting, ["c"]);
        a.heard("a c a 1", 2);
        assert!(a.state().barriers[&1].settled());
        // Another replica's barrier is answered, once everything before it is applied.
        assert_eq!(a.heard("b c 9", 2), Some(("c".to_owned(), 9)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_listener_younger_than_a_lease_waits_out_the_deadline() {
        // It may not yet have heard a replica whose last heartbeat came before it listened,
        // and whose lease still runs.
        let a = shared("a");
        listening(&a, LEASE / 2);
        a.state().barriers.insert(1, Barrier::new());
        a.heard("b a 1", PID);
        let b = &a.state().barriers[&1];
        assert!(b.echoed && b.waiting.is_empty() && b.full_wait);
        assert!(!b.settled(), "no one to wait for, and still the deadline");
    }

    #[tokio::test]
    async fn a_changed_row_drops_its_key() {
        let a = shared("a");
        let grant = (Keyspace::Grants, "u1 2");
        let other = (Keyspace::Grants, "u2");
        let v = Some(crate::store::Versioned {
            value: b"g".to_vec(),
            expires_at: None,
        });
        a.cache.fill_for_test(&[grant, other], &[v.clone(), v]);
        assert_eq!(a.cache.len(), 2);
        a.heard("k not_a_keyspace x", 1);
        a.heard("garbage", 1);
        assert_eq!(a.cache.len(), 2);
        a.heard("k grants u1 2", 1);
        assert_eq!(
            a.cache.len(),
            1,
            "the key (with its space) was dropped, and only it"
        );
    }

    #[test]
    fn the_trigger_names_exactly_the_cached_keyspaces() {
        let sql = super::super::postgres::trigger_sql();
        for ks in super::super::cache::CACHED {
            assert!(sql.contains(&format!("'{}'", ks.name())), "{}", ks.name());
        }
        let list = sql
            .split("ARRAY[")
            .nth(1)
            .unwrap()
            .split(']')
            .next()
            .unwrap();
        assert_eq!(list.split(',').count(), super::super::cache::CACHED.len());
    }
}
