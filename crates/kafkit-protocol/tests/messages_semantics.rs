//! Version rules, tagged fields, headers, API keys and error codes.

use bytes::{BufMut, Bytes, BytesMut};
use kafkit_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, ControlledShutdownRequest, FetchRequest,
    ListOffsetsRequest, MetadataRequest, ProduceRequest, RequestHeader, ResponseHeader,
    produce_request::TopicProduceData,
};
use kafkit_protocol::{
    ApiKey, DecodeError, EncodeError, ErrorCode, Message, Request, Routing, VersionRange,
};

fn encode<M: Message>(m: &M, v: i16) -> Result<Bytes, EncodeError> {
    let mut b = BytesMut::new();
    m.encode(&mut b, v)?;
    Ok(b.freeze())
}

#[test]
fn non_ignorable_field_absent_at_version_fails_to_encode() {
    let mut req = ListOffsetsRequest::default().with_isolation_level(1); // versions 2+, not ignorable
    let err = encode(&req, 1).unwrap_err();
    assert_eq!(
        err,
        EncodeError::FieldNotSupportedAtVersion {
            message: "ListOffsetsRequest",
            field: "isolation_level",
            version: 1
        }
    );
    assert_eq!(req.compute_size(1), Err(err));
    assert!(encode(&req, 2).is_ok());

    // A failed encode leaves the buffer as it was, even after earlier fields were written.
    let mut buf = BytesMut::from(&b"abc"[..]);
    assert!(req.encode(&mut buf, 1).is_err());
    assert_eq!(&buf[..], b"abc");

    // At the default value the field is simply not sent.
    req.isolation_level = 0;
    assert!(encode(&req, 1).is_ok());

    let p = ProduceRequest::default().with_transactional_id(Some("txn".into())); // versions 3+
    assert!(matches!(
        encode(&p, 2),
        Err(EncodeError::FieldNotSupportedAtVersion {
            field: "transactional_id",
            ..
        })
    ));
}

#[test]
fn ignorable_field_absent_at_version_is_dropped() {
    // FetchRequest.ClusterId is tagged in 12+ and ignorable: silently dropped before that.
    let f = FetchRequest::default().with_cluster_id(Some("c1".into()));
    let bytes = encode(&f, 11).expect("ignorable field dropped");
    let back = FetchRequest::decode(&mut bytes.clone(), 11).unwrap();
    assert_eq!(back.cluster_id, None);
    // ... and sent as tag 0 from version 12.
    let bytes = encode(&f, 12).unwrap();
    let back = FetchRequest::decode(&mut bytes.clone(), 12).unwrap();
    assert_eq!(back.cluster_id.as_deref(), Some("c1"));
}

#[test]
fn null_in_non_nullable_version_fails_to_encode() {
    let m = MetadataRequest::default().with_topics(None); // nullable from version 1 only
    assert!(matches!(
        encode(&m, 0),
        Err(EncodeError::NullNotAllowed { .. })
    ));
    assert!(encode(&m, 1).is_ok());
}

#[test]
fn unknown_tagged_fields_survive_a_round_trip() {
    let mut req = ApiVersionsRequest::default().with_client_software_name("x".into());
    req.unknown_tagged_fields
        .insert(7, Bytes::from_static(b"\x01\x02"));
    req.unknown_tagged_fields
        .insert(300, Bytes::from_static(b""));
    let bytes = encode(&req, 3).unwrap();
    let back = ApiVersionsRequest::decode(&mut bytes.clone(), 3).unwrap();
    assert_eq!(back, req);
    assert_eq!(encode(&back, 3).unwrap(), bytes);

    // Nested structs keep theirs too, and unknown tags are interleaved with known ones by tag.
    let t = TopicProduceData::default()
        .with_name("t".into())
        .with_unknown_tagged_fields([(5, Bytes::from_static(b"zz"))].into());
    let p = ProduceRequest::default().with_topic_data(vec![t]);
    let bytes = encode(&p, 9).unwrap();
    assert_eq!(ProduceRequest::decode(&mut bytes.clone(), 9).unwrap(), p);

    let f = FetchRequest::default()
        .with_cluster_id(Some("c".into())) // known tag 0
        .with_unknown_tagged_fields([(4, Bytes::from_static(b"u"))].into());
    let bytes = encode(&f, 12).unwrap();
    // Tag section at the end: count 2, tag 0 first, then tag 4.
    let tail = &bytes[bytes.len() - 8..];
    assert_eq!(tail, &[2, 0, 2, 2, b'c', 4, 1, b'u']);
    assert_eq!(FetchRequest::decode(&mut bytes.clone(), 12).unwrap(), f);
}

