package kafkit.peer;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client (kafka-clients 4.4) as a peer of kafkit's integration tests.
 *
 * <p>Usage: {@code java -cp CP kafkit.peer.Main COMMAND --name value ...}. Every event is one
 * JSON object on one line of stdout ({@code {"event":"record",...}}); stdin takes commands
 * ({@code close}), and its end closes the client too, so a test that dies takes its peer along.
 *
 * <ul>
 *   <li>{@code consume-group --bootstrap B --group G --topic T [--protocol classic|consumer]
 *       [--assignor range|cooperative-sticky] [--session-ms N]}: a group member that commits
 *       after each poll (and when partitions are revoked); prints {@code assigned}, {@code
 *       revoked}, {@code lost} (with the whole assignment after the change), each {@code record},
 *       {@code commit-failed}, and {@code closed} after {@code close}.
 *   <li>{@code share-consume --bootstrap B --group G --topic T[,T2...] [--ack-mode
 *       implicit|explicit] [--max-records N] [--idle-ms N]}: a share group member (KIP-932,
 *       {@code KafkaShareConsumer}, {@code share.acknowledgement.mode} from {@code --ack-mode},
 *       default implicit: each poll accepts the records of the one before). In explicit mode it
 *       ACCEPTs each record and calls {@code commitSync} after each poll. Prints each {@code
 *       record} (with its {@code delivery_count}), {@code commit-failed} per partition whose
 *       acknowledgements failed, and {@code closed} (with the {@code count} of records) after
 *       {@code close}, which comes with {@code close} on stdin, stdin's end, a poll that
 *       brought the total to {@code --max-records}, or {@code --idle-ms} without a record.
 *   <li>{@code share-bench --bootstrap B --group G --topic T --partitions P --records N
 *       [--value-size B] [--warmup-records K] [--max-poll-records N] [--fetch-max-wait-ms N]
 *       [--fetch-min-bytes N] [--fetch-max-bytes N] [--stall-ms N] [--broker-pid PID]}:
 *       kafkit-bench's share
 *       bench (bench/src/share/): one implicit-mode share group member (byte-array
 *       deserializers) reads until N records came, checking each (its partition below P, its
 *       offset not seen before, its value B bytes), then commits and closes. The measured
 *       window opens when a poll first brings the count past K (default 0: the first poll
 *       with records; the window counts that poll's records) and closes after the poll that
 *       brings it to N; prints one {@code share-bench} event with the window's {@code
 *       records}, {@code wall_ns} (System.nanoTime) and {@code cpu_ns} (the JVM process's CPU
 *       time, every thread: the application thread, the network thread, JIT and GC), the
 *       {@code polls} in it, {@code bad} records, {@code redelivered} ones (delivery count
 *       above 1), {@code to_first_ms} (from subscribe to the first record) and {@code
 *       share_fetches} (the client's {@code fetch-total} metric, over the member's life) and,
 *       with {@code --broker-pid}, {@code broker_cpu_ms} (that process's CPU time over the
 *       window, from {@code /proc/PID/stat}; -1 without).
 *   <li>{@code produce --bootstrap B --topic T --count N [--prefix P] [--partition N]
 *       [--compression none|gzip|snappy|lz4|zstd] [--client-id ID] [--hold true]}: writes values
 *       {@code P-0 .. P-(N-1)} in one linger window; prints {@code produced} per record, then
 *       {@code done}. With {@code --hold true} the producer stays open after {@code done} until
 *       {@code close} on stdin (or its end), then prints {@code closed} (a KIP-714 test reads
 *       what it pushes meanwhile, and its terminating push at close).
 *   <li>{@code produce-txn --bootstrap B --topic T --txn-id ID --plan c3,a2,c1 [--partition N]}:
 *       one transaction per step, committed ({@code c}) or aborted ({@code a}), of that many
 *       records with values {@code c0, c1, ...} and {@code a0, a1, ...}; prints {@code produced},
 *       {@code committed} / {@code aborted}, then {@code done}.
 *   <li>{@code consume --bootstrap B --topic T [--isolation read_committed|read_uncommitted]
 *       [--timeout-ms N]}: reads every partition from the start up to the end offsets at start
 *       (the last stable offsets under read_committed); prints each {@code record}, then {@code
 *       done}. {@code consume-committed} is {@code consume --isolation read_committed}.
 *   <li>{@code produce-bench ...} and {@code consume-bench ...}: kafkit-bench's {@code produce}
 *       and {@code consume} workloads, flags and {@code RESULT} line as the bench's peer
 *       contract has them (bench/src; {@link BenchProduce}, {@link BenchConsume}); they print no
 *       JSON and exit 2 when the run cannot happen.
 *   <li>{@code group-bench ...}: kafkit-bench's {@code group} workload ({@link BenchGroup}):
 *       {@code --members} group consumers in this one process, the last leaving part-way; one
 *       {@code GROUP} line; exit 3 for an assignor kafka-clients lacks.
 *   <li>{@code broker-requests --jmx HOST:PORT[,...] --request Produce|Fetch}: the brokers'
 *       count of such requests (their request metrics over JMX; {@link BrokerRequests}).
 * </ul>
 *
 * <p>A failure prints {@code {"event":"error","message":...}} and exits 1.
 */
