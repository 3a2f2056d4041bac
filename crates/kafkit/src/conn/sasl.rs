//! SASL authentication of a connection (KIP-43, KIP-152) and re-authentication (KIP-368).
//!
//! ```text
//!  ApiVersions ──► SaslHandshake(mechanism) ──► v1: SaslAuthenticate(token) … until Step::Done
//!                                          └──► v0: raw size-prefixed tokens … until Step::Done
//!  session_lifetime_ms > 0 ──► background task: at 85 % of the lifetime (or the dialer's cap),
//!  SaslHandshake v1 + SaslAuthenticate again on the same connection; new requests wait until
//!  the exchange is over (answers to earlier ones still flow); a failure closes the connection
//!  (CloseCause::ReauthenticationFailed).
//! ```
//!
//! Invariants: the bytes a mechanism produces (they may hold a password) are only ever put on
//! the wire; they are never logged nor put in an error. Errors carry the broker's error code and
//! message, or the mechanism's error, which holds no secret.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafkit_sasl::{Mechanism, SaslContext, Step};

use super::core::WeakCore;
use super::{Conn, ConnInner};
use crate::error::{CloseCause, Error, Result};

/// What a connection knows about its SASL session.
#[derive(Debug, Default)]
pub(crate) struct SaslState {
    mechanism: OnceLock<&'static str>,
    session_lifetime_ms: AtomicI64,
    reauthentications: AtomicU64,
}

/// The dialer's SASL settings a connection needs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SaslOptions {
    /// Re-authenticate at least this often, whatever lifetime the broker grants.
    pub(crate) max_reauth_interval: Option<Duration>,
    /// Highest SaslHandshake version to use (0: raw tokens).
    pub(crate) handshake_max_version: Option<i16>,
}

/// Re-authenticate at this fraction of the session lifetime the broker granted (KIP-368 lets the
/// client choose; Java picks 85–95 %).
const REAUTH_FRACTION: f64 = 0.85;

