//! Connections to one broker.

// Used by `Conn` (next step); allowed until then.
#[allow(dead_code)]
pub(crate) mod core;
