package kafkit.peer;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.utils.internals.AppInfoParser;

/**
 * {@code group-bench}: kafkit-bench's {@code group} workload (peers/README.md; the harness side
 * is bench/src/consumer/group.rs, whose {@code Progress} this mirrors): {@code --members}
 * {@code KafkaConsumer<byte[], byte[]>}s in one classic group ({@code group.protocol=classic},
 * {@code partition.assignment.strategy} from {@code --assignor}), each created, polled and
 * closed by a thread of its own (a KafkaConsumer is not thread safe), subscribed to the topic
 * with a {@link ConsumerRebalanceListener} that reports its ownership. Auto-commit is on with
 * its default interval; the consumer commits on revoke (eager assignors) and on close.
 *
 * <p>Once {@code --leave-at} of the records were handed out, the last member leaves ({@code
 * close()}: commit, LeaveGroup). The run stops when every record came or when no new one came
 * for 20 s, closes every member and prints one {@code GROUP} line (times in µs from the
 * members' creation; CPU from /proc/self/stat over the whole run).
 */
final class BenchGroup {
    private BenchGroup() {}

    static final Set<String> KNOWN;
    static {
        Set<String> k = new HashSet<>(BenchConsume.KNOWN);
        k.addAll(Set.of("group-id", "members", "assignor", "session-timeout-ms",
                "heartbeat-interval-ms", "leave-at"));
        KNOWN = Set.copyOf(k);
    }

    /** How long a member's close may take (commit, LeaveGroup): kafka-clients' default. */
    static final Duration CLOSE = Duration.ofSeconds(30);

