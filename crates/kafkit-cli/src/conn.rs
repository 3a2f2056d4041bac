//! The connection options every command shares (`-b`, `-X`, `-F`, TLS files, SASL, `--timeout`)
//! and the one place they become kafkit [`Properties`]: the flags are shorthands for Java /
//! librdkafka names; a `-X` that gives one of them another value is refused (a usage error
//! naming both), one that agrees is accepted. A properties file (`-F`) is read first and the
//! flags and `-X` override it.

use std::time::Duration;

use clap::Args;
use kafkit::{Properties, ReaderBuilder, Transport, TransportBuilder, WriterBuilder};

use crate::Failure;

/// Connection options, accepted before or after the subcommand.
#[derive(Debug, Args)]
pub struct ConnArgs {
    /// Bootstrap brokers, HOST:PORT[,HOST:PORT].
    #[arg(short = 'b', long = "brokers", env = "KAFKIT_BROKERS", global = true)]
    brokers: Option<String>,
    /// A Java / librdkafka config property, name=value (repeatable; `kafkit -X list` lists
    /// them with defaults and units). It overrides -F's file; a flag (--tls, --sasl-*, produce's
    /// -z, --acks, --partitioner...) and a -X that disagree are refused. `-X debug=CONTEXTS`
    /// (librdkafka's names: broker, metadata, protocol, msg, producer, fetch, consumer, cgrp,
    /// eos, security, admin, all) prints the client's tracing for those parts, as -vv does for
    /// all. `-X partitioner=NAME` chooses the partitioner (see produce --partitioner).
    #[arg(short = 'X', value_name = "NAME=VALUE", global = true)]
    pub props: Vec<String>,
    /// A properties file (name=value lines, # comments); the flags and -X override it. A Java
    /// client's names kafkit has no use for (key.serializer, client.dns.lookup...) are ignored
    /// with a warning.
    #[arg(short = 'F', long = "config-file", value_name = "FILE", global = true)]
    config_file: Option<String>,
    /// TLS (security.protocol=SSL, or SASL_SSL with --sasl-mechanism).
    #[arg(long, global = true)]
    tls: bool,
    /// CA certificates (PEM) to trust (ssl.ca.location; implies --tls).
    #[arg(long = "ca", value_name = "FILE", global = true)]
    ca: Option<String>,
    /// Client certificate (PEM) for mutual TLS (ssl.certificate.location; implies --tls).
    #[arg(long = "cert", value_name = "FILE", global = true)]
    cert: Option<String>,
    /// Client private key (PEM) (ssl.key.location; implies --tls).
    #[arg(long = "key", value_name = "FILE", global = true)]
    key: Option<String>,
    /// SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM
    /// (sasl.mechanism; OAUTHBEARER takes sasl.oauthbearer.* -X names, AWS_MSK_IAM the AWS_*
    /// environment).
    #[arg(long = "sasl-mechanism", value_name = "MECHANISM", global = true)]
    sasl_mechanism: Option<String>,
    /// SASL user name (sasl.username).
    #[arg(long = "sasl-username", value_name = "USER", global = true)]
    sasl_username: Option<String>,
    /// SASL password (sasl.password).
    #[arg(
        long = "sasl-password",
        value_name = "PASSWORD",
        env = "KAFKIT_SASL_PASSWORD",
        hide_env_values = true,
        global = true
    )]
    sasl_password: Option<String>,
    /// How long to try to reach the cluster and wait for an admin answer (e.g. 10s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_timeout, global = true)]
    timeout: Duration,
}

/// The resolved connection settings: properties (Java names) and the overall timeout.
#[derive(Debug, Clone)]
pub struct Conn {
    /// Every setting as Java / librdkafka properties, `bootstrap.servers` included.
    pub props: Properties,
    /// The bound of connecting and of each admin operation.
    pub timeout: Duration,
    /// The partitioner `-X partitioner` (or `-F`'s file) named, checked; `None`: not named
    /// (the writer uses [`crate::partitioner::DEFAULT`]).
    pub partitioner: Option<&'static str>,
}

