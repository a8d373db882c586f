//! Walks the tree. Every step and every element a result allocates is charged to a budget, and
//! recursion is bounded, so hostile input ends with an error rather than a hang or a crash.

use std::collections::{BTreeMap, HashMap};

use super::builtins;
use super::parse::Node;
use super::value::{Value, equal, invalid, order};

/// Work units (tree steps plus allocated elements) one evaluation may spend.
const BUDGET: usize = 1_000_000;
/// Deepest evaluation recursion (the tree of `1 + 1 + …` is as deep as it is long).
const MAX_EVAL_DEPTH: usize = 128;

/// Why evaluation stopped early: an error, or a `?.` that met nil (caught by its chain).
pub(super) enum Stop {
    Error(String),
    NilChain,
}

impl From<String> for Stop {
    fn from(e: String) -> Self {
        Stop::Error(e)
    }
}

impl From<&str> for Stop {
    fn from(e: &str) -> Self {
        Stop::Error(e.to_string())
    }
}

pub(super) type Res<T> = Result<T, Stop>;

pub(super) struct Eval<'a> {
    env: &'a BTreeMap<String, String>,
    /// `let` bindings, innermost last.
    lets: Vec<(String, Value)>,
    /// Predicate frames: the element (`#`) and its index (`#index`), innermost last.
    frames: Vec<(Value, usize)>,
    spent: usize,
    depth: usize,
    regexes: HashMap<String, regex::Regex>,
}

impl<'a> Eval<'a> {
    pub(super) fn new(env: &'a BTreeMap<String, String>) -> Self {
        Eval {
            env,
            lets: Vec::new(),
            frames: Vec::new(),
            spent: 0,
            depth: 0,
            regexes: HashMap::new(),
        }
    }

    /// Spend `units` of the budget.
    pub(super) fn charge(&mut self, units: usize) -> Result<(), String> {
        self.spent = self.spent.saturating_add(units);
        if self.spent > BUDGET {
            return Err("expression too expensive to evaluate".into());
        }
        Ok(())
    }

    pub(super) fn eval(&mut self, node: &Node) -> Res<Value> {
        self.charge(1)?;
        self.depth += 1;
        if self.depth > MAX_EVAL_DEPTH {
            return Err("expression nested too deeply".into());
        }
        let v = self.eval_node(node);
        self.depth -= 1;
        v
    }

