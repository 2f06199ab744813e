# program: examples/stats.stream
replace query stock_stats {
  from trades
  where price > 1
  group by ticker
  window tumbling 10s
  aggregate { trades = count() }
  to "stock-stats"
} with reprocess
