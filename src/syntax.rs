//! Text → [`ast::Program`]: the pest grammar in `grammar/stream.pest`, and the builder that
//! turns pest's pairs into the span-carrying AST.
//!
//! Bounds: a source over [`MAX_SOURCE_BYTES`] is refused before parsing; pest guards its own
//! stack; the builder refuses expressions nested deeper than [`MAX_DEPTH`], so every later
//! stage (checker, evaluator, drop) recurses at most that deep.

use pest::iterators::Pair;
use pest::Parser as _;

use crate::ast::*;
use crate::diag::{Code, Diagnostic, Diagnostics};

#[derive(pest_derive::Parser)]
#[grammar = "../grammar/stream.pest"]
pub(crate) struct StreamParser;

/// The largest program text accepted.
pub const MAX_SOURCE_BYTES: usize = 1 << 20;
/// The deepest expression tree (and nesting of brackets, `if`s and prefix operators) accepted.
pub const MAX_DEPTH: usize = 128;

/// Parse a program. Syntax errors are reported per top-level item (the first in each), and
/// the items that parsed are returned beside them so later stages can still check those.
pub fn parse(source: &str) -> (Program, Diagnostics) {
    let mut program = Program::default();
    let mut diags = Vec::new();
    if source.len() > MAX_SOURCE_BYTES {
        diags.push(too_large(source.len()));
        return (program, diags);
    }
    for (offset, chunk) in split_items(source) {
        let mut b = Builder { offset, diags: Vec::new() };
        match StreamParser::parse(Rule::program, chunk) {
            Ok(mut pairs) => {
                let Some(root) = pairs.next() else { continue };
                for pair in root.into_inner() {
                    if pair.as_rule() == Rule::EOI {
                        continue;
                    }
                    if let Ok(item) = b.item(pair) {
                        program.items.push(item);
                    }
                }
            }
            Err(e) => b.diags.push(syntax_error(&e, chunk).offset(offset)),
        }
        diags.extend(b.diags);
    }
    (program, diags)
}

/// Parse one control statement (the value of one control record).
pub fn parse_statement(text: &str) -> Result<Statement, Diagnostics> {
    if text.len() > MAX_SOURCE_BYTES {
        return Err(vec![too_large(text.len())]);
    }
    let mut b = Builder { offset: 0, diags: Vec::new() };
    let pairs = StreamParser::parse(Rule::statement, text).map_err(|e| {
        let mut d = syntax_error(&e, text);
        if d.label == "not expected here" {
            d.label =
                "expected a statement: `update`, `delete`, `query`, `replace`, `drop` or `for tenant \"t\" …`".into();
        }
        vec![d]
    })?;
    let Some(root) = pairs.into_iter().next() else {
        return Err(vec![Diagnostic::new(Code::Syntax, Span::new(0, 0), "empty statement")]);
    };
    let stmt = b.statement(root);
    match stmt {
        Ok(s) if b.diags.is_empty() => Ok(s),
        _ => Err(b.diags),
    }
}

fn too_large(len: usize) -> Diagnostic {
    Diagnostic::new(Code::TooLarge, Span::new(0, 0), format!("the program is {len} bytes, larger than the limit"))
        .label("the text starts here")
        .help(format!("programs are limited to {} bytes; split the work into several applications", MAX_SOURCE_BYTES))
}

/// The names declared by the items in which a syntax error lies (the word after `stream`,
/// `table`, `query`, `function` or `aggregate`): what the checker says about them would only
/// repeat the syntax error.
pub fn broken_names(source: &str, diags: &[Diagnostic]) -> Vec<String> {
    split_items(source)
        .into_iter()
        .filter(|(offset, chunk)| {
            let end = offset + chunk.len();
            // An item cut short is reported at its end ("unexpected end of input"): that is the
            // item that ends there, not the one that starts there.
            diags.iter().any(|d| {
                let cut = d.message.contains("end of input");
                ((*offset..end).contains(&d.span.start) && !(cut && d.span.start == *offset && *offset > 0))
                    || (cut && d.span.start == end)
            })
        })
        .filter_map(|(_, chunk)| {
            // The item's first line (the first chunk may start with comments).
            let line = chunk.lines().find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))?;
            let mut words = line.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty());
            let first = words.next()?;
            starts_item(&format!("{first} x")).then(|| words.next().map(str::to_string)).flatten()
        })
        .collect()
}

/// Split the source into runs that each start with a top-level keyword at column 0, so that a
/// syntax error in one item does not hide the errors of the others.
pub(crate) fn split_items(source: &str) -> Vec<(usize, &str)> {
    let mut starts = vec![0];
    let mut pos = 0;
    for line in source.split_inclusive('\n') {
        if pos > 0 && starts_item(line) {
            starts.push(pos);
        }
        pos += line.len();
    }
    starts.push(source.len());
    starts.windows(2).map(|w| (w[0], &source[w[0]..w[1]])).collect()
}

fn starts_item(line: &str) -> bool {
    let word_end = line.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(line.len());
    let (word, rest) = line.split_at(word_end);
    if !rest.starts_with([' ', '\t']) {
        return false;
    }
    match word {
        "stream" | "table" | "query" | "function" => true,
        // `aggregate NAME(` defines an aggregate; `aggregate {` is a clause.
        "aggregate" => {
            let rest = rest.trim_start();
            let name_end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            name_end > 0 && rest[name_end..].trim_start().starts_with('(')
        }
        _ => false,
    }
}

pub(crate) fn syntax_error(e: &pest::error::Error<Rule>, text: &str) -> Diagnostic {
    let (start, end) = match e.location {
        pest::error::InputLocation::Pos(p) => (p, p),
        pest::error::InputLocation::Span((s, end)) => (s, end),
    };
    if let pest::error::ErrorVariant::CustomError { message } = &e.variant {
        if message.contains("limit reached") {
            return Diagnostic::new(Code::TooDeep, Span::new(start, end), "the program is nested too deeply to parse")
                .label("nesting reaches the parser's limit here")
                .help(format!(
                    "expressions may nest at most {MAX_DEPTH} levels; name intermediate results with `select`"
                ));
        }
        return Diagnostic::new(Code::Syntax, Span::new(start, end), message.clone());
    }
    let found = found_token(text, start);
    let end = (start + found.len()).max(start);
    let mut expected: Vec<String> = match &e.variant {
        pest::error::ErrorVariant::ParsingError { positives, .. } => {
            positives.iter().filter_map(|r| describe(*r)).map(str::to_string).collect()
        }
        _ => Vec::new(),
    };
    expected.sort();
    expected.dedup();
    let what = if found.is_empty() { "end of input".to_string() } else { format!("`{found}`") };
    let label = match expected.len() {
        0 => "not expected here".to_string(),
        1 => format!("expected {}", expected[0]),
        n if n <= 8 => format!("expected {} or {}", expected[..n - 1].join(", "), expected[n - 1]),
        _ => format!("expected one of {}, …", expected[..8].join(", ")),
    };
    Diagnostic::new(Code::Syntax, Span::new(start, end), format!("syntax error: unexpected {what}"))
        .label(label)
        .help_opt(syntax_help(text, start))
}

