// Reads a reignpipe vector topic written with sinks[].format: connect-json the way a Kafka
// Connect worker would: keys through StringConverter, values through JsonConverter with
// schemas.enable=true (Kafka's own classes, from the connect-json jar), and prints one JSON line
// per record with what Connect made of it: the schema's name and field types, and every field,
// vector components as float32 bits so a comparison is exact.
//
// usage: java -cp 'CONNECT_LIBS/*' ConnectJsonCheck.java BROKERS TOPIC COUNT TIMEOUT_S
// Exits 1 after TIMEOUT_S with fewer than COUNT records, and with the converter's exception
// when it refuses a record.
import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.storage.StringConverter;

public class ConnectJsonCheck {
    public static void main(String[] args) throws Exception {
        String brokers = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]);
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(args[3]);

        JsonConverter values = new JsonConverter();
        values.configure(Map.of("schemas.enable", "true"), false);
        StringConverter keys = new StringConverter();
        keys.configure(Map.of(), true);

        Properties p = new Properties();
        p.put("bootstrap.servers", brokers);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        ObjectMapper json = new ObjectMapper();
        int seen = 0;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic)) parts.add(new TopicPartition(topic, pi.partition()));
            c.assign(parts);
            c.seekToBeginning(parts);
            while (seen < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    SchemaAndValue k = keys.toConnectData(topic, r.key());
                    SchemaAndValue v = values.toConnectData(topic, r.headers(), r.value());
                    System.out.println(json.writeValueAsString(describe(String.valueOf(k.value()), v)));
                    if (++seen >= count) break;
                }
            }
        }
        System.exit(seen >= count ? 0 : 1);
    }

    static Map<String, Object> describe(String key, SchemaAndValue v) {
        Schema s = v.schema();
        Struct st = (Struct) v.value();
        st.validate(); // the value against its schema, as a sink task's put would rely on
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("key", key);
        out.put("schema_name", s.name());
        Map<String, String> types = new LinkedHashMap<>();
        for (Field f : s.fields()) {
            String t = f.schema().type().toString();
            if (f.schema().type() == Schema.Type.ARRAY) t += "<" + f.schema().valueSchema().type() + ">";
            types.put(f.name(), t + (f.schema().isOptional() ? "?" : ""));
        }
        out.put("field_types", types);
        for (String f : new String[] {"doc_id", "title", "source", "version", "content_hash", "space", "gn_space"}) {
            out.put(f, st.getString(f));
        }
        out.put("n_chunks", st.getInt64("n_chunks"));
        out.put("n_tokens", st.getInt64("n_tokens"));
        out.put("vector_bits", bits(st.getArray("vector")));
        out.put("gn_vector_bits", bits(st.getArray("gn_vector")));
        return out;
    }

    static List<Integer> bits(List<Object> xs) {
        if (xs == null) return null;
        List<Integer> out = new ArrayList<>(xs.size());
        for (Object x : xs) out.add(Float.floatToRawIntBits((Float) x));
        return out;
    }
}
