//! Expressions: types of operators and calls, field paths over a row's shape, literals of lists and maps.

use super::*;

impl Checker<'_> {
    /// `map { k: v, … }`. Out of [`Checker::expr`] so that its locals do not enlarge that
    /// recursive function's frame.
    #[inline(never)]
    pub(super) fn map_lit(
        &mut self,
        entries: &[(Node<ast::Expr>, Node<ast::Expr>)],
        span: Span,
        scope: &Scope,
    ) -> hir::Expr {
        let his: Vec<(hir::Expr, hir::Expr)> =
            entries.iter().map(|(k, v)| (self.expr(k, scope), self.expr(v, scope))).collect();
        let key = self.unify_all(his.iter().map(|(k, _)| k), "map keys", "every key of a map has one type");
        let value = self.unify_all(his.iter().map(|(_, v)| v), "map values", "every value of a map has one type");
        if !his.is_empty() {
            self.map_key(&key, his[0].0.span);
        }
        hir::Expr { kind: ExprKind::Map(his), ty: Type::Map(Box::new(key), Box::new(value)), span }
    }

    /// A map's keys are non-null scalars (their JSON form is an object's member name).
    pub(super) fn map_key(&mut self, key: &Type, span: Span) {
        if !key.is_scalar() || key.is_nullable() {
            self.err(
                Diagnostic::new(Code::TypeMismatch, span, format!("a map's keys cannot be {key}"))
                    .label(format!("a {key}"))
                    .help("keys are string, int, float, bool, timestamp or duration, never null (wrap a nullable key in `coalesce`)"),
            );
        }
    }

    /// The one type of several expressions (a list's items, a map's keys or values), or the
    /// error type after a diagnostic at the first that does not fit.
    pub(super) fn unify_all<'e>(&mut self, his: impl Iterator<Item = &'e hir::Expr>, what: &str, help: &str) -> Type {
        let mut elem: Option<Type> = None;
        for h in his {
            let Some(e) = &elem else {
                elem = Some(h.ty.clone());
                continue;
            };
            match e.unify(&h.ty) {
                Some(t) => elem = Some(t),
                None => {
                    self.err(
                        Diagnostic::new(Code::TypeMismatch, h.span, format!("{what} differ: {e} and {}", h.ty))
                            .label(format!("a {}", h.ty))
                            .help(help.to_string()),
                    );
                    return Type::Error;
                }
            }
        }
        elem.unwrap_or(Type::Error)
    }

    /// The type of `l op r`, or a diagnostic at `span` and the error type.
    pub(super) fn binary_result(&mut self, op: BinOp, l: &Type, r: &Type, span: Span) -> Type {
        binary_type(op, l, r).unwrap_or_else(|| {
            self.err(
                Diagnostic::new(Code::BadOperands, span, format!("`{}` cannot combine {l} and {r}", op.symbol()))
                    .label(format!("{l} {} {r}", op.symbol()))
                    .help_opt(binary_help(op, l, r)),
            );
            Type::Error
        })
    }

    pub(super) fn expect_bool(&mut self, e: &hir::Expr, what: &str) {
        if !matches!(e.ty.base(), Type::Bool | Type::Error | Type::Null) {
            self.err(
                Diagnostic::new(Code::NotBool, e.span, format!("{what} needs a bool, not a {}", e.ty))
                    .label(format!("a {}", e.ty))
                    .help("compare it: `x > 0`, `name == \"a\"`, `x is not null`"),
            );
        }
    }

    pub(super) fn expect_key(&mut self, e: &hir::Expr, what: &str) {
        if !e.ty.is_scalar() {
            self.err(
                Diagnostic::new(Code::TypeMismatch, e.span, format!("{what} must be a scalar, not a {}", e.ty))
                    .label("cannot be a key")
                    .help("keys are strings, numbers, bools, timestamps or durations"),
            );
        }
    }

    pub(super) fn expr(&mut self, e: &Node<ast::Expr>, scope: &Scope) -> hir::Expr {
        let out = self.expr_unrecorded(e, scope);
        if let Some(types) = &mut self.types {
            types.push((out.span, out.ty.clone()));
        }
        out
    }

    pub(super) fn expr_unrecorded(&mut self, e: &Node<ast::Expr>, scope: &Scope) -> hir::Expr {
        let span = e.span;
        let mk = |kind, ty| hir::Expr { kind, ty, span };
        match &e.node {
            ast::Expr::Lit(l) => {
                let ty = match l {
                    Literal::Int(_) => Type::Int,
                    Literal::Float(_) => Type::Float,
                    Literal::String(_) => Type::String,
                    Literal::Bool(_) => Type::Bool,
                    Literal::Duration(_) => Type::Duration,
                    Literal::Null => Type::Null,
                };
                mk(ExprKind::Lit(l.clone()), ty)
            }
            ast::Expr::Path(p) => self.path(p, span, scope),
            ast::Expr::Unary { op, expr } => {
                let inner = self.expr(expr, scope);
                let t = inner.ty.clone();
                let ty = match op {
                    UnOp::Not if matches!(t.base(), Type::Bool | Type::Error | Type::Null) => {
                        Type::Bool.nullable_if(t.is_nullable())
                    }
                    UnOp::Neg if matches!(t.base(), Type::Int | Type::Float | Type::Duration | Type::Error) => {
                        t.clone()
                    }
                    _ => {
                        let (sym, want) =
                            if *op == UnOp::Not { ("not", "a bool") } else { ("-", "a number or duration") };
                        self.err(
                            Diagnostic::new(Code::BadOperands, span, format!("`{sym}` of a {t}"))
                                .label(format!("`{sym}` needs {want}")),
                        );
                        Type::Error
                    }
                };
                mk(ExprKind::Unary(*op, Box::new(inner)), ty)
            }
            ast::Expr::Binary { op, lhs, rhs } => {
                let l = self.expr(lhs, scope);
                let r = self.expr(rhs, scope);
                let ty = self.binary_result(*op, &l.ty, &r.ty, span);
                mk(ExprKind::Binary(*op, Box::new(l), Box::new(r)), ty)
            }
            ast::Expr::Chain { first, rest } => {
                let first = self.expr(first, scope);
                let mut ty = first.ty.clone();
                let mut sp = first.span;
                let mut items = Vec::with_capacity(rest.len());
                for (op, e) in rest {
                    let r = self.expr(e, scope);
                    sp = sp.to(r.span);
                    ty = self.binary_result(*op, &ty, &r.ty, sp);
                    items.push((*op, r));
                }
                mk(ExprKind::Chain(Box::new(first), items), ty)
            }
            ast::Expr::IsNull { expr, negated } => {
                let inner = self.expr(expr, scope);
                mk(ExprKind::IsNull(Box::new(inner), *negated), Type::Bool)
            }
            ast::Expr::Between { expr, lo, hi, negated } => {
                let x = self.expr(expr, scope);
                let l = self.expr(lo, scope);
                let h = self.expr(hi, scope);
                let nullable = x.ty.is_nullable() || l.ty.is_nullable() || h.ty.is_nullable();
                let u = x.ty.unify(&l.ty).and_then(|t| t.unify(&h.ty));
                if !u.as_ref().is_some_and(|t| t.is_ordered() || *t.base() == Type::Null) {
                    self.err(
                        Diagnostic::new(
                            Code::BadOperands,
                            e.span,
                            format!(
                                "`between` compares values of one ordered type, not {}, {} and {}",
                                x.ty, l.ty, h.ty
                            ),
                        )
                        .label(format!("{} between {} and {}", x.ty, l.ty, h.ty))
                        .help(
                            "numbers, strings, timestamps, durations or bools, all of one type: `n between 1 and 10`",
                        ),
                    );
                }
                mk(ExprKind::Between(Box::new(x), Box::new(l), Box::new(h), *negated), Type::Bool.nullable_if(nullable))
            }
            ast::Expr::If { cond, then, otherwise } => {
                let c = self.expr(cond, scope);
                self.expect_bool(&c, "`if`");
                let a = self.expr(then, scope);
                let b = self.expr(otherwise, scope);
                let ty = match a.ty.unify(&b.ty) {
                    Some(t) => t,
                    None => {
                        self.err(
                            Diagnostic::new(
                                Code::TypeMismatch,
                                otherwise.span,
                                format!("`if` branches differ: {} and {}", a.ty, b.ty),
                            )
                            .label(format!("a {}", b.ty))
                            .related(then.span, format!("a {}", a.ty))
                            .help("both branches must have one type"),
                        );
                        Type::Error
                    }
                };
                mk(ExprKind::If(Box::new(c), Box::new(a), Box::new(b)), ty)
            }
            ast::Expr::List(items) => {
                let his: Vec<hir::Expr> = items.iter().map(|i| self.expr(i, scope)).collect();
                let elem = self.unify_all(his.iter(), "list items", "every item of a list has one type");
                mk(ExprKind::List(his), Type::List(Box::new(elem)))
            }
            ast::Expr::Map(entries) => self.map_lit(entries, span, scope),
            ast::Expr::Record(fields) => {
                let mut out: Vec<(String, hir::Expr)> = Vec::new();
                for (n, fe) in fields {
                    let h = self.expr(fe, scope);
                    if out.iter().any(|(o, _)| *o == n.node) {
                        self.err(
                            Diagnostic::new(Code::Duplicate, n.span, format!("field `{}` is given twice", n.node))
                                .label("duplicate"),
                        );
                        continue;
                    }
                    out.push((n.node.clone(), h));
                }
                let ty =
                    Type::Record(RecordType { fields: out.iter().map(|(n, e)| (n.clone(), e.ty.clone())).collect() });
                mk(ExprKind::Record(out), ty)
            }
            ast::Expr::Call { func, args } if args.iter().any(|a| matches!(a.node, ast::Expr::Lambda { .. })) => {
                self.lambda_call(func, args, span, scope)
            }
            ast::Expr::Call { func, args } => {
                let hargs: Vec<hir::Expr> = args.iter().map(|a| self.expr(a, scope)).collect();
                self.call(func, hargs, span)
            }
            ast::Expr::Lambda { .. } => {
                self.err(
                    Diagnostic::new(Code::TypeMismatch, span, "a lambda is not a value")
                        .label("`x => …` here")
                        .help(LAMBDA_HELP),
                );
                err_expr(span)
            }
        }
    }

    pub(super) fn call(&mut self, func: &ast::Ident, args: Vec<hir::Expr>, span: Span) -> hir::Expr {
        let name = func.node.as_str();
        if let Some(f) = function::lookup(name) {
            let types: Vec<&Type> = args.iter().map(|a| &a.ty).collect();
            let checked = if types.iter().any(|t| t.is_error()) {
                Ok(Type::Error)
            } else {
                f.check(&function::Args { types: &types })
            };
            let ty = match checked {
                Ok(t) => t,
                Err(msg) => {
                    self.err(
                        Diagnostic::new(Code::ArgCount, span, format!("`{name}`: {msg}"))
                            .label("in this call")
                            .help(f.doc().signature),
                    );
                    Type::Error
                }
            };
            return hir::Expr { kind: ExprKind::Builtin(f, args), ty, span };
        }
        if let Some(f) = self.functions.iter().find(|f| f.name == name).cloned() {
            let mut ok = args.len() == f.params.len();
            if !ok {
                self.err(
                    Diagnostic::new(
                        Code::ArgCount,
                        span,
                        format!("`{name}` takes {}, not {}", plural(f.params.len(), "argument"), args.len()),
                    )
                    .label("wrong number of arguments"),
                );
            }
            for (a, (pn, pt)) in args.iter().zip(&f.params) {
                if !a.ty.assignable_to(pt) {
                    ok = false;
                    self.err(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            a.span,
                            format!("`{name}` takes a {pt} as `{pn}`, not a {}", a.ty),
                        )
                        .label(format!("a {}", a.ty)),
                    );
                }
            }
            let ty = if ok { f.result_type.clone() } else { Type::Error };
            let args = args
                .into_iter()
                .enumerate()
                .map(|(i, a)| match f.params.get(i) {
                    Some((_, pt)) => widen(a, pt),
                    None => a,
                })
                .collect();
            return hir::Expr { kind: ExprKind::Function(f, args), ty, span };
        }
        if let Some(d) = function::lambda_doc(name) {
            self.err(
                Diagnostic::new(Code::ArgCount, span, format!("`{name}` takes a lambda as its last argument"))
                    .label("in this call")
                    .help(d.signature),
            );
            return err_expr(span);
        }
        if name == "explode" {
            self.err(
                Diagnostic::new(Code::Explode, func.span, "`explode` is not a function of one value")
                    .label("makes one record per item of a list")
                    .help("it can only be a whole `select` item: `select { id, tag = explode(tags) }`"),
            );
            return err_expr(span);
        }
        let help = if name == "map" {
            "a map is written `map { key: value, … }`".to_string()
        } else if aggregate::lookup(name).is_some() || self.aggregates.iter().any(|a| a.name == name) {
            format!("`{name}` is an aggregate; use it inside `aggregate {{ x = {name}(…) }}`")
        } else if self.all_defs.contains(name) {
            format!("`{name}` cannot call itself or a function defined after it: define it first")
        } else {
            let mut cands: Vec<&str> = function::ALL.iter().map(|f| f.name()).collect();
            cands.extend(self.functions.iter().map(|f| f.name.as_str()));
            did_you_mean(name, cands.iter().copied()).unwrap_or_else(|| format!("functions: {}", cands.join(", ")))
        };
        let code = if self.all_defs.contains(name) { Code::Recursion } else { Code::UnknownFunction };
        self.err(
            Diagnostic::new(code, func.span, format!("unknown function `{name}`")).label("not a function").help(help),
        );
        err_expr(span)
    }

    pub(super) fn path(&mut self, p: &[ast::Ident], span: Span, scope: &Scope) -> hir::Expr {
        let Some(first) = p.first() else { return err_expr(span) };
        match scope {
            Scope::Lambda { params, base, outer } => {
                if let Some(i) = params.iter().rposition(|(n, _)| *n == first.node) {
                    let e = hir::Expr { kind: ExprKind::Local(base + i), ty: params[i].1.clone(), span };
                    return self.descend(e, &p[1..], span);
                }
                self.path(p, span, outer)
            }
            Scope::Locals { names, other } => {
                if let (Some((base, state)), true) = (other, p.len() >= 2 && first.node == "other") {
                    if let Some(i) = state.iter().position(|(n, _)| *n == p[1].node) {
                        let e = hir::Expr { kind: ExprKind::Local(base + i), ty: state[i].1.clone(), span };
                        return self.descend(e, &p[2..], span);
                    }
                    let rec = RecordType { fields: state.to_vec() };
                    self.err(self.unknown_field(&p[1], &rec, "the other state"));
                    return err_expr(span);
                }
                if let Some(i) = names.iter().rposition(|(n, _)| *n == first.node) {
                    let e = hir::Expr { kind: ExprKind::Local(i), ty: names[i].1.clone(), span };
                    return self.descend(e, &p[1..], span);
                }
                let rec = RecordType { fields: names.to_vec() };
                let mut d = self.unknown_field(first, &rec, "this scope");
                d.message = format!("unknown name `{}`", first.node);
                d.label = "not a parameter, state field or `let`".into();
                self.err(d);
                err_expr(span)
            }
            Scope::Row { shape, from } => {
                if p.len() >= 2 {
                    if let Some(j) = shape.joined.iter().rposition(|j| j.name == first.node) {
                        let jd = &shape.joined[j];
                        let second = &p[1];
                        let (kind, ty) = if let Some((i, t)) = jd.value.get(&second.node) {
                            (ExprKind::Field(Root::Joined(j), vec![i]), t.clone())
                        } else if jd.key.as_ref().is_some_and(|(k, _)| *k == second.node) {
                            (
                                ExprKind::Field(Root::JoinedKey(j), vec![]),
                                jd.key.as_ref().map(|(_, t)| t.clone()).unwrap_or(Type::Error),
                            )
                        } else {
                            let mut rec = jd.value.clone();
                            if let Some((k, t)) = &jd.key {
                                rec.fields.push((k.clone(), t.clone()));
                            }
                            self.err(self.unknown_field(second, &rec, &format!("`{}`", jd.name)));
                            return err_expr(span);
                        };
                        let e = hir::Expr { kind, ty: ty.nullable_if(jd.optional), span };
                        return self.descend(e, &p[2..], span);
                    }
                }
                if let Some((i, t)) = shape.value.get(&first.node) {
                    let e = hir::Expr { kind: ExprKind::Field(Root::Value, vec![i]), ty: t.clone(), span };
                    return self.descend(e, &p[1..], span);
                }
                if shape.key_name.as_deref() == Some(first.node.as_str()) {
                    let e = hir::Expr { kind: ExprKind::Field(Root::Key, vec![]), ty: shape.key.clone(), span };
                    return self.descend(e, &p[1..], span);
                }
                if p.len() >= 2 && !from.is_empty() && first.node == *from {
                    return self.path(&p[1..], span, scope);
                }
                let mut rec = shape.value.clone();
                if let Some(k) = &shape.key_name {
                    rec.fields.push((k.clone(), shape.key.clone()));
                }
                let mut d = self.unknown_field(first, &rec, &format!("`{from}` here"));
                if let Some(j) = shape.joined.iter().find(|j| j.name == first.node) {
                    d = d.help(format!("`{}` is a joined stream: name one of its fields, `{}.field`", j.name, j.name));
                } else if !shape.joined.is_empty() && did_you_mean(&first.node, rec.names()).is_none() {
                    let owners: Vec<&str> = shape
                        .joined
                        .iter()
                        .filter(|j| j.value.get(&first.node).is_some())
                        .map(|j| j.name.as_str())
                        .collect();
                    if let Some(o) = owners.first() {
                        d = d.help(format!(
                            "`{}` is a field of the joined `{o}`: write `{o}.{}`",
                            first.node, first.node
                        ));
                    }
                }
                self.err(d);
                err_expr(span)
            }
        }
    }

    /// Follow `.field` segments into nested records.
    pub(super) fn descend(&mut self, mut e: hir::Expr, rest: &[ast::Ident], span: Span) -> hir::Expr {
        for seg in rest {
            let nullable = e.ty.is_nullable();
            let Type::Record(rec) = e.ty.base().clone() else {
                if !e.ty.is_error() {
                    self.err(
                        Diagnostic::new(
                            Code::UnknownField,
                            seg.span,
                            format!(
                                "`{}` is a {}, which has no fields",
                                self.src.get(span.start..seg.span.start).unwrap_or("").trim_end_matches('.').trim(),
                                e.ty
                            ),
                        )
                        .label("no such field")
                        .help("only records have fields"),
                    );
                }
                return err_expr(span);
            };
            let Some((i, t)) = rec.get(&seg.node) else {
                self.err(self.unknown_field(seg, &rec, "this record"));
                return err_expr(span);
            };
            let ty = t.clone().nullable_if(nullable);
            let kind = match e.kind {
                ExprKind::Field(root, mut path) => {
                    path.push(i);
                    ExprKind::Field(root, path)
                }
                other => ExprKind::Get(Box::new(hir::Expr { kind: other, ty: e.ty.clone(), span }), i),
            };
            e = hir::Expr { kind, ty, span };
        }
        e
    }
}
