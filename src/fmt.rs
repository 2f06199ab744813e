//! `streamc fmt`: one canonical layout for program files, as rustfmt gives Rust code.
//!
//! The printer walks pest's parse tree (not the AST, which drops what layout needs: which
//! keywords were written, parentheses, backquotes), so a formatted file holds the same tokens
//! in the same order: only whitespace, separators (`,` `;` or a line break between items) and
//! comment placement change. The layout:
//!
//! - top-level items separated by one blank line; within blocks, one blank line kept where the
//!   source had one or more (none after `{` or before `}`);
//! - a source's or query's clauses one per line, indented by two spaces; a source block's
//!   keywords padded to one column, as are a user-defined aggregate's `init`/`update`/`merge`/
//!   `result`;
//! - `select { … }`, `aggregate { … }`, record types and a user-defined aggregate's blocks on
//!   one line when they fit in [`WIDTH`] columns and hold no comment, else one item per line
//!   (runs of plain field names packed on a line) with the `=` of named items aligned;
//! - an expression on one line; one that does not fit is broken before its top-level `and` and
//!   `or` (or after a function's `=`);
//! - comments kept where they were: a comment on its own line stays on its own line before the
//!   token it preceded (a blank line before it kept); a comment after code stays at the end of
//!   that code's line, aligned with the other end-of-line comments of its block.
//!
//! Formatting is idempotent; `tests/fmt.rs` checks that, and that the token sequence and the
//! comments are unchanged, on every program in the repository.

use pest::iterators::Pair;
use pest::Parser as _;

use crate::diag::Diagnostics;
use crate::syntax::{is_kw_rule, Rule, StreamParser};

/// The column a formatted line should not pass.
pub const WIDTH: usize = 100;
/// Indentation per block level.
const INDENT: usize = 2;
/// Extra indentation of a broken expression's continuation lines.
const CONTINUATION: usize = 4;
/// The column source-block keywords (`key`, `value`, `time`, `tenant`) and aggregate-definition
/// keywords (`init`, `update`, `merge`, `result`) are padded to.
const KEYWORD_COLUMN: usize = 6;

/// The program in canonical layout, or the syntax errors that prevent formatting it.
pub fn format(source: &str) -> Result<String, Diagnostics> {
    let (_, diags) = crate::syntax::parse(source);
    if !diags.is_empty() {
        return Err(diags);
    }
    let root = match StreamParser::parse(Rule::program, source) {
        Ok(mut pairs) => pairs.next(),
        // The per-item parse above accepted it; the whole must parse too. Report it if not.
        Err(e) => return Err(vec![crate::syntax::syntax_error(&e, source)]),
    };
    let mut p = Printer::new(source, comments(source), WIDTH);
    let mut first = true;
    for item in root.into_iter().flat_map(|r| r.into_inner()) {
        if item.as_rule() == Rule::EOI {
            continue;
        }
        p.force_blank = !first;
        first = false;
        p.item(item);
        p.newline();
    }
    p.flush_comments(usize::MAX);
    p.newline();
    Ok(p.render())
}

/// A `#` comment in the source: its byte range, and whether only whitespace precedes it on its
/// line.
#[derive(Clone, Copy)]
struct Comment {
    start: usize,
    end: usize,
    own_line: bool,
}

fn comments(source: &str) -> Vec<Comment> {
    let mut out = Vec::new();
    let mut pos = 0;
    for line in source.split_inclusive('\n') {
        if let Some(c) = crate::syntax::comment_start(line) {
            let text = line[c..].trim_end();
            out.push(Comment { start: pos + c, end: pos + c + text.len(), own_line: line[..c].trim().is_empty() });
        }
        pos += line.len();
    }
    out
}

/// The columns a text takes on a terminal.
fn width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// Whether the text between two tokens holds an empty line.
fn has_blank_line(gap: &str) -> bool {
    let parts: Vec<&str> = gap.split('\n').collect();
    parts.len() > 2 && parts[1..parts.len() - 1].iter().any(|l| l.trim().is_empty())
}

/// An output line: code, an end-of-line comment, both, or neither (a blank line).
struct Line {
    indent: usize,
    code: String,
    comment: Option<String>,
    /// Spaces after the code that align its comment with its neighbours'.
    pad: usize,
}

impl Line {
    fn is_blank(&self) -> bool {
        self.code.is_empty() && self.comment.is_none()
    }
}