    static void run(String[] argv) throws Exception {
        Bench.Args a = new Bench.Args(argv, KNOWN, BenchConsume.IGNORED);
        String topic = a.need("topic");
        String groupId = a.need("group-id");
        int partitions = (int) a.num("partitions", 0);
        long records = a.num("records", 0);
        int valueSize = (int) a.num("value-size", 100);
        int members = (int) a.num("members", 3);
        long tasks = a.num("tasks", 1);
        if (partitions <= 0 || records < 0 || valueSize < 0 || members <= 0) {
            throw new Bench.CannotRun("--partitions and --members must be > 0, --records and "
                    + "--value-size >= 0");
        }
        if (records > Integer.MAX_VALUE - 8) {
            throw new Bench.CannotRun("--records " + records + ": at most " + (Integer.MAX_VALUE - 8));
        }
        if (tasks > 1) {
            System.err.println("java peer: --tasks " + tasks + ": each member reads with one "
                    + "KafkaConsumer; runs 1");
        }
        double leaveAt;
        try {
            leaveAt = Double.parseDouble(a.get("leave-at", "0.5"));
        } catch (NumberFormatException e) {
            throw new Bench.CannotRun("--leave-at " + a.get("leave-at", "") + ": not a number");
        }
        if (Double.isNaN(leaveAt)) {
            throw new Bench.CannotRun("--leave-at: not a number");
        }
        String assignor = switch (a.get("assignor", "range")) {
            case "range" -> RangeAssignor.class.getName();
            case "roundrobin" -> RoundRobinAssignor.class.getName();
            case "cooperative-sticky" -> CooperativeStickyAssignor.class.getName();
            default -> throw new Bench.Unsupported("--assignor " + a.get("assignor", "")
                    + ": kafka-clients has range, roundrobin and cooperative-sticky");
        };

        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, a.need("bootstrap"));
        p.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "true");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, Long.toString(a.num("session-timeout-ms", 6_000)));
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG,
                Long.toString(a.num("heartbeat-interval-ms", 500)));
        // As consume-bench: the fetch settings the harness gives every client.
        BenchConsume.fetchSettings(p, a);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        try {
            // Bad settings stop the run here (exit 2), not in a member's thread.
            new ConsumerConfig(p);
        } catch (KafkaException e) {
            throw new Bench.CannotRun("the consumers' settings", e);
        }

        long leaveAfter = (long) (records * Math.max(0.0, Math.min(1.0, leaveAt)));
        long[] cpu0 = Bench.cpuUs();
        Progress progress = new Progress(members, partitions, (int) records, Bench.value(valueSize),
                leaveAfter);
        List<Thread> threads = new ArrayList<>();
        for (int m = 0; m < members; m++) {
            Properties mp = new Properties();
            mp.putAll(p);
            mp.put(CommonClientConfigs.CLIENT_ID_CONFIG, "kafkit-bench-java-" + m);
            int member = m;
            Thread t = new Thread(() -> drive(mp, topic, member, progress), "group-member-" + m);
            t.setUncaughtExceptionHandler((th, e) -> progress.abort("member " + member + ": " + e));
            threads.add(t);
            t.start();
        }
        String why = progress.await();
        for (Thread t : threads) {
            t.join();
        }
        long[] cpu1 = Bench.cpuUs();
        progress.print(cpu0, cpu1, why);
    }

    /**
     * One member: created, subscribed, polled until told to stop (or, the last member, until
     * its share is read: then it leaves), closed, all on this thread.
     */
    static void drive(Properties p, String topic, int m, Progress progress) {
        KafkaConsumer<byte[], byte[]> consumer;
        try {
            consumer = new KafkaConsumer<>(p);
        } catch (KafkaException e) {
            progress.abort("consumer " + m + ": " + e);
            return;
        }
        try {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                    progress.assigned(m, tps);
                }

                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                    progress.revoked(m, tps);
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> tps) {
                    progress.revoked(m, tps);
                }
            });
            while (!progress.stopped()) {
                if (progress.shouldLeave(m)) {
                    progress.leaving(m);
                    break;
                }
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(100));
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    progress.record(m, r.partition(), r.offset(), r.value());
                }
            }
        } catch (KafkaException | IllegalStateException e) {
            progress.abort("poll " + m + ": " + e);
        } finally {
            try {
                // Commits the positions (auto-commit on), runs the revoke callback, LeaveGroup.
                consumer.close(CloseOptions.timeout(CLOSE));
            } catch (KafkaException e) {
                progress.abort("close " + m + ": " + e);
            }
        }
    }

    /** What the members share: their ownership, the per-record tally, the timeline. */
    static final class Progress {
        private static final VarHandle SEEN = MethodHandles.arrayElementVarHandle(byte[].class);
        /** Not happened yet. */
        private static final long NONE = -1;

        private final long t0 = System.nanoTime();
        private final int members;
        private final int partitions;
        private final byte[] value;
        private final long leaveAfter;
        /** Per member: the partitions it owns (its callbacks say); guarded by {@code this}. */
        private final List<Set<Integer>> owned = new ArrayList<>();
        /** Per member: still in the group; guarded by {@code this}. */
        private final boolean[] active;
        /** Per member, once the remaining members own everything: handed out a record since. */
        private final boolean[] resumed;
        private volatile boolean awaitingResume;
        /** Guarded by {@code this}: assigned, leave, owned, resumed, done (ns from t0). */
        private final long[] timeline = {NONE, NONE, NONE, NONE, NONE};
        /** Per record number ({@code offset * partitions + partition}): deliveries (unsigned). */
        private final byte[] seen;
        private final AtomicLong distinct = new AtomicLong();
        private final LongAdder delivered = new LongAdder();
        private final AtomicLong bad = new AtomicLong();
        private String firstError;
        private volatile boolean stop;
        private String aborted;

        Progress(int members, int partitions, int records, byte[] value, long leaveAfter) {
            this.members = members;
            this.partitions = partitions;
            this.value = value;
            this.leaveAfter = leaveAfter;
            for (int i = 0; i < members; i++) {
                owned.add(new HashSet<>());
            }
            active = new boolean[members];
            Arrays.fill(active, true);
            resumed = new boolean[members];
            seen = new byte[records];
        }

        private long now() {
            return System.nanoTime() - t0;
        }

        boolean stopped() {
            return stop;
        }

        synchronized void abort(String why) {
            if (aborted == null) {
                aborted = why;
            }
            stop = true;
        }

        /**
         * Blocks until every record was handed out, a member failed or nothing new came for
         * 20 s (looking every 10 ms); then tells the members to stop. Returns why the run
         * ended early, or null.
         */
        String await() throws InterruptedException {
            long lastDistinct = distinct.get();
            long lastAt = System.nanoTime();
            String why;
            while (true) {
                if (distinct.get() >= seen.length) {
                    why = null;
                    break;
                }
                synchronized (this) {
                    if (aborted != null) {
                        why = aborted;
                        break;
                    }
                }
                long d = distinct.get();
                if (d != lastDistinct) {
                    lastDistinct = d;
                    lastAt = System.nanoTime();
                } else if (System.nanoTime() - lastAt > BenchConsume.STALL_NS) {
                    why = "no new record for 20 s after " + d + " of " + seen.length + " ("
                            + timelineText() + ")";
                    break;
                }
                Thread.sleep(10);
            }
            stop = true;
            return why;
        }

        boolean shouldLeave(int member) {
            return member + 1 == members && distinct.get() >= leaveAfter;
        }

        synchronized void assigned(int member, Collection<TopicPartition> tps) {
            Set<Integer> o = owned.get(member);
            for (TopicPartition tp : tps) {
                o.add(tp.partition());
            }
            checkOwnership();
        }

        synchronized void revoked(int member, Collection<TopicPartition> tps) {
            Set<Integer> o = owned.get(member);
            for (TopicPartition tp : tps) {
                o.remove(tp.partition());
            }
        }

        /** The last member starts to leave (before its close). */
        synchronized void leaving(int member) {
            active[member] = false;
            timeline[1] = now();
        }

        /** {@code assigned} or {@code owned} when the active members own every partition once. */
        private void checkOwnership() {
            int total = 0;
            Set<Integer> union = new HashSet<>();
            for (int i = 0; i < members; i++) {
                if (!active[i]) {
                    continue;
                }
                Set<Integer> o = owned.get(i);
                if (o.isEmpty()) {
                    return;
                }
                total += o.size();
                union.addAll(o);
            }
            if (total != union.size() || union.size() != partitions) {
                return;
            }
            long t = now();
            if (timeline[0] == NONE) {
                timeline[0] = t;
            } else if (timeline[1] != NONE && timeline[2] == NONE) {
                timeline[2] = t;
                awaitingResume = true;
            }
        }

        /** One record handed out to {@code member}: checked and counted. */
        void record(int member, int partition, long offset, byte[] v) {
            delivered.increment();
            long index = offset * partitions + partition;
            if (partition < 0 || partition >= partitions || offset < 0 || index >= seen.length) {
                fail("partition " + partition + " offset " + offset + ": no such record");
                return;
            }
            if (!Arrays.equals(v, value)) {
                fail("partition " + partition + " offset " + offset + ": another value");
            }
            if ((byte) SEEN.getAndAdd(seen, (int) index, (byte) 1) == 0) {
                long d = distinct.incrementAndGet();
                if (d == seen.length) {
                    synchronized (this) {
                        timeline[4] = now();
                    }
                }
            }
            if (awaitingResume) {
                noteResume(member);
            }
        }

        private synchronized void noteResume(int member) {
            resumed[member] = true;
            for (int i = 0; i < members; i++) {
                if (active[i] && !resumed[i]) {
                    return;
                }
            }
            awaitingResume = false;
            if (timeline[3] == NONE) {
                timeline[3] = now();
            }
        }

        private synchronized void fail(String what) {
            bad.incrementAndGet();
            if (firstError == null) {
                firstError = what;
            }
        }

        private synchronized String timelineText() {
            String[] names = {"assigned", "leave", "owned", "resumed", "done"};
            StringBuilder s = new StringBuilder();
            for (int i = 0; i < names.length; i++) {
                s.append(i == 0 ? "" : " ").append(names[i]).append('=')
                        .append(timeline[i] == NONE ? "-" : (timeline[i] / 1_000_000) + "ms");
            }
            return s.toString();
        }

        /** Prints the GROUP line; {@code why} (the run ended early) comes before other errors. */
        synchronized void print(long[] cpu0, long[] cpu1, String why) {
            long duplicates = 0;
            for (byte b : seen) {
                int n = b & 0xff;
                if (n > 1) {
                    duplicates += n - 1;
                }
            }
            long missing = seen.length - Math.min(seen.length, distinct.get());
            String error = why != null ? why : firstError;
            if (error == null && missing > 0) {
                error = missing + " records never handed out";
            }
            StringBuilder line = new StringBuilder("GROUP");
            String[] names = {"assigned", "leave", "owned", "resumed", "done"};
            for (int i = 0; i < names.length; i++) {
                line.append(' ').append(names[i]).append('=')
                        .append(timeline[i] == NONE ? "-" : Long.toString(timeline[i] / 1_000));
            }
            line.append(" delivered=").append(delivered.sum());
            line.append(" duplicates=").append(duplicates);
            line.append(" failed=").append(bad.get() + missing);
            line.append(" user_us=").append(cpu1[0] - cpu0[0]);
            line.append(" sys_us=").append(cpu1[1] - cpu0[1]);
            line.append(" version=kafka-clients@").append(AppInfoParser.getVersion());
            if (error != null) {
                line.append(" error=").append(error.replace('\n', ' ').replace('\r', ' '));
            }
            System.out.println(line);
            System.out.flush();
        }
    }
}
