//! Client quota operations: describe and alter client quotas (DescribeClientQuotas key 48,
//! AlterClientQuotas key 49; KIP-546).
//!
//! A quota entity is a set of `(entity type, name)` pairs: entity types are `user`,
//! `client-id` and `ip`; a `None` name is the type's default entity. Quota keys are e.g.
//! `producer_byte_rate`, `consumer_byte_rate`, `request_percentage`,
//! `connection_creation_rate`.

use std::collections::BTreeMap;

use kafkit_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse, alter_client_quotas_request, describe_client_quotas_request,
};

use super::Client;
use crate::error::Result;
use crate::ops::{ResourceResult, check_distinct, code_result, in_order};

/// A quota entity: `(entity type, name)` pairs, sorted by type; `None` is the default entity of
/// that type (e.g. the default for every user).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub struct ClientQuotaEntity {
    /// The pairs, sorted by entity type.
    pub entries: Vec<(String, Option<String>)>,
}

impl ClientQuotaEntity {
    /// An entity from `(entity type, name)` pairs (sorted here).
    pub fn new<I, T>(entries: I) -> ClientQuotaEntity
    where
        I: IntoIterator<Item = (T, Option<String>)>,
        T: Into<String>,
    {
        let mut entries: Vec<(String, Option<String>)> =
            entries.into_iter().map(|(t, n)| (t.into(), n)).collect();
        entries.sort();
        ClientQuotaEntity { entries }
    }

    /// The entity of user `name` (`None`: the default user).
    pub fn user(name: Option<&str>) -> ClientQuotaEntity {
        ClientQuotaEntity::new([("user", name.map(str::to_owned))])
    }

    /// The entity of client id `id` (`None`: the default client id).
    pub fn client_id(id: Option<&str>) -> ClientQuotaEntity {
        ClientQuotaEntity::new([("client-id", id.map(str::to_owned))])
    }

    /// The entity of client IP address `ip` (`None`: the default IP, KIP-612).
    pub fn ip(ip: Option<&str>) -> ClientQuotaEntity {
        ClientQuotaEntity::new([("ip", ip.map(str::to_owned))])
    }
}

/// How a [`ClientQuotaFilterComponent`] matches entity names.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaMatch {
    /// Exactly this name (match type 0).
    Exact(String),
    /// The default entity of the type (match type 1).
    Default,
    /// Any specified (non-default) name (match type 2).
    Any,
}

/// One part of a [`Client::describe_client_quotas`] filter: an entity type and how its name
/// must match.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientQuotaFilterComponent {
    /// The entity type (`user`, `client-id`, `ip`).
    pub entity_type: String,
    /// How the name matches.
    pub matching: QuotaMatch,
}

impl ClientQuotaFilterComponent {
    /// Matches entities of `entity_type` named exactly `name`.
    pub fn exact(entity_type: impl Into<String>, name: impl Into<String>) -> Self {
        ClientQuotaFilterComponent {
            entity_type: entity_type.into(),
            matching: QuotaMatch::Exact(name.into()),
        }
    }

    /// Matches the default entity of `entity_type`.
    pub fn default_entity(entity_type: impl Into<String>) -> Self {
        ClientQuotaFilterComponent {
            entity_type: entity_type.into(),
            matching: QuotaMatch::Default,
        }
    }

    /// Matches every specified entity of `entity_type`.
    pub fn any(entity_type: impl Into<String>) -> Self {
        ClientQuotaFilterComponent {
            entity_type: entity_type.into(),
            matching: QuotaMatch::Any,
        }
    }
}

/// Changes to the quotas of one entity for [`Client::alter_client_quotas`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ClientQuotaAlteration {
    /// The entity.
    pub entity: ClientQuotaEntity,
    /// `(quota key, value)`: `Some` sets the quota, `None` removes it.
    pub ops: Vec<(String, Option<f64>)>,
}

impl ClientQuotaAlteration {
    /// No changes yet to `entity`'s quotas.
    pub fn new(entity: ClientQuotaEntity) -> Self {
        ClientQuotaAlteration {
            entity,
            ops: Vec::new(),
        }
    }

    /// Sets quota `key` to `value`.
    pub fn set(mut self, key: impl Into<String>, value: f64) -> Self {
        self.ops.push((key.into(), Some(value)));
        self
    }