impl Conn {
    /// The SASL mechanism this connection authenticated with, `None` without SASL.
    pub fn sasl_mechanism(&self) -> Option<&'static str> {
        self.inner.sasl.mechanism.get().copied()
    }

    /// The session lifetime the broker granted at the last (re-)authentication (KIP-368
    /// `session_lifetime_ms`); `None` when the broker set no limit or there is no SASL.
    pub fn sasl_session_lifetime(&self) -> Option<Duration> {
        let ms = self.inner.sasl.session_lifetime_ms.load(Ordering::Relaxed);
        u64::try_from(ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis)
    }

    /// How many KIP-368 re-authentications have succeeded on this connection.
    pub fn sasl_reauthentications(&self) -> u64 {
        self.inner.sasl.reauthentications.load(Ordering::Relaxed)
    }

    /// Runs one SASL exchange with `mech`: SaslHandshake at the best version both sides have
    /// (at most `handshake_max_version`), then the mechanism's messages in SaslAuthenticate requests (handshake v1) or as raw
    /// size-prefixed frames (handshake v0). Returns the session lifetime the broker granted, in
    /// ms (0: no limit).
    ///
    /// Errors: [`Error::Sasl`] with `UNSUPPORTED_SASL_MECHANISM` (the message lists the mechanisms
    /// the broker named), `SASL_AUTHENTICATION_FAILED`, `ILLEGAL_SASL_STATE`, or the mechanism's
    /// error (the code is `SASL_AUTHENTICATION_FAILED` when the server refused inside the
    /// mechanism's messages, `None` e.g. for a server signature that does not verify); an
    /// [`Error::Sasl`] without code when the broker closes the connection in answer to
    /// SaslHandshake; the errors of [`Conn::request`].
    async fn sasl_exchange(
        &self,
        mech: &dyn Mechanism,
        handshake_max_version: Option<i16>,
    ) -> Result<i64> {
        let addr = self.addr();
        let name = mech.name();
        let hs_version = self.sasl_handshake(name, handshake_max_version).await?;
        let host = crate::tls::host_of(addr);
        let port = addr
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or(0);
        let mech_err = |e| mechanism_error(addr, name, e);
        let mut session = mech
            .start(&SaslContext::new(host, port))
            .map_err(mech_err)?;
        let auth_version = if hs_version == 0 {
            None
        } else {
            Some(self.version_for::<SaslAuthenticateRequest>(None)?)
        };
        let mut challenge = Bytes::new();
        let mut lifetime = 0;
        loop {
            let step = session.step(&challenge).map_err(mech_err)?;
            let msg = match step {
                Step::Continue(msg) => msg,
                Step::Done => break,
                _ => {
                    return Err(sasl_error(
                        addr,
                        name,
                        None,
                        "the mechanism returned an unknown step".into(),
                    ));
                }
            };
            let (answer, granted) = self.sasl_send(name, auth_version, msg).await?;
            challenge = answer;
            lifetime = granted.unwrap_or(lifetime);
        }
        tracing::debug!(addr = %addr, mechanism = name, session_lifetime_ms = lifetime, "SASL authenticated");
        Ok(lifetime)
    }

    /// SaslHandshake for mechanism `name` at the best version both sides have (at most
    /// `max_version`); returns that version (0: the mechanism's messages go as raw frames).
    async fn sasl_handshake(&self, name: &str, max_version: Option<i16>) -> Result<i16> {
        let addr = self.addr();
        let version = self.version_for::<SaslHandshakeRequest>(max_version)?;
        let hs = SaslHandshakeRequest::default().with_mechanism(name.to_owned());
        let resp = match self.request_at(&hs, version, Duration::ZERO).await {
            Ok(r) => r,
            // Some brokers (tansu) close the connection instead of answering
            // UNSUPPORTED_SASL_MECHANISM.
            Err(Error::ConnectionClosed {
                cause: CloseCause::Eof,
                ..
            }) => {
                return Err(sasl_error(
                    addr,
                    name,
                    None,
                    format!(
                        "the broker closed the connection in answer to SaslHandshake: \
                         {name} is probably not enabled on this listener"
                    ),
                ));
            }
            Err(e) => return Err(e),
        };
        let code = resp.error_code;
        if !code.is_ok() {
            return Err(sasl_error(
                addr,
                name,
                Some(code),
                format!("mechanisms in the broker's answer: {:?}", resp.mechanisms),
            ));
        }
        Ok(version)
    }

    /// Sends one message of the mechanism: a raw size-prefixed frame (`auth_version` `None`,
    /// handshake v0) or a SaslAuthenticate request. Returns the server's challenge and, from
    /// SaslAuthenticate, the session lifetime it granted in ms.
    async fn sasl_send(
        &self,
        name: &str,
        auth_version: Option<i16>,
        msg: Vec<u8>,
    ) -> Result<(Bytes, Option<i64>)> {
        let Some(v) = auth_version else {
            let challenge = self
                .core
                .call_raw("SaslAuthenticate", self.inner.request_timeout, &msg)
                .await?;
            return Ok((challenge, None));
        };
        let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(msg));
        let resp = self.request_at(&req, v, Duration::ZERO).await?;
        let code = resp.error_code;
        if !code.is_ok() {
            return Err(sasl_error(
                self.addr(),
                name,
                Some(code),
                resp.error_message.unwrap_or_else(|| code.to_string()),
            ));
        }
        Ok((resp.auth_bytes, Some(resp.session_lifetime_ms.max(0))))
    }

    /// Authenticates a fresh connection and, when the broker grants a limited session (or
    /// `max_reauth_interval` is set), starts the KIP-368 re-authentication task.
    pub(crate) async fn authenticate(
        &self,
        mech: Arc<dyn Mechanism>,
        options: SaslOptions,
    ) -> Result<()> {
        let max_reauth_interval = options.max_reauth_interval;
        let lifetime = self
            .sasl_exchange(mech.as_ref(), options.handshake_max_version)
            .await?;
        let _ = self.inner.sasl.mechanism.set(mech.name());
        self.inner
            .sasl
            .session_lifetime_ms
            .store(lifetime, Ordering::Relaxed);
        // Re-authentication needs SaslHandshake v1+: raw v0 tokens cannot share the connection.
        let framed = self.version_for::<SaslHandshakeRequest>(options.handshake_max_version)? >= 1;
        if framed && reauth_delay(lifetime, max_reauth_interval).is_some() {
            let weak = WeakConn {
                core: self.core.downgrade(),
                inner: Arc::downgrade(&self.inner),
            };
            let closed = self.core.closed_signal();
            tokio::spawn(reauth_loop(
                weak,
                closed,
                mech,
                lifetime,
                max_reauth_interval,
            ));
        }
        Ok(())
    }
}

