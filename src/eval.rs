//! Evaluation of checked expressions. Fields are index paths resolved by the checker, so a
//! record is never searched by name here. Overflow, division by zero and non-finite results are
//! errors (the record goes to the dead-letter topic); nothing here reads a clock or randomness.
//! Recursion is bounded by the tree height the parser allows.

use std::sync::Arc;

use crate::ast::{BinOp, Literal, UnOp};
use crate::function::{finite, Function};
use crate::hir::{AggregateDef, Expr, ExprKind, Root, Stmt};
use crate::value::Value;

/// A record as the operators see it.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub key: Value,
    pub value: Vec<Value>,
    /// The joined sides, in join order: their key and value (None: no match in a left join).
    pub joined: Vec<Option<(Value, Arc<Vec<Value>>)>>,
    /// The record's tenant, over a tenant-scoped stream (raw bytes: a header may carry any).
    /// Expressions never see it; the task scopes every state key with it.
    pub tenant: Option<Tenant>,
    /// In a grouped table's chain (`TaskSpec::table_group`), a row taken back: before the
    /// grouping, the key's row is gone (deleted, or dropped by a filter; the value is not read);
    /// after it, this old row's contribution leaves its group.
    pub retract: bool,
}

/// A tenant id, as the record carried it.
pub type Tenant = Arc<[u8]>;

pub type EvalResult = Result<Value, String>;

pub use crate::value::MAX_LIST;

/// Evaluate over a row (locals unused) or over locals (aggregate and function bodies).
pub fn eval(e: &Expr, row: &Row, locals: &[Value]) -> EvalResult {
    Ok(match &e.kind {
        ExprKind::Lit(l) => lit(l),
        ExprKind::Field(root, path) => {
            let base = match root {
                Root::Key => return Ok(descend(&row.key, path)),
                Root::Value => match path.split_first() {
                    Some((first, rest)) => return Ok(descend(row.value.get(*first).unwrap_or(&Value::Null), rest)),
                    None => Value::Record(Arc::new(row.value.clone())),
                },
                Root::Joined(j) => match row.joined.get(*j).and_then(|x| x.as_ref()) {
                    Some((_, v)) => match path.split_first() {
                        Some((first, rest)) => return Ok(descend(v.get(*first).unwrap_or(&Value::Null), rest)),
                        None => Value::Record(v.clone()),
                    },
                    None => Value::Null,
                },
                Root::JoinedKey(j) => match row.joined.get(*j).and_then(|x| x.as_ref()) {
                    Some((k, _)) => k.clone(),
                    None => Value::Null,
                },
            };
            base
        }
        ExprKind::Local(i) => locals.get(*i).cloned().unwrap_or(Value::Null),
        ExprKind::Get(inner, i) => match eval(inner, row, locals)? {
            Value::Record(f) => f.get(*i).cloned().unwrap_or(Value::Null),
            _ => Value::Null,
        },
        ExprKind::Unary(op, inner) => {
            let v = eval(inner, row, locals)?;
            match (op, v) {
                (_, Value::Null) => Value::Null,
                (UnOp::Not, Value::Bool(b)) => Value::Bool(!b),
                (UnOp::Neg, Value::Int(i)) => Value::Int(i.checked_neg().ok_or("integer overflow in negation")?),
                (UnOp::Neg, Value::Float(f)) => Value::Float(-f),
                (UnOp::Neg, Value::Dur(d)) => Value::Dur(d.checked_neg().ok_or("duration overflow in negation")?),
                (_, v) => return Err(format!("cannot apply {op:?} to {v}")),
            }
        }
        ExprKind::Binary(op, l, r) => binary(*op, l, r, row, locals)?,
        ExprKind::Chain(first, rest) => {
            let mut acc = eval(first, row, locals)?;
            for (op, e) in rest {
                acc = apply_binary(*op, &acc, &eval(e, row, locals)?)?;
            }
            acc
        }
        ExprKind::IsNull(inner, negated) => Value::Bool(eval(inner, row, locals)?.is_null() != *negated),
        ExprKind::Between(x, lo, hi, negated) => {
            // `x >= lo and x <= hi` (or `x < lo or x > hi`), three-valued, `x` evaluated once.
            let x = eval(x, row, locals)?;
            let truth = |v: Value| match v {
                Value::Bool(b) => Some(b),
                _ => None,
            };
            let above = truth(apply_binary(BinOp::Ge, &x, &eval(lo, row, locals)?)?);
            let below = truth(apply_binary(BinOp::Le, &x, &eval(hi, row, locals)?)?);
            let inside = match (above, below) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            };
            match inside {
                Some(b) => Value::Bool(b != *negated),
                None => Value::Null,
            }
        }
        ExprKind::If(c, a, b) => match eval(c, row, locals)? {
            Value::Bool(true) => eval(a, row, locals)?,
            _ => eval(b, row, locals)?,
        },
        ExprKind::List(items) => {
            Value::List(Arc::new(items.iter().map(|i| eval(i, row, locals)).collect::<Result<_, _>>()?))
        }
        ExprKind::Map(entries) => map_lit(entries, row, locals)?,
        ExprKind::Record(fields) => {
            Value::Record(Arc::new(fields.iter().map(|(_, i)| eval(i, row, locals)).collect::<Result<_, _>>()?))
        }
        ExprKind::Builtin(f, args) => builtin(*f, args, row, locals)?,
        ExprKind::Function(f, args) => {
            let vals: Vec<Value> = args.iter().map(|a| eval(a, row, locals)).collect::<Result<_, _>>()?;
            eval(&f.body, &Row::default(), &vals)?
        }
        ExprKind::Lambda { op, list, init, body, value, base } => {
            lambda(*op, list, init.as_deref(), (body, value.as_deref()), *base, row, locals)?
        }
    })
}

