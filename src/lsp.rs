//! `streamc lsp`: a language server over standard input and output (rust-analyzer's
//! `lsp-server` for the protocol, `lsp-types` for its messages).
//!
//! What it offers, from the same front end as `streamc check`:
//! - diagnostics while typing (full text sync), with `check`'s codes, labels, help and related
//!   spans;
//! - hover: an expression's or field's type, a function's or aggregate's signature and summary
//!   (built-in, standard library or the program's own, with its doc comment), a stream's or
//!   table's key and value types;
//! - go to definition of a stream, table, query, function or aggregate declared in the file;
//! - completion: the fields of the query's inputs (`name.` after a joined source: that source's
//!   fields), the names an `aggregate` clause defines, functions and aggregates, declared names;
//! - formatting (`streamc fmt`'s layout).
//!
//! Each request analyses the document's current text afresh (a program is small: a check takes
//! well under a millisecond per hundred lines), so there is no state to keep consistent.

use std::collections::BTreeMap;

use lsp_server::{Connection, ErrorCode, Message, Notification, Request, Response};
use lsp_types::notification::{
    DidChangeTextDocument, DidCloseTextDocument, DidOpenTextDocument, Notification as _, PublishDiagnostics,
};
use lsp_types::request::{Completion, Formatting, GotoDefinition, HoverRequest, Request as _};
use lsp_types::{
    CompletionItem, CompletionItemKind, CompletionOptions, CompletionParams, CompletionResponse,
    DiagnosticRelatedInformation, DiagnosticSeverity, DidChangeTextDocumentParams, DidCloseTextDocumentParams,
    DidOpenTextDocumentParams, DocumentFormattingParams, GotoDefinitionParams, GotoDefinitionResponse, Hover,
    HoverContents, HoverParams, HoverProviderCapability, Location, MarkupContent, MarkupKind, NumberOrString, OneOf,
    Position, PublishDiagnosticsParams, Range, ServerCapabilities, ServerInfo, TextDocumentSyncCapability,
    TextDocumentSyncKind, TextEdit, Uri,
};

use crate::ast::{Clause, Item, Span};
use crate::diag::Diagnostic;

/// Serve the protocol on standard input and output until the client says `exit`. True if it
/// asked for `shutdown` first (the exit code is then 0, else 1, as the protocol says).
pub fn run_stdio() -> Result<bool, String> {
    let (conn, io) = Connection::stdio();
    let clean = serve(&conn)?;
    drop(conn);
    io.join().map_err(|e| format!("language server input/output: {e}"))?;
    Ok(clean)
}

/// Serve one client on `conn`: the initialize handshake, then requests until `shutdown` (true)
/// or until `exit` or the end of input without one (false).
pub fn serve(conn: &Connection) -> Result<bool, String> {
    let caps = ServerCapabilities {
        text_document_sync: Some(TextDocumentSyncCapability::Kind(TextDocumentSyncKind::FULL)),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        definition_provider: Some(OneOf::Left(true)),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(vec![".".to_string()]),
            ..CompletionOptions::default()
        }),
        document_formatting_provider: Some(OneOf::Left(true)),
        ..ServerCapabilities::default()
    };
    let (id, _params) = conn.initialize_start().map_err(|e| format!("language server: {e}"))?;
    let init = serde_json::json!({
        "capabilities": caps,
        "serverInfo": ServerInfo { name: "streamc".into(), version: Some(env!("CARGO_PKG_VERSION").into()) },
    });
    conn.initialize_finish(id, init).map_err(|e| format!("language server: {e}"))?;

    let mut docs: BTreeMap<String, (Uri, String)> = BTreeMap::new();
    for msg in &conn.receiver {
        match msg {
            Message::Request(req) => {
                if conn.handle_shutdown(&req).map_err(|e| format!("language server: {e}"))? {
                    return Ok(true);
                }
                let resp = respond(&docs, req);
                conn.sender.send(Message::Response(resp)).map_err(|e| e.to_string())?;
            }
            Message::Notification(n) if n.method == "exit" => return Ok(false),
            Message::Notification(n) => {
                if let Some(note) = notify(&mut docs, n) {
                    conn.sender.send(Message::Notification(note)).map_err(|e| e.to_string())?;
                }
            }
            Message::Response(_) => {}
        }
    }
    Ok(false)
}

