//! SCRAM credential operations: describe and alter user SCRAM credentials
//! (DescribeUserScramCredentials key 50, AlterUserScramCredentials key 51; KIP-554).
//!
//! An upsertion never sends the password: the client draws a random salt and sends
//! `SaltedPassword = Hi(password, salt, iterations)` (RFC 5802 §3, PBKDF2-HMAC), computed by
//! [`kafkit_sasl::ScramHash::salted_password`], which is what the broker stores.

use bytes::Bytes;
use kafkit_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
    alter_user_scram_credentials_request, describe_user_scram_credentials_request,
};
use kafkit_sasl::{ScramHash, Secret};

use super::Client;
use crate::error::{Error, Result};
use crate::ops::{ResourceResult, check_distinct, code_result, in_order, wire_enum};

/// Fewest iterations Kafka brokers accept for a SCRAM credential.
pub const SCRAM_MIN_ITERATIONS: i32 = 4096;
/// Most iterations Kafka brokers accept for a SCRAM credential.
pub const SCRAM_MAX_ITERATIONS: i32 = 16384;
/// Length of the random salt drawn for each upsertion, in bytes.
pub const SCRAM_SALT_LEN: usize = 32;

wire_enum! {
    /// A SCRAM mechanism (KIP-554 wire values).
    pub enum ScramMechanism: i8 {
        /// A mechanism this library or the broker does not know.
        Unknown = 0,
        /// SCRAM-SHA-256 (RFC 7677).
        ScramSha256 = 1,
        /// SCRAM-SHA-512.
        ScramSha512 = 2,
    }
}

impl ScramMechanism {
    /// The hash of the mechanism, `None` for `Unknown`.
    pub fn hash(self) -> Option<ScramHash> {
        match self {
            ScramMechanism::ScramSha256 => Some(ScramHash::Sha256),
            ScramMechanism::ScramSha512 => Some(ScramHash::Sha512),
            ScramMechanism::Unknown => None,
        }
    }
}

/// A SCRAM credential a user has: its mechanism and iteration count (never the secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScramCredentialInfo {
    /// The mechanism.
    pub mechanism: ScramMechanism,
    /// The PBKDF2 iteration count.
    pub iterations: i32,
}

/// A change of one user's SCRAM credentials for [`Client::alter_user_scram_credentials`].
///
/// `Debug` never shows the password.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum UserScramCredentialAlteration {
    /// Creates or replaces the user's credential for `mechanism`.
    Upsertion {
        /// The user name.
        user: String,
        /// The mechanism.
        mechanism: ScramMechanism,
        /// PBKDF2 iterations, within [`SCRAM_MIN_ITERATIONS`]..=[`SCRAM_MAX_ITERATIONS`].
        iterations: i32,
        /// The password.
        password: Secret,
        /// The salt; `None` draws [`SCRAM_SALT_LEN`] random bytes.
        salt: Option<Vec<u8>>,
    },
    /// Removes the user's credential for `mechanism`.
    Deletion {
        /// The user name.
        user: String,
        /// The mechanism.
        mechanism: ScramMechanism,
    },
}

impl UserScramCredentialAlteration {
    /// Creates or replaces `user`'s `mechanism` credential with `password`, salted with random
    /// bytes and `iterations` PBKDF2 rounds.
    pub fn upsertion(
        user: impl Into<String>,
        mechanism: ScramMechanism,
        iterations: i32,
        password: impl Into<Secret>,
    ) -> Self {
        UserScramCredentialAlteration::Upsertion {
            user: user.into(),
            mechanism,
            iterations,
            password: password.into(),
            salt: None,
        }
    }

    /// Removes `user`'s `mechanism` credential.
    pub fn deletion(user: impl Into<String>, mechanism: ScramMechanism) -> Self {
        UserScramCredentialAlteration::Deletion {
            user: user.into(),
            mechanism,
        }
    }

    /// The user this alteration is about.
    pub fn user(&self) -> &str {
        match self {
            UserScramCredentialAlteration::Upsertion { user, .. }
            | UserScramCredentialAlteration::Deletion { user, .. } => user,
        }
    }
}

