# program: examples/stats.stream
query big_trades {
  from trades
  where size > 1000
  to "big-trades"
}
