//! Config operations: describe configs, alter configs (legacy), incremental alter configs, list
//! config resources.
//!
//! DescribeConfigs (key 32, KIP-4, synonyms KIP-226, documentation KIP-569), AlterConfigs
//! (key 33, replaces a resource's whole dynamic config; deprecated by KIP-339) and
//! IncrementalAlterConfigs (key 44, KIP-339: SET, DELETE, APPEND, SUBTRACT per config).
//! ListConfigResources (key 74, KIP-1142; v0 was ListClientMetricsResources, KIP-714) lists the
//! resources that have configs. Broker and broker-logger resources naming a broker id are answered by that broker; other
//! resources by any broker (the controller for topics).

use std::collections::BTreeMap;

use kafkit_protocol::Request;
use kafkit_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ListConfigResourcesRequest,
    ListConfigResourcesResponse, alter_configs_request, describe_configs_request,
    incremental_alter_configs_request,
};
use tokio::task::JoinSet;

use super::Client;
use crate::error::{Error, Result};
use crate::ops::configs::{ConfigEntry, ConfigSource, ConfigSynonym, ConfigType};
use crate::ops::{
    ResourceResult, check_distinct, code_result, error_for_each, in_order, unsupported_from,
    wire_enum,
};

wire_enum! {
    /// The kind of resource a config belongs to (`ConfigResource.Type` of the Java client).
    pub enum ConfigResourceType: i8 {
        /// A type this library or the broker does not know.
        Unknown = 0,
        /// A topic; its name is the topic name.
        Topic = 2,
        /// A broker; its name is the broker id, or empty for the cluster-wide default.
        Broker = 4,
        /// A broker's log4j loggers (KIP-412); its name is the broker id.
        BrokerLogger = 8,
        /// Client metrics subscriptions (KIP-714).
        ClientMetrics = 16,
        /// A consumer or share group (KIP-848, KIP-932).
        Group = 32,
    }
}

wire_enum! {
    /// How an [`AlterConfigOp`] changes a config (IncrementalAlterConfigs, KIP-339).
    pub enum AlterConfigOpType: i8 {
        /// Sets the value.
        Set = 0,
        /// Removes the dynamic value (back to the default).
        Delete = 1,
        /// Adds the value to a list config.
        Append = 2,
        /// Removes the value from a list config.
        Subtract = 3,
    }
}

/// A resource that has configs: a topic, a broker, a broker's loggers...
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub struct ConfigResource {
    /// The kind of resource.
    pub resource_type: ConfigResourceType,
    /// Its name: the topic name, the broker id in decimal, empty for the cluster-wide broker
    /// default.
    pub name: String,
}

impl ConfigResource {
    /// A resource of any type.
    pub fn new(resource_type: ConfigResourceType, name: impl Into<String>) -> ConfigResource {
        ConfigResource {
            resource_type,
            name: name.into(),
        }
    }

    /// The topic `name`.
    pub fn topic(name: impl Into<String>) -> ConfigResource {
        ConfigResource::new(ConfigResourceType::Topic, name)
    }

    /// The broker with node id `node_id` (answered by that broker).
    pub fn broker(node_id: i32) -> ConfigResource {
        ConfigResource::new(ConfigResourceType::Broker, node_id.to_string())
    }

    /// The cluster-wide default of broker configs (empty name).
    pub fn broker_default() -> ConfigResource {
        ConfigResource::new(ConfigResourceType::Broker, "")
    }

    /// The log4j loggers of broker `node_id` (KIP-412).
    pub fn broker_logger(node_id: i32) -> ConfigResource {
        ConfigResource::new(ConfigResourceType::BrokerLogger, node_id.to_string())
    }

    /// The broker that must answer for this resource: the id of a broker or broker-logger
    /// resource, `None` for the others (and for the cluster-wide default).
    pub(crate) fn node(&self) -> Option<i32> {
        match self.resource_type {
            ConfigResourceType::Broker | ConfigResourceType::BrokerLogger => self.name.parse().ok(),
            _ => None,
        }
    }

