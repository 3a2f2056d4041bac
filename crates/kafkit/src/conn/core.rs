//! The connection core: one TCP connection, a writer task and a reader task, requests pipelined by
//! correlation id.
//!
//! ```text
//!  callers (many, concurrent)                     tasks (one each per connection)
//!  ─────────────────────────                      ───────────────────────────────
//!  call(): acquire in-flight permit ──┐
//!          register correlation id    │  frames   ┌────────────┐  bytes  ┌────────┐
//!          in `pending` (+ permit)    ├─────────► │ writer task │ ──────► │  TCP   │
//!          enqueue frame ─────────────┘  (mpsc)   └────────────┘         │ stream │
//!          await oneshot ◄───────────────────────┐┌────────────┐  bytes  │        │
//!                                                └│ reader task │ ◄────── │        │
//!                                      pending[corr id] └────────────┘         └────────┘
//! ```
//!
//! Invariants:
//! - A correlation id is in `pending` before its frame is handed to the writer, so a response can
//!   never arrive for an id that is not yet registered.
//! - `closed` is set, under the state lock, before `pending` is drained; a caller registering under
//!   that lock therefore either sees `closed` or is drained. Every waiting caller gets the close
//!   cause at the moment the connection dies.
//! - An in-flight permit lives in the `pending` entry (or, for requests without a response, in the
//!   queued frame until it is written); it is released when the response arrives, the caller gives
//!   up (timeout or dropped future), or the connection closes.
//! - A response whose correlation id is no longer pending (the caller timed out or was dropped) is
//!   read and discarded; the connection stays usable.
//! - A response frame's size prefix is checked against `max_response_size` before any memory is
//!   taken for it. A frame of [`POOL_MIN`] bytes or more that fits a size class of the dialer's
//!   response pool is then read into one page of the smallest class that holds it (a pooled page,
//!   or a fresh one of at most the largest class, 16 MiB by default); any other frame is read into
//!   the shared read buffer, which grows only as bytes actually arrive.
//! - A frame's bytes are contiguous (one page, or one part of the read buffer) and handed out as
//!   one `Bytes` without a copy, so decoders are unchanged and a Fetch response's records are
//!   slices of the page; the page returns to its pool when the last of them drops.
//! - A request's bytes and records fields of [`SPLICE_MIN`] bytes or more (a Produce request's
//!   record batches) are never copied into its frame, on the first attempt or on a retry: the
//!   frame is its header-and-fields buffer plus the payloads' own `Bytes`
//!   ([`kafkit_protocol::splice`]), sent in order with vectored writes (`writev`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafkit_pagebuf::{PageBuf, SizeClassPool};
use kafkit_protocol::splice::{self, Splice};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
#[cfg(test)]
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};

use crate::error::{CloseCause, Error, Result};

/// Number of API keys tracked by the per-connection request counters (keys 0..=127).
pub(crate) const API_KEY_SLOTS: usize = 128;

/// Bytes and records fields at least this long are sent from their own buffers (one `iovec`
/// each) instead of being copied into the request frame; shorter ones are cheaper to copy.
pub(crate) const SPLICE_MIN: usize = 512;

/// The most a request frame's header-and-fields buffer reserves up front: a size hint counts
/// the spliced payloads too, and the buffer grows if a request without them needs more.
const MAX_HEAD_RESERVE: usize = 64 * 1024;

/// The most `iovec`s handed to one vectored write (Linux's `IOV_MAX` is 1,024).
const MAX_IOVECS: usize = 1024;

/// Response frames at least this long (without the size prefix) are read into a page of the
/// response pool; shorter ones share the 64 KiB read buffer (they are mostly answers that are
/// decoded and dropped at once, and a page of 64 KiB for each would waste most of it).
pub(crate) const POOL_MIN: usize = 16 * 1024;

/// Bytes read from the socket at a time into the shared read buffer.
const READ_CHUNK: usize = 64 * 1024;

/// Settings of the core.
#[derive(Debug, Clone)]
pub(crate) struct CoreConfig {
    /// The most requests awaiting a response (or waiting to be written) at once.
    pub(crate) max_in_flight: usize,
    /// The largest response frame accepted, in bytes (without the 4-byte size prefix).
    pub(crate) max_response_size: usize,
    /// Plaintext connection: a first answer that starts like a TLS record closes the connection
    /// with [`CloseCause::TlsRecordReceived`] instead of being read as a size prefix.
    pub(crate) detect_tls_reply: bool,
    /// Pages for response frames of [`POOL_MIN`] bytes or more, shared by every connection of a
    /// dialer; `None` reads every frame into the shared read buffer.
    pub(crate) response_pool: Option<SizeClassPool>,
}

/// What a caller receives from the reader task.
type Reply = Result<Bytes>;

struct Pending {
    reply: oneshot::Sender<Reply>,
    _permit: OwnedSemaphorePermit,
}

struct State {
    pending: HashMap<i32, Pending>,
    /// A raw (correlation-id-less) exchange waiting for the next frame: SASL tokens after a
    /// SaslHandshake v0 (KIP-43). While set, the next frame goes here whatever its content.
    raw: Option<oneshot::Sender<Reply>>,
    closed: Option<CloseCause>,
}

pub(crate) struct Shared {
    addr: String,
    /// Held shared while a request is queued for the socket, and exclusively for the whole of
    /// a KIP-368 re-authentication: no other request may go out between its SaslHandshake and
    /// its last SaslAuthenticate (Apache Kafka closes such a connection,
    /// `IllegalSaslStateException`). Answers to requests sent before still flow.
    sasl_gate: Arc<tokio::sync::RwLock<()>>,
    state: Mutex<State>,
    in_flight: Arc<Semaphore>,
    next_correlation_id: AtomicI32,
    shutdown: watch::Sender<bool>,
    sent: [AtomicU64; API_KEY_SLOTS],
    /// The memory of frames already written, for the next requests.
    recycled: Mutex<Recycled>,
    /// Bytes, requests and the close under the node id, once the transport pools it.
    pub(crate) meter: crate::ops::meter::ConnMeter,
}

/// The header-and-fields buffers and splice lists of frames already written, emptied, kept for
/// the next requests so that encoding one allocates nothing once they have grown (a Produce
/// request's splice list grew by doubling: about 9 allocations for 333 batches). At most
/// [`MAX_RECYCLED`] of each; a buffer over [`MAX_HEAD_RESERVE`] bytes or a list over
/// [`MAX_RECYCLED_SPLICES`] entries is not kept.
#[derive(Default)]
struct Recycled {
    frames: Vec<BytesMut>,
    splices: Vec<Vec<Splice>>,
}

/// Most buffers and splice lists [`Recycled`] keeps of each: the frames of one write.
const MAX_RECYCLED: usize = 8;
/// Most entries of a splice list kept ([`Recycled`]).
const MAX_RECYCLED_SPLICES: usize = 16 * 1024;

impl Recycled {
    /// Keeps what `out` leaves once written: its buffer when nothing else holds it, and its
    /// splice list, emptied (the payloads' references go now, so that their buffers can be
    /// reused, as a Writer's batch's is).
    fn keep(&mut self, frame: Bytes, mut splices: Vec<Splice>) {
        splices.clear();
        if self.splices.len() < MAX_RECYCLED && splices.capacity() <= MAX_RECYCLED_SPLICES {
            self.splices.push(splices);
        }
        if self.frames.len() < MAX_RECYCLED
            && frame.len() <= MAX_HEAD_RESERVE + 4
            && let Ok(mut buf) = frame.try_into_mut()
        {
            buf.clear();
            // In the shared form whatever made it (a raw SASL frame is not): see `shared_frame`.
            // For a buffer in that form already this is a reference count up and down.
            drop(buf.split_to(0));
            self.frames.push(buf);
        }
    }
}

