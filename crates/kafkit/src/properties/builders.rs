//! The `from_properties` constructors of the builders ([`DialerBuilder`],
//! [`TransportBuilder`], [`WriterBuilder`], [`ReaderBuilder`], [`GroupReaderBuilder`],
//! [`ShareReaderBuilder`]): each
//! reads the properties of its scope from the table in `properties/mod.rs` and calls the
//! builder's own setters. Part of the top floor with the rest of `properties/`.

use std::sync::Arc;

use kafkit_compress::{Compression, CompressionConfig};

use super::PropertyScope::{Group as G, Reader as R, Share as S, Transport as T, Writer as W};
use super::security::Security;
use super::{
    Properties, PropertyError, Value, boolean, choice, count, millis_value, text, unreachable_kind,
};
use crate::conn::produce::Acks;
use crate::dialer::DialerBuilder;
use crate::group::{GroupProtocol, GroupReaderBuilder};
use crate::ops::offsets::IsolationLevel;
use crate::reader::{AutoOffsetReset, ReaderBuilder};
use crate::share::{AcknowledgementMode, ShareAcquireMode, ShareReaderBuilder};
use crate::transport::{Transport, TransportBuilder};
use crate::writer::WriterBuilder;

impl DialerBuilder {
    /// A dialer builder with the transport-scope (`T`) properties of `props` applied: client id,
    /// timeouts, in-flight limit, response size, `security.protocol`, `ssl.*` (files are read
    /// here) and `sasl.*`. See the [table](crate::properties).
    ///
    /// # Errors
    ///
    /// [`PropertyError`]: an unknown or unsupported name, a bad value, a file that cannot be
    /// read, TLS material rustls refuses, SASL settings without `SASL_*` (or the reverse),
    /// or a mechanism without credentials.
    pub fn from_properties(props: &Properties) -> Result<DialerBuilder, PropertyError> {
        let mut b = DialerBuilder::default();
        let mut sec = Security::default();
        for (name, v) in props.scoped(T)? {
            b = match name {
                "client.id" => b.client_id(text(name, v)?),
                "socket.connection.setup.timeout.ms" => b.connect_timeout(millis_value(name, v)?),
                "request.timeout.ms" | "socket.timeout.ms" => {
                    b.request_timeout(millis_value(name, v)?)
                }
                "max.in.flight.requests.per.connection" => {
                    b.max_in_flight_requests_per_connection(count(name, v)?)
                }
                "receive.message.max.bytes" => b.max_response_size(count(name, v)?),
                "unstable.api.versions.enable" => b.unstable_api_versions(boolean(name, v)?),
                _ => {
                    sec.read(name, v)?;
                    b
                }
            };
        }
        sec.apply(b)
    }
}

impl TransportBuilder {
    /// A transport builder from `props`: `bootstrap.servers` (required), the dialer's settings
    /// ([`DialerBuilder::from_properties`]) and the transport's own (metadata age, idle
    /// connections, retry backoff, API timeout). Names of the Writer and the Reader are
    /// skipped. See the [table](crate::properties).
    ///
    /// # Errors
    ///
    /// [`PropertyError::Missing`] without `bootstrap.servers`, and every error of
    /// [`DialerBuilder::from_properties`].
    pub fn from_properties(props: &Properties) -> Result<TransportBuilder, PropertyError> {
        let dialer = DialerBuilder::from_properties(props)?.build();
        let mut bootstrap = None;
        let mut settings = Vec::new();
        for (name, v) in props.scoped(T)? {
            if name == "bootstrap.servers" {
                bootstrap = Some(text(name, v)?);
            } else {
                settings.push((name, v));
            }
        }
        let bootstrap = bootstrap.ok_or(PropertyError::Missing {
            name: "TransportBuilder::from_properties",
            needs: "bootstrap.servers",
        })?;
        let mut b = Transport::builder([bootstrap]).dialer(dialer);
        for (name, v) in settings {
            b = match name {
                "metadata.max.age.ms" => b.metadata_max_age(millis_value(name, v)?),
                "connections.max.idle.ms" => b.connections_max_idle(millis_value(name, v)?),
                "retry.backoff.ms" => b.retry_backoff(millis_value(name, v)?),
                "retry.backoff.max.ms" => b.retry_backoff_max(millis_value(name, v)?),
                "default.api.timeout.ms" => b.default_api_timeout(millis_value(name, v)?),
                "metadata.recovery.strategy" => {
                    b.metadata_recovery_strategy(match choice(name, v)? {
                        "none" => crate::transport::MetadataRecoveryStrategy::None,
                        _ => crate::transport::MetadataRecoveryStrategy::Rebootstrap,
                    })
                }
                "metadata.recovery.rebootstrap.trigger.ms" => {
                    b.metadata_recovery_rebootstrap_trigger(millis_value(name, v)?)
                }
                "metadata.cluster.check.enable" => b.metadata_cluster_check(boolean(name, v)?),
                _ => b,
            };
        }
        Ok(b)
    }
}

