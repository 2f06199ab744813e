package dev.streamc.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.KeyValueStore;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.streams.state.WindowStore;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.kstream.KStream;
import io.apicurio.registry.serde.avro.AvroSerde;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;

/**
 * examples/stats.stream in Kafka Streams: per-ticker count, sum, avg, min and max over hopping
 * 5 s windows advancing every 1 s with 1 s grace, updates emitted through the default record
 * cache, one processing thread, commits every second.
 *
 * <p>Usage: StockStats BOOTSTRAP APPLICATION_ID INPUT OUTPUT GUARANTEE STATE_DIR [stats|keys [restore]|avro REGISTRY_V2_URL].
 * Runs until the group's committed offsets reach the input's end offsets as of start-up, then
 * closes (a last commit) and prints "ELAPSED seconds" and "RESTORED records seconds" (records
 * restored from changelogs, and the time from start until restoration ended).
 *
 * <p>{@code keys} is bench/keys.stream instead: per ticker (no window) the count and the summed
 * size, in a key-value store, for the restore benchmark; with {@code restore} the run also waits
 * until every changelog partition has been restored.
 *
 * <p>{@code avro} is stats over Avro values in the Confluent wire format (magic byte, 4-byte
 * schema id, datum), with Apicurio Registry's Avro serde (its registry API at REGISTRY_V2_URL,
 * ids as the Confluent-compatible API gives them: content ids): trades read as generic records,
 * results written as generic records of {@link #STATS_AVRO}, registered by the serde under
 * {@code OUTPUT-value}. The window store keeps its JSON values, as in {@code stats}.
 */
public final class StockStats {
  static final ObjectMapper JSON = new ObjectMapper();

  /** A trade as the input topic holds it. */
  public static final class Trade {
    public String ticker;
    public double price;
    public long size;
    public long ts;
  }

  /** The aggregate of one (ticker, window). */
  public static final class Stats {
    public long trades;
    public long volume;
    public double sum;
    public double low = Double.POSITIVE_INFINITY;
    public double high = Double.NEGATIVE_INFINITY;
    public long maxTs = Long.MIN_VALUE;

    Stats add(Trade t) {
      trades++;
      volume += t.size;
      sum += t.price;
      low = Math.min(low, t.price);
      high = Math.max(high, t.price);
      maxTs = Math.max(maxTs, t.ts);
      return this;
    }
  }

