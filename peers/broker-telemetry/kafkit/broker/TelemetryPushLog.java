package kafkit.broker;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.common.requests.RequestContext;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;
import org.apache.kafka.shaded.io.opentelemetry.proto.common.v1.AnyValue;
import org.apache.kafka.shaded.io.opentelemetry.proto.common.v1.KeyValue;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.AggregationTemporality;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.Metric;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.MetricsData;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.ResourceMetrics;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.ScopeMetrics;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Map;

/**
 * The test brokers' KIP-714 receiver: a {@link MetricsReporter} that is also a
 * {@link ClientTelemetryExporterProvider} (Kafka 4.2+; the older {@code ClientTelemetry} /
 * {@code ClientTelemetryReceiver} pair is deprecated for removal in 5.0), so that a broker whose
 * {@code metric.reporters} names it serves GetTelemetrySubscriptions and PushTelemetry.
 *
 * <p>Every push the broker hands over becomes one JSON line appended to the file named by
 * {@value #FILE_CONFIG} (xtask sets it to {@code <node dir>/telemetry/pushes.jsonl}): the client
 * instance id, whether the push is the terminating one, the content type, the push interval, the
 * request context's attributes under KIP-714's label names (client id, software name and
 * version, source address and port, principal, listener), the payload's resource attributes and
 * every metric decoded with the OTLP protobuf classes kafka-clients ships (shaded): name, type,
 * temporality and data points. Nothing is opened or done until the first push, and the broker's
 * own metrics (init, metricChange) are ignored, so a broker nobody pushes to pays nothing.
 *
 * <p>Built by xtask ({@code xtask/src/kafka_telemetry.rs}) with javac against the broker's jars;
 * docs/testing.md says how the tests read the file.
 */
public final class TelemetryPushLog implements MetricsReporter, ClientTelemetryExporterProvider, ClientTelemetryExporter {

    /** The broker property naming the file the pushes are appended to. */
    public static final String FILE_CONFIG = "kafkit.telemetry.push.log";

    private static final ObjectMapper JSON = new ObjectMapper();

    private volatile Path file;
    private volatile String brokerId;
    /** Opened at the first push; guarded by {@code this}. */
    private OutputStream out;

    @Override
    public void configure(Map<String, ?> configs) {
        Object f = configs.get(FILE_CONFIG);
        file = f == null ? null : Path.of(f.toString());
        Object id = configs.get("node.id");
        brokerId = id == null ? null : id.toString();
    }

    @Override
    public void init(List<KafkaMetric> metrics) {
    }

    @Override
    public void metricChange(KafkaMetric metric) {
    }

    @Override
    public void metricRemoval(KafkaMetric metric) {
    }

