//! Removing members from a consumer group: LeaveGroup v3+ (key 13) naming the members, sent to
//! the group's coordinator on their behalf (KIP-345).

use kafkit_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse, leave_group_request};

use super::Client;
use crate::error::{Error, Result};
use crate::ops::{ResourceResult, check_distinct, code_result, missing, unsupported_from};

/// The reason sent when the caller gives none (Java's `DEFAULT_LEAVE_GROUP_REASON`).
const DEFAULT_REASON: &str = "member was removed by an admin";

/// Which members [`Client::remove_members_from_consumer_group`] removes (Java
/// `RemoveMembersFromConsumerGroupOptions`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MembersToRemove {
    /// The static members with these `group.instance.id`s (Java `MemberToRemove`, KIP-345).
    Static(Vec<String>),
    /// Every member the group's description lists (Java's `removeAll`), dynamic ones by
    /// member id.
    All,
}

/// A member as LeaveGroup names it (Java `MemberIdentity`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct MemberToRemove {
    /// The member id; empty for a static member named by its instance id alone.
    pub member_id: String,
    /// The static member's `group.instance.id`, if any.
    pub group_instance_id: Option<String>,
}

/// Builds the LeaveGroup request removing `members` from `group` with `reason` (truncated to
/// 255 bytes, as Java truncates reasons).
///
/// Errors: [`Error::InvalidArgument`] for no members or a member named twice.
pub(crate) fn remove_members_request(
    group: &str,
    members: &[MemberToRemove],
    reason: &str,
) -> Result<LeaveGroupRequest> {
    if members.is_empty() {
        return Err(Error::InvalidArgument("no members to remove".into()));
    }
    check_distinct("member", members)?;
    let mut cut = reason.len().min(255);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    let reason = &reason[..cut];
    Ok(LeaveGroupRequest::default()
        .with_group_id(group.to_owned())
        .with_members(
            members
                .iter()
                .map(|m| {
                    leave_group_request::MemberIdentity::default()
                        .with_member_id(m.member_id.clone())
                        .with_group_instance_id(m.group_instance_id.clone())
                        .with_reason(Some(reason.to_owned()))
                })
                .collect(),
        ))
}

/// Maps a LeaveGroup answer to one result per member, in order: `Ok` when it left, else its
/// code (`UNKNOWN_MEMBER_ID` for an unknown instance id, `FENCED_INSTANCE_ID` when the member
/// id does not match the static member's...). A member is found by its instance id when it has
/// one, else by its member id.
///
/// Errors: the top-level code (`GROUP_AUTHORIZATION_FAILED`...).
pub(crate) fn remove_members_results(
    members: &[MemberToRemove],
    resp: LeaveGroupResponse,
) -> Result<Vec<(MemberToRemove, ResourceResult<()>)>> {
    code_result("LeaveGroup", resp.error_code, None)?;
    let mut answers: Vec<Option<_>> = resp.members.into_iter().map(Some).collect();
    Ok(members
        .iter()
        .map(|m| {
            let found = answers.iter_mut().find(|a| {
                a.as_ref().is_some_and(|a| match &m.group_instance_id {
                    Some(id) => a.group_instance_id.as_deref() == Some(id.as_str()),
                    None => a.member_id == m.member_id,
                })
            });
            let r = match found.and_then(Option::take) {
                Some(a) => code_result("LeaveGroup", a.error_code, None),
                None => Err(missing("LeaveGroup", m)),
            };
            (m.clone(), r)
        })
        .collect())
}