/// Keep the documents' texts; the diagnostics to publish after a change.
fn notify(docs: &mut BTreeMap<String, (Uri, String)>, n: Notification) -> Option<Notification> {
    let uri = match n.method.as_str() {
        DidOpenTextDocument::METHOD => {
            let p: DidOpenTextDocumentParams = serde_json::from_value(n.params).ok()?;
            let uri = p.text_document.uri;
            docs.insert(uri.as_str().to_string(), (uri.clone(), p.text_document.text));
            uri
        }
        DidChangeTextDocument::METHOD => {
            let p: DidChangeTextDocumentParams = serde_json::from_value(n.params).ok()?;
            let uri = p.text_document.uri;
            let (_, text) = docs.get_mut(uri.as_str())?;
            for change in p.content_changes {
                match change.range {
                    // (Only full texts are asked for; a client that sends a range anyway gets
                    // it applied.)
                    Some(r) => {
                        let lines = Lines::new(text);
                        let (s, e) = (lines.offset(r.start), lines.offset(r.end));
                        text.replace_range(s..e.max(s), &change.text);
                    }
                    None => *text = change.text,
                }
            }
            uri
        }
        DidCloseTextDocument::METHOD => {
            let p: DidCloseTextDocumentParams = serde_json::from_value(n.params).ok()?;
            docs.remove(p.text_document.uri.as_str());
            let params = PublishDiagnosticsParams { uri: p.text_document.uri, diagnostics: Vec::new(), version: None };
            return Some(Notification::new(PublishDiagnostics::METHOD.into(), params));
        }
        _ => return None,
    };
    let (_, text) = docs.get(uri.as_str())?;
    let params = PublishDiagnosticsParams { diagnostics: diagnostics(&uri, text), uri, version: None };
    Some(Notification::new(PublishDiagnostics::METHOD.into(), params))
}

fn respond(docs: &BTreeMap<String, (Uri, String)>, req: Request) -> Response {
    let id = req.id.clone();
    let text_of = |uri: &Uri| docs.get(uri.as_str()).map(|(_, t)| t.as_str());
    let result = match req.method.as_str() {
        HoverRequest::METHOD => req.extract::<HoverParams>(HoverRequest::METHOD).map(|(_, p)| {
            let pos = p.text_document_position_params;
            let hover = text_of(&pos.text_document.uri).and_then(|t| hover(t, Lines::new(t).offset(pos.position)));
            serde_json::to_value(hover)
        }),
        GotoDefinition::METHOD => req.extract::<GotoDefinitionParams>(GotoDefinition::METHOD).map(|(_, p)| {
            let pos = p.text_document_position_params;
            let uri = pos.text_document.uri;
            let found = text_of(&uri).and_then(|t| definition(t, Lines::new(t).offset(pos.position)).map(|r| (t, r)));
            let loc = found.map(|(t, span)| {
                GotoDefinitionResponse::Scalar(Location { uri: uri.clone(), range: Lines::new(t).range(span) })
            });
            serde_json::to_value(loc)
        }),
        Completion::METHOD => req.extract::<CompletionParams>(Completion::METHOD).map(|(_, p)| {
            let pos = p.text_document_position;
            let items = text_of(&pos.text_document.uri).map(|t| completions(t, Lines::new(t).offset(pos.position)));
            serde_json::to_value(items.map(CompletionResponse::Array))
        }),
        Formatting::METHOD => req.extract::<DocumentFormattingParams>(Formatting::METHOD).map(|(_, p)| {
            let edits = text_of(&p.text_document.uri).and_then(|t| {
                let formatted = crate::fmt::format(t).ok()?;
                let lines = Lines::new(t);
                Some(if formatted == t {
                    Vec::new()
                } else {
                    vec![TextEdit { range: lines.range(Span::new(0, t.len())), new_text: formatted }]
                })
            });
            serde_json::to_value(edits)
        }),
        _ => {
            return Response::new_err(id, ErrorCode::MethodNotFound as i32, format!("unsupported: {}", req.method));
        }
    };
    match result {
        Ok(Ok(value)) => Response::new_ok(id, value),
        Ok(Err(e)) => Response::new_err(id, ErrorCode::InternalError as i32, e.to_string()),
        Err(e) => Response::new_err(id, ErrorCode::InvalidParams as i32, format!("{e:?}")),
    }
}

