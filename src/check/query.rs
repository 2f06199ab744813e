//! Queries: the clauses in order, each giving a step of the query's plan and the shape of the records after it; joins and merged inputs.

use super::*;

impl Checker<'_> {
    /// Whether table `src` (a query's input, `from src`) may join `o` at this clause: a
    /// table–table join needs a topic-fed table on the other side, right after `from` (what
    /// comes before the join would have to be kept per key for updates of the other side).
    pub(super) fn table_join_allowed(
        &mut self,
        src: &hir::Source,
        o: &hir::Source,
        clause: Span,
        other: Span,
        after_steps: bool,
    ) -> bool {
        let refuse = |c: &mut Self, d: Diagnostic| {
            c.err(d);
            false
        };
        if o.kind == SourceKind::Stream {
            return refuse(
                self,
                Diagnostic::new(Code::JoinKind, other, format!("table `{}` cannot join stream `{}`", src.name, o.name))
                    .label("a stream")
                    .help(format!(
                        "a table joins tables; to look up `{}` for each record of `{}`, write `from {} join {} on …`",
                        src.name, o.name, o.name, src.name
                    )),
            );
        }
        if o.is_global() || src.is_global() {
            let name = if o.is_global() { &o.name } else { &src.name };
            return refuse(
                self,
                Diagnostic::new(Code::JoinKind, other, format!("`{name}` is a control-managed table"))
                    .label("no topic")
                    .help("a table–table join needs both tables read from topics (co-partitioned by their keys)"),
            );
        }
        if after_steps {
            return refuse(
                self,
                Diagnostic::new(Code::ClauseOrder, clause, "in a table–table join, `join` comes right after `from`")
                    .label("after other clauses")
                    .help("move the `where` or `select` after the join: they may use both tables' fields"),
            );
        }
        true
    }

    pub(super) fn lookup_source(&mut self, name: &ast::Ident) -> Option<usize> {
        if let Some(i) = self.sources.iter().position(|s| s.name == name.node) {
            return Some(i);
        }
        let names: Vec<&str> = self.sources.iter().map(|s| s.name.as_str()).collect();
        let help = did_you_mean(&name.node, names.iter().copied()).unwrap_or_else(|| {
            if names.is_empty() {
                "declare it first: `stream NAME from \"topic\" { … }`".to_string()
            } else {
                format!(
                    "declared streams and tables: {}",
                    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                )
            }
        });
        let mut d = Diagnostic::new(Code::UnknownSource, name.span, format!("unknown stream or table `{}`", name.node))
            .label("not declared")
            .help(help);
        if self.query_spans.contains_key(&name.node) {
            d = d.help(format!("`{}` is a query; read its output topic through a stream declaration", name.node));
        }
        self.err(d);
        None
    }

    /// The other streams of `from a, b, …`: each a stream (not a table) of the first one's key
    /// and value types, read once, with the same tenant scoping.
    pub(super) fn merged_inputs(&mut self, input: usize, names: &[ast::Ident]) -> Option<Vec<usize>> {
        let mut merged: Vec<usize> = Vec::new();
        let mut ok = true;
        let main = self.sources[input].clone();
        if !names.is_empty() && main.kind != SourceKind::Stream {
            self.err(
                Diagnostic::new(
                    Code::NotAStreamOrTable,
                    names[0].span,
                    format!("`{}` is a table: only streams merge", main.name),
                )
                .label("merged with a table")
                .help("merge streams; a table's updates can be joined (`join`) instead"),
            );
            return None;
        }
        for name in names {
            let Some(i) = self.lookup_source(name) else {
                ok = false;
                continue;
            };
            let other = self.sources[i].clone();
            let mut problem = |this: &mut Self, code: Code, msg: String, label: &str, help: String| {
                this.err(Diagnostic::new(code, name.span, msg).label(label.to_string()).help(help));
                ok = false;
            };
            if i == input || merged.contains(&i) {
                problem(
                    self,
                    Code::Duplicate,
                    format!("`{}` is merged twice", other.name),
                    "already read",
                    "name each stream once".into(),
                );
                continue;
            }
            if other.kind != SourceKind::Stream {
                let what = if other.is_global() { "a control-managed table" } else { "a table" };
                problem(
                    self,
                    Code::NotAStreamOrTable,
                    format!("`{}` is {what}: only streams merge", other.name),
                    "not a stream",
                    "join a table instead: `join T on …`".into(),
                );
                continue;
            }
            if other.key != main.key || other.key_type() != main.key_type() || other.key_format != main.key_format {
                problem(
                    self,
                    Code::TypeMismatch,
                    format!("`{}` is keyed by {}, `{}` by {}", other.name, key_desc(&other), main.name, key_desc(&main)),
                    "another key",
                    "merged streams are keyed alike: declare the same `key`, or merge after `key by` in a query of each".into(),
                );
                continue;
            }
            if other.value != main.value {
                problem(
                    self,
                    Code::TypeMismatch,
                    format!("`{}` has values {}, `{}` has {}", other.name, other.value, main.name, main.value),
                    "another value type",
                    "merged streams have one value type, field for field in the same order; `select` each into one shape in a query of its own first".into(),
                );
                continue;
            }
            if other.tenant.is_some() != main.tenant.is_some() {
                problem(
                    self,
                    Code::BadTenant,
                    format!("`{}` and `{}` differ in tenant scoping", other.name, main.name),
                    "tenant-scoped on one side only",
                    "merge streams that are both tenant-scoped, or neither".into(),
                );
                continue;
            }
            merged.push(i);
        }
        ok.then_some(merged)
    }

    pub(super) fn query(&mut self, decl: &ast::QueryDecl) -> Option<hir::Query> {
        let mut clauses = decl.clauses.iter();
        let first = clauses.next();
        let (from, merge_names, alias) = match first.map(|c| &c.node) {
            Some(Clause::From { inputs, alias }) if !inputs.is_empty() => (&inputs[0], &inputs[1..], alias),
            Some(other) => {
                let first = first.map(|c| c.span).unwrap_or(decl.name.span);
                self.err(
                    Diagnostic::new(
                        Code::MissingFrom,
                        first,
                        format!("query `{}` must start with `from`", decl.name.node),
                    )
                    .label(format!("`{}` before any `from`", other.keyword()))
                    .help("the first clause names the input: `from trades`"),
                );
                return None;
            }
            None => {
                self.err(
                    Diagnostic::new(Code::MissingFrom, decl.name.span, format!("query `{}` is empty", decl.name.node))
                        .label("no clauses")
                        .help("a query reads `from` a stream and writes `to` a topic"),
                );
                return None;
            }
        };
        let input = self.lookup_source(from)?;
        let src = self.sources[input].clone();
        if src.is_global() {
            self.err(
                Diagnostic::new(
                    Code::NotAStreamOrTable,
                    from.span,
                    format!("`{}` is a control-managed table", from.node),
                )
                .label("has no topic to read")
                .help(format!("join it instead: `join {} on …`", from.node)),
            );
            return None;
        }
        let merged = self.merged_inputs(input, merge_names)?;
        let shape = Shape {
            key: src.key_type(),
            value: src.value.clone(),
            key_name: match &src.key {
                KeySpec::Named(n, _) => Some(n.clone()),
                _ => None,
            },
            key_field: match &src.key {
                KeySpec::Field(i) => Some(*i),
                _ => None,
            },
            // Keys in the wire format are partitioned by their encoded bytes (schema id included),
            // not by the key: a `group by` or a join repartitions by the key's text first.
            partitioned: src.key_format.is_none(),
            joined: Vec::new(),
            table: src.kind == SourceKind::Table,
            windowed: false,
            tenant_scoped: src.tenant.is_some(),
        };
        let mut q = QueryState {
            name: &decl.name,
            // The name the input goes by in the query: its own, or the one `as` gives it.
            from_name: alias.as_ref().map(|a| a.node.clone()).unwrap_or_else(|| src.name.clone()),
            src,
            input,
            merged,
            merge_names,
            shape,
            steps: Vec::new(),
            joined_in: Vec::new(),
            foreign_join: None,
            refused_group: false,
            cuts: 0,
            slugs: HashSet::new(),
            group: None,
            window: None,
            aggregated: None,
            emitted: false,
            sinks: Vec::new(),
            ok: true,
        };
        for c in clauses {
            if !self.after_to(&mut q, c) {
                continue;
            }
            match &c.node {
                Clause::From { .. } => self.second_from(&mut q, c),
                Clause::Where(..) => self.where_clause(&mut q, c),
                Clause::Select(..) => self.select_clause(&mut q, c),
                Clause::KeyBy(..) => self.key_by_clause(&mut q, c),
                Clause::GroupBy(..) => self.group_by_clause(&mut q, c),
                Clause::Window { .. } => self.window_clause(&mut q, c),
                Clause::Aggregate(..) => self.aggregate_clause(&mut q, c),
                Clause::Emit(..) => self.emit_clause(&mut q, c),
                Clause::Join { .. } => self.join_clause(&mut q, c),
                Clause::To { .. } => self.sink_clause(&mut q, c),
            }
        }
        if let Some((_, gspan, _, _)) = q.group {
            self.err(group_without_aggregate(gspan));
            return None;
        }
        if q.sinks.is_empty() {
            if q.ok {
                self.err(
                    Diagnostic::new(
                        Code::MissingSink,
                        decl.name.span,
                        format!("query `{}` has no `to`", decl.name.node),
                    )
                    .label("its results go nowhere")
                    .help("end the query with `to \"topic\"`"),
                );
            }
            return None;
        }
        if !q.ok {
            return None;
        }
        let from_line = first.map(|c| self.line(c.span)).unwrap_or(0);
        Some(hir::Query {
            name: decl.name.node.clone(),
            span: decl.span,
            line: self.line(decl.span),
            from_line,
            input: q.input,
            merged: q.merged,
            steps: q.steps,
            sinks: q.sinks,
        })
    }

    /// After a `to`, only another `to` may come, and only if the one before it has a `when`
    /// (false: the clause is refused).
    fn after_to(&mut self, q: &mut QueryState, c: &Node<Clause>) -> bool {
        let Some(last) = q.sinks.last() else { return true };
        if !matches!(c.node, Clause::To { .. }) {
            self.err(
                Diagnostic::new(Code::ClauseOrder, c.span, format!("`{}` after `to`", c.node.keyword()))
                    .label("nothing can follow `to`")
                    .help("`to` is the last clause of a query (several `to … when` branches may end it)"),
            );
            q.ok = false;
            return false;
        }
        if last.when.is_none() {
            let last = last.span;
            self.err(
                Diagnostic::new(Code::ClauseOrder, c.span, "this `to` is never reached")
                    .label("every record went to the `to` before it")
                    .related(last, "this `to` takes every record")
                    .help(
                        "branch with conditions: `to \"big\" when amount > 1000` before the `to` that takes the rest",
                    ),
            );
            q.ok = false;
            return false;
        }
        true
    }

    /// A clause out of order.
    fn order_err(&mut self, span: Span, msg: &str, help: &str) {
        self.err(
            Diagnostic::new(Code::ClauseOrder, span, msg.to_string()).label("out of order").help(help.to_string()),
        );
    }

    /// A second `from`: refused.
    fn second_from(&mut self, q: &mut QueryState, c: &Node<Clause>) {
        let Clause::From { .. } = &c.node else { return };
        self.err(
            Diagnostic::new(Code::DuplicateClause, c.span, "a query has one `from`")
                .label("second `from`")
                .help("combine inputs with `join`, or merge streams in the first: `from a, b`"),
        );
        q.ok = false;
    }

    /// `where`: a filter (on a table, a row that stops matching is deleted downstream).
    fn where_clause(&mut self, q: &mut QueryState, c: &Node<Clause>) {
        let Clause::Where(e) = &c.node else { return };
        if q.group.is_some() {
            self.order_err(
                c.span,
                "`where` between `group by` and `aggregate`",
                "filter before `group by`, or after `aggregate` to filter the table",
            );
            q.ok = false;
            return;
        }
        let he = self.expr(e, &Scope::Row { shape: &q.shape, from: &q.from_name });
        self.expect_bool(&he, "`where`");
        q.push(self, c.span, StepKind::Filter(he), "where");
    }

    /// `select`: a map, or a flat map with `explode` items (zipped).
    fn select_clause(&mut self, q: &mut QueryState, c: &Node<Clause>) {
        let Clause::Select(items) = &c.node else { return };
        if q.group.is_some() {
            self.order_err(
                c.span,
                "`select` between `group by` and `aggregate`",
                "map before `group by`, or after `aggregate`",
            );
            q.ok = false;
            return;
        }
        // `name = explode(list)`: a flat map, one record per item.
        let explodes: Vec<(usize, &Node<ast::Expr>)> = items
            .iter()
            .enumerate()
            .filter_map(|(i, it)| match &it.node {
                ast::SelectItem::Named(_, e) => exploded(e).map(|arg| (i, arg)),
                _ => None,
            })
            .collect();
        let Some(&(at_item, _)) = explodes.first() else {
            let (fields, out) = self.select(items, &q.shape, &q.from_name);
            q.shape = out;
            q.push(self, c.span, StepKind::Map(fields), "select");
            return;
        };
        let span = items[at_item].span;
        let refuse = |this: &mut Self, span: Span, msg: &str, help: &str| {
            this.err(Diagnostic::new(Code::Explode, span, msg.to_string()).label("here").help(help.to_string()));
        };
        if q.shape.table || q.aggregated.is_some() {
            refuse(
                self,
                span,
                "`explode` on a table",
                "a table's rows (and an aggregate's results) are one per key: explode the records of a stream",
            );
            q.ok = false;
            return;
        }
        // Each list itself in its item's place, then its item type for the field.
        // Several are zipped (ksqlDB's table functions): past a shorter list's end
        // its field is null.
        let mut plain = items.to_vec();
        let mut names = Vec::new();
        for &(i, arg) in &explodes {
            if let ast::SelectItem::Named(n, _) = &items[i].node {
                plain[i] = Node::new(items[i].span, ast::SelectItem::Named(n.clone(), arg.clone()));
                names.push((n.node.clone(), arg.span));
            }
        }
        let (fields, mut out) = self.select(&plain, &q.shape, &q.from_name);
        let mut at = Vec::new();
        for (name, arg_span) in names {
            let Some(i) = fields.iter().position(|(n, _)| *n == name) else {
                q.ok = false;
                continue;
            };
            let item = match fields[i].1.ty.base() {
                Type::List(t) => Some((**t).clone()),
                Type::Error => Some(Type::Error),
                _ => None,
            };
            let Some(item) = item else {
                refuse(
                    self,
                    arg_span,
                    &format!("`explode` takes a list, not a {}", fields[i].1.ty),
                    "explode a list field, or `split(text, \",\")`",
                );
                q.ok = false;
                continue;
            };
            out.value.fields[i].1 = if explodes.len() > 1 { item.nullable() } else { item };
            if out.key_field == Some(i) {
                out.key_field = None;
            }
            at.push(i);
        }
        if at.len() != explodes.len() {
            return;
        }
        q.shape = out;
        q.push(self, c.span, StepKind::Explode { fields, at }, "select");
    }

    /// `key by`: a new key (a stateful clause after it repartitions).
    fn key_by_clause(&mut self, q: &mut QueryState, c: &Node<Clause>) {
        let Clause::KeyBy(e) = &c.node else { return };
        if q.group.is_some() || q.shape.table {
            self.order_err(c.span, "`key by` after `group by` or on a table", "re-key the stream before grouping it");
            q.ok = false;
            return;
        }
        let he = self.expr(e, &Scope::Row { shape: &q.shape, from: &q.from_name });
        self.expect_key(&he, "a `key by` expression");
        q.shape.key = he.ty.clone();
        q.shape.key_name = None;
        q.shape.key_field = value_field(&he);
        q.shape.partitioned = false;
        q.push(self, c.span, StepKind::Rekey(he), "key-by");
    }

    /// `group by`: the grouping the next `aggregate` uses (a table's rows regrouped, a repartition when the key changes).
    fn group_by_clause(&mut self, q: &mut QueryState, c: &Node<Clause>) {
        let Clause::GroupBy(items) = &c.node else { return };
        if let Some(fk) = q.foreign_join {
            self.err(
                Diagnostic::new(Code::ClauseOrder, c.span, "`group by` after a foreign-key join")
                    .label("grouping the join's result")
                    .related(fk, "the foreign-key join")
                    .help("write the join's result to a topic and read it as a table, then group that"),
            );
            q.ok = false;
            q.refused_group = true;
            return;
        }
        if q.aggregated.is_some() {
            self.order_err(c.span, "`group by` after `aggregate`", "a query aggregates once; group before `aggregate`");
            q.ok = false;
            return;
        }
        if q.group.is_some() {
            self.err(
                Diagnostic::new(Code::DuplicateClause, c.span, "a second `group by`")
                    .label("already grouped")
                    .help("list every grouping in one `group by a, b`"),
            );
            q.ok = false;
            return;
        }
        // A key that is no field of the value (`key id: int`) would read as the
        // q.group key after the repartition: unless the grouping is that key alone, it
        // travels in the value instead, as a field of its name, which the q.group items
        // and aggregates then read (ksqlDB's key columns stay readable after GROUP BY).
        let key_alone = matches!(items.as_slice(), [g] if g.alias.is_none()
                && matches!(&g.expr.node, ast::Expr::Path(p) if p.len() == 1 && Some(&p[0].node) == q.shape.key_name.as_ref()));
        if let Some(k) = q.shape.key_name.clone().filter(|k| !key_alone && q.shape.value.get(k).is_none()) {
            q.shape.value.fields.push((k.clone(), q.shape.key.clone()));
            q.shape.key_name = None;
            q.shape.key_field = Some(q.shape.value.fields.len() - 1);
            q.push(self, c.span, StepKind::KeyAsField(k), "key-as-field");
        }
        let mut out = Vec::new();
        for g in items {
            let he = self.expr(&g.expr, &Scope::Row { shape: &q.shape, from: &q.from_name });
            self.expect_key(&he, "a `group by` expression");
            let name = match (&g.alias, &g.expr.node) {
                (Some(a), _) => a.node.clone(),
                (None, ast::Expr::Path(p)) => p.last().map(|i| i.node.clone()).unwrap_or_default(),
                _ => {
                    self.err(
                        Diagnostic::new(Code::GroupNeedsName, g.expr.span, "this grouping needs a name")
                            .label("not a plain field")
                            .help("name it with `as`: `group by lower(ticker) as ticker`"),
                    );
                    String::new()
                }
            };
            if out.iter().any(|(n, _): &(String, hir::Expr)| *n == name) && !name.is_empty() {
                self.err(
                    Diagnostic::new(Code::Duplicate, g.expr.span, format!("`{name}` is grouped twice"))
                        .label("duplicate"),
                );
            }
            out.push((name, he));
        }
        let is_key = out.len() == 1 && {
            let e = &out[0].1;
            matches!(&e.kind, ExprKind::Field(Root::Key, p) if p.is_empty())
                || (value_field(e).is_some() && value_field(e) == q.shape.key_field)
        };
        let repartition = !(is_key && q.shape.partitioned);
        q.group = Some((out, c.span, repartition, q.shape.table));
    }

    /// `window`: the window of the next `aggregate`.
    fn window_clause(&mut self, q: &mut QueryState, c: &Node<Clause>) {
        let Clause::Window { kind, grace, tz } = &c.node else { return };
        if q.aggregated.is_some() {
            self.order_err(c.span, "`window` after `aggregate`", "write the window between `group by` and `aggregate`");
            q.ok = false;
            return;
        }
        if q.group.is_none() {
            self.err(
                Diagnostic::new(Code::WindowWithoutGroup, c.span, "`window` without `group by`")
                    .label("nothing is grouped here")
                    .help("windows are per key: write `group by FIELD` before `window`"),
            );
            q.ok = false;
            return;
        }
        if q.window.is_some() {
            self.err(Diagnostic::new(Code::DuplicateClause, c.span, "a second `window`").label("already windowed"));
            q.ok = false;
            return;
        }
        if q.group.as_ref().is_some_and(|g| g.3) {
            self.err(
                    Diagnostic::new(Code::NoUndo, c.span, format!("a window over the table `{}`", q.from_name))
                        .label("a table's rows are not events in time")
                        .help("aggregate the table's rows as they are now (no window), or declare its topic as a `stream` to window its records"),
                );
            q.ok = false;
            return;
        }
        self.check_window(kind, c.span);
        let tz = tz.as_ref().and_then(|z| self.check_zone(kind, z));
        let w = hir::Window { kind: *kind, grace: grace.as_ref().map(|g| g.node).unwrap_or(Duration(0)), tz };
        q.window = Some((w, c.span));
    }

    /// `aggregate`: the grouping, its window and its aggregates become one step; the shape is the result table's.
    fn aggregate_clause(&mut self, q: &mut QueryState, c: &Node<Clause>) {
        let Clause::Aggregate(items) = &c.node else { return };
        if q.aggregated.is_some() {
            self.err(
                Diagnostic::new(Code::DuplicateClause, c.span, "a second `aggregate`")
                    .label("already aggregated")
                    .help("a query aggregates once; list every aggregate in one block"),
            );
            q.ok = false;
            return;
        }
        let Some((gitems, gspan, repartition, grouped_table)) = q.group.take() else {
            if q.refused_group {
                q.ok = false;
                return;
            }
            self.err(
                Diagnostic::new(Code::AggregateWithoutGroup, c.span, "`aggregate` without `group by`")
                    .label("nothing is grouped here")
                    .help("write `group by FIELD` before `aggregate`"),
            );
            q.ok = false;
            return;
        };
        let win = q.window.take();
        let aggs = self.aggregates_clause(items, &q.shape, &q.from_name, &gitems, win.as_ref().map(|w| w.0));

        let mut value = RecordType::default();
        if win.is_some() {
            for f in WINDOW_FIELDS {
                value.fields.push((f.to_string(), Type::Timestamp));
            }
        }
        for (n, e) in &gitems {
            value.fields.push((n.clone(), e.ty.clone()));
        }
        for a in &aggs {
            value.fields.push((a.name.clone(), a.ty.clone()));
        }
        let key = if gitems.len() == 1 {
            gitems[0].1.ty.clone()
        } else {
            Type::Tuple(gitems.iter().map(|(_, e)| e.ty.clone()).collect())
        };
        let key_field = (gitems.len() == 1).then(|| value.index_of(&gitems[0].0)).flatten();
        let group_slug = format!("group-by-{}", gitems.iter().map(|(n, _)| slugify(n)).collect::<Vec<_>>().join("-"));
        q.shape = Shape {
            key,
            value,
            key_name: None,
            key_field,
            partitioned: true,
            joined: Vec::new(),
            table: true,
            windowed: win.is_some(),
            tenant_scoped: q.shape.tenant_scoped,
        };
        let step = hir::AggregateStep {
            group: gitems,
            group_slug,
            group_line: self.line(gspan),
            group_text: self.text(gspan),
            identity: (self.whole_text(gspan), self.whole_text(c.span)),
            repartition,
            table: grouped_table,
            window: win.map(|w| w.0),
            aggs,
            emit: EmitMode::Changes,
            idle: None,
        };
        q.push(self, c.span, StepKind::Aggregate(Box::new(step)), "aggregate");
        q.aggregated = Some(q.steps.len() - 1);
        // The aggregate's rows are a new table: the q.input stream's name is out of scope.
        q.from_name.clear();
    }

    /// `emit changes` / `emit final [idle D]` after a windowed `aggregate`.
    fn emit_clause(&mut self, q: &mut QueryState, c: &Node<Clause>) {
        let Clause::Emit(mode, idle) = &c.node else { return };
        if q.emitted {
            self.err(
                Diagnostic::new(Code::DuplicateClause, c.span, "a second `emit`")
                    .label("already set")
                    .help("choose one: `emit changes` or `emit final`"),
            );
            q.ok = false;
            return;
        }
        let Some(i) = q.aggregated.filter(|i| *i + 1 == q.steps.len()) else {
            self.order_err(
                c.span,
                "`emit` must follow `aggregate`",
                "`emit changes` or `emit final` says how an aggregate's results are sent",
            );
            q.ok = false;
            return;
        };
        q.emitted = true;
        if let StepKind::Aggregate(a) = &mut q.steps[i].kind {
            if *mode == EmitMode::Final && a.window.is_none() {
                self.err(
                        Diagnostic::new(Code::EmitWithoutWindow, c.span, "`emit final` needs a window")
                            .label("this aggregate has no window")
                            .help("`emit final` emits each window once when it closes; without a window nothing closes. Use `emit changes`"),
                    );
                q.ok = false;
            }
            a.emit = *mode;
            if let Some(d) = idle {
                if d.node.0 <= 0 {
                    self.err(
                        Diagnostic::new(Code::BadDuration, d.span, "an idle time of zero")
                            .label("must be positive")
                            .help("how long without input before windows close by the clock, e.g. `idle 30s`"),
                    );
                    q.ok = false;
                }
                a.idle = Some(d.node.0);
            }
            q.steps[i].span = q.steps[i].span.to(c.span);
        }
    }

    /// `join`: stream–table, stream–stream, table–table on the key (several in a row) and foreign-key joins.
    fn join_clause(&mut self, q: &mut QueryState, c: &Node<Clause>) {
        let Clause::Join { left, outer, other, alias, within, after, grace, on } = &c.node else { return };
        // (Joins of tables on the key may follow one another: an n-way join.)
        let after_steps = q.steps.iter().any(|s| !matches!(s.kind, StepKind::JoinTable { mutual: true, .. }));
        if q.group.is_some() || q.aggregated.is_some() {
            self.order_err(c.span, "`join` after `group by`", "join the stream before grouping it");
            q.ok = false;
            return;
        }
        let Some(oi) = self.lookup_source(other) else {
            q.ok = false;
            return;
        };
        let o = self.sources[oi].clone();
        // A table joined with a table (Kafka Streams' KTable–KTable join): an update
        // of either side gives the key's new result.
        let mutual = q.shape.table;
        if mutual && !self.table_join_allowed(&q.src, &o, c.span, other.span, after_steps) {
            q.ok = false;
            return;
        }
        // The name the joined side goes by: its own, or the one `as` gives it.
        let name = alias.as_ref().map(|a| a.node.clone()).unwrap_or_else(|| o.name.clone());
        let name_span = alias.as_ref().map(|a| a.span).unwrap_or(other.span);
        if mutual && o.name == q.src.name {
            self.err(
                    Diagnostic::new(
                        Code::JoinKind,
                        other.span,
                        format!("the table `{}` joined with itself", o.name),
                    )
                    .label("the same table")
                    .help("a table is not joined with itself: on the key each row would pair with itself, and a foreign-key join of a table with itself is not supported yet"),
                );
            q.ok = false;
            return;
        }
        let merged_name = q.merge_names.iter().any(|m| m.node == name);
        if name == q.from_name || merged_name || q.shape.joined.iter().any(|j| j.name == name) {
            self.err(
                    Diagnostic::new(Code::JoinKind, name_span, format!("`{name}` is already in this query"))
                        .label("joined again under the same name")
                        .help(format!(
                            "name each side with `as` (a self-join names both): `from {} as a join {} as b …`, then `a.field` and `b.field`",
                            q.src.name, o.name
                        )),
                );
            q.ok = false;
            return;
        }
        if o.kind == SourceKind::Stream && o.key == KeySpec::Raw {
            self.err(
                    Diagnostic::new(Code::JoinKey, other.span, format!("stream `{}` declares no key", o.name))
                        .label("its records' keys are unknown")
                        .help(format!("a join matches `on` against the other side's key: declare one in `stream {}`, e.g. `key order_id`", o.name)),
                );
            q.ok = false;
            return;
        }
        let he = self.expr(on, &Scope::Row { shape: &q.shape, from: &q.from_name });
        if !self.join_side_checks(q, c, &o, &he, mutual) {
            q.ok = false;
            return;
        }
        let is_key = matches!(&he.kind, ExprKind::Field(Root::Key, p) if p.is_empty())
            || (value_field(&he).is_some() && value_field(&he) == q.shape.key_field);
        // A table–table join on anything but the key is a foreign-key join (Kafka
        // Streams' `KTable#join(other, foreignKeyExtractor, joiner)`): `on` gives
        // the other table's key from this table's row.
        let foreign = mutual && !(is_key && q.shape.partitioned);
        // Several tables joined on the key in a row (an n-way join) are one task's
        // inputs; a foreign-key join joins one other table.
        if mutual && (foreign || q.foreign_join.is_some()) && !q.shape.joined.is_empty() {
            let mut d = Diagnostic::new(Code::ClauseOrder, c.span, "a foreign-key join joins one other table")
                    .label(if foreign { "a foreign-key join after a join" } else { "a second join" })
                    .help("join several tables on the key in a row, or write a foreign-key join's result to a topic and read it as a table");
            if let Some(fk) = q.foreign_join {
                d = d.related(fk, "the foreign-key join");
            }
            self.err(d);
            q.ok = false;
            return;
        }
        if foreign && !he.ty.is_error() {
            if !self.foreign_join_allowed(q, c) {
                q.ok = false;
                return;
            }
            q.foreign_join = Some(c.span);
        }
        let repartition = !(o.is_global() || is_key && q.shape.partitioned || foreign);
        // A source read twice by one task (joined twice with no repartition between)
        // would share one read position: refused. The query's own stream before any
        // repartition is read once for all its self-joins; a control-managed table
        // is not read at all.
        let generation = q.cuts + repartition as u32;
        let own_input = o.name == q.src.name || q.merged.contains(&oi);
        if !o.is_global() && q.joined_in.contains(&(oi, generation)) && !(own_input && generation == 0) {
            self.err(
                    Diagnostic::new(Code::JoinKind, other.span, format!("`{}` is joined twice", o.name))
                        .label("joined again")
                        .help("join a source once and use its fields where needed (a query's own stream can be joined again before any repartition: a self-join)"),
                );
            q.ok = false;
            return;
        }
        q.joined_in.push((oi, generation));
        q.cuts = generation;
        if repartition {
            q.shape.key = he.ty.clone();
            q.shape.key_field = value_field(&he);
            q.shape.key_name = None;
            q.shape.partitioned = true;
        }
        if *outer {
            // A record of the other side with no match comes with this side null:
            // every field so far may be null (the key is the join key either way;
            // in a table–table join the table's key field holds it too).
            let keeps = if mutual { q.shape.key_field } else { None };
            for (i, (_, t)) in q.shape.value.fields.iter_mut().enumerate() {
                if Some(i) != keeps {
                    *t = t.clone().nullable();
                }
            }
            for j in q.shape.joined.iter_mut() {
                j.optional = true;
            }
        }
        q.shape.joined.push(Joined {
            name: name.clone(),
            value: o.value.clone(),
            key: o.key_name().map(|n| (n.to_string(), o.key_type())),
            optional: *left || *outer,
        });
        let kind = match o.kind {
            SourceKind::Table => {
                StepKind::JoinTable { table: oi, on: he, left: *left, outer: *outer, mutual, foreign, repartition }
            }
            SourceKind::Stream => StepKind::JoinStream {
                stream: oi,
                within: within.as_ref().map(|w| w.node).unwrap_or(Duration(0)),
                after: after.as_ref().or(within.as_ref()).map(|w| w.node).unwrap_or(Duration(0)),
                grace: grace.as_ref().map(|g| g.node).unwrap_or(Duration(0)),
                on: he,
                left: *left || *outer,
                outer: *outer,
                repartition,
            },
        };
        q.push(self, c.span, kind, &format!("join-{}", slugify(&name)));
    }

    /// Whether the other side `o` of a join fits: `within` for a stream only, no outer join of
    /// a table by a stream, keys not in the wire format, `on` of its key's type, tenants alike
    /// (false: refused, the errors reported; a key of the wrong type is reported, not refused).
    fn join_side_checks(
        &mut self,
        q: &QueryState,
        c: &Node<Clause>,
        o: &hir::Source,
        he: &hir::Expr,
        mutual: bool,
    ) -> bool {
        let Clause::Join { outer, other, within, on, .. } = &c.node else { return false };
        match (o.kind, within) {
            (SourceKind::Stream, None) => self.err(
                Diagnostic::new(Code::JoinKind, other.span, format!("joining stream `{}` needs `within`", o.name))
                    .label("a stream–stream join")
                    .help(format!("say how far apart matching records may be: `join {} within 5m on …`", o.name)),
            ),
            (SourceKind::Table, Some(w)) => self.err(
                Diagnostic::new(
                    Code::JoinKind,
                    w.span,
                    format!("`{}` is a table: `within` is only for stream–stream joins", o.name),
                )
                .label("not allowed here")
                .help(if mutual {
                    "a table–table join matches the tables' current rows; remove `within`"
                } else {
                    "a stream–table join looks up the table's current value; remove `within`"
                }),
            ),
            (SourceKind::Table, None) if *outer && !mutual => self.err(
                Diagnostic::new(
                    Code::JoinKind,
                    c.span,
                    format!("`{}` is a table: `outer join` is only for stream–stream joins", o.name),
                )
                .label("an outer join of a table")
                .help("use `left join` to keep every record of the stream"),
            ),
            _ => {}
        }
        // A side whose records are partitioned by keys in the wire format cannot be
        // lined up with the other side's partitions (its own, or a repartition's by
        // the key's text): refused, with the way round.
        let wire_keyed = if o.key_format.is_some() {
            Some(o)
        } else if mutual && q.src.key_format.is_some() {
            Some(&q.src)
        } else {
            None
        };
        if let Some(w) = wire_keyed {
            let f = w.key_format.unwrap_or(Format::Avro);
            self.err(
                    Diagnostic::new(
                        Code::JoinKind,
                        other.span,
                        format!("`{}`'s keys are {f}: a join cannot line up its partitions", w.name),
                    )
                    .label(format!("keyed by {f} bytes"))
                    .help(format!(
                        "its records are partitioned by their encoded keys (schema id included), not by the key: copy it to a topic keyed by text (a query `from {} … to \"{}-by-key\"`) and join that",
                        w.name,
                        w.topic.as_deref().unwrap_or(&w.name)
                    )),
                );
            return false;
        }
        let okey = o.key_type();
        if !he.ty.is_error() && (he.ty.base() != okey.base() || !he.ty.base().is_scalar()) {
            self.err(
                Diagnostic::new(
                    Code::JoinKey,
                    on.span,
                    format!("`on` gives a {}, but `{}` is keyed by {}", he.ty, o.name, okey),
                )
                .label(format!("a {}", he.ty))
                .help(format!("`on` is the expression matched against `{}`'s key", o.name)),
            );
        }
        if !o.is_global() && (o.tenant.is_some() != q.shape.tenant_scoped) {
            self.err(
                Diagnostic::new(Code::BadTenant, other.span, "joining tenant-scoped and unscoped data")
                    .label(format!("`{}` is {}tenant-scoped", o.name, if o.tenant.is_some() { "" } else { "not " }))
                    .help("both sides of a join must declare a tenant, or neither"),
            );
        }
        true
    }

    /// Whether a foreign-key join may be written here: not outer, not of tenant-scoped tables,
    /// the table's key declared (false: refused, the error reported).
    fn foreign_join_allowed(&mut self, q: &QueryState, c: &Node<Clause>) -> bool {
        let Clause::Join { outer, other, .. } = &c.node else { return false };
        let refusal = if *outer {
            Some((
                c.span,
                "a foreign-key join is `join` or `left join`",
                "an outer join",
                "as in Kafka Streams and ksqlDB, a foreign-key join has no outer form",
            ))
        } else if q.shape.tenant_scoped {
            Some((
                other.span,
                "a foreign-key join of tenant-scoped tables",
                "tenant-scoped",
                "foreign-key joins are not supported for tenant-scoped tables yet; join on the key",
            ))
        } else if q.src.key == KeySpec::Raw {
            Some((
                c.span,
                "a foreign-key join needs the table's key declared",
                "no declared key",
                "declare the key: `key id` or `key id: string`",
            ))
        } else {
            None
        };
        if let Some((span, msg, label, help)) = refusal {
            self.err(Diagnostic::new(Code::JoinKind, span, msg).label(label).help(help));
            return false;
        }
        true
    }

    /// `to`: a sink (several with `when` are branches, first match wins).
    fn sink_clause(&mut self, q: &mut QueryState, c: &Node<Clause>) {
        let Clause::To { topic, format, key_format, windowed, when } = &c.node else { return };
        if let Some((_, gspan, _, _)) = &q.group {
            self.err(group_without_aggregate(*gspan));
            q.group = None;
            q.ok = false;
        }
        if !valid_topic(&topic.node) {
            self.err(
                Diagnostic::new(Code::BadTopic, topic.span, format!("`{}` is not a valid topic name", topic.node))
                    .label("invalid topic name")
                    .help("topic names are 1 to 249 characters of ASCII letters, digits, `.`, `_` and `-`"),
            );
        }
        let reads: Vec<&str> = std::iter::once(q.src.topic.as_deref())
            .chain(q.steps.iter().map(|st| match &st.kind {
                StepKind::JoinTable { table, .. } => self.sources[*table].topic.as_deref(),
                StepKind::JoinStream { stream, .. } => self.sources[*stream].topic.as_deref(),
                _ => None,
            }))
            .flatten()
            .collect();
        if reads.contains(&topic.node.as_str()) {
            self.err(
                Diagnostic::new(
                    Code::BadTopic,
                    topic.span,
                    format!("query `{}` writes to `{}`, which it reads", q.name.node, topic.node),
                )
                .label("a feedback loop")
                .help("write the results to another topic"),
            );
        }
        let csv_sink = matches!(format.as_ref().map(|f| f.node), Some(Format::Csv(_)));
        if q.shape.tenant_scoped && q.shape.value.get("tenant").is_some() && !csv_sink {
            self.err(
                Diagnostic::new(Code::ReservedName, c.span, "the output of a tenant-scoped query has a field `tenant`")
                    .label("streamc adds the record's tenant as `tenant`")
                    .help("rename the field"),
            );
        }
        let fmt = self.sink_format(q, c);
        if let (Some(wspan), false) = (windowed, q.shape.windowed) {
            self.err(
                    Diagnostic::new(
                        Code::WindowedKeyWithoutWindow,
                        *wspan,
                        "`windowed` needs the results of a windowed aggregate",
                    )
                    .label("these results have no window")
                    .help("`to \"topic\" windowed` keys each result by [key, window_start, window_end]; add a `window` to the aggregate, or drop `windowed`"),
                );
        }
        let when = when.as_ref().map(|e| {
            let he = self.expr(e, &Scope::Row { shape: &q.shape, from: &q.from_name });
            self.expect_bool(&he, "`when`");
            he
        });
        if when.is_some() && q.src.kind == SourceKind::Table && q.aggregated.is_none() {
            self.err(
                Diagnostic::new(
                    Code::ClauseOrder,
                    c.span,
                    "a query over the table `".to_string() + &q.from_name + "` writes one table",
                )
                .label("a branch of a table")
                .help("filter it with `where` (rows it drops are deleted downstream), or write one query per branch"),
            );
            q.ok = false;
        }
        let windowed = windowed.is_some() && q.shape.windowed;
        if let Some(first) = q.sinks.first() {
            if first.windowed != windowed {
                self.err(
                    Diagnostic::new(
                        Code::WindowedKeyWithoutWindow,
                        c.span,
                        "branches of one query key their results alike",
                    )
                    .label(if windowed { "windowed here" } else { "not windowed here" })
                    .related(first.span, if first.windowed { "windowed here" } else { "not windowed here" })
                    .help("write `windowed` on every `to` of the query, or on none"),
                );
                q.ok = false;
            }
        }
        q.sinks.push(hir::Sink {
            topic: topic.node.clone(),
            format: fmt,
            key_format: key_format.as_ref().map(|f| f.node),
            windowed,
            when,
            span: c.span,
            line: self.line(c.span),
            text: self.text(c.span),
        });
    }

    /// A sink's formats: what its key format and value format can write of the records
    /// (scalar keys in the wire format, one field for `string`, scalar columns for `csv`, the
    /// names and types Avro and Protobuf hold); the value's format.
    fn sink_format(&mut self, q: &QueryState, c: &Node<Clause>) -> Format {
        let Clause::To { format, key_format, windowed, .. } = &c.node else { return Format::Json };
        let fmt = format.as_ref().map(|f| f.node).unwrap_or(Format::Json);
        // Keys in the wire format: one scalar value each (null: no key), not the
        // JSON arrays of a windowed key or a tenant's key.
        if let Some(kf) = key_format {
            let why = if !q.shape.key.base().is_scalar() {
                Some(format!("the output key is a {}: a key in the wire format is one scalar value", q.shape.key))
            } else if windowed.is_some() {
                Some("a windowed key is a JSON array `[key, window_start, window_end]`".to_string())
            } else if q.shape.tenant_scoped {
                Some("a tenant-scoped query's key is a JSON array `[tenant, key]`".to_string())
            } else {
                None
            };
            if let Some(why) = why {
                self.err(
                    Diagnostic::new(Code::BadFormat, kf.span, format!("no {} key: {why}", kf.node))
                        .label(format!("{} keys", kf.node))
                        .help(
                            "key the output by one scalar (`group by` one field, `key by`), or drop the key's format",
                        ),
                );
            }
        }
        if fmt == Format::String && q.shape.value.fields.len() != 1 {
            let n = q.shape.value.fields.len();
            self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    c.span,
                    format!("the string format writes one field; this value has {n}"),
                )
                .label("string sink")
                .help("`select` the one field to write, or write `json`"),
            );
        }
        if let Format::Csv(_) = fmt {
            let nested: Vec<&str> = q
                .shape
                .value
                .fields
                .iter()
                .filter(|(_, t)| !(t.is_scalar() || *t == Type::Null))
                .map(|(n, _)| n.as_str())
                .chain(q.shape.joined.iter().map(|j| j.name.as_str()))
                .collect();
            if !nested.is_empty() {
                self.err(
                    Diagnostic::new(
                        Code::BadFormat,
                        format.as_ref().map(|f| f.span).unwrap_or(c.span),
                        format!(
                            "csv writes scalar columns; {} not scalar",
                            match nested.as_slice() {
                                [one] => format!("`{one}` is"),
                                more => format!("`{}` are", more.join("`, `")),
                            }
                        ),
                    )
                    .label("csv sink")
                    .help("`select` scalar fields (a joined side's fields one by one), or write `json`"),
                );
            }
        }
        if let Some(fmt @ (Format::Avro | Format::Protobuf)) = format.as_ref().map(|f| f.node) {
            let span = format.as_ref().map(|f| f.span).unwrap_or(c.span);
            // The value as written: with each joined side not projected away as a
            // record (its key last when not one of its fields).
            let mut written = q.shape.value.clone();
            for j in &q.shape.joined {
                let mut rec = j.value.clone();
                if let Some((k, t)) = &j.key {
                    if rec.get(k).is_none() {
                        rec.fields.push((k.clone(), t.clone()));
                    }
                }
                written.fields.push((j.name.clone(), Type::Record(rec)));
            }
            let (name, unsupported, help) = match fmt {
                    Format::Protobuf => (
                        "Protobuf",
                        crate::format::protobuf::unsupported(&written),
                        "`select` fields with Protobuf names (letters, digits, `_`), string- or int-keyed maps, lists of non-null items and no list in a list, or write `json`",
                    ),
                    _ => (
                        "Avro",
                        crate::format::avro::unsupported(&written),
                        "`select` fields with Avro names (letters, digits, `_`) and string-keyed maps, or write `json`",
                    ),
                };
            let why = unsupported.or_else(|| {
                q.shape.tenant_scoped.then(|| format!("a tenant-scoped query writes json or csv, not {fmt}"))
            });
            if let Some(why) = why {
                self.err(
                    Diagnostic::new(Code::BadFormat, span, format!("no {name} form: {why}"))
                        .label(format!("{fmt} sink"))
                        .help(help),
                );
            }
        }
        fmt
    }
}