struct Printer<'a> {
    src: &'a str,
    comments: Vec<Comment>,
    next_comment: usize,
    lines: Vec<Line>,
    /// The line being built, its indentation and the comment to end it with.
    cur: String,
    cur_indent: usize,
    cur_comment: Option<String>,
    indent: usize,
    /// The indentation of an expression's continuation lines while one is broken.
    cont: Option<usize>,
    /// Put a space before the next token (unless it starts a line).
    space: bool,
    /// Where the last printed token or comment ended in the source.
    last_end: usize,
    /// The next line is the first of a block: no blank line before it.
    block_start: bool,
    /// The next line starts a top-level item: one blank line before it.
    force_blank: bool,
    width: usize,
    /// The width a block item's left-hand side is padded to (0: no alignment).
    align: usize,
    /// How deep in expressions the printer is (only the outermost one is broken).
    expr_depth: usize,
}

type P<'i> = Pair<'i, Rule>;

/// Rules printed as their text.
fn is_atom(p: &P) -> bool {
    matches!(p.as_rule(), Rule::ident | Rule::string | Rule::int | Rule::float | Rule::duration | Rule::prim_type)
        || p.clone().into_inner().next().is_none()
}

impl<'a> Printer<'a> {
    fn new(src: &'a str, comments: Vec<Comment>, width: usize) -> Self {
        Printer {
            src,
            comments,
            next_comment: 0,
            lines: Vec::new(),
            cur: String::new(),
            cur_indent: 0,
            cur_comment: None,
            indent: 0,
            cont: None,
            space: false,
            last_end: 0,
            block_start: false,
            force_blank: false,
            width,
            align: 0,
            expr_depth: 0,
        }
    }