    /// Removes quota `key`.
    pub fn remove(mut self, key: impl Into<String>) -> Self {
        self.ops.push((key.into(), None));
        self
    }
}

impl Client {
    /// The quotas of the entities matching every component of `filter` (DescribeClientQuotas
    /// API); with `strict`, only entities with no other entity types than those named.
    ///
    /// Returns each matching entity with its quotas (key to value).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Broker`] with the broker's code (e.g. `INVALID_REQUEST`),
    /// [`crate::Error::UnsupportedVersion`] naming DescribeClientQuotas, and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_client_quotas(
        &self,
        filter: &[ClientQuotaFilterComponent],
        strict: bool,
    ) -> Result<Vec<(ClientQuotaEntity, BTreeMap<String, f64>)>> {
        let req = describe_client_quotas_request_for(filter, strict);
        let resp = self.transport().round_trip(req).await?;
        describe_client_quotas_result(resp)
    }

    /// Sets or removes quotas (AlterClientQuotas API); with `validate_only` the broker only
    /// checks.
    ///
    /// Returns one `(entity, result)` per alteration in the given order.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty list or an entity given twice,
    /// [`crate::Error::UnsupportedVersion`] naming AlterClientQuotas, and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn alter_client_quotas(
        &self,
        alterations: &[ClientQuotaAlteration],
        validate_only: bool,
    ) -> Result<Vec<(ClientQuotaEntity, ResourceResult<()>)>> {
        let entities: Vec<ClientQuotaEntity> =
            alterations.iter().map(|a| a.entity.clone()).collect();
        check_distinct("quota entity", &entities)?;
        let req = alter_client_quotas_request_for(alterations, validate_only);
        let resp = self.transport().round_trip(req).await?;
        Ok(alter_client_quotas_results(entities, resp))
    }
}

/// The DescribeClientQuotas request for `filter`.
pub(crate) fn describe_client_quotas_request_for(
    filter: &[ClientQuotaFilterComponent],
    strict: bool,
) -> DescribeClientQuotasRequest {
    DescribeClientQuotasRequest::default()
        .with_strict(strict)
        .with_components(
            filter
                .iter()
                .map(|c| {
                    let mut d = describe_client_quotas_request::ComponentData::default()
                        .with_entity_type(c.entity_type.clone());
                    let (match_type, name) = match &c.matching {
                        QuotaMatch::Exact(n) => (0, Some(n.clone())),
                        QuotaMatch::Default => (1, None),
                        QuotaMatch::Any => (2, None),
                    };
                    d.match_type = match_type;
                    d.r#match = name;
                    d
                })
                .collect(),
        )
}

/// The entities and quotas of a DescribeClientQuotas response, or its error.
pub(crate) fn describe_client_quotas_result(
    resp: DescribeClientQuotasResponse,
) -> Result<Vec<(ClientQuotaEntity, BTreeMap<String, f64>)>> {
    code_result("DescribeClientQuotas", resp.error_code, resp.error_message)?;
    Ok(resp
        .entries
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let entity = ClientQuotaEntity::new(
                e.entity.into_iter().map(|d| (d.entity_type, d.entity_name)),
            );
            let values = e.values.into_iter().map(|v| (v.key, v.value)).collect();
            (entity, values)
        })
        .collect())
}

