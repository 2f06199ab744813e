//! Render a [`Topology`] as text, Graphviz dot, Mermaid, JSON or SVG (the dot rendering laid
//! out and drawn by layout-rs, in pure Rust). Every form is built from the
//! same walk: sub-topologies in order, nodes in topological order, each node described by
//! [`NodeKind::describe`].

use std::fmt::Write as _;

use petgraph::visit::EdgeRef;
use petgraph::Direction;

use crate::plan::{EdgeMode, NodeKind, Partitions, StoreKind, Topology};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExplainFormat {
    Text,
    Dot,
    Mermaid,
    Json,
    /// A picture: the dot rendering laid out and drawn here (no Graphviz needed).
    Svg,
}

/// Render the topology, or only the parts of one query.
pub fn render(t: &Topology, query: Option<&str>, format: ExplainFormat) -> String {
    let view = View::new(t, query);
    match format {
        ExplainFormat::Text => text(&view),
        ExplainFormat::Dot => dot(&view),
        ExplainFormat::Mermaid => mermaid(&view),
        ExplainFormat::Json => serde_json::to_string_pretty(&json(&view)).unwrap_or_default() + "\n",
        ExplainFormat::Svg => svg(&dot(&view)),
    }
}

/// The dot rendering laid out (layered, top to bottom) and drawn as SVG by layout-rs.
fn svg(dot: &str) -> String {
    use layout::backends::svg::SVGWriter;
    use layout::gv::{DotParser, GraphBuilder};
    let mut parser = DotParser::new(dot);
    let graph = match parser.process() {
        Ok(g) => g,
        // The dot text is this module's own: a failure here is a bug, said in the picture.
        Err(e) => {
            let e = e.replace('&', "&amp;").replace('<', "&lt;");
            return format!(
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"600\" height=\"40\"><text x=\"10\" y=\"25\">cannot lay out the topology: {e}</text></svg>\n"
            );
        }
    };
    let mut builder = GraphBuilder::new();
    builder.visit_graph(&graph);
    let mut visual = builder.get();
    let mut writer = SVGWriter::new();
    visual.do_it(false, false, false, &mut writer);
    finish_svg(writer.finalize())
}

