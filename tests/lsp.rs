//! `streamc lsp`, driven as an editor drives it: the binary started with pipes, JSON-RPC messages
//! framed with `Content-Length` headers, the answers read back and checked.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use serde_json::{json, Value};

struct Client {
    child: Child,
    stdin: ChildStdin,
    messages: Receiver<Value>,
    next_id: i64,
}

/// A message's body read after its headers; None at the end of the stream.
fn read_message(r: &mut impl BufRead) -> Option<Value> {
    let mut len = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Content-Length: ") {
            len = v.parse::<usize>().ok();
        }
    }
    let mut body = vec![0; len?];
    r.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

impl Client {
    fn start() -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_streamc"))
            .arg("lsp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            while let Some(m) = read_message(&mut stdout) {
                if tx.send(m).is_err() {
                    break;
                }
            }
        });
        let mut c = Client { child, stdin, messages, next_id: 1 };
        let init = c.request("initialize", json!({ "processId": null, "rootUri": null, "capabilities": {} }));
        assert_eq!(init["serverInfo"]["name"], "streamc", "{init}");
        let caps = &init["capabilities"];
        for cap in ["hoverProvider", "definitionProvider", "completionProvider", "documentFormattingProvider"] {
            assert!(!caps[cap].is_null(), "{cap} not offered: {caps}");
        }
        c.notify("initialized", json!({}));
        c
    }

    fn send(&mut self, msg: Value) {
        let body = msg.to_string();
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// The next message that satisfies `pred` (a generous bound: the server answers at once).
    fn wait_for(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            match self.messages.recv_timeout(Duration::from_secs(60)) {
                Ok(m) if pred(&m) => return m,
                Ok(_) => {}
                Err(e) => panic!("no {what} from the server: {e}"),
            }
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let resp = self.wait_for(method, |m| m["id"] == id);
        assert!(resp["error"].is_null(), "{method}: {resp}");
        resp["result"].clone()
    }

    fn diagnostics(&self, uri: &str) -> Vec<Value> {
        let m = self
            .wait_for("diagnostics", |m| m["method"] == "textDocument/publishDiagnostics" && m["params"]["uri"] == uri);
        m["params"]["diagnostics"].as_array().unwrap().clone()
    }

    fn at(&mut self, method: &str, uri: &str, line: u32, character: u32) -> Value {
        self.request(
            method,
            json!({ "textDocument": { "uri": uri }, "position": { "line": line, "character": character } }),
        )
    }

    fn shutdown(mut self) {
        self.request("shutdown", Value::Null);
        self.notify("exit", Value::Null);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the server exited with {status}");
    }
}

const URI: &str = "file:///work/prices.stream";

/// Lines (0-based) and columns below are counted by hand from this text.
const PROGRAM: &str = r#"# prices.stream: the file's header, not the stream's documentation.

# Trades as the exchange reports them.
stream trades from "stocks" {
  key    ticker
  value  json { ticker: string, price: float, size: int, ts: timestamp }
  time   ts
}

table limits from "limits" {
  key    ticker: string
  value  json { max_price: float }
}

query big {
  from trades
  join limits on ticker
  where price > limits.max_price
  select { ticker, notional = price * size, label = lower(ticker) }
  to "big"
}
"#;

fn position_of(text: &str, needle: &str) -> (u32, u32) {
    let offset = text.find(needle).unwrap_or_else(|| panic!("{needle} not in the text"));
    let line = text[..offset].matches('\n').count();
    let col = offset - text[..offset].rfind('\n').map_or(0, |i| i + 1);
    (line as u32, col as u32)
}

