//! Delegation tokens (KIP-48): CreateDelegationToken (key 38), RenewDelegationToken (39),
//! ExpireDelegationToken (40) and DescribeDelegationToken (41).
//!
//! A broker only serves them on an authenticated connection (SASL or TLS with a client
//! certificate) that was not itself authenticated with a delegation token, and only when the
//! cluster has `delegation.token.secret.key` set; otherwise the answer is
//! `DELEGATION_TOKEN_REQUEST_NOT_ALLOWED` or `DELEGATION_TOKEN_AUTH_DISABLED`. Any broker
//! answers (KRaft brokers forward the changes to the controller).

use std::time::Duration;

use bytes::Bytes;
use kafkit_protocol::messages::{
    CreateDelegationTokenRequest, CreateDelegationTokenResponse, DescribeDelegationTokenRequest,
    DescribeDelegationTokenResponse, ExpireDelegationTokenRequest, RenewDelegationTokenRequest,
    create_delegation_token_request, describe_delegation_token_request,
};

use super::Client;
use crate::error::{Error, Result};
use crate::ops::code_result;

/// A principal as Kafka names it (Java `KafkaPrincipal`): a type, `User` for every built-in
/// authenticator, and a name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct KafkaPrincipal {
    /// The principal type, e.g. `User`.
    pub principal_type: String,
    /// The principal name, e.g. the SASL user name.
    pub name: String,
}

impl KafkaPrincipal {
    /// The principal `User:<name>`.
    pub fn user(name: impl Into<String>) -> KafkaPrincipal {
        KafkaPrincipal {
            principal_type: "User".to_owned(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for KafkaPrincipal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

/// A delegation token (Java `DelegationToken` with its `TokenInformation`).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DelegationToken {
    /// The token id: the user name a client authenticates with (SCRAM, `tokenauth=true`).
    pub token_id: String,
    /// The HMAC of the token: the password a client authenticates with, and the key of renew
    /// and expire. Secret: `Debug` does not print it.
    pub hmac: Bytes,
    /// The token's owner.
    pub owner: KafkaPrincipal,
    /// Who asked for the token (KIP-373, v3+; the owner on older brokers).
    pub token_requester: KafkaPrincipal,
    /// The principals that may renew the token besides its owner.
    pub renewers: Vec<KafkaPrincipal>,
    /// When the token was issued, in ms since the Unix epoch.
    pub issue_timestamp_ms: i64,
    /// When the token expires unless renewed, in ms since the Unix epoch.
    pub expiry_timestamp_ms: i64,
    /// The latest expiry any renewal can give, in ms since the Unix epoch.
    pub max_timestamp_ms: i64,
}

impl std::fmt::Debug for DelegationToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegationToken")
            .field("token_id", &self.token_id)
            .field("hmac", &"<redacted>")
            .field("owner", &self.owner)
            .field("token_requester", &self.token_requester)
            .field("renewers", &self.renewers)
            .field("issue_timestamp_ms", &self.issue_timestamp_ms)
            .field("expiry_timestamp_ms", &self.expiry_timestamp_ms)
            .field("max_timestamp_ms", &self.max_timestamp_ms)
            .finish()
    }
}

/// What [`Client::create_delegation_token`] asks for (Java `CreateDelegationTokenOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CreateDelegationTokenOptions {
    /// The principals that may renew the token besides its owner.
    pub renewers: Vec<KafkaPrincipal>,
    /// The token's maximum lifetime; `None`: the broker's `delegation.token.max.lifetime.ms`
    /// (7 days by default), which also caps a longer value. Sent in whole ms.
    pub max_lifetime: Option<Duration>,
    /// The owner, when the caller creates a token for another principal (KIP-373, v3+; needs
    /// the `CreateTokens` ACL on that user); `None`: the caller.
    pub owner: Option<KafkaPrincipal>,
}

impl CreateDelegationTokenOptions {
    /// No renewers, the broker's maximum lifetime, owned by the caller.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`CreateDelegationTokenOptions::renewers`].
    pub fn renewers(mut self, renewers: impl IntoIterator<Item = KafkaPrincipal>) -> Self {
        self.renewers = renewers.into_iter().collect();
        self
    }

