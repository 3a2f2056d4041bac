//! PLAIN (RFC 4616): one client message `authzid NUL authcid NUL passwd`.

use crate::{Mechanism, SaslContext, SaslError, Secret, Session, Step};

const NAME: &str = "PLAIN";

/// The PLAIN mechanism (RFC 4616): user name and password sent in clear text, so use it only
/// over TLS.
///
/// `Debug` shows the user name, never the password.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Plain {
    /// The authorization identity; empty (the default) means "same as the user name".
    pub authzid: String,
    /// The user name (authentication identity).
    pub username: String,
    /// The password.
    pub password: Secret,
}

impl Plain {
    /// PLAIN with this user name and password and no authorization identity.
    pub fn new(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self {
            authzid: String::new(),
            username: username.into(),
            password: password.into(),
        }
    }

    /// Sets the authorization identity (act as this user); empty means the user name.
    pub fn with_authzid(mut self, authzid: impl Into<String>) -> Self {
        self.authzid = authzid.into();
        self
    }
}

impl Mechanism for Plain {
    fn name(&self) -> &'static str {
        NAME
    }

    /// # Errors
    /// [`SaslError::InvalidConfig`] when a field contains a NUL byte (RFC 4616 forbids it) or the
    /// user name or password is empty.
    fn start(&self, _ctx: &SaslContext) -> Result<Box<dyn Session>, SaslError> {
        let bad = |reason: &str| SaslError::InvalidConfig {
            mechanism: NAME,
            reason: reason.to_owned(),
        };
        if self.authzid.contains('\0') {
            return Err(bad("the authorization identity contains a NUL byte"));
        }
        if self.username.contains('\0') {
            return Err(bad("the user name contains a NUL byte"));
        }
        if self.password.expose().contains('\0') {
            return Err(bad("the password contains a NUL byte"));
        }
        if self.username.is_empty() {
            return Err(bad("the user name is empty"));
        }
        if self.password.is_empty() {
            return Err(bad("the password is empty"));
        }
        let (a, u, p) = (&self.authzid, &self.username, self.password.expose());
        let mut msg = Vec::with_capacity(a.len() + u.len() + p.len() + 2);
        msg.extend_from_slice(a.as_bytes());
        msg.push(0);
        msg.extend_from_slice(u.as_bytes());
        msg.push(0);
        msg.extend_from_slice(p.as_bytes());
        Ok(Box::new(PlainSession {
            state: State::Initial(msg),
        }))
    }
}

enum State {
    Initial(Vec<u8>),
    Sent,
    Finished,
}

struct PlainSession {
    state: State,
}

impl Session for PlainSession {
    fn step(&mut self, _challenge: &[u8]) -> Result<Step, SaslError> {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::Initial(msg) => {
                self.state = State::Sent;
                Ok(Step::Continue(msg))
            }
            // A broker that rejects PLAIN answers with an error code in SaslAuthenticate (or
            // closes the connection after a v0 handshake); any answer that reaches us is success.
            State::Sent => Ok(Step::Done),
            State::Finished => Err(SaslError::UnexpectedStep { mechanism: NAME }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> SaslContext {
        SaslContext::new("localhost", 9092)
    }

    #[test]
    fn message_layout_with_authzid() {
        let m = Plain::new("tim", "tanstaaftanstaaf").with_authzid("admin");
        let mut s = m.start(&ctx()).unwrap();
        match s.step(&[]).unwrap() {
            Step::Continue(msg) => assert_eq!(msg, b"admin\0tim\0tanstaaftanstaaf"),
            Step::Done => panic!("expected a message"),
        }
        assert!(matches!(s.step(&[]).unwrap(), Step::Done));
        assert!(matches!(s.step(&[]), Err(SaslError::UnexpectedStep { .. })));
    }

    #[test]
    fn nul_bytes_and_empty_fields_are_rejected() {
        for m in [
            Plain::new("a\0b", "pw"),
            Plain::new("ab", "p\0w"),
            Plain::new("ab", "pw").with_authzid("x\0"),
            Plain::new("", "pw"),
            Plain::new("ab", ""),
        ] {
            let err = m.start(&ctx()).err().expect("must fail");
            assert!(matches!(err, SaslError::InvalidConfig { .. }), "{err}");
        }
    }
}