/// `map { k: v, … }` (out of [`eval`] so that its locals do not enlarge that recursive
/// function's frame).
#[inline(never)]
fn map_lit(entries: &[(Expr, Expr)], row: &Row, locals: &[Value]) -> EvalResult {
    let mut out = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        let key = eval(k, row, locals)?;
        if key.is_null() {
            return Err("a map key is null".into());
        }
        out.push((key, eval(v, row, locals)?));
    }
    Ok(Value::map(out))
}

/// `transform`, `filter` or `reduce` over the list or map `list` evaluates to (null: null).
/// `bodies`: the lambda's body, and of a map's `transform`, the body making the new value.
fn lambda(
    op: crate::hir::LambdaOp,
    list: &Expr,
    init: Option<&Expr>,
    (body, value): (&Expr, Option<&Expr>),
    base: usize,
    row: &Row,
    locals: &[Value],
) -> EvalResult {
    use crate::hir::LambdaOp;
    let coll = eval(list, row, locals)?;
    // Each item's parameters: a list's item, or a map entry's key and value.
    let items: Vec<(&Value, Option<&Value>)> = match &coll {
        Value::List(items) => items.iter().map(|x| (x, None)).collect(),
        Value::Map(entries) => entries.iter().map(|(k, v)| (k, Some(v))).collect(),
        // ksqlDB's rules: `reduce` of null is its start value, `transform` and `filter` of
        // null are null.
        Value::Null if op == LambdaOp::Reduce => {
            return match init {
                Some(i) => eval(i, row, locals),
                None => Ok(Value::Null),
            }
        }
        Value::Null => return Ok(Value::Null),
        v => return Err(format!("`{}` of {v}, which is not a list or a map", format!("{op:?}").to_lowercase())),
    };
    let of_map = matches!(coll, Value::Map(_));
    // The enclosing scope's locals, then the lambda's parameters.
    let mut loc: Vec<Value> = Vec::with_capacity(base + 3);
    loc.extend(locals.iter().take(base).cloned());
    loc.resize(base, Value::Null);
    let bind = |loc: &mut Vec<Value>, acc: Option<Value>, (a, b): (&Value, Option<&Value>)| {
        loc.truncate(base);
        loc.extend(acc);
        loc.push(a.clone());
        loc.extend(b.cloned());
    };
    Ok(match op {
        LambdaOp::Transform if of_map => {
            let mut out = Vec::with_capacity(items.len());
            for params in items {
                bind(&mut loc, None, params);
                let k = eval(body, row, &loc)?;
                if k.is_null() {
                    return Err("`transform` of a map made a null key".into());
                }
                let v = match value {
                    Some(v) => eval(v, row, &loc)?,
                    None => Value::Null,
                };
                out.push((k, v));
            }
            Value::map(out)
        }
        LambdaOp::Transform => {
            let mut out = Vec::with_capacity(items.len());
            for params in items {
                bind(&mut loc, None, params);
                out.push(eval(body, row, &loc)?);
            }
            Value::List(Arc::new(out))
        }
        LambdaOp::Filter => {
            let mut kept = Vec::new();
            for (i, params) in items.into_iter().enumerate() {
                bind(&mut loc, None, params);
                if eval(body, row, &loc)? == Value::Bool(true) {
                    kept.push(i);
                }
            }
            match &coll {
                // Entries stay sorted and distinct: no need to rebuild the map.
                Value::Map(es) => Value::Map(Arc::new(kept.into_iter().map(|i| es[i].clone()).collect())),
                Value::List(xs) => Value::List(Arc::new(kept.into_iter().map(|i| xs[i].clone()).collect())),
                _ => Value::Null,
            }
        }
        LambdaOp::Reduce => {
            let mut acc = match init {
                Some(i) => eval(i, row, locals)?,
                None => Value::Null,
            };
            // A null start value: null (ksqlDB's REDUCE).
            if acc.is_null() {
                return Ok(Value::Null);
            }
            for params in items {
                bind(&mut loc, Some(acc), params);
                acc = eval(body, row, &loc)?;
            }
            acc
        }
    })
}

