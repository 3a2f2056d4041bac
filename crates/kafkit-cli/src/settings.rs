//! The `-X` names in the user's words: `-X list` (kcat's) prints every name with its default
//! and unit, from kafkit's own table (`kafkit::properties::PROPERTIES`), and a setting the
//! client's builders refuse is named by its Java / librdkafka property, with the fix.

use kafkit::properties::{PROPERTIES, PropertyError, PropertyKind, PropertyScope};

use crate::out::Table;

/// The CLI's own defaults where they differ from the library's: (name, value).
const CLI_DEFAULTS: &[(&str, &str)] = &[
    ("client.id", "kafkit-cli"),
    ("socket.connection.setup.timeout.ms", "10000 (--timeout)"),
    ("default.api.timeout.ms", "10000 (--timeout)"),
    ("request.timeout.ms", "10000 (--timeout)"),
];

/// Names a Java client's `client.properties` (or a librdkafka config) usually carries that
/// change nothing kafkit does: serializers (kafkit takes and prints bytes), DNS and version
/// probing it does its own way, metrics reporters. In a `-F` file each is warned about once
/// and left out, instead of refusing the file; any other unknown name stays refused.
pub const IGNORED_IN_FILES: &[&str] = &[
    "key.serializer",
    "value.serializer",
    "key.deserializer",
    "value.deserializer",
    "client.dns.lookup",
    "api.version.request",
    "api.version.fallback.ms",
    "broker.version.fallback",
    "metric.reporters",
    "metrics.num.samples",
    "metrics.sample.window.ms",
    "metrics.recording.level",
    "auto.include.jmx.reporter",
];

/// Every `-X` name as a table: name (aliases), default, unit, what it configures, values.
pub fn list() -> String {
    let mut t = Table::new(&["NAME", "DEFAULT", "UNIT", "FOR", "VALUES"]);
    for info in PROPERTIES {
        if info.name == "partitioner" {
            // The CLI takes librdkafka's names (below); Java's class names it cannot load.
            t.row(vec![
                "partitioner.class".into(),
                String::new(),
                String::new(),
                "produce".into(),
                "not supported (a Java class): use -X partitioner=NAME".into(),
            ]);
            continue;
        }
        let name = if info.aliases.is_empty() {
            info.name.to_owned()
        } else {
            format!("{} ({})", info.name, info.aliases.join(", "))
        };
        let default = CLI_DEFAULTS
            .iter()
            .find(|(n, _)| *n == info.name)
            .map_or(info.default, |(_, v)| *v);
        let scopes: Vec<&str> = info
            .scopes
            .iter()
            .map(|s| match s {
                PropertyScope::Transport => "connection",
                PropertyScope::Writer => "produce",
                PropertyScope::Reader => "consume",
                PropertyScope::Group => "consume -G",
                PropertyScope::Share => "consume --share-group",
                _ => "?",
            })
            .collect();
        let values = match info.kind {
            PropertyKind::Millis => "0..".to_owned(),
            PropertyKind::Count => "0..".to_owned(),
            PropertyKind::Integer => "an integer".to_owned(),
            PropertyKind::Bool => "true, false".to_owned(),
            PropertyKind::Choice(words) => words
                .iter()
                .map(|w| match w.split_once('|') {
                    Some((main, other)) => format!("{main} ({})", other.replace('|', ", ")),
                    None => (*w).to_owned(),
                })
                .collect::<Vec<_>>()
                .join(", "),
            PropertyKind::Secret => "text (never shown)".to_owned(),
            PropertyKind::Unsupported(why) => format!("not supported: {}", in_cli_words(why)),
            _ => "text".to_owned(),
        };
        t.row(vec![
            name,
            default.to_owned(),
            info.unit.to_owned(),
            scopes.join(", "),
            values,
        ]);
    }
    let names: Vec<&str> = crate::partitioner::NAMES.iter().map(|(n, _)| *n).collect();
    t.row(vec![
        "partitioner".into(),
        crate::partitioner::DEFAULT.into(),
        String::new(),
        "produce".into(),
        names.join(", "),
    ]);
    t.row(vec![
        "debug".into(),
        "(none)".into(),
        String::new(),
        "-v".into(),
        "broker, metadata, protocol, msg, producer, fetch, consumer, cgrp, eos, security, \
         admin, all"
            .into(),
    ]);
    t.render()
}

/// What the CLI offers instead of a library API a reason names.
fn in_cli_words(why: &str) -> String {
    if why.contains("WriterBuilder::balancer") {
        "use -X partitioner=NAME or produce --partitioner NAME".to_owned()
    } else if let Some(at) = why.find("; give a kafkit::") {
        why[..at].to_owned()
    } else {
        why.to_owned()
    }
}

/// A `-X` name or value the table refuses, with what to do about it.
pub fn property_error(e: &PropertyError) -> String {
    match e {
        PropertyError::Unsupported { name, reason } => {
            format!(
                "property {name:?} is not supported: {}",
                in_cli_words(reason)
            )
        }
        PropertyError::Unknown { .. } => format!("{e}; `kafkit -X list` lists every name"),
        e => e.to_string(),
    }
}

