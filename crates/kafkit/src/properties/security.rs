//! The security properties: `security.protocol`, `ssl.*` and `sasl.*` ([`Security`]), read
//! one by one and applied to a [`DialerBuilder`] together, with what they need: the JAAS
//! parser, the unsecured OAUTHBEARER JWT, the MSK region and file reading. Part of the top
//! floor with the rest of `properties/`: it may import any module of the crate.

#[cfg(feature = "tls")]
use std::sync::Arc;

use super::{OIDC, PropertyError, Value, boolean, choice, text};
use crate::dialer::DialerBuilder;
#[cfg(feature = "tls")]
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

    #[cfg(feature = "tls")]
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

    #[cfg(not(feature = "tls"))]
    fn apply_tls(&self, _b: DialerBuilder) -> Result<DialerBuilder, PropertyError> {
        Err(PropertyError::Unsupported {
            name: "security.protocol".into(),
            reason: "this build of kafkit has no TLS (cargo feature `tls`)",
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
pub(super) fn msk_region(bootstrap: &str) -> Option<String> {
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

#[cfg(feature = "tls")]
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
pub(super) fn parse_jaas(
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