fn lit(l: &Literal) -> Value {
    match l {
        Literal::Int(i) => Value::Int(*i),
        Literal::Float(f) => Value::Float(*f),
        Literal::String(s) => Value::str(s),
        Literal::Bool(b) => Value::Bool(*b),
        Literal::Duration(d) => Value::Dur(d.0),
        Literal::Null => Value::Null,
    }
}

fn descend(v: &Value, path: &[usize]) -> Value {
    let mut cur = v;
    for i in path {
        match cur {
            Value::Record(f) => match f.get(*i) {
                Some(x) => cur = x,
                None => return Value::Null,
            },
            _ => return Value::Null,
        }
    }
    cur.clone()
}

fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    }
}

fn binary(op: BinOp, l: &Expr, r: &Expr, row: &Row, locals: &[Value]) -> EvalResult {
    use Value::*;
    // Three-valued `and` / `or`, short-circuiting.
    if matches!(op, BinOp::And | BinOp::Or) {
        let a = eval(l, row, locals)?;
        let short = if op == BinOp::And { Bool(false) } else { Bool(true) };
        if a == short {
            return Ok(short);
        }
        let b = eval(r, row, locals)?;
        return Ok(match (a, b) {
            (_, b) if b == short => short,
            (Null, _) | (_, Null) => Null,
            (_, b) => b,
        });
    }
    let a = eval(l, row, locals)?;
    let b = eval(r, row, locals)?;
    apply_binary(op, &a, &b)
}