/// The AlterClientQuotas request for `alterations`.
pub(crate) fn alter_client_quotas_request_for(
    alterations: &[ClientQuotaAlteration],
    validate_only: bool,
) -> AlterClientQuotasRequest {
    AlterClientQuotasRequest::default()
        .with_validate_only(validate_only)
        .with_entries(
            alterations
                .iter()
                .map(|a| {
                    alter_client_quotas_request::EntryData::default()
                        .with_entity(
                            a.entity
                                .entries
                                .iter()
                                .map(|(t, n)| {
                                    alter_client_quotas_request::EntityData::default()
                                        .with_entity_type(t.clone())
                                        .with_entity_name(n.clone())
                                })
                                .collect(),
                        )
                        .with_ops(
                            a.ops
                                .iter()
                                .map(|(k, v)| {
                                    alter_client_quotas_request::OpData::default()
                                        .with_key(k.clone())
                                        .with_value(v.unwrap_or(0.0))
                                        .with_remove(v.is_none())
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// Per-entity results of an AlterClientQuotas response in the order of `entities`.
pub(crate) fn alter_client_quotas_results(
    entities: Vec<ClientQuotaEntity>,
    resp: AlterClientQuotasResponse,
) -> Vec<(ClientQuotaEntity, ResourceResult<()>)> {
    let answers = resp.entries.into_iter().map(|e| {
        (
            ClientQuotaEntity::new(e.entity.into_iter().map(|d| (d.entity_type, d.entity_name))),
            code_result("AlterClientQuotas", e.error_code, e.error_message),
        )
    });
    in_order("AlterClientQuotas", entities, answers)
}

#[cfg(test)]
mod tests {
    use kafkit_protocol::ErrorCode;
    use kafkit_protocol::messages::{
        alter_client_quotas_response, describe_client_quotas_response,
    };

    use super::*;

    #[test]
    fn filter_components_use_kafkas_match_types() {
        let req = describe_client_quotas_request_for(
            &[
                ClientQuotaFilterComponent::exact("user", "alice"),
                ClientQuotaFilterComponent::default_entity("client-id"),
                ClientQuotaFilterComponent::any("ip"),
            ],
            true,
        );
        assert!(req.strict);
        let got: Vec<(i8, Option<&str>)> = req
            .components
            .iter()
            .map(|c| (c.match_type, c.r#match.as_deref()))
            .collect();
        assert_eq!(got, vec![(0, Some("alice")), (1, None), (2, None)]);
    }

    #[test]
    fn alterations_and_results_are_per_entity() {
        let alice = ClientQuotaEntity::user(Some("alice"));
        let both = ClientQuotaEntity::new([("user", Some("bob".to_owned())), ("client-id", None)]);
        assert_eq!(both.entries[0].0, "client-id", "entries are sorted");
        let req = alter_client_quotas_request_for(
            &[
                ClientQuotaAlteration::new(alice.clone()).set("producer_byte_rate", 1024.0),
                ClientQuotaAlteration::new(both.clone()).remove("consumer_byte_rate"),
            ],
            false,
        );
        assert_eq!(req.entries[0].ops[0].value, 1024.0);
        assert!(!req.entries[0].ops[0].remove);
        assert!(req.entries[1].ops[0].remove);

        // The broker answers in its own order, with the entity pairs unsorted.
        let mut resp = AlterClientQuotasResponse::default();
        let mut e1 = alter_client_quotas_response::EntryData::default();
        e1.error_code = ErrorCode::INVALID_REQUEST;
        for (t, n) in [("user", Some("bob")), ("client-id", None)] {
            let mut d = alter_client_quotas_response::EntityData::default();
            d.entity_type = t.into();
            d.entity_name = n.map(Into::into);
            e1.entity.push(d);
        }
        let mut e0 = alter_client_quotas_response::EntryData::default();
        let mut d = alter_client_quotas_response::EntityData::default();
        d.entity_type = "user".into();
        d.entity_name = Some("alice".into());
        e0.entity.push(d);
        resp.entries = vec![e1, e0];
        let out = alter_client_quotas_results(vec![alice, both], resp);
        assert!(out[0].1.is_ok());
        assert_eq!(
            out[1].1.as_ref().unwrap_err().error_code(),
            Some(ErrorCode::INVALID_REQUEST)
        );
    }

    #[test]
    fn described_quotas_are_mapped() {
        let mut resp = DescribeClientQuotasResponse::default();
        let mut entry = describe_client_quotas_response::EntryData::default();
        let mut d = describe_client_quotas_response::EntityData::default();
        d.entity_type = "user".into();
        d.entity_name = None;
        entry.entity.push(d);
        let mut v = describe_client_quotas_response::ValueData::default();
        v.key = "producer_byte_rate".into();
        v.value = 2048.0;
        entry.values.push(v);
        resp.entries = Some(vec![entry]);
        let out = describe_client_quotas_result(resp).unwrap();
        assert_eq!(out[0].0, ClientQuotaEntity::user(None));
        assert_eq!(out[0].1["producer_byte_rate"], 2048.0);

        let mut resp = DescribeClientQuotasResponse::default();
        resp.error_code = ErrorCode::INVALID_REQUEST;
        assert!(describe_client_quotas_result(resp).is_err());
    }
}