impl Client {
    /// The SCRAM credentials of `users` (`None`: every user that has one)
    /// (DescribeUserScramCredentials API).
    ///
    /// Returns one `(user, result)` per user, in the given order when users are named (a user
    /// without credentials is `Err` with `RESOURCE_NOT_FOUND`), else in the broker's order.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a user given twice,
    /// [`Error::Broker`] with a top-level code (e.g. `CLUSTER_AUTHORIZATION_FAILED`),
    /// [`Error::UnsupportedVersion`] naming DescribeUserScramCredentials, and the transport's
    /// errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_user_scram_credentials(
        &self,
        users: Option<&[&str]>,
    ) -> Result<Vec<(String, ResourceResult<Vec<ScramCredentialInfo>>)>> {
        let names: Option<Vec<String>> = users.map(|u| u.iter().map(|n| (*n).to_owned()).collect());
        if let Some(n) = &names {
            check_distinct("user", n)?;
        }
        let req =
            DescribeUserScramCredentialsRequest::default().with_users(names.as_ref().map(|n| {
                n.iter()
                    .map(|name| {
                        describe_user_scram_credentials_request::UserName::default()
                            .with_name(name.clone())
                    })
                    .collect()
            }));
        let resp = self.transport().round_trip(req).await?;
        describe_user_scram_credentials_result(names, resp)
    }

    /// Creates, replaces or removes SCRAM credentials (AlterUserScramCredentials API).
    /// Upsertions send a salted password computed here, never the password.
    ///
    /// Returns one `(user, result)` per distinct user, in the order users first appear (the
    /// broker answers per user; e.g. `RESOURCE_NOT_FOUND` when deleting a credential that does
    /// not exist, `DUPLICATE_RESOURCE` when one user has two alterations: Kafka's KRaft controller
    /// refuses any two in one request, whatever their mechanisms).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list, an `Unknown` mechanism or an
    /// iteration count outside Kafka's range (nothing is sent), [`Error::UnsupportedVersion`]
    /// naming AlterUserScramCredentials, and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn alter_user_scram_credentials(
        &self,
        alterations: &[UserScramCredentialAlteration],
    ) -> Result<Vec<(String, ResourceResult<()>)>> {
        if alterations.is_empty() {
            return Err(Error::InvalidArgument(
                "no SCRAM credential alterations".into(),
            ));
        }
        let owned = alterations.to_vec();
        // PBKDF2 is deliberately slow: keep it off the async worker threads.
        let req = tokio::task::spawn_blocking(move || alter_scram_request_for(&owned))
            .await
            .map_err(|e| Error::Protocol(format!("salting task failed: {e}")))??;
        let mut users: Vec<String> = Vec::new();
        for a in alterations {
            if !users.iter().any(|u| u == a.user()) {
                users.push(a.user().to_owned());
            }
        }
        let resp = self.transport().round_trip(req).await?;
        Ok(alter_scram_results(users, resp))
    }
}

/// The AlterUserScramCredentials request: salts each upsertion's password.
pub(crate) fn alter_scram_request_for(
    alterations: &[UserScramCredentialAlteration],
) -> Result<AlterUserScramCredentialsRequest> {
    let mut req = AlterUserScramCredentialsRequest::default();
    for a in alterations {
        match a {
            UserScramCredentialAlteration::Deletion { user, mechanism } => {
                if mechanism.hash().is_none() {
                    return Err(Error::InvalidArgument(format!(
                        "unknown SCRAM mechanism for user {user}"
                    )));
                }
                let d = alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                    .with_name(user.clone())
                    .with_mechanism(mechanism.code());
                req.deletions.push(d);
            }
            UserScramCredentialAlteration::Upsertion {
                user,
                mechanism,
                iterations,
                password,
                salt,
            } => {
                let hash = mechanism.hash().ok_or_else(|| {
                    Error::InvalidArgument(format!("unknown SCRAM mechanism for user {user}"))
                })?;
                if !(SCRAM_MIN_ITERATIONS..=SCRAM_MAX_ITERATIONS).contains(iterations) {
                    return Err(Error::InvalidArgument(format!(
                        "{iterations} SCRAM iterations for user {user}: Kafka accepts \
                         {SCRAM_MIN_ITERATIONS}..={SCRAM_MAX_ITERATIONS}"
                    )));
                }
                let salt = match salt {
                    Some(s) if !s.is_empty() => s.clone(),
                    Some(_) => {
                        return Err(Error::InvalidArgument(format!(
                            "empty SCRAM salt for user {user}"
                        )));
                    }
                    None => {
                        let mut s = vec![0u8; SCRAM_SALT_LEN];
                        getrandom::fill(&mut s).map_err(|e| {
                            Error::Io(std::io::Error::other(format!(
                                "no random salt from the operating system: {e}"
                            )))
                        })?;
                        s
                    }
                };
                // The range check above makes the cast lossless.
                let salted =
                    hash.salted_password(password.expose().as_bytes(), &salt, *iterations as u32);
                let u = alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                    .with_name(user.clone())
                    .with_mechanism(mechanism.code())
                    .with_iterations(*iterations)
                    .with_salt(Bytes::from(salt))
                    .with_salted_password(Bytes::from(salted));
                req.upsertions.push(u);
            }
        }
    }
    Ok(req)
}

/// Per-user results of an AlterUserScramCredentials response in the order of `users`.
pub(crate) fn alter_scram_results(
    users: Vec<String>,
    resp: AlterUserScramCredentialsResponse,
) -> Vec<(String, ResourceResult<()>)> {
    let answers = resp.results.into_iter().map(|r| {
        (
            r.user,
            code_result("AlterUserScramCredentials", r.error_code, r.error_message),
        )
    });
    in_order("AlterUserScramCredentials", users, answers)
}