    fn eval_node(&mut self, node: &Node) -> Res<Value> {
        match node {
            Node::Lit(v) => Ok(v.clone()),
            Node::Var(name) => Ok(self.var(name)),
            Node::Env => Ok(Value::Map(
                self.env
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::Str(v.clone())))
                    .collect(),
            )),
            Node::Pointer(name) => self.pointer(name),
            Node::Unary(op, operand) => {
                let v = self.eval(operand)?;
                Ok(unary(op, v)?)
            }
            Node::Binary(op, l, r) => self.binary(op, l, r),
            Node::Ternary(c, a, b) => {
                if self.bool(c, "?:")? {
                    self.eval(a)
                } else {
                    self.eval(b)
                }
            }
            Node::Member { obj, key, optional } => {
                let o = self.eval(obj)?;
                if *optional && matches!(o, Value::Nil) {
                    return Err(Stop::NilChain);
                }
                let k = self.eval(key)?;
                Ok(fetch(&o, &k)?)
            }
            Node::Slice { obj, from, to } => {
                let o = self.eval(obj)?;
                let from = from.as_ref().map(|n| self.eval(n)).transpose()?;
                let to = to.as_ref().map(|n| self.eval(n)).transpose()?;
                Ok(slice(&o, from.as_ref(), to.as_ref())?)
            }
            Node::Chain(inner) => match self.eval(inner) {
                Err(Stop::NilChain) => Ok(Value::Nil),
                other => other,
            },
            Node::Call(name, args) => builtins::call(self, name, args),
            Node::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(self.eval(item)?);
                }
                Ok(Value::Array(out))
            }
            Node::Map(entries) => {
                let mut out = BTreeMap::new();
                for (k, v) in entries {
                    let key = match self.eval(k)? {
                        Value::Str(s) => s,
                        other => {
                            return Err(format!(
                                "map keys must be strings, got {}",
                                other.type_name()
                            )
                            .into());
                        }
                    };
                    let value = self.eval(v)?;
                    out.insert(key, value);
                }
                Ok(Value::Map(out))
            }
            Node::Let(name, value, body) => {
                let v = self.eval(value)?;
                self.lets.push((name.clone(), v));
                let out = self.eval(body);
                self.lets.pop();
                out
            }
        }
    }

    fn var(&self, name: &str) -> Value {
        if let Some((_, v)) = self.lets.iter().rev().find(|(n, _)| n == name) {
            return v.clone();
        }
        self.env
            .get(name)
            .map_or(Value::Nil, |v| Value::Str(v.clone()))
    }

    fn pointer(&self, name: &str) -> Res<Value> {
        let Some((elem, index)) = self.frames.last() else {
            return Err(format!(
                "`#{name}` is only valid inside a predicate like `any(list, # > 1)`"
            )
            .into());
        };
        match name {
            "" => Ok(elem.clone()),
            "index" => Ok(Value::Int(*index as i64)),
            other => Err(format!("`#{other}` is not supported").into()),
        }
    }

    /// Evaluate `node`, which must give a boolean (for `what`).
    pub(super) fn bool(&mut self, node: &Node, what: &str) -> Res<bool> {
        match self.eval(node)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!("{what} needs a bool, got {}", other.type_name()).into()),
        }
    }

    /// Evaluate a predicate body with `#` bound to `elem`.
    pub(super) fn with_elem(&mut self, elem: &Value, index: usize, body: &Node) -> Res<Value> {
        self.frames.push((elem.clone(), index));
        let out = self.eval(body);
        self.frames.pop();
        out
    }

    fn binary(&mut self, op: &str, l: &Node, r: &Node) -> Res<Value> {
        match op {
            "&&" | "||" => return self.logic(op, l, r),
            "??" => {
                return match self.eval(l) {
                    Ok(Value::Nil) | Err(Stop::NilChain) => self.eval(r),
                    other => other,
                };
            }
            _ => {}
        }
        let a = self.eval(l)?;
        let b = self.eval(r)?;
        match op {
            "==" => Ok(Value::Bool(equal(&a, &b))),
            "!=" => Ok(Value::Bool(!equal(&a, &b))),
            "<" => Ok(Value::Bool(order(&a, &b, op)?.is_lt())),
            "<=" => Ok(Value::Bool(order(&a, &b, op)?.is_le())),
            ">" => Ok(Value::Bool(order(&a, &b, op)?.is_gt())),
            ">=" => Ok(Value::Bool(order(&a, &b, op)?.is_ge())),
            "in" => Ok(Value::Bool(self.member(&a, &b)?)),
            "contains" | "startsWith" | "endsWith" => {
                let (Value::Str(x), Value::Str(y)) = (&a, &b) else {
                    return Err(invalid(&a, op, &b).into());
                };
                Ok(Value::Bool(match op {
                    "contains" => x.contains(y.as_str()),
                    "startsWith" => x.starts_with(y.as_str()),
                    _ => x.ends_with(y.as_str()),
                }))
            }
            "matches" => {
                let (Value::Str(x), Value::Str(pattern)) = (&a, &b) else {
                    return Err(invalid(&a, op, &b).into());
                };
                Ok(Value::Bool(self.regex(pattern)?.is_match(x)))
            }
            ".." => {
                let (Value::Int(from), Value::Int(to)) = (&a, &b) else {
                    return Err(invalid(&a, op, &b).into());
                };
                let len = if to < from {
                    0
                } else {
                    usize::try_from(to.abs_diff(*from))
                        .unwrap_or(usize::MAX)
                        .saturating_add(1)
                };
                self.charge(len)?;
                Ok(Value::Array((*from..=*to).map(Value::Int).collect()))
            }
            _ => {
                if op == "+" {
                    self.charge(joined_len(&a, &b))?;
                }
                Ok(arithmetic(op, &a, &b)?)
            }
        }
    }

    /// `a && b && …` / `a || b || …`, short-circuiting. A chain parses left-deep; walking its
    /// spine here keeps a long flat chain from counting as deep nesting.
    fn logic(&mut self, op: &str, l: &Node, r: &Node) -> Res<Value> {
        let mut rights = vec![r];
        let mut first = l;
        while let Node::Binary(inner, left, right) = first {
            if *inner != op {
                break;
            }
            rights.push(right);
            first = left;
        }
        // `&&` stops at the first false, `||` at the first true.
        let stop_on = op == "||";
        if self.bool(first, op)? == stop_on {
            return Ok(Value::Bool(stop_on));
        }
        for node in rights.into_iter().rev() {
            if self.bool(node, op)? == stop_on {
                return Ok(Value::Bool(stop_on));
            }
        }
        Ok(Value::Bool(!stop_on))
    }

    /// `needle in haystack`: array membership or map key; `in` never looks inside strings.
    fn member(&mut self, needle: &Value, haystack: &Value) -> Result<bool, String> {
        match haystack {
            Value::Nil => Ok(false),
            Value::Array(items) => {
                self.charge(items.len())?;
                Ok(items.iter().any(|item| equal(item, needle)))
            }
            Value::Map(m) => match needle {
                Value::Str(k) => Ok(m.contains_key(k)),
                Value::Nil => Ok(false),
                other => Err(format!(
                    "cannot use {} as a map key with `in`",
                    other.type_name()
                )),
            },
            other => Err(format!(
                "operator `in` not defined on {}",
                other.type_name()
            )),
        }
    }

    pub(super) fn regex(&mut self, pattern: &str) -> Result<regex::Regex, String> {
        if let Some(re) = self.regexes.get(pattern) {
            return Ok(re.clone());
        }
        self.charge(pattern.len().saturating_mul(100))?;
        let re = regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| format!("bad regular expression {pattern:?}: {e}"))?;
        self.regexes.insert(pattern.to_string(), re.clone());
        Ok(re)
    }
}