/// The builder setting names of the client's range checks (`batch_size`, `heartbeat_interval`)
/// and the Java / librdkafka property a user sets them with, longest first (so that
/// `retry_backoff_max` is read before `retry_backoff`).
const BUILDER_NAMES: &[(&str, &str)] = &[
    (
        "max_in_flight_requests_per_connection",
        "max.in.flight.requests.per.connection",
    ),
    ("max_partition_fetch_bytes", "max.partition.fetch.bytes"),
    (
        "partition_assignment_strategy",
        "partition.assignment.strategy",
    ),
    ("auto_commit_interval", "auto.commit.interval.ms"),
    ("auto_offset_reset", "auto.offset.reset"),
    ("max_buffered_records", "queue.buffering.max.messages"),
    ("transaction_timeout", "transaction.timeout.ms"),
    ("heartbeat_interval", "heartbeat.interval.ms"),
    ("enable_idempotence", "enable.idempotence"),
    ("retry_backoff_max", "retry.backoff.max.ms"),
    ("batch_max_records", "batch.num.messages"),
    ("max_poll_interval", "max.poll.interval.ms"),
    ("group_instance_id", "group.instance.id"),
    ("delivery_timeout", "delivery.timeout.ms"),
    ("metadata_max_age", "metadata.max.age.ms"),
    ("max_request_size", "max.request.size"),
    ("transactional_id", "transactional.id"),
    ("max_poll_records", "max.poll.records"),
    ("queued_max_bytes", "queued.max.messages.kbytes"),
    ("request_timeout", "request.timeout.ms"),
    ("session_timeout", "session.timeout.ms"),
    ("fetch_max_bytes", "fetch.max.bytes"),
    ("fetch_min_bytes", "fetch.min.bytes"),
    ("fetch_max_wait", "fetch.max.wait.ms"),
    ("buffer_memory", "buffer.memory"),
    ("retry_backoff", "retry.backoff.ms"),
    ("batch_size", "batch.size"),
    ("max_block", "max.block.ms"),
    ("group_id", "group.id"),
    ("linger", "linger.ms"),
];

/// A builder's range or conflict message (`batch_size = 10 bytes is out of range: ...`,
/// `enable_idempotence(true) needs acks = all`) with the Java / librdkafka names a `-X`
/// takes, and the fix: the first property named, to be given another value.
pub fn in_java_words(msg: &str) -> String {
    let mut out = msg
        .trim_start_matches("reader: ")
        .trim_start_matches("group: ")
        .replace("(true)", "=true")
        .replace("acks = all", "acks=all");
    let mut first: Option<(usize, &str)> = None;
    for (builder, java) in BUILDER_NAMES {
        let mut at = 0;
        while let Some(i) = out[at..].find(builder) {
            let i = at + i;
            let end = i + builder.len();
            let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            if word(out[..i].chars().next_back()) || word(out[end..].chars().next()) {
                at = end;
                continue;
            }
            out.replace_range(i..end, java);
            if first.is_none_or(|(f, _)| i < f) {
                first = Some((i, java));
            }
            at = i + java.len();
        }
    }
    match first {
        Some(_) if out.starts_with("conflicting settings") => {
            format!("{out}: change one of them (-X NAME=VALUE)")
        }
        Some((_, java)) => format!("{out}: give another -X {java}=VALUE"),
        None => out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_names_become_java_names_with_the_fix() {
        assert_eq!(
            in_java_words("batch_size = 10 bytes is out of range: 1024..=1073741824"),
            "batch.size = 10 bytes is out of range: 1024..=1073741824: give another -X \
             batch.size=VALUE"
        );
        assert_eq!(
            in_java_words(
                "group: heartbeat_interval must be at least 1 ms and below session_timeout"
            ),
            "heartbeat.interval.ms must be at least 1 ms and below session.timeout.ms: give \
             another -X heartbeat.interval.ms=VALUE"
        );
        assert_eq!(
            in_java_words("conflicting settings: enable_idempotence(true) needs acks = all"),
            "conflicting settings: enable.idempotence=true needs acks=all: change one of them \
             (-X NAME=VALUE)"
        );
        assert_eq!(
            in_java_words("retry_backoff_max must be retry_backoff..=1 h"),
            "retry.backoff.max.ms must be retry.backoff.ms..=1 h: give another -X \
             retry.backoff.max.ms=VALUE"
        );
        assert_eq!(in_java_words("nothing to map"), "nothing to map");
    }

    #[test]
    fn the_list_has_every_name_with_its_default_and_unit() {
        let list = list();
        for info in PROPERTIES {
            assert!(list.contains(info.name), "{}", info.name);
        }
        let line = |name: &str| {
            list.lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing"))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(line("linger.ms").contains("5 ms produce"), "{list}");
        assert!(line("client.id").contains("kafkit-cli"), "{list}");
        assert!(line("partitioner").contains("consistent_random"), "{list}");
        assert!(
            line("share.acknowledgement.mode").contains("implicit consume --share-group"),
            "{list}"
        );
        assert!(
            line("max.poll.records").contains("500 records consume, consume --share-group"),
            "{list}"
        );
    }
}