/// A binary operator other than `and` / `or` applied to two values.
fn apply_binary(op: BinOp, a: &Value, b: &Value) -> EvalResult {
    use Value::*;
    let sym = op.symbol();
    Ok(match op {
        BinOp::Eq => Bool(a.equals(b)),
        BinOp::Ne => Bool(!a.equals(b)),
        _ if a.is_null() || b.is_null() => Null,
        BinOp::Lt => Bool(a.cmp_total(b).is_lt()),
        BinOp::Le => Bool(a.cmp_total(b).is_le()),
        BinOp::Gt => Bool(a.cmp_total(b).is_gt()),
        BinOp::Ge => Bool(a.cmp_total(b).is_ge()),
        BinOp::In | BinOp::NotIn => {
            let found = match b {
                List(items) => items.iter().any(|x| x.equals(a)),
                _ => false,
            };
            Bool(found == (op == BinOp::In))
        }
        BinOp::Add => match (a, b) {
            (Int(x), Int(y)) => Int(add_ints(*x, *y)?),
            (Float(x), Float(y)) => add_floats(*x, *y)?,
            (Str(x), Str(y)) => Value::str(&format!("{x}{y}")),
            (Ts(t), Dur(d)) | (Dur(d), Ts(t)) => Ts(t.checked_add(*d).ok_or("timestamp overflow in `+`")?),
            (Dur(x), Dur(y)) => Dur(x.checked_add(*y).ok_or("duration overflow in `+`")?),
            (List(x), List(y)) => {
                if x.len() + y.len() > MAX_LIST {
                    return Err(format!(
                        "`+` of lists of {} and {} items: more than the {MAX_LIST} a list may hold",
                        x.len(),
                        y.len()
                    ));
                }
                let mut out = Vec::with_capacity(x.len() + y.len());
                out.extend_from_slice(x);
                out.extend_from_slice(y);
                List(Arc::new(out))
            }
            _ => finite(num(a).ok_or("bad operands")? + num(b).ok_or("bad operands")?, "the result of `+`")?,
        },
        BinOp::Sub => match (a, b) {
            (Int(x), Int(y)) => Int(x.checked_sub(*y).ok_or("integer overflow in `-`")?),
            (Ts(t), Dur(d)) => Ts(t.checked_sub(*d).ok_or("timestamp overflow in `-`")?),
            (Ts(x), Ts(y)) => Dur(x.checked_sub(*y).ok_or("duration overflow in `-`")?),
            (Dur(x), Dur(y)) => Dur(x.checked_sub(*y).ok_or("duration overflow in `-`")?),
            _ => finite(num(a).ok_or("bad operands")? - num(b).ok_or("bad operands")?, "the result of `-`")?,
        },
        BinOp::Mul => match (a, b) {
            (Int(x), Int(y)) => Int(x.checked_mul(*y).ok_or("integer overflow in `*`")?),
            (Dur(d), Int(n)) | (Int(n), Dur(d)) => Dur(d.checked_mul(*n).ok_or("duration overflow in `*`")?),
            _ => finite(num(a).ok_or("bad operands")? * num(b).ok_or("bad operands")?, "the result of `*`")?,
        },
        BinOp::Div | BinOp::Rem => {
            let div = op == BinOp::Div;
            match (a, b) {
                (Int(_), Int(0)) | (Dur(_), Int(0)) => return Err(format!("division by zero in `{sym}`")),
                (Int(x), Int(y)) => Int(if div { x.checked_div(*y) } else { x.checked_rem(*y) }
                    .ok_or_else(|| format!("integer overflow in `{sym}`"))?),
                (Dur(x), Int(y)) => Dur(if div { x.checked_div(*y) } else { x.checked_rem(*y) }
                    .ok_or_else(|| format!("duration overflow in `{sym}`"))?),
                _ => {
                    let (x, y) = (num(a).ok_or("bad operands")?, num(b).ok_or("bad operands")?);
                    if y == 0.0 {
                        return Err(format!("division by zero in `{sym}`"));
                    }
                    finite(
                        if div { x / y } else { x % y },
                        if div { "the result of `/`" } else { "the result of `%`" },
                    )?
                }
            }
        }
        // Evaluated (short-circuiting) before the operands above.
        BinOp::And | BinOp::Or => Null,
    })
}

fn builtin(f: &dyn Function, args: &[Expr], row: &Row, locals: &[Value]) -> EvalResult {
    let mut vals = Vec::with_capacity(args.len());
    for a in args {
        vals.push(eval(a, row, locals)?);
    }
    if !f.sees_nulls() && vals.iter().any(Value::is_null) {
        return Ok(Value::Null);
    }
    f.eval(vals)
}

/// Run statements over `locals` (already sized to the body's slot count).
pub fn run_stmts(stmts: &[Stmt], locals: &mut [Value]) -> Result<(), String> {
    let row = Row::default();
    for Stmt::Set(slot, e) in stmts {
        let v = eval(e, &row, locals)?;
        if let Some(l) = locals.get_mut(*slot) {
            *l = v;
        }
    }
    Ok(())
}

/// A user-defined aggregate's initial state.
pub fn uda_init(def: &AggregateDef) -> Result<Vec<Value>, String> {
    let row = Row::default();
    def.init.iter().map(|e| eval(e, &row, &[])).collect()
}

/// Update a user-defined aggregate's state with one call's argument values.
pub fn uda_update(def: &AggregateDef, state: &mut [Value], args: &[Value]) -> Result<(), String> {
    if let Some(steps) = &def.in_place {
        return update_in_place(steps, state, args);
    }
    run_over_args(&def.update, def.update_slots, def.params.len(), state, args)
}

/// Take one call's argument values back out of a user-defined aggregate's state (its `undo`).
pub fn uda_undo(def: &AggregateDef, state: &mut [Value], args: &[Value]) -> Result<(), String> {
    let Some(stmts) = &def.undo else {
        return Err(format!("aggregate `{}` cannot take a value back (it has no `undo`)", def.name));
    };
    run_over_args(stmts, def.undo_slots, def.params.len(), state, args)
}