/// A new frame buffer of `capacity` bytes in the `bytes` crate's shared form from the start
/// (that form's one allocation is made here): freezing it for the writer task and taking it back
/// once written ([`Recycled::keep`]) then allocate nothing, where a buffer backed by a plain
/// vector would allocate its reference count at every freeze (as `Batch`'s records buffers).
fn shared_frame(capacity: usize) -> BytesMut {
    let mut buf = BytesMut::with_capacity(capacity);
    // An empty split shares the buffer (promoting it to the shared form) and drops at once.
    drop(buf.split_to(0));
    buf
}

/// A frame queued for the writer task.
struct Outgoing {
    /// The frame with its long payloads left out (see `splices`); starts with the size prefix.
    frame: Bytes,
    /// The payloads left out of `frame`, in order: each goes after `frame[..at]`.
    splices: Vec<Splice>,
    /// For requests without a response: told when the frame is on the socket.
    written: Option<(oneshot::Sender<Reply>, OwnedSemaphorePermit)>,
}

/// Handle to the connection core. Cloning is cheap; the tasks stop when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct Core {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Outgoing>,
}

/// A [`Core`] handle that does not keep the connection open (for background tasks).
pub(crate) struct WeakCore {
    shared: std::sync::Weak<Shared>,
    tx: mpsc::WeakSender<Outgoing>,
}

impl WeakCore {
    /// The connection, if some handle still keeps it open.
    pub(crate) fn upgrade(&self) -> Option<Core> {
        Some(Core {
            shared: self.shared.upgrade()?,
            tx: self.tx.upgrade()?,
        })
    }
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("addr", &self.shared.addr)
            .field("closed", &self.shared.lock().closed)
            .finish()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another thread panicked while holding it; the map itself is
        // still consistent (every mutation is a single insert or remove).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn recycled(&self) -> MutexGuard<'_, Recycled> {
        // As `lock`: each mutation is a single push or pop.
        self.recycled.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn closed_error(&self, cause: CloseCause) -> Error {
        Error::ConnectionClosed {
            addr: self.addr.clone(),
            cause,
        }
    }

    /// The error for a caller that finds the connection closed.
    fn current_close_error(&self) -> Error {
        let cause = self
            .lock()
            .closed
            .clone()
            .unwrap_or(CloseCause::ClosedByClient);
        self.closed_error(cause)
    }

    /// Closes the connection: every pending caller gets `cause` now, later callers get it at once.
    fn fail(&self, cause: CloseCause) {
        let drained: Vec<Pending> = {
            let mut state = self.lock();
            if state.closed.is_some() {
                return;
            }
            tracing::debug!(addr = %self.addr, %cause, "connection closed");
            state.closed = Some(cause.clone());
            self.meter.closed();
            if let Some(raw) = state.raw.take() {
                let _ = raw.send(Err(self.closed_error(cause.clone())));
            }
            state.pending.drain().map(|(_, p)| p).collect()
        };
        for p in drained {
            let _ = p.reply.send(Err(self.closed_error(cause.clone())));
        }
        self.in_flight.close();
        let _ = self.shutdown.send(true);
    }
}

/// Removes a pending entry when the caller stops waiting (timeout or dropped future).
struct PendingGuard<'a> {
    shared: &'a Shared,
    correlation_id: i32,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.shared.lock().pending.remove(&self.correlation_id);
    }
}

impl Core {
    /// Starts the writer and reader tasks on a TCP `stream` (inside a tokio runtime).
    #[cfg(test)]
    pub(crate) fn start(stream: TcpStream, addr: String, config: CoreConfig) -> Core {
        let (rd, wr) = stream.into_split();
        Core::start_io(rd, wr, addr, config)
    }

