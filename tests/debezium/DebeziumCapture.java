// Captures the change stream of Debezium's PostgreSQL connector, run in Debezium's embedded
// engine, as Kafka Connect would put it on its topics: each record's key and value turned into
// bytes by Kafka Connect's JsonConverter with schemas enabled (the `schema`/`payload` wire JSON
// of a Connect worker at its defaults). A delete's tombstone is a record with a null value.
//
// Usage: java -cp "LIB/*:CLASSES" DebeziumCapture CONNECTOR_PROPERTIES OUTPUT MAX_EVENTS QUIET_MS
//   CONNECTOR_PROPERTIES  the engine's and connector's settings (a .properties file)
//   OUTPUT                one line per record, in the order the connector emitted them:
//                         {"topic": "...", "key": "<JSON text>"|null, "value": "<JSON text>"|null}
//                         (flushed per batch, so a reader can follow it while it grows)
//   MAX_EVENTS            stop after this many records,
//   QUIET_MS              or once this long has passed without a record (after the first);
// it also stops when its standard input closes, which is how a caller that counts the records
// itself stops it (so run it with an open input: from /dev/null it stops at once).
// Exits 0 after a clean stop, 1 if the engine failed (its error on stderr).
// scripts/setup-debezium.sh compiles it; tests/interop/test_debezium.py runs it.

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;
import java.io.BufferedWriter;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;

public final class DebeziumCapture {
    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: DebeziumCapture CONNECTOR_PROPERTIES OUTPUT MAX_EVENTS QUIET_MS");
            System.exit(2);
        }
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        long maxEvents = Long.parseLong(args[2]);
        long quietMs = Long.parseLong(args[3]);

        // A Kafka Connect worker's converters at their defaults (schemas.enable=true).
        JsonConverter keys = new JsonConverter();
        keys.configure(Map.of("schemas.enable", "true"), true);
        JsonConverter values = new JsonConverter();
        values.configure(Map.of("schemas.enable", "true"), false);

        ObjectMapper json = new ObjectMapper();
        BufferedWriter out = new BufferedWriter(
                new OutputStreamWriter(new FileOutputStream(args[1]), StandardCharsets.UTF_8));
        AtomicLong written = new AtomicLong();
        AtomicLong lastEventAt = new AtomicLong(0);
        CountDownLatch done = new CountDownLatch(1);
        AtomicReference<Throwable> failure = new AtomicReference<>();

        DebeziumEngine.ChangeConsumer<RecordChangeEvent<SourceRecord>> consumer = (batch, committer) -> {
            try {
                for (RecordChangeEvent<SourceRecord> event : batch) {
                    SourceRecord record = event.record();
                    if (written.get() < maxEvents) {
                        // As a Connect worker's source task converts a record for its producer.
                        byte[] key = keys.fromConnectData(record.topic(), record.keySchema(), record.key());
                        byte[] value = values.fromConnectData(record.topic(), record.valueSchema(), record.value());
                        ObjectNode line = json.createObjectNode();
                        line.put("topic", record.topic());
                        line.put("key", key == null ? null : new String(key, StandardCharsets.UTF_8));
                        line.put("value", value == null ? null : new String(value, StandardCharsets.UTF_8));
                        out.write(json.writeValueAsString(line));
                        out.write('\n');
                        written.incrementAndGet();
                    }
                    committer.markProcessed(event);
                }
                out.flush();
                committer.markBatchFinished();
            } catch (java.io.IOException e) {
                throw new RuntimeException(e);
            }
            lastEventAt.set(System.nanoTime());
            if (written.get() >= maxEvents) {
                done.countDown();
            }
        };

        DebeziumEngine<RecordChangeEvent<SourceRecord>> engine = DebeziumEngine
                .create(ChangeEventFormat.of(Connect.class))
                .using(props)
                .notifying(consumer)
                .using((success, message, error) -> {
                    if (!success) {
                        failure.set(error != null ? error : new RuntimeException(message));
                    }
                    done.countDown();
                })
                .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() != -1) {
                    // Only the end of the input matters.
                }
            } catch (java.io.IOException e) {
                // A broken input ends it too.
            }
            done.countDown();
        });
        stdin.setDaemon(true);
        stdin.start();

        while (!done.await(200, TimeUnit.MILLISECONDS)) {
            long last = lastEventAt.get();
            if (last != 0 && System.nanoTime() - last > TimeUnit.MILLISECONDS.toNanos(quietMs)) {
                System.err.println("DebeziumCapture: no record for " + quietMs + " ms; stopping");
                break;
            }
        }
        engine.close();
        executor.shutdown();
        executor.awaitTermination(60, TimeUnit.SECONDS);
        out.close();
        System.err.println("DebeziumCapture: wrote " + written.get() + " records");
        if (failure.get() != null) {
            failure.get().printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }
}
