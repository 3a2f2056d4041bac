//! The Java client's side of the share bench: the Java peer (`peers/java`, kafka-clients 4.4)
//! run as `java -cp CP kafkit.peer.Main share-bench ...`, one `KafkaShareConsumer` in implicit
//! mode that measures the same window as ours (System.nanoTime and the JVM's process CPU time)
//! and prints one JSON line, `{"event":"share-bench",...}`.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::{ShareRun, ShareWorkload};

/// Environment variable naming the `java` program (default: `java` on PATH), as for the tests.
pub const JAVA_ENV: &str = "KAFKIT_JAVA";

/// Runs the peer on the workload and reads its result line.
///
/// Errors: a message when `java` cannot be started, exits non-zero (the peer's `error` event is
/// in the message), or prints no `share-bench` event.
pub fn run(w: &ShareWorkload, class_path: &str, java_opts: &[String]) -> Result<ShareRun, String> {
    let java = std::env::var(JAVA_ENV).unwrap_or_else(|_| "java".to_string());
    let out = Command::new(&java)
        .args(java_opts)
        .arg("-cp")
        .arg(class_path)
        .args(["kafkit.peer.Main", "share-bench"])
        .args(w.to_args())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("start {java}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "the java run failed ({}): {}",
            out.status,
            stdout.trim()
        ));
    }
    let line = stdout
        .lines()
        .find(|l| l.contains(r#""event":"share-bench""#))
        .ok_or_else(|| format!("the java run printed no result: {}", stdout.trim()))?;
    let num = |key: &str| {
        field(line, key).ok_or_else(|| format!("no numeric {key} in the java result: {line}"))
    };
    Ok(ShareRun {
        records: num("records")?,
        wall: Duration::from_nanos(num("wall_ns")?),
        cpu: Duration::from_nanos(num("cpu_ns")?),
        cpu_split: None,
        polls: num("polls")?,
        bad: num("bad")?,
        redelivered: num("redelivered")?,
        to_first: Duration::from_millis(num("to_first_ms")?),
        share_fetches: field(line, "share_fetches"),
        share_acknowledges: None,
        broker_cpu: field(line, "broker_cpu_ms").map(Duration::from_millis),
    })
}

/// The non-negative integer `"key":N` in a flat JSON object (the peer writes numbers bare;
/// a metric it could not read is -1, which reads as `None`).
fn field(line: &str, key: &str) -> Option<u64> {
    let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    let digits: String = line[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    // A metric is a double (`123.0`): its integer part.
    digits.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn reads_the_peers_fields() {
        let line = r#"{"event":"share-bench","records":1000,"wall_ns":12345,"polls":2,"share_fetches":17.0,"bad":-1}"#;
        assert_eq!(field(line, "records"), Some(1000));
        assert_eq!(field(line, "wall_ns"), Some(12345));
        assert_eq!(field(line, "share_fetches"), Some(17));
        assert_eq!(field(line, "bad"), None);
        assert_eq!(field(line, "missing"), None);
    }
}