    /// How long `f`'s output is on one line (without comments, at any width); `usize::MAX` if
    /// it needs several lines.
    fn measure(&self, f: impl FnOnce(&mut Printer<'a>)) -> usize {
        let mut q = Printer::new(self.src, Vec::new(), usize::MAX);
        f(&mut q);
        if q.lines.is_empty() {
            width(&q.cur)
        } else {
            usize::MAX
        }
    }

    /// Whether a comment lies in the pair's text.
    fn has_comment(&self, p: &P) -> bool {
        let (s, e) = (p.as_span().start(), p.as_span().end());
        self.comments.iter().any(|c| c.start >= s && c.start < e)
    }

    /// The column the next token would end at if `len` more characters went on this line.
    fn fits(&self, len: usize) -> bool {
        let base =
            if self.cur.is_empty() { self.cont.unwrap_or(self.indent) } else { self.cur_indent + width(&self.cur) };
        len != usize::MAX && base + usize::from(self.space) + len <= self.width
    }

    // ------------------------------------------------------------ lines and comments

    fn flush_comments(&mut self, pos: usize) {
        while let Some(&c) = self.comments.get(self.next_comment) {
            if c.start >= pos {
                break;
            }
            self.next_comment += 1;
            let text = self.src[c.start..c.end].to_string();
            if !c.own_line {
                if !self.cur.is_empty() {
                    // After code that the layout joins with what follows: the comment still ends
                    // that code's line, and the rest continues below.
                    self.cur_comment = Some(text);
                    self.end_line();
                    self.cont.get_or_insert(self.indent + CONTINUATION);
                    self.last_end = c.end;
                    continue;
                }
                if let Some(last) = self.lines.last_mut().filter(|l| !l.code.is_empty() && l.comment.is_none()) {
                    last.comment = Some(text);
                    self.last_end = c.end;
                    continue;
                }
            }
            if !self.cur.is_empty() {
                // A comment on its own line in the middle of a line being built: the rest goes
                // on continuation lines.
                self.end_line();
                self.cont.get_or_insert(self.indent + CONTINUATION);
            }
            self.start_line(c.start);
            let indent = self.cont.unwrap_or(self.indent);
            self.lines.push(Line { indent, code: String::new(), comment: Some(text), pad: 0 });
            self.last_end = c.end;
        }
    }

    /// Before a new line for the token or comment at `pos`: a blank line if one is due.
    fn start_line(&mut self, pos: usize) {
        let gap = self.src.get(self.last_end.min(pos)..pos).unwrap_or("");
        let blank = self.force_blank || (!self.block_start && has_blank_line(gap));
        if blank && self.lines.last().is_some_and(|l| !l.is_blank()) {
            self.lines.push(Line { indent: 0, code: String::new(), comment: None, pad: 0 });
        }
        self.force_blank = false;
        self.block_start = false;
    }

    /// Print a token that was at `pos` in the source.
    fn tok(&mut self, text: &str, pos: usize) {
        self.flush_comments(pos);
        self.put(text, Some(pos));
        self.last_end = pos + text.len();
    }

    /// Print punctuation (which has no place in the tree to anchor comments to).
    fn punct(&mut self, text: &str) {
        self.put(text, None);
    }

    fn put(&mut self, text: &str, pos: Option<usize>) {
        if self.cur.is_empty() {
            if let Some(pos) = pos {
                self.start_line(pos);
            }
            self.cur_indent = self.cont.unwrap_or(self.indent);
        } else if self.space {
            self.cur.push(' ');
        }
        self.space = false;
        self.cur.push_str(text);
    }

    /// A pair printed as its text.
    fn atom(&mut self, p: &P) {
        let s = p.as_span();
        self.tok(p.as_str(), s.start());
    }

    fn end_line(&mut self) {
        if self.cur.is_empty() {
            return;
        }
        let comment = self.cur_comment.take();
        self.lines.push(Line { indent: self.cur_indent, code: std::mem::take(&mut self.cur), comment, pad: 0 });
        self.space = false;
    }

    fn newline(&mut self) {
        self.end_line();
        self.cont = None;
    }

    /// `{` at the end of this line; the block's lines follow one level deeper.
    fn open(&mut self) {
        self.space = true;
        self.punct("{");
        self.newline();
        self.indent += INDENT;
        self.block_start = true;
    }

    /// The block's remaining comments, then `}` (the source's, at `pos`) on a line of its own.
    fn close(&mut self, pos: usize) {
        self.newline();
        self.flush_comments(pos);
        self.newline();
        self.indent -= INDENT;
        self.block_start = true;
        self.tok("}", pos);
    }

    fn render(mut self) -> String {
        self.newline();
        align_comments(&mut self.lines);
        let mut out = String::new();
        for l in &self.lines {
            if !l.is_blank() {
                out.push_str(&" ".repeat(l.indent));
                out.push_str(&l.code);
            }
            if let Some(c) = &l.comment {
                if !l.code.is_empty() {
                    out.push_str(&" ".repeat(l.pad + 2));
                }
                out.push_str(c);
            }
            let trimmed = out.trim_end_matches([' ', '\t']).len();
            out.truncate(trimmed);
            out.push('\n');
        }
        while out.ends_with("\n\n") {
            out.pop();
        }
        if out == "\n" {
            out.clear();
        }
        out
    }

    // ------------------------------------------------------------ generic printing

    /// A pair's atoms and sub-pairs, separated by spaces.
    fn words(&mut self, p: P<'a>) {
        if is_atom(&p) {
            self.word_space();
            self.atom(&p);
            return;
        }
        for c in p.into_inner() {
            self.node(c);
        }
    }

    /// A space before the next word, unless it starts the line or follows an opening bracket.
    fn word_space(&mut self) {
        if !self.cur.is_empty() && !self.cur.ends_with(['(', '[', '<']) {
            self.space = true;
        }
    }

    /// Any pair below the item level.
    fn node(&mut self, p: P<'a>) {
        match p.as_rule() {
            Rule::expr | Rule::between_bound => {
                self.word_space();
                self.expr(p)
            }
            Rule::type_expr => {
                self.word_space();
                self.type_expr(p)
            }
            Rule::within_pair => {
                let mut d = p.into_inner();
                self.space = true;
                self.punct("(");
                if let Some(a) = d.next() {
                    self.atom(&a);
                }
                self.punct(",");
                self.space = true;
                if let Some(b) = d.next() {
                    self.atom(&b);
                }
                self.punct(")");
            }
            Rule::select_clause => self.select(p),
            Rule::aggregate_clause => self.aggregate_clause(p),
            Rule::record_type => {
                self.space = true;
                self.record_type(p)
            }
            Rule::from_clause | Rule::group_by_clause => self.listed(p),
            Rule::nullable => self.punct("?"),
            _ => self.words(p),
        }
    }

    /// A clause whose items are separated by commas: `from a, b`, `group by x, y as z`.
    fn listed(&mut self, p: P<'a>) {
        let mut first_item = true;
        for c in p.into_inner() {
            if is_kw_rule(c.as_rule()) {
                self.words(c);
                continue;
            }
            // `from a as x, b`: the alias belongs to the item before it.
            if !first_item && c.as_rule() != Rule::alias {
                self.punct(",");
            }
            first_item = false;
            self.space = true;
            self.node(c);
        }
    }

    // ------------------------------------------------------------ items

    fn item(&mut self, p: P<'a>) {
        match p.as_rule() {
            Rule::stream_decl | Rule::table_decl => self.source_decl(p),
            Rule::query_decl => self.query(p),
            Rule::aggregate_decl => self.aggregate_decl(p),
            Rule::function_decl => self.function_decl(p),
            _ => self.words(p),
        }
    }

    fn source_decl(&mut self, p: P<'a>) {
        for c in p.into_inner() {
            if c.as_rule() != Rule::decl_block {
                self.words(c);
                continue;
            }
            let end = c.as_span().end() - 1;
            let items: Vec<P> = c.clone().into_inner().collect();
            if items.is_empty() && !self.has_comment(&c) {
                self.space = true;
                self.punct("{}");
                self.last_end = end + 1;
                continue;
            }
            self.open();
            for item in items {
                let mut parts = item.into_inner();
                if let Some(kw) = parts.next() {
                    self.atom(&kw);
                    self.cur.push_str(&" ".repeat(KEYWORD_COLUMN.saturating_sub(kw.as_str().len())));
                }
                for part in parts {
                    if part.as_rule() == Rule::type_expr {
                        // `key id: int`
                        self.punct(":");
                    }
                    self.node(part);
                }
                self.newline();
            }
            self.close(end);
        }
    }

    fn query(&mut self, p: P<'a>) {
        let end = p.as_span().end() - 1;
        let mut parts = p.into_inner();
        for c in parts.by_ref().take(2) {
            self.words(c);
        }
        self.open();
        for clause in parts {
            self.node(clause);
            self.newline();
        }
        self.close(end);
    }

    fn type_expr(&mut self, p: P<'a>) {
        for c in p.into_inner() {
            match c.as_rule() {
                // `list<T>`, `map<K, V>`.
                Rule::list_type | Rule::map_type => {
                    let mut parts = c.into_inner();
                    if let Some(kw) = parts.next() {
                        self.atom(&kw);
                    }
                    self.punct("<");
                    for (i, t) in parts.enumerate() {
                        if i > 0 {
                            self.punct(",");
                            self.space = true;
                        }
                        self.type_expr(t);
                    }
                    self.punct(">");
                }
                Rule::record_type => self.record_type(c),
                Rule::nullable => self.punct("?"),
                _ => self.atom(&c),
            }
        }
    }

    fn record_type(&mut self, p: P<'a>) {
        self.block(p, ", ", Printer::field);
    }

    /// `name: type`
    fn field(&mut self, p: P<'a>) {
        let mut parts = p.into_inner();
        if let Some(name) = parts.next() {
            self.atom(&name);
        }
        self.punct(":");
        for c in parts {
            self.space = true;
            self.node(c);
        }
    }

    fn select(&mut self, p: P<'a>) {
        if let Some(kw) = p.clone().into_inner().next() {
            self.words(kw);
        }
        self.block(p, ", ", Printer::select_item);
    }

    fn aggregate_clause(&mut self, p: P<'a>) {
        if let Some(kw) = p.clone().into_inner().next() {
            self.words(kw);
        }
        self.block(p, ", ", Printer::agg_item);
    }

    /// A `{ … }` block (the pair's span ends with its `}`; its children that are not keywords
    /// are the items): on one line if it fits and holds no comment, else one item per line.
    fn block(&mut self, p: P<'a>, sep: &str, f: fn(&mut Printer<'a>, P<'a>)) {
        let end = p.as_span().end() - 1;
        let items: Vec<P<'a>> = p.clone().into_inner().filter(|c| !is_kw_rule(c.as_rule())).collect();
        // Comments before the block (after `->`, `:`, `<`…) go before it, not into it.
        self.flush_comments(p.as_span().start());
        let commented = self.has_comment(&p);
        self.word_space();
        if items.is_empty() && !commented {
            self.flush_comments(end);
            self.punct("{}");
            self.last_end = end + 1;
            return;
        }
        if !commented {
            // (While measuring, every block is on one line: no need to measure again.)
            let measuring = self.width == usize::MAX;
            if measuring || self.fits(self.measure(|q| q.inline_block(&items, sep, f))) {
                self.inline_block(&items, sep, f);
                self.last_end = end + 1;
                return;
            }
        }
        let align = items.iter().filter_map(|i| self.lhs_len(i)).max().unwrap_or(0);
        self.open();
        let mut prev_simple = false;
        for item in items {
            let simple = is_simple(&item);
            // (A comment between two items keeps them on separate lines.)
            let after_comment = self.comments.get(self.next_comment).is_some_and(|c| c.start < item.as_span().start());
            let packed = simple && prev_simple && !after_comment && {
                let len = self.measure(|q| f(q, item.clone()));
                self.fits(len.saturating_add(2))
            };
            if packed {
                self.punct(",");
                self.space = true;
            } else {
                self.newline();
            }
            self.align = if simple { 0 } else { align };
            f(self, item);
            prev_simple = simple;
        }
        self.align = 0;
        self.close(end);
    }

    fn inline_block(&mut self, items: &[P<'a>], sep: &str, f: fn(&mut Printer<'a>, P<'a>)) {
        self.punct("{");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.punct(sep.trim_end());
            }
            self.space = true;
            f(self, item.clone());
        }
        self.space = true;
        self.punct("}");
    }

