//! Declarations: sources (streams and tables), their types, user-defined aggregates and functions.

use super::*;

impl Checker<'_> {
    pub(super) fn type_expr(&mut self, t: &Node<ast::TypeExpr>) -> Type {
        match &t.node {
            ast::TypeExpr::Prim(p) => Type::from(*p),
            ast::TypeExpr::List(inner) => Type::List(Box::new(self.type_expr(inner))),
            ast::TypeExpr::Map(k, v) => {
                let key = self.type_expr(k);
                self.map_key(&key, k.span);
                Type::Map(Box::new(key), Box::new(self.type_expr(v)))
            }
            ast::TypeExpr::Nullable(inner) => self.type_expr(inner).nullable(),
            ast::TypeExpr::Record(fields) => Type::Record(self.record_type(fields)),
        }
    }

    pub(super) fn record_type(&mut self, fields: &[ast::FieldDecl]) -> RecordType {
        let mut out = RecordType::default();
        let mut seen: BTreeMap<&str, Span> = BTreeMap::new();
        for f in fields {
            if let Some(prev) = seen.get(f.name.node.as_str()) {
                let prev = *prev;
                self.err(
                    Diagnostic::new(Code::Duplicate, f.name.span, format!("field `{}` is declared twice", f.name.node))
                        .label("second declaration")
                        .related(prev, "first declared here"),
                );
                continue;
            }
            seen.insert(&f.name.node, f.name.span);
            let ty = self.type_expr(&f.ty);
            out.fields.push((f.name.node.clone(), ty));
        }
        out
    }

    pub(super) fn source_decl(&mut self, d: &ast::SourceDecl, kind: SourceKind) {
        let what = if kind == SourceKind::Stream { "stream" } else { "table" };
        if let Some(i) = self.sources.iter().position(|s| s.name == d.name.node) {
            let prev = self.source_spans[i];
            self.err(
                Diagnostic::new(Code::Duplicate, d.name.span, format!("`{}` is declared twice", d.name.node))
                    .label("second declaration")
                    .related(prev, "first declared here")
                    .help("streams and tables share one namespace"),
            );
            return;
        }
        if let Some(t) = &d.topic {
            if !valid_topic(&t.node) {
                self.err(
                    Diagnostic::new(Code::BadTopic, t.span, format!("`{}` is not a valid topic name", t.node))
                        .label("invalid topic name")
                        .help("topic names are 1 to 249 characters of ASCII letters, digits, `.`, `_` and `-`"),
                );
            }
        }
        let mut first: BTreeMap<&'static str, Span> = BTreeMap::new();
        let (mut key, mut value, mut time, mut tenant) = (None, None, None, None);
        for item in &d.items {
            let slot = match &item.node {
                DeclItem::Key { .. } => "key",
                DeclItem::ValueJson { .. }
                | DeclItem::ValueString { .. }
                | DeclItem::ValueCsv { .. }
                | DeclItem::ValueRegistry { .. } => "value",
                DeclItem::Time(_) => "time",
                DeclItem::TenantField(_) | DeclItem::TenantHeader(_) => "tenant",
            };
            if let Some(prev) = first.get(slot) {
                let prev = *prev;
                self.err(
                    Diagnostic::new(
                        Code::DuplicateDecl,
                        item.span,
                        format!("`{slot}` is declared twice in {what} `{}`", d.name.node),
                    )
                    .label("second declaration")
                    .related(prev, "first declared here"),
                );
                continue;
            }
            first.insert(slot, item.span);
            match slot {
                "key" => key = Some(item),
                "value" => value = Some(item),
                "time" => time = Some(item),
                _ => tenant = Some(item),
            }
        }
        let global = kind == SourceKind::Table && d.topic.is_none();
        let Some((format, mut wire)) = self.source_value(d, value, what) else { return };
        if global && format != Format::Json {
            self.err(
                Diagnostic::new(
                    Code::BadFormat,
                    value.map(|v| v.span).unwrap_or(d.name.span),
                    format!("a table with no topic has no format, so not `{format}`"),
                )
                .label("control-managed table")
                .help("its rows come from `update` statements: declare `value { … }`"),
            );
        }
        let key_format = match key.map(|k| &k.node) {
            Some(DeclItem::Key { format: Some(f), .. }) => {
                if global {
                    self.err(
                        Diagnostic::new(
                            Code::BadFormat,
                            f.span,
                            format!("a table with no topic has no key format, so not `{}`", f.node),
                        )
                        .label("control-managed table")
                        .help("its keys come from `update` statements: drop the key's format"),
                    );
                }
                Some(f.node)
            }
            _ => None,
        };
        // The tenant field leaves the schema the queries see.
        let mut visible = wire.clone();
        let tenant_spec = match tenant.map(|t| &t.node) {
            Some(DeclItem::TenantField(f)) => {
                match wire.get(&f.node) {
                    Some((_, t)) if *t.base() == Type::String => {}
                    Some((_, t)) => self.err(
                        Diagnostic::new(Code::BadTenant, f.span, format!("the tenant field `{}` is a {t}", f.node))
                            .label("must be a string")
                            .help("a tenant id is a string field, or a header: `tenant header \"x-tenant\"`"),
                    ),
                    None => self.err(self.unknown_field(f, &wire, &format!("{what} `{}`", d.name.node))),
                }
                if let Some(i) = visible.index_of(&f.node) {
                    visible.fields.remove(i);
                }
                // Decoded as nullable, so that a record without one is refused for that reason
                // ("the record has no tenant"), not as a malformed record.
                if let Some(i) = wire.index_of(&f.node) {
                    let t = wire.fields[i].1.clone();
                    wire.fields[i].1 = t.nullable();
                }
                Some(hir::TenantSpec::Field(f.node.clone()))
            }
            Some(DeclItem::TenantHeader(h)) => Some(hir::TenantSpec::Header(h.node.clone())),
            _ => None,
        };
        if global {
            if let Some(t) = tenant {
                self.err(
                    Diagnostic::new(Code::BadTenant, t.span, "a table with no topic cannot declare a tenant")
                        .label("control-managed table")
                        .help("scope its rows with `for tenant \"t\" update …` statements instead"),
                );
            }
        }
        let key_spec = self.source_key(d, kind, what, key, &visible);
        let time_idx = self.source_time(d, what, time, &visible);
        self.source_spans.push(d.name.span);
        self.sources.push(hir::Source {
            name: d.name.node.clone(),
            kind,
            topic: d.topic.as_ref().map(|t| t.node.clone()),
            key: key_spec,
            key_format,
            format,
            value: visible,
            wire,
            time: time_idx,
            tenant: tenant_spec,
            span: d.span,
            line: self.line(d.span),
        });
    }

    /// A source's `value`: its format and the record type its records hold (None: refused,
    /// the error reported).
    fn source_value(
        &mut self,
        d: &ast::SourceDecl,
        value: Option<&Node<DeclItem>>,
        what: &str,
    ) -> Option<(Format, RecordType)> {
        let (format, wire) = match value.map(|v| &v.node) {
            Some(DeclItem::ValueJson { fields, .. }) => (Format::Json, self.record_type(fields)),
            Some(DeclItem::ValueString { name }) => {
                let n = name.as_ref().map(|n| n.node.clone()).unwrap_or_else(|| "value".into());
                (Format::String, RecordType { fields: vec![(n, Type::String)] })
            }
            Some(DeclItem::ValueCsv { delimiter, fields }) => {
                let rt = self.record_type(fields);
                for (f, (_, t)) in fields.iter().zip(&rt.fields) {
                    if !t.is_scalar() {
                        self.err(
                            Diagnostic::new(Code::BadFormat, f.ty.span, format!("a csv column cannot be a {t}"))
                                .label("not a scalar")
                                .help("csv columns are string, int, float, bool, timestamp or duration (nullable or not); use `value json` for nested values"),
                        );
                    }
                }
                if fields.is_empty() {
                    self.err(
                        Diagnostic::new(
                            Code::BadFormat,
                            value.map(|v| v.span).unwrap_or(d.name.span),
                            "a csv value with no columns",
                        )
                        .label("no fields")
                        .help("declare the columns in order, e.g. `value csv { ticker: string, price: float }`"),
                    );
                }
                (Format::Csv(*delimiter), rt)
            }
            Some(DeclItem::ValueRegistry { format, from_registry: true, .. }) => {
                // (`streamc check` and `run` fill the fields in from the registry first: this is
                // a program read without it, e.g. by an editor.)
                let topic = d.topic.as_ref().map_or("<topic>".to_string(), |t| t.node.clone());
                self.err(
                    Diagnostic::new(
                        Code::BadFormat,
                        value.map(|v| v.span).unwrap_or(d.name.span),
                        format!("the fields of `value {format}` come from the schema registry's latest schema of `{topic}-value`"),
                    )
                    .label("fields from the registry")
                    .help(format!("`streamc check` and `streamc run` look them up with `schema.registry.url` set; or declare them, e.g. `value {format} {{ ticker: string, price: float }}`")),
                );
                return None;
            }
            Some(DeclItem::ValueRegistry { format, fields, .. }) => {
                let rt = self.record_type(fields);
                let (why, help) = match format {
                    Format::Protobuf => (
                        crate::format::protobuf::unsupported(&rt).map(|w| format!("no Protobuf form: {w}")),
                        "Protobuf field names are letters, digits and `_`; map keys are strings or ints; lists and map values are not nullable and do not nest without a record between",
                    ),
                    Format::Avro => (
                        crate::format::avro::unsupported(&rt).map(|w| format!("no Avro form: {w}")),
                        "Avro names are letters, digits and `_`; map keys are strings",
                    ),
                    // (The grammar declares only the registry formats this way.)
                    Format::Json | Format::String | Format::Csv(_) => (None, ""),
                };
                if let Some(why) = why {
                    self.err(
                        Diagnostic::new(Code::BadFormat, value.map(|v| v.span).unwrap_or(d.name.span), why)
                            .label(format!("{format} value"))
                            .help(help),
                    );
                }
                (*format, rt)
            }
            _ => {
                self.err(
                    Diagnostic::new(
                        Code::MissingValue,
                        d.name.span,
                        format!("{what} `{}` declares no value", d.name.node),
                    )
                    .label("no `value` in this declaration")
                    .help("declare the value's schema, e.g. `value json { ticker: string, price: float }`"),
                );
                return None;
            }
        };
        Some((format, wire))
    }

    /// A source's `key`: a value field (`key NAME`), a key of its own (`key NAME: TYPE`), or
    /// none (the records' keys as text; a table must declare one).
    fn source_key(
        &mut self,
        d: &ast::SourceDecl,
        kind: SourceKind,
        what: &str,
        key: Option<&Node<DeclItem>>,
        visible: &RecordType,
    ) -> KeySpec {
        match key.map(|k| &k.node) {
            Some(DeclItem::Key { name, ty: None, .. }) => match visible.get(&name.node) {
                Some((i, t)) => {
                    if !t.is_scalar() || t.is_nullable() {
                        let t = t.clone();
                        self.err(
                            Diagnostic::new(Code::BadKey, name.span, format!("key field `{}` is a {t}", name.node))
                                .label("not usable as a key")
                                .help("a key is a non-null scalar: string, int, float, bool, timestamp or duration"),
                        );
                    }
                    KeySpec::Field(i)
                }
                None => {
                    self.err(
                        self.unknown_field(name, visible, &format!("{what} `{}`", d.name.node)).with_code(Code::BadKey),
                    );
                    KeySpec::Raw
                }
            },
            Some(DeclItem::Key { name, ty: Some(ty), .. }) => {
                let t = self.type_expr(ty);
                if visible.get(&name.node).is_some() {
                    self.err(
                        Diagnostic::new(Code::BadKey, name.span, format!("`{}` is already a value field", name.node))
                            .label("declared as a separate key")
                            .help(format!("write `key {}` to key the records by that field", name.node)),
                    );
                } else if !t.is_scalar() || t.is_nullable() {
                    self.err(
                        Diagnostic::new(Code::BadKey, ty.span, format!("a key cannot be a {t}"))
                            .label("not usable as a key")
                            .help("a key is a non-null scalar: string, int, float, bool, timestamp or duration"),
                    );
                }
                KeySpec::Named(name.node.clone(), t)
            }
            _ => {
                if kind == SourceKind::Table {
                    self.err(
                        Diagnostic::new(Code::BadKey, d.name.span, format!("table `{}` declares no key", d.name.node))
                            .label("a table is a map from key to value")
                            .help("declare its key: `key ticker` (a value field) or `key ticker: string`"),
                    );
                }
                KeySpec::Raw
            }
        }
    }

    /// A source's `time` field: the index of a non-null timestamp field (None: the record
    /// timestamp is the event time).
    fn source_time(
        &mut self,
        d: &ast::SourceDecl,
        what: &str,
        time: Option<&Node<DeclItem>>,
        visible: &RecordType,
    ) -> Option<usize> {
        match time.map(|t| &t.node) {
            Some(DeclItem::Time(f)) => match visible.get(&f.node) {
                Some((i, Type::Timestamp)) => Some(i),
                Some((_, t)) => {
                    let t = t.clone();
                    self.err(
                        Diagnostic::new(Code::BadTime, f.span, format!("event time field `{}` is a {t}", f.node))
                            .label("must be a non-null timestamp")
                            .help(
                                "declare it as `timestamp`: JSON epoch milliseconds or RFC 3339 strings are accepted",
                            ),
                    );
                    None
                }
                None => {
                    self.err(
                        self.unknown_field(f, visible, &format!("{what} `{}`", d.name.node)).with_code(Code::BadTime),
                    );
                    None
                }
            },
            _ => None,
        }
    }

    pub(super) fn unknown_field(&self, name: &ast::Ident, rec: &RecordType, owner: &str) -> Diagnostic {
        let help = did_you_mean(&name.node, rec.names()).unwrap_or_else(|| {
            if rec.fields.is_empty() {
                format!("{owner} has no fields")
            } else {
                format!("{owner} has {}", rec.names().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "))
            }
        });
        Diagnostic::new(Code::UnknownField, name.span, format!("unknown field `{}`", name.node))
            .label(format!("not a field of {owner}"))
            .help(help)
    }

    pub(super) fn define(&mut self, name: &ast::Ident, what: &str) -> bool {
        // (`explode` is the flat map of `select`, and the lambda functions are typed here: built-ins too.)
        if function::lookup(&name.node).is_some()
            || function::lambda_doc(&name.node).is_some()
            || aggregate::lookup(&name.node).is_some()
            || name.node == "explode"
        {
            self.err(
                Diagnostic::new(
                    Code::Duplicate,
                    name.span,
                    format!("`{}` is a built-in and cannot be redefined", name.node),
                )
                .label(format!("this {what}"))
                .help("choose another name"),
            );
            return false;
        }
        let taken =
            self.aggregates.iter().any(|a| a.name == name.node) || self.functions.iter().any(|f| f.name == name.node);
        if taken {
            let mut d = Diagnostic::new(Code::Duplicate, name.span, format!("`{}` is defined twice", name.node))
                .label(format!("this {what}"));
            match self.user_defs.get(&name.node) {
                Some(prev) => d = d.related(*prev, "first defined here"),
                None => d = d.help("the standard library already defines it; choose another name"),
            }
            self.err(d);
            return false;
        }
        self.user_defs.insert(name.node.clone(), name.span);
        true
    }

    pub(super) fn params(&mut self, params: &[ast::Param]) -> Vec<(String, Type)> {
        let mut out: Vec<(String, Type)> = Vec::new();
        for p in params {
            if out.iter().any(|(n, _)| *n == p.name.node) {
                self.err(
                    Diagnostic::new(
                        Code::Duplicate,
                        p.name.span,
                        format!("parameter `{}` is declared twice", p.name.node),
                    )
                    .label("duplicate"),
                );
            }
            let t = self.type_expr(&p.ty);
            out.push((p.name.node.clone(), t));
        }
        out
    }

    pub(super) fn aggregate_decl(&mut self, a: &ast::AggregateDecl) {
        if !self.define(&a.name, "aggregate") {
            return;
        }
        let params = self.params(&a.params);
        let result_type = self.type_expr(&a.result_type);
        let mut state: Vec<(String, Type)> = Vec::new();
        let mut init = Vec::new();
        for ast::InitField { name, ty, value: e } in &a.init {
            let reported = self.diags.len();
            let mut he = self.expr(e, &NO_LOCALS);
            // An empty list (`[]`, `[] + []`, `if c then [] else []`) has no item type; an
            // error type from a mistake already reported is not one.
            let empty_list = self.diags.len() == reported && has_error(&he.ty);
            if let Some(t) = ty {
                let want = self.type_expr(t);
                if !he.ty.assignable_to(&want) {
                    self.err(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            e.span,
                            format!("`{}` is declared {want}, but its initial value is a {}", name.node, he.ty),
                        )
                        .label(format!("a {}", he.ty))
                        .related(t.span, "declared here"),
                    );
                }
                he = widen(he, &want);
                he.ty = want;
            } else if empty_list {
                self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        e.span,
                        format!("the initial value of `{}` has no type", name.node),
                    )
                    .label("an empty list of what?")
                    .help(format!("write the state field's type: `{}: list<string> = []`", name.node)),
                );
            }
            if he.ty == Type::Null {
                self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        e.span,
                        format!("the initial value of `{}` has no type", name.node),
                    )
                    .label("`null` alone")
                    .help("start from a typed value, e.g. `0`, `0.0` or `\"\"`, and track emptiness with a count"),
                );
            }
            if state.iter().any(|(n, _)| *n == name.node) {
                self.err(
                    Diagnostic::new(
                        Code::Duplicate,
                        name.span,
                        format!("state field `{}` is declared twice", name.node),
                    )
                    .label("duplicate"),
                );
            }
            state.push((name.node.clone(), he.ty.clone()));
            init.push(he);
        }
        let mut locals: Vec<(String, Type)> = params.iter().cloned().chain(state.iter().cloned()).collect();
        let update = self.stmts(&a.update, &mut locals, params.len(), &state, None);
        let update_slots = locals.len();
        let (undo, undo_slots) = match &a.undo {
            Some(u) => {
                let mut locals: Vec<(String, Type)> = params.iter().cloned().chain(state.iter().cloned()).collect();
                let stmts = self.stmts(u, &mut locals, params.len(), &state, None);
                (Some(stmts), locals.len())
            }
            None => (None, 0),
        };
        let (merge, merge_slots) = match &a.merge {
            Some(m) => {
                // Slots: the state, then the other state, which is read only as `other.x`: its
                // slots are named so that a plain name never finds them (a plain `n` is the
                // first state's, not the other's).
                let mut locals: Vec<(String, Type)> =
                    state.iter().cloned().chain(state.iter().map(|(n, t)| (format!("other.{n}"), t.clone()))).collect();
                let stmts = self.stmts(m, &mut locals, 0, &state, Some(&state));
                (Some(stmts), locals.len())
            }
            None => (None, 0),
        };
        let result = self.expr(&a.result, &Scope::Locals { names: &state, other: None });
        if !result.ty.assignable_to(&result_type) {
            self.err(
                Diagnostic::new(
                    Code::BadResult,
                    a.result.span,
                    format!("the result is a {}, but `{}` declares {}", result.ty, a.name.node, result_type),
                )
                .label(format!("this is a {}", result.ty))
                .related(a.result_type.span, "declared here"),
            );
        }
        let in_place = hir::in_place(&update, params.len(), state.len());
        self.aggregates.push(Arc::new(hir::AggregateDef {
            in_place,
            name: a.name.node.clone(),
            params,
            state,
            init,
            update,
            update_slots,
            merge,
            merge_slots,
            undo,
            undo_slots,
            result,
            result_type,
            stdlib: self.stdlib_mode,
        }));
    }

    /// Check statements over `locals` (which grows with each `let`). Assignments may target the
    /// state fields, which start at `state_base`. In `merge`, `other` is the second state.
    pub(super) fn stmts(
        &mut self,
        stmts: &[Node<ast::Stmt>],
        locals: &mut Vec<(String, Type)>,
        state_base: usize,
        state: &[(String, Type)],
        other: Option<&[(String, Type)]>,
    ) -> Vec<hir::Stmt> {
        let mut out = Vec::new();
        for s in stmts {
            let (target, e, is_let) = match &s.node {
                ast::Stmt::Let(n, e) => (n, e, true),
                ast::Stmt::Assign(n, e) => (n, e, false),
            };
            let scope = Scope::Locals { names: locals, other: other.map(|o| (state.len(), o)) };
            let he = self.expr(e, &scope);
            if is_let {
                locals.push((target.node.clone(), he.ty.clone()));
                out.push(hir::Stmt::Set(locals.len() - 1, he));
                continue;
            }
            match state.iter().position(|(n, _)| *n == target.node) {
                Some(i) => {
                    let want = &state[i].1;
                    if !he.ty.assignable_to(want) {
                        self.err(
                            Diagnostic::new(
                                Code::TypeMismatch,
                                e.span,
                                format!("`{}` is a {want}, but this is a {}", target.node, he.ty),
                            )
                            .label(format!("a {}", he.ty))
                            .help("the state's types come from the values in `init`"),
                        );
                    }
                    out.push(hir::Stmt::Set(state_base + i, widen(he, want)));
                }
                None if locals.iter().any(|(n, _)| *n == target.node) => {
                    self.err(
                        Diagnostic::new(Code::UnknownState, target.span, format!("`{}` is not a state field", target.node))
                            .label("assigned here")
                            .help("parameters and `let` temporaries cannot be reassigned; bind a new `let`, or declare it in `init`"),
                    );
                }
                None => {
                    let help = did_you_mean(&target.node, state.iter().map(|(n, _)| n.as_str())).unwrap_or_else(|| {
                        "only the fields declared in `init` can be assigned; use `let` for a temporary".into()
                    });
                    self.err(
                        Diagnostic::new(
                            Code::UnknownState,
                            target.span,
                            format!("`{}` is not a state field", target.node),
                        )
                        .label("assigned here")
                        .help(help),
                    );
                }
            }
        }
        out
    }

    pub(super) fn function_decl(&mut self, f: &ast::FunctionDecl) {
        if !self.define(&f.name, "function") {
            return;
        }
        let params = self.params(&f.params);
        let result_type = self.type_expr(&f.result_type);
        let body = self.expr(&f.body, &Scope::Locals { names: &params, other: None });
        if !body.ty.assignable_to(&result_type) {
            self.err(
                Diagnostic::new(
                    Code::BadResult,
                    f.body.span,
                    format!("the body is a {}, but `{}` declares {}", body.ty, f.name.node, result_type),
                )
                .label(format!("this is a {}", body.ty))
                .related(f.result_type.span, "declared here"),
            );
        }
        self.functions.push(Arc::new(hir::FunctionDef {
            name: f.name.node.clone(),
            params,
            body,
            result_type,
            stdlib: self.stdlib_mode,
        }));
    }
}
