# program: examples/stats.stream
replace query stock_stats { from trades where prise > 0 to "x" }
