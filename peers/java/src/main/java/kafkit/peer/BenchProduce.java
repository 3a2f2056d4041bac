package kafkit.peer;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * {@code produce-bench}: kafkit-bench's {@code produce} workload (the peer contract) on a
 * {@code KafkaProducer<byte[], byte[]>}: record i (no key, a value of V bytes) to partition
 * {@code i % N}, sent with a callback that counts, then {@code flush()}; with {@code
 * --txn-records K}, one transaction per K records. The window runs from just before the first
 * send to the return of the last flush or commit (the callbacks of a batch run before its
 * flush returns).
 *
 * <p>{@code requests}: kafka-clients counts no Produce requests as such, so this is the growth
 * over the window of {@code request-total} summed over the broker nodes of {@code
 * producer-node-metrics} (every request written to a broker), less one ApiVersions per
 * connection opened in the window ({@code connection-creation-total}) and, with transactions,
 * one EndTxn per commit. What may remain: a Metadata refresh, and InitProducerId when it comes
 * late.
 */
final class BenchProduce {
    private BenchProduce() {}

    static final Set<String> KNOWN = Set.of("client", "bootstrap", "topic", "partitions", "records",
            "txn-records", "value-size", "linger-ms", "batch-size", "max-in-flight", "buffer-memory",
            "delivery-timeout-ms", "compression", "tasks", "acks", "idempotence");
    static final Set<String> IGNORED = Set.of("batch-max-records", "max-buffered-records");

    /** Java's default request.timeout.ms, which delivery.timeout.ms must cover with linger.ms. */
    static final long REQUEST_TIMEOUT_MS = 30_000;

