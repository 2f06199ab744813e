//! Topics a query may not write to: Kafka's own, the application's internal topics, and names
//! shaped like another application's internal topics — refused by `streamc check`, `streamc run`
//! and for control statements, unless `topics.allow_internal_sinks` lists them.

use crate::check::{check_statement, Control};
use crate::diag::{Code, Diagnostic};
use crate::hir;
use crate::plan::{lower, TopicRole, Topology};

/// The topics of an application besides its changelogs and repartition topics:
/// `<app>-<name>`.
pub(crate) const APP_TOPICS: [(&str, TopicRole); 5] = [
    ("dlq", TopicRole::DeadLetter),
    ("late", TopicRole::Late),
    ("control", TopicRole::Control),
    ("control-status", TopicRole::ControlStatus),
    ("metrics", TopicRole::Metrics),
];

/// Why a query of `topo`'s application may not write to `topic`: a topic of Kafka itself
/// (`__…`), one of the application's own internal topics (changelogs, repartition topics, dead
/// letters and their replays, late records, control, control status, metrics), or a name with the shape of
/// another application's internal topics (`…-changelog`, `…-repartition`,
/// `…-control-status`). None if it may, or if `allowed` (`topics.allow_internal_sinks`) lists
/// it.
pub fn reserved_sink(topic: &str, topo: &Topology, allowed: &[String]) -> Option<String> {
    if allowed.iter().any(|a| a == topic) {
        return None;
    }
    if topic.starts_with("__") {
        return Some("a topic of Kafka itself".into());
    }
    let own = APP_TOPICS.iter().find(|(name, _)| topic.strip_prefix(topo.app.as_str()) == Some(&format!("-{name}")));
    if let Some((_, role)) = own {
        return Some(format!("this application's {} topic", role.as_str()));
    }
    if topic.strip_prefix(topo.app.as_str()) == Some("-dlq-replays") {
        return Some("this application's dead-letter replays topic".into());
    }
    if let Some(t) = topo.topics.iter().find(|t| t.name == topic && t.role.internal()) {
        return Some(format!("this application's {} topic", t.role.as_str()));
    }
    // (A plain `-control` suffix is too common a name to refuse, `access-control` say: only this
    // application's own control topic is.)
    let shapes = [
        ("-changelog", "a store's changelog of a streamc or Kafka Streams application"),
        ("-repartition", "a repartition topic of a streamc or Kafka Streams application"),
        ("-control-status", "a control status topic of a streamc application"),
    ];
    shapes.iter().find(|(suffix, _)| topic.ends_with(suffix)).map(|(_, what)| format!("named like {what}"))
}

/// The `to`s of `program` that write to a reserved topic ([`reserved_sink`]) in application
/// `app`: one diagnostic each.
pub fn reserved_sinks(program: &hir::Program, app: &str, allowed: &[String]) -> Vec<Diagnostic> {
    let topo = lower(program, app);
    program.queries.iter().flat_map(|q| reserved_sink_diagnostics(q, &topo, allowed)).collect()
}

/// The diagnostics of a query's `to`s that write to a reserved topic of `topo`'s application.
pub fn reserved_sink_diagnostics(q: &hir::Query, topo: &Topology, allowed: &[String]) -> Vec<Diagnostic> {
    q.sinks
        .iter()
        .filter_map(|sink| {
            let why = reserved_sink(&sink.topic, topo, allowed)?;
            Some(
                Diagnostic::new(
                    Code::BadTopic,
                    sink.span,
                    format!("query `{}` writes to `{}`, {why}", q.name, sink.topic),
                )
                .label("a reserved topic")
                .help("write to a topic of your own; to write here anyway, list it in `topics.allow_internal_sinks`"),
            )
        })
        .collect()
}

/// Parse and check a control statement against the running program of application `app`, as
/// `streamc check --statement` and `streamc control` do before anything is posted: a query it
/// adds or replaces must not write to a reserved topic (the application refuses it too).
pub fn check_statement_text(
    program: &hir::Program,
    text: &str,
    app: &str,
    allowed: &[String],
) -> Result<(Option<String>, Control), Vec<Diagnostic>> {
    let ast = crate::syntax::parse_statement(text)?;
    let (tenant, ctl) = check_statement(program, &ast, text)?;
    if let Control::NewQuery(q) | Control::Replace { query: q, .. } = &ctl {
        let diags = reserved_sink_diagnostics(q, &lower(program, app), allowed);
        if !diags.is_empty() {
            return Err(diags);
        }
    }
    Ok((tenant, ctl))
}
