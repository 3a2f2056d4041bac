//! Apache Kafka wire protocol (placeholder; being built).
pub mod records;
