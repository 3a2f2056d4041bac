//! Topic operations: create, delete, list and describe topics, create partitions.
