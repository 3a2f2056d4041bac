//! ACL operations: describe, create and delete ACL bindings.
