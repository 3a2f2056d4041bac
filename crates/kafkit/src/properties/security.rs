//! The security properties: `security.protocol`, `ssl.*` and `sasl.*` ([`Security`]), read
//! one by one and applied to a [`DialerBuilder`] together, with what they need: the JAAS
//! parser, the unsecured OAUTHBEARER JWT, the MSK region and file reading. Part of the top
//! floor with the rest of `properties/`: it may import any module of the crate.

#[cfg(feature = "rustls")]
use std::sync::Arc;

use super::{OIDC, PropertyError, Value, boolean, choice, text};
use crate::dialer::DialerBuilder;
#[cfg(feature = "rustls")]
use crate::tls::{TlsConfig, TlsConfigBuilder};

/// `security.protocol`, `ssl.*` and `sasl.*` as read, applied together at the end.
#[derive(Default)]
pub(super) struct Security<'a> {
    protocol: Option<&'static str>,
    ca_location: Option<&'a str>,
    ca_pem: Option<&'a str>,
    truststore: Option<&'a str>,
    cert_location: Option<&'a str>,
    key_location: Option<&'a str>,
    cert_pem: Option<&'a str>,
    key_pem: Option<&'a str>,
    mechanism: Option<&'static str>,
    username: Option<&'a str>,
    password: Option<&'a str>,
    jaas: Option<&'a str>,
    unsecure_jwt: bool,
    oauth_config: Option<&'a str>,
    oauth_extensions: Option<&'a str>,
    oauth_method: Option<&'static str>,
    callback_handler: Option<&'a str>,
    bootstrap: Option<&'a str>,
}

impl<'a> Security<'a> {
    pub(super) fn read(&mut self, name: &'static str, v: Value<'a>) -> Result<(), PropertyError> {
        match name {
            "security.protocol" => self.protocol = Some(choice(name, v)?),
            "ssl.ca.location" => self.ca_location = Some(text(name, v)?),
            "ssl.ca.pem" => self.ca_pem = Some(text(name, v)?),
            "ssl.truststore.location" => self.truststore = Some(text(name, v)?),
            "ssl.certificate.location" => self.cert_location = Some(text(name, v)?),
            "ssl.key.location" => self.key_location = Some(text(name, v)?),
            "ssl.certificate.pem" => self.cert_pem = Some(text(name, v)?),
            "ssl.key.pem" => self.key_pem = Some(text(name, v)?),
            "sasl.mechanism" => self.mechanism = Some(choice(name, v)?),
            "sasl.username" => self.username = Some(text(name, v)?),
            "sasl.password" => self.password = Some(text(name, v)?),
            "sasl.jaas.config" => self.jaas = Some(text(name, v)?),
            "enable.sasl.oauthbearer.unsecure.jwt" => self.unsecure_jwt = boolean(name, v)?,
            "sasl.oauthbearer.config" => self.oauth_config = Some(text(name, v)?),
            "sasl.oauthbearer.extensions" => self.oauth_extensions = Some(text(name, v)?),
            "sasl.oauthbearer.method" => self.oauth_method = Some(choice(name, v)?),
            "sasl.client.callback.handler.class" => self.callback_handler = Some(text(name, v)?),
            "bootstrap.servers" => self.bootstrap = Some(text(name, v)?),
            // Read for their value check only: PEM is the one store type, https the one
            // identification algorithm. Settings of the transport are applied by its builder.
            _ => {}
        }
        Ok(())
    }

