//! Diagnostics are data until the edge: every stage returns [`Diagnostic`]s, and only the CLI
//! (or a test, through [`render`]) turns them into text with miette.
//!
//! Every diagnostic has a stable code from the one registry below. Codes are grouped in
//! ranges and never reused: a retired code stays here, marked retired.

use std::fmt;

use crate::ast::Span;

/// The registry of diagnostic codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    // E01xx: syntax and input bounds
    Syntax = 100,
    TooDeep = 101,
    TooLarge = 102,
    BadLiteral = 103,
    // E02xx: names
    UnknownSource = 200,
    UnknownField = 201,
    UnknownFunction = 202,
    UnknownAggregate = 203,
    Duplicate = 204,
    UnknownTable = 205,
    UnknownQuery = 206,
    ShadowsStream = 207,
    NotAStreamOrTable = 208,
    ReservedName = 209,
    // E03xx: types
    TypeMismatch = 300,
    BadOperands = 301,
    ArgCount = 302,
    NotOrdered = 304,
    NotBool = 305,
    NotNumeric = 306,
    /// An aggregate's argument that must be a literal in a range (`top_k`'s k).
    NotConstant = 307,
    // E04xx: query structure
    WindowWithoutGroup = 400,
    AggregateWithoutGroup = 401,
    ClauseOrder = 402,
    EmitWithoutWindow = 403,
    GroupWithoutAggregate = 404,
    MissingFrom = 405,
    BadDuration = 406,
    NoMerge = 407,
    JoinKey = 408,
    JoinKind = 409,
    DuplicateClause = 410,
    MissingSink = 411,
    GroupNeedsName = 412,
    WindowedKeyWithoutWindow = 413,
    /// `explode` where it cannot fan records out: not a whole `select` item, twice in one
    /// `select`, on a table or after `aggregate`, or of something that is not a list.
    Explode = 414,
    /// An aggregate over a grouped table that cannot take an old row's value back out (no
    /// `undo`), or a window on a grouped table.
    NoUndo = 415,
    // E05xx: declarations
    MissingValue = 500,
    BadKey = 501,
    BadTime = 502,
    DuplicateDecl = 503,
    BadTenant = 504,
    BadTopic = 505,
    /// A format that cannot carry the value: a nested field in `csv`, a format on a
    /// control-managed table.
    BadFormat = 506,
    // E06xx: user-defined aggregates and functions
    UnknownState = 600,
    BadResult = 601,
    Recursion = 602,
    // E07xx: control statements
    NotControlTable = 700,
    TenantMismatch = 701,
    QueryExists = 702,
    IncompatibleState = 703,
    CannotRun = 704,
}

impl Code {
    pub fn as_str(self) -> String {
        format!("E{:04}", self as u16)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "E{:04}", *self as u16)
    }
}

/// One problem found in a program, with the span it is about.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub code: Code,
    pub message: String,
    pub span: Span,
    pub label: String,
    pub help: Option<String>,
    /// Further spans worth pointing at ("first defined here").
    pub related: Vec<(Span, String)>,
}

impl Diagnostic {
    pub fn new(code: Code, span: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            message: articles(message.into()),
            span,
            label: String::new(),
            help: None,
            related: Vec::new(),
        }
    }
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = articles(label.into());
        self
    }
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
    pub fn help_opt(mut self, help: Option<String>) -> Self {
        self.help = help;
        self
    }
    pub fn related(mut self, span: Span, label: impl Into<String>) -> Self {
        self.related.push((span, label.into()));
        self
    }
    /// Shift every span by `offset` (for text parsed out of a larger source).
    pub fn offset(mut self, offset: usize) -> Self {
        self.span = Span::new(self.span.start + offset, self.span.end + offset);
        for (s, _) in &mut self.related {
            *s = Span::new(s.start + offset, s.end + offset);
        }
        self
    }
}

/// "a int" → "an int": messages say "a {type}", and `int` is the one type name that needs "an".
fn articles(s: String) -> String {
    if !s.contains("a int") {
        return s;
    }
    let fixed = s.replace(" a int", " an int");
    match fixed.strip_prefix("a int") {
        Some(rest) => format!("an int{rest}"),
        None => fixed,
    }
}

/// A list of diagnostics, in the order they were found.
pub type Diagnostics = Vec<Diagnostic>;

/// "did you mean `x`?" for a misspelt name, by edit distance.
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = strsim::damerau_levenshtein(&name.to_lowercase(), &c.to_lowercase());
        let limit = (name.chars().count().max(c.chars().count()) / 3).max(1);
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| format!("did you mean `{c}`?"))
}

/// A diagnostic paired with its source text, as miette wants it.
pub struct Report<'a> {
    pub diag: &'a Diagnostic,
    pub source: miette::NamedSource<String>,
}

impl fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.diag, f)
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.diag.message)
    }
}

impl std::error::Error for Report<'_> {}

impl miette::Diagnostic for Report<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(self.diag.code))
    }
    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.diag.help.as_ref().map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        Some(&self.source)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        let primary = miette::LabeledSpan::new_primary_with_span(
            (!self.diag.label.is_empty()).then(|| self.diag.label.clone()),
            self.diag.span,
        );
        let related = self.diag.related.iter().map(|(s, l)| miette::LabeledSpan::new_with_span(Some(l.clone()), *s));
        Some(Box::new(std::iter::once(primary).chain(related)))
    }
}

