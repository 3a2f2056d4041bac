//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677; Kafka: KIP-84, delegation tokens KIP-48).
//!
//! Exchange: `step("")` gives client-first (`n,,n=<user>,r=<client nonce>`); `step(server-first)`
//! gives client-final with the client proof; `step(server-final)` checks the server signature
//! and gives [`Step::Done`], or fails with [`SaslError::ServerSignatureMismatch`].

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

use crate::{Mechanism, SaslContext, SaslError, Secret, Session, Step};

/// Fewest PBKDF2 iterations accepted from a server (RFC 7677 §4 and Kafka's own minimum: 4096).
pub const MIN_ITERATIONS: u32 = 4096;
/// Most PBKDF2 iterations accepted from a server, so a hostile server cannot make the client
/// spin for minutes (Kafka brokers allow at most 16384).
pub const MAX_ITERATIONS: u32 = 1_000_000;

/// The hash function of a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScramHash {
    /// SCRAM-SHA-256 (RFC 7677).
    Sha256,
    /// SCRAM-SHA-512 (Kafka KIP-84; same construction with SHA-512).
    Sha512,
    /// SCRAM-SHA-1, only so the RFC 5802 example exchange can be checked in unit tests; Kafka
    /// does not offer it.
    #[cfg(test)]
    Sha1,
}

impl ScramHash {
    /// The mechanism name sent in SaslHandshake.
    pub fn mechanism_name(self) -> &'static str {
        match self {
            ScramHash::Sha256 => "SCRAM-SHA-256",
            ScramHash::Sha512 => "SCRAM-SHA-512",
            #[cfg(test)]
            ScramHash::Sha1 => "SCRAM-SHA-1",
        }
    }

    /// The SaltedPassword of RFC 5802 §3, `Hi(password, salt, iterations)`: PBKDF2 with HMAC of
    /// this hash, one hash long (32 bytes for SHA-256, 64 for SHA-512). This is what a broker
    /// stores for a SCRAM credential, so admin clients send it in AlterUserScramCredentials
    /// upsertions (KIP-554). `password` is the password's UTF-8 bytes, as Kafka uses them.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        self.hi(password, salt, iterations)
    }

    /// Hi(str, salt, i) of RFC 5802 §2.2: PBKDF2 with HMAC of this hash, output one hash long.
    fn hi(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            ScramHash::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
            #[cfg(test)]
            ScramHash::Sha1 => {
                pbkdf2::pbkdf2_hmac_array::<sha1::Sha1, 20>(password, salt, iterations).to_vec()
            }
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
            // HMAC takes keys of any length (RFC 2104 §2), so this cannot fail.
            let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key)
                .expect("HMAC accepts keys of any length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            ScramHash::Sha256 => run::<Hmac<Sha256>>(key, data),
            ScramHash::Sha512 => run::<Hmac<Sha512>>(key, data),
            #[cfg(test)]
            ScramHash::Sha1 => run::<Hmac<sha1::Sha1>>(key, data),
        }
    }

    fn hmac_verify(self, key: &[u8], data: &[u8], tag: &[u8]) -> bool {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], data: &[u8], tag: &[u8]) -> bool {
            let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key)
                .expect("HMAC accepts keys of any length");
            mac.update(data);
            // Constant-time comparison.
            mac.verify_slice(tag).is_ok()
        }
        match self {
            ScramHash::Sha256 => run::<Hmac<Sha256>>(key, data, tag),
            ScramHash::Sha512 => run::<Hmac<Sha512>>(key, data, tag),
            #[cfg(test)]
            ScramHash::Sha1 => run::<Hmac<sha1::Sha1>>(key, data, tag),
        }
    }

    fn h(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
            #[cfg(test)]
            ScramHash::Sha1 => <sha1::Sha1 as Digest>::digest(data).to_vec(),
        }
    }
}

/// A SCRAM mechanism: SCRAM-SHA-256 or SCRAM-SHA-512 with a user name and password (or a
/// delegation token id and HMAC, with [`Scram::with_token_auth`]).
///
/// The user name is prepared with SASLprep (RFC 4013) and `=`/`,` escaped as RFC 5802 §5.1
/// requires. The password is used as its UTF-8 bytes, as Kafka's Java client and broker do
/// when they salt credentials (`kafka-configs --add-config 'SCRAM-SHA-256=[password=...]'`), so
/// non-ASCII passwords match what the broker stored. Kafka's Java client sends user names
/// without SASLprep; the two agree for every name SASLprep leaves alone (all printable ASCII),
/// and a name it changes (e.g. one with a soft hyphen or a compatibility character) must be
/// created on the broker in its prepared form.
///
/// `Debug` shows the user name and hash, never the password.
#[derive(Debug, Clone)]
pub struct Scram {
    hash: ScramHash,
    username: String,
    password: Secret,
    token_auth: bool,
    fixed_nonce: Option<String>,
}

