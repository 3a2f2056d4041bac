//! From the registry's metrics to one push's payload: selection by the subscription's
//! prefixes, delta or cumulative sums, the size cap, and the OTLP encoding.

use std::collections::HashMap;

use super::otlp::{self, KeyValue, MetricsData};
use super::subscription::Subscription;
use super::{Metric, MetricKind, MetricValue};

/// A series: a metric name and its data point labels.
type Series = (String, Vec<(String, String)>);

/// What the engine remembers between pushes.
#[derive(Debug)]
pub(crate) struct Collector {
    /// The resource attributes (KIP-714's client labels: `client_rack`, `transactional_id`...).
    resource: Vec<(String, String)>,
    /// The attributes the sources gave at the last push ([`super::MetricSource::resource`]),
    /// after the fixed ones.
    dynamic: Vec<(String, String)>,
    /// When the collector started (the start of every cumulative sum), in ns since the epoch.
    start_ns: u64,
    /// When the last push was taken (the start of the next delta), in ns since the epoch.
    last_push_ns: u64,
    /// Each counter's cumulative value at the last accepted push (the base of the next delta).
    last: HashMap<Series, MetricValue>,
    /// At most this many metrics per push, after the broker said TELEMETRY_TOO_LARGE.
    limit: Option<usize>,
}

/// One push's payload, and what to remember once the broker took it.
#[derive(Debug)]
pub(crate) struct Payload {
    /// The encoded `MetricsData` (uncompressed).
    pub bytes: Vec<u8>,
    /// The number of metrics in it.
    pub metrics: usize,
    taken_ns: u64,
    counters: Vec<(Series, MetricValue)>,
}

impl Collector {
    pub fn new(resource: Vec<(String, String)>, now_ns: u64) -> Collector {
        Collector {
            resource,
            dynamic: Vec::new(),
            start_ns: now_ns,
            last_push_ns: now_ns,
            last: HashMap::new(),
            limit: None,
        }
    }

    /// The payload for `metrics` under `sub` at `now_ns`: only the metrics the subscription
    /// selects, sums as it asks, cut (halving the count) until it fits `sub.max_bytes`.
    pub fn payload(&self, metrics: Vec<Metric>, sub: &Subscription, now_ns: u64) -> Payload {
        let mut chosen: Vec<Metric> = metrics
            .into_iter()
            .filter(|m| sub.selects(&m.name))
            .collect();
        if let Some(limit) = self.limit {
            chosen.truncate(limit);
        }
        loop {
            let data = self.encode(&chosen, sub.delta, now_ns);
            let bytes = data.to_bytes();
            if sub.max_bytes == 0 || bytes.len() <= sub.max_bytes || chosen.len() <= 1 {
                let counters = chosen
                    .iter()
                    .filter(|m| m.kind == MetricKind::Counter)
                    .map(|m| ((m.name.clone(), m.labels.clone()), m.value))
                    .collect();
                return Payload {
                    bytes,
                    metrics: chosen.len(),
                    taken_ns: now_ns,
                    counters,
                };
            }
            chosen.truncate(chosen.len() / 2);
        }
    }

    /// Sets the sources' resource attributes of the next payloads.
    pub fn set_dynamic(&mut self, labels: Vec<(String, String)>) {
        self.dynamic = labels;
    }

    /// The broker took `p`: the next deltas start from it.
    pub fn accepted(&mut self, p: Payload) {
        self.last_push_ns = p.taken_ns;
        self.last.extend(p.counters);
    }

    /// The broker refused a payload of `metrics` metrics as too large (TELEMETRY_TOO_LARGE):
    /// the next pushes carry at most half as many.
    pub fn shrink(&mut self, metrics: usize) {
        self.limit = Some((metrics / 2).max(1));
    }

    fn encode(&self, metrics: &[Metric], delta: bool, now_ns: u64) -> MetricsData {
        let metrics = metrics
            .iter()
            .map(|m| self.metric(m, delta, now_ns))
            .collect();
        MetricsData {
            resource_metrics: vec![otlp::ResourceMetrics {
                resource: Some(otlp::Resource {
                    attributes: attributes(&self.resource)
                        .into_iter()
                        .chain(attributes(&self.dynamic))
                        .collect(),
                }),
                scope_metrics: vec![otlp::ScopeMetrics {
                    scope: Some(otlp::InstrumentationScope {
                        name: "kafkit".to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                    }),
                    metrics,
                }],
            }],
        }
    }

    fn metric(&self, m: &Metric, delta: bool, now_ns: u64) -> otlp::Metric {
        let data = match m.kind {
            MetricKind::Gauge => otlp::Data::Gauge(otlp::Gauge {
                data_points: vec![point(m, m.value, now_ns, now_ns)],
            }),
            MetricKind::Counter => {
                let (value, start) = if delta {
                    let base = self.last.get(&(m.name.clone(), m.labels.clone()));
                    (m.value.minus(base), self.last_push_ns)
                } else {
                    (m.value, self.start_ns)
                };
                otlp::Data::Sum(otlp::Sum {
                    data_points: vec![point(m, value, start, now_ns)],
                    aggregation_temporality: if delta { otlp::DELTA } else { otlp::CUMULATIVE },
                    is_monotonic: true,
                })
            }
        };
        otlp::Metric {
            name: m.name.clone(),
            description: m.description.to_owned(),
            unit: String::new(),
            data: Some(data),
        }
    }
}

fn attributes(labels: &[(String, String)]) -> Vec<KeyValue> {
    labels.iter().map(|(k, v)| KeyValue::string(k, v)).collect()
}