impl Conn {
    /// The admin client on a new transport, each operation bounded by the timeout.
    pub fn admin(&self) -> Result<kafkit::Client, Failure> {
        Ok(kafkit::Client::new(self.transport()?).with_timeout(self.timeout))
    }
}

impl ConnArgs {
    /// Turns the flags into properties and checks every name and value (a usage error): a
    /// `-X` that gives a flag's property another value is refused.
    pub fn resolve(&self) -> Result<Conn, Failure> {
        let mut props = Properties::new();
        let ms = self.timeout.as_millis().to_string();
        // The timeout bounds connecting, one request and an operation's retries; -X may say
        // otherwise.
        props.set("socket.connection.setup.timeout.ms", ms.clone());
        props.set("default.api.timeout.ms", ms.clone());
        props.set("request.timeout.ms", ms);
        props.set("client.id", "kafkit-cli");
        let mut partitioner = None;
        if let Some(file) = &self.config_file {
            let text = std::fs::read_to_string(file)
                .map_err(|e| Failure::Usage(format!("cannot read {file}: {e}")))?;
            let mut warned: Vec<&str> = Vec::new();
            for (k, v) in Properties::parse(&text)?.iter() {
                if crate::settings::IGNORED_IN_FILES.contains(&k) {
                    if !warned.contains(&k) {
                        eprintln!("kafkit: {file}: ignored: kafkit does not use {k}");
                        warned.push(k);
                    }
                } else if k == "partitioner" {
                    partitioner = Some(crate::partitioner::check(
                        v,
                        &format!("partitioner in {file}"),
                    )?);
                } else {
                    props.set(k, v);
                }
            }
        }
        let flags = self.flag_properties();
        for (_, name, v) in &flags {
            props.set(*name, v.clone());
        }
        for x in &self.props {
            // `debug` (librdkafka's contexts) chooses what -v prints, not a client setting.
            if x.trim_start().starts_with("debug=") {
                continue;
            }
            if let Some((name, v)) = x.split_once('=')
                && name.trim() == "partitioner"
            {
                partitioner = Some(crate::partitioner::check(v, "-X partitioner")?);
                continue;
            }
            let mut one = Properties::new();
            one.push_assignment(x)?;
            for (name, v) in one.iter() {
                refuse_conflict(&flags, name, v)?;
                props.set(name, v);
            }
        }
        props.check()?;
        if props.get("bootstrap.servers").is_none() && props.get("metadata.broker.list").is_none() {
            return Err(Failure::Usage(
                "no brokers: give -b HOST:PORT or set KAFKIT_BROKERS".into(),
            ));
        }
        Ok(Conn {
            props,
            timeout: self.timeout,
            partitioner,
        })
    }

    /// The properties the connection flags set: (flag, Java name, value).
    fn flag_properties(&self) -> Vec<(&'static str, &'static str, String)> {
        let mut out = Vec::new();
        if let Some(b) = &self.brokers {
            out.push(("-b", "bootstrap.servers", default_ports(b)));
        }
        let tls = self.tls || self.ca.is_some() || self.cert.is_some() || self.key.is_some();
        let sasl = self.sasl_mechanism.is_some();
        let protocol = match (tls, sasl) {
            (false, false) => None,
            (true, false) => Some(("--tls", "SSL")),
            (false, true) => Some(("--sasl-mechanism", "SASL_PLAINTEXT")),
            (true, true) => Some(("--tls with --sasl-mechanism", "SASL_SSL")),
        };
        if let Some((flag, p)) = protocol {
            out.push((flag, "security.protocol", p.to_owned()));
        }
        for (flag, name, v) in [
            ("--ca", "ssl.ca.location", &self.ca),
            ("--cert", "ssl.certificate.location", &self.cert),
            ("--key", "ssl.key.location", &self.key),
            ("--sasl-mechanism", "sasl.mechanism", &self.sasl_mechanism),
            ("--sasl-username", "sasl.username", &self.sasl_username),
            ("--sasl-password", "sasl.password", &self.sasl_password),
        ] {
            if let Some(v) = v {
                out.push((flag, name, v.clone()));
            }
        }
        out
    }
}