/// When to re-authenticate: at 85 % of the lifetime, or at the cap, whichever is sooner.
fn reauth_delay(lifetime_ms: i64, cap: Option<Duration>) -> Option<Duration> {
    let from_broker = (lifetime_ms > 0).then(|| {
        // Lifetimes are far below 2^52 ms, so the f64 round trip is exact enough.
        Duration::from_millis((lifetime_ms as f64 * REAUTH_FRACTION) as u64)
    });
    match (from_broker, cap) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

struct WeakConn {
    core: WeakCore,
    inner: Weak<ConnInner>,
}

impl WeakConn {
    fn upgrade(&self) -> Option<Conn> {
        Some(Conn {
            core: self.core.upgrade()?,
            inner: self.inner.upgrade()?,
        })
    }
}

async fn reauth_loop(
    weak: WeakConn,
    mut closed: tokio::sync::watch::Receiver<bool>,
    mech: Arc<dyn Mechanism>,
    mut lifetime: i64,
    cap: Option<Duration>,
) {
    while let Some(delay) = reauth_delay(lifetime, cap) {
        tokio::select! {
            _ = closed.wait_for(|c| *c) => return,
            _ = tokio::time::sleep(delay) => {}
        }
        let Some(conn) = weak.upgrade() else { return };
        if conn.is_closed() {
            return;
        }
        // No new request may go out between the SaslHandshake and the last SaslAuthenticate
        // (KIP-368; Apache Kafka closes a connection that does it): hold them back for the
        // exchange. Requests already sent still get their answers meanwhile.
        let wait = conn.inner.request_timeout;
        let Ok(held) = tokio::time::timeout(wait, conn.core.hold_requests()).await else {
            conn.core.fail(CloseCause::ReauthenticationFailed(format!(
                "requests kept the connection busy for {wait:?}"
            )));
            return;
        };
        let exchanged = conn.sasl_exchange(mech.as_ref(), None).await;
        drop(held);
        match exchanged {
            Ok(l) => {
                lifetime = l;
                conn.inner
                    .sasl
                    .session_lifetime_ms
                    .store(l, Ordering::Relaxed);
                conn.inner
                    .sasl
                    .reauthentications
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(addr = %conn.addr(), session_lifetime_ms = l, "SASL re-authenticated");
            }
            Err(e) => {
                tracing::warn!(addr = %conn.addr(), error = %e, "SASL re-authentication failed; closing");
                conn.core
                    .fail(CloseCause::ReauthenticationFailed(e.to_string()));
                return;
            }
        }
    }
}

/// A SASL failure on the connection to `addr` with `mechanism`.
fn sasl_error(addr: &str, mechanism: &str, code: Option<ErrorCode>, message: String) -> Error {
    Error::Sasl {
        addr: addr.to_owned(),
        mechanism: mechanism.to_owned(),
        code,
        message,
    }
}

/// The mechanism's own error as a SASL failure. The server refusing the exchange inside the
/// mechanism's own messages (SCRAM `e=`, OAUTHBEARER error JSON) is an authentication failure
/// like the broker's error code.
fn mechanism_error(addr: &str, mechanism: &str, e: kafkit_sasl::SaslError) -> Error {
    let code = matches!(e, kafkit_sasl::SaslError::AuthenticationFailed { .. })
        .then_some(ErrorCode::SASL_AUTHENTICATION_FAILED);
    sasl_error(addr, mechanism, code, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reauth_delay_takes_the_sooner_of_lifetime_and_cap() {
        assert_eq!(reauth_delay(0, None), None);
        assert_eq!(
            reauth_delay(60_000, None),
            Some(Duration::from_millis(51_000))
        );
        assert_eq!(
            reauth_delay(60_000, Some(Duration::from_millis(500))),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            reauth_delay(0, Some(Duration::from_millis(500))),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            reauth_delay(1_000, Some(Duration::from_secs(5))),
            Some(Duration::from_millis(850))
        );
    }
}