impl Client {
    /// Removes members from consumer group `group` (Java
    /// `Admin.removeMembersFromConsumerGroup`): LeaveGroup v3+ on their behalf, sent to the
    /// group's coordinator. Static members (KIP-345) are named by `group.instance.id`; with
    /// [`MembersToRemove::All`] the group is described first and every listed member is
    /// removed. `reason` is logged by the coordinator (v5+, KIP-800; `None`: "member was
    /// removed by an admin").
    ///
    /// Returns one result per member, in order (the instance ids' order, or the description's
    /// for `All`; empty when `All` finds no member).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for no instance ids or one given twice;
    /// [`Error::UnsupportedVersion`] for LeaveGroup below v3; [`Error::Broker`] with the
    /// group's top-level code (`GROUP_AUTHORIZATION_FAILED`, `NOT_COORDINATOR` past the
    /// client's timeout...; Kafka 4.4 answers a group that does not exist with
    /// `UNKNOWN_MEMBER_ID` per member, not here); for `All`, the errors of
    /// [`Client::describe_consumer_groups`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped future may have removed the members.
    pub async fn remove_members_from_consumer_group(
        &self,
        group: &str,
        members: &MembersToRemove,
        reason: Option<&str>,
    ) -> Result<Vec<(MemberToRemove, ResourceResult<()>)>> {
        let members: Vec<MemberToRemove> = match members {
            MembersToRemove::Static(ids) => ids
                .iter()
                .map(|id| MemberToRemove {
                    member_id: String::new(),
                    group_instance_id: Some(id.clone()),
                })
                .collect(),
            MembersToRemove::All => {
                let mut d = self.describe_consumer_groups(&[group], false).await?;
                let (_, described) = d.pop().ok_or_else(|| missing("DescribeGroups", group))?;
                let members: Vec<MemberToRemove> = described?
                    .members
                    .into_iter()
                    .map(|m| MemberToRemove {
                        member_id: m.member_id,
                        group_instance_id: m.group_instance_id,
                    })
                    .collect();
                if members.is_empty() {
                    return Ok(Vec::new());
                }
                members
            }
        };
        let reason = reason.filter(|r| !r.is_empty()).unwrap_or(DEFAULT_REASON);
        let req = remove_members_request(group, &members, reason)?;
        let version = self.version::<LeaveGroupRequest>().await?;
        if version < 3 {
            return Err(unsupported_from::<LeaveGroupRequest>(3, version));
        }
        let resp = self
            .transport()
            .round_trip_within(req, self.timeout())
            .await?;
        remove_members_results(&members, resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_protocol::messages::leave_group_response;
    use kafkit_protocol::{ErrorCode, Message};

    fn by_instance(id: &str) -> MemberToRemove {
        MemberToRemove {
            member_id: String::new(),
            group_instance_id: Some(id.into()),
        }
    }

    #[test]
    fn remove_members_builds_and_maps() {
        let dynamic = MemberToRemove {
            member_id: "m-1".into(),
            group_instance_id: None,
        };
        let members = [by_instance("a"), dynamic.clone(), by_instance("b")];
        let long = "é".repeat(200);
        let req = remove_members_request("g", &members, &long).expect("request");
        assert_eq!(req.members.len(), 3);
        let sent = req.members[0].reason.as_deref().expect("reason");
        assert!(
            sent.len() <= 255 && long.starts_with(sent),
            "{}",
            sent.len()
        );
        for v in 3..=5 {
            let mut buf = bytes::BytesMut::new();
            req.encode(&mut buf, v).expect("encodes");
        }
        assert!(remove_members_request("g", &[], "r").is_err());
        assert!(remove_members_request("g", &[by_instance("a"), by_instance("a")], "r").is_err());

        let answer = |member_id: &str, instance: Option<&str>, code| {
            leave_group_response::MemberResponse::default()
                .with_member_id(member_id.into())
                .with_group_instance_id(instance.map(str::to_owned))
                .with_error_code(code)
        };
        let resp = LeaveGroupResponse::default().with_members(vec![
            answer("", Some("b"), ErrorCode::UNKNOWN_MEMBER_ID),
            answer("x-9", Some("a"), ErrorCode::NONE),
            answer("m-1", None, ErrorCode::NONE),
        ]);
        let got = remove_members_results(&members, resp.clone()).expect("answered");
        assert_eq!(got[0].0, by_instance("a"));
        assert!(got[0].1.is_ok());
        assert_eq!(got[1].0, dynamic);
        assert!(got[1].1.is_ok());
        assert_eq!(
            got[2].1.as_ref().unwrap_err().error_code(),
            Some(ErrorCode::UNKNOWN_MEMBER_ID)
        );
        let got = remove_members_results(&[by_instance("c")], resp).expect("answered");
        assert!(matches!(got[0].1, Err(Error::Protocol(_))));
        let top = LeaveGroupResponse::default().with_error_code(ErrorCode::UNKNOWN_MEMBER_ID);
        assert_eq!(
            remove_members_results(&members, top)
                .unwrap_err()
                .error_code(),
            Some(ErrorCode::UNKNOWN_MEMBER_ID)
        );
    }
}
