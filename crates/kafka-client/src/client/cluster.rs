//! Cluster operations: describe cluster, describe/update features, describe log dirs, elect
//! leaders.