    static void run(String[] argv) throws Exception {
        Bench.Args a = new Bench.Args(argv, KNOWN, IGNORED);
        String topic = a.need("topic");
        int partitions = (int) a.num("partitions", 0);
        long records = a.num("records", 0);
        long txnRecords = a.num("txn-records", 0);
        int valueSize = (int) a.num("value-size", 100);
        int tasks = (int) a.num("tasks", 1);
        if (partitions <= 0 || records < 0 || txnRecords < 0 || valueSize < 0 || tasks <= 0) {
            throw new Bench.CannotRun("--partitions and --tasks must be > 0, --records, "
                    + "--txn-records and --value-size >= 0");
        }
        boolean txn = txnRecords > 0;
        String acks = a.get("acks", "1");
        boolean idempotence = a.bool("idempotence", false);
        if (txn) {
            acks = "all";
            idempotence = true;
            if (tasks > 1) {
                System.err.println("java peer: --tasks " + tasks + " with transactions: runs 1");
                tasks = 1;
            }
        }
        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, a.need("bootstrap"));
        p.put(CommonClientConfigs.CLIENT_ID_CONFIG, "kafkit-bench-java");
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(idempotence));
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, a.get("compression", "none"));
        long linger = a.num("linger-ms", 5);
        p.put(ProducerConfig.LINGER_MS_CONFIG, Long.toString(linger));
        long buffer = a.num("buffer-memory", 32L << 20);
        if (a.has("buffer-memory")) {
            p.put(ProducerConfig.BUFFER_MEMORY_CONFIG, Long.toString(buffer));
        }
        if (a.has("batch-size")) {
            // kafka-clients takes a whole batch.size from buffer.memory for each partition's open
            // batch (the other clients grow a batch as records come): batches of every partition,
            // open and in flight, must fit the buffer, or every send waits for memory (1 MB
            // batches of 48 partitions in 32 MiB ran 7x slower). The batch size is lowered to
            // buffer.memory / (2 x partitions), never below Java's default of 16 KiB.
            long batch = a.num("batch-size", 0);
            long fit = Math.max(16384, buffer / (2L * Math.max(1, partitions)));
            if (batch > fit) {
                System.err.println("java peer: --batch-size " + batch + " lowered to " + fit
                        + ": kafka-clients reserves batch.size per partition from buffer.memory");
                batch = fit;
            }
            p.put(ProducerConfig.BATCH_SIZE_CONFIG, Long.toString(batch));
        }
        if (a.has("max-in-flight")) {
            long inFlight = a.num("max-in-flight", 5);
            if (idempotence && inFlight > 5) {
                // Java refuses more than 5 with idempotence (its sequence window is 5 batches).
                System.err.println("java peer: --max-in-flight " + inFlight
                        + " with idempotence: kafka-clients allows at most 5; runs 5");
                inFlight = 5;
            }
            p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, Long.toString(inFlight));
        }
        if (a.has("delivery-timeout-ms")) {
            long delivery = a.num("delivery-timeout-ms", 120_000);
            long request = REQUEST_TIMEOUT_MS;
            // kafka-clients rejects delivery.timeout.ms < linger.ms + request.timeout.ms: a
            // shorter delivery timeout shortens the request timeout (down to 1 s), and below
            // that the delivery timeout grows to fit.
            if (delivery < linger + request) {
                request = Math.max(1_000, delivery - linger);
                if (delivery < linger + request) {
                    delivery = linger + request;
                }
                System.err.println("java peer: delivery.timeout.ms must be >= linger.ms + "
                        + "request.timeout.ms: runs delivery.timeout.ms=" + delivery
                        + " request.timeout.ms=" + request);
            }
            p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Long.toString(delivery));
            p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, Long.toString(request));
        }
        if (txn) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "bench-" + topic);
        }
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");

        KafkaProducer<byte[], byte[]> producer;
        try {
            producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
        } catch (KafkaException e) {
            throw new Bench.CannotRun("the producer's settings", e);
        }
        // Metadata before the window: an unreachable broker or a missing topic means the run
        // cannot happen, rather than R records failing one max.block.ms at a time.
        try {
            List<PartitionInfo> parts = producer.partitionsFor(topic);
            if (parts.size() < partitions) {
                throw new Bench.CannotRun("topic " + topic + " has " + parts.size()
                        + " partitions, fewer than --partitions " + partitions);
            }
            if (txn) {
                producer.initTransactions();
            }
        } catch (KafkaException e) {
            producer.close(Duration.ZERO);
            throw new Bench.CannotRun("metadata of " + topic, e);
        }

        byte[] value = Bench.value(valueSize);
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        AtomicReference<String> error = new AtomicReference<>();
        Callback callback = (RecordMetadata m, Exception e) -> {
            if (e == null) {
                acked.incrementAndGet();
            } else {
                failed.incrementAndGet();
                error.compareAndSet(null, e.toString());
            }
        };

        double requests0 = requests(producer.metrics(), 0);
        long[] cpu0 = Bench.cpuUs();
        long t0 = System.nanoTime();
        long commits = 0;
        if (txn) {
            commits = transactions(producer, topic, partitions, records, txnRecords, value, callback,
                    acked, failed, error);
        } else if (tasks == 1) {
            for (long i = 0; i < records; i++) {
                producer.send(new ProducerRecord<>(topic, (int) (i % partitions), null, value), callback);
            }
            producer.flush();
        } else {
            List<Thread> threads = new ArrayList<>();
            final int n = tasks;
            for (int t = 0; t < n; t++) {
                final int first = t;
                Thread thread = new Thread(() -> {
                    for (long i = first; i < records; i += n) {
                        producer.send(new ProducerRecord<>(topic, (int) (i % partitions), null, value),
                                callback);
                    }
                }, "bench-sender-" + t);
                threads.add(thread);
                thread.start();
            }
            for (Thread thread : threads) {
                thread.join();
            }
            producer.flush();
        }
        long wall = System.nanoTime() - t0;
        long[] cpu1 = Bench.cpuUs();
        long requests = Math.round(requests(producer.metrics(), commits) - requests0);
        producer.close(Duration.ofSeconds(10));
        Bench.result(acked.get(), failed.get(), wall, cpu0, cpu1, Math.max(0, requests), 0,
                error.get());
    }

    /**
     * Sends the records in transactions of {@code k}, returns how many committed. A commit that
     * fails moves its records from acknowledged to failed; a fatal error (fenced, say) ends the
     * run with the records not sent counted as failed.
     */
    static long transactions(KafkaProducer<byte[], byte[]> producer, String topic, int partitions,
            long records, long k, byte[] value, Callback callback, AtomicLong acked, AtomicLong failed,
            AtomicReference<String> error) {
        long commits = 0;
        for (long from = 0; from < records; from += k) {
            long to = Math.min(records, from + k);
            long ackedBefore = acked.get();
            try {
                producer.beginTransaction();
                for (long i = from; i < to; i++) {
                    producer.send(new ProducerRecord<>(topic, (int) (i % partitions), null, value),
                            callback);
                }
                producer.commitTransaction();
                commits++;
            } catch (KafkaException e) {
                error.compareAndSet(null, "commit of records " + from + ".." + to + ": " + e);
                long written = acked.get() - ackedBefore;
                acked.addAndGet(-written);
                failed.addAndGet(written);
                try {
                    producer.abortTransaction();
                } catch (KafkaException fatal) {
                    failed.addAndGet(records - to);
                    return commits;
                }
            }
        }
        return commits;
    }

    /**
     * Requests written to broker nodes (node-id >= 0, not the bootstrap's -1), less one
     * ApiVersions per connection made and {@code endTxns}: see the class comment.
     */
    static double requests(Map<MetricName, ? extends Metric> metrics, long endTxns) {
        double sent = Bench.sumMetric(metrics, "producer-node-metrics", "request-total",
                tags -> !tags.getOrDefault("node-id", "node--1").startsWith("node--"));
        double connections = Bench.sumMetric(metrics, "producer-metrics", "connection-creation-total",
                tags -> true);
        return sent - connections - endTxns;
    }
}