#[test]
fn header_versions() {
    assert_eq!(ApiVersionsRequest::response_header_version(3), 0);
    assert_eq!(ApiVersionsRequest::response_header_version(4), 0);
    assert_eq!(ApiVersionsRequest::request_header_version(3), 2);
    assert_eq!(ApiVersionsRequest::request_header_version(2), 1);
    assert_eq!(MetadataRequest::response_header_version(9), 1);
    assert_eq!(MetadataRequest::response_header_version(8), 0);
    assert_eq!(ControlledShutdownRequest::request_header_version(0), 0);
    assert_eq!(ControlledShutdownRequest::request_header_version(1), 1);
    assert_eq!(ControlledShutdownRequest::request_header_version(3), 2);
}

#[test]
fn request_header_client_id_keeps_the_classic_encoding_in_v2() {
    let h = RequestHeader::default()
        .with_request_api_key(18)
        .with_request_api_version(3)
        .with_correlation_id(42)
        .with_client_id(Some("ab".into()));
    let bytes = encode(&h, 2).unwrap();
    let mut want = BytesMut::new();
    want.put_i16(18);
    want.put_i16(3);
    want.put_i32(42);
    want.put_i16(2); // int16 length, not a compact varint
    want.put_slice(b"ab");
    want.put_u8(0); // empty tagged-field section
    assert_eq!(&bytes[..], &want[..]);
    assert_eq!(RequestHeader::decode(&mut bytes.clone(), 2).unwrap(), h);

    let r = ResponseHeader::default().with_correlation_id(9);
    assert_eq!(&encode(&r, 0).unwrap()[..], &[0, 0, 0, 9]);
    assert_eq!(&encode(&r, 1).unwrap()[..], &[0, 0, 0, 9, 0]);
}

#[test]
fn decode_advances_past_one_message_only() {
    let r = ResponseHeader::default().with_correlation_id(1);
    let mut b = BytesMut::new();
    r.encode(&mut b, 0).unwrap();
    b.put_slice(b"rest");
    let mut bytes = b.freeze();
    ResponseHeader::decode(&mut bytes, 0).unwrap();
    assert_eq!(&bytes[..], b"rest");
}

#[test]
fn bytes_fields_are_zero_copy() {
    let part = kafkit_protocol::messages::produce_request::PartitionProduceData::default()
        .with_records(Some(Bytes::from_static(b"0123456789")));
    let t = TopicProduceData::default()
        .with_name("t".into())
        .with_partition_data(vec![part]);
    let p = ProduceRequest::default().with_topic_data(vec![t]);
    let bytes = encode(&p, 9).unwrap();
    let back = ProduceRequest::decode(&mut bytes.clone(), 9).unwrap();
    let rec = back.topic_data[0].partition_data[0]
        .records
        .as_ref()
        .unwrap();
    let range = bytes.as_ptr_range();
    assert!(
        range.contains(&rec.as_ptr()),
        "records must point into the input buffer"
    );
}