    pub(super) fn apply(self, mut b: DialerBuilder) -> Result<DialerBuilder, PropertyError> {
        let protocol = self.protocol.unwrap_or("PLAINTEXT");
        let tls = protocol.ends_with("SSL");
        let sasl = protocol.starts_with("SASL_");
        let ssl_set = [
            self.ca_location,
            self.ca_pem,
            self.truststore,
            self.cert_location,
            self.key_location,
            self.cert_pem,
            self.key_pem,
        ]
        .iter()
        .any(Option::is_some);
        if ssl_set && !tls {
            return Err(PropertyError::Conflict {
                name: "ssl.*",
                other: "security.protocol",
                reason: "TLS files are set but security.protocol is not SSL or SASL_SSL",
            });
        }
        let sasl_set = self.mechanism.is_some()
            || self.username.is_some()
            || self.password.is_some()
            || self.jaas.is_some()
            || self.oauth_config.is_some()
            || self.oauth_extensions.is_some()
            || self.callback_handler.is_some();
        if sasl_set && !sasl {
            return Err(PropertyError::Conflict {
                name: "sasl.*",
                other: "security.protocol",
                reason: "SASL settings are set but security.protocol is not SASL_PLAINTEXT or SASL_SSL",
            });
        }
        if tls {
            b = self.apply_tls(b)?;
        }
        if sasl {
            b = self.apply_sasl(b)?;
        }
        Ok(b)
    }

    #[cfg(feature = "rustls")]
    fn apply_tls(&self, b: DialerBuilder) -> Result<DialerBuilder, PropertyError> {
        let mut t = TlsConfig::builder();
        if let Some(pem) = self.ca_pem {
            t = t.ca_pem(pem.as_bytes());
        } else if let Some(path) = self.ca_location.or(self.truststore) {
            let name = if self.ca_location.is_some() {
                "ssl.ca.location"
            } else {
                "ssl.truststore.location"
            };
            t = if path == "probe" && name == "ssl.ca.location" {
                t.system_roots()
            } else {
                t.ca_pem(read_file(name, path)?)
            };
        }
        t = match (
            self.cert_pem,
            self.key_pem,
            self.cert_location,
            self.key_location,
        ) {
            (Some(c), Some(k), _, _) => t.client_cert_pem(c.as_bytes(), k.as_bytes()),
            (None, None, Some(c), Some(k)) => t.client_cert_pem(
                read_file("ssl.certificate.location", c)?,
                read_file("ssl.key.location", k)?,
            ),
            (None, None, None, None) => t,
            (Some(_), None, _, _) | (None, None, Some(_), None) => {
                return Err(PropertyError::Missing {
                    name: "ssl.certificate",
                    needs: "its private key (ssl.key.location or ssl.key.pem)",
                });
            }
            _ => {
                return Err(PropertyError::Missing {
                    name: "ssl.key",
                    needs: "its certificate (ssl.certificate.location or ssl.certificate.pem)",
                });
            }
        };
        let tls: TlsConfig =
            TlsConfigBuilder::build(t).map_err(|e| PropertyError::Tls(e.to_string()))?;
        Ok(b.tls(tls))
    }

    #[cfg(not(feature = "rustls"))]
    fn apply_tls(&self, _b: DialerBuilder) -> Result<DialerBuilder, PropertyError> {
        Err(PropertyError::Unsupported {
            name: "security.protocol".into(),
            reason: "this build of kafkit has no TLS (cargo feature `tls` or `tls-graviola`)",
        })
    }