impl Scram {
    /// SCRAM with the given hash.
    pub fn new(hash: ScramHash, username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self {
            hash,
            username: username.into(),
            password: password.into(),
            token_auth: false,
            fixed_nonce: None,
        }
    }

    /// SCRAM-SHA-256 (RFC 7677).
    pub fn sha256(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self::new(ScramHash::Sha256, username, password)
    }

    /// SCRAM-SHA-512.
    pub fn sha512(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self::new(ScramHash::Sha512, username, password)
    }

    /// Authenticates with a delegation token (KIP-48): the user name is the token id, the
    /// password the token HMAC, and client-first carries the `tokenauth=true` extension.
    pub fn with_token_auth(mut self, token_auth: bool) -> Self {
        self.token_auth = token_auth;
        self
    }

    /// Uses this client nonce instead of 24 random bytes (base64). Only for tests that replay
    /// a known exchange: a repeated nonce lets a recorded exchange be replayed.
    ///
    /// The nonce must be printable ASCII without `,` (RFC 5802 §5.1); [`Mechanism::start`]
    /// fails with [`SaslError::InvalidConfig`] otherwise.
    pub fn with_fixed_nonce(mut self, nonce: impl Into<String>) -> Self {
        self.fixed_nonce = Some(nonce.into());
        self
    }

    /// The hash function.
    pub fn hash(&self) -> ScramHash {
        self.hash
    }

    /// The user name as configured (before SASLprep).
    pub fn username(&self) -> &str {
        &self.username
    }
}

impl Mechanism for Scram {
    fn name(&self) -> &'static str {
        self.hash.mechanism_name()
    }

    /// # Errors
    /// [`SaslError::InvalidConfig`] when SASLprep rejects the user name (prohibited or
    /// unassigned code points, bad bidirectional text), the user name or password is empty, or
    /// a fixed nonce is not printable ASCII without `,`; [`SaslError::Credentials`] when the
    /// system random source fails.
    fn start(&self, _ctx: &SaslContext) -> Result<Box<dyn Session>, SaslError> {
        let name = self.name();
        let bad = |reason: String| SaslError::InvalidConfig {
            mechanism: name,
            reason,
        };
        if self.username.is_empty() {
            return Err(bad("the user name is empty".into()));
        }
        if self.password.is_empty() {
            return Err(bad("the password is empty".into()));
        }
        let prepared = stringprep::saslprep(&self.username)
            .map_err(|e| bad(format!("SASLprep rejects the user name: {e}")))?;
        let nonce = match &self.fixed_nonce {
            Some(n) => {
                if n.is_empty() || !n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',') {
                    return Err(bad(
                        "the fixed nonce must be printable ASCII without ','".into()
                    ));
                }
                n.clone()
            }
            None => {
                let mut raw = [0u8; 24];
                getrandom::fill(&mut raw).map_err(|e| SaslError::Credentials {
                    mechanism: name,
                    reason: format!("the system random source failed: {e}"),
                })?;
                B64.encode(raw)
            }
        };
        let mut client_first_bare = String::with_capacity(prepared.len() + nonce.len() + 24);
        client_first_bare.push_str("n=");
        for c in prepared.chars() {
            match c {
                '=' => client_first_bare.push_str("=3D"),
                ',' => client_first_bare.push_str("=2C"),
                c => client_first_bare.push(c),
            }
        }
        client_first_bare.push_str(",r=");
        client_first_bare.push_str(&nonce);
        if self.token_auth {
            client_first_bare.push_str(",tokenauth=true");
        }
        Ok(Box::new(ScramSession {
            hash: self.hash,
            password: self.password.clone(),
            client_nonce: nonce,
            client_first_bare,
            state: State::Initial,
        }))
    }
}

/// The GS2 header this client sends: no channel binding, no authorization identity.
const GS2_HEADER: &str = "n,,";

enum State {
    Initial,
    SentClientFirst,
    SentClientFinal {
        server_signature_key: Vec<u8>,
        auth_message: Vec<u8>,
    },
    Finished,
}

/// client-final and what is kept to check server-final.
struct ClientFinal {
    message: Vec<u8>,
    server_key: Vec<u8>,
    auth_message: Vec<u8>,
}

struct ScramSession {
    hash: ScramHash,
    password: Secret,
    client_nonce: String,
    client_first_bare: String,
    state: State,
}

impl ScramSession {
    fn invalid(&self, reason: impl Into<String>) -> SaslError {
        SaslError::InvalidServerMessage {
            mechanism: self.hash.mechanism_name(),
            reason: reason.into(),
        }
    }