/// A usage error when `-X name=value` gives a property one of `flags` set (by its name or an
/// alias) another value; secrets are not shown.
fn refuse_conflict(
    flags: &[(&'static str, &'static str, String)],
    name: &str,
    value: &str,
) -> Result<(), Failure> {
    let canonical = kafkit::properties::lookup(name).map_or(name, |i| i.name);
    for (flag, flag_name, flag_value) in flags {
        let same_name = canonical == *flag_name
            || kafkit::properties::lookup(flag_name).is_some_and(|i| i.name == canonical);
        let differs = if *flag_name == "bootstrap.servers" {
            default_ports(value) != *flag_value
        } else if *flag_name == "security.protocol" || *flag_name == "sasl.mechanism" {
            !value.eq_ignore_ascii_case(flag_value)
        } else {
            value != flag_value
        };
        if same_name && differs {
            let shown = |v: &str| {
                if flag_name.contains("password") {
                    "<redacted>".to_owned()
                } else {
                    v.to_owned()
                }
            };
            return Err(Failure::Usage(format!(
                "{flag} sets {flag_name}={} but -X {name}={}: give one of them",
                shown(flag_value),
                shown(value)
            )));
        }
    }
    Ok(())
}

impl Conn {
    /// Sets property `name` to `value` for a command's `flag` (produce's -z, consume's
    /// --isolation...), unless -X or -F set it already: then the two must agree (the same
    /// value, any case, or another name of it: `smallest` is `earliest`).
    ///
    /// # Errors
    ///
    /// A usage error naming both when they disagree.
    pub fn set_for_flag(&mut self, flag: &str, name: &str, value: &str) -> Result<(), Failure> {
        match self.props.get(name) {
            None => {
                self.props.set(name, value);
                Ok(())
            }
            Some(set) if same_value(name, set, value) => Ok(()),
            Some(set) => Err(Failure::Usage(format!(
                "{flag} says {name}={value} but -X or -F set {name}={set}"
            ))),
        }
    }

    /// The transport of every command.
    pub fn transport(&self) -> Result<Transport, Failure> {
        Ok(TransportBuilder::from_properties(&self.props)?.build()?)
    }

    /// A transport that has answered one Metadata request: an unreachable cluster is reported
    /// ("cannot reach the cluster", exit 1) within the timeout, not when the first record or
    /// the group join gives up (`max.block.ms`, 60 s by default).
    pub async fn connected(&self) -> Result<Transport, Failure> {
        let transport = self.transport()?;
        transport.metadata().await?;
        Ok(transport)
    }

    /// A writer builder with the writer's properties and the partitioner (`-X partitioner`,
    /// else [`crate::partitioner::DEFAULT`]).
    pub fn writer(&self, transport: Transport) -> Result<WriterBuilder, Failure> {
        let partitioner = self.partitioner.unwrap_or(crate::partitioner::DEFAULT);
        Ok(WriterBuilder::from_properties(transport, &self.props)?
            .balancer(crate::partitioner::balancer(partitioner)?))
    }

    /// A reader builder with the reader's properties.
    pub fn reader(&self, transport: Transport) -> Result<ReaderBuilder, Failure> {
        Ok(ReaderBuilder::from_properties(transport, &self.props)?)
    }
}

/// Whether `a` and `b` are the same value of property `name`: equal but for case, or two
/// names of one choice (`all` and `-1` for acks).
fn same_value(name: &str, a: &str, b: &str) -> bool {
    if a.eq_ignore_ascii_case(b) {
        return true;
    }
    let Some(kafkit::properties::PropertyInfo {
        kind: kafkit::properties::PropertyKind::Choice(words),
        ..
    }) = kafkit::properties::lookup(name)
    else {
        return false;
    };
    words.iter().any(|group| {
        let mut names = group.split('|');
        names.clone().any(|n| n.eq_ignore_ascii_case(a)) && names.any(|n| n.eq_ignore_ascii_case(b))
    })
}

