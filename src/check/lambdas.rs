//! Lambdas: `transform`, `filter` and `reduce` over lists and maps.

use super::*;
use hir::LambdaOp;

impl Checker<'_> {
    /// `transform(list, x => e)`, `filter(list, x => c)`, `reduce(list, init, (acc, x) => e)`.
    pub(super) fn lambda_call(
        &mut self,
        func: &ast::Ident,
        args: &[Node<ast::Expr>],
        span: Span,
        scope: &Scope,
    ) -> hir::Expr {
        let op = match func.node.as_str() {
            "transform" => LambdaOp::Transform,
            "filter" => LambdaOp::Filter,
            "reduce" => LambdaOp::Reduce,
            name => {
                self.err(
                    Diagnostic::new(Code::TypeMismatch, func.span, format!("`{name}` takes no lambda"))
                        .label("called with `x => …`")
                        .help(LAMBDA_HELP),
                );
                return err_expr(span);
            }
        };
        let name = func.node.as_str();
        let shape_err = |this: &mut Self| {
            this.err(
                Diagnostic::new(
                    Code::ArgCount,
                    span,
                    match op {
                        LambdaOp::Transform => format!("`{name}` takes a list, then a lambda (of a map: a lambda for the key, then one for the value)"),
                        LambdaOp::Filter => format!("`{name}` takes a list or a map, then a lambda"),
                        LambdaOp::Reduce => format!("`{name}` takes a list or a map and a start value, then a lambda"),
                    },
                )
                .label("in this call")
                .help(LAMBDA_HELP),
            );
            err_expr(span)
        };
        let Some(first) = args.first().filter(|a| !matches!(a.node, ast::Expr::Lambda { .. })) else {
            return shape_err(self);
        };
        let list = self.expr(first, scope);
        // The parameters each item gives a lambda: a list's item, or a map's key and value.
        let items: Vec<Type> = match list.ty.base() {
            Type::List(t) => vec![(**t).clone()],
            Type::Map(k, v) => vec![(**k).clone(), (**v).clone()],
            Type::Error => return err_expr(span),
            t => {
                self.err(
                    Diagnostic::new(Code::TypeMismatch, first.span, format!("`{name}` of a {t}, not a list or a map"))
                        .label(format!("a {t}"))
                        .help(LAMBDA_HELP),
                );
                return err_expr(span);
            }
        };
        let of_map = items.len() == 2;
        let nlambdas = if of_map && op == LambdaOp::Transform { 2 } else { 1 };
        let nparams = items.len() + usize::from(op == LambdaOp::Reduce);
        let want = 1 + usize::from(op == LambdaOp::Reduce) + nlambdas;
        if args.len() != want {
            return shape_err(self);
        }
        let mut lambdas = Vec::new();
        for l in &args[want - nlambdas..] {
            let ast::Expr::Lambda { params, body } = &l.node else {
                return shape_err(self);
            };
            if params.len() != nparams {
                self.err(
                    Diagnostic::new(
                        Code::ArgCount,
                        l.span,
                        format!(
                            "the lambda of `{name}` over a {} takes {}, not {}",
                            if of_map { "map" } else { "list" },
                            plural(nparams, "parameter"),
                            params.len()
                        ),
                    )
                    .label("its parameters")
                    .help(LAMBDA_HELP),
                );
                return err_expr(span);
            }
            if let Some(p) =
                params.iter().enumerate().find(|(i, p)| params[..*i].iter().any(|q| q.node == p.node)).map(|(_, p)| p)
            {
                self.err(
                    Diagnostic::new(
                        Code::Duplicate,
                        p.span,
                        format!("the lambda's parameter `{}` is named twice", p.node),
                    )
                    .label("duplicate"),
                );
                return err_expr(span);
            }
            lambdas.push((params, body));
        }
        let init = (op == LambdaOp::Reduce).then(|| self.expr(&args[1], scope));
        if let Some(i) = &init {
            if i.ty == Type::Null {
                self.err(
                    Diagnostic::new(Code::TypeMismatch, i.span, "the start value of `reduce` has no type")
                        .label("`null` alone")
                        .help("start from a typed value, e.g. `0`, `0.0` or `\"\"`"),
                );
                return err_expr(span);
            }
        }
        let base = scope.locals();
        let mut bodies = Vec::new();
        for (params, body) in lambdas {
            let mut typed: Vec<(String, Type)> = Vec::new();
            if let Some(i) = &init {
                typed.push((params[0].node.clone(), i.ty.clone()));
            }
            for (p, t) in params[usize::from(init.is_some())..].iter().zip(&items) {
                typed.push((p.node.clone(), t.clone()));
            }
            let inner = Scope::Lambda { params: &typed, base, outer: scope };
            bodies.push(self.expr(body, &inner));
        }
        let mut bodies = bodies.into_iter();
        let Some(body) = bodies.next() else {
            return err_expr(span);
        };
        let value = bodies.next();
        let nullable = list.ty.is_nullable();
        let ty = self.lambda_type(op, &list, init.as_ref(), &body, value.as_ref());
        let body = match op {
            LambdaOp::Reduce => widen(body, &ty),
            _ => body,
        };
        // (`reduce` of a null list or map is its start value, as ksqlDB's REDUCE.)
        let ty = if nullable && op != LambdaOp::Reduce { ty.nullable() } else { ty };
        hir::Expr {
            kind: ExprKind::Lambda {
                op,
                list: Box::new(list),
                init: init.map(Box::new),
                body: Box::new(body),
                value: value.map(Box::new),
                base,
            },
            ty,
            span,
        }
    }

    /// The type of a lambda call's result from its list, start value and bodies (the errors
    /// of a filter's condition that is no bool and a reduce's body that is not of its start
    /// value's type reported).
    fn lambda_type(
        &mut self,
        op: LambdaOp,
        list: &hir::Expr,
        init: Option<&hir::Expr>,
        body: &hir::Expr,
        value: Option<&hir::Expr>,
    ) -> Type {
        match op {
            LambdaOp::Transform => match value {
                Some(v) => {
                    if !body.ty.is_error() {
                        self.map_key(&body.ty, body.span);
                    }
                    Type::Map(Box::new(body.ty.clone()), Box::new(v.ty.clone()))
                }
                None => Type::List(Box::new(body.ty.clone())),
            },
            LambdaOp::Filter => {
                if !body.ty.is_error() && !matches!(body.ty.base(), Type::Bool | Type::Null) {
                    self.err(
                        Diagnostic::new(
                            Code::NotBool,
                            body.span,
                            format!("the condition of `filter` is a {}", body.ty),
                        )
                        .label("not a bool")
                        .help("`filter(xs, x => x > 0)` keeps the items for which the body is true"),
                    );
                }
                list.ty.base().clone()
            }
            LambdaOp::Reduce => {
                let start = init.map(|i| i.ty.clone()).unwrap_or(Type::Error);
                if !body.ty.is_error() && !body.ty.assignable_to(&start) {
                    self.err(
                        Diagnostic::new(
                            Code::TypeMismatch,
                            body.span,
                            format!("the body of `reduce` is a {}, but its start value is a {start}", body.ty),
                        )
                        .label(format!("a {}", body.ty))
                        .help("the body's value is the next value so far: it must have the start value's type"),
                    );
                }
                start
            }
        }
    }
}