#[test]
fn an_editor_gets_diagnostics_hover_definitions_completion_and_formatting() {
    let mut c = Client::start();
    c.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": URI, "languageId": "streamc", "version": 1, "text": PROGRAM } }),
    );
    assert_eq!(c.diagnostics(URI), Vec::<Value>::new(), "a correct program has no diagnostics");

    // Hover: an expression's type, a field's type, a function's signature, a source's types.
    let (l, col) = position_of(PROGRAM, "price * size");
    let h = c.at("textDocument/hover", URI, l, col + 6);
    let text = h["contents"]["value"].as_str().unwrap();
    assert!(text.contains("price * size") && text.contains("type: `float`"), "{text}");
    let h = c.at("textDocument/hover", URI, l, col + 1);
    let text = h["contents"]["value"].as_str().unwrap();
    assert!(text.contains("price") && text.contains("type: `float`") && !text.contains("size"), "{text}");
    assert_eq!(h["range"]["start"], json!({ "line": l, "character": col }), "{h}");
    assert_eq!(h["range"]["end"], json!({ "line": l, "character": col + 5 }), "{h}");
    let (l, col) = position_of(PROGRAM, "lower(");
    let h = c.at("textDocument/hover", URI, l, col + 2);
    let text = h["contents"]["value"].as_str().unwrap();
    assert!(text.contains("lower(string) -> string"), "{text}");
    let (l, col) = position_of(PROGRAM, "from trades");
    let h = c.at("textDocument/hover", URI, l, col + 6);
    let text = h["contents"]["value"].as_str().unwrap();
    assert!(text.contains("stream trades from \"stocks\"") && text.contains("price: float"), "{text}");
    assert!(text.contains("Trades as the exchange reports them."), "the doc comment: {text}");
    assert!(!text.contains("header"), "a comment a blank line away is not the stream's: {text}");

    // Go to definition: the table's name in its declaration.
    let (l, col) = position_of(PROGRAM, "join limits");
    let d = c.at("textDocument/definition", URI, l, col + 7);
    assert_eq!(d["uri"], URI, "{d}");
    let (dl, dcol) = position_of(PROGRAM, "limits from");
    assert_eq!(d["range"]["start"], json!({ "line": dl, "character": dcol }), "{d}");
    assert_eq!(d["range"]["end"], json!({ "line": dl, "character": dcol + 6 }), "{d}");

    // Completion in the select: the inputs' fields with their types; after `limits.`, its fields.
    let (l, col) = position_of(PROGRAM, "notional");
    let items = c.at("textDocument/completion", URI, l, col);
    let labels: Vec<&str> = items.as_array().unwrap().iter().map(|i| i["label"].as_str().unwrap()).collect();
    for want in ["ticker", "price", "size", "ts", "max_price", "limits", "lower", "avg", "count"] {
        assert!(labels.contains(&want), "{want} missing from {labels:?}");
    }
    let price = items.as_array().unwrap().iter().find(|i| i["label"] == "price").unwrap();
    assert!(price["detail"].as_str().unwrap().contains("float"), "{price}");
    let (l, col) = position_of(PROGRAM, "max_price\n");
    let items = c.at("textDocument/completion", URI, l, col);
    let labels: Vec<&str> = items.as_array().unwrap().iter().map(|i| i["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["max_price", "ticker"], "after `limits.`: its value's fields and its key");
    // After the query's closing brace: no longer its fields.
    let end = PROGRAM.lines().count() as u32;
    let items = c.at("textDocument/completion", URI, end, 0);
    let labels: Vec<&str> = items.as_array().unwrap().iter().map(|i| i["label"].as_str().unwrap()).collect();
    assert!(!labels.contains(&"price") && labels.contains(&"trades"), "{labels:?}");

    // A change with a mistake: the checker's code, at the misspelt name.
    let broken = PROGRAM.replace("where price >", "where prise >");
    c.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": URI, "version": 2 }, "contentChanges": [{ "text": broken }] }),
    );
    let diags = c.diagnostics(URI);
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(diags[0]["code"], "E0201", "{diags:?}");
    assert_eq!(diags[0]["source"], "streamc");
    let (l, col) = position_of(&broken, "prise");
    assert_eq!(diags[0]["range"]["start"], json!({ "line": l, "character": col }), "{diags:?}");
    assert!(diags[0]["message"].as_str().unwrap().contains("did you mean `price`?"), "{diags:?}");

    // A syntax error in one query leaves the type errors of the others reported.
    let two = format!(
        "{broken}\nquery other {{ from trades where size > \"x\" to \"o\" }}\nquery cut {{ from trades where }}\n"
    );
    c.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": URI, "version": 3 }, "contentChanges": [{ "text": two }] }),
    );
    let codes: Vec<Value> = c.diagnostics(URI).iter().map(|d| d["code"].clone()).collect();
    assert_eq!(codes.len(), 3, "{codes:?}");
    assert!(codes.contains(&json!("E0100")) && codes.contains(&json!("E0201")), "{codes:?}");

    // Formatting: streamc fmt's layout, as one edit of the whole text.
    let messy = "query q { from trades   to \"o\" }\n";
    c.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": URI, "version": 4 }, "contentChanges": [{ "text": messy }] }),
    );
    c.diagnostics(URI);
    let edits = c.request(
        "textDocument/formatting",
        json!({ "textDocument": { "uri": URI }, "options": { "tabSize": 2, "insertSpaces": true } }),
    );
    assert_eq!(edits.as_array().map(Vec::len), Some(1), "{edits}");
    assert_eq!(edits[0]["newText"], "query q {\n  from trades\n  to \"o\"\n}\n");

    // Closing the document clears its diagnostics.
    c.notify("textDocument/didClose", json!({ "textDocument": { "uri": URI } }));
    assert_eq!(c.diagnostics(URI), Vec::<Value>::new());
    c.shutdown();
}

#[test]
fn positions_count_utf16_units_as_the_protocol_says() {
    let mut c = Client::start();
    let uri = "file:///work/unicode.stream";
    // `é` is one UTF-16 unit and two bytes; `𝔁` two units and four bytes.
    let text = "stream s from \"t\" { key k: string; value json { café: int, 𝔁y: int } }\n\
                query q { from s where 𝔁y + café > \"x\" to \"o\" }\n";
    c.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": uri, "languageId": "streamc", "version": 1, "text": text } }),
    );
    let diags = c.diagnostics(uri);
    assert_eq!(diags.len(), 1, "{diags:?}");
    let line = text.lines().nth(1).unwrap();
    let start = line.find("𝔁y + café").unwrap();
    let units = |s: &str| s.encode_utf16().count() as u32;
    let col = units(&line[..start]);
    assert_eq!(diags[0]["range"]["start"], json!({ "line": 1, "character": col }), "{diags:?}");
    let end = line.find(" to").unwrap();
    assert_eq!(diags[0]["range"]["end"], json!({ "line": 1, "character": units(&line[..end]) }), "{diags:?}");
    // Hover on `café` (after the astral character): its type.
    let cafe = units(&line[..line.find("café").unwrap()]);
    let h = c.at("textDocument/hover", uri, 1, cafe + 2);
    assert!(h["contents"]["value"].as_str().unwrap().contains("café"), "{h}");
    c.shutdown();
}

#[test]
fn exit_without_shutdown_is_exit_code_1() {
    let mut c = Client::start();
    c.notify("exit", Value::Null);
    let status = c.child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "the protocol's exit code for an exit without shutdown");
}