    fn apply_sasl(&self, b: DialerBuilder) -> Result<DialerBuilder, PropertyError> {
        let mechanism = self.mechanism.ok_or(PropertyError::Missing {
            name: "security.protocol=SASL_*",
            needs: "sasl.mechanism",
        })?;
        let token_based = matches!(mechanism, "OAUTHBEARER" | "AWS_MSK_IAM");
        if token_based && (self.username.is_some() || self.password.is_some()) {
            return Err(PropertyError::Conflict {
                name: "sasl.username",
                other: "sasl.mechanism",
                reason: "OAUTHBEARER and AWS_MSK_IAM take no user name or password",
            });
        }
        if mechanism != "OAUTHBEARER"
            && let Some(name) = [
                ("sasl.oauthbearer.config", self.oauth_config.is_some()),
                (
                    "sasl.oauthbearer.extensions",
                    self.oauth_extensions.is_some(),
                ),
            ]
            .into_iter()
            .find_map(|(n, set)| set.then_some(n))
        {
            return Err(PropertyError::Conflict {
                name,
                other: "sasl.mechanism",
                reason: "it is an OAUTHBEARER setting",
            });
        }
        if mechanism != "AWS_MSK_IAM" && self.callback_handler.is_some() {
            return Err(PropertyError::Conflict {
                name: "sasl.client.callback.handler.class",
                other: "sasl.mechanism",
                reason: "only AWS_MSK_IAM's IAMClientCallbackHandler is known",
            });
        }
        match mechanism {
            "OAUTHBEARER" => return Ok(b.sasl(self.oauthbearer()?)),
            "AWS_MSK_IAM" => return self.msk_iam(b),
            _ => {}
        }
        let (mut user, mut pass) = (
            self.username.map(str::to_owned),
            self.password.map(str::to_owned),
        );
        if let Some(jaas) = self.jaas {
            let opts = parse_jaas(jaas, mechanism)?;
            user = user.or(opts.0);
            pass = pass.or(opts.1);
        }
        let (Some(user), Some(pass)) = (user, pass) else {
            return Err(PropertyError::Missing {
                name: "sasl.mechanism",
                needs: "credentials (sasl.username and sasl.password, or sasl.jaas.config)",
            });
        };
        Ok(match mechanism {
            "PLAIN" => b.sasl(kafkit_sasl::Plain::new(user, pass)),
            "SCRAM-SHA-256" => b.sasl(kafkit_sasl::Scram::sha256(user, pass)),
            _ => b.sasl(kafkit_sasl::Scram::sha512(user, pass)),
        })
    }
}

impl Security<'_> {
    /// OAUTHBEARER with an unsecured JWT made at each authentication, from
    /// `sasl.oauthbearer.config` (librdkafka) or an `OAuthBearerLoginModule` JAAS line (Java).
    fn oauthbearer(&self) -> Result<kafkit_sasl::OAuthBearer, PropertyError> {
        if self.oauth_method == Some("oidc") {
            return Err(PropertyError::Unsupported {
                name: "sasl.oauthbearer.method".into(),
                reason: OIDC,
            });
        }
        let mut jwt = UnsecuredJwt::default();
        let mut extensions: Vec<(String, String)> = Vec::new();
        if let Some(config) = self.oauth_config {
            if !self.unsecure_jwt {
                return Err(PropertyError::Missing {
                    name: "sasl.oauthbearer.config",
                    needs: "enable.sasl.oauthbearer.unsecure.jwt=true (it describes an unsecured \
                            JWT, for test clusters)",
                });
            }
            jwt.read_config(config, &mut extensions)?;
        } else if let Some(jaas) = self.jaas {
            jwt.read_jaas(jaas, &mut extensions)?;
        }
        if jwt.principal.is_empty() {
            return Err(PropertyError::Missing {
                name: "sasl.mechanism=OAUTHBEARER",
                needs: "a token: enable.sasl.oauthbearer.unsecure.jwt=true with \
                        sasl.oauthbearer.config=principal=NAME, an OAuthBearerLoginModule \
                        sasl.jaas.config, or a TokenProvider given to DialerBuilder::sasl",
            });
        }
        if let Some(list) = self.oauth_extensions {
            for kv in list.split(',').map(str::trim).filter(|kv| !kv.is_empty()) {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| PropertyError::InvalidValue {
                        name: "sasl.oauthbearer.extensions".into(),
                        value: format!("{kv:?}"),
                        expected: "NAME=VALUE pairs separated by commas".into(),
                    })?;
                extensions.push((k.trim().to_owned(), v.trim().to_owned()));
            }
        }
        let mut m = kafkit_sasl::OAuthBearer::new(move || {
            Ok::<_, kafkit_sasl::BoxError>(kafkit_sasl::Secret::new(
                jwt.token(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs()),
                ),
            ))
        });
        for (k, v) in extensions {
            m = m.with_extension(k, v);
        }
        Ok(m)
    }

    #[cfg(feature = "aws-msk-iam")]
    fn msk_iam(&self, b: DialerBuilder) -> Result<DialerBuilder, PropertyError> {
        if let Some(h) = self.callback_handler
            && !h.ends_with("IAMClientCallbackHandler")
        {
            return Err(PropertyError::InvalidValue {
                name: "sasl.client.callback.handler.class".into(),
                value: format!("{h:?}"),
                expected: "software.amazon.msk.auth.iam.IAMClientCallbackHandler".into(),
            });
        }
        if let Some(jaas) = self.jaas {
            let (class, options) = jaas_options(jaas)?;
            if !class.ends_with("IAMLoginModule") || !options.is_empty() {
                return Err(PropertyError::InvalidValue {
                    name: "sasl.jaas.config".into(),
                    value: "<redacted>".into(),
                    expected: "software.amazon.msk.auth.iam.IAMLoginModule required; (without \
                               options: credentials come from AWS_ACCESS_KEY_ID, \
                               AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN)"
                        .into(),
                });
            }
        }
        let env = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
        let region = env("AWS_REGION")
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .or_else(|| self.bootstrap.and_then(msk_region))
            .ok_or(PropertyError::Missing {
                name: "sasl.mechanism=AWS_MSK_IAM",
                needs: "a region: AWS_REGION, or a bootstrap host ...kafka.REGION.amazonaws.com",
            })?;
        Ok(b.sasl(kafkit_sasl::AwsMskIam::new(
            region,
            kafkit_sasl::EnvironmentCredentials::new(),
        )))
    }

    #[cfg(not(feature = "aws-msk-iam"))]
    fn msk_iam(&self, _b: DialerBuilder) -> Result<DialerBuilder, PropertyError> {
        Err(PropertyError::Unsupported {
            name: "sasl.mechanism".into(),
            reason: "this build of kafkit has no AWS_MSK_IAM (cargo feature `aws-msk-iam`)",
        })
    }
}

