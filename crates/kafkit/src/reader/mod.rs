//! The Reader: a consumer of explicitly assigned partitions.

pub(crate) mod aborted;
