# program: examples/stats.stream
replace query stock_stat { from trades to "x" }
