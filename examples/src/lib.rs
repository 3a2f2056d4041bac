//! The examples' one shared piece, [`bootstrap`], and the README examples as doc tests: this
//! package depends on `kafkit` and `tokio` only, so they compile the way a user's project would.
//!
//! Run an example against a local broker (`cargo xtask broker start` listens on 127.0.0.1:19092):
//!
//! ```sh
//! cargo run -p kafkit-examples --example produce -- --bootstrap 127.0.0.1:19092
//! KAFKIT_BOOTSTRAP=127.0.0.1:19092 cargo run -p kafkit-examples --example admin
//! ```

/// Where `cargo xtask broker start` runs its broker.
pub const DEFAULT_BOOTSTRAP: &str = "127.0.0.1:19092";

/// The bootstrap address(es) of the cluster, comma-separated `host:port`: the value after
/// `--bootstrap` on the command line, else the `KAFKIT_BOOTSTRAP` environment variable, else
/// [`DEFAULT_BOOTSTRAP`].
pub fn bootstrap() -> Vec<String> {
    let args: Vec<String> = std::env::args().collect();
    let list = args
        .iter()
        .position(|a| a == "--bootstrap")
        .and_then(|i| args.get(i + 1).cloned())
        .or_else(|| std::env::var("KAFKIT_BOOTSTRAP").ok())
        .unwrap_or_else(|| DEFAULT_BOOTSTRAP.to_owned());
    list.split(',')
        .map(|a| a.trim().to_owned())
        .filter(|a| !a.is_empty())
        .collect()
}

/// The repository README's example, compiled by `cargo test --doc` with only this package's
/// dependencies (kafkit, tokio).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct RootReadme;

/// The `kafkit` crate's README example (what crates.io shows), compiled the same way.
#[cfg(doctest)]
#[doc = include_str!("../../crates/kafkit/README.md")]
pub struct KafkitReadme;
