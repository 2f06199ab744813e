//! `window`, `aggregate` and `select` items: windows and time zones, aggregate calls and their undo rules, the fields a select gives.

use super::*;

impl Checker<'_> {
    pub(super) fn check_window(&mut self, kind: &WindowKind, span: Span) {
        let bad = |this: &mut Self, msg: &str, help: &str| {
            this.err(
                Diagnostic::new(Code::BadDuration, span, msg.to_string())
                    .label("in this window")
                    .help(help.to_string()),
            );
        };
        match kind {
            WindowKind::Tumbling { size } | WindowKind::Sliding { size } if size.0 <= 0 => {
                bad(self, "a window size must be positive", "write a size like `5s`")
            }
            WindowKind::Hopping { size, advance } => {
                if size.0 <= 0 || advance.0 <= 0 {
                    bad(self, "window size and advance must be positive", "write `hopping 5s advance 1s`");
                } else if advance.0 > size.0 {
                    bad(
                        self,
                        &format!("the advance ({advance}) is larger than the window ({size})"),
                        "records between windows would be dropped; make the advance at most the size",
                    );
                }
            }
            WindowKind::Session { gap } if gap.0 <= 0 => {
                bad(self, "a session gap must be positive", "write `session gap 30s`")
            }
            _ => {}
        }
    }

    /// `tz "ZONE"` on a window: a zone of the bundled database, on tumbling or hopping windows
    /// whose size and advance are whole days.
    pub(super) fn check_zone(&mut self, kind: &WindowKind, zone: &Node<String>) -> Option<&'static str> {
        const DAY: i64 = 86_400_000;
        let whole_days = match kind {
            WindowKind::Tumbling { size } => size.0 % DAY == 0,
            WindowKind::Hopping { size, advance } => size.0 % DAY == 0 && advance.0 % DAY == 0,
            WindowKind::Sliding { .. } | WindowKind::Session { .. } => {
                self.err(
                    Diagnostic::new(Code::BadTime, zone.span, "`tz` is for tumbling and hopping windows")
                        .label("not on this window")
                        .help("sliding and session windows follow the records' times, not the calendar: remove `tz`"),
                );
                return None;
            }
        };
        if !whole_days {
            self.err(
                Diagnostic::new(Code::BadTime, zone.span, "`tz` aligns whole days: the window is not")
                    .label("a zone for a window of hours or less")
                    .help("write the size (and advance) in days, e.g. `tumbling 1d tz \"Europe/Paris\"`; shorter windows are aligned on UTC"),
            );
            return None;
        }
        match crate::function::calendar::zone_name(&zone.node) {
            Ok(name) => Some(name),
            Err(_) => {
                let names: Vec<String> = jiff::tz::db().available().map(|n| n.as_str().to_string()).collect();
                let help = did_you_mean(&zone.node, names.iter().map(String::as_str))
                    .unwrap_or_else(|| "an IANA zone name, e.g. `Europe/Paris`, `America/New_York` or `UTC`".into());
                self.err(
                    Diagnostic::new(Code::BadTime, zone.span, format!("unknown time zone {:?}", zone.node))
                        .label("not in the time zone database")
                        .help(help),
                );
                None
            }
        }
    }

    pub(super) fn aggregates_clause(
        &mut self,
        items: &[ast::AggItem],
        shape: &Shape,
        from: &str,
        group: &[(String, hir::Expr)],
        window: Option<hir::Window>,
    ) -> Vec<hir::AggCall> {
        let mut out: Vec<hir::AggCall> = Vec::new();
        let mut names: BTreeMap<String, Span> = BTreeMap::new();
        for a in items {
            let name = &a.name.node;
            if window.is_some() && WINDOW_FIELDS.contains(&name.as_str()) {
                self.err(
                    Diagnostic::new(Code::ReservedName, a.name.span, format!("`{name}` is set by the window"))
                        .label("reserved in windowed results")
                        .help("choose another name"),
                );
            } else if group.iter().any(|(g, _)| g == name) {
                self.err(
                    Diagnostic::new(Code::Duplicate, a.name.span, format!("`{name}` is already a grouping field"))
                        .label("duplicate output field")
                        .help("choose another name for the aggregate"),
                );
            } else if let Some(prev) = names.get(name) {
                let prev = *prev;
                self.err(
                    Diagnostic::new(Code::Duplicate, a.name.span, format!("`{name}` is defined twice"))
                        .label("duplicate output field")
                        .related(prev, "first defined here"),
                );
            }
            names.insert(name.clone(), a.name.span);
            let args: Vec<hir::Expr> = a.args.iter().map(|e| self.expr(e, &Scope::Row { shape, from })).collect();
            let Some(call) = self.agg_call(a, args) else { continue };
            if shape.table && !call.func.retractable() {
                self.no_undo(a, &call, from);
            }
            if matches!(window.map(|w| w.kind), Some(WindowKind::Session { .. })) && !call.func.mergeable() {
                self.err(
                    Diagnostic::new(
                        Code::NoMerge,
                        a.func.span,
                        format!("`{}` has no `merge`, so it cannot aggregate session windows", call.func.name()),
                    )
                    .label("sessions merge when a record bridges two")
                    .help("use a tumbling or hopping window, or give the aggregate a `merge` block"),
                );
            }
            out.push(call);
        }
        out
    }

    /// An aggregate over a grouped table that cannot take a row's old value back out.
    pub(super) fn no_undo(&mut self, a: &ast::AggItem, call: &hir::AggCall, table: &str) {
        let name = call.func.name();
        let help = match &call.func {
            hir::AggFunc::User(_) => format!("give `{name}` an `undo` block: the inverse of its `update`"),
            hir::AggFunc::Native(_) => {
                "over a table: count, sum, and user-defined aggregates with an `undo` block (avg, variance, stddev and count_if have one); or declare the topic as a `stream` to aggregate every record".to_string()
            }
        };
        self.err(
            Diagnostic::new(
                Code::NoUndo,
                a.func.span,
                format!("`{name}` cannot take a value back, so it cannot aggregate the table `{table}`"),
            )
            .label("an update of a row takes its old value out of its group")
            .help(help),
        );
    }

    pub(super) fn agg_call(&mut self, a: &ast::AggItem, args: Vec<hir::Expr>) -> Option<hir::AggCall> {
        let fname = a.func.node.as_str();
        let arity = |this: &mut Self, want: &str| {
            this.err(
                Diagnostic::new(Code::ArgCount, a.span, format!("`{fname}` takes {want}, not {}", args_desc(a)))
                    .label("wrong number of arguments"),
            );
        };
        if a.star && fname != "count" {
            arity(self, "a value");
            return None;
        }
        if let Some(native) = aggregate::lookup(fname) {
            let types: Vec<Type> = args.iter().map(|e| e.ty.clone()).collect();
            let literals: Vec<Option<&Literal>> = args
                .iter()
                .map(|e| match &e.kind {
                    ExprKind::Lit(l) => Some(l),
                    _ => None,
                })
                .collect();
            return match native.signature(&types).and_then(|sig| native.check_literals(&literals).map(|()| sig)) {
                Ok(sig) => Some(hir::AggCall {
                    name: a.name.node.clone(),
                    func: AggFunc::Native(native),
                    args,
                    ty: sig.result,
                    state_ty: sig.state,
                }),
                Err(SignatureError::Arity(want)) => {
                    arity(self, want);
                    None
                }
                Err(SignatureError::Argument { arg, problem, message, label, help }) => {
                    let code = match problem {
                        ArgProblem::NotNumeric => Code::NotNumeric,
                        ArgProblem::NotOrdered => Code::NotOrdered,
                        ArgProblem::NotConstant => Code::NotConstant,
                    };
                    let span = a.args.get(arg).map(|e| e.span).unwrap_or(a.span);
                    self.err(Diagnostic::new(code, span, message).label(label).help(help));
                    None
                }
            };
        }
        let Some(def) = self.aggregates.iter().find(|d| d.name == fname).cloned() else {
            let mut cands: Vec<&str> = aggregate::names().collect();
            cands.extend(self.aggregates.iter().map(|d| d.name.as_str()));
            let help = if function::lookup(fname).is_some() || self.functions.iter().any(|f| f.name == fname) {
                format!("`{fname}` is a function, not an aggregate; apply it to a field inside one: `sum({fname}(x))`")
            } else {
                did_you_mean(fname, cands.iter().copied())
                    .unwrap_or_else(|| format!("aggregates: {}", cands.join(", ")))
            };
            self.err(
                Diagnostic::new(Code::UnknownAggregate, a.func.span, format!("unknown aggregate `{fname}`"))
                    .label("not an aggregate")
                    .help(help),
            );
            return None;
        };
        if args.len() != def.params.len() {
            arity(self, &plural(def.params.len(), "argument"));
            return None;
        }
        for ((e, he), (pn, pt)) in a.args.iter().zip(&args).zip(&def.params) {
            if !he.ty.assignable_to(pt) {
                self.err(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        e.span,
                        format!("`{fname}` takes a {pt} as `{pn}`, not a {}", he.ty),
                    )
                    .label(format!("a {}", he.ty))
                    .help_opt(he.ty.is_nullable().then(|| {
                        format!(
                            "the value may be null: give a default with `coalesce({}, …)`",
                            self.src.get(e.span.start..e.span.end).unwrap_or("x")
                        )
                    })),
                );
                return None;
            }
        }
        let args = args.into_iter().zip(&def.params).map(|(he, (_, pt))| widen(he, pt)).collect();
        Some(hir::AggCall {
            name: a.name.node.clone(),
            func: AggFunc::User(def.clone()),
            args,
            ty: def.result_type.clone(),
            state_ty: Type::Record(RecordType { fields: def.state.clone() }),
        })
    }

    pub(super) fn select(
        &mut self,
        items: &[Node<ast::SelectItem>],
        shape: &Shape,
        from: &str,
    ) -> (Vec<(String, hir::Expr)>, Shape) {
        let mut fields: Vec<(String, hir::Expr)> = Vec::new();
        let mut explicit: BTreeMap<String, Span> = BTreeMap::new();
        for it in items {
            let (name, he, span) = match &it.node {
                ast::SelectItem::Star => {
                    for (i, (n, t)) in shape.value.fields.iter().enumerate() {
                        if !fields.iter().any(|(f, _)| f == n) {
                            let e =
                                hir::Expr { kind: ExprKind::Field(Root::Value, vec![i]), ty: t.clone(), span: it.span };
                            fields.push((n.clone(), e));
                        }
                    }
                    continue;
                }
                ast::SelectItem::Named(n, e) => (n.node.clone(), self.expr(e, &Scope::Row { shape, from }), n.span),
                ast::SelectItem::Path(p) => {
                    let e = Node::new(it.span, ast::Expr::Path(p.clone()));
                    let name = p.last().map(|i| i.node.clone()).unwrap_or_default();
                    (name, self.expr(&e, &Scope::Row { shape, from }), it.span)
                }
            };
            if let Some(prev) = explicit.get(&name) {
                let prev = *prev;
                self.err(
                    Diagnostic::new(Code::Duplicate, span, format!("field `{name}` is selected twice"))
                        .label("second definition")
                        .related(prev, "first defined here"),
                );
                continue;
            }
            if shape.joined.iter().any(|j| j.name == name) || (!from.is_empty() && name == from) {
                self.err(
                    Diagnostic::new(
                        Code::ShadowsStream,
                        span,
                        format!("output field `{name}` would shadow the stream `{name}`"),
                    )
                    .label("same name as a stream in scope")
                    .help("output field names never shadow stream names; choose another name"),
                );
                continue;
            }
            explicit.insert(name.clone(), span);
            // A named field replaces a field of the same name that `*` brought in, in place.
            match fields.iter().position(|(f, _)| *f == name) {
                Some(i) => fields[i].1 = he,
                None => fields.push((name, he)),
            }
        }
        let value = RecordType { fields: fields.iter().map(|(n, e)| (n.clone(), e.ty.clone())).collect() };
        let key_field = shape.key_field.and_then(|k| {
            fields.iter().position(|(_, e)| matches!(&e.kind, ExprKind::Field(Root::Value, p) if p == &[k]))
        });
        let out = Shape { value, key_field, joined: Vec::new(), ..shape.clone() };
        (fields, out)
    }
}