/// Per-user credentials of a DescribeUserScramCredentials response: in the order of `users`
/// when given, else the broker's.
#[allow(clippy::type_complexity)]
pub(crate) fn describe_user_scram_credentials_result(
    users: Option<Vec<String>>,
    resp: DescribeUserScramCredentialsResponse,
) -> Result<Vec<(String, ResourceResult<Vec<ScramCredentialInfo>>)>> {
    code_result(
        "DescribeUserScramCredentials",
        resp.error_code,
        resp.error_message,
    )?;
    let answers = resp.results.into_iter().map(|r| {
        let result = code_result(
            "DescribeUserScramCredentials",
            r.error_code,
            r.error_message,
        )
        .map(|()| {
            r.credential_infos
                .into_iter()
                .map(|c| ScramCredentialInfo {
                    mechanism: ScramMechanism::from_code(c.mechanism)
                        .unwrap_or(ScramMechanism::Unknown),
                    iterations: c.iterations,
                })
                .collect()
        });
        (r.user, result)
    });
    Ok(match users {
        Some(users) => in_order("DescribeUserScramCredentials", users, answers),
        None => answers.collect(),
    })
}

#[cfg(test)]
mod tests {
    use kafkit_protocol::ErrorCode;
    use kafkit_protocol::messages::{
        alter_user_scram_credentials_response, describe_user_scram_credentials_response,
    };

    use super::*;

    #[test]
    fn upsertion_sends_the_salted_password_never_the_password() {
        let mut up = UserScramCredentialAlteration::upsertion(
            "alice",
            ScramMechanism::ScramSha256,
            4096,
            "pencil",
        );
        if let UserScramCredentialAlteration::Upsertion { salt, .. } = &mut up {
            *salt = Some(b"salt".to_vec());
        }
        assert!(!format!("{up:?}").contains("pencil"));
        let req = alter_scram_request_for(&[
            up,
            UserScramCredentialAlteration::deletion("bob", ScramMechanism::ScramSha512),
        ])
        .unwrap();
        let u = &req.upsertions[0];
        assert_eq!((u.mechanism, u.iterations), (1, 4096));
        assert_eq!(&u.salt[..], b"salt");
        // PBKDF2-HMAC-SHA256("pencil", "salt", 4096, 32), computed independently (Python
        // hashlib.pbkdf2_hmac).
        assert_eq!(
            hex(&u.salted_password),
            "0997564f292923271312698037b6b0a06a8be7fbd912480847c5a1ace4b8d1c7"
        );
        assert_eq!(
            (req.deletions[0].name.as_str(), req.deletions[0].mechanism),
            ("bob", 2)
        );
    }

    #[test]
    fn random_salts_differ_and_bad_input_is_refused() {
        let up = || {
            UserScramCredentialAlteration::upsertion("u", ScramMechanism::ScramSha512, 4096, "p")
        };
        let a = alter_scram_request_for(&[up()]).unwrap();
        let b = alter_scram_request_for(&[up()]).unwrap();
        assert_eq!(a.upsertions[0].salt.len(), SCRAM_SALT_LEN);
        assert_ne!(a.upsertions[0].salt, b.upsertions[0].salt);
        assert_eq!(a.upsertions[0].salted_password.len(), 64);

        for bad in [
            UserScramCredentialAlteration::upsertion("u", ScramMechanism::ScramSha256, 100, "p"),
            UserScramCredentialAlteration::upsertion("u", ScramMechanism::Unknown, 4096, "p"),
            UserScramCredentialAlteration::deletion("u", ScramMechanism::Unknown),
        ] {
            assert!(matches!(
                alter_scram_request_for(&[bad]),
                Err(Error::InvalidArgument(_))
            ));
        }
    }

    #[test]
    fn results_are_per_user() {
        let mut resp = AlterUserScramCredentialsResponse::default();
        for (user, code) in [("b", ErrorCode::RESOURCE_NOT_FOUND), ("a", ErrorCode::NONE)] {
            let mut r =
                alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default();
            r.user = user.into();
            r.error_code = code;
            resp.results.push(r);
        }
        let out = alter_scram_results(vec!["a".into(), "b".into()], resp);
        assert!(out[0].1.is_ok());
        assert_eq!(
            out[1].1.as_ref().unwrap_err().error_code(),
            Some(ErrorCode::RESOURCE_NOT_FOUND)
        );

        let mut resp = DescribeUserScramCredentialsResponse::default();
        let mut r =
            describe_user_scram_credentials_response::DescribeUserScramCredentialsResult::default();
        r.user = "a".into();
        let mut c = describe_user_scram_credentials_response::CredentialInfo::default();
        c.mechanism = 2;
        c.iterations = 8192;
        r.credential_infos.push(c);
        resp.results.push(r);
        let out =
            describe_user_scram_credentials_result(Some(vec!["zed".into(), "a".into()]), resp)
                .unwrap();
        assert!(matches!(out[0].1, Err(Error::Protocol(_))));
        assert_eq!(
            out[1].1.as_ref().unwrap()[0],
            ScramCredentialInfo {
                mechanism: ScramMechanism::ScramSha512,
                iterations: 8192
            }
        );
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
