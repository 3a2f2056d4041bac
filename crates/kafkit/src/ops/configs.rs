//! Config vocabulary shared by CreateTopics (which answers a new topic's configs, KIP-525) and
//! DescribeConfigs: one config entry, its synonyms, where its value comes from and its type.
//! Imports only `crate::ops` and the leaf crates.

use super::wire_enum;

wire_enum! {
    /// Where a config value comes from (`ConfigEntry.ConfigSource`, DescribeConfigs v1+).
    pub enum ConfigSource: i8 {
        /// Not sent, or not known to this library.
        Unknown = 0,
        /// A dynamic topic config set for this topic.
        DynamicTopicConfig = 1,
        /// A dynamic broker config set for this broker.
        DynamicBrokerConfig = 2,
        /// A dynamic broker config set as the cluster-wide default.
        DynamicDefaultBrokerConfig = 3,
        /// A broker config from `server.properties`.
        StaticBrokerConfig = 4,
        /// The built-in default.
        DefaultConfig = 5,
        /// A dynamic broker logger level (KIP-412).
        DynamicBrokerLoggerConfig = 6,
        /// A client metrics config (KIP-714).
        ClientMetricsConfig = 7,
        /// A dynamic group config (KIP-848).
        GroupConfig = 8,
    }
}

wire_enum! {
    /// The type of a config's value (DescribeConfigs v3+, KIP-569).
    pub enum ConfigType: i8 {
        /// Not sent, or not known to this library.
        Unknown = 0,
        /// `true` / `false`.
        Boolean = 1,
        /// A string.
        String = 2,
        /// A 32-bit integer.
        Int = 3,
        /// A 16-bit integer.
        Short = 4,
        /// A 64-bit integer.
        Long = 5,
        /// A floating point number.
        Double = 6,
        /// A comma-separated list.
        List = 7,
        /// A Java class name.
        Class = 8,
        /// A password (its value is never returned).
        Password = 9,
    }
}

/// Another value of a config, from a source with lower precedence (DescribeConfigs v1+ with
/// `include_synonyms`, KIP-226).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigSynonym {
    /// The config name at that source (e.g. `log.retention.ms` for `retention.ms`).
    pub name: String,
    /// The value, `None` when sensitive or unset.
    pub value: Option<String>,
    /// The source.
    pub source: ConfigSource,
}

/// One config of a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigEntry {
    /// The config name, e.g. `retention.ms`.
    pub name: String,
    /// The value; `None` for sensitive configs (passwords) and unset ones.
    pub value: Option<String>,
    /// Where the value comes from (`Unknown` with DescribeConfigs v0).
    pub source: ConfigSource,
    /// Whether the value is the built-in default.
    pub is_default: bool,
    /// Whether the config cannot be changed dynamically.
    pub is_read_only: bool,
    /// Whether the value is sensitive (never returned).
    pub is_sensitive: bool,
    /// Values from other sources, highest precedence first (with `include_synonyms`).
    pub synonyms: Vec<ConfigSynonym>,
    /// The value's type (v3+).
    pub config_type: ConfigType,
    /// The config's documentation (v3+ with `include_documentation`).
    pub documentation: Option<String>,
}
