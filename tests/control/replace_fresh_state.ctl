# program: examples/stats.stream
replace query stock_stats {
  from trades
  group by ticker
  aggregate { trades = count() }
  to "stock-stats"
} with fresh state
