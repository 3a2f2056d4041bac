//! Shared helpers for the integration tests (placeholder; being built).
