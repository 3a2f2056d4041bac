//! [`Conn`]: one connection to one broker, shared by concurrent callers.

pub(crate) mod aborted;
mod core;
pub(crate) mod fetch;
pub(crate) mod metadata;
pub(crate) mod offsets;
pub(crate) mod produce;
#[cfg(test)]
mod protocol_doc;
pub(crate) mod records;
pub(crate) mod sasl;
mod topics;
pub(crate) mod versions;

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafkit_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse, ResponseHeader};
use kafkit_protocol::{ApiKey, ErrorCode, Message, Request, VersionRange};

pub(crate) use self::core::{Core, CoreConfig, SPLICE_MIN};
use crate::error::{Error, Result};

/// Name and version reported to brokers in ApiVersions v3+ (KIP-511).
const CLIENT_SOFTWARE_NAME: &str = "kafkit";
const CLIENT_SOFTWARE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The API versions a broker announced in its ApiVersions response (KIP-35).
#[derive(Debug, Clone, Default)]
pub struct BrokerVersions {
    ranges: Vec<(i16, VersionRange)>,
}

impl BrokerVersions {
    fn from_response(resp: &ApiVersionsResponse) -> Self {
        let mut ranges: Vec<(i16, VersionRange)> = resp
            .api_keys
            .iter()
            .map(|k| {
                (
                    k.api_key,
                    VersionRange {
                        min: k.min_version,
                        max: k.max_version,
                    },
                )
            })
            .collect();
        ranges.sort_by_key(|(k, _)| *k);
        BrokerVersions { ranges }
    }

    /// The versions the broker supports for `api`, or `None` when it does not offer the API.
    pub fn get(&self, api: ApiKey) -> Option<VersionRange> {
        let key = api as i16;
        self.ranges
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| self.ranges[i].1)
    }

    /// Every `(api key, version range)` the broker announced, sorted by API key. Keys this
    /// library does not know are included as raw numbers.
    pub fn iter(&self) -> impl Iterator<Item = (i16, VersionRange)> + '_ {
        self.ranges.iter().copied()
    }
}

/// A connection to one Kafka broker, like kafka-go's `Conn`.
///
/// Requests are pipelined: any number of tasks may call methods at the same time (all take
/// `&self`); up to `max_in_flight_requests_per_connection` requests are on the wire together and
/// each response is matched to its caller by correlation id. Cloning a `Conn` is cheap and shares
/// the connection; it closes when the last clone is dropped or [`Conn::close`] is called.
///
/// Every request waits at most the dialer's `request_timeout` (plus the broker-side wait of
/// Fetch and Produce) and fails with [`Error::Timeout`]; dropping a call's future abandons the
/// request without harming the connection. When the connection dies, every waiting call fails at
/// once with [`Error::ConnectionClosed`].
///
/// Each request uses the highest version that both this library and the broker support (from the
/// ApiVersions exchange done by [`crate::Dialer::dial`]).
#[derive(Debug, Clone)]
pub struct Conn {
    core: Core,
    inner: Arc<ConnInner>,
}

#[derive(Debug)]
struct ConnInner {
    client_id: String,
    request_timeout: Duration,
    versions: BrokerVersions,
    sasl: sasl::SaslState,
    /// Whether versions the schemas mark unstable may be chosen (the dialer's opt-in).
    unstable: bool,
    /// The cluster and node this connection was dialled for, sent in ApiVersions v5 so the
    /// broker refuses a misrouted connection (KIP-1242); `None` for a bootstrap connection.
    expected: Option<(String, i32)>,
}

/// How a new connection negotiates (from the dialer and, for a known node, the transport).
#[derive(Debug, Clone, Default)]
pub(crate) struct NegotiateOptions {
    /// The dialer's unstable-versions opt-in.
    pub(crate) unstable: bool,
    /// The cluster id and node id the connection is meant to reach (KIP-1242).
    pub(crate) expected: Option<(String, i32)>,
}

