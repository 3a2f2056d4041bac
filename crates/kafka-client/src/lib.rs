//! Kafka client (placeholder; being built).