// ---------------------------------------------------------------- positions

/// Byte offsets ↔ LSP positions (lines, and UTF-16 code units within a line).
struct Lines<'t> {
    text: &'t str,
    starts: Vec<usize>,
}

impl<'t> Lines<'t> {
    fn new(text: &'t str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines { text, starts }
    }

    fn position(&self, offset: usize) -> Position {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let character = self.text[self.starts[line]..offset].encode_utf16().count();
        Position { line: line as u32, character: character as u32 }
    }

    fn offset(&self, p: Position) -> usize {
        let Some(&start) = self.starts.get(p.line as usize) else { return self.text.len() };
        let end = self.starts.get(p.line as usize + 1).map_or(self.text.len(), |e| e - 1);
        let mut units = 0;
        for (i, c) in self.text[start..end].char_indices() {
            if units >= p.character as usize {
                return start + i;
            }
            units += c.len_utf16();
        }
        end
    }

    fn range(&self, span: Span) -> Range {
        Range { start: self.position(span.start), end: self.position(span.end) }
    }
}

// ---------------------------------------------------------------- diagnostics

fn diagnostics(uri: &Uri, text: &str) -> Vec<lsp_types::Diagnostic> {
    let lines = Lines::new(text);
    let Err(diags) = crate::analyze(text).1.result else { return Vec::new() };
    diags.iter().map(|d| to_lsp(d, &lines, uri)).collect()
}

fn to_lsp(d: &Diagnostic, lines: &Lines, uri: &Uri) -> lsp_types::Diagnostic {
    let mut message = d.message.clone();
    if !d.label.is_empty() && d.label != d.message {
        message.push_str(": ");
        message.push_str(&d.label);
    }
    if let Some(help) = &d.help {
        message.push_str("\nhelp: ");
        message.push_str(help);
    }
    let related = d
        .related
        .iter()
        .map(|(span, label)| DiagnosticRelatedInformation {
            location: Location { uri: uri.clone(), range: lines.range(*span) },
            message: label.clone(),
        })
        .collect::<Vec<_>>();
    lsp_types::Diagnostic {
        range: lines.range(d.span),
        severity: Some(DiagnosticSeverity::ERROR),
        code: Some(NumberOrString::String(d.code.as_str())),
        source: Some("streamc".into()),
        message,
        related_information: (!related.is_empty()).then_some(related),
        ..lsp_types::Diagnostic::default()
    }
}

// ---------------------------------------------------------------- hover

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The identifier the offset is in (or just after); for a backquoted name, its text between
/// the backquotes.
fn word_at(text: &str, offset: usize) -> Option<Span> {
    let offset = offset.min(text.len());
    if !text.is_char_boundary(offset) {
        return None;
    }
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let ticks: Vec<usize> = text[line_start..line_end].match_indices('`').map(|(i, _)| line_start + i).collect();
    for pair in ticks.chunks_exact(2) {
        if pair[0] < offset && offset <= pair[1] && pair[1] > pair[0] + 1 {
            return Some(Span::new(pair[0] + 1, pair[1]));
        }
    }
    let start =
        text[..offset].char_indices().rev().take_while(|(_, c)| is_word_char(*c)).last().map_or(offset, |(i, _)| i);
    let end = offset + text[offset..].find(|c: char| !is_word_char(c)).unwrap_or(text.len() - offset);
    (end > start && !text[start..].starts_with(|c: char| c.is_ascii_digit())).then(|| Span::new(start, end))
}

