//! Client quota operations: describe and alter client quotas.