fn point(m: &Metric, value: MetricValue, start_ns: u64, now_ns: u64) -> otlp::NumberDataPoint {
    otlp::NumberDataPoint {
        attributes: attributes(&m.labels),
        start_time_unix_nano: start_ns,
        time_unix_nano: now_ns,
        value: Some(match value {
            MetricValue::Int(v) => otlp::Value::AsInt(v),
            MetricValue::Double(v) => otlp::Value::AsDouble(v),
        }),
    }
}

impl MetricValue {
    /// This cumulative value less the one at the last push (a counter that went back, as after
    /// a restart of its source, counts from zero again).
    fn minus(self, base: Option<&MetricValue>) -> MetricValue {
        match (self, base) {
            (MetricValue::Int(v), Some(MetricValue::Int(b))) if v >= *b => MetricValue::Int(v - b),
            (MetricValue::Double(v), Some(MetricValue::Double(b))) if v >= *b => {
                MetricValue::Double(v - b)
            }
            (v, _) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_protocol::messages::GetTelemetrySubscriptionsResponse;

    fn sub(delta: bool, max_bytes: i32) -> Subscription {
        Subscription::from_response(
            &GetTelemetrySubscriptionsResponse::default()
                .with_delta_temporality(delta)
                .with_telemetry_max_bytes(max_bytes)
                .with_requested_metrics(vec!["org.apache.kafka.producer.".into()]),
        )
    }

    fn counter(name: &str, v: i64) -> Metric {
        Metric::counter(name, v).label("node_id", "1")
    }

    fn sums(p: &Payload) -> Vec<(String, i64, u64, i32)> {
        let data = MetricsData::from_bytes(&p.bytes).expect("decodes");
        data.metrics()
            .filter_map(|m| match &m.data {
                Some(otlp::Data::Sum(s)) => {
                    let dp = &s.data_points[0];
                    let Some(otlp::Value::AsInt(v)) = dp.value else {
                        return None;
                    };
                    Some((
                        m.name.clone(),
                        v,
                        dp.start_time_unix_nano,
                        s.aggregation_temporality,
                    ))
                }
                _ => None,
            })
            .collect()
    }

    const ERR: &str = "org.apache.kafka.producer.record.error.total";

    #[test]
    fn deltas_count_from_the_last_accepted_push() {
        let mut c = Collector::new(vec![("client_rack".into(), "r1".into())], 100);
        let s = sub(true, 0);
        let first = c.payload(vec![counter(ERR, 5), counter("other.x", 9)], &s, 200);
        assert_eq!(first.metrics, 1, "the prefix leaves `other.x` out");
        assert_eq!(sums(&first), [(ERR.to_owned(), 5, 100, otlp::DELTA)]);
        c.accepted(first);
        // A push the broker did not take is not a base: the next delta spans both intervals.
        let lost = c.payload(vec![counter(ERR, 7)], &s, 300);
        assert_eq!(sums(&lost), [(ERR.to_owned(), 2, 200, otlp::DELTA)]);
        let next = c.payload(vec![counter(ERR, 8)], &s, 400);
        assert_eq!(sums(&next), [(ERR.to_owned(), 3, 200, otlp::DELTA)]);
        c.accepted(next);
        let data = MetricsData::from_bytes(&c.payload(vec![], &s, 500).bytes).expect("decodes");
        let resource = data.resource_metrics[0]
            .resource
            .as_ref()
            .expect("resource");
        assert_eq!(resource.attributes, [KeyValue::string("client_rack", "r1")]);
    }

    #[test]
    fn cumulative_sums_count_from_the_start() {
        let mut c = Collector::new(vec![], 100);
        let s = sub(false, 0);
        let first = c.payload(vec![counter(ERR, 5)], &s, 200);
        c.accepted(first);
        let next = c.payload(vec![counter(ERR, 8)], &s, 300);
        assert_eq!(sums(&next), [(ERR.to_owned(), 8, 100, otlp::CUMULATIVE)]);
    }

    #[test]
    fn gauges_carry_their_value_and_labels() {
        let c = Collector::new(vec![], 0);
        let g = Metric::gauge("org.apache.kafka.producer.batch.size.avg", 12.5).label("a", "b");
        let p = c.payload(vec![g], &sub(true, 0), 10);
        let data = MetricsData::from_bytes(&p.bytes).expect("decodes");
        let m = data.metrics().next().expect("one metric");
        let Some(otlp::Data::Gauge(gauge)) = &m.data else {
            panic!("a gauge: {m:?}");
        };
        assert_eq!(
            gauge.data_points[0].value,
            Some(otlp::Value::AsDouble(12.5))
        );
        assert_eq!(
            gauge.data_points[0].attributes,
            [KeyValue::string("a", "b")]
        );
    }

    #[test]
    fn a_payload_over_the_cap_is_cut_and_too_large_halves_the_next() {
        let many: Vec<Metric> = (0..64)
            .map(|i| counter(&format!("org.apache.kafka.producer.m{i}"), i))
            .collect();
        let mut c = Collector::new(vec![], 0);
        let whole = c.payload(many.clone(), &sub(true, 0), 1);
        assert_eq!(whole.metrics, 64);
        let capped = c.payload(many.clone(), &sub(true, 1000), 1);
        assert!(capped.bytes.len() <= 1000, "{}", capped.bytes.len());
        assert!(capped.metrics < 64 && capped.metrics > 0);
        c.shrink(whole.metrics);
        assert_eq!(c.payload(many, &sub(true, 0), 1).metrics, 32);
    }
}