    /// Sets [`CreateDelegationTokenOptions::max_lifetime`].
    pub fn max_lifetime(mut self, max_lifetime: Duration) -> Self {
        self.max_lifetime = Some(max_lifetime);
        self
    }

    /// Sets [`CreateDelegationTokenOptions::owner`].
    pub fn owner(mut self, owner: KafkaPrincipal) -> Self {
        self.owner = Some(owner);
        self
    }
}

/// A period as the `i64` ms of the token requests: `None` is -1 (the broker's default).
fn period_ms(period: Option<Duration>) -> i64 {
    period.map_or(-1, crate::time::wire_ms_i64)
}

/// The CreateDelegationToken request for `options`.
pub(crate) fn create_token_request(
    options: &CreateDelegationTokenOptions,
) -> CreateDelegationTokenRequest {
    CreateDelegationTokenRequest::default()
        .with_owner_principal_type(options.owner.as_ref().map(|o| o.principal_type.clone()))
        .with_owner_principal_name(options.owner.as_ref().map(|o| o.name.clone()))
        .with_renewers(
            options
                .renewers
                .iter()
                .map(|r| {
                    create_delegation_token_request::CreatableRenewers::default()
                        .with_principal_type(r.principal_type.clone())
                        .with_principal_name(r.name.clone())
                })
                .collect(),
        )
        .with_max_lifetime_ms(period_ms(options.max_lifetime))
}

/// The token of a CreateDelegationToken answer, or its error.
pub(crate) fn created_token(
    options: &CreateDelegationTokenOptions,
    resp: CreateDelegationTokenResponse,
) -> Result<DelegationToken> {
    code_result("CreateDelegationToken", resp.error_code, None)?;
    let owner = KafkaPrincipal {
        principal_type: resp.principal_type,
        name: resp.principal_name,
    };
    let token_requester = if resp.token_requester_principal_name.is_empty() {
        owner.clone()
    } else {
        KafkaPrincipal {
            principal_type: resp.token_requester_principal_type,
            name: resp.token_requester_principal_name,
        }
    };
    Ok(DelegationToken {
        token_id: resp.token_id,
        hmac: resp.hmac,
        owner,
        token_requester,
        renewers: options.renewers.clone(),
        issue_timestamp_ms: resp.issue_timestamp_ms,
        expiry_timestamp_ms: resp.expiry_timestamp_ms,
        max_timestamp_ms: resp.max_timestamp_ms,
    })
}

/// The DescribeDelegationToken request: `None` for every token the caller may see.
pub(crate) fn describe_tokens_request(
    owners: Option<&[KafkaPrincipal]>,
) -> DescribeDelegationTokenRequest {
    DescribeDelegationTokenRequest::default().with_owners(owners.map(|os| {
        os.iter()
            .map(|o| {
                describe_delegation_token_request::DescribeDelegationTokenOwner::default()
                    .with_principal_type(o.principal_type.clone())
                    .with_principal_name(o.name.clone())
            })
            .collect()
    }))
}

/// The tokens of a DescribeDelegationToken answer, or its error.
pub(crate) fn described_tokens(
    resp: DescribeDelegationTokenResponse,
) -> Result<Vec<DelegationToken>> {
    code_result("DescribeDelegationToken", resp.error_code, None)?;
    Ok(resp
        .tokens
        .into_iter()
        .map(|t| {
            let owner = KafkaPrincipal {
                principal_type: t.principal_type,
                name: t.principal_name,
            };
            let token_requester = if t.token_requester_principal_name.is_empty() {
                owner.clone()
            } else {
                KafkaPrincipal {
                    principal_type: t.token_requester_principal_type,
                    name: t.token_requester_principal_name,
                }
            };
            DelegationToken {
                token_id: t.token_id,
                hmac: t.hmac,
                owner,
                token_requester,
                renewers: t
                    .renewers
                    .into_iter()
                    .map(|r| KafkaPrincipal {
                        principal_type: r.principal_type,
                        name: r.principal_name,
                    })
                    .collect(),
                issue_timestamp_ms: t.issue_timestamp,
                expiry_timestamp_ms: t.expiry_timestamp,
                max_timestamp_ms: t.max_timestamp,
            }
        })
        .collect())
}