public final class Main {
    private Main() {}

    public static void main(String[] argv) {
        try {
            if (argv.length == 0) {
                throw new IllegalArgumentException("usage: COMMAND --name value ...");
            }
            // The bench commands follow kafkit-bench's peer contract: one RESULT line on stdout,
            // flags without values, exit 2 when the run cannot happen.
            if (argv[0].equals("produce-bench") || argv[0].equals("consume-bench")
                    || argv[0].equals("group-bench")) {
                Bench.main(argv);
            }
            if (argv[0].equals("broker-requests")) {
                BrokerRequests.main(argv);
            }
            Map<String, String> args = options(argv);
            switch (argv[0]) {
                case "consume-group" -> consumeGroup(args);
                case "share-consume" -> shareConsume(args);
                case "share-bench" -> shareBench(args);
                case "produce" -> produce(args);
                case "produce-txn" -> produceTxn(args);
                case "consume" -> consume(args, args.getOrDefault("isolation", "read_uncommitted"));
                case "consume-committed" -> consume(args, "read_committed");
                default -> throw new IllegalArgumentException("unknown command " + argv[0]);
            }
        } catch (Exception e) {
            emit("error", "message", e.toString());
            System.exit(1);
        }
        System.exit(0);
    }

    // ----- commands ------------------------------------------------------------------------