    fn key(&self) -> (i8, String) {
        (self.resource_type.code(), self.name.clone())
    }
}

/// Options of [`Client::describe_configs`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DescribeConfigsOptions {
    /// Also return each config's synonyms (v1+, KIP-226). Default false.
    pub include_synonyms: bool,
    /// Also return each config's documentation (v3+, KIP-569). Default false.
    pub include_documentation: bool,
}

impl DescribeConfigsOptions {
    /// Sets [`DescribeConfigsOptions::include_synonyms`].
    pub fn include_synonyms(mut self, yes: bool) -> Self {
        self.include_synonyms = yes;
        self
    }

    /// Sets [`DescribeConfigsOptions::include_documentation`].
    pub fn include_documentation(mut self, yes: bool) -> Self {
        self.include_documentation = yes;
        self
    }
}

/// One change of one config for [`Client::incremental_alter_configs`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AlterConfigOp {
    /// The config name.
    pub name: String,
    /// The value (unused by `Delete`).
    pub value: Option<String>,
    /// What to do.
    pub op: AlterConfigOpType,
}

impl AlterConfigOp {
    /// Sets config `name` to `value`.
    pub fn set(name: impl Into<String>, value: impl Into<String>) -> AlterConfigOp {
        AlterConfigOp {
            name: name.into(),
            value: Some(value.into()),
            op: AlterConfigOpType::Set,
        }
    }

    /// Removes the dynamic value of `name`, reverting it to its default.
    pub fn delete(name: impl Into<String>) -> AlterConfigOp {
        AlterConfigOp {
            name: name.into(),
            value: None,
            op: AlterConfigOpType::Delete,
        }
    }

    /// Appends `value` to the list config `name`.
    pub fn append(name: impl Into<String>, value: impl Into<String>) -> AlterConfigOp {
        AlterConfigOp {
            name: name.into(),
            value: Some(value.into()),
            op: AlterConfigOpType::Append,
        }
    }

    /// Removes `value` from the list config `name`.
    pub fn subtract(name: impl Into<String>, value: impl Into<String>) -> AlterConfigOp {
        AlterConfigOp {
            name: name.into(),
            value: Some(value.into()),
            op: AlterConfigOpType::Subtract,
        }
    }
}

