//! Byte-for-byte agreement with the crates.io `kafka-protocol` crate (`kprs`) for the core
//! APIs, at every version both support.
//!
//! Direction 1: a random value of ours is encoded by us, decoded by kprs and re-encoded by kprs;
//! the bytes must be identical. Direction 2: those kprs-made bytes are decoded by us, must give
//! back the original value, and re-encode to the same bytes. Values carry no unknown tagged
//! fields (kprs keeps them differently).

use bytes::BytesMut;
use kafka_protocol::Message;
use kafka_protocol::arbitrary::{Arbitrary, Gen};
use proptest::prelude::*;

fn compare<M, K>(seed: u64) -> Result<(), TestCaseError>
where
    M: Message + Arbitrary,
    K: kprs::protocol::Message
        + kprs::protocol::Encodable
        + kprs::protocol::Decodable
        + std::fmt::Debug,
{
    let ours = M::VERSIONS;
    let theirs = kafka_protocol::VersionRange::new(K::VERSIONS.min, K::VERSIONS.max);
    let Some(common) = ours.intersect(&theirs) else {
        return Err(TestCaseError::fail(format!(
            "{}: no common versions",
            M::NAME
        )));
    };
    for version in common.min..=common.max {
        let mut g = Gen::new(seed);
        g.unknown_tags = false;
        let value = M::arbitrary(&mut g, version);
        let mut ours_buf = BytesMut::new();
        value
            .encode(&mut ours_buf, version)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let ours_bytes = ours_buf.freeze();

        let mut input = ours_bytes.clone();
        let k = K::decode(&mut input, version).map_err(|e| {
            TestCaseError::fail(format!("{} v{version}: kprs decode: {e:?}", M::NAME))
        })?;
        prop_assert!(
            input.is_empty(),
            "{} v{}: kprs left {} bytes",
            M::NAME,
            version,
            input.len()
        );
        let mut theirs_buf = BytesMut::new();
        k.encode(&mut theirs_buf, version).map_err(|e| {
            TestCaseError::fail(format!("{} v{version}: kprs encode: {e:?}", M::NAME))
        })?;
        let theirs_bytes = theirs_buf.freeze();
        prop_assert_eq!(
            &ours_bytes[..],
            &theirs_bytes[..],
            "{} v{}: ours vs kprs bytes",
            M::NAME,
            version
        );

        let mut input = theirs_bytes.clone();
        let back = M::decode(&mut input, version).map_err(|e| {
            TestCaseError::fail(format!(
                "{} v{version}: our decode of kprs bytes: {e}",
                M::NAME
            ))
        })?;
        prop_assert_eq!(&back, &value, "{} v{}", M::NAME, version);
        let mut again = BytesMut::new();
        back.encode(&mut again, version)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&again[..], &theirs_bytes[..]);
    }
    Ok(())
}

macro_rules! interop {
    ($($name:ident: $ty:ident),* $(,)?) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
            $(
                #[test]
                fn $name(seed in any::<u64>()) {
                    compare::<kafka_protocol::messages::$ty, kprs::messages::$ty>(seed)?;
                }
            )*
        }
    };
}

interop! {
    produce_request: ProduceRequest,
    produce_response: ProduceResponse,
    fetch_request: FetchRequest,
    fetch_response: FetchResponse,
    metadata_request: MetadataRequest,
    metadata_response: MetadataResponse,
    api_versions_request: ApiVersionsRequest,
    api_versions_response: ApiVersionsResponse,
    list_offsets_request: ListOffsetsRequest,
    list_offsets_response: ListOffsetsResponse,
    create_topics_request: CreateTopicsRequest,
    create_topics_response: CreateTopicsResponse,
    join_group_request: JoinGroupRequest,
    join_group_response: JoinGroupResponse,
    sync_group_request: SyncGroupRequest,
    sync_group_response: SyncGroupResponse,
    offset_commit_request: OffsetCommitRequest,
    offset_commit_response: OffsetCommitResponse,
    offset_fetch_request: OffsetFetchRequest,
    offset_fetch_response: OffsetFetchResponse,
}
