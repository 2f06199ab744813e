# program: examples/stats.stream
query stock_stats {
  from trades
  to "x"
}