    /// Starts the writer and reader tasks on the two halves of a byte stream (TCP or TLS; must
    /// be called inside a tokio runtime).
    pub(crate) fn start_io<R, W>(rd: R, wr: W, addr: String, config: CoreConfig) -> Core
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let max_in_flight = config.max_in_flight.max(1);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            addr,
            sasl_gate: Arc::new(tokio::sync::RwLock::new(())),
            state: Mutex::new(State {
                pending: HashMap::new(),
                raw: None,
                closed: None,
            }),
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            next_correlation_id: AtomicI32::new(0),
            shutdown,
            sent: std::array::from_fn(|_| AtomicU64::new(0)),
            recycled: Mutex::new(Recycled::default()),
            meter: crate::ops::meter::ConnMeter::default(),
        });
        let (tx, rx) = mpsc::channel(max_in_flight);
        tokio::spawn(write_loop(Arc::clone(&shared), wr, rx, shutdown_rx.clone()));
        tokio::spawn(read_loop(
            Arc::clone(&shared),
            rd,
            ReadConfig {
                max_response_size: config.max_response_size,
                detect_tls_reply: config.detect_tls_reply,
                pool: config.response_pool,
            },
            shutdown_rx,
        ));
        Core { shared, tx }
    }

    /// The connection's metric handles (`ops/meter.rs`).
    pub(crate) fn meter(&self) -> &crate::ops::meter::ConnMeter {
        &self.shared.meter
    }

    /// The broker address this connection was dialled with.
    pub(crate) fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// Number of requests of `api_key` queued for the socket so far.
    pub(crate) fn requests_sent(&self, api_key: i16) -> u64 {
        usize::try_from(api_key)
            .ok()
            .and_then(|k| self.shared.sent.get(k))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Whether the connection has closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.lock().closed.is_some()
    }

    /// Closes the connection; in-flight requests fail with [`CloseCause::ClosedByClient`].
    pub(crate) fn close(&self) {
        self.shared.fail(CloseCause::ClosedByClient);
    }

    /// Closes the connection with `cause`.
    pub(crate) fn fail(&self, cause: CloseCause) {
        self.shared.fail(cause);
    }

    /// A handle that does not keep the connection open.
    pub(crate) fn downgrade(&self) -> WeakCore {
        WeakCore {
            shared: Arc::downgrade(&self.shared),
            tx: self.tx.downgrade(),
        }
    }

    /// A receiver that sees `true` once the connection has closed.
    pub(crate) fn closed_signal(&self) -> watch::Receiver<bool> {
        self.shared.shutdown.subscribe()
    }

    /// Sends one request and waits for its response frame.
    ///
    /// `encode` is given the correlation id and appends the request header and body to the buffer
    /// (the size prefix is added here); `size_hint` is the expected size of what it appends, in
    /// bytes, so the buffer is allocated once. Returns the response frame without its size prefix,
    /// starting with the correlation id.
    ///
    /// Errors: [`Error::Timeout`] when `timeout` passes first (the connection is then closed
    /// with [`CloseCause::RequestTimedOut`], unless the request is a long poll: see
    /// [`is_long_poll`]), [`Error::ConnectionClosed`] when the connection dies, encode errors
    /// from `encode`.
    pub(crate) async fn call<F>(
        &self,
        api_key: i16,
        operation: &'static str,
        timeout: Duration,
        size_hint: usize,
        encode: F,
    ) -> Result<Bytes>
    where
        F: FnOnce(i32, &mut BytesMut) -> Result<()>,
    {
        if self.is_closed() {
            return Err(self.shared.current_close_error());
        }
        let fut = self.call_inner(api_key, size_hint, encode);
        let r = tokio::time::timeout(timeout, fut).await;
        self.in_time(r, api_key, operation, timeout)
    }

    /// Sends one request that gets no response (a Produce with acks=0): returns once its frame
    /// is written to the socket. As [`Core::call`] otherwise.
    pub(crate) async fn call_no_answer<F>(
        &self,
        api_key: i16,
        operation: &'static str,
        timeout: Duration,
        size_hint: usize,
        encode: F,
    ) -> Result<()>
    where
        F: FnOnce(i32, &mut BytesMut) -> Result<()>,
    {
        if self.is_closed() {
            return Err(self.shared.current_close_error());
        }
        let fut = self.send_inner(api_key, size_hint, encode);
        let r = tokio::time::timeout(timeout, fut).await;
        self.in_time(r, api_key, operation, timeout)
    }

    /// The result of a request of `api_key` bounded by `timeout`: past it the connection is
    /// taken for half-open and closed, unless the request is a long poll. (Not an async
    /// wrapper: every request's future stays as shallow as it was.)
    fn in_time<T>(
        &self,
        r: std::result::Result<Result<T>, tokio::time::error::Elapsed>,
        api_key: i16,
        operation: &'static str,
        timeout: Duration,
    ) -> Result<T> {
        match r {
            Ok(r) => r,
            Err(_) => {
                if !is_long_poll(api_key) {
                    // No answer within the request timeout: the broker or the path is taken
                    // for dead (half-open). Keeping the connection would cost every later
                    // request the same wait.
                    self.shared
                        .fail(CloseCause::RequestTimedOut { operation, timeout });
                }
                Err(Error::Timeout { operation, timeout })
            }
        }
    }

    /// Waits until no request of this connection is being queued, then keeps every new one
    /// (other than SaslHandshake and SaslAuthenticate) from being queued until the guard is
    /// dropped: for a KIP-368 re-authentication.
    pub(crate) async fn hold_requests(&self) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        Arc::clone(&self.shared.sasl_gate).write_owned().await
    }

    /// One of the connection's in-flight permits (`max_in_flight_requests_per_connection`),
    /// waited for; the connection's close error once it is closed.
    async fn in_flight_permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.shared.in_flight)
            .acquire_owned()
            .await
            .map_err(|_| self.shared.current_close_error())
    }

    /// [`Core::call`]'s request: an in-flight permit, the frame ([`Core::frame`]), registered
    /// as pending (the permit held by the entry), queued, then the response frame.
    async fn call_inner<F>(&self, api_key: i16, size_hint: usize, encode: F) -> Result<Bytes>
    where
        F: FnOnce(i32, &mut BytesMut) -> Result<()>,
    {
        let shared = &*self.shared;
        let permit = self.in_flight_permit().await?;
        let (correlation_id, frame, splices) = self.frame(api_key, size_hint, encode)?;
        let (reply, response) = oneshot::channel();
        {
            let mut state = shared.lock();
            if let Some(cause) = &state.closed {
                return Err(shared.closed_error(cause.clone()));
            }
            state.pending.insert(
                correlation_id,
                Pending {
                    reply,
                    _permit: permit,
                },
            );
        }
        let _guard = PendingGuard {
            shared,
            correlation_id,
        };
        {
            // A re-authentication in progress holds the gate: wait until it is over (its own
            // SASL requests pass).
            let _pass = match is_sasl(api_key) {
                true => None,
                false => Some(shared.sasl_gate.read().await),
            };
            self.enqueue(Outgoing {
                frame,
                splices,
                written: None,
            })
            .await?;
            self.count(api_key);
        }
        match response.await {
            Ok(r) => r,
            Err(_) => Err(shared.current_close_error()),
        }
    }

    /// [`Core::call_no_answer`]'s request: an in-flight permit, the frame ([`Core::frame`]),
    /// queued with its permit (released once written), then its write.
    async fn send_inner<F>(&self, api_key: i16, size_hint: usize, encode: F) -> Result<()>
    where
        F: FnOnce(i32, &mut BytesMut) -> Result<()>,
    {
        let shared = &*self.shared;
        let permit = self.in_flight_permit().await?;
        let (_, frame, splices) = self.frame(api_key, size_hint, encode)?;
        let (reply, written) = oneshot::channel();
        {
            let _pass = shared.sasl_gate.read().await;
            self.enqueue(Outgoing {
                frame,
                splices,
                written: Some((reply, permit)),
            })
            .await?;
            self.count(api_key);
        }
        match written.await {
            Ok(r) => r.map(|_| ()),
            Err(_) => Err(shared.current_close_error()),
        }
    }

    /// The request's frame: a new correlation id, and `encode`'s header and fields behind the
    /// size prefix, with its long payloads left out (`splices`) in a recycled buffer.
    #[inline(always)]
    fn frame<F>(
        &self,
        api_key: i16,
        size_hint: usize,
        encode: F,
    ) -> Result<(i32, Bytes, Vec<Splice>)>
    where
        F: FnOnce(i32, &mut BytesMut) -> Result<()>,
    {
        let shared = &*self.shared;
        // Correlation ids count up from 0 and wrap within the non-negative range.
        let correlation_id = shared
            .next_correlation_id
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                Some(if c == i32::MAX { 0 } else { c + 1 })
            })
            .unwrap_or(0);

        let reserve = 4 + size_hint.min(MAX_HEAD_RESERVE);
        let (buf, splices) = {
            let mut r = shared.recycled();
            (r.frames.pop(), r.splices.pop())
        };
        let mut buf = buf.unwrap_or_else(|| shared_frame(reserve));
        buf.reserve(reserve);
        buf.put_i32(0);
        let (encoded, splices) =
            splice::collect_into(SPLICE_MIN, splices.unwrap_or_default(), || {
                encode(correlation_id, &mut buf)
            });
        encoded?;
        let size = buf.len() - 4 + splices.iter().map(|s| s.data.len()).sum::<usize>();
        let size_prefix = i32::try_from(size).map_err(|_| Error::RequestTooLarge { size })?;
        buf[..4].copy_from_slice(&size_prefix.to_be_bytes());
        let frame = buf.freeze();
        // One line per request at TRACE (`kafkit -vv`, librdkafka's `debug=protocol`).
        tracing::trace!(
            addr = %shared.addr,
            api = kafkit_protocol::ApiKey::try_from(api_key).map_or("unknown", |k| k.name()),
            correlation_id,
            size,
            "request"
        );
        Ok((correlation_id, frame, splices))
    }

    /// Sends `payload` as one size-prefixed frame without a request header and returns the next
    /// frame the broker sends, whatever it holds (its size may be 0). Used for SASL tokens after
    /// a SaslHandshake v0 (KIP-43 "unframed" tokens); no other request may be in flight.
    ///
    /// Errors: [`Error::Timeout`], [`Error::ConnectionClosed`], [`Error::Protocol`] when another
    /// raw exchange or request is in flight.
    pub(crate) async fn call_raw(
        &self,
        operation: &'static str,
        timeout: Duration,
        payload: &[u8],
    ) -> Result<Bytes> {
        let shared = &*self.shared;
        let size = i32::try_from(payload.len()).map_err(|_| Error::RequestTooLarge {
            size: payload.len(),
        })?;
        let (reply, response) = oneshot::channel();
        {
            let mut state = shared.lock();
            if let Some(cause) = &state.closed {
                return Err(shared.closed_error(cause.clone()));
            }
            if state.raw.is_some() || !state.pending.is_empty() {
                return Err(Error::Protocol(
                    "a raw SASL exchange needs the connection to itself".into(),
                ));
            }
            state.raw = Some(reply);
        }
        let mut buf = BytesMut::with_capacity(4 + payload.len());
        buf.put_i32(size);
        buf.put_slice(payload);
        let fut = async {
            let permit = self.in_flight_permit().await?;
            let (written_tx, written) = oneshot::channel();
            self.enqueue(Outgoing {
                frame: buf.freeze(),
                splices: Vec::new(),
                written: Some((written_tx, permit)),
            })
            .await?;
            match written.await {
                Ok(r) => r?,
                Err(_) => return Err(shared.current_close_error()),
            };
            match response.await {
                Ok(r) => r,
                Err(_) => Err(shared.current_close_error()),
            }
        };
        let result = match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout { operation, timeout }),
        };
        if result.is_err() {
            // A raw exchange that did not finish leaves the stream position unknown.
            shared.lock().raw = None;
            if !matches!(result, Err(Error::ConnectionClosed { .. })) {
                shared.fail(CloseCause::ClosedByClient);
            }
        }
        result
    }

    async fn enqueue(&self, out: Outgoing) -> Result<()> {
        self.tx
            .send(out)
            .await
            .map_err(|_| self.shared.current_close_error())
    }

    fn count(&self, api_key: i16) {
        if let Some(c) = usize::try_from(api_key)
            .ok()
            .and_then(|k| self.shared.sent.get(k))
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// SaslHandshake (17) and SaslAuthenticate (36): the requests a re-authentication sends.
fn is_sasl(api_key: i16) -> bool {
    matches!(api_key, 17 | 36)
}

/// Requests the broker may hold before answering for longer than the request timeout's
/// usual share (Fetch 1 waits `max_wait`, JoinGroup 11 a rebalance, ShareFetch 78): a timeout
/// of theirs does not close the connection.
pub(crate) fn is_long_poll(api_key: i16) -> bool {
    matches!(api_key, 1 | 11 | 78)
}

/// Writes queued frames to the socket, several per flush when they queue up.
async fn write_loop<W: AsyncWrite + Unpin>(
    shared: Arc<Shared>,
    mut wr: W,
    mut rx: mpsc::Receiver<Outgoing>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut batch: Vec<Outgoing> = Vec::new();
    // The slices of each write, kept empty between writes (see `recycle_slices`).
    let mut slices: Vec<std::io::IoSlice<'static>> = Vec::new();
    loop {
        let first = tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => break,
            msg = rx.recv() => match msg {
                Some(m) => m,
                // Every handle is gone: nobody can wait for a response any more.
                None => {
                    shared.fail(CloseCause::ClosedByClient);
                    break;
                }
            },
        };
        batch.push(first);
        while batch.len() < 64 {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        let mut failed = tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => Some(None),
            r = write_frames(&mut wr, &batch, &mut slices) => r.err().map(Some),
        };
        if failed.is_none()
            && let Err(e) = wr.flush().await
        {
            failed = Some(Some(e));
        }
        match failed {
            None => {
                shared.meter.wrote(batch.len(), written_bytes(&batch));
                let mut recycled = shared.recycled();
                for out in batch.drain(..) {
                    // The payloads' references go before the caller hears the frame is
                    // written, so that their buffers are free for reuse once it has.
                    recycled.keep(out.frame, out.splices);
                    if let Some((reply, _permit)) = out.written {
                        let _ = reply.send(Ok(Bytes::new()));
                    }
                }
            }
            Some(e) => {
                if let Some(e) = e {
                    shared.fail(CloseCause::Io(Arc::new(e)));
                }
                break;
            }
        }
    }
    // Requests still queued (or in the failed batch) are dropped here; their callers see the
    // close cause through their dropped reply channels or the drained pending map.
    drop(batch);
    rx.close();
    let _ = wr.shutdown().await;
}

