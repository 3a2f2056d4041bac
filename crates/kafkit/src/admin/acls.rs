//! ACL operations: describe, create and delete ACL bindings (DescribeAcls key 29, CreateAcls
//! key 30, DeleteAcls key 31; KIP-140, prefixed patterns KIP-290).
//!
//! An ACL binding joins a resource pattern (type, name, pattern type) to an access control
//! entry (principal, host, operation, permission). Filters use `Any` values and `None` names to
//! match many bindings.

use kafkit_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse, create_acls_request, delete_acls_request,
};

use super::Client;
use crate::error::{Error, Result};
use crate::ops::{ResourceResult, code_result, wire_enum};

wire_enum! {
    /// The kind of resource an ACL protects (`ResourceType` of the Java client).
    pub enum ResourceType: i8 {
        /// A type this library or the broker does not know.
        Unknown = 0,
        /// Any type (filters only).
        Any = 1,
        /// A topic.
        Topic = 2,
        /// A consumer group.
        Group = 3,
        /// The cluster (name `kafka-cluster`).
        Cluster = 4,
        /// A transactional id.
        TransactionalId = 5,
        /// A delegation token (KIP-48).
        DelegationToken = 6,
        /// A user principal (KIP-373).
        User = 7,
    }
}

wire_enum! {
    /// How a resource pattern's name matches resource names (KIP-290).
    pub enum PatternType: i8 {
        /// A type this library or the broker does not know.
        Unknown = 0,
        /// Any pattern type (filters only).
        Any = 1,
        /// Every binding that applies to the named resource: literal, wildcard and prefixed
        /// (filters only).
        Match = 2,
        /// The name is the resource name (or `*` for every resource).
        Literal = 3,
        /// The name is a prefix of resource names.
        Prefixed = 4,
    }
}

wire_enum! {
    /// An operation an ACL allows or denies (`AclOperation` of the Java client).
    pub enum AclOperation: i8 {
        /// An operation this library or the broker does not know.
        Unknown = 0,
        /// Any operation (filters only).
        Any = 1,
        /// Every operation.
        All = 2,
        /// Read.
        Read = 3,
        /// Write.
        Write = 4,
        /// Create.
        Create = 5,
        /// Delete.
        Delete = 6,
        /// Alter.
        Alter = 7,
        /// Describe.
        Describe = 8,
        /// Cluster actions (broker to broker).
        ClusterAction = 9,
        /// Describe configs.
        DescribeConfigs = 10,
        /// Alter configs.
        AlterConfigs = 11,
        /// Idempotent produce.
        IdempotentWrite = 12,
        /// Create delegation tokens.
        CreateTokens = 13,
        /// Describe delegation tokens.
        DescribeTokens = 14,
        /// Two-phase commit of transactions (KIP-939).
        TwoPhaseCommit = 15,
    }
}

wire_enum! {
    /// Whether an ACL allows or denies.
    pub enum AclPermissionType: i8 {
        /// A value this library or the broker does not know.
        Unknown = 0,
        /// Either (filters only).
        Any = 1,
        /// Denies the operation.
        Deny = 2,
        /// Allows the operation.
        Allow = 3,
    }
}

/// The operations set in an authorized-operations bit field (KIP-430; bit `n` = the operation
/// with code `n`). `None` for `i32::MIN`, the value brokers send when they were not asked.
pub(crate) fn operations_from_bits(bits: i32) -> Option<Vec<AclOperation>> {
    if bits == i32::MIN {
        return None;
    }
    Some(
        (0..31)
            .filter(|bit| bits & (1 << bit) != 0)
            .filter_map(|bit| AclOperation::from_code(bit as i8))
            .collect(),
    )
}

/// The resources an ACL binding applies to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ResourcePattern {
    /// The resource type.
    pub resource_type: ResourceType,
    /// The resource name, `*` for every resource of the type (literal patterns).
    pub name: String,
    /// How `name` matches.
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    /// A pattern of `resource_type` named `name`, matching per `pattern_type`.
    pub fn new(
        resource_type: ResourceType,
        name: impl Into<String>,
        pattern_type: PatternType,
    ) -> ResourcePattern {
        ResourcePattern {
            resource_type,
            name: name.into(),
            pattern_type,
        }
    }
}

/// Who may (or may not) do what, from where.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct AccessControlEntry {
    /// The principal, e.g. `User:alice`.
    pub principal: String,
    /// The client host, `*` for any.
    pub host: String,
    /// The operation.
    pub operation: AclOperation,
    /// Allow or deny.
    pub permission_type: AclPermissionType,
}

impl AccessControlEntry {
    /// An entry for `principal` from `host`.
    pub fn new(
        principal: impl Into<String>,
        host: impl Into<String>,
        operation: AclOperation,
        permission_type: AclPermissionType,
    ) -> AccessControlEntry {
        AccessControlEntry {
            principal: principal.into(),
            host: host.into(),
            operation,
            permission_type,
        }
    }
}

