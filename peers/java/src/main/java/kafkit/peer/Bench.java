package kafkit.peer;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.utils.internals.AppInfoParser;

/**
 * What kafkit-bench's peer contract asks of every peer program, shared by {@link BenchProduce},
 * {@link BenchConsume} and {@link BenchGroup}: the flags ({@code --name value}, and {@code --futures} / {@code
 * --owned} without one), the process's CPU time and the one {@code RESULT} line on stdout
 * (everything else goes to stderr).
 */
final class Bench {
    private Bench() {}

    /** Flags that come without a value and mean nothing to this peer. */
    private static final Set<String> VALUELESS = Set.of("futures", "owned");

    /** A run that could not happen (bad flags, no broker): exit 2 with the reason on stderr. */
    static final class CannotRun extends Exception {
        CannotRun(String message) {
            super(message);
        }

        CannotRun(String message, Throwable cause) {
            super(message, cause);
        }
    }

    /** A workload this client cannot run as asked (e.g. an assignor it lacks): exit 3. */
    static final class Unsupported extends Exception {
        Unsupported(String message) {
            super(message);
        }
    }

    /** Parsed flags: the known ones, with those this client cannot apply named once on stderr. */
    static final class Args {
        private final Map<String, String> values = new HashMap<>();

        /**
         * Parses {@code argv[1..]}: every name must be in {@code known} or {@code ignored}
         * (those are accepted and reported once on stderr as not applied).
         */
        Args(String[] argv, Set<String> known, Set<String> ignored) throws CannotRun {
            Set<String> unapplied = new LinkedHashSet<>();
            for (int i = 1; i < argv.length; i++) {
                String a = argv[i];
                if (!a.startsWith("--")) {
                    throw new CannotRun("expected --name value at " + a);
                }
                String name = a.substring(2);
                if (VALUELESS.contains(name)) {
                    continue;
                }
                if (!known.contains(name) && !ignored.contains(name)) {
                    throw new CannotRun("unknown flag --" + name);
                }
                if (i + 1 >= argv.length) {
                    throw new CannotRun("--" + name + " needs a value");
                }
                values.put(name, argv[++i]);
                if (ignored.contains(name)) {
                    unapplied.add(name);
                }
            }
            for (String name : unapplied) {
                System.err.println("java peer: --" + name + " has no kafka-clients setting; ignored");
            }
        }

        String need(String name) throws CannotRun {
            String v = values.get(name);
            if (v == null) {
                throw new CannotRun("--" + name + " is required");
            }
            return v;
        }

        String get(String name, String otherwise) {
            return values.getOrDefault(name, otherwise);
        }

        boolean has(String name) {
            return values.containsKey(name);
        }

        long num(String name, long otherwise) throws CannotRun {
            String v = values.get(name);
            if (v == null) {
                return otherwise;
            }
            try {
                return Long.parseLong(v);
            } catch (NumberFormatException e) {
                throw new CannotRun("--" + name + " " + v + ": not a number");
            }
        }

        boolean bool(String name, boolean otherwise) throws CannotRun {
            String v = values.get(name);
            if (v == null) {
                return otherwise;
            }
            return switch (v) {
                case "true" -> true;
                case "false" -> false;
                default -> throw new CannotRun("--" + name + " " + v + ": true or false");
            };
        }
    }

    /** Record value: {@code size} bytes, byte j is {@code 'a' + j % 26}. */
    static byte[] value(int size) {
        byte[] v = new byte[size];
        for (int j = 0; j < size; j++) {
            v[j] = (byte) ('a' + j % 26);
        }
        return v;
    }

    /**
     * The process's user and system CPU time in microseconds, every thread (GC, JIT, the
     * client's I/O thread): /proc/self/stat fields 14 and 15, clock ticks of 10 ms.
     */
    static long[] cpuUs() {
        try {
            String stat = Files.readString(Path.of("/proc/self/stat"));
            // Fields after the command name in parentheses (which may hold spaces) start at
            // field 3, the state.
            String[] f = stat.substring(stat.lastIndexOf(')') + 2).trim().split("\\s+");
            return new long[] {Long.parseLong(f[11]) * 10_000, Long.parseLong(f[12]) * 10_000};
        } catch (IOException | RuntimeException e) {
            // A CPU time of 0 would read as a free client: the run cannot be measured.
            throw new IllegalStateException("cannot read /proc/self/stat: " + e, e);
        }
    }

    /** Sum of a metric over every node's group (e.g. request-total in producer-node-metrics). */
    static double sumMetric(Map<MetricName, ? extends Metric> metrics, String group, String name,
            java.util.function.Predicate<Map<String, String>> tags) {
        double sum = 0;
        for (Map.Entry<MetricName, ? extends Metric> m : metrics.entrySet()) {
            MetricName n = m.getKey();
            if (n.group().equals(group) && n.name().equals(name) && tags.test(n.tags())
                    && m.getValue().metricValue() instanceof Number v) {
                sum += v.doubleValue();
            }
        }
        return sum;
    }

    /** Prints the RESULT line; {@code requests} below 0 prints {@code -}. */
    static void result(long delivered, long failed, long wallNs, long[] cpu0, long[] cpu1,
            long requests, long bytes, String error) {
        StringBuilder line = new StringBuilder("RESULT");
        line.append(" delivered=").append(delivered);
        line.append(" failed=").append(failed);
        line.append(" wall_us=").append(wallNs / 1_000);
        line.append(" user_us=").append(cpu1[0] - cpu0[0]);
        line.append(" sys_us=").append(cpu1[1] - cpu0[1]);
        line.append(" requests=").append(requests < 0 ? "-" : Long.toString(requests));
        line.append(" bytes=").append(bytes);
        line.append(" version=kafka-clients@").append(AppInfoParser.getVersion());
        if (error != null) {
            line.append(" error=").append(error.replace('\n', ' ').replace('\r', ' '));
        }
        System.out.println(line);
        System.out.flush();
    }

    /**
     * Runs a bench command ({@code produce-bench}, {@code consume-bench}, {@code group-bench}):
     * exit 0 once it ran, 3 when this client cannot run the workload as asked, 2 when it could
     * not run (the reason on stderr).
     */
    static void main(String[] argv) {
        int code = 0;
        try {
            switch (argv[0]) {
                case "produce-bench" -> BenchProduce.run(argv);
                case "consume-bench" -> BenchConsume.run(argv);
                case "group-bench" -> BenchGroup.run(argv);
                default -> throw new CannotRun("unknown bench command " + argv[0]);
            }
        } catch (Unsupported e) {
            System.err.println("java peer: " + argv[0] + ": " + e.getMessage());
            code = 3;
        } catch (CannotRun e) {
            System.err.println("java peer: " + argv[0] + ": " + e.getMessage()
                    + (e.getCause() != null ? ": " + e.getCause() : ""));
            code = 2;
        } catch (Throwable e) {
            System.err.println("java peer: " + argv[0] + ": " + e);
            e.printStackTrace();
            code = 2;
        }
        System.exit(code);
    }
}
