//! Pooled connections: one [`Conn`] per broker per [`ConnKind`], dialled on demand, replaced
//! when dead, closed after `connections_max_idle_ms` without use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kafkit_protocol::ApiKey;
use tokio::time::Instant;

use super::ConnKind;
use crate::conn::Conn;

/// One pool slot: the connection (if any), when it was last handed out, and a lock that makes
/// concurrent callers wait for one dial instead of dialling side by side.
#[derive(Debug)]
struct Slot {
    conn: Option<Conn>,
    /// When the connection was last handed out or seen sending.
    last_used: Instant,
    /// Requests the connection had sent when `last_used` was last set: a caller holding a
    /// clone keeps it in use without coming back to the pool.
    sent_then: u64,
    dial_lock: Arc<tokio::sync::Mutex<()>>,
}

/// Every pooled connection, and the request counts of connections that left the pool.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    slots: Mutex<HashMap<(i32, ConnKind), Slot>>,
    /// Requests sent by connections no longer pooled: (node id, api key) -> count.
    retired: Mutex<HashMap<(i32, i16), u64>>,
}

impl Slot {
    /// When the connection looks idle, checks whether it sent requests since `last_used` was
    /// set (through a clone held outside the pool); if so it is in use: `last_used = now`.
    fn note_activity(&mut self, now: Instant, max_idle: Duration) {
        if now.duration_since(self.last_used) < max_idle {
            return;
        }
        if let Some(c) = &self.conn {
            let sent = total_sent(c);
            if sent != self.sent_then {
                self.sent_then = sent;
                self.last_used = now;
            }
        }
    }
}

/// Requests `conn` has sent, all APIs together.
fn total_sent(conn: &Conn) -> u64 {
    ApiKey::ALL.iter().map(|api| conn.requests_sent(*api)).sum()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these short locks leaves plain data behind; keep going.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Pool {
    /// The live pooled connection for `(node, kind)` used within `max_idle`, marking it used.
    /// A dead or idle one is taken out of the pool (and closed) and `None` returned.
    pub(crate) fn get(&self, node: i32, kind: ConnKind, max_idle: Duration) -> Option<Conn> {
        let mut slots = lock(&self.slots);
        let slot = slots.get_mut(&(node, kind))?;
        let now = Instant::now();
        slot.note_activity(now, max_idle);
        let usable = slot
            .conn
            .as_ref()
            .is_some_and(|c| !c.is_closed() && now.duration_since(slot.last_used) < max_idle);
        if usable {
            slot.last_used = now;
            return slot.conn.clone();
        }
        if let Some(old) = slot.conn.take() {
            old.close();
            self.retire(node, &old);
        }
        None
    }

    /// Whether `(node, kind)` has an open pooled connection.
    pub(crate) fn is_connected(&self, node: i32, kind: ConnKind) -> bool {
        lock(&self.slots)
            .get(&(node, kind))
            .and_then(|s| s.conn.as_ref())
            .is_some_and(|c| !c.is_closed())
    }

    /// The lock to hold while dialling `(node, kind)`.
    pub(crate) fn dial_lock(&self, node: i32, kind: ConnKind) -> Arc<tokio::sync::Mutex<()>> {
        let mut slots = lock(&self.slots);
        let slot = slots.entry((node, kind)).or_insert_with(|| Slot {
            conn: None,
            last_used: Instant::now(),
            sent_then: 0,
            dial_lock: Arc::default(),
        });
        Arc::clone(&slot.dial_lock)
    }

    /// Puts a freshly dialled connection in the pool (closing and retiring the one it
    /// replaces, if any).
    pub(crate) fn put(&self, node: i32, kind: ConnKind, conn: Conn) {
        conn.meter().set_node(node);
        let mut slots = lock(&self.slots);
        let slot = slots.entry((node, kind)).or_insert_with(|| Slot {
            conn: None,
            last_used: Instant::now(),
            sent_then: 0,
            dial_lock: Arc::default(),
        });
        if let Some(old) = slot.conn.replace(conn) {
            old.close();
            self.retire(node, &old);
        }
        slot.last_used = Instant::now();
        slot.sent_then = slot.conn.as_ref().map_or(0, total_sent);
    }

    /// Closes and removes every connection to `node` that is dead (or all of them when
    /// `all`), e.g. after a connection error.
    pub(crate) fn drop_node(&self, node: i32, all: bool) {
        let mut slots = lock(&self.slots);
        for ((n, _), slot) in slots.iter_mut() {
            if *n != node {
                continue;
            }
            if slot.conn.as_ref().is_some_and(|c| all || c.is_closed())
                && let Some(old) = slot.conn.take()
            {
                old.close();
                self.retire(node, &old);
            }
        }
    }

    /// Closes connections unused for `max_idle` or more. Returns how many are left open.
    pub(crate) fn reap_idle(&self, max_idle: Duration) -> usize {
        let now = Instant::now();
        let mut slots = lock(&self.slots);
        let mut open = 0;
        for ((node, _), slot) in slots.iter_mut() {
            slot.note_activity(now, max_idle);
            let idle = now.duration_since(slot.last_used) >= max_idle;
            match slot.conn.take() {
                Some(c) if !idle && !c.is_closed() => {
                    slot.conn = Some(c);
                    open += 1;
                }
                Some(c) => {
                    tracing::debug!(node, addr = c.addr(), "closing idle or dead connection");
                    c.close();
                    self.retire(*node, &c);
                }
                None => {}
            }
        }
        open
    }

    /// Closes every connection.
    pub(crate) fn close_all(&self) {
        let mut slots = lock(&self.slots);
        for ((node, _), slot) in slots.iter_mut() {
            if let Some(c) = slot.conn.take() {
                c.close();
                self.retire(*node, &c);
            }
        }
    }

    /// Closes every connection for a rebootstrap: requests waiting on them fail with the
    /// retriable [`crate::CloseCause::Rebootstrap`].
    pub(crate) fn close_all_for_rebootstrap(&self) {
        let mut slots = lock(&self.slots);
        for ((node, _), slot) in slots.iter_mut() {
            if let Some(c) = slot.conn.take() {
                c.close_for_rebootstrap();
                self.retire(*node, &c);
            }
        }
    }

    /// Adds the request counts of `conn` (leaving the pool) to the retired counts of `node`.
    pub(crate) fn retire(&self, node: i32, conn: &Conn) {
        let mut retired = lock(&self.retired);
        for api in ApiKey::ALL {
            let n = conn.requests_sent(*api);
            if n > 0 {
                *retired.entry((node, *api as i16)).or_default() += n;
            }
        }
    }

    /// Requests of `api` sent to `node`: pooled connections plus retired ones.
    pub(crate) fn requests_sent(&self, node: i32, api: ApiKey) -> u64 {
        let live: u64 = lock(&self.slots)
            .iter()
            .filter(|((n, _), _)| *n == node)
            .filter_map(|(_, s)| s.conn.as_ref())
            .map(|c| c.requests_sent(api))
            .sum();
        live + lock(&self.retired)
            .get(&(node, api as i16))
            .copied()
            .unwrap_or(0)
    }
}
