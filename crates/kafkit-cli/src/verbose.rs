//! `-v` / `-vv` / `-X debug=...`: the kafkit client's `tracing` events on stderr. librdkafka's
//! `debug` contexts are mapped to the client's modules where one fits (`broker`: connections
//! and the dialer; `protocol`: every request and answer, at TRACE; `cgrp`: the group member;
//! `fetch`: the reader; `msg`: the writer; `eos`: transactions...); `all` is everything.

use tracing_subscriber::EnvFilter;

/// The client's module targets (tracing filter directives) for a librdkafka `debug` context;
/// `None` for a name librdkafka has that kafkit has no counterpart of, `Err` for one it does
/// not have.
fn context(name: &str) -> Result<Option<&'static [&'static str]>, String> {
    Ok(Some(match name {
        "all" => &["kafkit=trace"],
        "generic" => &["kafkit=debug"],
        "broker" => &[
            "kafkit::conn=debug",
            "kafkit::dialer=debug",
            "kafkit::transport=debug",
        ],
        "topic" | "metadata" => &["kafkit::transport=debug", "kafkit::conn::metadata=debug"],
        "protocol" => &["kafkit::conn=trace", "kafkit::transport=trace"],
        "msg" | "producer" | "queue" => &["kafkit::writer=debug"],
        "fetch" => &["kafkit::reader=debug"],
        "consumer" => &["kafkit::reader=debug", "kafkit::group=debug"],
        "cgrp" | "assignor" => &["kafkit::group=debug"],
        "eos" => &["kafkit::writer::txn=debug", "kafkit::transact=debug"],
        "security" => &[
            "kafkit::tls=debug",
            "kafkit::conn=debug",
            "kafkit::dialer=debug",
        ],
        "admin" => &["kafkit::admin=debug"],
        "feature" => &["kafkit::conn=debug"],
        "interceptor" | "plugin" | "mock" | "conf" | "telemetry" => return Ok(None),
        other => {
            return Err(format!(
                "-X debug={other}: unknown debug context (librdkafka's names: all, generic, \
                 broker, topic, metadata, protocol, msg, producer, queue, fetch, consumer, cgrp, \
                 assignor, eos, security, admin, feature)"
            ));
        }
    }))
}

/// The filter for `-v` counted `verbose` times and `-X debug=contexts`; `None` when neither
/// asks for anything.
pub fn filter(verbose: u8, debug: Option<&str>) -> Result<Option<String>, String> {
    let mut directives: Vec<&str> = match verbose {
        0 => Vec::new(),
        1 => vec!["kafkit=debug"],
        _ => vec!["kafkit=trace"],
    };
    for name in debug.unwrap_or_default().split(',').map(str::trim) {
        if name.is_empty() {
            continue;
        }
        if let Some(targets) = context(name)? {
            directives.extend(targets);
        }
    }
    if directives.is_empty() {
        return Ok(None);
    }
    Ok(Some(format!("warn,{}", directives.join(","))))
}

/// Installs the stderr subscriber when `-v`, `-X debug=` or `RUST_LOG` asks for one.
///
/// # Errors
///
/// An unknown `debug` context (a usage error).
pub fn install(verbose: u8, debug: Option<String>) -> Result<(), String> {
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let directives = match from_env {
        Some(v) => Some(v),
        None => filter(verbose, debug.as_deref())?,
    };
    let Some(directives) = directives else {
        return Ok(());
    };
    let filter = EnvFilter::try_new(&directives).map_err(|e| format!("{directives:?}: {e}"))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init()
        .map_err(|e| format!("cannot install the tracing subscriber: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v_and_debug_contexts_map_to_the_client_modules() {
        assert_eq!(filter(0, None), Ok(None));
        assert_eq!(filter(1, None), Ok(Some("warn,kafkit=debug".into())));
        assert_eq!(filter(3, None), Ok(Some("warn,kafkit=trace".into())));
        assert_eq!(
            filter(0, Some("cgrp,fetch")),
            Ok(Some("warn,kafkit::group=debug,kafkit::reader=debug".into()))
        );
        assert_eq!(filter(0, Some("plugin")), Ok(None));
        assert!(
            filter(0, Some("brokers"))
                .unwrap_err()
                .contains("unknown debug context")
        );
    }
}