/// The groupings, the clause, a repartition, a table's rows grouped (Kafka Streams'
/// KGroupedTable: an update takes the row's old value back out of its group).
type Grouping = (Vec<(String, hir::Expr)>, Span, bool, bool);

/// What a query's clauses have made so far, as its clauses are checked in order.
struct QueryState<'q> {
    /// The query's name.
    name: &'q ast::Ident,
    src: hir::Source,
    input: usize,
    merged: Vec<usize>,
    merge_names: &'q [ast::Ident],
    /// The name the input goes by in the query.
    from_name: String,
    /// The records after the last step.
    shape: Shape,
    steps: Vec<hir::Step>,
    /// The sources joined so far, each with the number of repartitions before it (`cuts`): a
    /// source joined twice between two repartitions would be read twice by one task.
    joined_in: Vec<(usize, u32)>,
    /// A foreign-key join's clause, once there is one (nothing groups its result), and whether
    /// a `group by` was refused for it (its `aggregate` is then not reported again).
    foreign_join: Option<Span>,
    refused_group: bool,
    cuts: u32,
    slugs: HashSet<String>,
    group: Option<Grouping>,
    window: Option<(hir::Window, Span)>,
    /// The index of the aggregate step.
    aggregated: Option<usize>,
    emitted: bool,
    sinks: Vec<hir::Sink>,
    ok: bool,
}

impl QueryState<'_> {
    /// A step of the clause at `span`, the records after it shaped as `self.shape`; its slug
    /// `base`, numbered if taken.
    fn push(&mut self, cx: &Checker, span: Span, kind: StepKind, base: &str) {
        let mut slug = base.to_string();
        let mut n = 2;
        while !self.slugs.insert(slug.clone()) {
            slug = format!("{base}-{n}");
            n += 1;
        }
        self.steps.push(hir::Step {
            kind,
            slug,
            span,
            line: cx.line(span),
            text: cx.text(span),
            out: self.shape.clone(),
        });
    }
}