impl WriterBuilder {
    /// A writer builder on `transport` with the writer-scope (`W`) properties of `props`
    /// applied (names of the transport and the Reader are skipped). See the
    /// [table](crate::properties). Ranges are checked by [`WriterBuilder::build`].
    ///
    /// # Errors
    ///
    /// [`PropertyError`]: an unknown or unsupported name, a bad value, or a compression level
    /// outside the codec's range.
    pub fn from_properties(
        transport: Transport,
        props: &Properties,
    ) -> Result<WriterBuilder, PropertyError> {
        let mut b = crate::writer::Writer::builder(transport);
        let mut compression = CompressionProperties::default();
        for (name, v) in props.scoped(W)? {
            b = if compression.read(name, v)? {
                b
            } else {
                b.apply_property(name, v)?
            };
        }
        if let Some(config) = compression.config()? {
            b = b.compression(config);
        }
        Ok(b)
    }

    /// One writer-scope property other than compression's, applied to the builder.
    fn apply_property(self, name: &'static str, v: Value<'_>) -> Result<Self, PropertyError> {
        let b = self;
        Ok(match name {
            "acks" => b.acks(match choice(name, v)? {
                "0" => Acks::None,
                "1" => Acks::Leader,
                _ => Acks::All,
            }),
            "linger.ms" => b.linger(millis_value(name, v)?),
            "batch.size" => b.batch_size(count(name, v)?),
            "batch.num.messages" => b.batch_max_records(count(name, v)?),
            "max.in.flight.requests.per.connection" => {
                b.max_in_flight_requests_per_connection(count(name, v)?)
            }
            "delivery.timeout.ms" => b.delivery_timeout(millis_value(name, v)?),
            "request.timeout.ms" => b.request_timeout(millis_value(name, v)?),
            "retry.backoff.ms" => b.retry_backoff(millis_value(name, v)?),
            "retry.backoff.max.ms" => b.retry_backoff_max(millis_value(name, v)?),
            "max.block.ms" => b.max_block(millis_value(name, v)?),
            "buffer.memory" => b.buffer_memory(count(name, v)?),
            "queue.buffering.max.kbytes" => {
                let kb: usize = count(name, v)?;
                b.buffer_memory(kb.saturating_mul(1024))
            }
            "queue.buffering.max.messages" => b.max_buffered_records(count(name, v)?),
            "max.request.size" => b.max_request_size(count(name, v)?),
            "allow.auto.create.topics" => b.allow_auto_topic_creation(boolean(name, v)?),
            "enable.idempotence" => b.enable_idempotence(boolean(name, v)?),
            "transactional.id" => b.transactional_id(text(name, v)?),
            "transaction.timeout.ms" => b.transaction_timeout(millis_value(name, v)?),
            "enable.metrics.push" => b.enable_metrics_push(boolean(name, v)?),
            _ => b,
        })
    }
}