    /// Parses server-first (`r=..,s=..,i=..[,ext]`) and builds client-final.
    fn client_final(&self, server_first: &[u8]) -> Result<ClientFinal, SaslError> {
        let mechanism = self.hash.mechanism_name();
        let text = std::str::from_utf8(server_first)
            .map_err(|_| self.invalid("server-first is not UTF-8"))?;
        if let Some(err) = text.strip_prefix("e=") {
            return Err(SaslError::AuthenticationFailed {
                mechanism,
                reason: sanitize(err),
            });
        }
        if text.starts_with("m=") {
            return Err(self.invalid("server-first requires an unsupported mandatory extension"));
        }
        let mut attrs = text.split(',');
        let nonce = attrs
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or_else(|| self.invalid("server-first does not start with r="))?;
        let salt_b64 = attrs
            .next()
            .and_then(|a| a.strip_prefix("s="))
            .ok_or_else(|| self.invalid("server-first lacks s= after r="))?;
        let iterations = attrs
            .next()
            .and_then(|a| a.strip_prefix("i="))
            .ok_or_else(|| self.invalid("server-first lacks i= after s="))?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(
                self.invalid("the server nonce does not extend the client nonce (RFC 5802 §5.1)")
            );
        }
        if !nonce.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(self.invalid("the server nonce is not printable ASCII"));
        }
        let salt = B64
            .decode(salt_b64)
            .map_err(|_| self.invalid("the salt is not base64"))?;
        if salt.is_empty() {
            return Err(self.invalid("the salt is empty"));
        }
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| self.invalid("the iteration count is not a number"))?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(self.invalid(format!(
                "iteration count {iterations} outside {MIN_ITERATIONS}..={MAX_ITERATIONS}"
            )));
        }

        let h = self.hash;
        let salted = h.hi(self.password.expose().as_bytes(), &salt, iterations);
        let client_key = h.hmac(&salted, b"Client Key");
        let stored_key = h.h(&client_key);
        let server_key = h.hmac(&salted, b"Server Key");

        let mut without_proof = String::with_capacity(nonce.len() + 16);
        without_proof.push_str("c=");
        without_proof.push_str(&B64.encode(GS2_HEADER));
        without_proof.push_str(",r=");
        without_proof.push_str(nonce);

        let mut auth_message = Vec::with_capacity(
            self.client_first_bare.len() + server_first.len() + without_proof.len() + 2,
        );
        auth_message.extend_from_slice(self.client_first_bare.as_bytes());
        auth_message.push(b',');
        auth_message.extend_from_slice(server_first);
        auth_message.push(b',');
        auth_message.extend_from_slice(without_proof.as_bytes());

        let client_signature = h.hmac(&stored_key, &auth_message);
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let mut msg = without_proof.into_bytes();
        msg.extend_from_slice(b",p=");
        msg.extend_from_slice(B64.encode(proof).as_bytes());
        Ok(ClientFinal {
            message: msg,
            server_key,
            auth_message,
        })
    }

    /// Checks server-final (`v=<signature>` or `e=<error>`).
    fn check_server_final(
        &self,
        server_final: &[u8],
        server_key: &[u8],
        auth_message: &[u8],
    ) -> Result<(), SaslError> {
        let mechanism = self.hash.mechanism_name();
        let text = std::str::from_utf8(server_final)
            .map_err(|_| self.invalid("server-final is not UTF-8"))?;
        if let Some(err) = text.strip_prefix("e=") {
            return Err(SaslError::AuthenticationFailed {
                mechanism,
                reason: sanitize(err),
            });
        }
        let v = text
            .split(',')
            .next()
            .and_then(|a| a.strip_prefix("v="))
            .ok_or_else(|| self.invalid("server-final has neither v= nor e="))?;
        let signature = B64
            .decode(v)
            .map_err(|_| self.invalid("the server signature is not base64"))?;
        if self.hash.hmac_verify(server_key, auth_message, &signature) {
            Ok(())
        } else {
            Err(SaslError::ServerSignatureMismatch { mechanism })
        }
    }
}

/// Keeps a server error text short and printable (it goes into error messages and logs).
fn sanitize(s: &str) -> String {
    s.chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

impl Session for ScramSession {
    fn step(&mut self, challenge: &[u8]) -> Result<Step, SaslError> {
        let mechanism = self.hash.mechanism_name();
        match std::mem::replace(&mut self.state, State::Finished) {
            State::Initial => {
                let mut msg = Vec::with_capacity(GS2_HEADER.len() + self.client_first_bare.len());
                msg.extend_from_slice(GS2_HEADER.as_bytes());
                msg.extend_from_slice(self.client_first_bare.as_bytes());
                self.state = State::SentClientFirst;
                Ok(Step::Continue(msg))
            }
            State::SentClientFirst => {
                let cf = self.client_final(challenge)?;
                self.state = State::SentClientFinal {
                    server_signature_key: cf.server_key,
                    auth_message: cf.auth_message,
                };
                Ok(Step::Continue(cf.message))
            }
            State::SentClientFinal {
                server_signature_key,
                auth_message,
            } => {
                self.check_server_final(challenge, &server_signature_key, &auth_message)?;
                Ok(Step::Done)
            }
            State::Finished => Err(SaslError::UnexpectedStep { mechanism }),
        }
    }
}

#[cfg(test)]
mod tests;
