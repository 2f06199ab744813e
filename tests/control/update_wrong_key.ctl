# program: examples/alerts.stream
update watch[42] = { note = "x", threshold = 1.0 }
