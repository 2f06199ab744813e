package dev.streamc.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.BiConsumer;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.ValueJoinerWithKey;
import org.apache.kafka.streams.kstream.Window;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.TimestampExtractor;

/**
 * The Kafka Streams side of the conformance suite: for each case of {@code cases/}, the same
 * computation as the case's {@code program.stream}, written with the Kafka Streams DSL as its
 * users write it (Jackson values, default stores), so that streamc's results can be compared
 * with Kafka Streams' own on the same topics.
 *
 * <p>Usage: {@code Main BOOTSTRAP PREFIX CASES_DIR STATE_DIR CASE...}. For each case it creates
 * the input topics {@code PREFIX.CASE.TOPIC} (four partitions) and loads {@code
 * CASES_DIR/CASE/in/TOPIC.jsonl} with a plain producer: the default partitioner, and the wall
 * clock as record timestamp unless a line gives one (a table's deletion). Then it runs every
 * case's topology at once (application id {@code PREFIX.CASE-ks}, output topics {@code
 * PREFIX.CASE.ks.OUTPUT}), waits until each has committed all of its input, and closes them.
 *
 * <p>Settings that make the comparison exact rather than timing-dependent: the record cache is
 * off (every update is sent), and an outer or left join, or a windowed aggregate that emits on
 * window close, checks for closed windows at every record (Kafka Streams otherwise does so at
 * most once per second of wall-clock time).
 */
public final class Main {
  static final ObjectMapper JSON = new ObjectMapper();
  static final Serde<String> S = Serdes.String();
  static final Serde<JsonNode> J = json(JsonNode.class);

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

  /** Event time from a value field; a record without a value (a deletion) keeps its timestamp. */
  static TimestampExtractor field(String name) {
    return (ConsumerRecord<Object, Object> r, long partitionTime) ->
        r.value() instanceof JsonNode n && n.hasNonNull(name) ? n.get(name).asLong() : r.timestamp();
  }

  /**
   * count, sum, avg, min and max of trades (price and size). The aggregators return a new
   * aggregate rather than change the one they are given: Kafka Streams' sliding windows copy
   * one window's aggregate object into another (a record's right window) after updating it, so
   * an aggregator that changes its argument in place puts records into windows that do not
   * hold their times.
   */
  public static final class TradeStats {
    public long trades;
    public long volume;
    public double sum;
    public double low = Double.POSITIVE_INFINITY;
    public double high = Double.NEGATIVE_INFINITY;

    TradeStats add(JsonNode t) {
      double price = t.get("price").asDouble();
      TradeStats n = new TradeStats();
      n.trades = trades + 1;
      n.volume = volume + t.get("size").asLong();
      n.sum = sum + price;
      n.low = Math.min(low, price);
      n.high = Math.max(high, price);
      return n;
    }

    ObjectNode json(String ticker, Window w) {
      ObjectNode o = JSON.createObjectNode();
      o.put("window_start", w.start());
      o.put("window_end", w.end());
      o.put("ticker", ticker);
      o.put("trades", trades);
      o.put("volume", volume);
      o.put("avg_price", sum / trades);
      o.put("low", low);
      o.put("high", high);
      return o;
    }
  }

  /** count, sum, max and min of a click's dwell time; sessions merge them. */
  public static final class ClickStats {
    public long clicks;
    public long total;
    public long longest = Long.MIN_VALUE;
    public long shortest = Long.MAX_VALUE;

    ClickStats add(JsonNode c) {
      long d = c.get("dwell_ms").asLong();
      ClickStats n = new ClickStats();
      n.clicks = clicks + 1;
      n.total = total + d;
      n.longest = Math.max(longest, d);
      n.shortest = Math.min(shortest, d);
      return n;
    }

    static ClickStats merge(ClickStats a, ClickStats b) {
      ClickStats m = new ClickStats();
      m.clicks = a.clicks + b.clicks;
      m.total = a.total + b.total;
      m.longest = Math.max(a.longest, b.longest);
      m.shortest = Math.min(a.shortest, b.shortest);
      return m;
    }