/// An ACL: a resource pattern and an access control entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct AclBinding {
    /// The resources.
    pub pattern: ResourcePattern,
    /// The entry.
    pub entry: AccessControlEntry,
}

impl AclBinding {
    /// The binding of `entry` to `pattern`.
    pub fn new(pattern: ResourcePattern, entry: AccessControlEntry) -> AclBinding {
        AclBinding { pattern, entry }
    }

    /// The filter that matches exactly this binding.
    pub fn to_filter(&self) -> AclBindingFilter {
        AclBindingFilter {
            resource_type: self.pattern.resource_type,
            name: Some(self.pattern.name.clone()),
            pattern_type: self.pattern.pattern_type,
            principal: Some(self.entry.principal.clone()),
            host: Some(self.entry.host.clone()),
            operation: self.entry.operation,
            permission_type: self.entry.permission_type,
        }
    }
}

/// A filter over ACL bindings, for [`Client::describe_acls`] and [`Client::delete_acls`]: each
/// field restricts the match; `Any` and `None` match everything.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct AclBindingFilter {
    /// The resource type, `Any` for all.
    pub resource_type: ResourceType,
    /// The resource name, `None` for all.
    pub name: Option<String>,
    /// The pattern type: `Any`, `Match` (every pattern that applies to `name`), `Literal` or
    /// `Prefixed`.
    pub pattern_type: PatternType,
    /// The principal, `None` for all.
    pub principal: Option<String>,
    /// The host, `None` for all.
    pub host: Option<String>,
    /// The operation, `Any` for all.
    pub operation: AclOperation,
    /// The permission, `Any` for both.
    pub permission_type: AclPermissionType,
}

impl AclBindingFilter {
    /// The filter matching every binding.
    pub fn any() -> AclBindingFilter {
        AclBindingFilter {
            resource_type: ResourceType::Any,
            name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: AclOperation::Any,
            permission_type: AclPermissionType::Any,
        }
    }

    /// Restricts the filter to resources of `resource_type` named `name` with `pattern_type`.
    pub fn resource(
        mut self,
        resource_type: ResourceType,
        name: impl Into<String>,
        pattern_type: PatternType,
    ) -> Self {
        self.resource_type = resource_type;
        self.name = Some(name.into());
        self.pattern_type = pattern_type;
        self
    }

    /// Restricts the filter to `principal` (e.g. `User:alice`).
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }
}

fn binding(
    resource_type: i8,
    name: String,
    pattern_type: i8,
    principal: String,
    host: String,
    operation: i8,
    permission_type: i8,
) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern {
            resource_type: ResourceType::from_code(resource_type).unwrap_or(ResourceType::Unknown),
            name,
            pattern_type: PatternType::from_code(pattern_type).unwrap_or(PatternType::Unknown),
        },
        entry: AccessControlEntry {
            principal,
            host,
            operation: AclOperation::from_code(operation).unwrap_or(AclOperation::Unknown),
            permission_type: AclPermissionType::from_code(permission_type)
                .unwrap_or(AclPermissionType::Unknown),
        },
    }
}

impl Client {
    /// The ACL bindings matching `filter` (DescribeAcls API).
    ///
    /// # Errors
    ///
    /// [`Error::Broker`] with the broker's code (e.g. `SECURITY_DISABLED` when no
    /// authorizer is configured, `CLUSTER_AUTHORIZATION_FAILED`), [`Error::Encode`] for a
    /// pattern type other than `Literal`/`Any` on a v0 broker, [`Error::UnsupportedVersion`]
    /// naming DescribeAcls, and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_acls(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>> {
        let req = describe_acls_request_for(filter);
        let resp = self.transport().round_trip(req).await?;
        describe_acls_result(resp)
    }

    /// Creates `acls` (CreateAcls API).
    ///
    /// Returns one `(binding, result)` per binding in the given order.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list, [`Error::UnsupportedVersion`]
    /// naming CreateAcls, [`Error::Protocol`] when the broker answers a different number of
    /// results, and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn create_acls(
        &self,
        acls: &[AclBinding],
    ) -> Result<Vec<(AclBinding, ResourceResult<()>)>> {
        if acls.is_empty() {
            return Err(Error::InvalidArgument("no ACL bindings to create".into()));
        }
        let req = create_acls_request_for(acls);
        let resp = self.transport().round_trip(req).await?;
        create_acls_results(acls, resp)
    }

    /// Deletes the ACL bindings matching each filter (DeleteAcls API).
    ///
    /// Returns one `(filter, result)` per filter in the given order; a filter's result lists
    /// each matching binding with its own deletion result.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list, [`Error::UnsupportedVersion`]
    /// naming DeleteAcls, [`Error::Protocol`] when the broker answers a different number of
    /// results, and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    #[allow(clippy::type_complexity)]
    pub async fn delete_acls(
        &self,
        filters: &[AclBindingFilter],
    ) -> Result<
        Vec<(
            AclBindingFilter,
            ResourceResult<Vec<(AclBinding, ResourceResult<()>)>>,
        )>,
    > {
        if filters.is_empty() {
            return Err(Error::InvalidArgument("no ACL filters given".into()));
        }
        let req = delete_acls_request_for(filters);
        let resp = self.transport().round_trip(req).await?;
        delete_acls_results(filters, resp)
    }
}