    /// The width of a block item's left-hand side, for items written `name = …`.
    fn lhs_len(&self, item: &P<'a>) -> Option<usize> {
        let parts: Vec<P> = item.clone().into_inner().collect();
        match item.as_rule() {
            Rule::select_item if parts.len() == 2 && parts[0].as_rule() == Rule::ident => {
                Some(width(parts[0].as_str()))
            }
            Rule::agg_item => Some(width(parts.first()?.as_str())),
            Rule::init_field => Some(self.measure(|q| q.init_lhs(&parts))),
            _ => None,
        }
    }

    /// After a left-hand side `lhs` columns wide: pad it to `self.align` columns.
    fn pad(&mut self, lhs: usize) {
        if self.align > lhs {
            self.cur.push_str(&" ".repeat(self.align - lhs));
        }
    }

    /// ` = ` and the right-hand side.
    fn assign(&mut self, rhs: P<'a>) {
        self.space = true;
        self.punct("=");
        self.space = true;
        self.node(rhs);
    }

    fn select_item(&mut self, p: P<'a>) {
        let parts: Vec<P<'a>> = p.clone().into_inner().collect();
        if parts.len() == 2 && parts[0].as_rule() == Rule::ident {
            self.atom(&parts[0]);
            self.pad(width(parts[0].as_str()));
            self.assign(parts[1].clone());
        } else {
            self.words(p);
        }
    }