/// The bytes of `batch`'s frames (size prefixes and payloads), for the connection's meter
/// (nothing is summed without the cargo feature `metrics`).
#[inline(always)]
fn written_bytes(batch: &[Outgoing]) -> usize {
    if !crate::ops::meter::ENABLED {
        return 0;
    }
    batch
        .iter()
        .map(|o| o.frame.len() + o.splices.iter().map(|s| s.data.len()).sum::<usize>())
        .sum()
}

impl Outgoing {
    /// The frame's pieces in wire order: `frame` cut at each splice, the payloads between.
    fn pieces(&self) -> impl Iterator<Item = &[u8]> {
        let len = self.frame.len();
        // Splices come in `at` order; clamping keeps the cuts in order and inside the frame.
        let tail_from = self
            .splices
            .iter()
            .map(|s| s.at.min(len))
            .max()
            .unwrap_or(0);
        let mut from = 0;
        self.splices
            .iter()
            .flat_map(move |s| {
                let at = s.at.clamp(from, len);
                let head = &self.frame[from..at];
                from = at;
                [head, &s.data[..]]
            })
            .chain(std::iter::once(&self.frame[tail_from..]))
            .filter(|p| !p.is_empty())
    }
}

/// An empty list with the memory of `v`, for slices of another lifetime: a collect from a
/// vector's own iterator into elements of the same layout reuses its allocation (the standard
/// library's in-place collect; were it ever not to, this would allocate as a new list does).
/// So a connection's list of `writev` slices is allocated once, not once per write.
fn recycle_slices<'b>(mut v: Vec<std::io::IoSlice<'_>>) -> Vec<std::io::IoSlice<'b>> {
    v.clear();
    v.into_iter().map(|_| std::io::IoSlice::new(&[])).collect()
}

/// Writes `batch`'s frames in order: vectored (`writev`, up to [`MAX_IOVECS`] pieces per call)
/// when the stream supports it, one `write_all` per piece otherwise. Nothing is copied. `kept`
/// is the list of slices kept from the last write (left empty, with its memory, for the next).
async fn write_frames<W: AsyncWrite + Unpin>(
    wr: &mut W,
    batch: &[Outgoing],
    kept: &mut Vec<std::io::IoSlice<'static>>,
) -> std::io::Result<()> {
    let mut pieces = batch.iter().flat_map(Outgoing::pieces);
    if !wr.is_write_vectored() {
        for p in pieces {
            wr.write_all(p).await?;
        }
        return Ok(());
    }
    // At most two pieces per splice and one more per frame: grown once, not once per doubling.
    let most: usize = batch.iter().map(|o| 2 * o.splices.len() + 1).sum();
    let mut slices = recycle_slices(std::mem::take(kept));
    slices.reserve(most.min(MAX_IOVECS));
    let written = async {
        loop {
            slices.clear();
            slices.extend(pieces.by_ref().take(MAX_IOVECS).map(std::io::IoSlice::new));
            if slices.is_empty() {
                return Ok(());
            }
            let mut rest = &mut slices[..];
            while !rest.is_empty() {
                let n = wr.write_vectored(rest).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::WriteZero.into());
                }
                std::io::IoSlice::advance_slices(&mut rest, n);
            }
        }
    }
    .await;
    *kept = recycle_slices(slices);
    written
}

/// What the reader task needs of [`CoreConfig`].
struct ReadConfig {
    max_response_size: usize,
    detect_tls_reply: bool,
    pool: Option<SizeClassPool>,
}