impl Conn {
    /// Runs the ApiVersions exchange on a fresh core and returns the ready connection.
    ///
    /// # Errors
    ///
    /// Those of [`Conn::api_versions`]: [`Error::RebootstrapRequired`] when `opts.expected`
    /// names another cluster or node than the broker reached (the connection is closed).
    pub(crate) async fn negotiate(
        core: Core,
        client_id: String,
        request_timeout: Duration,
        opts: NegotiateOptions,
    ) -> Result<Conn> {
        let mut conn = Conn {
            core,
            inner: Arc::new(ConnInner {
                client_id,
                request_timeout,
                versions: BrokerVersions::default(),
                sasl: sasl::SaslState::default(),
                unstable: opts.unstable,
                expected: opts.expected,
            }),
        };
        let resp = match conn.api_versions().await {
            Ok(r) => r,
            Err(e) => {
                conn.close();
                return Err(e);
            }
        };
        let inner = Arc::get_mut(&mut conn.inner)
            .ok_or_else(|| Error::Protocol("connection shared during negotiation".into()))?;
        inner.versions = BrokerVersions::from_response(&resp);
        Ok(conn)
    }

    /// The connection's metric handles (cargo feature `metrics`, `ops/meter.rs`).
    pub(crate) fn meter(&self) -> &crate::ops::meter::ConnMeter {
        self.core.meter()
    }

    /// The broker address this connection was dialled with (`host:port`).
    pub fn addr(&self) -> &str {
        self.core.addr()
    }

    /// The API versions the broker announced when the connection was set up.
    pub fn broker_versions(&self) -> &BrokerVersions {
        &self.inner.versions
    }

    /// The cluster id and node id this connection was dialled for and that the broker
    /// confirmed in the ApiVersions v5 exchange (KIP-1242): `None` for a bootstrap connection,
    /// a plain [`crate::Dialer::dial`], or a broker older than Apache Kafka 4.4 (which does not
    /// check; the ids were then not sent).
    pub fn checked_node(&self) -> Option<(&str, i32)> {
        self.inner
            .expected
            .as_ref()
            .filter(|_| {
                self.inner
                    .versions
                    .get(ApiKey::ApiVersions)
                    .is_some_and(|r| r.max >= 5)
            })
            .map(|(c, n)| (c.as_str(), *n))
    }

    /// How many requests with `api` this connection has sent: counted when a request is queued
    /// for the socket (after encoding succeeded), including requests whose write later failed.
    /// Useful to check that [`Conn::write_multi`] sends one Produce request per call.
    pub fn requests_sent(&self, api: ApiKey) -> u64 {
        self.core.requests_sent(api as i16)
    }

    /// Whether the connection has closed (it cannot be reopened; dial again).
    pub fn is_closed(&self) -> bool {
        self.core.is_closed()
    }

