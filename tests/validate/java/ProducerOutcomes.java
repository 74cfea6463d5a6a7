import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java producer's outcomes for tests/validate/test_producer_outcomes.py: one JVM runs every
 * case (a JVM costs seconds).  Arguments: bootstrap, then per case
 * {@code --case <topic> <k=v,...producer configs> <size:timestampOffsetMs:key|-> ...};
 * one batch per case (linger.ms 200, the partition looked up first).  Prints per case
 * {@code case <topic>}, per record {@code ok <offset>} or {@code err <exception> <message>},
 * then {@code retries <record-retry-total>}.
 */
public class ProducerOutcomes {
    public static void main(String[] args) throws Exception {
        int i = 1;
        while (i < args.length) {
            if (!args[i].equals("--case")) throw new IllegalArgumentException("expected --case at " + args[i]);
            int end = i + 3;
            while (end < args.length && !args[end].equals("--case")) end++;
            run(args[0], args[i + 1], args[i + 2], List.of(args).subList(i + 3, end));
            i = end;
        }
    }

    static void run(String bootstrap, String topic, String conf, List<String> records) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("linger.ms", "200");
        p.put("delivery.timeout.ms", "3000");
        p.put("request.timeout.ms", "2000");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        for (String kv : conf.split(",")) {
            if (kv.isEmpty()) continue;
            String[] x = kv.split("=", 2);
            p.put(x[0], x[1]);
        }
        long now = System.currentTimeMillis();
        System.out.println("case " + topic);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.partitionsFor(topic);
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (String r : records) {
                String[] f = r.split(":");
                byte[] key = f[2].equals("-") ? null : f[2].getBytes();
                sent.add(producer.send(new ProducerRecord<>(topic, 0, now + Long.parseLong(f[1]), key,
                                                            new byte[Integer.parseInt(f[0])])));
            }
            producer.flush();
            for (Future<RecordMetadata> f : sent) {
                try {
                    System.out.println("ok " + f.get().offset());
                } catch (ExecutionException e) {
                    Throwable c = e.getCause();
                    System.out.println("err " + c.getClass().getSimpleName() + " " + c.getMessage());
                }
            }
            double retries = 0;
            for (var m : producer.metrics().entrySet()) {
                if (m.getKey().name().equals("record-retry-total")
                        && m.getKey().group().equals("producer-metrics")) {
                    retries = (Double) m.getValue().metricValue();
                }
            }
            System.out.println("retries " + (long) retries);
        }
    }
}
