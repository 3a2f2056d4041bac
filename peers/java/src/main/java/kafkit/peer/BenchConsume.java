package kafkit.peer;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * {@code consume-bench}: kafkit-bench's {@code consume} workload (the peer contract) on a
 * {@code KafkaConsumer<byte[], byte[]>} without a group: every partition assigned and sought to
 * offset 0, polled until R records came back, each checked (its offset the previous one of its
 * partition + 1, its value the expected bytes). The window runs from the assign to the poll that
 * returned the last record.
 *
 * <p>{@code requests}: the growth of {@code fetch-total} in {@code consumer-fetch-manager-metrics}
 * (one per Fetch response) over the window.
 */
final class BenchConsume {
    private BenchConsume() {}

    static final Set<String> KNOWN = Set.of("client", "bootstrap", "topic", "partitions", "records",
            "value-size", "tasks", "fetch-min-bytes", "fetch-max-wait-ms", "max-partition-fetch-bytes",
            "fetch-max-bytes", "check-crcs");
    static final Set<String> IGNORED = Set.of("queued-max-kbytes", "rdkafka-queued-min-messages",
            "rdkafka-fetch-queue-backoff-ms");

    /** The contract's give-up time: no record for this long ends the run. */
    static final long STALL_NS = 20_000_000_000L;

    static void run(String[] argv) throws Exception {
        Bench.Args a = new Bench.Args(argv, KNOWN, IGNORED);
        String topic = a.need("topic");
        int partitions = (int) a.num("partitions", 0);
        long records = a.num("records", 0);
        int valueSize = (int) a.num("value-size", 100);
        int tasks = (int) a.num("tasks", 1);
        if (partitions <= 0 || records < 0 || valueSize < 0 || tasks <= 0) {
            throw new Bench.CannotRun("--partitions and --tasks must be > 0, --records and "
                    + "--value-size >= 0");
        }
        if (tasks > 1) {
            System.err.println("java peer: --tasks " + tasks + ": one KafkaConsumer reads; runs 1");
        }
        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, a.need("bootstrap"));
        p.put(CommonClientConfigs.CLIENT_ID_CONFIG, "kafkit-bench-java");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        fetchSettings(p, a);

        KafkaConsumer<byte[], byte[]> consumer;
        try {
            consumer = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        } catch (KafkaException e) {
            throw new Bench.CannotRun("the consumer's settings", e);
        }
        List<TopicPartition> tps = new ArrayList<>();
        try {
            List<PartitionInfo> parts = consumer.partitionsFor(topic, Duration.ofSeconds(30));
            if (parts.size() < partitions) {
                throw new Bench.CannotRun("topic " + topic + " has " + parts.size()
                        + " partitions, fewer than --partitions " + partitions);
            }
        } catch (KafkaException e) {
            consumer.close(CloseOptions.timeout(Duration.ZERO));
            throw new Bench.CannotRun("metadata of " + topic, e);
        }
        for (int i = 0; i < partitions; i++) {
            tps.add(new TopicPartition(topic, i));
        }

        byte[] expected = Bench.value(valueSize);
        long[] next = new long[partitions];
        long[] holds = new long[partitions];
        for (int i = 0; i < partitions; i++) {
            holds[i] = records / partitions + (i < records % partitions ? 1 : 0);
        }
        long delivered = 0;
        long bad = 0;
        long came = 0;
        long bytes = 0;
        String error = null;

        long fetches0 = fetches(consumer);
        long[] cpu0 = Bench.cpuUs();
        long t0 = System.nanoTime();
        consumer.assign(tps);
        for (TopicPartition tp : tps) {
            consumer.seek(tp, 0);
        }
        long last = t0;
        // CPU time and fetches as of the last record: a run that gives up after 20 s without
        // one reports its window without the wait.
        long[] cpu1 = cpu0;
        long fetches1 = fetches0;
        while (came < records) {
            ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(200));
            long now = System.nanoTime();
            if (batch.isEmpty()) {
                if (now - last > STALL_NS) {
                    error = "no record for 20 s: " + (records - came) + " of " + records + " missing";
                    break;
                }
                continue;
            }
            last = now;
            for (ConsumerRecord<byte[], byte[]> r : batch) {
                came++;
                int part = r.partition();
                byte[] v = r.value();
                String wrong = null;
                if (part < 0 || part >= partitions) {
                    wrong = "record from partition " + part + " of " + partitions;
                } else if (r.offset() != next[part] || r.offset() >= holds[part]) {
                    wrong = "partition " + part + ": offset " + r.offset() + ", expected " + next[part]
                            + " (holds " + holds[part] + ")";
                } else if (!Arrays.equals(v, expected)) {
                    wrong = "partition " + part + " offset " + r.offset() + ": value of "
                            + (v == null ? "null" : v.length + " bytes") + " is not the expected one";
                }
                if (part >= 0 && part < partitions) {
                    next[part] = r.offset() + 1;
                }
                if (wrong == null) {
                    delivered++;
                    bytes += v.length;
                } else {
                    bad++;
                    if (error == null) {
                        error = wrong;
                    }
                }
            }
            cpu1 = Bench.cpuUs();
            fetches1 = fetches(consumer);
        }
        long wall = last - t0;
        long requests = fetches1 - fetches0;
        consumer.close(CloseOptions.timeout(Duration.ofSeconds(5)));
        long failed = bad + Math.max(0, records - came);
        Bench.result(delivered, failed, wall, cpu0, cpu1, requests, bytes, error);
    }

    /** Fetch responses so far: fetch-total of consumer-fetch-manager-metrics. */
    static long fetches(KafkaConsumer<byte[], byte[]> consumer) {
        return Math.round(Bench.sumMetric(consumer.metrics(), "consumer-fetch-manager-metrics",
                "fetch-total", tags -> true));
    }

    /** The fetch settings the harness gives every client (consume-bench and group-bench). */
    static void fetchSettings(Properties p, Bench.Args a) throws Bench.CannotRun {
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        p.put(ConsumerConfig.CHECK_CRCS_CONFIG, Boolean.toString(a.bool("check-crcs", true)));
        String[][] mapped = {
            {"fetch-min-bytes", ConsumerConfig.FETCH_MIN_BYTES_CONFIG},
            {"fetch-max-wait-ms", ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG},
            {"max-partition-fetch-bytes", ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG},
            {"fetch-max-bytes", ConsumerConfig.FETCH_MAX_BYTES_CONFIG},
        };
        for (String[] m : mapped) {
            if (a.has(m[0])) {
                p.put(m[1], Long.toString(a.num(m[0], 0)));
            }
        }
    }
}