fn markdown(value: String, range: Option<Range>) -> Hover {
    Hover { contents: HoverContents::Markup(MarkupContent { kind: MarkupKind::Markdown, value }), range }
}

fn code_block(text: &str) -> String {
    format!("```streamc\n{}\n```", text.trim_end())
}

/// What to show for the position: a function's or aggregate's documentation at a call, an
/// expression's type, a declared name's declaration.
fn hover(text: &str, offset: usize) -> Option<Hover> {
    let lines = Lines::new(text);
    let (ast, analysis) = crate::analyze(text);
    let word = word_at(text, offset);
    if let Some(w) = word {
        let name = &text[w.start..w.end];
        if text[w.end..].trim_start().starts_with('(') {
            if let Some(doc) = callable_doc(text, &ast, name) {
                return Some(markdown(doc, Some(lines.range(w))));
            }
        }
    }
    let innermost =
        analysis.types.iter().filter(|(s, _)| s.start <= offset && offset < s.end).min_by_key(|(s, _)| s.end - s.start);
    if let Some((span, ty)) = innermost {
        let mut shown = text[span.start..span.end].split_whitespace().collect::<Vec<_>>().join(" ");
        if shown.chars().count() > 60 {
            shown = shown.chars().take(59).collect::<String>() + "…";
        }
        return Some(markdown(format!("{}\n\ntype: `{ty}`", code_block(&shown)), Some(lines.range(*span))));
    }
    let w = word?;
    let name = &text[w.start..w.end];
    // A source, or an alias of one in the query around the word (`from trades as a`).
    let alias = alias_at(text, offset, name);
    let named = alias.as_ref().map_or(name, |(src, _)| *src);
    if let Some(src) = analysis.sources.iter().find(|s| s.name == named) {
        let kind = if src.kind == crate::hir::SourceKind::Stream { "stream" } else { "table" };
        let topic = src.topic.as_ref().map_or(" (control-managed)".to_string(), |t| format!(" from \"{t}\""));
        let key = match src.key_name() {
            Some(k) => format!("key {k}: {}", src.key_type()),
            None => format!("key: {}", src.key_type()),
        };
        let doc = doc_comment(text, src.span.start);
        let aka =
            if alias.is_some() { format!("\n\n`{name}`: this query's name for `{named}`") } else { String::new() };
        return Some(markdown(
            format!("{}{aka}{doc}", code_block(&format!("{kind} {named}{topic}\n{key}\nvalue {}", src.value))),
            Some(lines.range(w)),
        ));
    }
    ast.items.iter().find_map(|item| match item {
        Item::Query(q) if q.name.node == name => {
            let doc = doc_comment(text, q.span.start);
            Some(markdown(format!("{}{}", code_block(&format!("query {name}")), doc), Some(lines.range(w))))
        }
        _ => None,
    })
}

/// The `#` lines right above an item, as Markdown (an empty `#` line starts a paragraph).
fn doc_comment(text: &str, item_start: usize) -> String {
    let before = &text[..item_start.min(text.len())];
    // (Only the lines right above it: a blank line ends the item's comment, so a file's header
    // is not taken for its first item's.)
    let mut lines: Vec<&str> = before
        .lines()
        .rev()
        .take_while(|l| l.trim_start().starts_with('#'))
        .map(|l| l.trim_start().trim_start_matches('#').trim())
        .collect();
    lines.reverse();
    if lines.is_empty() {
        String::new()
    } else {
        format!("\n\n{}", lines.join("\n"))
    }
}