    /// Resolves once the connection has closed, for whatever cause (at once if it already has);
    /// a request sent afterwards fails with [`Error::ConnectionClosed`] naming the cause. It
    /// never resolves while the connection stays open: put a timeout around it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub async fn closed(&self) {
        let mut signal = self.core.closed_signal();
        // Err: the sender is gone, which only happens once the connection is torn down.
        let _ = signal.wait_for(|closed| *closed).await;
    }

    /// Closes the connection. Calls waiting for a response fail with
    /// [`Error::ConnectionClosed`] ([`crate::CloseCause::ClosedByClient`]).
    pub fn close(&self) {
        self.core.close();
    }

    /// Closes the connection because a request on it got no answer within `timeout`
    /// ([`crate::CloseCause::RequestTimedOut`]): for callers that bound a request themselves.
    pub(crate) fn close_half_open(&self, operation: &'static str, timeout: Duration) {
        self.core
            .fail(crate::error::CloseCause::RequestTimedOut { operation, timeout });
    }

    /// Closes the connection because the transport bootstraps again
    /// ([`crate::CloseCause::Rebootstrap`], retriable for the requests waiting on it).
    pub(crate) fn close_for_rebootstrap(&self) {
        self.core.fail(crate::error::CloseCause::Rebootstrap);
    }

    /// The default per-request timeout of this connection.
    pub fn request_timeout(&self) -> Duration {
        self.inner.request_timeout
    }

    /// The version to use for `R`: the highest in both our range (up to the client's maximum
    /// for the API, listed in docs/protocol.md, capped at `cap`) and the broker's.
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedVersion`] naming the API and both ranges when they do not
    /// overlap (or the broker does not offer the API).
    pub fn version_for<R: Request>(&self, cap: Option<i16>) -> Result<i16> {
        versions::choose_opt_in::<R>(
            self.inner.versions.get(R::API_KEY),
            cap,
            self.inner.unstable,
        )
    }

    /// Sends `req` at the highest version both sides support and returns the decoded response.
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedVersion`], [`Error::Encode`], [`Error::Timeout`] (after the
    /// dialer's `request_timeout`), [`Error::ConnectionClosed`], [`Error::Decode`]. Error codes
    /// inside the response are returned as data, not as `Err`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the request: the connection stays usable and a late
    /// answer is discarded. A request already written may still be carried out by the
    /// broker (a write may still take effect).
    pub async fn request<R: Request>(&self, req: &R) -> Result<R::Response> {
        let version = self.version_for::<R>(None)?;
        self.request_at(req, version, Duration::ZERO).await
    }

    /// Sends `req` at `version` (pick it with [`Conn::version_for`], e.g. to cap an API at the
    /// last version a caller can fill in) and waits at most the request timeout plus
    /// `extra_wait` (the time the request asks the broker to wait, such as a Fetch's
    /// `max_wait`).
    ///
    /// # Errors
    ///
    /// As for [`Conn::request`]; a `version` outside `R::VERSIONS` is an
    /// [`Error::Encode`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the request: the connection stays usable and a late
    /// answer is discarded. A request already written may still be carried out by the
    /// broker (a write may still take effect).
    pub async fn request_at<R: Request>(
        &self,
        req: &R,
        version: i16,
        extra_wait: Duration,
    ) -> Result<R::Response> {
        let mut frame = self.call(req, version, extra_wait)?.await?;
        decode_response::<R>(&mut frame, version)
    }

    /// As [`Conn::request_at`], but the response's body is handed back undecoded (its header
    /// read past), for a caller that decodes it its own way (the writer reads a Produce answer
    /// into the last one's memory).
    pub(crate) async fn request_frame<R: Request>(
        &self,
        req: &R,
        version: i16,
        extra_wait: Duration,
    ) -> Result<Bytes> {
        let mut frame = self.call(req, version, extra_wait)?.await?;
        skip_response_header::<R>(&mut frame, version)?;
        Ok(frame)
    }

    /// Encodes and sends one request and returns its response frame (starting with the
    /// correlation id).
    pub(crate) async fn send<R: Request>(
        &self,
        req: &R,
        version: i16,
        extra_wait: Duration,
    ) -> Result<Bytes> {
        self.call(req, version, extra_wait)?.await
    }

    /// The core's call for `req` at `version`, not started: a plain function, so that a
    /// request's future is no deeper than the core's own (each caller awaits it directly).
    #[inline(always)]
    fn call<'a, R: Request>(
        &'a self,
        req: &'a R,
        version: i16,
        extra_wait: Duration,
    ) -> Result<impl std::future::Future<Output = Result<Bytes>> + 'a> {
        let (size_hint, timeout) = self.call_sizes(req, version, extra_wait)?;
        Ok(self.core.call(
            R::API_KEY as i16,
            R::API_KEY.name(),
            timeout,
            size_hint,
            move |correlation_id, buf: &mut BytesMut| {
                self.encode(req, version, correlation_id, buf)
            },
        ))
    }

    /// Encodes and sends one request that gets no response (a Produce with acks=0); returns
    /// once it is written.
    pub(crate) async fn send_no_answer<R: Request>(
        &self,
        req: &R,
        version: i16,
        extra_wait: Duration,
    ) -> Result<()> {
        let (size_hint, timeout) = self.call_sizes(req, version, extra_wait)?;
        self.core
            .call_no_answer(
                R::API_KEY as i16,
                R::API_KEY.name(),
                timeout,
                size_hint,
                |correlation_id, buf: &mut BytesMut| self.encode(req, version, correlation_id, buf),
            )
            .await
    }

    /// A request's expected size (header and body) and how long to wait for it.
    #[inline(always)]
    fn call_sizes<R: Request>(
        &self,
        req: &R,
        version: i16,
        extra_wait: Duration,
    ) -> Result<(usize, Duration)> {
        let client_id = &self.inner.client_id;
        // Header: api key, version, correlation id, client id (length + bytes), tag buffer.
        let size_hint = 2 + 2 + 4 + 2 + client_id.len() + 1 + req.compute_size(version)?;
        Ok((
            size_hint,
            self.inner.request_timeout.saturating_add(extra_wait),
        ))
    }

    /// Appends the request header and `req`'s body to `buf`.
    #[inline(always)]
    fn encode<R: Request>(
        &self,
        req: &R,
        version: i16,
        correlation_id: i32,
        buf: &mut BytesMut,
    ) -> Result<()> {
        // Written from the borrowed client id: a `RequestHeader` would need its own copy (an
        // allocation per request).
        kafkit_protocol::write_request_header::<R>(
            buf,
            version,
            correlation_id,
            Some(&self.inner.client_id),
        )?;
        req.encode(buf, version)?;
        Ok(())
    }

    /// Sends ApiVersions and returns the broker's answer.
    ///
    /// Tries the highest ApiVersions version this library has; when the broker answers
    /// `UNSUPPORTED_VERSION` (it then replies in the v0 format, KIP-511), retries at the highest
    /// version the broker listed for ApiVersions (or v0).
    ///
    /// # Errors
    ///
    /// [`Error::RebootstrapRequired`] when the connection was dialled for a node of a cluster
    /// (KIP-1242, ApiVersions v5) and the broker is another node or in another cluster;
    /// [`Error::Broker`] when the final answer carries another error code, and the errors of
    /// [`Conn::request`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the request (it only reads); the connection
    /// stays usable and a late answer is discarded.
    pub async fn api_versions(&self) -> Result<ApiVersionsResponse> {
        let req = api_versions_request(self.inner.expected.as_ref());
        let ours = VersionRange {
            min: ApiVersionsRequest::VERSIONS.min,
            max: crate::ops::versions::client_max_for::<ApiVersionsRequest>(),
        };
        let first = match self.inner.versions.get(ApiKey::ApiVersions) {
            Some(b) => b.intersect(&ours).map_or(ours.min, |r| r.max),
            None => ours.max,
        };
        let frame = self.send(&req, first, Duration::ZERO).await?;
        // Every ApiVersions response version starts with the error code, right after the
        // 4-byte correlation id of response header v0.
        let code = frame
            .get(4..6)
            .map_or(0, |b| i16::from_be_bytes([b[0], b[1]]));
        let resp = if code == ErrorCode::UNSUPPORTED_VERSION.0 {
            // The broker does not speak `first`. Its answer lists its own ApiVersions range; it
            // is in the v0 format (KIP-511) or, with some brokers, in the format we asked for.
            let listed = decode_api_versions(frame.clone(), 0)
                .or_else(|_| decode_api_versions(frame, first))
                .ok();
            let retry = listed
                .map(|r| BrokerVersions::from_response(&r))
                .and_then(|v| v.get(ApiKey::ApiVersions))
                .and_then(|b| b.intersect(&ours))
                .map_or(0, |r| r.max);
            let retry = if retry >= first { 0 } else { retry };
            tracing::debug!(addr = %self.addr(), first, retry, "ApiVersions version not supported, retrying");
            let frame = self.send(&req, retry, Duration::ZERO).await?;
            decode_api_versions(frame, retry)?
        } else {
            decode_api_versions(frame, first)?
        };
        api_versions_error(self.addr(), self.inner.expected.as_ref(), resp.error_code)?;
        Ok(resp)
    }
}