#[test]
fn api_keys_cover_0_to_94() {
    assert_eq!(ApiKey::ALL.len(), 95);
    for (i, k) in ApiKey::ALL.iter().enumerate() {
        assert_eq!(*k as i16, i as i16);
        assert_eq!(ApiKey::try_from(i as i16), Ok(*k));
    }
    assert!(ApiKey::try_from(95).is_err());
    assert!(ApiKey::try_from(-1).is_err());
    assert_eq!(ApiKey::Produce.name(), "Produce");
    assert_eq!(ApiKey::ApiVersions as i16, 18);
    assert_eq!(ApiKey::ReadShareGroupStateSummary as i16, 87);
    assert_eq!(ApiKey::ListConfigResources as i16, 74);
    assert_eq!(ApiKey::UnregisterController as i16, 94);
    assert_eq!(ApiKey::Produce.valid_versions(), ProduceRequest::VERSIONS);
    assert_eq!(ProduceRequest::API_KEY, ApiKey::Produce);
    assert_eq!(ProduceRequest::ROUTING, Routing::PartitionLeader);
    assert_eq!(MetadataRequest::ROUTING, Routing::AnyBroker);
}

#[test]
fn every_request_has_matching_response_and_key() {
    let mut n = 0;
    macro_rules! check {
        ($module:ident, $req:ident, $resp:ident) => {{
            type Q = kafkit_protocol::messages::$req;
            type S = kafkit_protocol::messages::$resp;
            assert_eq!(format!("{}Request", Q::API_KEY.name()), Q::NAME);
            assert_eq!(<Q as Request>::Response::default(), S::default());
            assert_eq!(Q::API_KEY.valid_versions(), Q::VERSIONS);
            n += 1;
        }};
    }
    kafkit_protocol::for_each_request!(check);
    assert_eq!(n, 95);
}