/// Reads response frames and hands each to the caller waiting on its correlation id.
async fn read_loop<R: AsyncRead + Unpin>(
    shared: Arc<Shared>,
    mut rd: R,
    config: ReadConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let ReadConfig {
        max_response_size,
        mut detect_tls_reply,
        pool,
    } = config;
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut first = true;
    let cause = loop {
        // Size prefix.
        match fill(&mut rd, &mut buf, 4, &mut shutdown).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(cause) => break cause,
        }
        let prefix = [buf[0], buf[1], buf[2], buf[3]];
        let detect_tls = std::mem::take(&mut detect_tls_reply);
        let first_frame = std::mem::take(&mut first);
        if let Err(cause) = check_first_prefix(prefix, detect_tls, first_frame, max_response_size) {
            break cause;
        }
        // An unframed SASL token (handshake v0) may be any size from 0; a response frame holds at
        // least its correlation id.
        let raw = shared.lock().raw.take();
        let size = match frame_size(prefix, raw.is_some(), max_response_size) {
            Ok(size) => size,
            Err(cause) => break cause,
        };
        let frame = match read_frame(&mut rd, &mut buf, pool.as_ref(), size, &mut shutdown).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(cause) => break cause,
        };
        shared.meter.read(4 + size);
        if let Some(raw) = raw {
            let _ = raw.send(Ok(frame));
            continue;
        }
        deliver(&shared, frame);
    };
    shared.fail(cause);
}

/// Refuses a size prefix that is no Kafka frame: a TLS record (`detect_tls`: the first bytes
/// of a plaintext connection), or, on the `first_frame`, an HTTP or other text protocol's
/// answer.
#[inline(always)]
fn check_first_prefix(
    prefix: [u8; 4],
    detect_tls: bool,
    first_frame: bool,
    max_response_size: usize,
) -> std::result::Result<(), CloseCause> {
    if detect_tls && crate::tls::looks_like_tls_record(prefix) {
        return Err(CloseCause::TlsRecordReceived);
    }
    // An HTTP server or proxy answers "HTTP/1.1 ...": read as a size prefix, that would be
    // a 1.2 GB frame (0x48545450), reported as a meaningless InvalidFrameSize.
    if first_frame && &prefix == b"HTTP" {
        return Err(CloseCause::HttpReceived);
    }
    let size = i32::from_be_bytes(prefix);
    // Another text protocol's server (an HTML page's "<!DO", "SSH-") answers with
    // printable bytes, which read as a size prefix are at least 0x20202020 (539 MB).
    if first_frame
        && usize::try_from(size).is_ok_and(|s| s > max_response_size)
        && prefix.iter().all(|b| b.is_ascii_graphic() || *b == b' ')
    {
        return Err(CloseCause::TextReceived { prefix });
    }
    Ok(())
}

/// The frame size a size `prefix` announces, checked: at least a correlation id (any size
/// from 0 for a `raw` SASL token), at most `max_response_size`.
#[inline(always)]
fn frame_size(
    prefix: [u8; 4],
    raw: bool,
    max_response_size: usize,
) -> std::result::Result<usize, CloseCause> {
    let size = i32::from_be_bytes(prefix);
    let min_size = if raw { 0 } else { 4 };
    usize::try_from(size)
        .ok()
        .filter(|s| (min_size..=max_response_size).contains(s))
        .ok_or(CloseCause::InvalidFrameSize {
            size,
            max: max_response_size,
        })
}

/// Reads the frame of `size` bytes after its prefix (checked: only now may memory be taken
/// for it): into a page of the response pool when it is large enough and one fits, else into
/// `buf`. `Ok(None)` means shutdown was requested.
#[inline(always)]
async fn read_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    pool: Option<&SizeClassPool>,
    size: usize,
    shutdown: &mut watch::Receiver<bool>,
) -> std::result::Result<Option<Bytes>, CloseCause> {
    // The size is checked: only now may memory be taken for the frame.
    let page = pool
        .filter(|_| size >= POOL_MIN)
        .and_then(|p| p.buffer_for(size));
    match page {
        Some(page) => read_into_page(rd, buf, page, size, shutdown).await,
        None => fill(rd, buf, 4 + size, shutdown).await.map(|more| {
            more.then(|| {
                buf.advance(4);
                buf.split_to(size).freeze()
            })
        }),
    }
}

/// Hands a response frame to the caller waiting on its correlation id, or discards it when
/// nobody waits (the caller timed out or was dropped).
#[inline(always)]
fn deliver(shared: &Shared, frame: Bytes) {
    let correlation_id = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    let pending = shared.lock().pending.remove(&correlation_id);
    match pending {
        Some(p) => {
            tracing::trace!(
                addr = %shared.addr,
                correlation_id,
                size = frame.len(),
                "response"
            );
            let _ = p.reply.send(Ok(frame));
        }
        None => tracing::trace!(
            addr = %shared.addr,
            correlation_id,
            "discarding a response nobody waits for"
        ),
    }
}

/// Reads until `buf` holds at least `need` bytes, growing it only as data arrives.
/// `Ok(false)` means shutdown was requested.
async fn fill<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    need: usize,
    shutdown: &mut watch::Receiver<bool>,
) -> std::result::Result<bool, CloseCause> {
    while buf.len() < need {
        buf.reserve((need - buf.len()).min(READ_CHUNK));
        let n = tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => return Ok(false),
            r = rd.read_buf(buf) => r.map_err(|e| CloseCause::Io(Arc::new(e)))?,
        };
        if n == 0 {
            return Err(CloseCause::Eof);
        }
    }
    Ok(true)
}