    fn agg_item(&mut self, p: P<'a>) {
        let mut parts = p.into_inner();
        if let Some(name) = parts.next() {
            self.atom(&name);
            self.pad(width(name.as_str()));
        }
        self.space = true;
        self.punct("=");
        self.space = true;
        if let Some(func) = parts.next() {
            self.atom(&func);
        }
        self.punct("(");
        for (i, a) in parts.enumerate() {
            if i > 0 {
                self.punct(",");
                self.space = true;
            }
            if a.as_rule() == Rule::star {
                self.atom(&a);
            } else {
                self.expr(a);
            }
        }
        self.punct(")");
    }

    fn init_lhs(&mut self, parts: &[P<'a>]) {
        if let Some(name) = parts.first() {
            self.atom(name);
        }
        if parts.len() == 3 {
            self.punct(":");
            self.space = true;
            self.type_expr(parts[1].clone());
        }
    }

    fn init_field(&mut self, p: P<'a>) {
        let parts: Vec<P<'a>> = p.into_inner().collect();
        self.init_lhs(&parts);
        if self.align > 0 {
            let lhs = self.measure(|q| q.init_lhs(&parts));
            self.pad(lhs);
        }
        if let Some(rhs) = parts.last() {
            self.assign(rhs.clone());
        }
    }

    fn stmt(&mut self, p: P<'a>) {
        for s in p.into_inner() {
            let mut parts: Vec<P<'a>> = s.into_inner().collect();
            let Some(rhs) = parts.pop() else { continue };
            for part in parts {
                self.words(part);
            }
            self.assign(rhs);
        }
    }

    fn params(&mut self, p: P<'a>) {
        self.punct("(");
        for (i, param) in p.into_inner().enumerate() {
            if i > 0 {
                self.punct(",");
                self.space = true;
            }
            self.field(param);
        }
        self.punct(")");
    }

    /// `aggregate name(params) -> type` or `function name(params) -> type`.
    fn signature(&mut self, parts: &mut pest::iterators::Pairs<'a, Rule>) {
        for c in parts.by_ref().take(2) {
            self.words(c);
        }
        if let Some(params) = parts.next() {
            self.params(params);
        }
        self.space = true;
        self.punct("->");
        if let Some(t) = parts.next() {
            self.node(t);
        }
    }

    /// `aggregate name(params) -> type { init … update … merge … undo … result … }`
    fn aggregate_decl(&mut self, p: P<'a>) {
        let end = p.as_span().end() - 1;
        let mut parts = p.into_inner();
        self.signature(&mut parts);
        self.open();
        for section in parts {
            let rule = section.as_rule();
            let Some(kw) = section.clone().into_inner().next() else { continue };
            self.atom(&kw);
            self.cur.push_str(&" ".repeat(KEYWORD_COLUMN.saturating_sub(kw.as_str().len())));
            match rule {
                Rule::agg_init => self.block(section, ", ", Printer::init_field),
                Rule::agg_update | Rule::agg_merge | Rule::agg_undo => self.block(section, "; ", Printer::stmt),
                _ => {
                    for c in section.into_inner().skip(1) {
                        self.node(c);
                    }
                }
            }
            self.newline();
        }
        self.close(end);
    }

    /// `function name(params) -> type = expr`, the expression on the next line if it does not
    /// fit.
    fn function_decl(&mut self, p: P<'a>) {
        let mut parts = p.into_inner();
        self.signature(&mut parts);
        self.space = true;
        self.punct("=");
        if let Some(body) = parts.next() {
            let len = self.measure(|q| q.expr(body.clone()));
            self.space = true;
            if !self.fits(len) {
                self.end_line();
                self.cont = Some(self.indent + CONTINUATION);
            }
            self.expr(body);
        }
    }

    // ------------------------------------------------------------ expressions

    fn expr(&mut self, p: P<'a>) {
        if p.as_rule() == Rule::lambda {
            return self.lambda(p);
        }
        let children: Vec<P<'a>> = p.clone().into_inner().collect();
        let breaks = self.expr_depth == 0
            && self.width != usize::MAX
            && children.iter().any(|c| matches!(c.as_rule(), Rule::op_and | Rule::op_or))
            && !self.fits(self.measure(|q| q.expr(p.clone())));
        self.expr_depth += 1;
        for c in children {
            match c.as_rule() {
                Rule::op_neg => self.atom(&c),
                Rule::op_not => {
                    self.words(c);
                    self.space = true;
                }
                Rule::op_and | Rule::op_or if breaks => {
                    self.end_line();
                    self.cont.get_or_insert(self.indent + CONTINUATION);
                    self.words(c);
                    self.space = true;
                }
                Rule::op_index => {
                    self.space = false;
                    self.punct("[");
                    for e in c.into_inner() {
                        self.expr(e);
                    }
                    self.punct("]");
                }
                Rule::in_tail => {
                    for part in c.into_inner() {
                        if part.as_rule() == Rule::in_list {
                            self.space = true;
                            self.punct("(");
                            self.comma_separated(part.into_inner());
                            self.punct(")");
                        } else {
                            self.space = true;
                            self.words(part);
                        }
                    }
                }
                Rule::op_between => {
                    for part in c.into_inner() {
                        self.space = true;
                        self.node(part);
                    }
                }
                r if is_operator(r) => {
                    self.space = true;
                    self.words(c);
                    self.space = true;
                }
                _ => self.operand(c),
            }
        }
        self.expr_depth -= 1;
    }

    fn operand(&mut self, c: P<'a>) {
        match c.as_rule() {
            Rule::if_expr => {
                for (i, part) in c.into_inner().enumerate() {
                    if i > 0 {
                        self.space = true;
                    }
                    self.node(part);
                }
            }
            Rule::call => {
                let mut parts = c.into_inner();
                if let Some(name) = parts.next() {
                    self.atom(&name);
                }
                self.punct("(");
                self.comma_separated(parts);
                self.punct(")");
            }
            Rule::list_lit => {
                self.punct("[");
                self.comma_separated(c.into_inner());
                self.punct("]");
            }
            Rule::map_lit => {
                let mut parts = c.into_inner();
                if let Some(kw) = parts.next() {
                    self.atom(&kw);
                }
                self.space = true;
                self.braced(parts.collect(), |f, entry| {
                    let mut kv = entry.into_inner();
                    if let Some(k) = kv.next() {
                        f.expr(k);
                    }
                    f.punct(":");
                    f.space = true;
                    if let Some(v) = kv.next() {
                        f.expr(v);
                    }
                });
            }
            Rule::record_lit => self.braced(c.into_inner().collect(), |f, field| {
                let mut parts = field.into_inner();
                if let Some(name) = parts.next() {
                    f.atom(&name);
                }
                if let Some(e) = parts.next() {
                    f.assign(e);
                }
            }),
            Rule::paren => {
                self.punct("(");
                for e in c.into_inner() {
                    self.expr(e);
                }
                self.punct(")");
            }
            Rule::path => {
                for (i, id) in c.into_inner().enumerate() {
                    if i > 0 {
                        self.punct(".");
                    }
                    self.atom(&id);
                }
            }
            _ => {
                if is_atom(&c) {
                    self.atom(&c);
                } else {
                    for part in c.into_inner() {
                        self.words(part);
                    }
                }
            }
        }
    }

    /// `x => body`, `(acc, x) => body`.
    fn lambda(&mut self, p: P<'a>) {
        let mut parts = p.into_inner();
        if let Some(params) = parts.next() {
            let names: Vec<P<'a>> = params.into_inner().collect();
            if names.len() == 1 {
                self.atom(&names[0]);
            } else {
                self.punct("(");
                for (i, n) in names.iter().enumerate() {
                    if i > 0 {
                        self.punct(",");
                        self.space = true;
                    }
                    self.atom(n);
                }
                self.punct(")");
            }
        }
        self.space = true;
        self.punct("=>");
        self.space = true;
        for e in parts {
            self.expr(e);
        }
    }

    /// `{ a, b }` on one line, each item written by `each`; `{}` when there is none.
    fn braced(&mut self, items: Vec<P<'a>>, each: impl Fn(&mut Self, P<'a>)) {
        if items.is_empty() {
            self.punct("{}");
            return;
        }
        self.punct("{");
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                self.punct(",");
            }
            self.space = true;
            each(self, item);
        }
        self.space = true;
        self.punct("}");
    }

    fn comma_separated(&mut self, items: impl Iterator<Item = P<'a>>) {
        for (i, e) in items.enumerate() {
            if i > 0 {
                self.punct(",");
                self.space = true;
            }
            self.expr(e);
        }
    }
}