/// The token at `pos`, for "unexpected `…`".
fn found_token(text: &str, pos: usize) -> &str {
    let rest = &text[pos.min(text.len())..];
    let mut chars = rest.char_indices();
    match chars.next() {
        None => "",
        Some((_, c)) if c.is_alphanumeric() || c == '_' => {
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
            &rest[..end]
        }
        Some((_, c)) => &rest[..c.len_utf8()],
    }
}

fn syntax_help(text: &str, pos: usize) -> Option<String> {
    let rest = &text[pos.min(text.len())..];
    if rest.starts_with('"') && !rest.lines().next().unwrap_or("")[1..].contains('"') {
        return Some("this string is not closed on its line".into());
    }
    if rest.starts_with('\'') {
        return Some("strings are written in double quotes: \"text\"".into());
    }
    if rest.starts_with('=') && !rest.starts_with("==") {
        return Some("comparison is written `==`; `=` names a field in `select`, `aggregate` and records".into());
    }
    let word = found_token(text, pos);
    let before = text[..pos.min(text.len())].trim_end();
    if before.ends_with("distinct") && before[..before.len() - "distinct".len()].trim_end().ends_with("count(") {
        return Some("a distinct count is written `count_distinct(x)`".into());
    }
    let line_start = before.is_empty() || text[..pos.min(text.len())].ends_with('\n');
    match word.to_ascii_lowercase().as_str() {
        "create" | "insert" if line_start || word.chars().all(|c| c.is_ascii_uppercase()) => {
            return Some(
                "streamc is not SQL: a source is declared `stream clicks from \"clicks\" { key user; value json { user: string, page: string } }` \
                 (or `table`), and a query is `query name { from clicks where … select { … } to \"topic\" }` (see docs/language.md)"
                    .into(),
            );
        }
        "select" if word == "SELECT" || line_start => {
            return Some(
                "a query is written `query name { from S where … select { a, b = expr } to \"topic\" }`: `from` comes first (see docs/language.md)"
                    .into(),
            );
        }
        _ => {}
    }
    if ["and", "or", "not", "in", "is", "if", "then", "else", "true", "false", "null"].contains(&word) {
        return Some(format!("`{word}` is an expression keyword; write `` `{word}` `` to use it as a field name"));
    }
    None
}

fn describe(rule: Rule) -> Option<&'static str> {
    use Rule::*;
    Some(match rule {
        stream_decl | kw_stream => "`stream`",
        table_decl | kw_table => "`table`",
        query_decl | kw_query => "`query`",
        aggregate_decl => "`aggregate`",
        function_decl | kw_function => "`function`",
        EOI => "end of input",
        ident | bare_ident | quoted_ident | path => "a name",
        string => "a string",
        duration => "a duration like `5s`",
        expr => "an expression",
        type_expr | prim_type | list_type | map_type => "a type",
        record_type => "`{`",
        from_clause | kw_from => "`from`",
        where_clause | kw_where => "`where`",
        select_clause | kw_select => "`select`",
        key_by_clause => "`key by`",
        group_by_clause | kw_group => "`group by`",
        window_clause | kw_window => "`window`",
        aggregate_clause | kw_aggregate => "`aggregate`",
        emit_clause | kw_emit => "`emit`",
        idle_close | kw_idle => "`idle`",
        join_clause | kw_join | left => "`join`",
        to_clause | kw_to => "`to`",
        key_decl | kw_key => "`key`",
        value_decl | kw_value => "`value`",
        time_decl | kw_time => "`time`",
        tenant_decl | kw_tenant => "`tenant`",
        tumbling | kw_tumbling => "`tumbling`",
        hopping | kw_hopping => "`hopping`",
        sliding | kw_sliding => "`sliding`",
        session | kw_session => "`session`",
        kw_advance => "`advance`",
        kw_gap => "`gap`",
        grace | kw_grace => "`grace`",
        kw_changes => "`changes`",
        kw_final => "`final`",
        kw_outer | outer => "`outer`",
        kw_windowed | windowed_key => "`windowed`",
        kw_when | to_when => "`when`",
        kw_on => "`on`",
        within | kw_within => "`within`",
        kw_by => "`by`",
        format | kw_json => "`json`",
        kw_string | value_string => "`string`",
        kw_csv | value_csv => "`csv`",
        kw_delimiter | csv_delimiter => "`delimiter`",
        kw_avro => "`avro`",
        kw_protobuf => "`protobuf`",
        value_registry => "`avro` or `protobuf`",
        kw_then => "`then`",
        kw_else => "`else`",
        kw_init => "`init`",
        kw_update | update_stmt | agg_update => "`update`",
        kw_merge | agg_merge => "`merge`",
        kw_undo | agg_undo => "`undo`",
        kw_result | agg_result => "`result`",
        delete_stmt | kw_delete => "`delete`",
        purge_stmt | kw_purge => "`purge`",
        replace_stmt | kw_replace => "`replace`",
        drop_stmt | kw_drop => "`drop`",
        replace_mode | kw_with => "`with`",
        kw_reprocess => "`reprocess`",
        kw_fresh => "`fresh`",
        op_or | op_and | op_eq | op_ne | op_le | op_ge | op_lt | op_gt | op_in | op_not_in | op_add | op_sub
        | op_mul | op_div | op_rem => "an operator",
        op_is_null | op_is_not_null => "`is null`",
        // Not listed where an expression may go on: "expected an operator" says enough.
        op_between | kw_between | op_index => return None,
        select_item | star => "a field",
        agg_item => "`name = aggregate(...)`",
        stmt | let_stmt | assign_stmt => "a statement",
        field_decl | record_field | init_field => "a field",
        param | params => "a parameter",
        _ => return None,
    })
}

struct Builder {
    /// Where the parsed text starts in the whole source; added to every span.
    offset: usize,
    diags: Diagnostics,
}

type R<T> = Result<T, ()>;

/// The length of `s` without trailing whitespace and trailing `#` comments.
fn trimmed_len(s: &str) -> usize {
    let mut t = s.trim_end();
    loop {
        let line_start = t.rfind('\n').map(|i| i + 1).unwrap_or(0);
        match comment_start(&t[line_start..]) {
            Some(c) => t = t[..line_start + c].trim_end(),
            None => return t.len(),
        }
    }
}

/// Where a `#` comment starts in one line, outside strings and backquoted names.
pub(crate) fn comment_start(line: &str) -> Option<usize> {
    let (mut in_str, mut in_tick, mut escaped) = (false, false, false);
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_str => escaped = true,
            '"' if !in_tick => in_str = !in_str,
            '`' if !in_str => in_tick = !in_tick,
            '#' if !in_str && !in_tick => return Some(i),
            _ => {}
        }
    }
    None
}

fn is_kw(p: &Pair<Rule>) -> bool {
    is_kw_rule(p.as_rule())
}

/// A keyword token's rule (`kw_…`).
pub(crate) fn is_kw_rule(rule: Rule) -> bool {
    format!("{rule:?}").starts_with("kw_")
}