/// The ApiVersions request of a connection dialled for `expected` (cluster id, node id; `None`
/// for a bootstrap connection). KIP-1242: both or neither (a v5 broker answers
/// INVALID_REQUEST to one alone); below v5 the fields are not encoded and the broker checks
/// nothing.
fn api_versions_request(expected: Option<&(String, i32)>) -> ApiVersionsRequest {
    let req = ApiVersionsRequest::default()
        .with_client_software_name(CLIENT_SOFTWARE_NAME.into())
        .with_client_software_version(CLIENT_SOFTWARE_VERSION.into());
    match expected {
        Some((cluster, node)) => req
            .with_cluster_id(Some(cluster.clone()))
            .with_node_id(*node),
        None => req,
    }
}

/// The error of an ApiVersions answer's `code` from the broker at `addr`, on a connection
/// dialled for `expected` (see [`api_versions_request`]).
///
/// # Errors
///
/// [`Error::RebootstrapRequired`] (operation "ApiVersions", naming the expected cluster and
/// node) for `REBOOTSTRAP_REQUIRED`: the broker is not that node or not in that cluster
/// (KIP-1242); [`Error::Broker`] for any other non-zero code.
fn api_versions_error(addr: &str, expected: Option<&(String, i32)>, code: ErrorCode) -> Result<()> {
    if code == ErrorCode::REBOOTSTRAP_REQUIRED {
        let (cluster_id, node_id) = expected.cloned().unzip();
        tracing::info!(
            addr,
            ?cluster_id,
            ?node_id,
            "misrouted connection: the broker is not the node this connection was meant for (KIP-1242)"
        );
        return Err(Error::RebootstrapRequired {
            operation: "ApiVersions",
            addr: addr.to_owned(),
            cluster_id,
            node_id,
        });
    }
    if !code.is_ok() {
        return Err(Error::broker("ApiVersions", code, None));
    }
    Ok(())
}

