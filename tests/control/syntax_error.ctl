# program: examples/stats.stream
update watch["x" = 3
