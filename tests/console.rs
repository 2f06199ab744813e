//! The web console at `/` of `run --http-addr`, over plain HTTP: the page, its state and its
//! picture (tests/browser.rs loads it in a real browser).

mod common;

use common::console::{start, trades};
use common::embedded::temp_dir;

/// The page is served whole (nothing from elsewhere), the state names what the run did — its
/// tasks' counts, the query and its version, the dead letter with its reason — and the picture
/// names every processor; with a token, the page is open and the data is not.
#[test]
fn the_console_serves_its_page_its_state_and_its_picture() {
    let dir = temp_dir("console");
    let input = dir.join("trades.jsonl");
    trades(&input, 300, 7);
    let live = start(&dir, &input, &["--set", "http.auth.token=s3cret"]);
    let state = live.state_at(301, Some("s3cret"));
    assert_eq!(state["application"], "stats");
    assert_eq!(state["backend"], "embedded");
    assert_eq!(state["queries"], serde_json::json!([{"name": "stock_stats", "version": 0}]));
    let dead = state["dead_letters"].as_array().unwrap();
    assert_eq!(dead.len(), 1, "{state}");
    assert_eq!((dead[0]["topic"].as_str(), dead[0]["offset"].as_u64()), (Some("stocks"), Some(300)));
    assert!(dead[0]["reason"].as_str().unwrap().starts_with("price: expected float"), "{state}");
    let where_ =
        state["processors"].as_array().unwrap().iter().find(|p| p["processor"] == "stock_stats-where").unwrap();
    assert_eq!(where_["processor_records"], 300.0, "{state}");

    let (code, page) = live.get("/", None).unwrap();
    assert_eq!(code, 200, "the page needs no token: it holds no data");
    assert!(page.contains("<title>streamc console</title>") && page.contains("/console/state"));
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http"), "nothing from elsewhere");
    assert_eq!(live.get("/console/state", None).unwrap().0, 401);
    let (code, svg) = live.get("/console/topology.svg", Some("s3cret")).unwrap();
    assert_eq!(code, 200);
    for p in
        ["stock_stats-from", "stock_stats-where", "stock_stats-aggregate", "stock_stats-to", "stocks", "stock-stats"]
    {
        assert!(svg.contains(&format!(">{p}<")), "the picture lacks {p}");
    }
}
