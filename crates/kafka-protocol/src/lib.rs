//! Apache Kafka wire protocol (placeholder; being built).