    ObjectNode json(String user, Window w) {
      ObjectNode o = JSON.createObjectNode();
      o.put("window_start", w.start());
      o.put("window_end", w.end());
      o.put("user", user);
      o.put("clicks", clicks);
      o.put("total", total);
      o.put("longest", longest);
      o.put("shortest", shortest);
      return o;
    }
  }

  /** A grouped table's count, sum of balances and sum of scores: {@code plus} with sign 1 adds a
   * row (the adder), with -1 takes it back (the subtractor). */
  public static final class RegionStats {
    public long n;
    public long total;
    public double scores;

    RegionStats plus(JsonNode a, int sign) {
      RegionStats r = new RegionStats();
      r.n = n + sign;
      r.total = total + sign * a.get("balance").asLong();
      r.scores = scores + sign * a.get("score").asDouble();
      return r;
    }
  }

  /** A table's rows grouped by their region and aggregated: the subtractor takes a row's old
   * value out of its group. A group left with no rows is deleted by the filter (as streamc
   * deletes it). */
  static KTable<String, RegionStats> byRegion(KTable<String, JsonNode> accounts) {
    return accounts.groupBy((id, a) -> KeyValue.pair(a.get("region").asText(), a), Grouped.with(S, J))
        .aggregate(RegionStats::new, (r, a, s) -> s.plus(a, 1), (r, a, s) -> s.plus(a, -1),
            Materialized.with(S, json(RegionStats.class)));
  }

  /** count, sum, max and min of page views' ms. */
  public static final class ViewStats {
    public long views;
    public long totalMs;
    public long longest = Long.MIN_VALUE;
    public long shortest = Long.MAX_VALUE;

    ViewStats add(JsonNode v) {
      long ms = v.get("ms").asLong();
      ViewStats n = new ViewStats();
      n.views = views + 1;
      n.totalMs = totalMs + ms;
      n.longest = Math.max(longest, ms);
      n.shortest = Math.min(shortest, ms);
      return n;
    }
  }

  /** One case: its input topics, and its topology given the topic names. */
  record Case(List<String> outputs, BiConsumer<StreamsBuilder, Topics> build) {}

  /** The topic names of one case. */
  record Topics(String prefix) {
    String in(String t) {
      return prefix + "." + t;
    }

    String out(String t) {
      return prefix + ".ks." + t;
    }
  }

  static KGroupedStream<String, JsonNode> trades(StreamsBuilder b, Topics t) {
    return b.stream(t.in("stocks"), Consumed.with(S, J).withTimestampExtractor(field("ts"))).groupByKey(Grouped.with(S, J));
  }

  static KGroupedStream<String, JsonNode> clicks(StreamsBuilder b, Topics t) {
    return b.stream(t.in("clicks"), Consumed.with(S, J).withTimestampExtractor(field("at"))).groupByKey(Grouped.with(S, J));
  }

  static KStream<String, JsonNode> stream(StreamsBuilder b, Topics t, String topic) {
    return b.stream(t.in(topic), Consumed.with(S, J).withTimestampExtractor(field("at")));
  }

  /** A windowed trade-stats table as the program's sink writes it: keyed by ticker. */
  static void tradeStatsTo(KTable<Windowed<String>, TradeStats> table, Topics t) {
    table.toStream()
        .map((w, s) -> KeyValue.pair(w.key(), s == null ? null : s.json(w.key(), w.window()).toString()))
        .to(t.out("stats"), Produced.with(S, S));
  }

  /** The join's `select { id, amount, paid = payments.paid, order_at = at, paid_at = payments.at }`. */
  static final ValueJoinerWithKey<String, JsonNode, JsonNode, JsonNode> SETTLED = (id, order, payment) -> {
    ObjectNode o = JSON.createObjectNode();
    o.put("id", id);
    o.set("amount", order == null ? null : order.get("amount"));
    o.set("paid", payment == null ? null : payment.get("paid"));
    o.set("order_at", order == null ? null : order.get("at"));
    o.set("paid_at", payment == null ? null : payment.get("at"));
    return o;
  };

  static final JoinWindows WITHIN = JoinWindows.ofTimeDifferenceAndGrace(Duration.ofSeconds(2), Duration.ofSeconds(1));

  static final Map<String, Case> CASES = new LinkedHashMap<>();