    @Override
    public synchronized void close() {
        if (out != null) {
            try {
                out.close();
            } catch (IOException e) {
                // The broker is stopping; nothing to report to.
            }
            out = null;
        }
    }

    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return this;
    }

    /**
     * Appends the push as one line. Never throws: an exception here makes the broker answer the
     * client INVALID_RECORD, which would stop its pushes; a failure is written into the line
     * instead ({@code "error"}).
     */
    @Override
    public void exportMetrics(ClientTelemetryContext context, ClientTelemetryPayload payload) {
        if (file == null) {
            return;
        }
        ObjectNode line = JSON.createObjectNode();
        try {
            describe(line, context, payload);
        } catch (RuntimeException e) {
            line.put("error", e.toString());
        }
        try {
            byte[] bytes = (JSON.writeValueAsString(line) + "\n").getBytes(StandardCharsets.UTF_8);
            append(bytes);
        } catch (IOException e) {
            // The test reading the file will miss this push and say so.
        }
    }

    private synchronized void append(byte[] bytes) throws IOException {
        if (out == null) {
            Files.createDirectories(file.getParent());
            out = Files.newOutputStream(file, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        }
        // One write per line: with O_APPEND a reader sees whole lines, or a last partial one.
        out.write(bytes);
        out.flush();
    }

    private void describe(ObjectNode line, ClientTelemetryContext context, ClientTelemetryPayload payload) {
        line.put("time_ms", System.currentTimeMillis());
        line.put("broker_id", brokerId);
        line.put("client_instance_id", payload.clientInstanceId().toString());
        line.put("terminating", payload.isTerminating());
        line.put("content_type", payload.contentType());
        line.put("push_interval_ms", context.pushIntervalMs());
        ObjectNode attrs = line.putObject("broker_attributes");
        AuthorizableRequestContext auth = context.authorizableRequestContext();
        attrs.put("client_instance_id", payload.clientInstanceId().toString());
        attrs.put("client_id", auth.clientId());
        attrs.put("client_source_address", auth.clientAddress() == null ? null : auth.clientAddress().getHostAddress());
        attrs.put("principal", auth.principal() == null ? null : auth.principal().toString());
        attrs.put("listener_name", auth.listenerName());
        attrs.put("security_protocol", auth.securityProtocol() == null ? null : auth.securityProtocol().name());
        if (auth instanceof RequestContext rc) {
            if (rc.clientInformation != null) {
                attrs.put("client_software_name", rc.clientInformation.softwareName());
                attrs.put("client_software_version", rc.clientInformation.softwareVersion());
            }
            rc.clientPort.ifPresent(p -> attrs.put("client_source_port", p.toString()));
        }
        ByteBuffer data = payload.data();
        line.put("bytes", data == null ? 0 : data.remaining());
        if (data == null) {
            return;
        }
        MetricsData decoded;
        try {
            decoded = MetricsData.parseFrom(data.duplicate());
        } catch (IOException e) {
            line.put("error", "not an OTLP MetricsData: " + e);
            return;
        }
        ObjectNode resource = line.putObject("resource");
        ArrayNode metrics = line.putArray("metrics");
        for (ResourceMetrics rm : decoded.getResourceMetricsList()) {
            for (KeyValue kv : rm.getResource().getAttributesList()) {
                resource.put(kv.getKey(), text(kv.getValue()));
            }
            for (ScopeMetrics sm : rm.getScopeMetricsList()) {
                for (Metric m : sm.getMetricsList()) {
                    metrics.add(metric(m));
                }
            }
        }
    }

    private static ObjectNode metric(Metric m) {
        ObjectNode out = JSON.createObjectNode();
        out.put("name", m.getName());
        List<NumberDataPoint> points = List.of();
        switch (m.getDataCase()) {
            case SUM -> {
                out.put("type", "sum");
                out.put("monotonic", m.getSum().getIsMonotonic());
                out.put("temporality", temporality(m.getSum().getAggregationTemporality()));
                points = m.getSum().getDataPointsList();
            }
            case GAUGE -> {
                out.put("type", "gauge");
                points = m.getGauge().getDataPointsList();
            }
            default -> out.put("type", m.getDataCase().name().toLowerCase(java.util.Locale.ROOT));
        }
        ArrayNode array = out.putArray("points");
        for (NumberDataPoint p : points) {
            ObjectNode point = array.addObject();
            ObjectNode labels = point.putObject("attributes");
            for (KeyValue kv : p.getAttributesList()) {
                labels.put(kv.getKey(), text(kv.getValue()));
            }
            switch (p.getValueCase()) {
                case AS_INT -> point.put("value", p.getAsInt());
                case AS_DOUBLE -> point.put("value", p.getAsDouble());
                default -> point.putNull("value");
            }
            point.put("start_time_unix_nano", p.getStartTimeUnixNano());
            point.put("time_unix_nano", p.getTimeUnixNano());
        }
        return out;
    }

    private static String temporality(AggregationTemporality t) {
        return switch (t) {
            case AGGREGATION_TEMPORALITY_DELTA -> "delta";
            case AGGREGATION_TEMPORALITY_CUMULATIVE -> "cumulative";
            default -> t.name();
        };
    }

    private static String text(AnyValue v) {
        return switch (v.getValueCase()) {
            case STRING_VALUE -> v.getStringValue();
            case INT_VALUE -> Long.toString(v.getIntValue());
            case DOUBLE_VALUE -> Double.toString(v.getDoubleValue());
            case BOOL_VALUE -> Boolean.toString(v.getBoolValue());
            default -> v.toString();
        };
    }
}