impl Client {
    /// Describes the configs of `resources` (DescribeConfigs API). Broker resources are
    /// answered by their broker, the others by any broker.
    ///
    /// Returns one `(resource, entries)` per resource in the given order; a failed resource
    /// (e.g. `UNKNOWN_TOPIC_OR_PARTITION`, a broker that could not be reached) does not fail the
    /// others.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a resource given twice,
    /// [`Error::UnsupportedVersion`] naming DescribeConfigs, and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_configs(
        &self,
        resources: &[ConfigResource],
        options: DescribeConfigsOptions,
    ) -> Result<Vec<(ConfigResource, ResourceResult<Vec<ConfigEntry>>)>> {
        check_distinct("config resource", resources)?;
        let version = self.version::<DescribeConfigsRequest>().await?;
        let req = describe_configs_request_for(resources, &options, version);
        // The transport's split route sends broker resources to their broker.
        let resp = self.transport().round_trip(req).await?;
        Ok(describe_configs_results(resources, resp))
    }

    /// Replaces the whole dynamic config of each resource with the given `(name, value)` pairs
    /// (AlterConfigs API; configs not listed revert to their defaults). Prefer
    /// [`Client::incremental_alter_configs`]. With `validate_only` the broker only checks.
    ///
    /// Returns one `(resource, result)` per resource in the given order.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a resource given twice, and the
    /// transport's errors when no broker answered at all. An API the broker lacks is
    /// [`Error::UnsupportedVersion`] naming AlterConfigs (as the whole call's error when every
    /// resource went to one broker, else in each resource's result).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn alter_configs(
        &self,
        configs: &[(ConfigResource, Vec<(String, String)>)],
        validate_only: bool,
    ) -> Result<Vec<(ConfigResource, ResourceResult<()>)>> {
        let resources: Vec<ConfigResource> = configs.iter().map(|(r, _)| r.clone()).collect();
        check_distinct("config resource", &resources)?;
        let groups = by_node(configs, |(r, _): &(ConfigResource, _)| r.node());
        let mut tasks = JoinSet::new();
        for (node, part) in groups {
            let client = self.clone();
            let req = AlterConfigsRequest::default()
                .with_validate_only(validate_only)
                .with_resources(
                    part.iter()
                        .map(|(r, entries)| {
                            alter_configs_request::AlterConfigsResource::default()
                                .with_resource_type(r.resource_type.code())
                                .with_resource_name(r.name.clone())
                                .with_configs(
                                    entries
                                        .iter()
                                        .map(|(k, v)| {
                                            alter_configs_request::AlterableConfig::default()
                                                .with_name(k.clone())
                                                .with_value(Some(v.clone()))
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            let keys: Vec<ConfigResource> = part.iter().map(|(r, _)| r.clone()).collect();
            tasks.spawn(async move {
                let resp = client.send_group(node, &req).await;
                (keys, resp.map(alter_configs_answers))
            });
        }
        collect_groups("AlterConfigs", resources, tasks).await
    }

    /// Changes single configs of each resource (IncrementalAlterConfigs API, KIP-339): set,
    /// delete, append to or subtract from a list. With `validate_only` the broker only checks.
    /// Broker and broker-logger resources go to their broker.
    ///
    /// Returns one `(resource, result)` per resource in the given order (e.g.
    /// `INVALID_CONFIG` for one resource leaves the others applied).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a resource given twice, and the
    /// transport's errors when no broker answered at all; an API the broker lacks is
    /// [`Error::UnsupportedVersion`] naming IncrementalAlterConfigs.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn incremental_alter_configs(
        &self,
        configs: &[(ConfigResource, Vec<AlterConfigOp>)],
        validate_only: bool,
    ) -> Result<Vec<(ConfigResource, ResourceResult<()>)>> {
        let resources: Vec<ConfigResource> = configs.iter().map(|(r, _)| r.clone()).collect();
        check_distinct("config resource", &resources)?;
        let groups = by_node(configs, |(r, _): &(ConfigResource, _)| r.node());
        let mut tasks = JoinSet::new();
        for (node, part) in groups {
            let client = self.clone();
            let req = incremental_alter_configs_request_for(&part, validate_only);
            let keys: Vec<ConfigResource> = part.iter().map(|(r, _)| r.clone()).collect();
            tasks.spawn(async move {
                let resp = client.send_group(node, &req).await;
                (keys, resp.map(incremental_alter_configs_answers))
            });
        }
        collect_groups("IncrementalAlterConfigs", resources, tasks).await
    }
}

impl Client {
    /// Sends `req` to broker `node` (`None`: any broker, the controller when known), retrying
    /// retriable failures (connection errors, timeouts) with the transport's backoff until its
    /// `default_api_timeout` deadline.
    ///
    /// Errors: [`Error::DeadlineExceeded`] with the last cause, or the first non-retriable error
    /// (e.g. [`Error::UnsupportedVersion`] naming the API).
    pub(crate) async fn send_group<R: Request>(
        &self,
        node: Option<i32>,
        req: &R,
    ) -> Result<R::Response> {
        let mut retry = self.transport().retry(R::API_KEY.name());
        loop {
            let attempt = retry
                .attempt(async {
                    let node = match node {
                        Some(n) => n,
                        None => self.any_node().await?.0,
                    };
                    self.transport().round_trip_to(node, req).await
                })
                .await;
            match attempt {
                Ok(resp) => return Ok(resp),
                Err(e) if e.is_retriable() => retry.backoff(e).await?,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Splits `items` by the broker that must answer them (`None`: any broker), keeping the
/// caller's order inside each group.
fn by_node<T: Clone>(
    items: &[T],
    node: impl Fn(&T) -> Option<i32>,
) -> BTreeMap<Option<i32>, Vec<T>> {
    let mut groups: BTreeMap<Option<i32>, Vec<T>> = BTreeMap::new();
    for item in items {
        groups.entry(node(item)).or_default().push(item.clone());
    }
    groups
}

type GroupAnswer<T = ()> = (
    Vec<ConfigResource>,
    Result<Vec<(ConfigResource, ResourceResult<T>)>>,
);

/// Waits for every group's request and merges the answers into the caller's order. A group
/// whose request failed gives its error to each of its resources. When every group failed,
/// the call fails with the first group's error (no part got an answer).
async fn collect_groups<T: 'static>(
    operation: &'static str,
    resources: Vec<ConfigResource>,
    mut tasks: JoinSet<GroupAnswer<T>>,
) -> Result<Vec<(ConfigResource, ResourceResult<T>)>> {
    let groups = tasks.len();
    let mut answers = Vec::with_capacity(resources.len());
    let mut failures = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (keys, resp) =
            joined.map_err(|e| Error::Protocol(format!("{operation} task failed: {e}")))?;
        match resp {
            Ok(parts) => answers.extend(parts),
            Err(e) => failures.push((keys, e)),
        }
    }
    if failures.len() == groups {
        if let Some((_, e)) = failures.into_iter().next() {
            return Err(e);
        }
        return Ok(Vec::new());
    }
    for (keys, e) in failures {
        let n = keys.len();
        answers.extend(
            keys.into_iter()
                .zip(error_for_each(e, n).into_iter().map(Err)),
        );
    }
    Ok(in_order(operation, resources, answers))
}

/// The DescribeConfigs request for `resources` at `version` (flags the version lacks are left
/// out rather than failing the request).
pub(crate) fn describe_configs_request_for(
    resources: &[ConfigResource],
    options: &DescribeConfigsOptions,
    version: i16,
) -> DescribeConfigsRequest {
    DescribeConfigsRequest::default()
        .with_include_synonyms(options.include_synonyms && version >= 1)
        .with_include_documentation(options.include_documentation && version >= 3)
        .with_resources(
            resources
                .iter()
                .map(|r| {
                    describe_configs_request::DescribeConfigsResource::default()
                        .with_resource_type(r.resource_type.code())
                        .with_resource_name(r.name.clone())
                        .with_configuration_keys(None)
                })
                .collect(),
        )
}

/// Maps a DescribeConfigs response to per-resource entries in the order of `resources`.
pub(crate) fn describe_configs_results(
    resources: &[ConfigResource],
    resp: DescribeConfigsResponse,
) -> Vec<(ConfigResource, ResourceResult<Vec<ConfigEntry>>)> {
    let answers = resp.results.into_iter().map(|r| {
        let key = (r.resource_type, r.resource_name);
        let result = code_result("DescribeConfigs", r.error_code, r.error_message).map(|()| {
            r.configs
                .into_iter()
                .map(|c| {
                    let source =
                        ConfigSource::from_code(c.config_source).unwrap_or(ConfigSource::Unknown);
                    ConfigEntry {
                        name: c.name,
                        value: c.value,
                        source,
                        // v0 sends is_default; v1+ says it through the source.
                        is_default: c.is_default || source == ConfigSource::DefaultConfig,
                        is_read_only: c.read_only,
                        is_sensitive: c.is_sensitive,
                        synonyms: c
                            .synonyms
                            .into_iter()
                            .map(|s| ConfigSynonym {
                                name: s.name,
                                value: s.value,
                                source: ConfigSource::from_code(s.source)
                                    .unwrap_or(ConfigSource::Unknown),
                            })
                            .collect(),
                        config_type: ConfigType::from_code(c.config_type)
                            .unwrap_or(ConfigType::Unknown),
                        documentation: c.documentation,
                    }
                })
                .collect()
        });
        (key, result)
    });
    keyed_in_order("DescribeConfigs", resources, answers)
}

/// Puts answers keyed by (wire type, name) into the order of `resources`.
fn keyed_in_order<T>(
    operation: &'static str,
    resources: &[ConfigResource],
    answers: impl IntoIterator<Item = ((i8, String), ResourceResult<T>)>,
) -> Vec<(ConfigResource, ResourceResult<T>)> {
    let keys: Vec<(i8, String)> = resources.iter().map(ConfigResource::key).collect();
    in_order(operation, keys, answers)
        .into_iter()
        .zip(resources)
        .map(|((_, r), res)| (res.clone(), r))
        .collect()
}

fn resource_of((resource_type, name): (i8, String)) -> ConfigResource {
    ConfigResource {
        resource_type: ConfigResourceType::from_code(resource_type)
            .unwrap_or(ConfigResourceType::Unknown),
        name,
    }
}

/// Per-resource results of an AlterConfigs response, in the broker's order.
fn alter_configs_answers(resp: AlterConfigsResponse) -> Vec<(ConfigResource, ResourceResult<()>)> {
    resp.responses
        .into_iter()
        .map(|r| {
            (
                resource_of((r.resource_type, r.resource_name)),
                code_result("AlterConfigs", r.error_code, r.error_message),
            )
        })
        .collect()
}

/// The IncrementalAlterConfigs request for `configs`.
pub(crate) fn incremental_alter_configs_request_for(
    configs: &[(ConfigResource, Vec<AlterConfigOp>)],
    validate_only: bool,
) -> IncrementalAlterConfigsRequest {
    IncrementalAlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(
            configs
                .iter()
                .map(|(r, ops)| {
                    incremental_alter_configs_request::AlterConfigsResource::default()
                        .with_resource_type(r.resource_type.code())
                        .with_resource_name(r.name.clone())
                        .with_configs(
                            ops.iter()
                                .map(|op| {
                                    let mut c =
                                        incremental_alter_configs_request::AlterableConfig::default(
                                        );
                                    c.name = op.name.clone();
                                    c.config_operation = op.op.code();
                                    c.value = op.value.clone();
                                    c
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// Per-resource results of an IncrementalAlterConfigs response, in the broker's order.
pub(crate) fn incremental_alter_configs_answers(
    resp: IncrementalAlterConfigsResponse,
) -> Vec<(ConfigResource, ResourceResult<()>)> {
    resp.responses
        .into_iter()
        .map(|r| {
            (
                resource_of((r.resource_type, r.resource_name)),
                code_result("IncrementalAlterConfigs", r.error_code, r.error_message),
            )
        })
        .collect()
}

/// The ListConfigResources request for `types` at `version` (v0: client metrics only).
///
/// Errors: [`Error::UnsupportedVersion`] naming ListConfigResources when `types` asks for more
/// than client metrics of a v0 broker (Kafka before 4.1).
pub(crate) fn list_config_resources_request(
    types: &[ConfigResourceType],
    version: i16,
) -> Result<ListConfigResourcesRequest> {
    if version < 1 && types != [ConfigResourceType::ClientMetrics] {
        return Err(unsupported_from::<ListConfigResourcesRequest>(1, version));
    }
    let codes = if version < 1 {
        Vec::new()
    } else {
        types.iter().map(|t| t.code()).collect()
    };
    Ok(ListConfigResourcesRequest::default().with_resource_types(codes))
}

/// The resources of a ListConfigResources answer (at `version`; v0 lists client metrics
/// resources only), or its error.
pub(crate) fn config_resources_from(
    resp: ListConfigResourcesResponse,
    version: i16,
) -> Result<Vec<ConfigResource>> {
    code_result("ListConfigResources", resp.error_code, None)?;
    Ok(resp
        .config_resources
        .into_iter()
        .map(|r| ConfigResource {
            resource_type: if version < 1 {
                ConfigResourceType::ClientMetrics
            } else {
                ConfigResourceType::from_code(r.resource_type)
                    .unwrap_or(ConfigResourceType::Unknown)
            },
            name: r.resource_name,
        })
        .collect())
}

impl Client {
    /// Lists the resources that have configs, of the given `types` (empty: every type)
    /// (ListConfigResources, KIP-1142; Java `Admin.listConfigResources`). Kafka 4.4 lists
    /// topics, brokers, groups and client metrics subscriptions.
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedVersion`] naming ListConfigResources when the brokers do not offer
    /// it, or speak only v0 (ListClientMetricsResources, client metrics only) and `types` asks for anything
    /// but [`ConfigResourceType::ClientMetrics`]; [`Error::Broker`] with the broker's code
    /// (`UNSUPPORTED_VERSION` for a type it cannot list...); and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn list_config_resources(
        &self,
        types: &[ConfigResourceType],
    ) -> Result<Vec<ConfigResource>> {
        let version = self.version::<ListConfigResourcesRequest>().await?;
        let req = list_config_resources_request(types, version)?;
        let resp = self.transport().round_trip(req).await?;
        config_resources_from(resp, version)
    }

    /// The client metrics subscriptions (KIP-714): [`Client::list_config_resources`] of
    /// [`ConfigResourceType::ClientMetrics`], as Java's deprecated
    /// `Admin.listClientMetricsResources`; v0 brokers answer it too.
    ///
    /// # Errors
    ///
    /// As [`Client::list_config_resources`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Client::list_config_resources`].
    pub async fn list_client_metrics_resources(&self) -> Result<Vec<String>> {
        Ok(self
            .list_config_resources(&[ConfigResourceType::ClientMetrics])
            .await?
            .into_iter()
            .map(|r| r.name)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use kafkit_protocol::ErrorCode;
    use kafkit_protocol::messages::{
        describe_configs_response, incremental_alter_configs_response,
    };

    use super::*;

    #[test]
    fn resources_know_their_broker() {
        assert_eq!(ConfigResource::broker(3).node(), Some(3));
        assert_eq!(ConfigResource::broker_logger(4).node(), Some(4));
        assert_eq!(ConfigResource::broker_default().node(), None);
        assert_eq!(ConfigResource::topic("7").node(), None);
        let groups = by_node(
            &[
                ConfigResource::topic("a"),
                ConfigResource::broker(2),
                ConfigResource::topic("b"),
                ConfigResource::broker_logger(2),
            ],
            |r| r.node(),
        );
        assert_eq!(groups[&None].len(), 2);
        assert_eq!(groups[&None][1].name, "b");
        assert_eq!(groups[&Some(2)].len(), 2);
    }

    #[test]
    fn describe_configs_request_drops_flags_the_version_lacks() {
        let opts = DescribeConfigsOptions::default()
            .include_synonyms(true)
            .include_documentation(true);
        let res = [ConfigResource::topic("t"), ConfigResource::broker(1)];
        let req = describe_configs_request_for(&res, &opts, 0);
        assert!(!req.include_synonyms && !req.include_documentation);
        let req = describe_configs_request_for(&res, &opts, 4);
        assert!(req.include_synonyms && req.include_documentation);
        assert_eq!(req.resources[1].resource_type, 4);
        assert_eq!(req.resources[1].resource_name, "1");
        assert_eq!(req.resources[0].configuration_keys, None);
    }

    #[test]
    fn describe_configs_results_keep_errors_per_resource_in_order() {
        let mut resp = DescribeConfigsResponse::default();
        let mut broker = describe_configs_response::DescribeConfigsResult::default();
        broker.resource_type = 4;
        broker.resource_name = "1".into();
        let mut entry = describe_configs_response::DescribeConfigsResourceResult::default();
        entry.name = "log.retention.ms".into();
        entry.value = Some("1000".into());
        entry.config_source = 5;
        entry.config_type = 5;
        broker.configs.push(entry);
        let mut topic = describe_configs_response::DescribeConfigsResult::default();
        topic.resource_type = 2;
        topic.resource_name = "t".into();
        topic.error_code = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
        resp.results = vec![broker, topic];
        let res = [ConfigResource::topic("t"), ConfigResource::broker(1)];
        let out = describe_configs_results(&res, resp);
        assert_eq!(out[0].0, ConfigResource::topic("t"));
        assert_eq!(
            out[0].1.as_ref().unwrap_err().error_code(),
            Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
        );
        let entries = out[1].1.as_ref().expect("broker configs");
        assert_eq!(entries[0].value.as_deref(), Some("1000"));
        assert!(entries[0].is_default);
        assert_eq!(entries[0].source, ConfigSource::DefaultConfig);
        assert_eq!(entries[0].config_type, ConfigType::Long);
    }

    #[test]
    fn incremental_alter_request_carries_each_op() {
        let req = incremental_alter_configs_request_for(
            &[(
                ConfigResource::topic("t"),
                vec![
                    AlterConfigOp::set("retention.ms", "1"),
                    AlterConfigOp::delete("segment.ms"),
                    AlterConfigOp::append("cleanup.policy", "compact"),
                    AlterConfigOp::subtract("cleanup.policy", "delete"),
                ],
            )],
            true,
        );
        assert!(req.validate_only);
        let ops: Vec<(i8, Option<&str>)> = req.resources[0]
            .configs
            .iter()
            .map(|c| (c.config_operation, c.value.as_deref()))
            .collect();
        assert_eq!(
            ops,
            vec![
                (0, Some("1")),
                (1, None),
                (2, Some("compact")),
                (3, Some("delete"))
            ]
        );
    }

    #[tokio::test]
    async fn a_failed_group_fails_only_its_resources() {
        let resources = vec![ConfigResource::topic("t"), ConfigResource::broker(9)];
        let mut tasks: JoinSet<GroupAnswer> = JoinSet::new();
        tasks.spawn(async {
            let mut resp = IncrementalAlterConfigsResponse::default();
            let mut r = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
            r.resource_type = 2;
            r.resource_name = "t".into();
            resp.responses.push(r);
            (
                vec![ConfigResource::topic("t")],
                Ok(incremental_alter_configs_answers(resp)),
            )
        });
        tasks.spawn(async {
            (
                vec![ConfigResource::broker(9)],
                Err(Error::Timeout {
                    operation: "IncrementalAlterConfigs",
                    timeout: std::time::Duration::from_millis(5),
                }),
            )
        });
        let out = collect_groups("IncrementalAlterConfigs", resources, tasks)
            .await
            .expect("one group answered");
        assert!(out[0].1.is_ok());
        assert!(matches!(out[1].1, Err(Error::Timeout { .. })));

        // When no group answers, the call fails.
        let mut tasks: JoinSet<GroupAnswer> = JoinSet::new();
        tasks.spawn(async {
            (
                vec![ConfigResource::broker(9)],
                Err(Error::InvalidArgument("x".into())),
            )
        });
        let err = collect_groups("X", vec![ConfigResource::broker(9)], tasks)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)));
    }

    #[test]
    fn list_config_resources_by_version() {
        use kafkit_protocol::messages::list_config_resources_response;
        let all = list_config_resources_request(&[], 1).unwrap();
        assert!(all.resource_types.is_empty());
        let some = list_config_resources_request(
            &[ConfigResourceType::Topic, ConfigResourceType::Group],
            1,
        )
        .unwrap();
        assert_eq!(some.resource_types, vec![2, 32]);
        assert!(list_config_resources_request(&[ConfigResourceType::ClientMetrics], 0).is_ok());
        assert!(matches!(
            list_config_resources_request(&[], 0),
            Err(Error::UnsupportedVersion { .. })
        ));

        let mut resp = ListConfigResourcesResponse::default();
        resp.config_resources.push(
            list_config_resources_response::ConfigResource::default()
                .with_resource_name("t".into())
                .with_resource_type(2),
        );
        resp.config_resources.push(
            list_config_resources_response::ConfigResource::default()
                .with_resource_name("x".into())
                .with_resource_type(99),
        );
        let got = config_resources_from(resp.clone(), 1).unwrap();
        assert_eq!(got[0], ConfigResource::topic("t"));
        assert_eq!(got[1].resource_type, ConfigResourceType::Unknown);
        let v0 = config_resources_from(resp, 0).unwrap();
        assert_eq!(v0[0].resource_type, ConfigResourceType::ClientMetrics);
        let mut bad = ListConfigResourcesResponse::default();
        bad.error_code = kafkit_protocol::ErrorCode::UNSUPPORTED_VERSION;
        assert!(config_resources_from(bad, 1).is_err());
    }
}
