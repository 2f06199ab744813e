# program: examples/alerts.stream
delete wach["MSFT"]
