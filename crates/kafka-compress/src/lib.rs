//! Kafka compression codecs (placeholder; being built).