/// How many elements `a + b` allocates, to charge concatenation.
fn joined_len(a: &Value, b: &Value) -> usize {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => x.len() + y.len(),
        (Value::Array(x), Value::Array(y)) => x.len() + y.len(),
        _ => 0,
    }
}

fn unary(op: &str, v: Value) -> Result<Value, String> {
    match (op, v) {
        ("!", Value::Bool(b)) => Ok(Value::Bool(!b)),
        ("-", Value::Int(i)) => Ok(Value::Int(i.wrapping_neg())),
        ("-", Value::Float(f)) => Ok(Value::Float(-f)),
        ("+", v @ (Value::Int(_) | Value::Float(_))) => Ok(v),
        (op, v) => Err(format!("invalid operation: {op}{}", v.type_name())),
    }
}

/// `+ - * / % **` with Go's rules: int op int stays int (wrapping), except `/` and `**`, which
/// are always float; `+` also joins strings and arrays.
pub(super) fn arithmetic(op: &str, a: &Value, b: &Value) -> Result<Value, String> {
    match (op, a, b) {
        ("+", Value::Str(x), Value::Str(y)) => return Ok(Value::Str(format!("{x}{y}"))),
        ("+", Value::Array(x), Value::Array(y)) => {
            return Ok(Value::Array(x.iter().chain(y).cloned().collect()));
        }
        (_, Value::Int(x), Value::Int(y)) => {
            let (x, y) = (*x, *y);
            match op {
                "+" => return Ok(Value::Int(x.wrapping_add(y))),
                "-" => return Ok(Value::Int(x.wrapping_sub(y))),
                "*" => return Ok(Value::Int(x.wrapping_mul(y))),
                "%" if y == 0 => return Err("integer divide by zero".into()),
                "%" => return Ok(Value::Int(x.wrapping_rem(y))),
                _ => {}
            }
        }
        _ => {}
    }
    let (Some(x), Some(y)) = (a.as_f64(), b.as_f64()) else {
        return Err(invalid(a, op, b));
    };
    Ok(Value::Float(match op {
        "+" => x + y,
        "-" => x - y,
        "*" => x * y,
        "/" => x / y,
        "**" => x.powf(y),
        _ => return Err(invalid(a, op, b)),
    }))
}

/// An index usable on arrays: ints, or floats truncated (expr-lang's `ToInt`).
fn to_index(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::Float(f) => Some(*f as i64),
        _ => None,
    }
}

/// `obj[key]` / `obj.key`: a missing map key is nil; an array index out of range, or any
/// access on nil, is an error (expr-lang's `Fetch`).
pub(super) fn fetch(obj: &Value, key: &Value) -> Result<Value, String> {
    match (obj, key) {
        (Value::Map(m), Value::Str(k)) => Ok(m.get(k).cloned().unwrap_or(Value::Nil)),
        (Value::Array(items), k) if to_index(k).is_some() => {
            let len = items.len() as i64;
            let i = to_index(k).unwrap_or_default();
            let at = if i < 0 { len + i } else { i };
            if at < 0 || at >= len {
                return Err(format!("index out of range: {i} (array length is {len})"));
            }
            Ok(items[at as usize].clone())
        }
        (Value::Str(_), Value::Int(_)) => {
            Err("indexing a string is not supported; use a slice like s[0:1]".into())
        }
        _ => Err(format!(
            "cannot fetch {} from {}",
            match key {
                Value::Str(s) => s.clone(),
                other => other.type_name().to_string(),
            },
            obj.type_name()
        )),
    }
}

/// `obj[from:to]` on arrays and strings: negative bounds count from the end, and bounds are
/// clamped to the length (expr-lang's `Slice`). Strings slice by bytes, as in Go.
fn slice(obj: &Value, from: Option<&Value>, to: Option<&Value>) -> Result<Value, String> {
    let len = match obj {
        Value::Array(items) => items.len(),
        Value::Str(s) => s.len(),
        other => return Err(format!("cannot slice {}", other.type_name())),
    } as i64;
    let bound = |v: Option<&Value>, default: i64| -> Result<i64, String> {
        let Some(v) = v else { return Ok(default) };
        let i = to_index(v)
            .ok_or_else(|| format!("slice bounds must be ints, got {}", v.type_name()))?;
        Ok(if i < 0 { (len + i).max(0) } else { i.min(len) })
    };
    let b = bound(to, len)?;
    let a = bound(from, 0)?.min(b);
    let (a, b) = (a as usize, b as usize);
    match obj {
        Value::Array(items) => Ok(Value::Array(items[a..b].to_vec())),
        Value::Str(s) => s
            .get(a..b)
            .map(|s| Value::Str(s.to_string()))
            .ok_or_else(|| format!("slice [{a}:{b}] splits a multi-byte character")),
        _ => Err("cannot slice".into()),
    }
}
