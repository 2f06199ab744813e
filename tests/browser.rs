//! The web console in a real browser: headless Chromium (Debian's `chromium`, which
//! `./dev/test` installs) loads the page of a live run. The test is ignored by a plain `cargo
//! test` (listed as not run) and run by `./dev/test`, where a missing browser fails it.

mod common;

use std::process::Command;

use common::console::{start, trades};
use common::embedded::temp_dir;

/// The page as the browser leaves it after running its script for a while (virtual time), and
/// what the browser logged: every console message of the page is a line with `CONSOLE`.
fn load(url: &str, dir: &std::path::Path) -> (String, String) {
    let browser = std::env::var("STREAMC_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let out = Command::new(&browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--enable-logging=stderr", "--v=0"])
        .arg(format!("--user-data-dir={}", dir.join("chromium").display()))
        .args(["--virtual-time-budget=5000", "--dump-dom", url])
        .output()
        .unwrap_or_else(|e| panic!("cannot start {browser} (./dev/test installs Debian's chromium): {e}"));
    assert!(out.status.success(), "{browser}: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The console loads with no console message, draws the topology with the query's processors
/// and their counts, and its processed count grows once more input is produced; it opens with
/// the server's token given in the address.
#[test]
#[ignore = "needs Chromium (./dev/test installs it)"]
fn the_console_loads_in_a_browser_and_its_counts_grow() {
    let dir = temp_dir("browser");
    let input = dir.join("trades.jsonl");
    trades(&input, 500, 3);
    let live = start(&dir, &input, &["--set", "http.auth.token=s3cret"]);
    live.state_at(501, Some("s3cret"));
    let url = format!("http://127.0.0.1:{}/#token=s3cret", live.port);
    let (dom, log) = load(&url, &dir);
    let console: Vec<&str> = log.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "the page logged: {console:?}");
    assert!(dom.contains("<b id=\"processed\">501</b>"), "{dom}");
    assert!(dom.contains("ready</span>"), "{dom}");
    for p in ["stock_stats-from", "stock_stats-where", "stock_stats-aggregate", "stock_stats-to"] {
        assert!(dom.contains(&format!(">{p}</tspan>")), "the picture lacks {p}: {dom}");
    }
    assert!(dom.contains(">filter · 500</tspan>"), "the filter's count on the picture: {dom}");
    assert!(dom.contains("price: expected float, found a string"), "the dead letter's reason: {dom}");

    // More input, produced while it runs: the page shows it.
    let more = dir.join("more.jsonl");
    trades(&more, 250, 4);
    let o = Command::new(common::cli::bin())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["produce", "stocks"])
        .arg(&more)
        .args(["--program", "examples/stats.stream"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    live.state_at(752, Some("s3cret"));
    let (dom, log) = load(&url, &dir);
    assert!(!log.contains("CONSOLE"), "{log}");
    assert!(dom.contains("<b id=\"processed\">752</b>"), "{dom}");

    // Without the token, the page says what it needs instead of failing.
    let (dom, _) = load(&format!("http://127.0.0.1:{}/", live.port), &dir.join("other"));
    assert!(dom.contains("this server wants its token"), "{dom}");
}
