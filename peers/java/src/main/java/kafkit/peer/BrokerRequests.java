package kafkit.peer;

import java.util.Set;

import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * {@code broker-requests --jmx HOST:PORT[,HOST:PORT...] --request Produce|Fetch}: how many
 * requests of that kind the brokers have handled since they started, summed over the brokers and
 * over every version: the {@code Count} of each broker's
 * {@code kafka.network:type=RequestMetrics,name=RequestsPerSec,request=R,version=V} meter (the
 * broker's own request metrics, read over JMX). Prints {@code REQUESTS n} on stdout; exit 2 when a
 * broker cannot be read. kafkit-bench reads it before and after a client's run to count the
 * requests of a client that does not count them itself.
 */
final class BrokerRequests {
    private BrokerRequests() {}

    static void main(String[] argv) {
        String jmx = null;
        String request = null;
        for (int i = 1; i + 1 < argv.length; i += 2) {
            switch (argv[i]) {
                case "--jmx" -> jmx = argv[i + 1];
                case "--request" -> request = argv[i + 1];
                default -> {
                    System.err.println("broker-requests: unknown flag " + argv[i]);
                    System.exit(2);
                }
            }
        }
        if (jmx == null || request == null || !request.matches("[A-Za-z]+")) {
            System.err.println("usage: broker-requests --jmx HOST:PORT[,...] --request NAME");
            System.exit(2);
        }
        long total = 0;
        for (String address : jmx.split(",")) {
            try {
                total += count(address.trim(), request);
            } catch (Exception e) {
                System.err.println("broker-requests: " + address + ": " + e);
                System.exit(2);
            }
        }
        System.out.println("REQUESTS " + total);
        System.exit(0);
    }

    /** The request count of one broker at {@code address} (JMX over RMI). */
    static long count(String address, String request) throws Exception {
        JMXServiceURL url =
                new JMXServiceURL("service:jmx:rmi:///jndi/rmi://" + address + "/jmxrmi");
        try (JMXConnector c = JMXConnectorFactory.connect(url)) {
            MBeanServerConnection s = c.getMBeanServerConnection();
            Set<ObjectName> names = s.queryNames(new ObjectName(
                    "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=" + request + ",*"),
                    null);
            long total = 0;
            for (ObjectName n : names) {
                total += ((Number) s.getAttribute(n, "Count")).longValue();
            }
            return total;
        }
    }
}