/// The region of an MSK broker host: `b-1.c.x.c2.kafka.us-east-1.amazonaws.com:9098` ->
/// `us-east-1` (the label after `kafka`, before `amazonaws`).
#[cfg_attr(not(feature = "aws-msk-iam"), allow(dead_code))]
fn msk_region(bootstrap: &str) -> Option<String> {
    let first = bootstrap.split(',').next()?.trim();
    let host = first.rsplit_once(':').map_or(first, |(h, _)| h);
    let labels: Vec<&str> = host.split('.').collect();
    let at = labels.iter().position(|l| *l == "amazonaws")?;
    (at >= 2 && labels[at - 2] == "kafka").then(|| labels[at - 1].to_owned())
}

/// The claims of an unsecured JWT (`alg: none`), as librdkafka's
/// `enable.sasl.oauthbearer.unsecure.jwt` and Java's `OAuthBearerUnsecuredLoginCallbackHandler`
/// make them: for test clusters whose brokers accept them.
#[derive(Debug, Clone)]
struct UnsecuredJwt {
    principal: String,
    principal_claim: String,
    scope: Vec<String>,
    scope_claim: String,
    life_seconds: u64,
}

impl Default for UnsecuredJwt {
    fn default() -> Self {
        UnsecuredJwt {
            principal: String::new(),
            principal_claim: "sub".into(),
            scope: Vec::new(),
            scope_claim: "scope".into(),
            life_seconds: 3600,
        }
    }
}

impl UnsecuredJwt {
    fn bad(name: &str, value: &str, expected: &str) -> PropertyError {
        PropertyError::InvalidValue {
            name: name.to_owned(),
            value: format!("{value:?}"),
            expected: expected.to_owned(),
        }
    }

    fn life(name: &str, v: &str) -> Result<u64, PropertyError> {
        v.parse::<u64>()
            .ok()
            .filter(|s| (1..=u64::from(u32::MAX)).contains(s))
            .ok_or_else(|| Self::bad(name, v, "a positive number of seconds"))
    }