    static void consumeGroup(Map<String, String> args) {
        Properties p = common(args);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, need(args, "group"));
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        String protocol = args.getOrDefault("protocol", "classic");
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        if (protocol.equals("classic")) {
            // KIP-848 members take these from the broker; the Java client refuses them there.
            String assignor = args.getOrDefault("assignor", "range");
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, switch (assignor) {
                case "range" -> "org.apache.kafka.clients.consumer.RangeAssignor";
                case "cooperative-sticky" ->
                        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
                default -> throw new IllegalArgumentException("unknown assignor " + assignor);
            });
            int session = Integer.parseInt(args.getOrDefault("session-ms", "6000"));
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, Integer.toString(session));
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG,
                    Integer.toString(Math.max(100, session / 6)));
        }
        try (KafkaConsumer<String, String> consumer = consumer(p)) {
            AtomicBoolean stop = new AtomicBoolean();
            Thread commands = new Thread(() -> {
                try (BufferedReader in = new BufferedReader(
                        new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = in.readLine()) != null && !line.trim().equals("close")) {
                        emit("error", "message", "unknown command on stdin: " + line);
                    }
                } catch (Exception e) {
                    // stdin gone: close as well.
                }
                stop.set(true);
                consumer.wakeup();
            }, "stdin");
            commands.setDaemon(true);
            TreeSet<String> owned = new TreeSet<>();
            consumer.subscribe(List.of(need(args, "topic")), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    parts.forEach(tp -> owned.add(key(tp)));
                    emitAssignment("assigned", parts, owned);
                }

                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    // Commit what was handed out before the partitions move (Java's pattern).
                    commit(consumer);
                    parts.forEach(tp -> owned.remove(key(tp)));
                    emitAssignment("revoked", parts, owned);
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> parts) {
                    parts.forEach(tp -> owned.remove(key(tp)));
                    emitAssignment("lost", parts, owned);
                }
            });
            commands.start();
            try {
                while (!stop.get()) {
                    ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                    records.forEach(Main::emitRecord);
                    if (!records.isEmpty()) {
                        commit(consumer);
                    }
                }
            } catch (WakeupException e) {
                // `close` arrived.
            }
            commit(consumer);
        }
        emit("closed");
    }

    static void shareConsume(Map<String, String> args) {
        Properties p = common(args);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, need(args, "group"));
        String mode = args.getOrDefault("ack-mode", "implicit");
        if (!mode.equals("implicit") && !mode.equals("explicit")) {
            throw new IllegalArgumentException("unknown ack mode " + mode);
        }
        p.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, mode);
        boolean explicit = mode.equals("explicit");
        long maxRecords = Long.parseLong(args.getOrDefault("max-records", "-1"));
        long idleMs = Long.parseLong(args.getOrDefault("idle-ms", "-1"));
        long count = 0;
        try (KafkaShareConsumer<String, String> consumer = shareConsumer(p)) {
            AtomicBoolean stop = new AtomicBoolean();
            Thread commands = new Thread(() -> {
                try (BufferedReader in = new BufferedReader(
                        new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = in.readLine()) != null && !line.trim().equals("close")) {
                        emit("error", "message", "unknown command on stdin: " + line);
                    }
                } catch (Exception e) {
                    // stdin gone: close as well.
                }
                stop.set(true);
                consumer.wakeup();
            }, "stdin");
            commands.setDaemon(true);
            consumer.subscribe(List.of(need(args, "topic").split(",")));
            commands.start();
            long lastRecord = System.currentTimeMillis();
            try {
                while (!stop.get() && (maxRecords < 0 || count < maxRecords)
                        && (idleMs < 0 || System.currentTimeMillis() - lastRecord < idleMs)) {
                    ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<String, String> r : records) {
                        emitRecord(r);
                        if (explicit) {
                            consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                        }
                    }
                    count += records.count();
                    if (!records.isEmpty()) {
                        lastRecord = System.currentTimeMillis();
                        if (explicit) {
                            commit(consumer);
                        }
                    }
                }
            } catch (WakeupException e) {
                // `close` arrived; in explicit mode every record polled was acknowledged and
                // committed (a wakeup in commitSync commits again), in implicit mode close
                // accepts the last poll's records.
            }
        }
        emit("closed", "count", count);
    }

    static void shareBench(Map<String, String> args) {
        Properties p = common(args);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, need(args, "group"));
        p.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "implicit");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, args.getOrDefault("max-poll-records", "500"));
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, args.getOrDefault("fetch-max-wait-ms", "500"));
        p.put(ConsumerConfig.FETCH_MIN_BYTES_CONFIG, args.getOrDefault("fetch-min-bytes", "1"));
        p.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG,
                args.getOrDefault("fetch-max-bytes", Integer.toString(50 * 1024 * 1024)));
        int partitions = Integer.parseInt(need(args, "partitions"));
        long records = Long.parseLong(need(args, "records"));
        long warmup = Long.parseLong(args.getOrDefault("warmup-records", "0"));
        int valueSize = Integer.parseInt(args.getOrDefault("value-size", "100"));
        long stallMs = Long.parseLong(args.getOrDefault("stall-ms", "60000"));
        long brokerPid = Long.parseLong(args.getOrDefault("broker-pid", "0"));
        long broker0 = -1;
        long brokerCpu = -1;
        com.sun.management.OperatingSystemMXBean os =
                (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        BitSet[] seen = new BitSet[partitions];
        for (int i = 0; i < partitions; i++) {
            seen[i] = new BitSet();
        }
        long count = 0;
        long bad = 0;
        long redelivered = 0;
        long polls = 0;
        long windowFrom = -1;
        long t0 = 0;
        long cpu0 = 0;
        long wall = 0;
        long cpu = 0;
        long shareFetches = -1;
        long subscribed = System.nanoTime();
        long firstRecord = -1;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(
                p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(need(args, "topic")));
            long last = System.currentTimeMillis();
            while (count < records) {
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofSeconds(1));
                int n = batch.count();
                if (n == 0) {
                    if (System.currentTimeMillis() - last > stallMs) {
                        throw new IllegalStateException("no record for " + stallMs + " ms after "
                                + count + " of " + records);
                    }
                    continue;
                }
                last = System.currentTimeMillis();
                if (firstRecord < 0) {
                    firstRecord = System.nanoTime();
                }
                if (windowFrom < 0 && count + n > warmup) {
                    windowFrom = count;
                    t0 = System.nanoTime();
                    cpu0 = os.getProcessCpuTime();
                    broker0 = processCpuMs(brokerPid);
                }
                if (windowFrom >= 0) {
                    polls++;
                }
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    int part = r.partition();
                    long offset = r.offset();
                    byte[] v = r.value();
                    if (part < 0 || part >= partitions || offset < 0 || offset > Integer.MAX_VALUE
                            || seen[part].get((int) offset) || v == null || v.length != valueSize) {
                        bad++;
                    } else {
                        seen[part].set((int) offset);
                    }
                    if (r.deliveryCount().orElse((short) 1) > 1) {
                        redelivered++;
                    }
                }
                count += n;
                if (count >= records) {
                    wall = System.nanoTime() - t0;
                    cpu = os.getProcessCpuTime() - cpu0;
                    long broker1 = processCpuMs(brokerPid);
                    if (broker0 >= 0 && broker1 >= 0) {
                        brokerCpu = broker1 - broker0;
                    }
                }
            }
            for (Map.Entry<MetricName, ? extends Metric> m : consumer.metrics().entrySet()) {
                if (m.getKey().name().equals("fetch-total")
                        && m.getKey().group().endsWith("fetch-manager-metrics")
                        && m.getValue().metricValue() instanceof Number v) {
                    shareFetches = v.longValue();
                }
            }
            commit(consumer);
        }
        emit("share-bench", "records", count - windowFrom, "wall_ns", wall, "cpu_ns", cpu,
                "polls", polls, "bad", bad + Math.max(0, count - records), "redelivered", redelivered,
                "to_first_ms", (firstRecord - subscribed) / 1_000_000, "share_fetches", shareFetches,
                "broker_cpu_ms", brokerCpu);
    }

    /**
     * The CPU time (user + system, ms) process {@code pid} has used, from /proc/PID/stat (clock
     * ticks of 10 ms); -1 when unreadable or pid is 0. kafkit-bench reads it the same way.
     */
    static long processCpuMs(long pid) {
        if (pid <= 0) {
            return -1;
        }
        try {
            String stat = java.nio.file.Files.readString(java.nio.file.Path.of("/proc/" + pid + "/stat"));
            String[] f = stat.substring(stat.lastIndexOf(')') + 2).trim().split("\\s+");
            return (Long.parseLong(f[11]) + Long.parseLong(f[12])) * 10;
        } catch (Exception e) {
            return -1;
        }
    }

    static void produce(Map<String, String> args) throws Exception {
        Properties p = common(args);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "100");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, Integer.toString(1 << 20));
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, args.getOrDefault("compression", "none"));
        String topic = need(args, "topic");
        int partition = Integer.parseInt(args.getOrDefault("partition", "0"));
        int count = Integer.parseInt(need(args, "count"));
        String prefix = args.getOrDefault("prefix", "java");
        try (KafkaProducer<String, String> producer = producer(p)) {
            List<java.util.concurrent.Future<RecordMetadata>> acks = new ArrayList<>();
            List<String> values = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                String value = prefix + "-" + i;
                values.add(value);
                acks.add(producer.send(new ProducerRecord<>(topic, partition, null, value)));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                emitProduced(acks.get(i).get(), values.get(i));
            }
            if (Boolean.parseBoolean(args.getOrDefault("hold", "false"))) {
                emit("done", "count", count);
                awaitClose();
                producer.close();
                emit("closed");
                return;
            }
        }
        emit("done", "count", count);
    }

    /** Returns when {@code close} comes on stdin, or stdin ends. */
    static void awaitClose() {
        try (BufferedReader in = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null && !line.trim().equals("close")) {
                emit("error", "message", "unknown command on stdin: " + line);
            }
        } catch (Exception e) {
            // stdin gone: close as well.
        }
    }

    static void produceTxn(Map<String, String> args) throws Exception {
        Properties p = common(args);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, need(args, "txn-id"));
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        String topic = need(args, "topic");
        int partition = Integer.parseInt(args.getOrDefault("partition", "0"));
        Map<Character, Integer> next = new HashMap<>();
        try (KafkaProducer<String, String> producer = producer(p)) {
            producer.initTransactions();
            for (String step : need(args, "plan").split(",")) {
                char kind = step.charAt(0);
                int n = Integer.parseInt(step.substring(1));
                if (kind != 'c' && kind != 'a') {
                    throw new IllegalArgumentException("plan step " + step + ": c<N> or a<N>");
                }
                producer.beginTransaction();
                List<String> values = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    String value = kind + Integer.toString(next.merge(kind, 1, Integer::sum) - 1);
                    values.add(value);
                    // Each record is in the log before the transaction ends, so an abort has
                    // data to mark.
                    emitProduced(producer.send(
                            new ProducerRecord<>(topic, partition, null, value)).get(), value);
                }
                if (kind == 'c') {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                emit(kind == 'c' ? "committed" : "aborted", "values", values);
            }
        }
        emit("done");
    }

    static void consume(Map<String, String> args, String isolation) {
        Properties p = common(args);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        long deadline = System.currentTimeMillis()
                + Long.parseLong(args.getOrDefault("timeout-ms", "30000"));
        String topic = need(args, "topic");
        int count = 0;
        try (KafkaConsumer<String, String> consumer = consumer(p)) {
            List<TopicPartition> tps = consumer.partitionsFor(topic).stream()
                    .map(i -> new TopicPartition(topic, i.partition()))
                    .collect(Collectors.toList());
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            while (!tps.stream().allMatch(tp -> consumer.position(tp) >= end.get(tp))) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("end offsets " + end + " not reached");
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                records.forEach(Main::emitRecord);
                count += records.count();
            }
        }
        emit("done", "count", count);
    }

    // ----- clients -------------------------------------------------------------------------

    static Properties common(Map<String, String> args) {
        Properties p = new Properties();
        p.put("bootstrap.servers", need(args, "bootstrap"));
        p.put("client.id", args.getOrDefault("client-id", "java-peer"));
        return p;
    }

    static KafkaConsumer<String, String> consumer(Properties p) {
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static KafkaShareConsumer<String, String> shareConsumer(Properties p) {
        return new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static KafkaProducer<String, String> producer(Properties p) {
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static void commit(KafkaConsumer<String, String> consumer) {
        try {
            consumer.commitSync(Duration.ofSeconds(10));
        } catch (WakeupException e) {
            // `close` arrived while committing: once more, the wakeup is spent.
            commit(consumer);
        } catch (KafkaException e) {
            emit("commit-failed", "message", e.toString());
        }
    }

    static void commit(KafkaShareConsumer<?, ?> consumer) {
        Map<TopicIdPartition, Optional<KafkaException>> outcomes;
        try {
            outcomes = consumer.commitSync(Duration.ofSeconds(10));
        } catch (WakeupException e) {
            // `close` arrived while committing: once more, the wakeup is spent.
            commit(consumer);
            return;
        } catch (KafkaException e) {
            emit("commit-failed", "message", e.toString());
            return;
        }
        outcomes.forEach((tp, failure) -> failure.ifPresent(e -> emit("commit-failed",
                "topic", tp.topic(), "partition", tp.partition(), "message", e.toString())));
    }

    // ----- arguments and output ------------------------------------------------------------

    static Map<String, String> options(String[] argv) {
        Map<String, String> m = new HashMap<>();
        for (int i = 1; i < argv.length; i += 2) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --name value at " + argv[i]);
            }
            m.put(argv[i].substring(2), argv[i + 1]);
        }
        return m;
    }

    static String need(Map<String, String> args, String name) {
        String v = args.get(name);
        if (v == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return v;
    }

    static String key(TopicPartition tp) {
        return tp.topic() + "\u0000" + tp.partition();
    }

    static void emitAssignment(String event, Collection<TopicPartition> parts, TreeSet<String> owned) {
        List<Object> changed = parts.stream().map(Main::partition).collect(Collectors.toList());
        List<Object> all = owned.stream()
                .map(k -> partition(new TopicPartition(k.substring(0, k.indexOf('\u0000')),
                        Integer.parseInt(k.substring(k.indexOf('\u0000') + 1)))))
                .collect(Collectors.toList());
        emit(event, "partitions", changed, "assignment", all);
    }

    static Object partition(TopicPartition tp) {
        return new Raw("{\"topic\":" + json(tp.topic()) + ",\"partition\":" + tp.partition() + "}");
    }

    static void emitRecord(ConsumerRecord<String, String> r) {
        Optional<Short> delivered = r.deliveryCount();
        if (delivered.isPresent()) {
            // A share group's record (KIP-932): how many times it was delivered, this one too.
            emit("record", "topic", r.topic(), "partition", r.partition(), "offset", r.offset(),
                    "value", r.value(), "delivery_count", delivered.get());
        } else {
            emit("record", "topic", r.topic(), "partition", r.partition(), "offset", r.offset(),
                    "value", r.value());
        }
    }

    static void emitProduced(RecordMetadata m, String value) {
        emit("produced", "topic", m.topic(), "partition", m.partition(), "offset", m.offset(),
                "value", value);
    }

    /** A value already in JSON. */
    record Raw(String json) {}

    /** Prints {"event":EVENT,NAME:VALUE,...} on one line. */
    static synchronized void emit(String event, Object... fields) {
        StringBuilder b = new StringBuilder("{\"event\":").append(json(event));
        for (int i = 0; i + 1 < fields.length; i += 2) {
            b.append(',').append(json(fields[i].toString())).append(':').append(json(fields[i + 1]));
        }
        System.out.println(b.append('}'));
        System.out.flush();
    }

    static String json(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof Raw r) {
            return r.json();
        }
        if (v instanceof Number) {
            return v.toString();
        }
        if (v instanceof List<?> l) {
            return l.stream().map(Main::json).collect(Collectors.joining(",", "[", "]"));
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : v.toString().toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }
}