/// `-b`'s addresses with kcat's default port, 9092, where one names none (`host`,
/// `[::1]`); an address with a port is kept as it is.
pub fn default_ports(list: &str) -> String {
    list.split(',')
        .map(|a| {
            let a = a.trim();
            let has_port = match a.rsplit_once(':') {
                // A bracketed IPv6 literal with no port ends with `]`.
                Some((host, port)) => {
                    !port.is_empty()
                        && port.bytes().all(|c| c.is_ascii_digit())
                        && (!host.contains(':') || host.ends_with(']'))
                }
                None => false,
            };
            if has_port || a.is_empty() {
                a.to_owned()
            } else {
                format!("{a}:9092")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The `debug` contexts of `-X debug=a,b` (librdkafka's names), the last one given.
pub fn debug_contexts(props: &[String]) -> Option<String> {
    props
        .iter()
        .rev()
        .find_map(|x| x.trim_start().strip_prefix("debug="))
        .map(str::to_owned)
}

/// A duration: `500ms`, `10s`, `2m`, `1h`, or a number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 500ms, 10s, 2m)"))?;
    let ms = match unit {
        "ms" => n,
        "" | "s" => n.saturating_mul(1000),
        "m" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m, h)")),
    };
    Ok(Duration::from_millis(ms))
}

/// `--timeout`: a duration above zero.
fn parse_timeout(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?}: the timeout must be above zero")),
        d => Ok(d),
    }
}

/// Why the cluster could not be reached, when `e` says so by its type: a connect that failed
/// or timed out (DNS, TCP, the connection's setup), also as the last attempt of an operation
/// that ran out of time. `None` for every other error.
pub fn unreachable(e: &kafkit::Error) -> Option<&kafkit::Error> {
    match e {
        kafkit::Error::Connect { .. } | kafkit::Error::ConnectTimeout { .. } => Some(e),
        kafkit::Error::DeadlineExceeded { last, .. } => unreachable(last),
        _ => None,
    }
}

/// What to check when the peer at an address is not the Kafka listener the settings expect
/// (an HTTP server or another text protocol's, a TLS listener dialled in plaintext, a plaintext one dialled with TLS),
/// also as the last attempt of an operation that ran out of time. `None` for other errors.
pub fn wrong_peer(e: &kafkit::Error) -> Option<String> {
    use kafkit::{CloseCause, Error, TlsErrorKind};
    match e {
        Error::DeadlineExceeded { last, .. } => wrong_peer(last),
        Error::ConnectionClosed {
            addr,
            cause: CloseCause::HttpReceived,
        } => Some(format!(
            "{addr} is not a Kafka broker: the answer starts with 'HTTP': is this an HTTP \
             server (or proxy)? Check -b's host and port"
        )),
        Error::ConnectionClosed {
            addr,
            cause: CloseCause::TextReceived { prefix },
        } => Some(format!(
            "{addr} is not a Kafka broker: the answer starts with '{}': is this an HTTP server \
             or another non-Kafka service? Check -b's host and port",
            String::from_utf8_lossy(prefix)
        )),
        Error::ConnectionClosed {
            addr,
            cause: CloseCause::TlsRecordReceived,
        }
        | Error::Tls {
            addr,
            kind: TlsErrorKind::PlaintextToTls,
            ..
        } => Some(format!(
            "{addr} answered in TLS: it is a TLS listener; add --tls \
             (security.protocol=SSL), and --ca FILE when a private CA signed its certificate"
        )),
        Error::Tls {
            addr,
            kind: TlsErrorKind::NotTls,
            ..
        } => Some(format!(
            "{addr} did not answer the TLS handshake: is it a plaintext listener? Leave out \
             --tls (security.protocol=PLAINTEXT)"
        )),
        _ => None,
    }
}

/// A record's failure in the user's words: a size limit names the setting that limits it and
/// how to raise it, an unknown topic says that the topic does not exist.
pub fn describe_produce(e: &kafkit::ProduceError) -> String {
    use kafkit::{ErrorCode, ProduceError};
    match e {
        ProduceError::RecordTooLarge { size, max } => format!(
            "a record of {size} bytes is larger than the {max} bytes allowed by batch.size \
             (or buffer.memory): raise it with -X batch.size=BYTES (max.request.size and the \
             topic's max.message.bytes must accept it too) (MESSAGE_TOO_LARGE)"
        ),
        ProduceError::TopicMetadata { topic, code }
            if *code == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION =>
        {
            format!(
                "topic {topic} does not exist (UNKNOWN_TOPIC_OR_PARTITION): create it with \
                 `kafkit topics create {topic}`"
            )
        }
        e if e.error_code() == Some(ErrorCode::MESSAGE_TOO_LARGE)
            || e.error_code() == Some(ErrorCode::RECORD_LIST_TOO_LARGE) =>
        {
            format!(
                "{e}: the broker refused the batch as too large; the topic's max.message.bytes \
                 (kafkit configs alter TOPIC --set max.message.bytes=BYTES) or the \
                 broker's message.max.bytes limits it"
            )
        }
        e => e.to_string(),
    }
}

/// A message for an error that says what to check: an unreachable cluster names the address
/// and the time tried; an API the broker does not offer is named as such.
pub fn describe(e: &kafkit::Error) -> String {
    if let Some(why) = wrong_peer(e) {
        return why;
    }
    if unreachable(e).is_some() {
        return format!("cannot reach the cluster: {e}");
    }
    match e {
        kafkit::Error::UnsupportedVersion {
            api, broker: None, ..
        } => format!("the broker does not support {api:?} ({e})"),
        // "auto_offset_reset is none": the setting by its -X name, and the fix.
        kafkit::Error::Reader(r) => crate::settings::in_java_words(&r.to_string()),
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_timeout("0ms").is_err());
        assert_eq!(parse_timeout("1ms"), Ok(Duration::from_millis(1)));
    }

    #[test]
    fn a_flag_and_a_property_agree_by_any_name_of_the_value() {
        assert!(same_value("auto.offset.reset", "earliest", "smallest"));
        assert!(same_value("acks", "all", "-1"));
        assert!(same_value("compression.type", "GZIP", "gzip"));
        assert!(!same_value("auto.offset.reset", "earliest", "latest"));
        assert!(!same_value("client.id", "a", "b"));
    }

    #[test]
    fn a_broker_without_port_gets_9092() {
        assert_eq!(default_ports("kafka"), "kafka:9092");
        assert_eq!(default_ports("a:1,b"), "a:1,b:9092");
        assert_eq!(default_ports("[::1]"), "[::1]:9092");
        assert_eq!(default_ports("[::1]:9093"), "[::1]:9093");
        assert_eq!(default_ports("127.0.0.1:29092"), "127.0.0.1:29092");
    }

    #[test]
    fn unreachable_is_decided_by_the_error_type() {
        let refused = || kafkit::Error::Connect {
            addr: "127.0.0.1:1".into(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        };
        let deadline = kafkit::Error::DeadlineExceeded {
            operation: "Metadata",
            timeout: Duration::from_secs(2),
            attempts: 3,
            last: Box::new(refused()),
        };
        assert!(unreachable(&refused()).is_some());
        assert!(describe(&deadline).starts_with("cannot reach the cluster: "));
        // A message that merely mentions connecting is not an unreachable cluster.
        let other = kafkit::Error::Protocol("cannot connect the dots".into());
        assert!(unreachable(&other).is_none());
        assert_eq!(describe(&other), other.to_string());
    }
}