/// The children of a pair, without keyword tokens.
fn inner(p: Pair<Rule>) -> impl Iterator<Item = Pair<Rule>> {
    p.into_inner().filter(|c| !is_kw(c))
}

impl Builder {
    /// The pair's span in the whole source, without the whitespace and comments that pest's
    /// implicit skipping may leave at its end.
    fn sp(&self, p: &Pair<Rule>) -> Span {
        let s = p.as_span();
        let len = trimmed_len(p.as_str());
        Span::new(s.start() + self.offset, s.start() + len + self.offset)
    }

    fn err(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// `delimiter "X"`: one ASCII character that cannot be mistaken for the format's quoting or
    /// line ends.
    fn csv_delimiter(&mut self, p: Pair<Rule>) -> R<u8> {
        let s = inner(p).find(|c| c.as_rule() == Rule::string).ok_or(())?;
        let text = self.string(s)?;
        match text.node.as_bytes() {
            // Not a quote or a line end (the format's own), nor a character of the values' text:
            // letters, digits, a space (spaces around numbers are ignored), `.`, `-`, `+`.
            [b] if b.is_ascii()
                && !b.is_ascii_alphanumeric()
                && !matches!(b, b'"' | b'\n' | b'\r' | b' ' | b'.' | b'-' | b'+') =>
            {
                Ok(*b)
            }
            _ => {
                self.err(
                    Diagnostic::new(Code::BadLiteral, text.span, format!("{:?} cannot be a csv delimiter", text.node))
                        .label("the delimiter")
                        .help("a delimiter is one ASCII character that is not a letter, a digit, a space, `.`, `-`, `+`, `\"` or a line end, e.g. \",\", \"|\", \";\" or \"\\t\""),
                );
                Err(())
            }
        }
    }

    fn item(&mut self, p: Pair<Rule>) -> R<Item> {
        Ok(match p.as_rule() {
            Rule::stream_decl => Item::Stream(self.source_decl(p)?),
            Rule::table_decl => Item::Table(self.source_decl(p)?),
            Rule::query_decl => Item::Query(self.query(p)?),
            Rule::aggregate_decl => Item::Aggregate(self.aggregate_decl(p)?),
            Rule::function_decl => Item::Function(self.function_decl(p)?),
            r => return self.unexpected(&p, r),
        })
    }

    fn unexpected<T>(&mut self, p: &Pair<Rule>, r: Rule) -> R<T> {
        // The grammar and this builder disagree: report it as a diagnostic, never panic.
        self.err(Diagnostic::new(Code::Syntax, self.sp(p), format!("internal: unexpected {r:?} in the syntax tree")));
        Err(())
    }

    fn ident(&mut self, p: Pair<Rule>) -> Ident {
        let sp = self.sp(&p);
        let raw = p.as_str();
        let name = raw.strip_prefix('`').and_then(|s| s.strip_suffix('`')).unwrap_or(raw);
        Node::new(sp, name.to_string())
    }

    fn string(&mut self, p: Pair<Rule>) -> R<Node<String>> {
        let sp = self.sp(&p);
        let raw = p.into_inner().next().map(|i| i.as_str()).unwrap_or("");
        let mut out = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some('0') => out.push('\0'),
                Some('"') => out.push('"'),
                Some('\\') => out.push('\\'),
                Some('u') => {
                    let rest: String = chars.clone().collect();
                    let parsed = rest
                        .strip_prefix('{')
                        .and_then(|r| r.split_once('}'))
                        .and_then(|(hex, _)| u32::from_str_radix(hex, 16).ok().map(|v| (hex.len(), v)))
                        .and_then(|(n, v)| char::from_u32(v).map(|c| (n, c)));
                    match parsed {
                        Some((n, c)) => {
                            out.push(c);
                            for _ in 0..n + 2 {
                                chars.next();
                            }
                        }
                        None => {
                            self.err(
                                Diagnostic::new(Code::BadLiteral, sp, "invalid unicode escape")
                                    .label("in this string")
                                    .help("write a code point as `\\u{1F600}`"),
                            );
                            return Err(());
                        }
                    }
                }
                other => {
                    let e = other.map(|c| c.to_string()).unwrap_or_default();
                    self.err(
                        Diagnostic::new(Code::BadLiteral, sp, format!("unknown escape `\\{e}`"))
                            .label("in this string")
                            .help("escapes are \\n \\t \\r \\0 \\\" \\\\ and \\u{…}"),
                    );
                    return Err(());
                }
            }
        }
        Ok(Node::new(sp, out))
    }

    fn duration(&mut self, p: Pair<Rule>) -> R<Node<Duration>> {
        let sp = self.sp(&p);
        let s = p.as_str();
        let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (n, unit) = s.split_at(digits_end);
        let mult: i64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => 0,
        };
        match n.parse::<i64>().ok().and_then(|n| n.checked_mul(mult)) {
            Some(ms) if mult > 0 => Ok(Node::new(sp, Duration(ms))),
            _ => {
                self.err(Diagnostic::new(Code::BadLiteral, sp, "duration out of range").label("this duration"));
                Err(())
            }
        }
    }

    fn source_decl(&mut self, p: Pair<Rule>) -> R<SourceDecl> {
        let sp = self.sp(&p);
        let mut name = None;
        let mut topic = None;
        let mut items = Vec::new();
        for c in inner(p) {
            match c.as_rule() {
                Rule::ident => name = Some(self.ident(c)),
                Rule::string => topic = Some(self.string(c)?),
                Rule::decl_block => {
                    for d in c.into_inner() {
                        let dsp = self.sp(&d);
                        let item = self.decl_item(d)?;
                        items.push(Node::new(dsp, item));
                    }
                }
                r => return self.unexpected(&c, r),
            }
        }
        let name = name.ok_or(())?;
        Ok(SourceDecl { span: sp, name, topic, items })
    }

    fn decl_item(&mut self, p: Pair<Rule>) -> R<DeclItem> {
        let rule = p.as_rule();
        let mut parts: Vec<Pair<Rule>> = inner(p.clone()).collect();
        Ok(match rule {
            Rule::key_decl => {
                let format = match parts.last() {
                    Some(f) if f.as_rule() == Rule::key_format => {
                        let f = parts.pop().ok_or(())?;
                        let k = f.clone().into_inner().next().ok_or(())?;
                        let format = match k.as_rule() {
                            Rule::kw_avro => Format::Avro,
                            Rule::kw_protobuf => Format::Protobuf,
                            r => return self.unexpected(&k, r),
                        };
                        Some(Node::new(self.sp(&f), format))
                    }
                    _ => None,
                };
                let ty = if parts.len() > 1 { Some(self.type_expr(parts.remove(1), 0)?) } else { None };
                let name = self.ident(parts.remove(0));
                DeclItem::Key { name, ty, format }
            }
            Rule::value_decl => {
                let v = parts.remove(0);
                match v.as_rule() {
                    Rule::value_string => {
                        let name = inner(v).next().map(|i| self.ident(i));
                        DeclItem::ValueString { name }
                    }
                    Rule::value_csv => {
                        let mut delimiter = Format::CSV_DEFAULT_DELIMITER;
                        let mut fields = Vec::new();
                        for c in inner(v) {
                            match c.as_rule() {
                                Rule::csv_delimiter => delimiter = self.csv_delimiter(c)?,
                                _ => fields = self.field_decls(c, 0)?,
                            }
                        }
                        DeclItem::ValueCsv { delimiter, fields }
                    }
                    Rule::value_registry => {
                        let k = v.clone().into_inner().next().ok_or(())?;
                        let format = match k.as_rule() {
                            Rule::kw_avro => Format::Avro,
                            Rule::kw_protobuf => Format::Protobuf,
                            r => return self.unexpected(&k, r),
                        };
                        match inner(v).find(|c| c.as_rule() == Rule::record_type) {
                            Some(rec) => DeclItem::ValueRegistry {
                                format,
                                fields: self.field_decls(rec, 0)?,
                                from_registry: false,
                            },
                            None => DeclItem::ValueRegistry { format, fields: Vec::new(), from_registry: true },
                        }
                    }
                    Rule::value_json => {
                        let explicit_format = v.clone().into_inner().any(|c| c.as_rule() == Rule::kw_json);
                        let rec = inner(v).next().ok_or(())?;
                        DeclItem::ValueJson { explicit_format, fields: self.field_decls(rec, 0)? }
                    }
                    r => return self.unexpected(&v, r),
                }
            }
            Rule::time_decl => DeclItem::Time(self.ident(parts.remove(0))),
            Rule::tenant_decl => {
                let c = parts.remove(0);
                if c.as_rule() == Rule::string {
                    DeclItem::TenantHeader(self.string(c)?)
                } else {
                    DeclItem::TenantField(self.ident(c))
                }
            }
            r => return self.unexpected(&p, r),
        })
    }

    fn field_decls(&mut self, p: Pair<Rule>, depth: usize) -> R<Vec<FieldDecl>> {
        let mut out = Vec::new();
        for f in p.into_inner() {
            let mut it = f.into_inner();
            let (Some(n), Some(t)) = (it.next(), it.next()) else { return Err(()) };
            let name = self.ident(n);
            let ty = self.type_expr(t, depth + 1)?;
            out.push(FieldDecl { name, ty });
        }
        Ok(out)
    }

    fn type_expr(&mut self, p: Pair<Rule>, depth: usize) -> R<Node<TypeExpr>> {
        let sp = self.sp(&p);
        self.check_depth(sp, depth)?;
        let mut it = p.into_inner();
        let base = it.next().ok_or(())?;
        let bsp = self.sp(&base);
        let ty = match base.as_rule() {
            Rule::prim_type => TypeExpr::Prim(match base.as_str() {
                "string" => PrimType::String,
                "int" => PrimType::Int,
                "float" => PrimType::Float,
                "bool" => PrimType::Bool,
                "timestamp" => PrimType::Timestamp,
                _ => PrimType::Duration,
            }),
            Rule::list_type => {
                let t = inner(base).next().ok_or(())?;
                TypeExpr::List(Box::new(self.type_expr(t, depth + 1)?))
            }
            Rule::map_type => {
                let mut parts = inner(base);
                let k = self.type_expr(parts.next().ok_or(())?, depth + 1)?;
                let v = self.type_expr(parts.next().ok_or(())?, depth + 1)?;
                TypeExpr::Map(Box::new(k), Box::new(v))
            }
            Rule::record_type => TypeExpr::Record(self.field_decls(base, depth + 1)?),
            r => return self.unexpected(&base, r),
        };
        let node = Node::new(bsp, ty);
        Ok(if it.next().is_some() { Node::new(sp, TypeExpr::Nullable(Box::new(node))) } else { node })
    }

    fn check_depth(&mut self, sp: Span, depth: usize) -> R<()> {
        if depth > MAX_DEPTH {
            self.err(
                Diagnostic::new(Code::TooDeep, sp, format!("nested more than {MAX_DEPTH} levels deep"))
                    .label("the limit is reached here")
                    .help("split the expression: name intermediate results with `select` or `let`; for long `or` chains of comparisons use `x in [..]`"),
            );
            return Err(());
        }
        Ok(())
    }

    fn query(&mut self, p: Pair<Rule>) -> R<QueryDecl> {
        let sp = self.sp(&p);
        let mut it = inner(p);
        let name = self.ident(it.next().ok_or(())?);
        let mut clauses = Vec::new();
        let mut failed = false;
        for c in it {
            let csp = self.sp(&c);
            match self.clause(c) {
                Ok(cl) => clauses.push(Node::new(csp, cl)),
                Err(()) => failed = true,
            }
        }
        if failed {
            return Err(());
        }
        Ok(QueryDecl { span: sp, name, clauses })
    }

    fn clause(&mut self, p: Pair<Rule>) -> R<Clause> {
        let rule = p.as_rule();
        let mut parts: Vec<Pair<Rule>> = inner(p.clone()).collect();
        Ok(match rule {
            Rule::from_clause => {
                let mut inputs = Vec::new();
                let mut alias = None;
                for p in parts {
                    match p.as_rule() {
                        Rule::alias => alias = Some(self.ident(inner(p).last().ok_or(())?)),
                        _ => inputs.push(self.ident(p)),
                    }
                }
                Clause::From { inputs, alias }
            }
            Rule::where_clause => Clause::Where(self.expr(parts.remove(0), 0)?),
            Rule::select_clause => {
                let mut items = Vec::new();
                for it in parts {
                    let isp = self.sp(&it);
                    let mut c: Vec<Pair<Rule>> = it.into_inner().collect();
                    let item = match c.len() {
                        2 => {
                            let e = self.expr(c.remove(1), 0)?;
                            SelectItem::Named(self.ident(c.remove(0)), e)
                        }
                        // `expr as name` (as SQL and ksqlDB write it): `name = expr`.
                        3 => {
                            let e = self.expr(c.remove(0), 0)?;
                            SelectItem::Named(self.ident(c.remove(1)), e)
                        }
                        _ => {
                            let first = c.remove(0);
                            if first.as_rule() == Rule::star {
                                SelectItem::Star
                            } else {
                                SelectItem::Path(first.into_inner().map(|i| self.ident(i)).collect())
                            }
                        }
                    };
                    items.push(Node::new(isp, item));
                }
                Clause::Select(items)
            }
            Rule::key_by_clause => Clause::KeyBy(self.expr(parts.remove(0), 0)?),
            Rule::group_by_clause => {
                let mut items = Vec::new();
                for g in parts {
                    let mut c = inner(g);
                    let expr = self.expr(c.next().ok_or(())?, 0)?;
                    let alias = c.next().map(|a| self.ident(a));
                    items.push(GroupItem { expr, alias });
                }
                Clause::GroupBy(items)
            }
            Rule::window_clause => {
                let mut it = parts.into_iter();
                let k = it.next().ok_or(())?;
                let krule = k.as_rule();
                let ds: Vec<Pair<Rule>> = inner(k).collect();
                let mut durs = Vec::new();
                for d in ds {
                    durs.push(self.duration(d)?.node);
                }
                let kind = match (krule, durs.as_slice()) {
                    (Rule::tumbling, [s]) => WindowKind::Tumbling { size: *s },
                    (Rule::hopping, [s, a]) => WindowKind::Hopping { size: *s, advance: *a },
                    (Rule::sliding, [s]) => WindowKind::Sliding { size: *s },
                    (Rule::session, [g]) => WindowKind::Session { gap: *g },
                    _ => return self.unexpected(&p, krule),
                };
                let (mut grace, mut tz) = (None, None);
                for part in it {
                    match part.as_rule() {
                        Rule::zone => tz = Some(self.string(inner(part).next().ok_or(())?)?),
                        _ => grace = Some(self.duration(inner(part).next().ok_or(())?)?),
                    }
                }
                Clause::Window { kind, grace, tz }
            }
            Rule::aggregate_clause => {
                let mut items = Vec::new();
                for a in parts {
                    let asp = self.sp(&a);
                    let mut c = a.into_inner();
                    let name = self.ident(c.next().ok_or(())?);
                    let func = self.ident(c.next().ok_or(())?);
                    let mut args = Vec::new();
                    let mut star = false;
                    for arg in c {
                        if arg.as_rule() == Rule::star {
                            star = true;
                        } else {
                            args.push(self.expr(arg, 0)?);
                        }
                    }
                    items.push(AggItem { span: asp, name, func, star, args });
                }
                Clause::Aggregate(items)
            }
            Rule::emit_clause => {
                let final_ = p.clone().into_inner().any(|c| c.as_rule() == Rule::kw_final);
                let idle = match p.clone().into_inner().find(|c| c.as_rule() == Rule::idle_close) {
                    Some(i) => Some(self.duration(inner(i).next().ok_or(())?)?),
                    None => None,
                };
                Clause::Emit(if final_ { EmitMode::Final } else { EmitMode::Changes }, idle)
            }
            Rule::join_clause => self.join_clause(parts)?,
            Rule::to_clause => self.sink_clause(parts)?,
            r => return self.unexpected(&p, r),
        })
    }

    /// `[left | outer] join OTHER [as A] [within D | within (B, A)] [grace G] on EXPR`.
    fn join_clause(&mut self, parts: Vec<Pair<Rule>>) -> R<Clause> {
        let mut left = false;
        let mut outer = false;
        let mut other = None;
        let mut alias = None;
        let mut within = None;
        let mut after = None;
        let mut grace = None;
        let mut on = None;
        for c in parts {
            match c.as_rule() {
                Rule::left => left = true,
                Rule::outer => outer = true,
                Rule::ident => other = Some(self.ident(c)),
                Rule::alias => alias = Some(self.ident(inner(c).last().ok_or(())?)),
                Rule::within => {
                    let mut w = inner(c);
                    let first = w.next().ok_or(())?;
                    if first.as_rule() == Rule::within_pair {
                        let mut pair = inner(first);
                        within = Some(self.duration(pair.next().ok_or(())?)?);
                        after = Some(self.duration(pair.next().ok_or(())?)?);
                    } else {
                        within = Some(self.duration(first)?);
                    }
                    if let Some(g) = w.next() {
                        grace = Some(self.duration(inner(g).next().ok_or(())?)?);
                    }
                }
                Rule::expr => on = Some(self.expr(c, 0)?),
                r => return self.unexpected(&c, r),
            }
        }
        Ok(Clause::Join { left, outer, other: other.ok_or(())?, alias, within, after, grace, on: on.ok_or(())? })
    }

    /// `to "topic" [FORMAT] [key FORMAT] [windowed] [when EXPR]`.
    fn sink_clause(&mut self, mut parts: Vec<Pair<Rule>>) -> R<Clause> {
        let topic = self.string(parts.remove(0))?;
        let when = match parts.last() {
            Some(w) if w.as_rule() == Rule::to_when => {
                let w = parts.pop().ok_or(())?;
                Some(self.expr(inner(w).next().ok_or(())?, 1)?)
            }
            _ => None,
        };
        let windowed = match parts.last() {
            Some(w) if w.as_rule() == Rule::windowed_key => parts.pop().map(|w| self.sp(&w)),
            _ => None,
        };
        let key_format = match parts.last() {
            Some(k) if k.as_rule() == Rule::sink_key_format => {
                let k = parts.pop().ok_or(())?;
                let sp = self.sp(&k);
                let protobuf = k.into_inner().flat_map(|f| f.into_inner()).any(|f| f.as_rule() == Rule::kw_protobuf);
                Some(Node::new(sp, if protobuf { Format::Protobuf } else { Format::Avro }))
            }
            _ => None,
        };
        let format = match parts.pop() {
            Some(f) => {
                let fsp = self.sp(&f);
                let mut format = Format::Json;
                for k in f.into_inner() {
                    match k.as_rule() {
                        Rule::kw_string => format = Format::String,
                        Rule::kw_csv => format = Format::Csv(Format::CSV_DEFAULT_DELIMITER),
                        Rule::kw_avro => format = Format::Avro,
                        Rule::kw_protobuf => format = Format::Protobuf,
                        Rule::csv_delimiter => format = Format::Csv(self.csv_delimiter(k)?),
                        Rule::kw_json => format = Format::Json,
                        r => return self.unexpected(&k, r),
                    }
                }
                Some(Node::new(fsp, format))
            }
            None => None,
        };
        Ok(Clause::To { topic, format, key_format, windowed, when })
    }

    fn params(&mut self, p: Pair<Rule>) -> R<Vec<Param>> {
        let mut out = Vec::new();
        for param in p.into_inner() {
            let mut it = param.into_inner();
            let name = self.ident(it.next().ok_or(())?);
            let ty = self.type_expr(it.next().ok_or(())?, 0)?;
            out.push(Param { name, ty });
        }
        Ok(out)
    }

    fn stmts(&mut self, p: Pair<Rule>) -> R<Vec<Node<Stmt>>> {
        let mut out = Vec::new();
        for s in inner(p) {
            let ssp = self.sp(&s);
            let one = s.into_inner().next().ok_or(())?;
            let is_let = one.as_rule() == Rule::let_stmt;
            let mut it = inner(one);
            let name = self.ident(it.next().ok_or(())?);
            let e = self.expr(it.next().ok_or(())?, 0)?;
            out.push(Node::new(ssp, if is_let { Stmt::Let(name, e) } else { Stmt::Assign(name, e) }));
        }
        Ok(out)
    }

    fn aggregate_decl(&mut self, p: Pair<Rule>) -> R<AggregateDecl> {
        let sp = self.sp(&p);
        let mut it = inner(p);
        let name = self.ident(it.next().ok_or(())?);
        let params = self.params(it.next().ok_or(())?)?;
        let result_type = self.type_expr(it.next().ok_or(())?, 0)?;
        let (mut init, mut update, mut merge, mut undo, mut result) = (Vec::new(), Vec::new(), None, None, None);
        for c in it {
            match c.as_rule() {
                Rule::agg_init => {
                    for f in inner(c).filter(|f| f.as_rule() == Rule::init_field) {
                        let mut it = f.into_inner();
                        let name = self.ident(it.next().ok_or(())?);
                        let mut next = it.next().ok_or(())?;
                        let mut ty = None;
                        if next.as_rule() == Rule::type_expr {
                            ty = Some(self.type_expr(next, 1)?);
                            next = it.next().ok_or(())?;
                        }
                        let value = self.expr(next, 1)?;
                        init.push(InitField { name, ty, value });
                    }
                }
                Rule::agg_update => update = self.stmts(c)?,
                Rule::agg_merge => merge = Some(self.stmts(c)?),
                Rule::agg_undo => undo = Some(self.stmts(c)?),
                Rule::agg_result => result = Some(self.expr(inner(c).next().ok_or(())?, 0)?),
                r => return self.unexpected(&c, r),
            }
        }
        Ok(AggregateDecl { span: sp, name, params, result_type, init, update, merge, undo, result: result.ok_or(())? })
    }

    fn function_decl(&mut self, p: Pair<Rule>) -> R<FunctionDecl> {
        let sp = self.sp(&p);
        let mut it = inner(p);
        let name = self.ident(it.next().ok_or(())?);
        let params = self.params(it.next().ok_or(())?)?;
        let result_type = self.type_expr(it.next().ok_or(())?, 0)?;
        let body = self.expr(it.next().ok_or(())?, 0)?;
        Ok(FunctionDecl { span: sp, name, params, result_type, body })
    }

    fn statement(&mut self, p: Pair<Rule>) -> R<Statement> {
        let sp = self.sp(&p);
        let mut tenant = None;
        let mut body = None;
        for c in inner(p) {
            match c.as_rule() {
                Rule::string => tenant = Some(self.string(c)?),
                Rule::EOI => {}
                Rule::update_stmt => {
                    let mut it = inner(c);
                    let table = self.ident(it.next().ok_or(())?);
                    let key = self.expr(it.next().ok_or(())?, 0)?;
                    let value = self.expr(it.next().ok_or(())?, 0)?;
                    body = Some(StatementBody::Update { table, key, value });
                }
                Rule::delete_stmt => {
                    let mut it = inner(c);
                    let table = self.ident(it.next().ok_or(())?);
                    let key = self.expr(it.next().ok_or(())?, 0)?;
                    body = Some(StatementBody::Delete { table, key });
                }
                Rule::purge_stmt => body = Some(StatementBody::Purge),
                Rule::query_decl => body = Some(StatementBody::NewQuery(self.query(c)?)),
                Rule::replace_stmt => {
                    let mut it = inner(c);
                    let query = self.query(it.next().ok_or(())?)?;
                    let mode = it.next().map(|m| {
                        let msp = self.sp(&m);
                        let fresh = m.into_inner().any(|k| k.as_rule() == Rule::kw_fresh);
                        Node::new(msp, if fresh { ReplaceMode::FreshState } else { ReplaceMode::Reprocess })
                    });
                    body = Some(StatementBody::Replace { query, mode });
                }
                Rule::drop_stmt => {
                    let name = self.ident(inner(c).next().ok_or(())?);
                    body = Some(StatementBody::Drop(name));
                }
                r => return self.unexpected(&c, r),
            }
        }
        Ok(Statement { span: sp, tenant, body: body.ok_or(())? })
    }

    fn record_fields(&mut self, p: Pair<Rule>, depth: usize) -> R<Vec<(Ident, Node<Expr>)>> {
        let mut out = Vec::new();
        for f in p.into_inner() {
            let mut it = f.into_inner();
            let name = self.ident(it.next().ok_or(())?);
            let e = self.expr(it.next().ok_or(())?, depth + 1)?;
            out.push((name, e));
        }
        Ok(out)
    }

    // ------------------------------------------------------------ expressions

    /// `map { k: v, … }` and its height. Out of the recursive expression builder so that its
    /// locals do not enlarge that function's frame.
    #[inline(never)]
    fn map_lit(&mut self, p: Pair<Rule>, sp: Span, depth: usize) -> R<(Node<Expr>, usize)> {
        let mut entries = Vec::new();
        let mut h = 0;
        for e in inner(p) {
            let mut kv = e.into_inner();
            let k = self.expr(kv.next().ok_or(())?, depth + 1)?;
            let v = self.expr(kv.next().ok_or(())?, depth + 1)?;
            h = h.max(height(&k)).max(height(&v));
            entries.push((k, v));
        }
        Ok((Node::new(sp, Expr::Map(entries)), h + 1))
    }

    /// `x => body` or `(a, b) => body`.
    fn lambda(&mut self, p: Pair<Rule>, depth: usize) -> R<Node<Expr>> {
        let sp = self.sp(&p);
        let mut it = p.into_inner();
        let params = it.next().ok_or(())?.into_inner().map(|i| self.ident(i)).collect();
        let body = self.expr(it.next().ok_or(())?, depth + 1)?;
        Ok(Node::new(sp, Expr::Lambda { params, body: Box::new(body) }))
    }

    /// Build an expression from the flat `expr` pair by precedence climbing.
    fn expr(&mut self, p: Pair<Rule>, depth: usize) -> R<Node<Expr>> {
        let sp = self.sp(&p);
        self.check_depth(sp, depth)?;
        let toks: Vec<Pair<Rule>> = p.into_inner().collect();
        let mut pos = 0;
        let (e, h) = self.climb(&toks, &mut pos, 0, depth)?;
        if h > MAX_DEPTH {
            self.check_depth(e.span, h)?;
        }
        Ok(e)
    }

    /// Returns the expression and its height; refuses heights above [`MAX_DEPTH`].
    fn climb(&mut self, toks: &[Pair<Rule>], pos: &mut usize, min_prec: u8, depth: usize) -> R<(Node<Expr>, usize)> {
        let Some(t) = toks.get(*pos) else { return Err(()) };
        let tsp = self.sp(t);
        self.check_depth(tsp, depth)?;
        let (mut lhs, mut h) = match t.as_rule() {
            Rule::op_not | Rule::op_neg => {
                let op = if t.as_rule() == Rule::op_not { UnOp::Not } else { UnOp::Neg };
                *pos += 1;
                let (e, h) = self.climb(toks, pos, if op == UnOp::Not { 4 } else { 7 }, depth + 1)?;
                (Node::new(tsp.to(e.span), Expr::Unary { op, expr: Box::new(e) }), h + 1)
            }
            _ => {
                *pos += 1;
                self.operand(t.clone(), depth)?
            }
        };
        while let Some(t) = toks.get(*pos) {
            let rule = t.as_rule();
            if matches!(rule, Rule::op_is_null | Rule::op_is_not_null) {
                if 4 < min_prec {
                    break;
                }
                *pos += 1;
                let sp = lhs.span.to(self.sp(t));
                lhs = Node::new(sp, Expr::IsNull { expr: Box::new(lhs), negated: rule == Rule::op_is_not_null });
                h += 1;
                continue;
            }
            if rule == Rule::op_index {
                // Binds tighter than any operator: `-xs[1]` is `-(xs[1])`. On a line of its
                // own, `[` would silently index the line before (in `select { a = xs` then
                // `[b] as c }`): refused.
                // (A token's span may end with the whitespace after it.)
                let prev = &toks[pos.saturating_sub(1)];
                let prev_end = prev.as_span().start() + prev.as_str().trim_end().len();
                let gap = t.get_input().get(prev_end..t.as_span().start()).unwrap_or("");
                if gap.contains('\n') {
                    self.err(
                        Diagnostic::new(Code::Syntax, self.sp(t), "`[` at the start of a line")
                            .label("this would index the line before")
                            .help("write an index on the line of what it indexes (`xs[1]`); a list that starts an item goes after a name or a `,`: `name = [..]`"),
                    );
                    return Err(());
                }
                *pos += 1;
                let isp = self.sp(t);
                let sp = lhs.span.to(isp);
                let Some(inner) = t.clone().into_inner().next() else { return Err(()) };
                let toks: Vec<Pair<Rule>> = inner.into_inner().collect();
                let mut ipos = 0;
                let (index, ih) = self.climb(&toks, &mut ipos, 0, depth + 1)?;
                let func = Node::new(isp, "element_at".to_string());
                lhs = Node::new(sp, Expr::Call { func, args: vec![lhs, index] });
                h = h.max(ih) + 1;
                self.check_depth(sp, h)?;
                continue;
            }
            if rule == Rule::in_tail {
                // `x in (a, b)`: `x in [a, b]`, at comparison precedence.
                if 4 < min_prec {
                    break;
                }
                *pos += 1;
                let (e, ih) = self.in_list(lhs, t.clone(), depth)?;
                lhs = e;
                h = h.max(ih) + 1;
                self.check_depth(lhs.span, h)?;
                continue;
            }
            if rule == Rule::op_between {
                // A comparison: `a + 1 between 2 and 3` is `(a + 1) between 2 and 3`.
                if 4 < min_prec {
                    break;
                }
                *pos += 1;
                let (e, bh) = self.between(lhs, t.clone(), depth)?;
                lhs = e;
                h = h.max(bh) + 1;
                self.check_depth(lhs.span, h)?;
                continue;
            }
            let Some((op, prec)) = infix(rule) else { break };
            if prec < min_prec {
                break;
            }
            *pos += 1;
            let (rhs, rh) = self.climb(toks, pos, prec + 1, depth + 1)?;
            if matches!(op, BinOp::And | BinOp::Or) || prec >= 5 {
                // A run of operators of one precedence (`a == 1 or a == 2 or …`, `price + 1 -
                // fee + …`) is a list, not nesting. `and` and `or` each have a precedence of
                // their own; a long run of one is built as a balanced tree, so its height grows
                // with the logarithm of its length (the result and the order operands are
                // evaluated in are those of the left-nested chain: both are associative, and
                // short-circuit left to right either way). A long arithmetic run is kept flat
                // (`Expr::Chain`), folded left to right as written: `+` on floats is not
                // associative and cannot be rebalanced.
                let mut rest = vec![(op, (rhs, rh))];
                while let Some((o, _)) = toks.get(*pos).and_then(|t| infix(t.as_rule())).filter(|(_, p)| *p == prec) {
                    *pos += 1;
                    rest.push((o, self.climb(toks, pos, prec + 1, depth + 1)?));
                }
                (lhs, h) = if matches!(op, BinOp::And | BinOp::Or) {
                    chain(op, std::iter::once((lhs, h)).chain(rest.into_iter().map(|(_, m)| m)).collect())
                } else {
                    arithmetic_chain((lhs, h), rest)
                };
            } else {
                let sp = lhs.span.to(rhs.span);
                h = h.max(rh) + 1;
                lhs = Node::new(sp, Expr::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs) });
            }
            if h > MAX_DEPTH {
                self.check_depth(lhs.span, h)?;
            }
        }
        Ok((lhs, h))
    }

    /// `x [not] in (a, b, …)` as `x [not] in [a, b, …]`, and the list's height. (A function of
    /// its own, as `between`, so that `climb`'s frame, once per nesting level, stays small.)
    #[inline(never)]
    fn in_list(&mut self, x: Node<Expr>, p: Pair<Rule>, depth: usize) -> R<(Node<Expr>, usize)> {
        let mut parts = p.into_inner();
        let op = match parts.next().map(|o| o.as_rule()) {
            Some(Rule::op_not_in) => BinOp::NotIn,
            _ => BinOp::In,
        };
        let list = parts.next().ok_or(())?;
        let lsp = self.sp(&list);
        let mut items = Vec::new();
        let mut h = 0;
        for a in list.into_inner() {
            let e = self.expr(a, depth + 1)?;
            h = h.max(height(&e));
            items.push(e);
        }
        let sp = x.span.to(lsp);
        let rhs = Node::new(lsp, Expr::List(items));
        Ok((Node::new(sp, Expr::Binary { op, lhs: Box::new(x), rhs: Box::new(rhs) }), h + 1))
    }

    /// `x [not] between lo and hi`, and the taller of its bounds' heights.
    fn between(&mut self, x: Node<Expr>, p: Pair<Rule>, depth: usize) -> R<(Node<Expr>, usize)> {
        let sp = x.span.to(self.sp(&p));
        let mut negated = false;
        let mut bounds = Vec::new();
        let mut h = 0;
        for part in p.into_inner() {
            match part.as_rule() {
                Rule::kw_not => negated = true,
                Rule::between_bound => {
                    let toks: Vec<Pair<Rule>> = part.into_inner().collect();
                    let mut pos = 0;
                    let (e, eh) = self.climb(&toks, &mut pos, 0, depth + 1)?;
                    h = h.max(eh);
                    bounds.push(e);
                }
                _ => {}
            }
        }
        let [lo, hi] = <[Node<Expr>; 2]>::try_from(bounds).map_err(|_| ())?;
        let e = Expr::Between { expr: Box::new(x), lo: Box::new(lo), hi: Box::new(hi), negated };
        Ok((Node::new(sp, e), h))
    }

    fn operand(&mut self, p: Pair<Rule>, depth: usize) -> R<(Node<Expr>, usize)> {
        let sp = self.sp(&p);
        let lit = |l| Ok((Node::new(sp, Expr::Lit(l)), 1));
        match p.as_rule() {
            Rule::int => match p.as_str().parse::<i64>() {
                Ok(v) => lit(Literal::Int(v)),
                Err(_) => {
                    self.err(
                        Diagnostic::new(Code::BadLiteral, sp, "integer literal out of range")
                            .label("does not fit in a 64-bit int")
                            .help("int is a signed 64-bit integer; write a float (`1.0e20`) for larger values"),
                    );
                    Err(())
                }
            },
            Rule::float => match p.as_str().parse::<f64>() {
                Ok(v) if v.is_finite() => lit(Literal::Float(v)),
                _ => {
                    self.err(
                        Diagnostic::new(Code::BadLiteral, sp, "float literal out of range")
                            .label("not a finite number"),
                    );
                    Err(())
                }
            },
            Rule::duration => {
                let d = self.duration(p)?;
                lit(Literal::Duration(d.node))
            }
            Rule::string => {
                let s = self.string(p)?;
                lit(Literal::String(s.node))
            }
            Rule::bool_lit => lit(Literal::Bool(p.into_inner().any(|k| k.as_rule() == Rule::kw_true))),
            Rule::null_lit => lit(Literal::Null),
            Rule::paren => {
                let e = inner(p).next().ok_or(())?;
                let mut e = self.expr(e, depth + 1)?;
                e.span = sp;
                let h = height(&e);
                Ok((e, h))
            }
            Rule::path => {
                let parts: Vec<Ident> = p.into_inner().map(|i| self.ident(i)).collect();
                Ok((Node::new(sp, Expr::Path(parts)), 1))
            }
            Rule::call => {
                let mut it = p.into_inner();
                let func = self.ident(it.next().ok_or(())?);
                let mut args = Vec::new();
                let mut h = 0;
                for a in it {
                    let e = match a.as_rule() {
                        Rule::lambda => self.lambda(a, depth + 1)?,
                        _ => self.expr(a, depth + 1)?,
                    };
                    h = h.max(height(&e));
                    args.push(e);
                }
                Ok((Node::new(sp, Expr::Call { func, args }), h + 1))
            }
            Rule::if_expr => {
                let mut it = inner(p);
                let mut next = |b: &mut Self| -> R<Node<Expr>> { b.expr(it.next().ok_or(())?, depth + 1) };
                let cond = next(self)?;
                let then = next(self)?;
                let otherwise = next(self)?;
                let h = height(&cond).max(height(&then)).max(height(&otherwise)) + 1;
                let e = Expr::If { cond: Box::new(cond), then: Box::new(then), otherwise: Box::new(otherwise) };
                Ok((Node::new(sp, e), h))
            }
            Rule::list_lit => {
                let mut items = Vec::new();
                let mut h = 0;
                for a in p.into_inner() {
                    let e = self.expr(a, depth + 1)?;
                    h = h.max(height(&e));
                    items.push(e);
                }
                Ok((Node::new(sp, Expr::List(items)), h + 1))
            }
            Rule::map_lit => self.map_lit(p, sp, depth),
            Rule::record_lit => {
                let fields = self.record_fields(p, depth)?;
                let h = fields.iter().map(|(_, e)| height(e)).max().unwrap_or(0) + 1;
                Ok((Node::new(sp, Expr::Record(fields)), h))
            }
            r => self.unexpected(&p, r),
        }
    }
}