  /** Jackson serde, as Kafka Streams users commonly write one. */
  static <T> Serde<T> json(Class<T> type) {
    Serializer<T> ser = (topic, v) -> {
      try {
        return v == null ? null : JSON.writeValueAsBytes(v);
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    };
    Deserializer<T> de = (topic, b) -> {
      try {
        return b == null ? null : JSON.readValue(b, type);
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    };
    return Serdes.serdeFrom(ser, de);
  }

  /** Event time from the trade's `ts` field (the value is already deserialized). */
  public static final class TradeTime implements TimestampExtractor {
    @Override
    public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
      return record.value() instanceof Trade t ? t.ts : record.timestamp();
    }
  }

  /** The schema of the Avro results (the fields streamc's `to … avro` writes for stats). */
  static final String STATS_AVRO = "{\"type\":\"record\",\"name\":\"stock_stats\",\"fields\":["
      + "{\"name\":\"window_start\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
      + "{\"name\":\"window_end\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
      + "{\"name\":\"ticker\",\"type\":\"string\"},{\"name\":\"trades\",\"type\":\"long\"},"
      + "{\"name\":\"volume\",\"type\":\"long\"},{\"name\":\"avg_price\",\"type\":\"double\"},"
      + "{\"name\":\"low\",\"type\":\"double\"},{\"name\":\"high\",\"type\":\"double\"}]}";

  /** The result of one (ticker, window), its fields in the order streamc writes them. */
  static Map<String, Object> result(org.apache.kafka.streams.kstream.Windowed<String> w, Stats s) {
    Map<String, Object> o = new java.util.LinkedHashMap<>();
    o.put("window_start", w.window().start());
    o.put("window_end", w.window().end());
    o.put("ticker", w.key());
    o.put("trades", s.trades);
    o.put("volume", s.volume);
    o.put("avg_price", s.sum / s.trades);
    o.put("low", s.low);
    o.put("high", s.high);
    return o;
  }

  /** Apicurio's Avro serde of generic records, in the Confluent wire format. */
  static AvroSerde<GenericRecord> avro(String registry) {
    Map<String, Object> c = new HashMap<>();
    c.put("apicurio.registry.url", registry);
    c.put("apicurio.registry.headers.enabled", "false");
    c.put("apicurio.registry.as-confluent", "true");
    c.put("apicurio.registry.use-id", "contentId");
    c.put("apicurio.registry.auto-register", "true");
    AvroSerde<GenericRecord> s = new AvroSerde<>();
    s.configure(c, false);
    return s;
  }

  /** A trade of an Avro record (`ts` a timestamp-millis long). */
  static Trade trade(GenericRecord r) {
    Trade t = new Trade();
    t.ticker = r.get("ticker").toString();
    t.price = ((Number) r.get("price")).doubleValue();
    t.size = ((Number) r.get("size")).longValue();
    t.ts = ((Number) r.get("ts")).longValue();
    return t;
  }

  /** Event time from an Avro trade's `ts` field. */
  public static final class AvroTradeTime implements TimestampExtractor {
    @Override
    public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
      return record.value() instanceof GenericRecord r ? ((Number) r.get("ts")).longValue() : record.timestamp();
    }
  }

  /** The aggregate of one ticker in bench/keys.stream. */
  public static final class PerKey {
    public long trades;
    public long volume;
  }

