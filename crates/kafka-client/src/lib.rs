//! An async Apache Kafka client modelled on Go's kafka-go: a [`Dialer`] opens a [`Conn`] to one
//! broker; a `Conn` pipelines requests (several in flight, matched by correlation id).

mod conn;
mod error;

pub use error::{CloseCause, Error, Result};