/// The DescribeAcls request for `filter`.
pub(crate) fn describe_acls_request_for(filter: &AclBindingFilter) -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_type_filter(filter.resource_type.code())
        .with_resource_name_filter(filter.name.clone())
        .with_pattern_type_filter(filter.pattern_type.code())
        .with_principal_filter(filter.principal.clone())
        .with_host_filter(filter.host.clone())
        .with_operation(filter.operation.code())
        .with_permission_type(filter.permission_type.code())
}

/// The bindings of a DescribeAcls response, or its error.
pub(crate) fn describe_acls_result(resp: DescribeAclsResponse) -> Result<Vec<AclBinding>> {
    code_result("DescribeAcls", resp.error_code, resp.error_message)?;
    let mut out = Vec::new();
    for r in resp.resources {
        for a in r.acls {
            out.push(binding(
                r.resource_type,
                r.resource_name.clone(),
                r.pattern_type,
                a.principal,
                a.host,
                a.operation,
                a.permission_type,
            ));
        }
    }
    Ok(out)
}

/// The CreateAcls request for `acls`.
pub(crate) fn create_acls_request_for(acls: &[AclBinding]) -> CreateAclsRequest {
    CreateAclsRequest::default().with_creations(
        acls.iter()
            .map(|b| {
                create_acls_request::AclCreation::default()
                    .with_resource_type(b.pattern.resource_type.code())
                    .with_resource_name(b.pattern.name.clone())
                    .with_resource_pattern_type(b.pattern.pattern_type.code())
                    .with_principal(b.entry.principal.clone())
                    .with_host(b.entry.host.clone())
                    .with_operation(b.entry.operation.code())
                    .with_permission_type(b.entry.permission_type.code())
            })
            .collect(),
    )
}

/// Per-binding results of a CreateAcls response (answered in request order).
pub(crate) fn create_acls_results(
    acls: &[AclBinding],
    resp: CreateAclsResponse,
) -> Result<Vec<(AclBinding, ResourceResult<()>)>> {
    if resp.results.len() != acls.len() {
        return Err(Error::Protocol(format!(
            "CreateAcls answered {} results for {} bindings",
            resp.results.len(),
            acls.len()
        )));
    }
    Ok(acls
        .iter()
        .cloned()
        .zip(
            resp.results
                .into_iter()
                .map(|r| code_result("CreateAcls", r.error_code, r.error_message)),
        )
        .collect())
}

/// The DeleteAcls request for `filters`.
pub(crate) fn delete_acls_request_for(filters: &[AclBindingFilter]) -> DeleteAclsRequest {
    DeleteAclsRequest::default().with_filters(
        filters
            .iter()
            .map(|f| {
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_type_filter(f.resource_type.code())
                    .with_resource_name_filter(f.name.clone())
                    .with_pattern_type_filter(f.pattern_type.code())
                    .with_principal_filter(f.principal.clone())
                    .with_host_filter(f.host.clone())
                    .with_operation(f.operation.code())
                    .with_permission_type(f.permission_type.code())
            })
            .collect(),
    )
}

/// Per-filter results of a DeleteAcls response (answered in request order).
#[allow(clippy::type_complexity)]
pub(crate) fn delete_acls_results(
    filters: &[AclBindingFilter],
    resp: DeleteAclsResponse,
) -> Result<
    Vec<(
        AclBindingFilter,
        ResourceResult<Vec<(AclBinding, ResourceResult<()>)>>,
    )>,
> {
    if resp.filter_results.len() != filters.len() {
        return Err(Error::Protocol(format!(
            "DeleteAcls answered {} results for {} filters",
            resp.filter_results.len(),
            filters.len()
        )));
    }
    Ok(filters
        .iter()
        .cloned()
        .zip(resp.filter_results.into_iter().map(|r| {
            code_result("DeleteAcls", r.error_code, r.error_message).map(|()| {
                r.matching_acls
                    .into_iter()
                    .map(|m| {
                        let result = code_result("DeleteAcls", m.error_code, m.error_message);
                        (
                            binding(
                                m.resource_type,
                                m.resource_name,
                                m.pattern_type,
                                m.principal,
                                m.host,
                                m.operation,
                                m.permission_type,
                            ),
                            result,
                        )
                    })
                    .collect()
            })
        }))
        .collect())
}

