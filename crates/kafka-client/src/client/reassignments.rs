//! Partition reassignment operations: list and alter partition reassignments.