fn infix(rule: Rule) -> Option<(BinOp, u8)> {
    Some(match rule {
        Rule::op_or => (BinOp::Or, 1),
        Rule::op_and => (BinOp::And, 2),
        Rule::op_eq => (BinOp::Eq, 4),
        Rule::op_ne => (BinOp::Ne, 4),
        Rule::op_lt => (BinOp::Lt, 4),
        Rule::op_le => (BinOp::Le, 4),
        Rule::op_gt => (BinOp::Gt, 4),
        Rule::op_ge => (BinOp::Ge, 4),
        Rule::op_in => (BinOp::In, 4),
        Rule::op_not_in => (BinOp::NotIn, 4),
        Rule::op_add => (BinOp::Add, 5),
        Rule::op_sub => (BinOp::Sub, 5),
        Rule::op_mul => (BinOp::Mul, 6),
        Rule::op_div => (BinOp::Div, 6),
        Rule::op_rem => (BinOp::Rem, 6),
        _ => return None,
    })
}

/// An expression with its height.
type Measured = (Node<Expr>, usize);

/// Chains of up to this many operands of one logical operator are left-nested, as written;
/// longer ones are balanced.
const LEFT_NESTED_CHAIN: usize = 32;

/// `o1 op o2 op … op on` as a tree with its height: left-nested up to [`LEFT_NESTED_CHAIN`]
/// operands, balanced beyond (the left half one larger, so that in-order is the written order).
fn chain(op: BinOp, operands: Vec<Measured>) -> Measured {
    let join = |(l, lh): Measured, (r, rh): Measured| {
        let sp = l.span.to(r.span);
        (Node::new(sp, Expr::Binary { op, lhs: Box::new(l), rhs: Box::new(r) }), lh.max(rh) + 1)
    };
    if operands.len() <= LEFT_NESTED_CHAIN {
        let mut it = operands.into_iter();
        let first = it.next().expect("a chain has operands");
        return it.fold(first, join);
    }
    fn balanced(
        ops: &mut std::vec::IntoIter<Measured>,
        n: usize,
        join: &dyn Fn(Measured, Measured) -> Measured,
    ) -> Measured {
        if n == 1 {
            return ops.next().expect("n operands left");
        }
        let left = balanced(ops, n - n / 2, join);
        let right = balanced(ops, n / 2, join);
        join(left, right)
    }
    let n = operands.len();
    balanced(&mut operands.into_iter(), n, &join)
}