  /** `--end-offsets BOOTSTRAP TOPIC`: the records ever written to a topic (its end offsets). */
  static void endOffsets(String bootstrap, String topic) throws Exception {
    Properties ap = new Properties();
    ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    try (Admin admin = Admin.create(ap)) {
      Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
      admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions()
          .forEach(i -> latest.put(new TopicPartition(topic, i.partition()), OffsetSpec.latest()));
      long total = admin.listOffsets(latest).all().get().values().stream().mapToLong(ListOffsetsResult.ListOffsetsResultInfo::offset).sum();
      System.out.println("END " + total);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args[0].equals("--end-offsets")) {
      endOffsets(args[1], args[2]);
      return;
    }
    String bootstrap = args[0], app = args[1], input = args[2], output = args[3], guarantee = args[4], stateDir = args[5];
    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee.equals("exactly_once") ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
    p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
    p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

    String mode = args.length > 6 ? args[6] : "stats";
    boolean restore = args.length > 7 && args[7].equals("restore");
    StreamsBuilder b = new StreamsBuilder();
    if (mode.equals("keys")) {
      KTable<String, PerKey> t = b.stream(input, Consumed.with(Serdes.String(), json(Trade.class)).withTimestampExtractor(new TradeTime()))
          .groupByKey()
          .aggregate(PerKey::new, (k, tr, s) -> {
                s.trades++;
                s.volume += tr.size;
                return s;
              },
              Materialized.<String, PerKey, KeyValueStore<Bytes, byte[]>>as("per-key-store").withKeySerde(Serdes.String()).withValueSerde(json(PerKey.class)));
      t.toStream()
          .mapValues((k, s) -> "{\"ticker\":" + JSON.valueToTree(k) + ",\"trades\":" + s.trades + ",\"volume\":" + s.volume + "}")
          .to(output, Produced.with(Serdes.String(), Serdes.String()));
    } else {
      boolean avro = mode.equals("avro");
      AvroSerde<GenericRecord> avroSerde = avro ? avro(args[7]) : null;
      KStream<String, Trade> trades = avro
          ? b.stream(input, Consumed.with(Serdes.String(), avroSerde).withTimestampExtractor(new AvroTradeTime())).mapValues(StockStats::trade)
          : b.stream(input, Consumed.with(Serdes.String(), json(Trade.class)).withTimestampExtractor(new TradeTime()));
      KStream<org.apache.kafka.streams.kstream.Windowed<String>, Stats> stats = trades
          .filter((k, t) -> t.price > 0)
          .groupByKey()
          .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(5), Duration.ofSeconds(1)).advanceBy(Duration.ofSeconds(1)))
          .aggregate(Stats::new, (k, t, s) -> s.add(t),
              Materialized.<String, Stats, WindowStore<Bytes, byte[]>>as("stats-store").withKeySerde(Serdes.String()).withValueSerde(json(Stats.class)))
          .toStream();
      if (avro) {
        Schema schema = new Schema.Parser().parse(STATS_AVRO);
        stats.map((w, s) -> {
              GenericRecord o = new GenericData.Record(schema);
              result(w, s).forEach(o::put);
              return KeyValue.pair(w.key(), o);
            })
            .to(output, Produced.with(Serdes.String(), avroSerde));
      } else {
        stats.map((w, s) -> {
              try {
                return KeyValue.pair(w.key(), JSON.writeValueAsString(result(w, s)));
              } catch (Exception e) {
                throw new RuntimeException(e);
              }
            })
            .to(output, Produced.with(Serdes.String(), Serdes.String()));
      }
    }

    // The input's end offsets as of start-up: done once the group has committed them all.
    Properties ap = new Properties();
    ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    try (Admin admin = Admin.create(ap)) {
      List<TopicPartition> parts = admin.describeTopics(List.of(input)).allTopicNames().get().get(input).partitions().stream()
          .map(i -> new TopicPartition(input, i.partition())).collect(Collectors.toList());
      Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
      parts.forEach(tp -> latest.put(tp, OffsetSpec.latest()));
      Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends = admin.listOffsets(latest).all().get();

      long started = System.nanoTime();
      KafkaStreams streams = new KafkaStreams(b.build(), p);
      AtomicLong restored = new AtomicLong();
      AtomicLong restoreEnded = new AtomicLong(started);
      AtomicLong restoresEnded = new AtomicLong();
      streams.setGlobalStateRestoreListener(new StateRestoreListener() {
        @Override
        public void onRestoreStart(TopicPartition tp, String store, long start, long end) {}

        @Override
        public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {
          restored.addAndGet(n);
        }

        @Override
        public void onRestoreEnd(TopicPartition tp, String store, long total) {
          restoreEnded.set(System.nanoTime());
          restoresEnded.incrementAndGet();
        }
      });
      streams.start();
      while (true) {
        Thread.sleep(200);
        Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(app).partitionsToOffsetAndMetadata().get();
        boolean done = parts.stream().allMatch(tp -> committed.get(tp) != null && committed.get(tp).offset() >= ends.get(tp).offset());
        // `restore`: also wait until every changelog partition has been restored (the input
        // was committed to its end before, so the offsets alone say nothing).
        done = done && (!restore || restoresEnded.get() >= parts.size());
        if (done) {
          break;
        }
        if (streams.state() == KafkaStreams.State.ERROR || streams.state() == KafkaStreams.State.NOT_RUNNING) {
          System.err.println("Kafka Streams stopped: " + streams.state());
          System.exit(1);
        }
      }
      // Leave the group (Kafka Streams' default is to stay until the session times out), so
      // that the next run of the same application is assigned its tasks at once.
      streams.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP).withTimeout(Duration.ofSeconds(60)));
      double secs = (System.nanoTime() - started) / 1e9;
      System.out.printf("ELAPSED %.3f%n", secs);
      System.out.printf("RESTORED %d %.3f%n", restored.get(), (restoreEnded.get() - started) / 1e9);
    }
  }
}
