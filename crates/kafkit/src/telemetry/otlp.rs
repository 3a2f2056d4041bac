//! The OTLP `MetricsData` that a KIP-714 PushTelemetry carries in its `Metrics` field.
//!
//! KIP-714 fixes the payload as OpenTelemetry's `opentelemetry.proto.metrics.v1.MetricsData`
//! (protobuf, OTLP v1). Only the part a client pushes is declared here, by hand with `prost`'s
//! derive: one resource with attributes, one scope, and metrics that are gauges or sums of
//! number data points. Field numbers are those of `opentelemetry/proto/metrics/v1/metrics.proto`,
//! `resource/v1/resource.proto` and `common/v1/common.proto`; a receiver with the full schema
//! (the broker's plugin, librdkafka's mock) reads these messages as they are, and fields left out
//! here (histograms, exemplars, flags) are simply absent.

// The fields keep OTLP's names and meanings (metrics.proto documents each); a doc line per
// field here would only repeat the schema.
#![allow(missing_docs)]

use prost::Message as _;

/// `MetricsData`: the whole payload.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricsData {
    #[prost(message, repeated, tag = "1")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

/// `ResourceMetrics`: the metrics of one resource (this client).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceMetrics {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

/// `Resource`: what the metrics describe, as attributes (KIP-714's client resource labels).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

/// `ScopeMetrics`: the metrics of one instrumentation scope (the client library).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScopeMetrics {
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
}

/// `InstrumentationScope`: the library that produced the metrics.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `Metric`: a name, a description, a unit and its data (a gauge or a sum here).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub description: String,
    #[prost(string, tag = "3")]
    pub unit: String,
    #[prost(oneof = "Data", tags = "5, 7")]
    pub data: Option<Data>,
}

/// `Metric.data`: the kinds this client pushes.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Data {
    #[prost(message, tag = "5")]
    Gauge(Gauge),
    #[prost(message, tag = "7")]
    Sum(Sum),
}

/// `Gauge`: values sampled now.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Gauge {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
}

/// `Sum`: a counter, as a delta since the last push or cumulative since the start.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sum {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
    /// `AggregationTemporality`: 1 delta, 2 cumulative.
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
    #[prost(bool, tag = "3")]
    pub is_monotonic: bool,
}

/// `AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA`.
pub const DELTA: i32 = 1;
/// `AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE`.
pub const CUMULATIVE: i32 = 2;

/// `NumberDataPoint`: one value with its attributes and time span.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NumberDataPoint {
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(oneof = "Value", tags = "4, 6")]
    pub value: Option<Value>,
}

/// `NumberDataPoint.value`.
#[derive(Clone, Copy, PartialEq, prost::Oneof)]
pub enum Value {
    #[prost(double, tag = "4")]
    AsDouble(f64),
    #[prost(sfixed64, tag = "6")]
    AsInt(i64),
}

/// `KeyValue` with a string `AnyValue` (the only kind of attribute this client sends).
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

/// `AnyValue`, string case only (`string_value`, field 1).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyValue {
    #[prost(string, tag = "1")]
    pub string_value: String,
}

impl KeyValue {
    /// A string attribute.
    pub fn string(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue {
                string_value: value.to_owned(),
            }),
        }
    }
}

impl MetricsData {
    /// The protobuf encoding of the payload.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.encode_to_vec()
    }

    /// Reads a payload back (tests, and whoever inspects what was pushed).
    ///
    /// # Errors
    /// The bytes are not a `MetricsData` of the shape above.
    pub fn from_bytes(bytes: &[u8]) -> Result<MetricsData, prost::DecodeError> {
        MetricsData::decode(bytes)
    }

    /// Every metric of every resource and scope, in order.
    pub fn metrics(&self) -> impl Iterator<Item = &Metric> {
        self.resource_metrics
            .iter()
            .flat_map(|r| r.scope_metrics.iter())
            .flat_map(|s| s.metrics.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(v: Value) -> NumberDataPoint {
        NumberDataPoint {
            attributes: vec![KeyValue::string("node_id", "1")],
            start_time_unix_nano: 1,
            time_unix_nano: 2,
            value: Some(v),
        }
    }

    #[test]
    fn a_payload_decodes_to_what_was_encoded() {
        let data = MetricsData {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![KeyValue::string("transactional_id", "t")],
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: "kafkit".into(),
                        version: "0.1.0".into(),
                    }),
                    metrics: vec![
                        Metric {
                            name: "org.apache.kafka.producer.record.error.total".into(),
                            data: Some(Data::Sum(Sum {
                                data_points: vec![point(Value::AsInt(7))],
                                aggregation_temporality: DELTA,
                                is_monotonic: true,
                            })),
                            ..Metric::default()
                        },
                        Metric {
                            name: "org.apache.kafka.producer.batch.size.avg".into(),
                            data: Some(Data::Gauge(Gauge {
                                data_points: vec![point(Value::AsDouble(2.5))],
                            })),
                            ..Metric::default()
                        },
                    ],
                }],
            }],
        };
        let bytes = data.to_bytes();
        assert_eq!(MetricsData::from_bytes(&bytes).expect("decodes"), data);
        assert_eq!(data.metrics().count(), 2);
    }

    /// The wire form is OTLP's: `Metric.sum` is field 7 and `NumberDataPoint.as_int` an
    /// sfixed64 at field 6, whatever prost's defaults would be.
    #[test]
    fn field_numbers_are_otlp_ones() {
        let sum = Metric {
            name: "n".into(),
            data: Some(Data::Sum(Sum {
                data_points: vec![NumberDataPoint {
                    value: Some(Value::AsInt(1)),
                    ..NumberDataPoint::default()
                }],
                aggregation_temporality: CUMULATIVE,
                is_monotonic: true,
            })),
            ..Metric::default()
        };
        let b = sum.encode_to_vec();
        // name (1, LEN "n"), then sum (7, LEN) holding data_points (1, LEN) holding as_int (6,
        // I64) = 1, then temporality (2, VARINT 2) and monotonic (3, VARINT 1).
        assert_eq!(
            b,
            [
                0x0a, 1, b'n', 0x3a, 15, 0x0a, 9, 0x31, 1, 0, 0, 0, 0, 0, 0, 0, 0x10, 2, 0x18, 1
            ]
        );
    }
}