#[test]
fn error_codes() {
    let e = ErrorCode::NOT_LEADER_OR_FOLLOWER;
    assert_eq!(e.0, 6);
    assert_eq!(e.name(), "NOT_LEADER_OR_FOLLOWER");
    assert!(e.is_retriable());
    assert!(e.is_invalid_metadata());
    // KIP-1050 categories, from the 4.4 error table.
    assert!(e.is_refresh_retriable());
    assert!(!e.is_transaction_abortable() && !e.is_application_recoverable());
    assert!(ErrorCode::TRANSACTION_ABORTABLE.is_transaction_abortable());
    assert!(ErrorCode::PRODUCER_FENCED.is_application_recoverable());
    assert!(!ErrorCode(-2).is_refresh_retriable());
    assert_eq!(ErrorCode(129).name(), "REBOOTSTRAP_REQUIRED");
    assert!(!e.is_ok());
    assert!(ErrorCode::NONE.is_ok());
    assert_eq!(ErrorCode::NONE.ok(), Ok(()));
    assert_eq!(ErrorCode::from(3), ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    assert!(!ErrorCode::INVALID_REQUEST.is_retriable());
    assert_eq!(ErrorCode(-1).name(), "UNKNOWN_SERVER_ERROR");
    assert_eq!(ErrorCode(10_000).name(), "UNKNOWN");
    assert!(!ErrorCode(10_000).is_known());
    assert_eq!(ErrorCode(6).to_string(), "NOT_LEADER_OR_FOLLOWER (6)");
    assert_eq!(ErrorCode::INVALID_REGULAR_EXPRESSION.0, 128);
}

#[test]
fn version_ranges() {
    let a = VersionRange::new(0, 11);
    let b = VersionRange::new(3, 13);
    assert_eq!(a.intersect(&b), Some(VersionRange::new(3, 11)));
    assert_eq!(a.intersect(&VersionRange::new(12, 13)), None);
    assert!(a.contains(0) && a.contains(11) && !a.contains(12));
    assert_eq!(
        ProduceRequest::FLEXIBLE_VERSIONS,
        Some(VersionRange::new(9, i16::MAX))
    );
    assert!(ProduceRequest::is_flexible(9) && !ProduceRequest::is_flexible(8));
    assert_eq!(VersionRange::new(9, i16::MAX).to_string(), "9+");
}

#[test]
fn api_versions_response_decodes_with_unknown_trailing_tags() {
    let r = ApiVersionsResponse::default().with_error_code(ErrorCode::UNSUPPORTED_VERSION);
    let mut b = BytesMut::new();
    r.encode(&mut b, 3).unwrap();
    let back = ApiVersionsResponse::decode(&mut b.freeze(), 3).unwrap();
    assert_eq!(back.error_code, ErrorCode(35));
    let _ = DecodeError::Truncated {
        needed: 1,
        remaining: 0,
    };
}

#[test]
fn request_frames_match_the_generated_header() {
    use kafkit_protocol::{decode_response_frame, write_request_frame};
    let req = MetadataRequest::default().with_topics(None);
    for version in [1i16, 9, 12] {
        let mut frame = BytesMut::new();
        frame.put_slice(b"keep");
        write_request_frame(&mut frame, &req, version, 77, Some("cli")).unwrap();
        let mut body = frame.freeze().slice(4..);
        let size = i32::from_be_bytes(body[..4].try_into().unwrap());
        assert_eq!(size as usize, body.len() - 4);
        let _ = body.split_to(4);
        let hv = MetadataRequest::request_header_version(version);
        let h = RequestHeader::decode(&mut body, hv).unwrap();
        assert_eq!(
            (h.request_api_key, h.request_api_version, h.correlation_id),
            (3, version, 77)
        );
        assert_eq!(h.client_id.as_deref(), Some("cli"));
        assert_eq!(MetadataRequest::decode(&mut body, version).unwrap(), req);
        assert!(body.is_empty());
    }
    // Unsupported version: nothing written.
    let mut frame = BytesMut::new();
    assert!(write_request_frame(&mut frame, &req, 40, 1, None).is_err());
    assert!(frame.is_empty());

    // Response side: ApiVersions v3 uses header v0 (no tagged fields after the correlation id).
    let resp = ApiVersionsResponse::default().with_throttle_time_ms(5);
    let mut body = BytesMut::new();
    body.put_i32(12);
    resp.encode(&mut body, 3).unwrap();
    let (cid, back) = decode_response_frame::<ApiVersionsRequest>(body.freeze(), 3).unwrap();
    assert_eq!((cid, back), (12, resp));
}

#[test]
fn strings_longer_than_int16_fail_to_encode_in_compact_form_too() {
    let t = kafkit_protocol::messages::metadata_request::MetadataRequestTopic::default()
        .with_name(Some("t".repeat(32_768)));
    let mut m = MetadataRequest::default().with_topics(Some(vec![t]));
    // v0 (int16 length) and v12 (compact, uvarint length) alike: Kafka caps strings at 32767.
    for v in [0, 12] {
        assert!(
            matches!(
                encode(&m, v),
                Err(EncodeError::TooLong {
                    max: 32_767,
                    len: 32_768,
                    ..
                })
            ),
            "v{v}"
        );
    }
    if let Some(topics) = m.topics.as_mut() {
        topics[0].name = Some("t".repeat(32_767));
    }
    assert!(encode(&m, 12).is_ok());
}

#[test]
fn unknown_error_codes_survive_a_round_trip() {
    use kafkit_protocol::messages::{HeartbeatResponse, ProduceResponse, produce_response};
    // A code newer than this library, and one that no broker sends: both come back unchanged.
    for code in [ErrorCode(10_000), ErrorCode(i16::MIN)] {
        assert!(!code.is_known());
        let r = HeartbeatResponse::default().with_error_code(code);
        let bytes = encode(&r, 4).unwrap();
        // throttle_time_ms (4 bytes), then the code.
        assert_eq!(&bytes[4..6], &code.0.to_be_bytes());
        assert_eq!(HeartbeatResponse::decode(&mut bytes.clone(), 4).unwrap(), r);
        let p = produce_response::PartitionProduceResponse::default().with_error_code(code);
        let t = produce_response::TopicProduceResponse::default().with_partition_responses(vec![p]);
        let r = ProduceResponse::default().with_responses(vec![t]);
        let bytes = encode(&r, 9).unwrap();
        let back = ProduceResponse::decode(&mut bytes.clone(), 9).unwrap();
        assert_eq!(back.responses[0].partition_responses[0].error_code, code);
    }
}

#[test]
fn setters_build_what_field_assignment_builds() {
    use kafkit_protocol::messages::JoinGroupRequest;
    let built = JoinGroupRequest::default()
        .with_group_id("g".into())
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(60_000)
        .with_group_instance_id(Some("i".into()));
    let mut assigned = JoinGroupRequest::default();
    assigned.group_id = "g".into();
    assigned.session_timeout_ms = 10_000;
    assigned.rebalance_timeout_ms = 60_000;
    assigned.group_instance_id = Some("i".into());
    assert_eq!(built, assigned);
    // Fields not set keep their schema defaults.
    assert_eq!(JoinGroupRequest::default().rebalance_timeout_ms, -1);
    assert_eq!(built.reason, None);
}

#[test]
fn generated_accessors_follow_the_schemas() {
    use kafkit_protocol::Response;
    use kafkit_protocol::messages::{
        CreateTopicsRequest, DeleteRecordsRequest, FetchResponse, FindCoordinatorResponse,
        HeartbeatRequest, HeartbeatResponse, JoinGroupResponse, MetadataResponse, ProduceResponse,
        SaslHandshakeResponse,
    };
    // throttle_time_ms where the schema has it.
    let hb = HeartbeatResponse::default()
        .with_throttle_time_ms(250)
        .with_error_code(ErrorCode::REBALANCE_IN_PROGRESS);
    assert_eq!(hb.throttle_time_ms(), Some(250));
    assert_eq!(hb.error_code(), Some(ErrorCode::REBALANCE_IN_PROGRESS));
    assert_eq!(
        ProduceResponse::default()
            .with_throttle_time_ms(7)
            .throttle_time_ms(),
        Some(7)
    );
    assert_eq!(SaslHandshakeResponse::default().throttle_time_ms(), None);
    // The top-level error code, where there is one (Fetch v7+, FindCoordinator v0-3, ...).
    assert_eq!(
        SaslHandshakeResponse::default().error_code(),
        Some(ErrorCode::NONE)
    );
    assert_eq!(FetchResponse::default().error_code(), Some(ErrorCode::NONE));
    assert_eq!(
        FindCoordinatorResponse::default().error_code(),
        Some(ErrorCode::NONE)
    );
    // Metadata v13 has a top-level error code (REBOOTSTRAP_REQUIRED, KIP-1102).
    assert_eq!(
        MetadataResponse::default().error_code(),
        Some(ErrorCode::NONE)
    );
    assert_eq!(ProduceResponse::default().error_code(), None);
    assert_eq!(
        JoinGroupResponse::default()
            .with_error_code(ErrorCode::MEMBER_ID_REQUIRED)
            .error_code(),
        Some(ErrorCode::MEMBER_ID_REQUIRED)
    );
    // A request's timeout_ms (the schemas spell it TimeoutMs or timeoutMs).
    let p = ProduceRequest::default().with_timeout_ms(1_500);
    assert_eq!(p.timeout_ms(), Some(1_500));
    assert_eq!(
        CreateTopicsRequest::default()
            .with_timeout_ms(5_000)
            .timeout_ms(),
        Some(5_000)
    );
    assert_eq!(
        DeleteRecordsRequest::default()
            .with_timeout_ms(9)
            .timeout_ms(),
        Some(9)
    );
    assert_eq!(HeartbeatRequest::default().timeout_ms(), None);
    assert_eq!(FetchRequest::default().timeout_ms(), None);
}