/// How to render: with colour and terminal width (the CLI), or plain and fixed (tests).
#[derive(Clone, Copy, Debug)]
pub struct RenderOptions {
    pub color: bool,
    pub width: usize,
}

impl RenderOptions {
    pub fn plain() -> Self {
        RenderOptions { color: false, width: 100 }
    }
}

/// Render diagnostics against the source they were found in.
pub fn render(diags: &[Diagnostic], file_name: &str, source: &str, opts: RenderOptions) -> String {
    let theme = if opts.color { miette::GraphicalTheme::unicode() } else { miette::GraphicalTheme::unicode_nocolor() };
    let handler = miette::GraphicalReportHandler::new_themed(theme).with_width(opts.width).with_links(false);
    // Control characters of the source (ESC, BEL, NUL, …) are shown, never sent to the terminal.
    let (source, at) = visible(source);
    let file_name = visible(file_name).0;
    let mut out = String::new();
    for d in diags {
        let moved = |s: Span| Span { start: at(s.start), end: at(s.end) };
        let d = Diagnostic {
            code: d.code,
            message: visible(&d.message).0,
            span: moved(d.span),
            label: visible(&d.label).0,
            help: d.help.as_deref().map(|h| visible(h).0),
            related: d.related.iter().map(|(s, l)| (moved(*s), visible(l).0)).collect(),
        };
        let report = Report { diag: &d, source: miette::NamedSource::new(file_name.clone(), source.clone()) };
        if handler.render_report(&mut out, &report).is_err() {
            out.push_str(&format!("error[{}]: {}\n", d.code, d.message));
        }
    }
    out
}

/// `text` with every control character but newline and tab shown as its Unicode control picture
/// (`␛` for ESC, `␇` for BEL, `␀` for NUL, `␡` for DEL) or as `\u{…}`, and a map from a byte
/// offset of `text` to the same place in the result.
fn visible(text: &str) -> (String, Box<dyn Fn(usize) -> usize>) {
    // A `\r` before `\n` ends a line (CRLF files); any other is shown.
    let chars: Vec<char> = text.chars().collect();
    let hidden = |i: usize| {
        let c = chars[i];
        c.is_control() && c != '\n' && c != '\t' && !(c == '\r' && chars.get(i + 1) == Some(&'\n'))
    };
    if !(0..chars.len()).any(hidden) {
        return (text.to_string(), Box::new(|i| i));
    }
    let mut out = String::with_capacity(text.len() + 16);
    // The offset in `out` of each byte offset of `text` (and of its end).
    let mut at = Vec::with_capacity(text.len() + 1);
    for (i, &c) in chars.iter().enumerate() {
        let start = out.len();
        if hidden(i) {
            match c as u32 {
                n @ 0..=0x1f => out.push(char::from_u32(0x2400 + n).unwrap_or('?')),
                0x7f => out.push('\u{2421}'),
                n => out.push_str(&format!("\\u{{{n:x}}}")),
            }
        } else {
            out.push(c);
        }
        at.extend(std::iter::repeat_n(start, c.len_utf8()));
    }
    at.push(out.len());
    (out, Box::new(move |i: usize| at.get(i).copied().unwrap_or(i)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Control characters of the source, the messages and the file name never reach the
    /// terminal; the label still points at the same character.
    #[test]
    fn control_characters_are_shown_not_sent() {
        let source = "stream s {\n  value json { k: string, \u{1b}[31mred\u{7} \u{0}\u{7f}\u{85} x }\n}\n";
        let at = source.find('x').unwrap();
        let d = Diagnostic::new(Code::Syntax, Span { start: at, end: at + 1 }, "unexpected `\u{1b}`")
            .label("here \u{7}")
            .help("no \u{0} please");
        let out = render(&[d], "a\u{1b}b.stream", source, RenderOptions::plain());
        let bad: Vec<char> = out.chars().filter(|c| c.is_control() && *c != '\n').collect();
        assert!(bad.is_empty(), "{bad:?} in\n{out}");
        for shown in
            ["\u{241b}[31mred\u{2407}", "\u{2400}\u{2421}\\u{85}", "unexpected `\u{241b}`", "a\u{241b}b.stream"]
        {
            assert!(out.contains(shown), "{shown} not in\n{out}");
        }
        // The caret line points at `x`: its column in the shown line is the label's column.
        let lines: Vec<&str> = out.lines().collect();
        let src_line = lines.iter().position(|l| l.contains("red")).unwrap();
        let col = |l: &str, c: char| l.chars().position(|x| x == c).unwrap();
        let x_col = col(lines[src_line], 'x');
        let caret = lines[src_line + 1..].iter().find(|l| l.contains('┬')).expect("a caret line");
        assert_eq!(col(caret, '┬'), x_col, "\n{out}");
    }

    /// A CRLF file's line ends are line ends, not characters to show.
    #[test]
    fn crlf_line_ends_stay_invisible() {
        let source = "stream s {\r\n  x\r\n}\r\n";
        let at = source.find('x').unwrap();
        let out = render(
            &[Diagnostic::new(Code::Syntax, Span { start: at, end: at + 1 }, "no")],
            "f",
            source,
            RenderOptions::plain(),
        );
        assert!(!out.contains('\u{240d}'), "{out}");
        let (shown, _) = visible("a\rb\r\n");
        assert_eq!(shown, "a\u{240d}b\r\n", "a lone carriage return is shown");
    }
}