/// Reads the `size`-byte frame whose size prefix starts `buf` into `page` (an empty buffer of
/// the smallest page class that holds `size` bytes) and returns it as one `Bytes` over the page,
/// without a copy. What `buf` already holds of the frame (read ahead with the prefix, at most
/// one read's worth) is copied into the page; the rest is read from the socket straight into
/// it, never past the frame's end, so the next frame starts in `buf` again. `Ok(None)` means
/// shutdown was requested.
async fn read_into_page<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    mut page: PageBuf,
    size: usize,
    shutdown: &mut watch::Receiver<bool>,
) -> std::result::Result<Option<Bytes>, CloseCause> {
    buf.advance(4);
    let ahead = buf.len().min(size);
    page.put_slice(&buf[..ahead]);
    buf.advance(ahead);
    while page.len() < size {
        let left = size - page.len();
        let mut rest = (&mut page).limit(left);
        let n = tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => return Ok(None),
            r = rd.read_buf(&mut rest) => r.map_err(|e| CloseCause::Io(Arc::new(e)))?,
        };
        if n == 0 {
            return Err(CloseCause::Eof);
        }
    }
    let frame = page.freeze();
    debug_assert!(frame.is_contiguous(), "a frame is read into one page");
    Ok(Some(frame.into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn config() -> CoreConfig {
        CoreConfig {
            max_in_flight: 8,
            max_response_size: 1024 * 1024,
            detect_tls_reply: false,
            response_pool: None,
        }
    }

    async fn connect(listener: &TcpListener) -> Core {
        let addr = listener.local_addr().unwrap();
        let stream = TcpStream::connect(addr).await.unwrap();
        Core::start(stream, addr.to_string(), config())
    }

    /// A request body that is just a marker byte after the correlation id.
    fn body(marker: u8) -> impl FnOnce(i32, &mut BytesMut) -> Result<()> {
        move |cid, buf| {
            buf.put_i32(cid);
            buf.put_u8(marker);
            Ok(())
        }
    }

    /// Reads one request frame `[size][cid][marker]` from the server side.
    async fn read_request(s: &mut TcpStream) -> (i32, u8) {
        let size = s.read_i32().await.unwrap();
        assert_eq!(size, 5);
        (s.read_i32().await.unwrap(), s.read_u8().await.unwrap())
    }

    async fn write_response(s: &mut TcpStream, cid: i32, payload: &[u8]) {
        let mut b = BytesMut::new();
        b.put_i32(4 + payload.len() as i32);
        b.put_i32(cid);
        b.put_slice(payload);
        s.write_all(&b).await.unwrap();
    }

    const LONG: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn pipelined_responses_in_any_order_reach_their_callers() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect(&listener).await;
        let (mut server, _) = listener.accept().await.unwrap();
        let server = tokio::spawn(async move {
            let mut reqs = Vec::new();
            for _ in 0..3 {
                reqs.push(read_request(&mut server).await);
            }
            // Answer in reverse order, echoing the marker.
            for (cid, marker) in reqs.into_iter().rev() {
                write_response(&mut server, cid, &[marker]).await;
            }
            server
        });
        let (a, b, c) = tokio::join!(
            core.call(0, "t", LONG, 16, body(1)),
            core.call(0, "t", LONG, 16, body(2)),
            core.call(3, "t", LONG, 16, body(3)),
        );
        for (r, m) in [(a, 1u8), (b, 2), (c, 3)] {
            let frame = r.unwrap();
            assert_eq!(frame.len(), 5);
            assert_eq!(frame[4], m);
        }
        assert_eq!(core.requests_sent(0), 2);
        assert_eq!(core.requests_sent(3), 1);
        assert_eq!(core.requests_sent(1), 0);
        drop(server.await.unwrap());
    }

    #[tokio::test]
    async fn peer_closing_mid_request_fails_every_waiting_caller() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect(&listener).await;
        let (mut server, _) = listener.accept().await.unwrap();
        let server = tokio::spawn(async move {
            // Wait until all three requests have arrived, then close without answering.
            for _ in 0..3 {
                read_request(&mut server).await;
            }
            drop(server);
        });
        let (a, b, c) = tokio::join!(
            core.call(0, "t", LONG, 16, body(1)),
            core.call(0, "t", LONG, 16, body(2)),
            core.call(0, "t", LONG, 16, body(3)),
        );
        server.await.unwrap();
        for r in [a, b, c] {
            match r {
                Err(Error::ConnectionClosed { cause, .. }) => {
                    assert!(
                        matches!(cause, CloseCause::Eof | CloseCause::Io(_)),
                        "{cause:?}"
                    )
                }
                other => panic!("expected ConnectionClosed, got {other:?}"),
            }
        }
        // Later calls fail at once with the same cause, without hanging.
        let later = core.call(0, "t", LONG, 16, body(4)).await;
        assert!(matches!(later, Err(Error::ConnectionClosed { .. })));
        assert!(later.unwrap_err().is_retriable());
    }

    #[tokio::test]
    async fn huge_frame_size_is_a_typed_error_without_allocation() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect(&listener).await;
        let (mut server, _) = listener.accept().await.unwrap();
        let server = tokio::spawn(async move {
            let _ = read_request(&mut server).await;
            server.write_i32(i32::MAX).await.unwrap();
            server.write_all(&[0; 16]).await.unwrap();
            // Keep the socket open: the client must reject the prefix on its own.
            let mut rest = Vec::new();
            let _ = server.read_to_end(&mut rest).await;
        });
        let r = core.call(0, "t", LONG, 16, body(1)).await;
        match r {
            Err(Error::ConnectionClosed {
                cause: CloseCause::InvalidFrameSize { size, max },
                ..
            }) => {
                assert_eq!(size, i32::MAX);
                assert_eq!(max, 1024 * 1024);
            }
            other => panic!("expected InvalidFrameSize, got {other:?}"),
        }
        server.await.unwrap();
    }

    #[tokio::test]
    async fn negative_frame_size_is_a_typed_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect(&listener).await;
        let (mut server, _) = listener.accept().await.unwrap();
        tokio::spawn(async move {
            let _ = read_request(&mut server).await;
            server.write_i32(-7).await.unwrap();
            let mut rest = Vec::new();
            let _ = server.read_to_end(&mut rest).await;
        });
        let r = core.call(0, "t", LONG, 16, body(1)).await;
        assert!(matches!(
            r,
            Err(Error::ConnectionClosed {
                cause: CloseCause::InvalidFrameSize { size: -7, .. },
                ..
            })
        ));
    }

    /// A request timeout closes the connection: a half-open one left pooled would make every
    /// later request wait out the same timeout on it.
    #[tokio::test]
    async fn a_request_timeout_closes_the_connection_as_half_open() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect(&listener).await;
        let (_server, _) = listener.accept().await.unwrap();
        let waiting = tokio::spawn({
            let core = core.clone();
            async move { core.call(3, "Metadata", LONG, 16, body(2)).await }
        });
        let r = core
            .call(0, "Produce", Duration::from_millis(200), 16, body(1))
            .await;
        match r {
            Err(e @ Error::Timeout { .. }) => {
                assert!(e.is_retriable());
                assert!(matches!(
                    e,
                    Error::Timeout {
                        operation: "Produce",
                        timeout
                    } if timeout == Duration::from_millis(200)
                ));
            }
            other => panic!("expected Timeout, got {other:?}"),
        }
        assert!(core.is_closed(), "a half-open connection is not kept");
        // Others waiting on it learn at once, with the cause.
        match waiting.await.unwrap() {
            Err(
                e @ Error::ConnectionClosed {
                    cause: CloseCause::RequestTimedOut { .. },
                    ..
                },
            ) => assert!(e.is_retriable()),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_long_poll_timeout_keeps_the_connection_and_its_late_answer_is_discarded() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect(&listener).await;
        let (mut server, _) = listener.accept().await.unwrap();
        // API key 1: Fetch, which the broker may hold up to its max_wait.
        let r = core
            .call(1, "Fetch", Duration::from_millis(200), 16, body(1))
            .await;
        assert!(
            matches!(
                r,
                Err(Error::Timeout {
                    operation: "Fetch",
                    ..
                })
            ),
            "{r:?}"
        );
        assert!(!core.is_closed());
        // The late answer to the timed-out request is discarded; the next request still works.
        let (cid1, _) = read_request(&mut server).await;
        write_response(&mut server, cid1, b"late").await;
        let next = tokio::spawn({
            let core = core.clone();
            async move { core.call(0, "t", LONG, 16, body(2)).await }
        });
        let (cid2, marker) = read_request(&mut server).await;
        assert_ne!(cid1, cid2);
        write_response(&mut server, cid2, &[marker]).await;
        let frame = next.await.unwrap().unwrap();
        assert_eq!(&frame[4..], &[2]);
        assert!(!core.is_closed());
    }

    #[tokio::test]
    async fn dropped_caller_does_not_break_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect(&listener).await;
        let (mut server, _) = listener.accept().await.unwrap();
        let abandoned = tokio::spawn({
            let core = core.clone();
            async move { core.call(0, "t", LONG, 16, body(1)).await }
        });
        let (cid1, _) = read_request(&mut server).await;
        abandoned.abort();
        assert!(abandoned.await.unwrap_err().is_cancelled());
        write_response(&mut server, cid1, b"nobody").await;
        let next = tokio::spawn({
            let core = core.clone();
            async move { core.call(0, "t", LONG, 16, body(2)).await }
        });
        let (cid2, marker) = read_request(&mut server).await;
        write_response(&mut server, cid2, &[marker]).await;
        assert_eq!(&next.await.unwrap().unwrap()[4..], &[2]);
    }

    #[tokio::test]
    async fn max_in_flight_bounds_outstanding_requests() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stream = TcpStream::connect(addr).await.unwrap();
        let core = Core::start(
            stream,
            addr.to_string(),
            CoreConfig {
                max_in_flight: 2,
                max_response_size: 1024,
                detect_tls_reply: false,
                response_pool: None,
            },
        );
        let (mut server, _) = listener.accept().await.unwrap();
        let mut calls = Vec::new();
        for m in 0..3u8 {
            let core = core.clone();
            calls.push(tokio::spawn(async move {
                core.call(0, "t", LONG, 16, body(m)).await
            }));
        }
        let first = read_request(&mut server).await;
        let second = read_request(&mut server).await;
        // The third request may not be written until one of the first two is answered.
        let mut probe = [0u8; 1];
        let third_early = tokio::time::timeout(Duration::from_millis(100), server.peek(&mut probe));
        assert!(third_early.await.is_err(), "a third request was sent early");
        assert_eq!(core.requests_sent(0), 2);
        write_response(&mut server, first.0, &[first.1]).await;
        let third = read_request(&mut server).await;
        write_response(&mut server, second.0, &[second.1]).await;
        write_response(&mut server, third.0, &[third.1]).await;
        for c in calls {
            c.await.unwrap().unwrap();
        }
    }

    #[tokio::test]
    async fn request_without_response_returns_once_written() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect(&listener).await;
        let (mut server, _) = listener.accept().await.unwrap();
        // Returns once written: `Ok(())`, no response frame.
        core.call_no_answer(0, "Produce", LONG, 16, body(9))
            .await
            .unwrap();
        let (_, marker) = read_request(&mut server).await;
        assert_eq!(marker, 9);
        assert_eq!(core.requests_sent(0), 1);
    }

    /// A writer in front of a duplex pipe that notes where every piece it is handed lives, and
    /// takes at most `max` bytes per call (short writes).
    struct Recorder {
        inner: tokio::io::DuplexStream,
        vectored: bool,
        max: usize,
        seen: Arc<Mutex<Vec<(usize, usize)>>>,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.seen
                .lock()
                .unwrap()
                .push((buf.as_ptr() as usize, buf.len()));
            let n = buf.len().min(self.max);
            std::pin::Pin::new(&mut self.inner).poll_write(cx, &buf[..n])
        }
        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let mut joined = Vec::new();
            for b in bufs {
                self.seen
                    .lock()
                    .unwrap()
                    .push((b.as_ptr() as usize, b.len()));
                joined.extend_from_slice(&b[..b.len().min(self.max - joined.len())]);
                if joined.len() == self.max {
                    break;
                }
            }
            std::pin::Pin::new(&mut self.inner).poll_write(cx, &joined)
        }
        fn is_write_vectored(&self) -> bool {
            self.vectored
        }
        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.inner).poll_flush(cx)
        }
        fn poll_shutdown(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// A Produce request's record batches go to the socket from their own buffers
    /// (the writer is handed the batch's memory, never a copy), with vectored writes or piece by
    /// piece, through short writes, and the peer reads exactly the plain encoding. A retry (the
    /// same request sent again) copies nothing either.
    #[tokio::test]
    async fn record_batches_are_written_from_their_own_buffers() {
        use kafkit_protocol::Message;
        use kafkit_protocol::messages::{ProduceRequest, produce_request};
        for vectored in [true, false] {
            let batches: Vec<Bytes> = [70_000usize, 100, 3_000, 511, 512]
                .iter()
                .enumerate()
                .map(|(i, n)| Bytes::from(vec![i as u8 + 1; *n]))
                .collect();
            let parts = batches
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    produce_request::PartitionProduceData::default()
                        .with_index(i as i32)
                        .with_records(Some(b.clone()))
                })
                .collect();
            let req = ProduceRequest::default()
                .with_acks(1)
                .with_timeout_ms(1000)
                .with_topic_data(vec![
                    produce_request::TopicProduceData::default()
                        .with_name("t".into())
                        .with_partition_data(parts),
                ]);
            let mut plain = BytesMut::new();
            req.encode(&mut plain, 9).unwrap();

            let (ours, mut peer) = tokio::io::duplex(1 << 20);
            // No answers come: the read half stays open and quiet.
            let (rd, _rd_peer) = tokio::io::duplex(64);
            let seen = Arc::new(Mutex::new(Vec::new()));
            let wr = Recorder {
                inner: ours,
                vectored,
                max: 1000,
                seen: Arc::clone(&seen),
            };
            let core = Core::start_io(rd, wr, "test".into(), config());
            for attempt in 0..2 {
                core.call_no_answer(0, "Produce", LONG, plain.len(), |_, buf| {
                    req.encode(buf, 9)?;
                    Ok(())
                })
                .await
                .unwrap();
                let mut frame = vec![0u8; 4 + plain.len()];
                peer.read_exact(&mut frame).await.unwrap();
                assert_eq!(
                    u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize,
                    plain.len()
                );
                assert!(frame[4..] == plain[..], "attempt {attempt}: bytes differ");
                // Once written, the frame's buffer and splice list are kept for the next
                // request, the list emptied: no batch is held past its write.
                let r = core.shared.recycled();
                assert_eq!(
                    (r.frames.len(), r.splices.len()),
                    (1, 1),
                    "attempt {attempt}"
                );
                assert!(r.splices[0].is_empty() && r.splices[0].capacity() >= 3);
                assert!(r.frames[0].is_empty());
            }
            let seen = seen.lock().unwrap().clone();
            for (i, b) in batches.iter().enumerate() {
                let start = b.as_ptr() as usize;
                let inside = |(p, n): &(usize, usize)| *p >= start && p + n <= start + b.len();
                let handed = seen
                    .iter()
                    .filter(|s| inside(s))
                    .map(|(_, n)| n)
                    .sum::<usize>();
                if b.len() >= SPLICE_MIN {
                    // Each of the two attempts hands all of it (short writes hand parts again).
                    assert!(
                        handed >= 2 * b.len(),
                        "batch {i}: {handed} of {} bytes",
                        b.len()
                    );
                } else {
                    assert_eq!(handed, 0, "batch {i} is short: copied into the frame");
                }
            }
        }
    }

    #[tokio::test]
    async fn dropping_the_last_handle_closes_the_socket() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect(&listener).await;
        let (mut server, _) = listener.accept().await.unwrap();
        let second = core.clone();
        drop(core);
        second
            .call_no_answer(0, "t", LONG, 16, body(1))
            .await
            .unwrap();
        read_request(&mut server).await;
        drop(second);
        // The client shuts its side down: the server reads end-of-stream.
        let mut rest = Vec::new();
        let n = server.read_to_end(&mut rest).await.unwrap();
        assert_eq!(n, 0);
    }

    #[tokio::test]
    async fn raw_exchange_sends_an_unframed_token_and_takes_the_next_frame_whatever_its_size() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect(&listener).await;
        let (mut server, _) = listener.accept().await.unwrap();
        let server = tokio::spawn(async move {
            // A raw token: [size][bytes], no request header.
            let size = server.read_i32().await.unwrap();
            let mut token = vec![0u8; usize::try_from(size).unwrap()];
            server.read_exact(&mut token).await.unwrap();
            assert_eq!(token, b"\0user\0pw");
            // An empty answer (size 0), then a 3-byte one: neither holds a correlation id.
            server.write_i32(0).await.unwrap();
            let size = server.read_i32().await.unwrap();
            let mut token = vec![0u8; usize::try_from(size).unwrap()];
            server.read_exact(&mut token).await.unwrap();
            server.write_i32(3).await.unwrap();
            server.write_all(b"abc").await.unwrap();
            // Back to framed requests.
            let (cid, marker) = read_request(&mut server).await;
            write_response(&mut server, cid, &[marker]).await;
        });
        let first = core.call_raw("SaslAuthenticate", LONG, b"\0user\0pw").await;
        assert!(first.unwrap().is_empty());
        let second = core.call_raw("SaslAuthenticate", LONG, b"x").await.unwrap();
        assert_eq!(&second[..], b"abc");
        let framed = core.call(0, "t", LONG, 16, body(7)).await.unwrap();
        assert_eq!(&framed[4..], &[7]);
        server.await.unwrap();
    }

    #[tokio::test]
    async fn raw_exchange_refuses_to_share_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect(&listener).await;
        let (mut server, _) = listener.accept().await.unwrap();
        let pending = tokio::spawn({
            let core = core.clone();
            async move { core.call(0, "t", LONG, 16, body(1)).await }
        });
        let (cid, marker) = read_request(&mut server).await;
        let err = core.call_raw("SaslAuthenticate", LONG, b"tok").await;
        assert!(matches!(err, Err(Error::Protocol(_))), "{err:?}");
        write_response(&mut server, cid, &[marker]).await;
        assert!(pending.await.unwrap().is_ok());
    }

    #[tokio::test]
    async fn close_fails_waiting_callers() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect(&listener).await;
        let (mut server, _) = listener.accept().await.unwrap();
        let waiting = tokio::spawn({
            let core = core.clone();
            async move { core.call(0, "t", LONG, 16, body(1)).await }
        });
        read_request(&mut server).await;
        core.close();
        match waiting.await.unwrap() {
            Err(e @ Error::ConnectionClosed { .. }) => assert!(!e.is_retriable()),
            other => panic!("expected ConnectionClosed, got {other:?}"),
        }
    }

    /// A pool like the dialer's, with two classes, and a connection that reads into it.
    async fn connect_pooled(listener: &TcpListener, pool: &SizeClassPool) -> Core {
        let addr = listener.local_addr().unwrap();
        let stream = TcpStream::connect(addr).await.unwrap();
        let config = CoreConfig {
            response_pool: Some(pool.clone()),
            ..config()
        };
        Core::start(stream, addr.to_string(), config)
    }

    /// Record batches of `records` 200-byte values (`i` repeated), as a Fetch answer holds.
    fn batches(records: u32) -> Bytes {
        use kafkit_protocol::records::{Record, RecordBatchEncoder, RecordBatchOptions};
        let mut out = BytesMut::new();
        for base in [0, records / 2] {
            let mut enc = RecordBatchEncoder::new(
                &mut out,
                RecordBatchOptions::new().base_offset(i64::from(base)),
            )
            .unwrap();
            for i in base..base + records / 2 {
                let value = Bytes::from(vec![i as u8; 200]);
                enc.append(&Record::new(None, Some(value))).unwrap();
            }
            enc.finish().unwrap();
        }
        out.freeze()
    }

    #[tokio::test]
    async fn a_fetch_sized_frame_is_read_into_a_pooled_page_that_its_records_share() {
        const SMALL: usize = 64 * 1024;
        const LARGE: usize = 1024 * 1024;
        let pool = SizeClassPool::new(&[SMALL, LARGE], 4 * LARGE).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect_pooled(&listener, &pool).await;
        let (mut server, _) = listener.accept().await.unwrap();
        let records = batches(2_000); // about 420 KiB: the 1 MiB class
        assert!(records.len() > SMALL && records.len() < LARGE);
        let payload = records.clone();
        let server = tokio::spawn(async move {
            for _ in 0..2 {
                // A small answer, the large one and another small one in one write: the large
                // frame's start is read ahead with the small one, and its end must not swallow
                // the next frame.
                let reqs = [
                    read_request(&mut server).await,
                    read_request(&mut server).await,
                    read_request(&mut server).await,
                ];
                let mut out = BytesMut::new();
                for (cid, marker) in reqs {
                    let body: &[u8] = if marker == 2 { &payload } else { &[marker] };
                    out.put_i32(4 + body.len() as i32);
                    out.put_i32(cid);
                    out.put_slice(body);
                }
                server.write_all(&out).await.unwrap();
            }
            server
        });

        for round in 0..2 {
            let (a, b, c) = tokio::join!(
                core.call(0, "t", LONG, 16, body(1)),
                core.call(1, "t", LONG, 16, body(2)),
                core.call(0, "t", LONG, 16, body(3)),
            );
            let (a, frame, c) = (a.unwrap(), b.unwrap(), c.unwrap());
            assert_eq!((&a[4..], &c[4..]), (&[1u8][..], &[3u8][..]));
            assert_eq!(frame[4..], records[..]);
            let stats = pool.stats();
            assert_eq!((stats[0].in_use, stats[1].in_use), (0, 1), "round {round}");

            // The records decoded from the frame are slices of its page, not copies.
            let data = frame.slice(4..);
            let mut decoded = Vec::new();
            let mut budget = usize::MAX;
            super::super::records::decode_records(&data, 0, None, &mut decoded, &mut budget)
                .unwrap();
            assert_eq!(decoded.len(), 2_000);
            let page = frame.as_ptr_range();
            for r in &decoded {
                let value = r.value.as_ref().unwrap();
                assert_eq!(value[..], [r.offset as u8; 200]);
                assert!(
                    page.contains(&value.as_ptr()),
                    "record {} was copied",
                    r.offset
                );
            }

            // The page stays lent while any record holds it, and is back once the last drops.
            drop((frame, data));
            assert_eq!(pool.stats()[1].in_use, 1);
            let last = decoded.pop().unwrap();
            drop(decoded);
            assert_eq!(pool.stats()[1].in_use, 1);
            drop(last);
            let stats = pool.stats()[1];
            assert_eq!((stats.in_use, stats.idle), (0, 1), "round {round}");
            // The second round reads into the same page: nothing allocated beyond it.
            assert_eq!((stats.pooled, stats.overflow_allocated), (1, 0));
        }
        drop(server.await.unwrap());
    }

    #[tokio::test]
    async fn frames_without_a_class_are_read_into_the_shared_buffer() {
        // The largest class is 64 KiB: a 100 KiB frame falls back to the read buffer, and a
        // frame below POOL_MIN never takes a page.
        let pool = SizeClassPool::new(&[64 * 1024], 1024 * 1024).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let core = connect_pooled(&listener, &pool).await;
        let (mut server, _) = listener.accept().await.unwrap();
        let big = vec![7u8; 100 * 1024];
        let small = vec![8u8; POOL_MIN - 5];
        let (b2, s2) = (big.clone(), small.clone());
        let server = tokio::spawn(async move {
            let (cid, _) = read_request(&mut server).await;
            write_response(&mut server, cid, &b2).await;
            let (cid, _) = read_request(&mut server).await;
            write_response(&mut server, cid, &s2).await;
            server
        });
        let frame = core.call(1, "t", LONG, 16, body(1)).await.unwrap();
        assert_eq!(frame[4..], big[..]);
        let frame2 = core.call(1, "t", LONG, 16, body(2)).await.unwrap();
        assert_eq!(frame2[4..], small[..]);
        let stats = pool.stats()[0];
        assert_eq!((stats.pooled, stats.overflow_allocated), (0, 0));
        drop(server.await.unwrap());
    }
}
