//! Apache Kafka wire protocol: every API message generated from Kafka's JSON schemas, the
//! primitives they are made of, and protocol error codes.
//!
//! Each schema becomes one Rust type covering all of its versions ([`Message`]), built with
//! `with_<field>` setters; requests also implement [`Request`] (API key, response type, header
//! versions, routing, `timeout_ms`), responses [`Response`] (`throttle_time_ms`, the top-level
//! `error_code`). Error-code fields are typed [`ErrorCode`]. Messages live in
//! [`messages`], nested structs in the message's module (e.g.
//! `messages::produce_request::TopicProduceData`).
//!
//! Framing: [`write_request_frame`] appends `[size][request header][body]` for any request type,
//! and [`decode_response_frame`] reads a response header and body back. Record batches (the bytes
//! inside `records` fields) are handled by [`records`]. How the code is generated and which
//! invariants it keeps: `docs/protocol-codegen.md`.
//!
//! # Features
//!
//! - `arbitrary`: `kafkit_protocol::arbitrary::{Gen, Arbitrary}`, random values valid at a version.
//!
//! ```
//! use bytes::BytesMut;
//! use kafkit_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
//! use kafkit_protocol::{ApiKey, Message, Request};
//!
//! let req = ApiVersionsRequest::default()
//!     .with_client_software_name("kafkit".to_string())
//!     .with_client_software_version("0.1.0".to_string());
//!
//! let mut buf = BytesMut::new();
//! req.encode(&mut buf, 3)?;
//! assert_eq!(buf.len(), req.compute_size(3)?);
//!
//! let decoded = ApiVersionsRequest::decode(&mut buf.freeze(), 3)?;
//! assert_eq!(decoded, req);
//! assert_eq!(ApiVersionsRequest::API_KEY, ApiKey::ApiVersions);
//! // ApiVersions responses always use response header version 0 (KIP-511).
//! assert_eq!(ApiVersionsRequest::response_header_version(3), 0);
//! # let _ = ApiVersionsResponse::default();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
// docs.rs builds with `--cfg docsrs` (Cargo.toml): nightly rustdoc then marks each item behind a
// cargo feature with that feature (`doc_cfg` shows the `#[cfg]` of an item by itself).
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "arbitrary")]
pub mod arbitrary;
pub mod error;
pub mod generated;
pub mod primitives;
pub mod protocol;
pub mod records;
pub mod splice;

pub use error::{DecodeError, EncodeError};
pub use generated as messages;
pub use generated::api_key::{ApiKey, UnknownApiKey};
pub use generated::error_code::ErrorCode;
pub use primitives::{TaggedFields, Uuid};
pub use protocol::{
    ApiVersion, Message, Request, Response, Routing, VersionRange, decode_response_frame,
    read_response_header, write_request_frame, write_request_header,
};

/// The example of this crate's README.md, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
