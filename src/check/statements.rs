//! Control statements: what `update`, `delete`, `replace`, `drop` and `for` say, checked against the running program.

use super::*;

impl Checker<'_> {
    pub(super) fn statement(&mut self, s: &ast::Statement, program: &hir::Program) -> Option<Control> {
        self.queries = program.queries.clone();
        for q in &program.queries {
            self.query_spans.insert(q.name.clone(), Span::default());
        }
        if let Some(t) = s.tenant.as_ref().filter(|t| t.node.is_empty()) {
            self.err(
                Diagnostic::new(Code::TenantMismatch, t.span, "the empty tenant")
                    .label("no tenant named")
                    .help("an unscoped statement applies to every tenant: leave out `for tenant`"),
            );
            return None;
        }
        let query_stmt = matches!(
            s.body,
            ast::StatementBody::NewQuery(_) | ast::StatementBody::Replace { .. } | ast::StatementBody::Drop(_)
        );
        if let (Some(t), true) = (&s.tenant, query_stmt) {
            self.err(
                Diagnostic::new(Code::TenantMismatch, t.span, "queries are shared by every tenant")
                    .label("`for tenant` on a query statement")
                    .help("`for tenant` scopes `update`, `delete` and `purge`; queries see each tenant's data separately already"),
            );
            return None;
        }
        match &s.body {
            ast::StatementBody::Update { table, key, value } => {
                let (ti, key) = self.control_key(table, key)?;
                let hv = self.expr(value, &NO_LOCALS);
                let want = Type::Record(self.sources[ti].value.clone());
                if !hv.ty.assignable_to(&want) {
                    self.err(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            value.span,
                            format!("`{}` holds {want}, not {}", table.node, hv.ty),
                        )
                        .label("does not match the table's value")
                        .help("give every non-nullable field, with its declared type"),
                    );
                    return None;
                }
                Some(Control::Update { table: ti, key, value: hv })
            }
            ast::StatementBody::Delete { table, key } => {
                let (ti, key) = self.control_key(table, key)?;
                Some(Control::Delete { table: ti, key })
            }
            ast::StatementBody::Purge => {
                if s.tenant.is_none() {
                    self.err(
                        Diagnostic::new(Code::TenantMismatch, s.span, "`purge` needs a tenant")
                            .label("purges nothing in particular")
                            .help("write `for tenant \"t\" purge`"),
                    );
                    return None;
                }
                Some(Control::Purge)
            }
            ast::StatementBody::NewQuery(q) => {
                if program.query(&q.name.node).is_some() {
                    self.err(
                        Diagnostic::new(
                            Code::QueryExists,
                            q.name.span,
                            format!("query `{}` already runs", q.name.node),
                        )
                        .label("existing name")
                        .help(format!("write `replace query {} {{ … }}` to change it", q.name.node)),
                    );
                    return None;
                }
                self.query_spans.remove(&q.name.node);
                self.query(q).map(Control::NewQuery)
            }
            ast::StatementBody::Replace { query, mode } => {
                if program.query(&query.name.node).is_none() {
                    self.err(self.unknown_query(&query.name, program));
                    return None;
                }
                self.query(query).map(|q| Control::Replace { query: q, mode: mode.as_ref().map(|m| m.node) })
            }
            ast::StatementBody::Drop(name) => {
                if program.query(&name.node).is_none() {
                    self.err(self.unknown_query(name, program));
                    return None;
                }
                Some(Control::Drop(name.node.clone()))
            }
        }
    }

    pub(super) fn unknown_query(&self, name: &ast::Ident, program: &hir::Program) -> Diagnostic {
        let help = did_you_mean(&name.node, program.queries.iter().map(|q| q.name.as_str())).unwrap_or_else(|| {
            format!(
                "running queries: {}",
                program.queries.iter().map(|q| format!("`{}`", q.name)).collect::<Vec<_>>().join(", ")
            )
        });
        Diagnostic::new(Code::UnknownQuery, name.span, format!("no query `{}` is running", name.node))
            .label("unknown query")
            .help(help)
    }

    pub(super) fn control_key(&mut self, table: &ast::Ident, key: &Node<ast::Expr>) -> Option<(usize, hir::Expr)> {
        let ti = match self.sources.iter().position(|s| s.name == table.node && s.kind == SourceKind::Table) {
            Some(i) => i,
            None => {
                let tables: Vec<&str> =
                    self.sources.iter().filter(|s| s.is_global()).map(|s| s.name.as_str()).collect();
                let help = did_you_mean(&table.node, tables.iter().copied()).unwrap_or_else(|| {
                    format!(
                        "control-managed tables: {}",
                        if tables.is_empty() { "none".into() } else { tables.join(", ") }
                    )
                });
                self.err(
                    Diagnostic::new(Code::UnknownTable, table.span, format!("unknown table `{}`", table.node))
                        .label("not a table")
                        .help(help),
                );
                return None;
            }
        };
        if let Some(topic) = &self.sources[ti].topic {
            self.err(
                Diagnostic::new(
                    Code::NotControlTable,
                    table.span,
                    format!("`{}` is fed from topic `{topic}`", table.node),
                )
                .label("not a control-managed table")
                .help("change it by producing to its topic; control statements change tables declared without a topic"),
            );
            return None;
        }
        let hk = self.expr(key, &NO_LOCALS);
        let kt = self.sources[ti].key_type();
        if !hk.ty.assignable_to(&kt) || hk.ty.is_nullable() {
            self.err(
                Diagnostic::new(
                    Code::TypeMismatch,
                    key.span,
                    format!("`{}` is keyed by {kt}, not {}", table.node, hk.ty),
                )
                .label(format!("a {}", hk.ty)),
            );
            return None;
        }
        Some((ti, hk))
    }
}
