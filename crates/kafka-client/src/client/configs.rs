//! Config operations: describe configs, alter configs (legacy), incremental alter configs.