/// [`Error::InvalidArgument`] for an empty HMAC (nothing sent).
fn check_hmac(hmac: &[u8]) -> Result<()> {
    if hmac.is_empty() {
        return Err(Error::InvalidArgument("empty delegation token HMAC".into()));
    }
    Ok(())
}

impl Client {
    /// Creates a delegation token owned by the caller (or [`CreateDelegationTokenOptions::owner`])
    /// (CreateDelegationToken, KIP-48; Java `Admin.createDelegationToken`). A client then
    /// authenticates with SCRAM as the token id, the HMAC as the password and the
    /// `tokenauth=true` extension.
    ///
    /// # Errors
    ///
    /// [`Error::Broker`] with the broker's code: `DELEGATION_TOKEN_REQUEST_NOT_ALLOWED` on an
    /// unauthenticated (PLAINTEXT) connection or one authenticated with a token,
    /// `DELEGATION_TOKEN_AUTH_DISABLED` without `delegation.token.secret.key`,
    /// `INVALID_PRINCIPAL_TYPE`, `DELEGATION_TOKEN_OWNER_MISMATCH`...; [`Error::Encode`] for an
    /// owner a broker below v3 cannot carry; and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future abandons the operation, but a request already
    /// sent may still create the token (its HMAC is then lost; it expires on its own). The
    /// pooled connections stay usable.
    pub async fn create_delegation_token(
        &self,
        options: &CreateDelegationTokenOptions,
    ) -> Result<DelegationToken> {
        let resp = self
            .transport()
            .round_trip(create_token_request(options))
            .await?;
        created_token(options, resp)
    }

    /// Extends a token's expiry by `renew_period` (`None`: the broker's
    /// `delegation.token.expiry.time.ms`, 24 h by default), never past its max timestamp
    /// (RenewDelegationToken, KIP-48). The caller must be the owner or a renewer.
    ///
    /// Returns the new expiry, in ms since the Unix epoch.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty HMAC (nothing sent); [`Error::Broker`] with the
    /// broker's code (`DELEGATION_TOKEN_NOT_FOUND`, `DELEGATION_TOKEN_EXPIRED`,
    /// `DELEGATION_TOKEN_OWNER_MISMATCH`, `DELEGATION_TOKEN_REQUEST_NOT_ALLOWED`...); and the
    /// transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a request already sent may still renew the token; renewing again is
    /// harmless.
    pub async fn renew_delegation_token(
        &self,
        hmac: &[u8],
        renew_period: Option<Duration>,
    ) -> Result<i64> {
        check_hmac(hmac)?;
        let req = RenewDelegationTokenRequest::default()
            .with_hmac(Bytes::copy_from_slice(hmac))
            .with_renew_period_ms(period_ms(renew_period));
        let resp = self.transport().round_trip(req).await?;
        code_result("RenewDelegationToken", resp.error_code, None)?;
        Ok(resp.expiry_timestamp_ms)
    }

    /// Sets a token to expire `expiry_period` from now (`None` or a zero period: at once, the
    /// token is deleted; Java's default of -1 also expires at once)
    /// (ExpireDelegationToken, KIP-48). The caller must be the owner or a renewer.
    ///
    /// Returns the new expiry, in ms since the Unix epoch.
    ///
    /// # Errors
    ///
    /// As [`Client::renew_delegation_token`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a request already sent may still expire the token.
    pub async fn expire_delegation_token(
        &self,
        hmac: &[u8],
        expiry_period: Option<Duration>,
    ) -> Result<i64> {
        check_hmac(hmac)?;
        let req = ExpireDelegationTokenRequest::default()
            .with_hmac(Bytes::copy_from_slice(hmac))
            .with_expiry_time_period_ms(period_ms(expiry_period));
        let resp = self.transport().round_trip(req).await?;
        code_result("ExpireDelegationToken", resp.error_code, None)?;
        Ok(resp.expiry_timestamp_ms)
    }

