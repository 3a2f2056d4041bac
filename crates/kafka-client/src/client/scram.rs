//! SCRAM credential operations: describe and alter user SCRAM credentials.