/// The documentation of a function or aggregate: built-in, defined in the program, or in the
/// standard library.
fn callable_doc(text: &str, ast: &crate::ast::Program, name: &str) -> Option<String> {
    if let Some(d) = crate::function::lookup(name).map(|f| f.doc()).or_else(|| crate::function::lambda_doc(name)) {
        return Some(format!("{}\n\n{}", code_block(d.signature), d.summary));
    }
    if let Some(a) = crate::aggregate::lookup(name) {
        let d = a.doc();
        return Some(format!("{}\n\n{} (aggregate)", code_block(d.signature), d.summary));
    }
    // Defined in the program, else in the standard library: its first line and doc comment.
    let doc = |origin: &str, t: &str, items: &crate::ast::Program| {
        let start = match declared(items, name)?.0 {
            Item::Function(f) => f.span.start,
            Item::Aggregate(a) => a.span.start,
            _ => return None,
        };
        let line = t[start..].lines().next().unwrap_or("");
        let head = line.split(" {").next().unwrap_or(line).split(" =").next().unwrap_or(line);
        Some(format!("{}{}{origin}", code_block(head), doc_comment(t, start)))
    };
    doc("", text, ast).or_else(|| {
        crate::stdlib::FILES.iter().find_map(|(file, t)| doc(&format!(" ({file})"), t, &crate::syntax::parse(t).0))
    })
}

/// The item of the program that declares `name`, and the span of the name.
fn declared<'a>(ast: &'a crate::ast::Program, name: &str) -> Option<(&'a Item, Span)> {
    ast.items.iter().find_map(|item| {
        let ident = match item {
            Item::Stream(d) | Item::Table(d) => &d.name,
            Item::Query(q) => &q.name,
            Item::Aggregate(a) => &a.name,
            Item::Function(f) => &f.name,
        };
        (ident.node == name).then_some((item, ident.span))
    })
}

// ---------------------------------------------------------------- definition

/// The name of the stream, table, query, function or aggregate the word at the offset names.
fn definition(text: &str, offset: usize) -> Option<Span> {
    let w = word_at(text, offset)?;
    let name = &text[w.start..w.end];
    let (ast, _) = crate::analyze(text);
    // An alias is defined where the query names it (`as a`).
    if let Some((_, at)) = alias_at(text, offset, name) {
        return Some(at);
    }
    declared(&ast, name).map(|(_, span)| span)
}

/// If `name` is an alias in the top-level item around `offset` (`from s as name`, `join s as
/// name`): the source it names and where the alias is written.
fn alias_at<'t>(text: &'t str, offset: usize, name: &str) -> Option<(&'t str, Span)> {
    let (start, chunk) = crate::syntax::split_items(text).into_iter().take_while(|(o, _)| *o <= offset).last()?;
    let c = ALIASES.captures_iter(chunk).find(|c| &c[2] == name)?;
    let (src, alias) = (c.get(1)?, c.get(2)?);
    Some((src.as_str(), Span::new(start + alias.start(), start + alias.end())))
}

// ---------------------------------------------------------------- completion

fn item(label: &str, kind: CompletionItemKind, detail: String) -> CompletionItem {
    CompletionItem { label: label.to_string(), kind: Some(kind), detail: Some(detail), ..CompletionItem::default() }
}

/// The top-level item around `offset` (cut where the parser cuts them: `syntax::split_items`;
/// it may not parse while it is being typed): where it starts, without the comments before it.
fn item_start(text: &str, offset: usize) -> usize {
    let (start, chunk) =
        crate::syntax::split_items(text).into_iter().take_while(|(o, _)| *o <= offset).last().unwrap_or((0, text));
    let mut pos = start;
    for line in chunk.split_inclusive('\n') {
        if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            break;
        }
        pos += line.len();
    }
    // (An offset in the comments before the first item is in no item.)
    pos.min(offset)
}

/// A query's inputs in its text: the names after `from` (several, merged) and `join`.
static INPUTS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"\b(?:from|join)\s+([\p{L}_][\p{L}\p{N}_]*(?:\s*,\s*[\p{L}_][\p{L}\p{N}_]*)*)")
        .expect("a valid pattern")
});

/// `from s as x` / `join s as x` in a query's text: the alias and the source it names.
static ALIASES: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"\b(?:from|join)\s+([\p{L}_][\p{L}\p{N}_]*)\s+as\s+([\p{L}_][\p{L}\p{N}_]*)")
        .expect("a valid pattern")
});