    /// Describes the delegation tokens of `owners` (`None`: every token the caller may see:
    /// its own, those it may renew, and those its `Describe` ACL on the token allows)
    /// (DescribeDelegationToken, KIP-48).
    ///
    /// # Errors
    ///
    /// [`Error::Broker`] with the broker's code (`DELEGATION_TOKEN_REQUEST_NOT_ALLOWED`,
    /// `DELEGATION_TOKEN_AUTH_DISABLED`...), and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_delegation_token(
        &self,
        owners: Option<&[KafkaPrincipal]>,
    ) -> Result<Vec<DelegationToken>> {
        let resp = self
            .transport()
            .round_trip(describe_tokens_request(owners))
            .await?;
        described_tokens(resp)
    }
}

#[cfg(test)]
mod tests {
    use kafkit_protocol::ErrorCode;
    use kafkit_protocol::messages::describe_delegation_token_response;

    use super::*;

    #[test]
    fn create_request_and_answer() {
        let opts = CreateDelegationTokenOptions::new()
            .renewers([KafkaPrincipal::user("bob")])
            .max_lifetime(Duration::from_secs(60))
            .owner(KafkaPrincipal::user("alice"));
        let req = create_token_request(&opts);
        assert_eq!(req.max_lifetime_ms, 60_000);
        assert_eq!(req.owner_principal_name.as_deref(), Some("alice"));
        assert_eq!(req.renewers[0].principal_name, "bob");
        assert_eq!(
            create_token_request(&CreateDelegationTokenOptions::new()).max_lifetime_ms,
            -1
        );

        let mut resp = CreateDelegationTokenResponse::default();
        resp.principal_type = "User".into();
        resp.principal_name = "alice".into();
        resp.token_id = "t1".into();
        resp.hmac = Bytes::from_static(b"secret");
        let t = created_token(&opts, resp).unwrap();
        assert_eq!(t.owner, t.token_requester);
        assert_eq!(t.renewers, vec![KafkaPrincipal::user("bob")]);
        assert!(!format!("{t:?}").contains("secret"));

        let mut resp = CreateDelegationTokenResponse::default();
        resp.error_code = ErrorCode::DELEGATION_TOKEN_REQUEST_NOT_ALLOWED;
        let e = created_token(&opts, resp).unwrap_err();
        assert_eq!(
            e.error_code(),
            Some(ErrorCode::DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
        );
    }

    #[test]
    fn describe_request_and_answer() {
        assert!(describe_tokens_request(None).owners.is_none());
        let req = describe_tokens_request(Some(&[KafkaPrincipal::user("a")]));
        assert_eq!(req.owners.unwrap()[0].principal_type, "User");

        let mut t = describe_delegation_token_response::DescribedDelegationToken::default();
        t.principal_type = "User".into();
        t.principal_name = "a".into();
        t.token_requester_principal_type = "User".into();
        t.token_requester_principal_name = "admin".into();
        t.renewers.push(
            describe_delegation_token_response::DescribedDelegationTokenRenewer::default()
                .with_principal_type("User".into())
                .with_principal_name("b".into()),
        );
        let mut resp = DescribeDelegationTokenResponse::default();
        resp.tokens.push(t);
        let got = described_tokens(resp).unwrap();
        assert_eq!(got[0].token_requester, KafkaPrincipal::user("admin"));
        assert_eq!(got[0].renewers, vec![KafkaPrincipal::user("b")]);
        assert_eq!(got[0].owner.to_string(), "User:a");
    }

    #[test]
    fn an_empty_hmac_is_refused_before_sending() {
        assert!(matches!(check_hmac(b""), Err(Error::InvalidArgument(_))));
        assert_eq!(period_ms(None), -1);
        assert_eq!(period_ms(Some(Duration::from_millis(5))), 5);
    }
}
