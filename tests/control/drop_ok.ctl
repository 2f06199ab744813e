# program: examples/stats.stream
drop query stock_stats
