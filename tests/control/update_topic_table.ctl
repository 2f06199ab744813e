# program: examples/alerts.stream
update limits["AAPL"] = { max_price = 10.0 }