/// Infix and postfix operators printed with a space on each side.
fn is_operator(rule: Rule) -> bool {
    use Rule::*;
    matches!(
        rule,
        op_or
            | op_and
            | op_eq
            | op_ne
            | op_le
            | op_ge
            | op_lt
            | op_gt
            | op_in
            | op_not_in
            | op_add
            | op_sub
            | op_mul
            | op_div
            | op_rem
            | op_is_null
            | op_is_not_null
    )
}

/// A select item that is a plain field name or `*`: runs of them share a line.
fn is_simple(item: &P) -> bool {
    item.as_rule() == Rule::select_item
        && item.clone().into_inner().count() == 1
        && item.clone().into_inner().all(|c| matches!(c.as_rule(), Rule::path | Rule::star))
}

/// Align the end-of-line comments of a block: the lines at one indentation, not separated by a
/// blank line or a line indented less (lines indented more do not interrupt them).
fn align_comments(lines: &mut [Line]) {
    let mut done = vec![false; lines.len()];
    for i in 0..lines.len() {
        if done[i] || lines[i].code.is_empty() || lines[i].comment.is_none() {
            continue;
        }
        let level = lines[i].indent;
        let group: Vec<usize> = (i..lines.len())
            .take_while(|&j| !lines[j].is_blank() && lines[j].indent >= level)
            .filter(|&j| lines[j].indent == level && !lines[j].code.is_empty() && lines[j].comment.is_some())
            .collect();
        let col = group.iter().map(|&k| width(&lines[k].code)).max().unwrap_or(0);
        for k in group {
            lines[k].pad = col - width(&lines[k].code);
            done[k] = true;
        }
    }
}