    /// librdkafka's `sasl.oauthbearer.config`: space-separated `name=value`.
    fn read_config(
        &mut self,
        config: &str,
        extensions: &mut Vec<(String, String)>,
    ) -> Result<(), PropertyError> {
        const NAME: &str = "sasl.oauthbearer.config";
        for kv in config.split_whitespace() {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| Self::bad(NAME, kv, "name=value settings separated by spaces"))?;
            match k {
                "principal" => self.principal = v.to_owned(),
                "principalClaimName" => self.principal_claim = v.to_owned(),
                "scope" => self.scope = v.split(',').map(str::to_owned).collect(),
                "scopeClaimName" => self.scope_claim = v.to_owned(),
                "lifeSeconds" => self.life_seconds = Self::life(NAME, v)?,
                k if k.starts_with("extension_") => {
                    extensions.push((k["extension_".len()..].to_owned(), v.to_owned()));
                }
                _ => {
                    return Err(Self::bad(
                        NAME,
                        k,
                        "principal, principalClaimName, scope, scopeClaimName, lifeSeconds or \
                         extension_NAME",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Java's `OAuthBearerLoginModule` options (`unsecuredLoginStringClaim_sub`...).
    fn read_jaas(
        &mut self,
        jaas: &str,
        extensions: &mut Vec<(String, String)>,
    ) -> Result<(), PropertyError> {
        const NAME: &str = "sasl.jaas.config";
        let (class, options) = jaas_options(jaas)?;
        if !class.ends_with("OAuthBearerLoginModule") {
            return Err(PropertyError::InvalidValue {
                name: NAME.into(),
                value: "<redacted>".into(),
                expected: "an OAuthBearerLoginModule line for sasl.mechanism=OAUTHBEARER".into(),
            });
        }
        for (k, v) in options {
            if let Some(claim) = k.strip_prefix("unsecuredLoginStringClaim_") {
                if claim == self.principal_claim {
                    self.principal = v;
                }
            } else if let Some(ext) = k.strip_prefix("unsecuredLoginExtension_") {
                extensions.push((ext.to_owned(), v));
            } else if k == "unsecuredLoginLifetimeSeconds" {
                self.life_seconds = Self::life(NAME, &v)?;
            } else if k == "unsecuredLoginPrincipalClaimName" {
                self.principal_claim = v;
            }
        }
        Ok(())
    }

    /// The token as of `now` (seconds since the epoch): `header.payload.` in base64url.
    fn token(&self, now: u64) -> String {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut claims = serde_json::Map::new();
        claims.insert(self.principal_claim.clone(), self.principal.clone().into());
        claims.insert("iat".into(), now.into());
        claims.insert("exp".into(), now.saturating_add(self.life_seconds).into());
        if !self.scope.is_empty() {
            claims.insert(self.scope_claim.clone(), self.scope.clone().into());
        }
        format!(
            "{}.{}.",
            b64.encode(br#"{"alg":"none"}"#),
            b64.encode(serde_json::Value::Object(claims).to_string())
        )
    }
}

#[cfg(feature = "rustls")]
fn read_file(name: &'static str, path: &str) -> Result<Vec<u8>, PropertyError> {
    std::fs::read(path).map_err(|e| PropertyError::File {
        name,
        path: path.to_owned(),
        source: Arc::new(e),
    })
}

/// The `username` and `password` options of a JAAS line:
/// `org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";`
/// (values quoted with `"`, `\"` and `\\` escaped, or bare words).
fn parse_jaas(
    jaas: &str,
    mechanism: &str,
) -> Result<(Option<String>, Option<String>), PropertyError> {
    let (class, options) = jaas_options(jaas)?;
    let want = if mechanism == "PLAIN" {
        "PlainLoginModule"
    } else {
        "ScramLoginModule"
    };
    if !class.ends_with(want) {
        return Err(PropertyError::InvalidValue {
            name: "sasl.jaas.config".into(),
            value: "<redacted>".into(),
            expected: format!("a {want} line for sasl.mechanism={mechanism}"),
        });
    }
    let (mut user, mut pass) = (None, None);
    for (k, v) in options {
        match k.as_str() {
            "username" => user = Some(v),
            "password" => pass = Some(v),
            _ => {}
        }
    }
    Ok((user, pass))
}

/// A JAAS line's options: `key=value`, in order.
type JaasOptions = Vec<(String, String)>;

/// A JAAS line's login module class and its options.
fn jaas_options(jaas: &str) -> Result<(&str, JaasOptions), PropertyError> {
    let bad = |expected: &str| PropertyError::InvalidValue {
        name: "sasl.jaas.config".into(),
        value: "<redacted>".into(),
        expected: expected.into(),
    };
    let body = jaas.trim().trim_end_matches(';').trim();
    let mut words = body.splitn(3, char::is_whitespace);
    let class = words.next().unwrap_or("");
    if class.is_empty() {
        return Err(bad("a login module class"));
    }
    if !matches!(
        words.next(),
        Some("required" | "requisite" | "sufficient" | "optional")
    ) {
        return Err(bad("the login module's flag (`required`) after its class"));
    }
    let mut rest = words.next().unwrap_or("").chars().peekable();
    let mut options = Vec::new();
    loop {
        while rest.peek().is_some_and(|c| c.is_whitespace()) {
            rest.next();
        }
        if rest.peek().is_none() {
            break;
        }
        let key: String = rest.by_ref().take_while(|&c| c != '=').collect();
        let mut value = String::new();
        if rest.peek() == Some(&'"') {
            rest.next();
            let mut closed = false;
            while let Some(c) = rest.next() {
                match c {
                    '\\' => value.extend(rest.next()),
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => value.push(c),
                }
            }
            if !closed {
                return Err(bad("a closing quote"));
            }
        } else {
            while let Some(c) = rest.next_if(|c| !c.is_whitespace()) {
                value.push(c);
            }
        }
        options.push((key.trim().to_owned(), value));
    }
    Ok((class, options))
}

#[cfg(test)]
mod tests {
    use super::super::Properties;
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Properties {
        pairs.iter().copied().collect()
    }

    #[test]
    fn security_settings_must_agree() {
        let e = DialerBuilder::from_properties(&props(&[("sasl.mechanism", "PLAIN")])).unwrap_err();
        assert!(matches!(e, PropertyError::Conflict { .. }), "{e:?}");
        let e = DialerBuilder::from_properties(&props(&[("security.protocol", "SASL_SSL")]))
            .unwrap_err();
        assert!(
            matches!(
                e,
                PropertyError::Missing {
                    needs: "sasl.mechanism",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = DialerBuilder::from_properties(&props(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "a"),
        ]))
        .unwrap_err();
        assert!(matches!(e, PropertyError::Missing { .. }), "{e:?}");
        let d = DialerBuilder::from_properties(&props(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="al ice" password="p\"w";"#,
            ),
        ]))
        .unwrap()
        .build();
        let m = d.sasl_mechanism().unwrap();
        assert_eq!(m.name(), "SCRAM-SHA-512");
        assert_eq!(
            parse_jaas(
                r#"x.PlainLoginModule required username=bob password="p\"w";"#,
                "PLAIN"
            )
            .unwrap(),
            (Some("bob".into()), Some("p\"w".into()))
        );
    }

    #[cfg(any(feature = "tls", feature = "tls-graviola"))]
    #[test]
    fn tls_files_are_read_and_checked() {
        let e = DialerBuilder::from_properties(&props(&[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", "/nonexistent/ca.pem"),
        ]))
        .unwrap_err();
        assert!(
            matches!(
                e,
                PropertyError::File {
                    name: "ssl.ca.location",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = DialerBuilder::from_properties(&props(&[
            ("security.protocol", "SSL"),
            ("ssl.ca.pem", "not a pem"),
        ]))
        .unwrap_err();
        assert!(matches!(e, PropertyError::Tls(_)), "{e:?}");
        let e =
            DialerBuilder::from_properties(&props(&[("ssl.ca.location", "probe")])).unwrap_err();
        assert!(matches!(e, PropertyError::Conflict { .. }), "{e:?}");
        let d = DialerBuilder::from_properties(&props(&[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", "probe"),
        ]))
        .unwrap()
        .build();
        assert!(d.tls_config().is_some());
    }

    /// The client's first SASL message of the mechanism `props` configure.
    fn first_message(props: &Properties) -> Vec<u8> {
        let d = DialerBuilder::from_properties(props).unwrap().build();
        let m = d.sasl_mechanism().expect("a mechanism");
        let mut session = m
            .start(&kafkit_sasl::SaslContext::new(
                "b-1.c.kafka.eu-west-1.amazonaws.com",
                9098,
            ))
            .expect("starts");
        match session.step(b"").expect("first step") {
            kafkit_sasl::Step::Continue(msg) => msg,
            _ => panic!("no first message"),
        }
    }

    /// The JSON claims of the unsecured JWT in an OAUTHBEARER first message.
    fn claims(msg: &[u8]) -> serde_json::Value {
        use base64::Engine;
        let text = String::from_utf8(msg.to_vec()).unwrap();
        let token = text
            .split('\u{1}')
            .find_map(|f| f.strip_prefix("auth=Bearer "))
            .expect("a bearer token");
        let mut parts = token.split('.');
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = b64.decode(parts.next().unwrap()).unwrap();
        assert_eq!(header, br#"{"alg":"none"}"#);
        let payload = b64.decode(parts.next().unwrap()).unwrap();
        assert_eq!(parts.next(), Some(""), "an empty signature");
        serde_json::from_slice(&payload).unwrap()
    }

    #[test]
    fn oauthbearer_makes_librdkafka_and_java_unsecured_tokens() {
        let base = [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "OAUTHBEARER"),
        ];
        let with =
            |more: &[(&str, &str)]| -> Properties { base.iter().chain(more).copied().collect() };
        // librdkafka: enable.sasl.oauthbearer.unsecure.jwt + sasl.oauthbearer.config.
        let msg = first_message(&with(&[
            ("enable.sasl.oauthbearer.unsecure.jwt", "true"),
            (
                "sasl.oauthbearer.config",
                "principal=alice scope=read,write lifeSeconds=60 extension_traceId=123",
            ),
            ("sasl.oauthbearer.extensions", "logicalCluster=lkc-1"),
        ]));
        let c = claims(&msg);
        assert_eq!(c["sub"], "alice");
        assert_eq!(c["scope"], serde_json::json!(["read", "write"]));
        assert_eq!(c["exp"].as_u64().unwrap() - c["iat"].as_u64().unwrap(), 60);
        let text = String::from_utf8_lossy(&msg);
        assert!(
            text.contains("traceId=123") && text.contains("logicalCluster=lkc-1"),
            "{text}"
        );
        // Java: an OAuthBearerLoginModule JAAS line with unsecured claims.
        let msg = first_message(&with(&[(
            "sasl.jaas.config",
            r#"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="bob" unsecuredLoginExtension_x="y";"#,
        )]));
        assert_eq!(claims(&msg)["sub"], "bob");
        assert!(String::from_utf8_lossy(&msg).contains("x=y"));

        // Typed errors.
        let err = |more: &[(&str, &str)]| DialerBuilder::from_properties(&with(more)).unwrap_err();
        assert!(matches!(
            err(&[]),
            PropertyError::Missing {
                name: "sasl.mechanism=OAUTHBEARER",
                ..
            }
        ));
        assert!(matches!(
            err(&[("sasl.oauthbearer.config", "principal=a")]),
            PropertyError::Missing {
                name: "sasl.oauthbearer.config",
                ..
            }
        ));
        let e = err(&[
            ("enable.sasl.oauthbearer.unsecure.jwt", "true"),
            ("sasl.oauthbearer.config", "principal=a lifeSeconds=soon"),
        ]);
        assert!(
            matches!(&e, PropertyError::InvalidValue { expected, .. } if expected.contains("seconds")),
            "{e}"
        );
        let e = err(&[
            ("enable.sasl.oauthbearer.unsecure.jwt", "true"),
            ("sasl.oauthbearer.config", "principal=a colour=blue"),
        ]);
        assert!(matches!(e, PropertyError::InvalidValue { .. }), "{e}");
        let e = err(&[("sasl.oauthbearer.method", "oidc")]);
        assert!(
            matches!(&e, PropertyError::Unsupported { name, .. } if name == "sasl.oauthbearer.method"),
            "{e}"
        );
        let e = err(&[("sasl.username", "u"), ("sasl.password", "p")]);
        assert!(
            matches!(
                e,
                PropertyError::Conflict {
                    name: "sasl.username",
                    ..
                }
            ),
            "{e}"
        );
        for name in [
            "sasl.oauthbearer.client.id",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.token.endpoint.url",
            "sasl.oauthbearer.scope",
        ] {
            let e = props(&[(name, "x")]).check().unwrap_err();
            assert!(
                matches!(e, PropertyError::Unsupported { .. }),
                "{name}: {e}"
            );
        }
        // OAUTHBEARER settings with another mechanism are a conflict, not ignored.
        let e = DialerBuilder::from_properties(&props(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
            ("sasl.oauthbearer.config", "principal=a"),
        ]))
        .unwrap_err();
        assert!(
            matches!(
                e,
                PropertyError::Conflict {
                    name: "sasl.oauthbearer.config",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[cfg(feature = "aws-msk-iam")]
    #[test]
    fn aws_msk_iam_takes_java_names_and_a_region() {
        assert_eq!(
            msk_region("b-1.demo.abc123.c2.kafka.us-east-1.amazonaws.com:9098,b-2.x:1").as_deref(),
            Some("us-east-1")
        );
        assert_eq!(msk_region("127.0.0.1:9092"), None);
        // The region comes from the bootstrap host when AWS_REGION is not set (this test does
        // not set it; a CI with it set still gets an AWS_MSK_IAM mechanism).
        let p = props(&[
            (
                "bootstrap.servers",
                "b-1.demo.c2.kafka.eu-west-1.amazonaws.com:9098",
            ),
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "AWS_MSK_IAM"),
            (
                "sasl.jaas.config",
                "software.amazon.msk.auth.iam.IAMLoginModule required;",
            ),
            (
                "sasl.client.callback.handler.class",
                "software.amazon.msk.auth.iam.IAMClientCallbackHandler",
            ),
        ]);
        let d = DialerBuilder::from_properties(&p).unwrap().build();
        assert_eq!(d.sasl_mechanism().map(|m| m.name()), Some("AWS_MSK_IAM"));
        let with = |k: &str, v: &str| -> Properties {
            let mut q = p.clone();
            q.set(k, v);
            q
        };
        let e = DialerBuilder::from_properties(&with(
            "sasl.jaas.config",
            r#"software.amazon.msk.auth.iam.IAMLoginModule required awsProfileName="dev";"#,
        ))
        .unwrap_err();
        assert!(
            matches!(&e, PropertyError::InvalidValue { expected, .. } if expected.contains("AWS_ACCESS_KEY_ID")),
            "{e}"
        );
        let e = DialerBuilder::from_properties(&with(
            "sasl.client.callback.handler.class",
            "com.Other",
        ))
        .unwrap_err();
        assert!(matches!(e, PropertyError::InvalidValue { .. }), "{e}");
        let e = DialerBuilder::from_properties(&with("sasl.username", "AKIA")).unwrap_err();
        assert!(matches!(e, PropertyError::Conflict { .. }), "{e}");
        if std::env::var_os("AWS_REGION").is_none()
            && std::env::var_os("AWS_DEFAULT_REGION").is_none()
        {
            let e = DialerBuilder::from_properties(&with("bootstrap.servers", "127.0.0.1:9092"))
                .unwrap_err();
            assert!(
                matches!(
                    e,
                    PropertyError::Missing {
                        name: "sasl.mechanism=AWS_MSK_IAM",
                        ..
                    }
                ),
                "{e}"
            );
        }
    }
}