/// Run `update` or `undo` statements over the slots `[params.., state.., lets..]`.
fn run_over_args(stmts: &[Stmt], slots: usize, np: usize, state: &mut [Value], args: &[Value]) -> Result<(), String> {
    let ns = state.len();
    // The locals live in a buffer reused across calls (this runs for every record and window).
    thread_local! {
        static LOCALS: std::cell::RefCell<Vec<Value>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    LOCALS.with(|cell| {
        let mut locals = cell.take();
        locals.clear();
        locals.extend_from_slice(args);
        locals.extend(state.iter_mut().map(|v| std::mem::replace(v, Value::Null)));
        locals.resize(slots.max(np + ns), Value::Null);
        let r = run_stmts(stmts, &mut locals);
        // The state gets its slots back, even after an error (then with what the statements
        // assigned before failing).
        for (s, l) in state.iter_mut().zip(locals.drain(np..np + ns)) {
            *s = l;
        }
        cell.replace(locals);
        r
    })
}

/// `x + y` of two ints, as `+` computes it.
fn add_ints(x: i64, y: i64) -> Result<i64, String> {
    x.checked_add(y).ok_or_else(|| "integer overflow in `+`".into())
}

/// `x + y` of two floats, as `+` computes it.
fn add_floats(x: f64, y: f64) -> EvalResult {
    finite(x + y, "the result of `+`")
}

/// Run an update found to be [`InPlace`](crate::hir::InPlace) steps directly on the state,
/// with `binary`'s arithmetic. On an error the state keeps what the steps before assigned, as
/// when interpreted.
fn update_in_place(steps: &[crate::hir::InPlace], state: &mut [Value], args: &[Value]) -> Result<(), String> {
    use crate::hir::Operand;
    /// A number operand, read without cloning.
    enum Num {
        I(i64),
        F(f64),
    }
    let num = |v: Option<&Value>| match v {
        Some(Value::Int(x)) => Some(Num::I(*x)),
        Some(Value::Float(x)) => Some(Num::F(*x)),
        _ => None,
    };
    for step in steps {
        // `+` of two ints or two floats (counts and sums: most updates) without cloning the
        // operand, by `apply_binary`'s own additions; everything else through it.
        if step.op == BinOp::Add {
            let operand = match &step.operand {
                Operand::Param(i) => num(args.get(*i)),
                Operand::State(i) => num(state.get(*i)),
                Operand::Lit(Literal::Int(x)) => Some(Num::I(*x)),
                Operand::Lit(Literal::Float(x)) => Some(Num::F(*x)),
                Operand::Lit(_) => None,
            };
            // (Added in place: no value made and dropped.)
            match (state.get_mut(step.state), operand) {
                (Some(Value::Int(a)), Some(Num::I(b))) => {
                    *a = add_ints(*a, b)?;
                    continue;
                }
                (Some(Value::Float(a)), Some(Num::F(b))) => {
                    let s = *a + b;
                    if !s.is_finite() {
                        // (`+`'s own error.)
                        add_floats(*a, b)?;
                    }
                    *a = s;
                    continue;
                }
                _ => {}
            }
        }
        // Slots out of range read as null, as the interpreter's locals do.
        let at = |v: &[Value], i: usize| v.get(i).cloned().unwrap_or(Value::Null);
        let operand = match &step.operand {
            Operand::Param(i) => at(args, *i),
            Operand::State(i) => at(state, *i),
            Operand::Lit(l) => lit(l),
        };
        let Some(current) = state.get_mut(step.state) else { continue };
        *current = apply_binary(step.op, current, &operand)?;
    }
    Ok(())
}

pub fn uda_result(def: &AggregateDef, state: &[Value]) -> EvalResult {
    eval(&def.result, &Row::default(), state)
}

/// Merge a second state of a user-defined aggregate into the first (its `merge` block).
pub fn uda_merge(def: &AggregateDef, state: &mut Vec<Value>, other: Vec<Value>) -> Result<(), String> {
    let Some(stmts) = &def.merge else {
        return Err(format!("aggregate `{}` cannot merge (it has no `merge`)", def.name));
    };
    let ns = def.state.len();
    let mut locals = Vec::with_capacity(def.merge_slots.max(2 * ns));
    locals.append(state);
    locals.extend(other);
    locals.resize(def.merge_slots.max(2 * ns), Value::Null);
    run_stmts(stmts, &mut locals)?;
    state.extend(locals.drain(..ns));
    Ok(())
}