/// layout-rs's picture made to render anywhere: a generic font family (its `Times, serif`
/// drew no text at all in a converter without Times), and its height cut to what is drawn (it
/// left an empty band below the graph).
fn finish_svg(svg: String) -> String {
    let svg = svg.replace("font-family: Times, serif;", "font-family: sans-serif;");
    let num = |c: &regex::Captures, i: usize| c.get(i).and_then(|m| m.as_str().parse::<f64>().ok()).unwrap_or(0.0);
    let mut bottom: f64 = 0.0;
    // A rectangle's bottom is its y plus its height; an ellipse's its centre plus its radius.
    for pattern in
        [r#"<rect [^>]*?y="([\d.]+)"[^>]*?height="([\d.]+)""#, r#"<ellipse [^>]*?cy="([\d.]+)"[^>]*?ry="([\d.]+)""#]
    {
        let Ok(re) = regex::Regex::new(pattern) else { continue };
        for c in re.captures_iter(&svg) {
            bottom = bottom.max(num(&c, 1) + num(&c, 2));
        }
    }
    // A label: its first line's top at `y`, each `<tspan>` one line of 14 px.
    if let Ok(re) = regex::Regex::new(r#"(?s)<text [^>]*?y="([\d.]+)"[^>]*>(.*?)</text>"#) {
        for c in re.captures_iter(&svg) {
            let lines = c.get(2).map_or(0, |m| m.as_str().matches("<tspan").count()).max(1);
            bottom = bottom.max(num(&c, 1) + 14.0 * (lines as f64 + 1.0));
        }
    }
    if let Ok(re) = regex::Regex::new(r#" d="([^"]*)""#) {
        let pair = regex::Regex::new(r"([\d.]+)[ ,]+([\d.]+)").ok();
        for c in re.captures_iter(&svg) {
            for p in pair.iter().flat_map(|r| r.captures_iter(c.get(1).map_or("", |m| m.as_str()))) {
                bottom = bottom.max(num(&p, 2));
            }
        }
    }
    let Ok(head) = regex::Regex::new(r#"<svg width="([\d.]+)" height="([\d.]+)" viewBox="0 0 ([\d.]+) ([\d.]+)""#)
    else {
        return svg;
    };
    let Some(c) = head.captures(&svg) else { return svg };
    let (width, height) = (c[1].to_string(), num(&c, 2));
    let cut = (bottom + 20.0).ceil();
    if bottom <= 0.0 || cut >= height {
        return svg;
    }
    let root = format!(r#"<svg width="{width}" height="{cut}" viewBox="0 0 {width} {cut}""#);
    head.replace(&svg, root.as_str()).into_owned()
}

/// The selected part of a topology.
struct View<'a> {
    t: &'a Topology,
    subs: Vec<usize>,
    query: Option<&'a str>,
}

impl<'a> View<'a> {
    fn new(t: &'a Topology, query: Option<&'a str>) -> Self {
        let subs = t.subtopologies.iter().filter(|s| query.is_none_or(|q| s.query == q)).map(|s| s.id).collect();
        View { t, subs, query }
    }
    fn stores(&self) -> impl Iterator<Item = &'a crate::plan::Store> + '_ {
        self.t.stores.iter().filter(|s| match (s.subtopology, self.query) {
            (Some(sub), _) => self.subs.contains(&sub),
            (None, None) => true,
            (None, Some(_)) => {
                self.t.graph.node_weights().any(|n| self.subs.contains(&n.subtopology) && n.stores.contains(&s.name))
            }
        })
    }
    fn topics(&self) -> impl Iterator<Item = &'a crate::plan::Topic> + '_ {
        let used: Vec<String> = self
            .subs
            .iter()
            .flat_map(|s| self.t.subtopologies[*s].nodes.iter())
            .flat_map(|n| topics_of(&self.t.graph[*n].kind))
            .chain(self.stores().filter_map(|s| s.changelog.clone()))
            .collect();
        self.t.topics.iter().filter(move |t| self.query.is_none() || used.contains(&t.name))
    }
}

fn topics_of(k: &NodeKind) -> Vec<String> {
    match k {
        NodeKind::Source { topic, .. }
        | NodeKind::RepartitionSink { topic, .. }
        | NodeKind::RepartitionSource { topic, .. }
        | NodeKind::TableSource { topic, .. }
        | NodeKind::Sink { topic, .. } => vec![topic.clone()],
        _ => vec![],
    }
}

fn partitions_desc(t: &Topology, p: &Partitions) -> String {
    match p {
        Partitions::External => "existing".into(),
        Partitions::Fixed(n) => format!("{n} partition{}", if *n == 1 { "" } else { "s" }),
        Partitions::Like(topic) => format!("partitions of {topic}"),
        Partitions::OfSubtopology(s) => {
            let srcs = &t.subtopologies[*s].sources;
            if srcs.len() == 1 {
                format!("partitions of {}", srcs[0])
            } else {
                format!("max partitions of {}", srcs.join(", "))
            }
        }
    }
}

fn store_kind(k: &StoreKind) -> String {
    match k {
        StoreKind::KeyValue => "key-value".into(),
        StoreKind::Window { window } => format!(
            "window store ({}, grace {}; a window expires at its end + grace, by stream time)",
            crate::plan::zoned_window_desc(window),
            window.grace
        ),
        StoreKind::JoinWindow { within, after, grace, .. } if within == after => {
            format!("join window store (records kept 2 × {within} + grace {grace}, by its side's stream time)")
        }
        StoreKind::JoinWindow { within, after, grace, .. } => {
            format!("join window store (records kept {within} + {after} + grace {grace}, by its side's stream time)")
        }
        StoreKind::Global => "global key-value (every task sees all; rebuilt from the control topic)".into(),
        StoreKind::Grouped { grouping } => format!("key-value of a grouped table (`{grouping}`)"),
        StoreKind::ForeignKey { join } => format!("key-value of a foreign-key join (`{join}`)"),
    }
}

fn text(v: &View) -> String {
    let t = v.t;
    let mut o = String::new();
    let nq = v.subs.iter().map(|s| &t.subtopologies[*s].query).collect::<std::collections::BTreeSet<_>>().len();
    let _ = writeln!(
        o,
        "Application `{}`: {} quer{}, {} sub-topolog{}",
        t.app,
        nq,
        if nq == 1 { "y" } else { "ies" },
        v.subs.len(),
        if v.subs.len() == 1 { "y" } else { "ies" }
    );
    for s in &v.subs {
        let sub = &t.subtopologies[*s];
        let _ = writeln!(
            o,
            "\nSub-topology {} (query `{}`): one task per partition of {}",
            sub.id,
            sub.query,
            sub.sources.join(" + ")
        );
        for n in &sub.nodes {
            let node = &t.graph[*n];
            let _ = writeln!(o, "  {} [{}]  line {}: {}", node.name, node.kind.kind_name(), node.line, node.clause);
            let _ = writeln!(o, "      {}", node.kind.describe());
            for st in &node.stores {
                let _ = writeln!(o, "      store: {st}");
            }
            for e in t.graph.edges_directed(*n, Direction::Outgoing) {
                let target = &t.graph[e.target()];
                let w = e.weight();
                match &w.mode {
                    EdgeMode::Forward => {
                        let _ = writeln!(o, "      --> {}  (key {}, value {})", target.name, w.key, w.value);
                    }
                    EdgeMode::Repartition { topic } => {
                        let _ = writeln!(
                            o,
                            "      ==> {} via {} (sub-topology {}; key {}, value {})",
                            target.name, topic, target.subtopology, w.key, w.value
                        );
                    }
                }
            }
        }
    }
    let stores: Vec<_> = v.stores().collect();
    if !stores.is_empty() {
        let _ = writeln!(o, "\nState stores");
        for s in stores {
            let scope = if s.tenant_scoped { ", tenant-scoped" } else { "" };
            let _ = writeln!(o, "  {}: {}{}", s.name, store_kind(&s.kind), scope);
            match (&s.changelog, s.subtopology) {
                (Some(c), Some(sub)) => {
                    let expiry = if matches!(s.kind, StoreKind::Window { .. } | StoreKind::JoinWindow { .. }) {
                        "; expired entries are deleted with tombstones"
                    } else {
                        ""
                    };
                    let _ = writeln!(
                        o,
                        "      changelog {c} (compacted{expiry}), one partition per task of sub-topology {sub}"
                    );
                }
                _ => {
                    let _ = writeln!(o, "      no changelog");
                }
            }
            let _ = writeln!(o, "      key {}, value {}", s.key, s.value);
        }
    }
    let _ = writeln!(o, "\nTopics");
    let width = v.topics().map(|t| t.name.len()).max().unwrap_or(0);
    for tp in v.topics() {
        let created = if tp.partitions != Partitions::External { ", created by streamc" } else { "" };
        let compact = if tp.compacted { ", compacted" } else { "" };
        // A topic of the user's: what streamc expects of it (not whether it exists now).
        let partitions = match (&tp.partitions, tp.role) {
            (Partitions::External, crate::plan::TopicRole::Source) => {
                "yours: must exist on Kafka; the embedded log creates it".to_string()
            }
            (Partitions::External, crate::plan::TopicRole::Sink) => "yours: created if missing".to_string(),
            (p, _) => partitions_desc(t, p),
        };
        let _ = writeln!(o, "  {:width$}  {} ({}{}{})", tp.name, tp.role.as_str(), partitions, compact, created);
    }
    o
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn dot(v: &View) -> String {
    let t = v.t;
    let mut o = String::new();
    let _ = writeln!(o, "digraph \"{}\" {{\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];", esc(&t.app));
    for s in &v.subs {
        let sub = &t.subtopologies[*s];
        let _ = writeln!(
            o,
            "  subgraph \"cluster_{}\" {{\n    label=\"sub-topology {} (query {})\";",
            sub.id,
            sub.id,
            esc(&sub.query)
        );
        for n in &sub.nodes {
            let node = &t.graph[*n];
            let _ = writeln!(
                o,
                "    \"{}\" [label=\"{}\\n{}\\nline {}\"];",
                esc(&node.name),
                esc(&node.name),
                node.kind.kind_name(),
                node.line
            );
            for st in &node.stores {
                let _ = writeln!(o, "    \"store:{}\" [shape=cylinder, label=\"{}\"];\n    \"{}\" -> \"store:{}\" [style=dotted, dir=both];", esc(st), esc(st), esc(&node.name), esc(st));
            }
        }
        let _ = writeln!(o, "  }}");
    }
    // The topics read and written, as rounded boxes outside the sub-topologies (the repartition
    // topics label their dashed edges).
    let mut drawn = std::collections::BTreeSet::new();
    for s in &v.subs {
        for n in &t.subtopologies[*s].nodes {
            let node = &t.graph[*n];
            let (topic, into) = match &node.kind {
                NodeKind::Source { topic, .. } | NodeKind::TableSource { topic, .. } => (topic, true),
                NodeKind::Sink { topic, .. } => (topic, false),
                _ => continue,
            };
            if drawn.insert(topic.clone()) {
                let _ =
                    writeln!(o, "  \"topic:{}\" [shape=Mrecord, style=filled, label=\"{}\"];", esc(topic), esc(topic));
            }
            let (a, b) = if into {
                (format!("topic:{topic}"), node.name.clone())
            } else {
                (node.name.clone(), format!("topic:{topic}"))
            };
            let _ = writeln!(o, "  \"{}\" -> \"{}\";", esc(&a), esc(&b));
        }
    }
    for s in &v.subs {
        for n in &t.subtopologies[*s].nodes {
            for e in t.graph.edges_directed(*n, Direction::Outgoing) {
                let (a, b, w) = (&t.graph[e.source()], &t.graph[e.target()], e.weight());
                let types = format!("key {}\\nvalue {}", esc(&w.key.to_string()), wrapped(&esc(&w.value.to_string())));
                let style = match &w.mode {
                    EdgeMode::Forward => format!("label=\"{types}\""),
                    EdgeMode::Repartition { topic } => format!("label=\"{}\\n{types}\", style=dashed", esc(topic)),
                };
                let _ = writeln!(o, "  \"{}\" -> \"{}\" [{}];", esc(&a.name), esc(&b.name), style);
            }
        }
    }
    o.push_str("}\n");
    o
}

/// A type's text in lines of about 48 characters, broken after its commas (a dot label's `\n`).
/// (The first part of a line always goes on it, however long.)
fn wrapped(ty: &str) -> String {
    let mut out = String::new();
    let mut line = 0;
    for part in ty.split_inclusive(", ") {
        if line > 0 && line + part.len() > 48 {
            out.truncate(out.trim_end().len());
            out.push_str("\\n");
            line = 0;
        }
        out.push_str(part);
        line += part.len();
    }
    out
}

fn mermaid(v: &View) -> String {
    let t = v.t;
    let mut o = String::from("flowchart TD\n");
    let id = |n: petgraph::graph::NodeIndex| format!("n{}", n.index());
    let store_id = |name: &str| format!("st{}", t.stores.iter().position(|s| s.name == name).unwrap_or(usize::MAX));
    let m = |s: &str| s.replace('"', "#quot;");
    for s in &v.subs {
        let sub = &t.subtopologies[*s];
        let _ = writeln!(o, "  subgraph s{}[\"sub-topology {} (query {})\"]", sub.id, sub.id, m(&sub.query));
        for n in &sub.nodes {
            let node = &t.graph[*n];
            let _ =
                writeln!(o, "    {}[\"{}<br/>{} · line {}\"]", id(*n), m(&node.name), node.kind.kind_name(), node.line);
            for st in &node.stores {
                let sid = store_id(st);
                let _ = writeln!(o, "    {sid}[(\"{}\")]\n    {} -.- {sid}", m(st), id(*n));
            }
        }
        let _ = writeln!(o, "  end");
    }
    for s in &v.subs {
        for n in &t.subtopologies[*s].nodes {
            for e in t.graph.edges_directed(*n, Direction::Outgoing) {
                let w = e.weight();
                match &w.mode {
                    EdgeMode::Forward => {
                        let _ = writeln!(
                            o,
                            "  {} -->|\"key {}\"| {}",
                            id(e.source()),
                            m(&w.key.to_string()),
                            id(e.target())
                        );
                    }
                    EdgeMode::Repartition { topic } => {
                        let _ = writeln!(
                            o,
                            "  {} ==>|\"{}<br/>key {}\"| {}",
                            id(e.source()),
                            m(topic),
                            m(&w.key.to_string()),
                            id(e.target())
                        );
                    }
                }
            }
        }
    }
    o
}

fn json(v: &View) -> serde_json::Value {
    use serde_json::json;
    let t = v.t;
    let subs: Vec<_> = v
        .subs
        .iter()
        .map(|s| {
            let sub = &t.subtopologies[*s];
            let nodes: Vec<_> = sub
                .nodes
                .iter()
                .map(|n| {
                    let node = &t.graph[*n];
                    let next: Vec<_> = t
                        .graph
                        .edges_directed(*n, Direction::Outgoing)
                        .map(|e| {
                            let w = e.weight();
                            let (mode, topic) = match &w.mode {
                                EdgeMode::Forward => ("forward", None),
                                EdgeMode::Repartition { topic } => ("repartition", Some(topic.clone())),
                            };
                            json!({"node": t.graph[e.target()].name, "mode": mode, "topic": topic, "key": w.key, "value": w.value})
                        })
                        .collect();
                    json!({
                        "name": node.name, "kind": node.kind.kind_name(), "description": node.kind.describe(),
                        "line": node.line, "clause": node.clause, "stores": node.stores, "next": next,
                    })
                })
                .collect();
            json!({"id": sub.id, "query": sub.query, "sources": sub.sources, "nodes": nodes})
        })
        .collect();
    let stores: Vec<_> = v
        .stores()
        .map(|s| {
            let (kind, window) = match &s.kind {
                StoreKind::KeyValue => ("key-value", serde_json::Value::Null),
                StoreKind::Window { window } => ("window", serde_json::to_value(window).unwrap_or_default()),
                StoreKind::JoinWindow { within, after, grace, outer } => (
                    "join-window",
                    json!({"before_ms": within.0, "after_ms": after.0, "grace_ms": grace.0, "outer": outer}),
                ),
                StoreKind::Global => ("global", serde_json::Value::Null),
                StoreKind::Grouped { grouping } => ("grouped", json!({ "grouping": grouping })),
                StoreKind::ForeignKey { join } => ("foreign-key", json!({ "join": join })),
            };
            json!({"name": s.name, "kind": kind, "window": window, "changelog": s.changelog, "node": s.node,
                   "subtopology": s.subtopology, "key": s.key, "value": s.value, "tenant_scoped": s.tenant_scoped})
        })
        .collect();
    let topics: Vec<_> = v
        .topics()
        .map(|tp| {
            let partitions = match &tp.partitions {
                Partitions::External => json!("existing"),
                Partitions::Fixed(n) => json!(n),
                Partitions::Like(topic) => json!({"like": topic}),
                Partitions::OfSubtopology(s) => json!({"max_of": t.subtopologies[*s].sources}),
            };
            json!({"name": tp.name, "role": tp.role.as_str(), "internal": tp.role.internal(), "compacted": tp.compacted, "partitions": partitions})
        })
        .collect();
    json!({"application": t.app, "subtopologies": subs, "stores": stores, "topics": topics})
}

#[cfg(test)]
mod tests {
    /// layout-rs's picture gets a generic font, and its height cut to what is drawn plus a
    /// margin; a picture already tight keeps its height.
    #[test]
    fn the_picture_gets_a_generic_font_and_no_empty_band() {
        let drawn = |height: u32| {
            format!(
                r##"<svg width="300" height="{height}" viewBox="0 0 300 {height}" xmlns="http://www.w3.org/2000/svg"><style>
.a14 {{ font-size: 14px; font-family: Times, serif; }}
</style><rect x="10" y="30" width="100" height="52" fill="#fff" /><ellipse cx="50" cy="100" rx="40" ry="17" /><text dominant-baseline="middle" x="50" y="120" class="a14"><tspan x="50" dy="1.0em">a</tspan></text><path d="M 10 20 C 10 40, 10 60, 10 130" /></svg>"##
            )
        };
        let out = super::finish_svg(drawn(800));
        assert!(out.contains("font-family: sans-serif;") && !out.contains("Times"), "{out}");
        // The lowest thing drawn: the label, from 120 over its line and one more (148), under the
        // path's end (130); then a margin of 20.
        assert!(out.contains(r#"<svg width="300" height="168" viewBox="0 0 300 168""#), "{out}");
        assert!(super::finish_svg(drawn(150)).contains(r#"height="150""#));
    }
}