fn completions(text: &str, offset: usize) -> Vec<CompletionItem> {
    let offset = offset.min(text.len());
    let (ast, analysis) = crate::analyze(text);
    let typed_start = word_at(text, offset).map_or(offset, |w| w.start.min(offset));
    let mut out: BTreeMap<String, CompletionItem> = BTreeMap::new();
    let mut add = |i: CompletionItem| {
        out.entry(i.label.clone()).or_insert(i);
    };
    let source = |name: &str| analysis.sources.iter().find(|s| s.name == name);

    // `name.`: the fields of that source.
    if text[..typed_start].ends_with('.') {
        let qualifier = word_at(text, typed_start - 1).map(|w| &text[w.start..w.end]);
        // An alias of the query around the cursor names its source.
        let item_text = &text[item_start(text, offset)..offset];
        let aliased = qualifier.and_then(|q| {
            ALIASES.captures_iter(item_text).find(|c| &c[2] == q).map(|c| c.get(1).map_or("", |m| m.as_str()))
        });
        if let Some(src) = aliased.or(qualifier).and_then(source) {
            for (f, t) in &src.value.fields {
                add(item(f, CompletionItemKind::FIELD, t.to_string()));
            }
            if let crate::hir::KeySpec::Named(k, t) = &src.key {
                add(item(k, CompletionItemKind::FIELD, format!("{t} (key)")));
            }
        }
        return out.into_values().collect();
    }

    let start = item_start(text, offset);
    let item_text = &text[start..offset];
    let ended = ast.items.iter().any(|i| matches!(i, Item::Query(q) if q.span.start == start && q.span.end <= offset));
    if item_text.starts_with("query ") && !ended {
        // The query's inputs, from its text (it may not parse yet).
        let inputs: Vec<String> = INPUTS
            .captures_iter(item_text)
            .flat_map(|c| c[1].split(',').map(|s| s.trim().to_string()).collect::<Vec<_>>())
            .collect();
        let joined = item_text.contains("join ");
        for name in &inputs {
            let Some(src) = source(name) else { continue };
            if joined {
                add(item(name, CompletionItemKind::STRUCT, format!("{} (its fields: `{name}.`)", src.value)));
            }
            for (f, t) in &src.value.fields {
                add(item(f, CompletionItemKind::FIELD, format!("{t} ({name})")));
            }
            if let crate::hir::KeySpec::Named(k, t) = &src.key {
                add(item(k, CompletionItemKind::FIELD, format!("{t} (key of {name})")));
            }
        }
        // After an aggregate clause, the names it defines (and the window's bounds).
        let parsed = ast.items.iter().find_map(|i| match i {
            Item::Query(q) if q.span.start == start => Some(q),
            _ => None,
        });
        for clause in parsed.iter().flat_map(|q| &q.clauses).filter(|c| c.span.end <= offset) {
            match &clause.node {
                Clause::Aggregate(items) => {
                    for a in items {
                        add(item(&a.name.node, CompletionItemKind::FIELD, "aggregate result".into()));
                    }
                }
                Clause::Window { .. } => {
                    for f in crate::check::WINDOW_FIELDS {
                        add(item(f, CompletionItemKind::FIELD, "timestamp (window bound)".into()));
                    }
                }
                _ => {}
            }
        }
        for f in crate::function::ALL {
            add(item(f.name(), CompletionItemKind::FUNCTION, f.doc().signature.to_string()));
        }
        for (name, d) in crate::function::LAMBDAS {
            add(item(name, CompletionItemKind::FUNCTION, d.signature.to_string()));
        }
        for a in crate::aggregate::ALL {
            add(item(a.name(), CompletionItemKind::FUNCTION, a.doc().signature.to_string()));
        }
        if let Ok(lib) = crate::stdlib::load() {
            for a in &lib.aggregates {
                add(item(&a.name, CompletionItemKind::FUNCTION, "aggregate (standard library)".into()));
            }
            for f in &lib.functions {
                add(item(&f.name, CompletionItemKind::FUNCTION, "function (standard library)".into()));
            }
        }
    }
    for i in &ast.items {
        match i {
            Item::Stream(d) => add(item(&d.name.node, CompletionItemKind::STRUCT, "stream".into())),
            Item::Table(d) => add(item(&d.name.node, CompletionItemKind::STRUCT, "table".into())),
            Item::Function(f) => add(item(&f.name.node, CompletionItemKind::FUNCTION, "function".into())),
            Item::Aggregate(a) => add(item(&a.name.node, CompletionItemKind::FUNCTION, "aggregate".into())),
            Item::Query(_) => {}
        }
    }
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every request at every position of real programs, whole and cut short (as while typing),
    /// answers without a panic; positions round-trip.
    #[test]
    fn every_position_of_every_prefix_is_answered() {
        let texts = [
            include_str!("../examples/orders.stream"),
            include_str!("../examples/alerts.stream"),
            "stream s from \"t\" { key k: string; value json { café: int, 𝔁y: int } }\nquery q { from s where 𝔁y > 1. to",
        ];
        for full in texts {
            let cuts: Vec<usize> = (0..=full.len()).step_by(97).filter(|&i| full.is_char_boundary(i)).collect();
            for cut in cuts {
                let text = &full[..cut];
                let lines = Lines::new(text);
                for (offset, _) in text.char_indices().step_by(7).chain([(text.len(), ' ')]) {
                    assert_eq!(lines.offset(lines.position(offset)), offset, "{text:?} at {offset}");
                    let _ = hover(text, offset);
                    let _ = definition(text, offset);
                    let _ = completions(text, offset);
                }
            }
        }
    }

    /// An alias hovers as the source it names, and its definition is where the query names it.
    #[test]
    fn an_alias_hovers_as_its_source_and_is_defined_where_named() {
        let text = "stream trades from \"t\" {\n  key ticker\n  value json { ticker: string, price: float }\n}\n\n\
                    query q {\n  from trades as a\n  join trades as b within 1s on ticker\n  select { x = b.price }\n  to \"o\"\n}\n";
        let named = text.find("as b").unwrap() + 3;
        let Some(Hover { contents: HoverContents::Markup(m), .. }) = hover(text, named) else { panic!("no hover") };
        assert!(m.value.contains("stream trades from \"t\""), "{}", m.value);
        assert!(m.value.contains("`b`: this query's name for `trades`"), "{}", m.value);
        let def = definition(text, text.find("b.price").unwrap()).unwrap();
        assert_eq!((def.start, def.end), (named, named + 1));
    }

    /// The lambda functions hover with their signatures and are completed.
    #[test]
    fn lambda_functions_have_docs() {
        let text = "stream s from \"t\" {\n  key k\n  value json { k: string, xs: list<int> }\n}\n\n\
                    query q {\n  from s\n  select { y = filter(xs, x => x > 1) }\n  to \"o\"\n}\n";
        let Some(Hover { contents: HoverContents::Markup(m), .. }) = hover(text, text.find("filter").unwrap()) else {
            panic!("no hover")
        };
        assert!(m.value.contains("filter(list<T>, x => bool) -> list<T>"), "{}", m.value);
        let at = text.find("filter").unwrap();
        let labels: Vec<String> = completions(text, at).into_iter().map(|i| i.label).collect();
        assert!(labels.iter().any(|l| l == "reduce"), "{labels:?}");
    }

    /// After an alias and a dot (`a.` in a self-join), the fields of the source it names.
    #[test]
    fn an_alias_completes_to_its_sources_fields() {
        let text = "stream trades from \"t\" {\n  key ticker\n  value json { ticker: string, price: float }\n}\n\n\
                    query q {\n  from trades as a\n  join trades as b within 1s on ticker\n  select { x = b.";
        let labels: Vec<String> = completions(text, text.len()).into_iter().map(|i| i.label).collect();
        assert_eq!(labels, ["price", "ticker"]);
    }
}