/// `compression.type` and the `compression.*level` names as read: they make one
/// [`CompressionConfig`] together, once every property is read (a codec's own level name wins
/// over `compression.level`, whatever the order).
#[derive(Default)]
struct CompressionProperties {
    codec: Option<&'static str>,
    level: Option<(&'static str, i64)>,
    codec_levels: Vec<(&'static str, i64)>,
}

impl CompressionProperties {
    /// Takes `name` if it is a compression property (`true`), else leaves it (`false`).
    fn read(&mut self, name: &'static str, v: Value<'_>) -> Result<bool, PropertyError> {
        match name {
            "compression.type" => self.codec = Some(choice(name, v)?),
            "compression.level"
            | "compression.gzip.level"
            | "compression.lz4.level"
            | "compression.zstd.level" => {
                let Value::Integer(l) = v else {
                    return unreachable_kind(name);
                };
                if name == "compression.level" {
                    self.level = Some((name, l));
                } else {
                    self.codec_levels.push((name, l));
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The codec and its level, `None` when `compression.type` was not given (a level alone
    /// sets nothing).
    fn config(&self) -> Result<Option<CompressionConfig>, PropertyError> {
        let Some(codec) = self.codec else {
            return Ok(None);
        };
        let c = Compression::from_name(codec).map_err(|_| PropertyError::InvalidValue {
            name: "compression.type".into(),
            value: format!("{codec:?}"),
            expected: "a codec name".into(),
        })?;
        let own = format!("compression.{}.level", c.name());
        let level = self
            .codec_levels
            .iter()
            .rev()
            .find(|(n, _)| *n == own)
            .copied()
            .or(self.level);
        Ok(Some(match level {
            None => CompressionConfig::new(c),
            Some((name, l)) => i32::try_from(l)
                .ok()
                .and_then(|l| CompressionConfig::with_level(c, l).ok())
                .ok_or_else(|| PropertyError::InvalidValue {
                    name: name.to_owned(),
                    value: format!("\"{l}\""),
                    expected: match c.level_range() {
                        Some(r) => format!("a {} level in {}..={}", c.name(), r.start(), r.end()),
                        None => format!("no level ({} has none)", c.name()),
                    },
                })?,
        }))
    }
}

impl ReaderBuilder {
    /// A reader builder on `transport` with the reader-scope (`R`) properties of `props` applied
    /// (names of the transport and the Writer are skipped). See the
    /// [table](crate::properties). Ranges are checked by [`ReaderBuilder::build`].
    ///
    /// # Errors
    ///
    /// [`PropertyError`]: an unknown or unsupported name, or a bad value (a byte count above
    /// 2^31-1 where the protocol carries an `int32`).
    pub fn from_properties(
        transport: Transport,
        props: &Properties,
    ) -> Result<ReaderBuilder, PropertyError> {
        let mut b = crate::reader::Reader::builder(transport);
        for (name, v) in props.scoped(R)? {
            b = match name {
                "fetch.min.bytes" => b.fetch_min_bytes(count(name, v)?),
                "fetch.max.wait.ms" => b.fetch_max_wait(millis_value(name, v)?),
                "fetch.max.bytes" => b.fetch_max_bytes(count(name, v)?),
                "max.partition.fetch.bytes" => b.max_partition_fetch_bytes(count(name, v)?),
                "queued.max.messages.kbytes" => {
                    let kb: usize = count(name, v)?;
                    b.queued_max_bytes(kb.saturating_mul(1024))
                }
                "max.poll.records" => b.max_poll_records(count(name, v)?),
                "isolation.level" => b.isolation_level(match choice(name, v)? {
                    "read_committed" => IsolationLevel::ReadCommitted,
                    _ => IsolationLevel::ReadUncommitted,
                }),
                "auto.offset.reset" => b.auto_offset_reset(match choice(name, v)? {
                    "earliest" => AutoOffsetReset::Earliest,
                    "latest" => AutoOffsetReset::Latest,
                    _ => AutoOffsetReset::None,
                }),
                "client.rack" => b.client_rack(text(name, v)?),
                "retry.backoff.ms" | "fetch.error.backoff.ms" => {
                    b.retry_backoff(millis_value(name, v)?)
                }
                "retry.backoff.max.ms" => b.retry_backoff_max(millis_value(name, v)?),
                "check.crcs" => b.check_crcs(boolean(name, v)?),
                "enable.metrics.push" => b.enable_metrics_push(boolean(name, v)?),
                _ => b,
            };
        }
        Ok(b)
    }
}

/// An assignor of `partition.assignment.strategy`: librdkafka's name or Java's class name.
fn assignor(name: &str) -> Option<Arc<dyn kafkit_group_balancer::GroupBalancer>> {
    use kafkit_group_balancer::{CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor};
    let short = name.rsplit('.').next().unwrap_or(name);
    Some(match short {
        "range" | "RangeAssignor" => Arc::new(RangeAssignor::new()),
        "roundrobin" | "RoundRobinAssignor" => Arc::new(RoundRobinAssignor::new()),
        "cooperative-sticky" | "CooperativeStickyAssignor" => {
            Arc::new(CooperativeStickyAssignor::new())
        }
        _ => return None,
    })
}

/// The `group.id` among a group member's `settings`, which `builder` needs.
fn group_id<'a>(
    settings: &[(&'static str, Value<'a>)],
    builder: &'static str,
) -> Result<&'a str, PropertyError> {
    settings
        .iter()
        .find(|(n, _)| *n == "group.id")
        .map(|(n, v)| text(n, *v))
        .transpose()?
        .ok_or(PropertyError::Missing {
            name: builder,
            needs: "group.id",
        })
}

impl GroupReaderBuilder {
    /// A group member builder on `transport` with the group-scope (`G`) properties of `props`
    /// applied (`group.id` is the group) and a Reader built with
    /// [`ReaderBuilder::from_properties`] from the same `props`. Names of the transport and the
    /// Writer are skipped. The subscription is not a property: call
    /// [`GroupReaderBuilder::subscribe`]. Ranges are checked by [`GroupReaderBuilder::build`].
    /// See the [table](crate::properties).
    ///
    /// # Errors
    ///
    /// [`PropertyError::Missing`] without `group.id`; an unknown or unsupported name, a bad
    /// value, an unknown assignor in `partition.assignment.strategy`.
    pub fn from_properties(
        transport: Transport,
        props: &Properties,
    ) -> Result<GroupReaderBuilder, PropertyError> {
        let settings = props.scoped(G)?;
        let group = group_id(&settings, "GroupReaderBuilder::from_properties")?;
        let reader = ReaderBuilder::from_properties(transport.clone(), props)?;
        let mut b = crate::group::GroupReader::builder(transport, group).reader(reader);
        for (name, v) in settings {
            b = match name {
                "group.instance.id" => b.group_instance_id(text(name, v)?),
                "group.protocol" => b.group_protocol(match choice(name, v)? {
                    "consumer" => GroupProtocol::Consumer,
                    _ => GroupProtocol::Classic,
                }),
                "group.remote.assignor" => b.group_remote_assignor(text(name, v)?),
                "session.timeout.ms" => b.session_timeout(millis_value(name, v)?),
                "heartbeat.interval.ms" => b.heartbeat_interval(millis_value(name, v)?),
                "max.poll.interval.ms" => b.max_poll_interval(millis_value(name, v)?),
                "enable.auto.commit" => b.enable_auto_commit(boolean(name, v)?),
                "auto.commit.interval.ms" => b.auto_commit_interval(millis_value(name, v)?),
                "enable.metrics.push" => b.enable_metrics_push(boolean(name, v)?),
                "partition.assignment.strategy" => {
                    let list = text(name, v)?;
                    let assignors = list
                        .split(',')
                        .map(str::trim)
                        .filter(|n| !n.is_empty())
                        .map(|n| {
                            assignor(n).ok_or_else(|| PropertyError::InvalidValue {
                                name: name.to_owned(),
                                value: format!("{n:?}"),
                                expected:
                                    "range, roundrobin or cooperative-sticky (comma-separated)"
                                        .into(),
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    b.partition_assignment_strategy(assignors)
                }
                _ => b,
            };
        }
        Ok(b)
    }
}

impl ShareReaderBuilder {
    /// A share group member builder on `transport` with the share-scope (`S`) properties of
    /// `props` applied, Java's `KafkaShareConsumer` names: `group.id` is the group,
    /// `share.acknowledgement.mode`, `share.acquire.mode`, `max.poll.records`,
    /// `max.poll.interval.ms`, the `fetch.*` limits, `client.rack`, `retry.backoff.ms`. Names of
    /// the other scopes (the transport's, a Reader's `auto.offset.reset`, a consumer group's
    /// `session.timeout.ms`...) are skipped: a share group's start offset and isolation level are
    /// the group configs `share.auto.offset.reset` and `share.isolation.level`. The subscription
    /// is not a property: call [`ShareReaderBuilder::topics`]. Ranges are checked by
    /// [`ShareReaderBuilder::build`]. See the [table](crate::properties).
    ///
    /// # Errors
    ///
    /// [`PropertyError::Missing`] without `group.id`; an unknown or unsupported name, a bad
    /// value (a byte or record count above 2^31-1, which the protocol carries as an `int32`).
    pub fn from_properties(
        transport: Transport,
        props: &Properties,
    ) -> Result<ShareReaderBuilder, PropertyError> {
        let settings = props.scoped(S)?;
        let group = group_id(&settings, "ShareReaderBuilder::from_properties")?;
        let mut b = crate::share::ShareReader::builder(transport, group);
        for (name, v) in settings {
            b = match name {
                "share.acknowledgement.mode" => b.acknowledgement_mode(match choice(name, v)? {
                    "explicit" => AcknowledgementMode::Explicit,
                    _ => AcknowledgementMode::Implicit,
                }),
                "share.acquire.mode" => b.acquire_mode(match choice(name, v)? {
                    "record_limit" => ShareAcquireMode::RecordLimit,
                    _ => ShareAcquireMode::BatchOptimized,
                }),
                // An int32 on the wire (ShareFetch's MaxRecords): a larger count is refused
                // here rather than cut to 2^31-1 by the setter.
                "max.poll.records" => {
                    let records: i32 = count(name, v)?;
                    b.max_poll_records(usize::try_from(records).unwrap_or(usize::MAX))
                }
                "max.poll.interval.ms" => b.max_poll_interval(millis_value(name, v)?),
                "fetch.max.wait.ms" => b.fetch_max_wait(millis_value(name, v)?),
                "fetch.min.bytes" => b.fetch_min_bytes(count(name, v)?),
                "fetch.max.bytes" => b.fetch_max_bytes(count(name, v)?),
                "client.rack" => b.client_rack(text(name, v)?),
                "retry.backoff.ms" => b.retry_backoff(millis_value(name, v)?),
                "enable.metrics.push" => b.enable_metrics_push(boolean(name, v)?),
                _ => b,
            };
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Properties {
        pairs.iter().copied().collect()
    }

    /// `enable.metrics.push=false` turns off the KIP-714 engine of the writer, the Reader, the
    /// group member and the share member (their `client_instance_id` says so at once); left out, each has
    /// one (which, with no broker, has no id yet).
    #[tokio::test]
    async fn enable_metrics_push_turns_each_clients_engine_off() {
        use crate::telemetry::TelemetryError;
        let t = Transport::builder(["127.0.0.1:1"]).build().unwrap();
        for push in ["false", "true"] {
            let p = props(&[("enable.metrics.push", push), ("group.id", "g")]);
            p.check().unwrap();
            let w = WriterBuilder::from_properties(t.clone(), &p)
                .unwrap()
                .build()
                .unwrap();
            let g = GroupReaderBuilder::from_properties(t.clone(), &p)
                .unwrap()
                .subscribe(["t"])
                .enable_auto_commit(false)
                .build()
                .unwrap();
            let s = ShareReaderBuilder::from_properties(t.clone(), &p)
                .unwrap()
                .topics(["t"])
                .build()
                .unwrap();
            let r = ReaderBuilder::from_properties(t.clone(), &p)
                .unwrap()
                .build()
                .unwrap();
            let expected = if push == "false" {
                TelemetryError::Disabled
            } else {
                TelemetryError::Timeout {
                    timeout: Duration::ZERO,
                }
            };
            for got in [
                w.client_instance_id(Duration::ZERO).await,
                g.client_instance_id(Duration::ZERO).await,
                s.client_instance_id(Duration::ZERO).await,
                r.client_instance_id(Duration::ZERO).await,
            ] {
                match got {
                    Err(crate::Error::Telemetry(e)) => assert_eq!(e, expected, "push={push}"),
                    other => panic!("push={push}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn transactional_names_configure_the_writer() {
        let p = props(&[
            ("transactional.id", "orders-tx"),
            ("transaction.timeout.ms", "15000"),
        ]);
        p.check().unwrap();
        let t = Transport::builder(["127.0.0.1:1"]).build().unwrap();
        let c = WriterBuilder::from_properties(t, &p)
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(c.transactional_id.as_deref(), Some("orders-tx"));
        assert_eq!(c.transaction_timeout_ms, 15_000);
        assert!(c.idempotent && c.idempotence_explicit);
    }

    #[test]
    fn transport_needs_bootstrap_and_reads_its_settings() {
        assert!(matches!(
            TransportBuilder::from_properties(&props(&[("linger.ms", "5")])),
            Err(PropertyError::Missing {
                needs: "bootstrap.servers",
                ..
            })
        ));
        let p = props(&[
            ("bootstrap.servers", "127.0.0.1:9092"),
            ("client.id", "cli"),
            ("request.timeout.ms", "1234"),
            ("default.api.timeout.ms", "4321"),
            ("metadata.recovery.strategy", "NONE"),
            ("unstable.api.versions.enable", "true"),
            ("linger.ms", "5"),
            ("fetch.min.bytes", "10"),
        ]);
        let t = TransportBuilder::from_properties(&p)
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(t.dialer().client_id(), "cli");
        assert_eq!(t.dialer().request_timeout(), Duration::from_millis(1234));
        assert_eq!(t.default_api_timeout(), Duration::from_millis(4321));
        assert_eq!(
            t.metadata_recovery_strategy(),
            crate::transport::MetadataRecoveryStrategy::None
        );
        assert!(t.dialer().unstable_api_versions());
        let bad = props(&[
            ("bootstrap.servers", "127.0.0.1:9092"),
            ("metadata.recovery.strategy", "sometimes"),
        ]);
        assert!(matches!(
            TransportBuilder::from_properties(&bad),
            Err(PropertyError::InvalidValue { .. })
        ));
    }

    #[tokio::test]
    async fn writer_and_reader_read_their_settings() {
        let t = Transport::builder(["127.0.0.1:9"]).build().unwrap();
        let p = props(&[
            ("compression.type", "zstd"),
            ("compression.zstd.level", "99"),
        ]);
        let e = WriterBuilder::from_properties(t.clone(), &p).unwrap_err();
        assert!(
            matches!(&e, PropertyError::InvalidValue { name, .. } if name == "compression.zstd.level"),
            "{e:?}"
        );
        let p = props(&[
            ("bootstrap.servers", "x:1"),
            ("acks", "1"),
            ("linger.ms", "0"),
            ("compression.type", "gzip"),
            ("compression.level", "3"),
            ("fetch.max.wait.ms", "50"),
        ]);
        let w = WriterBuilder::from_properties(t.clone(), &p)
            .unwrap()
            .build()
            .unwrap();
        drop(w);
        let r =
            ReaderBuilder::from_properties(t.clone(), &props(&[("fetch.max.bytes", "4294967296")]))
                .unwrap_err();
        assert!(matches!(r, PropertyError::InvalidValue { .. }), "{r:?}");
        let r = ReaderBuilder::from_properties(t, &p)
            .unwrap()
            .build()
            .unwrap();
        drop(r);
    }

    #[tokio::test]
    async fn group_members_read_their_settings() {
        let t = Transport::builder(["127.0.0.1:9092"]).build().unwrap();
        let e = GroupReaderBuilder::from_properties(t.clone(), &props(&[("linger.ms", "5")]))
            .unwrap_err();
        assert!(
            matches!(
                e,
                PropertyError::Missing {
                    needs: "group.id",
                    ..
                }
            ),
            "{e}"
        );
        let p = props(&[
            ("group.id", "g"),
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "300"),
            ("enable.auto.commit", "false"),
            (
                "partition.assignment.strategy",
                "org.apache.kafka.clients.consumer.RangeAssignor, cooperative-sticky",
            ),
            ("group.protocol", "classic"),
            ("fetch.max.wait.ms", "50"),
            ("linger.ms", "5"),
        ]);
        let b = GroupReaderBuilder::from_properties(t.clone(), &p).unwrap();
        let dbg = format!("{b:?}");
        assert!(dbg.contains("session_timeout: 6s"), "{dbg}");
        assert!(dbg.contains("heartbeat_interval: 300ms"), "{dbg}");
        assert!(dbg.contains("enable_auto_commit: false"), "{dbg}");
        assert!(dbg.contains(r#"["range", "cooperative-sticky"]"#), "{dbg}");
        b.subscribe(["t"]).build().expect("a valid member");
        let e = GroupReaderBuilder::from_properties(
            t.clone(),
            &props(&[
                ("group.id", "g"),
                ("partition.assignment.strategy", "sticky-ish"),
            ]),
        )
        .unwrap_err();
        assert!(matches!(e, PropertyError::InvalidValue { .. }), "{e}");
        let e = props(&[("group.protocol", "gossip")]).check().unwrap_err();
        assert!(e.to_string().contains("classic, consumer"), "{e}");
        // Group names are skipped by the other builders.
        let _ = WriterBuilder::from_properties(t.clone(), &p).expect("writer skips group names");
        let _ = TransportBuilder::from_properties(&props(&[
            ("bootstrap.servers", "h:1"),
            ("group.id", "g"),
        ]))
        .expect("transport skips group names");
    }

    #[tokio::test]
    async fn share_members_read_their_settings() {
        let t = Transport::builder(["127.0.0.1:9092"]).build().unwrap();
        let e = ShareReaderBuilder::from_properties(t.clone(), &props(&[("linger.ms", "5")]))
            .unwrap_err();
        assert!(
            matches!(
                e,
                PropertyError::Missing {
                    name: "ShareReaderBuilder::from_properties",
                    needs: "group.id",
                }
            ),
            "{e}"
        );
        // The defaults: Java's KafkaShareConsumer's.
        let c =
            ShareReaderBuilder::from_properties(t.clone(), &props(&[("group.id", "q")])).unwrap();
        let c = c.config();
        assert_eq!(c.group_id, "q");
        assert_eq!(c.acknowledgement_mode, AcknowledgementMode::Implicit);
        assert_eq!(c.acquire_mode, ShareAcquireMode::BatchOptimized);
        assert_eq!(c.max_poll_records, 500);
        let p = props(&[
            ("bootstrap.servers", "h:1"),
            ("group.id", "q"),
            ("share.acknowledgement.mode", "EXPLICIT"),
            ("share.acquire.mode", "record_limit"),
            ("max.poll.records", "7"),
            ("max.poll.interval.ms", "60000"),
            ("fetch.wait.max.ms", "50"),
            ("fetch.min.bytes", "10"),
            ("fetch.max.bytes", "1048576"),
            ("client.rack", "r1"),
            ("retry.backoff.ms", "250"),
            // Other scopes' names are skipped: a producer's, a Reader's, a consumer group's.
            ("linger.ms", "5"),
            ("auto.offset.reset", "earliest"),
            ("isolation.level", "read_committed"),
            ("session.timeout.ms", "6000"),
        ]);
        let b = ShareReaderBuilder::from_properties(t.clone(), &p).unwrap();
        let c = b.config();
        assert_eq!(c.group_id, "q");
        assert_eq!(c.acknowledgement_mode, AcknowledgementMode::Explicit);
        assert_eq!(c.acquire_mode, ShareAcquireMode::RecordLimit);
        assert_eq!(c.max_poll_records, 7);
        assert_eq!(c.max_poll_interval, Duration::from_secs(60));
        assert_eq!(c.fetch_max_wait, Duration::from_millis(50));
        assert_eq!((c.fetch_min_bytes, c.fetch_max_bytes), (10, 1_048_576));
        assert_eq!(c.client_rack.as_deref(), Some("r1"));
        assert_eq!(c.retry_backoff, Duration::from_millis(250));
        b.topics(["t"]).build().expect("a valid member");
        // Bad values fail typed: a word not in the choice, a count the protocol cannot carry.
        for (k, v) in [
            ("share.acknowledgement.mode", "sometimes"),
            ("share.acquire.mode", "greedy"),
            ("max.poll.records", "2147483648"),
            ("fetch.max.bytes", "-1"),
            ("max.poll.interval.ms", "5s"),
        ] {
            let e = ShareReaderBuilder::from_properties(
                t.clone(),
                &props(&[("group.id", "q"), (k, v)]),
            )
            .unwrap_err();
            assert!(
                matches!(&e, PropertyError::InvalidValue { name, .. } if name == k),
                "{k}={v}: {e:?}"
            );
        }
        let e = props(&[("share.acquire.mode", "greedy")])
            .check()
            .unwrap_err();
        assert!(
            e.to_string().contains("batch_optimized, record_limit"),
            "{e}"
        );
        // Unknown names are refused, with the name meant.
        let e = ShareReaderBuilder::from_properties(
            t.clone(),
            &props(&[("group.id", "q"), ("share.acknowledgment.mode", "explicit")]),
        )
        .unwrap_err();
        assert!(
            matches!(
                &e,
                PropertyError::Unknown {
                    suggestion: Some("share.acknowledgement.mode"),
                    ..
                }
            ),
            "{e:?}"
        );
        // Share names are skipped by the other builders.
        let _ = GroupReaderBuilder::from_properties(t.clone(), &p).expect("group skips them");
        let _ = ReaderBuilder::from_properties(t.clone(), &p).expect("reader skips them");
        let _ = WriterBuilder::from_properties(t.clone(), &p).expect("writer skips them");
        let _ = TransportBuilder::from_properties(&p).expect("transport skips them");
    }
}