fn decode_api_versions(mut frame: Bytes, version: i16) -> Result<ApiVersionsResponse> {
    decode_response::<ApiVersionsRequest>(&mut frame, version)
}

/// Decodes a response frame (starting with the correlation id) for request type `R`.
fn decode_response<R: Request>(frame: &mut Bytes, version: i16) -> Result<R::Response> {
    skip_response_header::<R>(frame, version)?;
    let resp = R::Response::decode(frame, version)?;
    Ok(resp)
}

/// Reads past the response header of a frame (starting with the correlation id) for request type
/// `R`, leaving the body, for a caller that decodes the body its own way.
///
/// # Errors
/// A header that does not decode.
fn skip_response_header<R: Request>(frame: &mut Bytes, version: i16) -> Result<()> {
    ResponseHeader::decode(frame, R::response_header_version(version))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// KIP-1242: a connection dialled for node 3 of cluster `c` names both in ApiVersions v5
    /// (encoded and decoded as the broker reads it); a bootstrap connection names neither;
    /// below v5 the fields are not on the wire.
    #[test]
    fn api_versions_v5_names_the_cluster_and_node() {
        let expected = ("c".to_owned(), 3);
        let mut buf = BytesMut::new();
        api_versions_request(Some(&expected))
            .encode(&mut buf, 5)
            .unwrap();
        let got = ApiVersionsRequest::decode(&mut buf.freeze(), 5).unwrap();
        assert_eq!((got.cluster_id.as_deref(), got.node_id), (Some("c"), 3));
        assert_eq!(got.client_software_name, CLIENT_SOFTWARE_NAME);

        let mut buf = BytesMut::new();
        api_versions_request(None).encode(&mut buf, 5).unwrap();
        let got = ApiVersionsRequest::decode(&mut buf.freeze(), 5).unwrap();
        assert_eq!((got.cluster_id, got.node_id), (None, -1));

        let mut buf = BytesMut::new();
        api_versions_request(Some(&expected))
            .encode(&mut buf, 4)
            .unwrap();
        let got = ApiVersionsRequest::decode(&mut buf.freeze(), 4).unwrap();
        assert_eq!((got.cluster_id, got.node_id), (None, -1), "not in v4");
    }

    /// KIP-1242: the broker's REBOOTSTRAP_REQUIRED is the typed, retriable
    /// `RebootstrapRequired` naming the operation, address, cluster and node; another code is a
    /// broker error.
    #[test]
    fn a_refused_api_versions_is_rebootstrap_required() {
        let expected = ("c".to_owned(), 3);
        let err = api_versions_error("h:1", Some(&expected), ErrorCode::REBOOTSTRAP_REQUIRED)
            .unwrap_err();
        match &err {
            Error::RebootstrapRequired {
                operation,
                addr,
                cluster_id,
                node_id,
            } => {
                assert_eq!((*operation, addr.as_str()), ("ApiVersions", "h:1"));
                assert_eq!((cluster_id.as_deref(), *node_id), (Some("c"), Some(3)));
            }
            other => panic!("{other:?}"),
        }
        assert!(err.is_retriable());
        assert_eq!(err.error_code(), Some(ErrorCode::REBOOTSTRAP_REQUIRED));
        assert!(err.to_string().contains("REBOOTSTRAP_REQUIRED"), "{err}");

        let err = api_versions_error("h:1", None, ErrorCode::UNKNOWN_SERVER_ERROR).unwrap_err();
        assert!(matches!(err, Error::Broker { .. }), "{err:?}");
        assert_eq!(err.error_code(), Some(ErrorCode::UNKNOWN_SERVER_ERROR));
        assert!(api_versions_error("h:1", Some(&expected), ErrorCode::NONE).is_ok());
    }
}