#[cfg(test)]
mod tests {
    use kafkit_protocol::ErrorCode;
    use kafkit_protocol::messages::{
        create_acls_response, delete_acls_response, describe_acls_response,
    };

    use super::*;

    fn alice_reads(topic: &str) -> AclBinding {
        AclBinding::new(
            ResourcePattern::new(ResourceType::Topic, topic, PatternType::Literal),
            AccessControlEntry::new(
                "User:alice",
                "*",
                AclOperation::Read,
                AclPermissionType::Allow,
            ),
        )
    }

    #[test]
    fn authorized_operation_bits() {
        assert_eq!(operations_from_bits(i32::MIN), None);
        assert_eq!(operations_from_bits(0), Some(vec![]));
        assert_eq!(
            operations_from_bits((1 << 3) | (1 << 4) | (1 << 30)),
            Some(vec![AclOperation::Read, AclOperation::Write])
        );
    }

    #[test]
    fn filters_and_bindings_reach_the_wire() {
        let req = describe_acls_request_for(&alice_reads("t").to_filter());
        assert_eq!(req.resource_type_filter, 2);
        assert_eq!(req.resource_name_filter.as_deref(), Some("t"));
        assert_eq!(req.pattern_type_filter, 3);
        assert_eq!(req.principal_filter.as_deref(), Some("User:alice"));
        assert_eq!((req.operation, req.permission_type), (3, 3));
        let any = describe_acls_request_for(&AclBindingFilter::any());
        assert_eq!(any.resource_name_filter, None);
        assert_eq!((any.resource_type_filter, any.operation), (1, 1));

        let req = create_acls_request_for(&[alice_reads("a"), alice_reads("b")]);
        assert_eq!(req.creations[1].resource_name, "b");
        assert_eq!(req.creations[1].resource_pattern_type, 3);
    }

    #[test]
    fn describe_acls_maps_bindings_and_the_top_level_error() {
        let mut resp = DescribeAclsResponse::default();
        let mut r = describe_acls_response::DescribeAclsResource::default();
        r.resource_type = 2;
        r.resource_name = "t".into();
        r.pattern_type = 3;
        let mut a = describe_acls_response::AclDescription::default();
        a.principal = "User:alice".into();
        a.host = "*".into();
        a.operation = 3;
        a.permission_type = 3;
        r.acls.push(a);
        resp.resources.push(r);
        assert_eq!(describe_acls_result(resp).unwrap(), vec![alice_reads("t")]);

        let mut resp = DescribeAclsResponse::default();
        resp.error_code = ErrorCode::SECURITY_DISABLED;
        let err = describe_acls_result(resp).unwrap_err();
        assert_eq!(err.error_code(), Some(ErrorCode::SECURITY_DISABLED));
    }

    #[test]
    fn create_and_delete_results_stay_per_item() {
        let acls = [alice_reads("a"), alice_reads("b")];
        let mut resp = CreateAclsResponse::default();
        resp.results = vec![create_acls_response::AclCreationResult::default(), {
            let mut r = create_acls_response::AclCreationResult::default();
            r.error_code = ErrorCode::INVALID_REQUEST;
            r
        }];
        let out = create_acls_results(&acls, resp).unwrap();
        assert!(out[0].1.is_ok());
        assert_eq!(out[1].0, alice_reads("b"));
        assert!(out[1].1.is_err());
        // A short answer is a protocol error, not a silent success.
        let short = CreateAclsResponse::default();
        assert!(matches!(
            create_acls_results(&acls, short),
            Err(Error::Protocol(_))
        ));

        let filters = [alice_reads("a").to_filter(), AclBindingFilter::any()];
        let mut resp = DeleteAclsResponse::default();
        let mut first = delete_acls_response::DeleteAclsFilterResult::default();
        let mut m = delete_acls_response::DeleteAclsMatchingAcl::default();
        m.resource_type = 2;
        m.resource_name = "a".into();
        m.pattern_type = 3;
        m.principal = "User:alice".into();
        m.host = "*".into();
        m.operation = 3;
        m.permission_type = 3;
        first.matching_acls.push(m);
        let mut second = delete_acls_response::DeleteAclsFilterResult::default();
        second.error_code = ErrorCode::CLUSTER_AUTHORIZATION_FAILED;
        resp.filter_results = vec![first, second];
        let out = delete_acls_results(&filters, resp).unwrap();
        let deleted = out[0].1.as_ref().unwrap();
        assert_eq!(deleted[0].0, alice_reads("a"));
        assert!(deleted[0].1.is_ok());
        assert_eq!(
            out[1].1.as_ref().unwrap_err().error_code(),
            Some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED)
        );
    }
}