/// `first op1 e1 op2 e2 …`: left-nested binary nodes up to [`LEFT_NESTED_CHAIN`] operands, as
/// written; one flat [`Expr::Chain`] beyond, whose height is that of its tallest operand plus one.
fn arithmetic_chain(first: Measured, rest: Vec<(BinOp, Measured)>) -> Measured {
    if rest.len() < LEFT_NESTED_CHAIN {
        return rest.into_iter().fold(first, |(l, lh), (op, (r, rh))| {
            let sp = l.span.to(r.span);
            (Node::new(sp, Expr::Binary { op, lhs: Box::new(l), rhs: Box::new(r) }), lh.max(rh) + 1)
        });
    }
    let (first, mut h) = first;
    let mut sp = first.span;
    let rest = rest
        .into_iter()
        .map(|(op, (e, eh))| {
            h = h.max(eh);
            sp = sp.to(e.span);
            (op, e)
        })
        .collect();
    (Node::new(sp, Expr::Chain { first: Box::new(first), rest }), h + 1)
}

/// The height of an expression tree (bounded by [`MAX_DEPTH`] for every built tree). It is
/// computed iteratively on the spine so that it never recurses deeper than the tree allows.
pub fn height(e: &Node<Expr>) -> usize {
    match &e.node {
        Expr::Lit(_) | Expr::Path(_) => 1,
        Expr::Call { args, .. } | Expr::List(args) => 1 + args.iter().map(height).max().unwrap_or(0),
        Expr::Unary { expr, .. } | Expr::IsNull { expr, .. } => 1 + height(expr),
        Expr::Lambda { body, .. } => 1 + height(body),
        Expr::Between { expr, lo, hi, .. } => 1 + height(expr).max(height(lo)).max(height(hi)),
        Expr::Binary { lhs, rhs, .. } => 1 + height(lhs).max(height(rhs)),
        Expr::Chain { first, rest } => 1 + rest.iter().map(|(_, e)| height(e)).fold(height(first), usize::max),
        Expr::If { cond, then, otherwise } => 1 + height(cond).max(height(then)).max(height(otherwise)),
        Expr::Record(fs) => 1 + fs.iter().map(|(_, e)| height(e)).max().unwrap_or(0),
        Expr::Map(es) => 1 + es.iter().map(|(k, v)| height(k).max(height(v))).max().unwrap_or(0),
    }
}