  static {
    CASES.put("hopping_final", new Case(List.of("stats"), (b, t) -> tradeStatsTo(
        trades(b, t)
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(5), Duration.ofSeconds(1)).advanceBy(Duration.ofSeconds(1)))
            .aggregate(TradeStats::new, (k, v, s) -> s.add(v), Materialized.with(S, json(TradeStats.class)))
            .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded())),
        t)));
    CASES.put("tumbling_changes", new Case(List.of("stats"), (b, t) -> tradeStatsTo(
        trades(b, t)
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofSeconds(2)))
            .aggregate(TradeStats::new, (k, v, s) -> s.add(v), Materialized.with(S, json(TradeStats.class))),
        t)));
    CASES.put("sliding_final", new Case(List.of("stats"), (b, t) -> tradeStatsTo(
        trades(b, t)
            .windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(Duration.ofSeconds(3), Duration.ofSeconds(2)))
            // Not suppress(untilWindowCloses): it takes a sliding window [s, e] for closed once
            // stream time reaches e + grace, while the aggregate still adds records to it at
            // that stream time, so such a record makes suppress send the window a second time
            // (seen here: T06's window at 22329 sent with 14 trades, then with 15, when a T07
            // trade moved stream time to exactly e + grace). onWindowClose is the aggregate's
            // own close.
            .emitStrategy(EmitStrategy.onWindowClose())
            .aggregate(TradeStats::new, (k, v, s) -> s.add(v), Materialized.with(S, json(TradeStats.class))),
        t)));
    CASES.put("session_final", new Case(List.of("sessions"), (b, t) -> clicks(b, t)
        .windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofSeconds(30), Duration.ofSeconds(10)))
        .aggregate(ClickStats::new, (k, v, s) -> s.add(v), (k, a, c) -> ClickStats.merge(a, c), Materialized.with(S, json(ClickStats.class)))
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .map((w, s) -> KeyValue.pair(w.key(), s.json(w.key(), w.window()).toString()))
        .to(t.out("sessions"), Produced.with(S, S))));
    // `to "sessions" windowed`: the key is [user, start, end] as JSON text, so that a merged-away
    // session's tombstone names it.
    CASES.put("session_changes", new Case(List.of("sessions"), (b, t) -> clicks(b, t)
        .windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofSeconds(30), Duration.ofSeconds(10)))
        .aggregate(ClickStats::new, (k, v, s) -> s.add(v), (k, a, c) -> ClickStats.merge(a, c), Materialized.with(S, json(ClickStats.class)))
        .toStream()
        .map((w, s) -> KeyValue.pair(
            JSON.createArrayNode().add(w.key()).add(w.window().start()).add(w.window().end()).toString(),
            s == null ? null : s.json(w.key(), w.window()).toString()))
        .to(t.out("sessions"), Produced.with(S, S))));
    CASES.put("stream_table_join", new Case(List.of("enriched"), (b, t) -> {
      KTable<String, JsonNode> limits = b.table(t.in("limits"), Consumed.with(S, J).withTimestampExtractor(field("at")));
      b.stream(t.in("stocks"), Consumed.with(S, J).withTimestampExtractor(field("ts")))
          .leftJoin(limits, (trade, limit) -> {
            ObjectNode o = JSON.createObjectNode();
            o.set("ticker", trade.get("ticker"));
            o.set("price", trade.get("price"));
            o.set("size", trade.get("size"));
            o.set("limit", limit == null ? null : limit.get("max_price"));
            o.set("at", trade.get("ts"));
            return (JsonNode) o;
          })
          .to(t.out("enriched"), Produced.with(S, J));
    }));
    CASES.put("stream_join_inner", new Case(List.of("settled"), (b, t) -> stream(b, t, "orders")
        .join(stream(b, t, "payments"), SETTLED, WITHIN, StreamJoined.with(S, J, J))
        .to(t.out("settled"), Produced.with(S, J))));
    CASES.put("stream_join_left", new Case(List.of("settled"), (b, t) -> stream(b, t, "orders")
        .leftJoin(stream(b, t, "payments"), SETTLED, WITHIN, StreamJoined.with(S, J, J))
        .to(t.out("settled"), Produced.with(S, J))));
    CASES.put("stream_join_outer", new Case(List.of("settled"), (b, t) -> stream(b, t, "orders")
        .outerJoin(stream(b, t, "payments"), SETTLED, WITHIN, StreamJoined.with(S, J, J))
        .to(t.out("settled"), Produced.with(S, J))));
    // `within (1s, 3s)`: an order matches payments from 1 s before it to 3 s after it.
    CASES.put("stream_join_asymmetric", new Case(List.of("settled"), (b, t) -> stream(b, t, "orders")
        .outerJoin(stream(b, t, "payments"), SETTLED,
            JoinWindows.ofTimeDifferenceAndGrace(Duration.ofSeconds(1), Duration.ofSeconds(1)).after(Duration.ofSeconds(3)),
            StreamJoined.with(S, J, J))
        .to(t.out("settled"), Produced.with(S, J))));
    CASES.put("table_filter_map", new Case(List.of("rich"), (b, t) -> b.table(t.in("accounts"), Consumed.with(S, J))
        .filter((id, a) -> a.get("balance").asLong() >= 100)
        .mapValues((id, a) -> {
          ObjectNode o = JSON.createObjectNode();
          o.put("id", id);
          o.set("balance", a.get("balance"));
          o.set("tier", a.get("tier"));
          o.put("doubled", a.get("balance").asLong() * 2);
          return (JsonNode) o;
        })
        .toStream()
        .to(t.out("rich"), Produced.with(S, J))));
    // KTable-KTable joins on the key; the outer join's result filtered as a table.
    CASES.put("table_table_join", new Case(List.of("joined", "joined-left", "joined-outer"), (b, t) -> {
      KTable<String, JsonNode> users = b.table(t.in("users"), Consumed.with(S, J));
      KTable<String, JsonNode> scores = b.table(t.in("scores"), Consumed.with(S, J));
      users.join(scores, (u, s) -> {
            ObjectNode o = JSON.createObjectNode();
            o.set("name", u.get("name"));
            o.set("city", u.get("city"));
            o.set("points", s.get("points"));
            return (JsonNode) o;
          })
          .toStream()
          .to(t.out("joined"), Produced.with(S, J));
      users.leftJoin(scores, (u, s) -> {
            ObjectNode o = JSON.createObjectNode();
            o.set("name", u.get("name"));
            o.set("points", s == null ? null : s.get("points"));
            return (JsonNode) o;
          })
          .toStream()
          .to(t.out("joined-left"), Produced.with(S, J));
      users.outerJoin(scores, (u, s) -> {
            ObjectNode o = JSON.createObjectNode();
            o.set("name", u == null ? null : u.get("name"));
            o.set("points", s == null ? null : s.get("points"));
            return (JsonNode) o;
          })
          .filter((id, o) -> o.get("points").isNull() || o.get("points").asInt() > 3)
          .toStream()
          .to(t.out("joined-outer"), Produced.with(S, J));
    }));
    // Three tables joined on the key in a row: each join's left side is the result before it.
    CASES.put("table_nway_join", new Case(List.of("nway-inner-left", "nway-inner-outer"), (b, t) -> {
      KTable<String, JsonNode> users = b.table(t.in("users"), Consumed.with(S, J));
      KTable<String, JsonNode> scores = b.table(t.in("scores"), Consumed.with(S, J));
      KTable<String, JsonNode> levels = b.table(t.in("levels"), Consumed.with(S, J));
      KTable<String, JsonNode> both = users.join(scores, (u, s) -> {
        ObjectNode o = JSON.createObjectNode();
        o.set("name", u.get("name"));
        o.set("points", s.get("points"));
        return (JsonNode) o;
      });
      both.leftJoin(levels, (us, l) -> {
            ObjectNode o = ((ObjectNode) us).deepCopy();
            o.set("level", l == null ? null : l.get("level"));
            return (JsonNode) o;
          })
          .toStream()
          .to(t.out("nway-inner-left"), Produced.with(S, J));
      both.outerJoin(levels, (us, l) -> {
            ObjectNode o = JSON.createObjectNode();
            o.set("name", us == null ? null : us.get("name"));
            o.set("points", us == null ? null : us.get("points"));
            o.set("level", l == null ? null : l.get("level"));
            return (JsonNode) o;
          })
          .filter((id, o) -> o.get("level").isNull() || o.get("level").asInt() > 1)
          .toStream()
          .to(t.out("nway-inner-outer"), Produced.with(S, J));
    }));
    // Foreign-key joins: each order names its customer (a null foreign key: no match; the left
    // join still has the order's row, as Kafka Streams has since 3.7).
    CASES.put("foreign_key_join", new Case(List.of("fk-joined", "fk-joined-left"), (b, t) -> {
      KTable<String, JsonNode> orders = b.table(t.in("orders"), Consumed.with(S, J));
      KTable<String, JsonNode> customers = b.table(t.in("customers"), Consumed.with(S, J));
      java.util.function.Function<JsonNode, String> customerOf =
          o -> o.get("customer") == null || o.get("customer").isNull() ? null : o.get("customer").asText();
      orders.join(customers, customerOf, (o, c) -> {
            ObjectNode r = JSON.createObjectNode();
            r.set("amount", o.get("amount"));
            r.set("name", c.get("name"));
            r.set("tier", c.get("tier"));
            return (JsonNode) r;
          })
          .toStream()
          .to(t.out("fk-joined"), Produced.with(S, J));
      orders.leftJoin(customers, customerOf, (o, c) -> {
            ObjectNode r = JSON.createObjectNode();
            r.set("customer", o.get("customer"));
            r.set("amount", o.get("amount"));
            r.set("name", c == null ? null : c.get("name"));
            return (JsonNode) r;
          })
          .toStream()
          .to(t.out("fk-joined-left"), Produced.with(S, J));
    }));
    // A table grouped by another key: the subtractor takes a row's old value out of its group.
    // A group left with no rows is deleted by the filter (as streamc deletes it).
    CASES.put("table_group_by", new Case(List.of("region-stats", "rich-by-region"), (b, t) -> {
      KTable<String, JsonNode> accounts = b.table(t.in("accounts"), Consumed.with(S, J));
      byRegion(accounts)
          .mapValues((r, s) -> {
            ObjectNode o = JSON.createObjectNode();
            o.put("region", r);
            o.put("accounts", s.n);
            o.put("total", s.total);
            o.put("mean_score", s.n == 0 ? 0.0 : s.scores / s.n);
            return (JsonNode) o;
          })
          .toStream()
          .to(t.out("region-stats"), Produced.with(S, J));
      byRegion(accounts.filter((id, a) -> a.get("balance").asLong() >= 100))
          .filter((r, s) -> s.n > 0)
          .mapValues((r, s) -> {
            ObjectNode o = JSON.createObjectNode();
            o.put("region", r);
            o.put("accounts", s.n);
            o.put("total", s.total);
            return (JsonNode) o;
          })
          .toStream()
          .to(t.out("rich-by-region"), Produced.with(S, J));
    }));
    // A stream joined with itself: each record is both sides (it also matches itself).
    CASES.put("stream_self_join", new Case(List.of("pairs"), (b, t) -> {
      KStream<String, JsonNode> trades = b.stream(t.in("stocks"), Consumed.with(S, J).withTimestampExtractor(field("ts")));
      trades.join(trades, (a, c) -> {
            ObjectNode o = JSON.createObjectNode();
            o.set("ticker", a.get("ticker"));
            o.set("first_at", a.get("ts"));
            o.set("second_at", c.get("ts"));
            o.set("first_size", a.get("size"));
            o.set("second_size", c.get("size"));
            return (JsonNode) o;
          }, JoinWindows.ofTimeDifferenceAndGrace(Duration.ofSeconds(1), Duration.ofSeconds(2)), StreamJoined.with(S, J, J))
          .filter((k, o) -> o.get("first_at").asLong() < o.get("second_at").asLong())
          .to(t.out("pairs"), Produced.with(S, J));
    }));
    CASES.put("group_by_repartition", new Case(List.of("per-user"), (b, t) -> b.stream(t.in("views"), Consumed.with(S, J))
        .groupBy((page, v) -> v.get("user").asText(), Grouped.with(S, J))
        .aggregate(ViewStats::new, (u, v, s) -> s.add(v), Materialized.with(S, json(ViewStats.class)))
        .toStream()
        .mapValues((u, s) -> {
          ObjectNode o = JSON.createObjectNode();
          o.put("user", u);
          o.put("views", s.views);
          o.put("total_ms", s.totalMs);
          o.put("longest", s.longest);
          o.put("shortest", s.shortest);
          return (JsonNode) o;
        })
        .to(t.out("per-user"), Produced.with(S, J))));
    // A filter after a stream's aggregate: a count that leaves 2 deletes the row.
    CASES.put("aggregate_having", new Case(List.of("pairs"), (b, t) -> b.stream(t.in("votes"), Consumed.with(S, J))
        .groupByKey(Grouped.with(S, J))
        .count()
        .filter((name, c) -> c == 2)
        .toStream()
        .map((name, c) -> {
          if (c == null) {
            return KeyValue.pair(name, (JsonNode) null);
          }
          ObjectNode o = JSON.createObjectNode();
          o.put("name", name);
          o.put("c", c);
          return KeyValue.pair(name, (JsonNode) o);
        })
        .to(t.out("pairs"), Produced.with(S, J))));
    // A declared key (the record's key, no value field) grouped with a value field: the key is
    // copied into the value before the regrouping, as ksqlDB's key columns stay readable.
    CASES.put("group_by_declared_key", new Case(List.of("by-key-and-field"), (b, t) -> b.stream(t.in("events"), Consumed.with(S, J))
        .mapValues((k, v) -> {
          ObjectNode o = ((ObjectNode) v).deepCopy();
          o.put("v0", Long.parseLong(k.trim()));
          return (JsonNode) o;
        })
        .groupBy((k, v) -> "[" + v.get("v0").asLong() + "," + v.get("v1").asLong() + "]", Grouped.with(S, J))
        .aggregate(() -> (JsonNode) JSON.createObjectNode(), (g, v, agg) -> {
          ObjectNode o = JSON.createObjectNode();
          long v0 = v.get("v0").asLong(), v1 = v.get("v1").asLong(), x = v.get("x").asLong();
          o.put("v0", v0);
          o.put("v1", v1);
          o.put("n", (agg.has("n") ? agg.get("n").asLong() : 0) + 1);
          o.put("t", (agg.has("t") ? agg.get("t").asLong() : 0) + v0 + v1);
          o.put("top", agg.has("top") ? Math.max(agg.get("top").asLong(), v0 * x) : v0 * x);
          return (JsonNode) o;
        }, Materialized.with(S, J))
        .toStream()
        .to(t.out("by-key-and-field"), Produced.with(S, J))));
    // `from web, app`: KStream#merge, then a windowed count and sum, each window once.
    CASES.put("merge_windows", new Case(List.of("per-user"), (b, t) -> stream(b, t, "web")
        .merge(stream(b, t, "app"))
        .groupByKey(Grouped.with(S, J))
        .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofSeconds(5)))
        .aggregate(ViewStats::new, (u, v, s) -> s.add(v), Materialized.with(S, json(ViewStats.class)))
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .map((w, s) -> {
          ObjectNode o = JSON.createObjectNode();
          o.put("window_start", w.window().start());
          o.put("window_end", w.window().end());
          o.put("user", w.key());
          o.put("n", s.views);
          o.put("total", s.totalMs);
          return KeyValue.pair(w.key(), (JsonNode) o);
        })
        .to(t.out("per-user"), Produced.with(S, J))));
    // Branches (`to … when`, first match wins): split().branch(…), records no branch takes dropped.
    CASES.put("branch_routes", new Case(List.of("big", "eu", "other"), (b, t) -> stream(b, t, "orders")
        .filter((id, o) -> o.get("amount").asDouble() > 0)
        .split()
        .branch((id, o) -> o.get("amount").asDouble() >= 1000,
            Branched.withConsumer(s -> s.to(t.out("big"), Produced.with(S, J))))
        .branch((id, o) -> Set.of("fr", "de", "es").contains(o.get("region").asText()),
            Branched.withConsumer(s -> s.to(t.out("eu"), Produced.with(S, J))))
        .branch((id, o) -> !o.get("region").asText().equals("zz"),
            Branched.withConsumer(s -> s.to(t.out("other"), Produced.with(S, J))))
        .noDefaultBranch()));
  }

  /** The input topics of a case: one per file of its in/ folder. */
  static List<String> inputs(Path caseDir) throws IOException {
    try (Stream<Path> files = Files.list(caseDir.resolve("in"))) {
      return files.map(p -> p.getFileName().toString()).filter(n -> n.endsWith(".jsonl"))
          .map(n -> n.substring(0, n.length() - ".jsonl".length())).sorted().collect(Collectors.toList());
    }
  }

  /** The first error a send reported, if any. */
  static final java.util.concurrent.atomic.AtomicReference<Exception> SEND_ERROR = new java.util.concurrent.atomic.AtomicReference<>();

  /** Load one input file into its topic with a plain producer. */
  static int produce(KafkaProducer<String, byte[]> producer, Path file, String topic) throws Exception {
    int n = 0;
    for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
      if (line.isBlank()) {
        continue;
      }
      JsonNode r = JSON.readTree(line);
      String key = r.hasNonNull("key") ? r.get("key").asText() : null;
      byte[] value = r.hasNonNull("value") ? JSON.writeValueAsBytes(r.get("value")) : null;
      Long ts = r.hasNonNull("timestamp") ? r.get("timestamp").asLong() : null;
      producer.send(new ProducerRecord<>(topic, null, ts, key, value), (md, e) -> {
        if (e != null) {
          SEND_ERROR.compareAndSet(null, e);
        }
      });
      n++;
    }
    return n;
  }

  public static void main(String[] args) throws Exception {
    String bootstrap = args[0], prefix = args[1];
    Path cases = Path.of(args[2]), stateDir = Path.of(args[3]);
    List<String> names = List.of(args).subList(4, args.length);
    Properties ap = new Properties();
    ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    try (Admin admin = Admin.create(ap)) {
      // Topics first, then the inputs, all before any topology starts.
      List<NewTopic> topics = new ArrayList<>();
      Map<String, Topics> names2 = new LinkedHashMap<>();
      for (String name : names) {
        Case c = CASES.get(name);
        if (c == null) {
          throw new IllegalArgumentException("no Kafka Streams topology for case " + name);
        }
        Topics t = new Topics(prefix + "." + name);
        names2.put(name, t);
        for (String in : inputs(cases.resolve(name))) {
          topics.add(new NewTopic(t.in(in), 4, (short) 1));
        }
        for (String out : c.outputs()) {
          topics.add(new NewTopic(t.out(out), 4, (short) 1));
        }
      }
      admin.createTopics(topics).all().get();
      // Wait until every partition of the new topics has a leader, so that the first sends do
      // not meet a topic the broker is still setting up.
      Set<String> created = topics.stream().map(NewTopic::name).collect(Collectors.toSet());
      for (int i = 0; ; i++) {
        boolean ready = admin.describeTopics(created).allTopicNames().get().values().stream()
            .allMatch(d -> d.partitions().stream().allMatch(pi -> pi.leader() != null && !pi.leader().isEmpty()));
        if (ready) {
          break;
        }
        if (i > 300) {
          throw new IllegalStateException("the topics have no leaders after 30 s");
        }
        Thread.sleep(100);
      }
      Properties pp = new Properties();
      pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
      pp.put(ProducerConfig.ACKS_CONFIG, "all");
      try (KafkaProducer<String, byte[]> producer = new KafkaProducer<>(pp, new StringSerializer(), new ByteArraySerializer())) {
        for (String name : names) {
          for (String in : inputs(cases.resolve(name))) {
            int n = produce(producer, cases.resolve(name).resolve("in").resolve(in + ".jsonl"), names2.get(name).in(in));
            System.err.printf("conformance: %s: %d records produced to %s%n", name, n, names2.get(name).in(in));
          }
        }
        producer.flush();
      }
      if (SEND_ERROR.get() != null) {
        throw new IllegalStateException("producing the inputs failed", SEND_ERROR.get());
      }
      // Every record produced is in its topic (the topics are new: their end offsets count them).
      for (String name : names) {
        for (String in : inputs(cases.resolve(name))) {
          String topic = names2.get(name).in(in);
          long lines = Files.readAllLines(cases.resolve(name).resolve("in").resolve(in + ".jsonl"), StandardCharsets.UTF_8)
              .stream().filter(l -> !l.isBlank()).count();
          long held = endOffsets(admin, Set.of(topic)).values().stream().mapToLong(Long::longValue).sum();
          if (held != lines) {
            throw new IllegalStateException(topic + " holds " + held + " records, " + lines + " were produced");
          }
        }
      }

      Map<String, KafkaStreams> running = new LinkedHashMap<>();
      Map<String, Map<TopicPartition, Long>> sourceEnds = new HashMap<>();
      for (String name : names) {
        Topics t = names2.get(name);
        StreamsBuilder b = new StreamsBuilder();
        CASES.get(name).build().accept(b, t);
        String app = t.prefix() + "-ks";
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.resolve(name).toString());
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        p.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX, 0L);
        p.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION, 0L);
        KafkaStreams ks = new KafkaStreams(b.build(), p);
        Map<TopicPartition, Long> ends = new HashMap<>();
        for (String in : inputs(cases.resolve(name))) {
          ends.putAll(endOffsets(admin, Set.of(t.in(in))));
        }
        sourceEnds.put(app, ends);
        running.put(app, ks);
        ks.start();
      }

      // Done when, twice in a row, each application has committed every source partition to
      // its end, and every internal (repartition) topic partition to its current end.
      Set<String> finished = new TreeSet<>();
      Map<String, Integer> stable = new HashMap<>();
      long deadline = System.nanoTime() + Duration.ofMinutes(10).toNanos();
      while (finished.size() < running.size()) {
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException("Kafka Streams did not finish in 10 minutes; finished: " + finished);
        }
        Thread.sleep(300);
        for (Map.Entry<String, KafkaStreams> e : running.entrySet()) {
          String app = e.getKey();
          if (finished.contains(app)) {
            continue;
          }
          KafkaStreams.State st = e.getValue().state();
          if (st == KafkaStreams.State.ERROR || st == KafkaStreams.State.NOT_RUNNING || st == KafkaStreams.State.PENDING_ERROR) {
            throw new IllegalStateException(app + ": Kafka Streams stopped: " + st);
          }
          Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(app).partitionsToOffsetAndMetadata().get();
          Set<String> internal = admin.listTopics().names().get().stream()
              .filter(n -> n.startsWith(app + "-") && n.endsWith("-repartition")).collect(Collectors.toSet());
          Map<TopicPartition, Long> want = new HashMap<>(sourceEnds.get(app));
          if (!internal.isEmpty()) {
            want.putAll(endOffsets(admin, internal));
          }
          boolean done = st == KafkaStreams.State.RUNNING && want.entrySet().stream().allMatch(w ->
              w.getValue() == 0 || (committed.get(w.getKey()) != null && committed.get(w.getKey()).offset() >= w.getValue()));
          int n = done ? stable.merge(app, 1, Integer::sum) : 0;
          if (!done) {
            stable.put(app, 0);
          }
          if (n >= 2) {
            finished.add(app);
          }
        }
      }
      for (KafkaStreams ks : running.values()) {
        ks.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP).withTimeout(Duration.ofSeconds(60)));
      }
      System.err.printf("conformance: Kafka Streams ran %d cases%n", running.size());
    }
  }

  static Map<TopicPartition, Long> endOffsets(Admin admin, Set<String> topics) throws Exception {
    Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
    for (TopicDescription d : admin.describeTopics(topics).allTopicNames().get().values()) {
      d.partitions().forEach(i -> latest.put(new TopicPartition(d.name(), i.partition()), OffsetSpec.latest()));
    }
    Map<TopicPartition, Long> out = new HashMap<>();
    for (Map.Entry<TopicPartition, ListOffsetsResultInfo> e : admin.listOffsets(latest).all().get().entrySet()) {
      out.put(e.getKey(), e.getValue().offset());
    }
    return out;
  }
}
