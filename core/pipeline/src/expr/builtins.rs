//! expr-lang's builtin functions. Predicate builtins (`all`, `filter`, `map`, …) take a
//! closure as their second argument and evaluate it once per element with `#` bound.

use base64::Engine;

use super::eval::{Eval, Res, arithmetic, fetch};
use super::parse::Node;
use super::value::{Value, equal, from_json, go_string, order, to_json};

/// Arity, and whether argument 2 is a predicate closure.
pub(super) struct Spec {
    pub min: usize,
    pub max: usize,
    pub predicate: bool,
}

const ANY: usize = usize::MAX;

/// What `name(…)` accepts, or an error naming an unknown or unsupported function.
pub(super) fn spec(name: &str) -> Result<Spec, String> {
    let (min, max, predicate) = match name {
        "all" | "any" | "none" | "one" | "filter" | "map" | "find" | "findIndex" | "findLast"
        | "findLastIndex" => (2, 2, true),
        "count" | "sum" => (1, 2, true),
        "sortBy" => (2, 3, true),
        "len" | "first" | "last" | "fromJSON" | "toJSON" | "lower" | "upper" | "int" | "float"
        | "string" | "keys" | "values" | "abs" | "reverse" | "uniq" | "flatten" | "ceil"
        | "floor" | "round" | "mean" | "median" | "toBase64" | "fromBase64" | "type"
        | "toPairs" | "fromPairs" | "bitnot" => (1, 1, false),
        "trim" | "trimPrefix" | "trimSuffix" | "join" | "sort" => (1, 2, false),
        "hasPrefix" | "hasSuffix" | "repeat" | "indexOf" | "lastIndexOf" | "get" | "take"
        | "bitand" | "bitor" | "bitxor" | "bitnand" | "bitshl" | "bitshr" | "bitushr" => {
            (2, 2, false)
        }
        "split" | "splitAfter" => (2, 3, false),
        "replace" => (3, 3, false),
        "max" | "min" | "concat" => (1, ANY, false),
        "now" | "date" | "duration" | "timezone" | "reduce" | "groupBy" => {
            return Err(format!("function `{name}()` is not supported"));
        }
        _ => return Err(format!("unknown function `{name}()`")),
    };
    Ok(Spec {
        min,
        max,
        predicate,
    })
}

fn type_error(name: &str, v: &Value) -> String {
    format!("`{name}()` of {} is not supported", v.type_name())
}

fn array<'v>(name: &str, v: &'v Value) -> Result<&'v [Value], String> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(type_error(name, other)),
    }
}

fn string<'v>(name: &str, v: &'v Value) -> Result<&'v str, String> {
    match v {
        Value::Str(s) => Ok(s),
        other => Err(type_error(name, other)),
    }
}

fn int(name: &str, v: &Value) -> Result<i64, String> {
    match v {
        Value::Int(i) => Ok(*i),
        other => Err(type_error(name, other)),
    }
}

pub(super) fn call(ev: &mut Eval, name: &str, args: &[Node]) -> Res<Value> {
    if spec(name)?.predicate {
        return predicate(ev, name, args);
    }
    let mut vals = Vec::with_capacity(args.len());
    for a in args {
        vals.push(ev.eval(a)?);
    }
    Ok(plain(ev, name, &vals)?)
}

/// The builtins with a closure: the first argument is the list, the second the closure.
fn predicate(ev: &mut Eval, name: &str, args: &[Node]) -> Res<Value> {
    let list = ev.eval(&args[0])?;
    let items = match &list {
        Value::Array(items) => items.clone(),
        other => return Err(type_error(name, other).into()),
    };
    let Some(body) = args.get(1) else {
        // count(list) counts trues; sum(list) adds.
        return Ok(plain(ev, name, &[list])?);
    };
    ev.charge(items.len())?;
    let test = |ev: &mut Eval, i: usize, item: &Value| -> Res<bool> {
        match ev.with_elem(item, i, body)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!(
                "the predicate of `{name}()` must give a bool, got {}",
                other.type_name()
            )
            .into()),
        }
    };
    let found = |i: Option<usize>| match name {
        "find" | "findLast" => i.map_or(Value::Nil, |i| items[i].clone()),
        _ => Value::Int(i.map_or(-1, |i| i as i64)),
    };
    Ok(match name {
        "all" | "any" | "none" => {
            // `all` stops at the first false, `any` and `none` at the first true.
            let stop_on = name != "all";
            for (i, item) in items.iter().enumerate() {
                if test(ev, i, item)? == stop_on {
                    return Ok(Value::Bool(name == "any"));
                }
            }
            Value::Bool(name != "any")
        }
        "one" | "count" => {
            let mut n = 0i64;
            for (i, item) in items.iter().enumerate() {
                n += i64::from(test(ev, i, item)?);
            }
            if name == "one" {
                Value::Bool(n == 1)
            } else {
                Value::Int(n)
            }
        }
        "filter" => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                if test(ev, i, item)? {
                    out.push(item.clone());
                }
            }
            Value::Array(out)
        }
        "find" | "findIndex" => {
            let mut hit = None;
            for (i, item) in items.iter().enumerate() {
                if test(ev, i, item)? {
                    hit = Some(i);
                    break;
                }
            }
            found(hit)
        }
        "findLast" | "findLastIndex" => {
            let mut hit = None;
            for (i, item) in items.iter().enumerate().rev() {
                if test(ev, i, item)? {
                    hit = Some(i);
                    break;
                }
            }
            found(hit)
        }
        "map" | "sum" | "sortBy" => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(ev.with_elem(item, i, body)?);
            }
            match name {
                "map" => Value::Array(out),
                "sum" => sum(&out)?,
                _ => {
                    let desc = match args.get(2) {
                        Some(n) => descending(&ev.eval(n)?)?,
                        None => false,
                    };
                    let mut keyed: Vec<(Value, Value)> = out.into_iter().zip(items).collect();
                    if let Node::Lit(Value::Str(field)) = body {
                        // The older form `sortBy(users, "Age")` names the key.
                        for (key, item) in &mut keyed {
                            *key = fetch(item, &Value::Str(field.clone()))?;
                        }
                    }
                    sort_checked(&mut keyed, |p| &p.0, desc)?;
                    Value::Array(keyed.into_iter().map(|p| p.1).collect())
                }
            }
        }
        other => return Err(format!("unknown function `{other}()`").into()),
    })
}

fn sum(items: &[Value]) -> Result<Value, String> {
    let mut total = Value::Int(0);
    for item in items {
        if !matches!(item, Value::Int(_) | Value::Float(_)) {
            return Err(type_error("sum", item));
        }
        total = arithmetic("+", &total, item)?;
    }
    Ok(total)
}

fn descending(v: &Value) -> Result<bool, String> {
    match v {
        Value::Str(s) if s == "asc" => Ok(false),
        Value::Str(s) if s == "desc" => Ok(true),
        other => Err(format!(
            "sort order must be \"asc\" or \"desc\", got {}",
            go_string(other)
        )),
    }
}

/// Sort by a key, failing (instead of guessing) when two keys cannot be ordered.
fn sort_checked<T>(items: &mut [T], key: impl Fn(&T) -> &Value, desc: bool) -> Result<(), String> {
    for pair in items.windows(2) {
        order(key(&pair[0]), key(&pair[1]), "sort")?;
    }
    if let Some(first) = items.first() {
        for item in items.iter() {
            order(key(first), key(item), "sort")?;
        }
    }
    items.sort_by(|a, b| {
        let o = order(key(a), key(b), "sort").unwrap_or(std::cmp::Ordering::Equal);
        if desc { o.reverse() } else { o }
    });
    Ok(())
}

/// The numbers in `vals`, looking inside arrays at any depth (`max(1, [2, [3]])`).
fn numbers(name: &str, vals: &[Value]) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for v in vals {
        match v {
            Value::Array(items) => out.extend(numbers(name, items)?),
            Value::Int(_) | Value::Float(_) => out.push(v.clone()),
            other => return Err(type_error(name, other)),
        }
    }
    Ok(out)
}

fn plain(ev: &mut Eval, name: &str, vals: &[Value]) -> Result<Value, String> {
    let arg = |i: usize| vals.get(i).unwrap_or(&Value::Nil);
    let a = arg(0);
    let text = |i: usize| string(name, arg(i));
    Ok(match name {
        "len" => Value::Int(match a {
            Value::Array(items) => items.len(),
            Value::Map(m) => m.len(),
            Value::Str(s) => s.chars().count(),
            other => return Err(type_error(name, other)),
        } as i64),
        "count" => {
            let mut n = 0;
            for item in array(name, a)? {
                match item {
                    Value::Bool(b) => n += i64::from(*b),
                    other => return Err(type_error(name, other)),
                }
            }
            Value::Int(n)
        }
        "sum" => sum(array(name, a)?)?,
        "first" => fetch(a, &Value::Int(0)).unwrap_or(Value::Nil),
        "last" => fetch(a, &Value::Int(-1)).unwrap_or(Value::Nil),
        "get" => fetch(a, arg(1)).unwrap_or(Value::Nil),
        "fromJSON" => {
            let s = text(0)?;
            ev.charge(s.len())?;
            from_json(serde_json::from_str(s).map_err(|e| format!("fromJSON: {e}"))?)
        }
        "toJSON" => {
            let s = to_json(a)?;
            ev.charge(s.len())?;
            Value::Str(s)
        }
        "toBase64" => Value::Str(base64::engine::general_purpose::STANDARD.encode(text(0)?)),
        "fromBase64" => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text(0)?)
                .map_err(|e| format!("fromBase64: {e}"))?;
            Value::Str(String::from_utf8(bytes).map_err(|_| "fromBase64: not UTF-8 text")?)
        }
        "lower" => Value::Str(text(0)?.to_lowercase()),
        "upper" => Value::Str(text(0)?.to_uppercase()),
        "trim" => Value::Str(match vals.get(1) {
            None => text(0)?.trim().to_string(),
            Some(_) => {
                let cut: Vec<char> = text(1)?.chars().collect();
                text(0)?.trim_matches(cut.as_slice()).to_string()
            }
        }),
        "trimPrefix" | "trimSuffix" => {
            let s = text(0)?;
            let affix = if vals.len() > 1 { text(1)? } else { " " };
            Value::Str(
                if name == "trimPrefix" {
                    s.strip_prefix(affix)
                } else {
                    s.strip_suffix(affix)
                }
                .unwrap_or(s)
                .to_string(),
            )
        }
        "hasPrefix" => Value::Bool(text(0)?.starts_with(text(1)?)),
        "hasSuffix" => Value::Bool(text(0)?.ends_with(text(1)?)),
        "replace" => {
            let s = text(0)?.replace(text(1)?, text(2)?);
            ev.charge(s.len())?;
            Value::Str(s)
        }
        "repeat" => {
            let s = text(0)?;
            let n = int(name, arg(1))?;
            let n = usize::try_from(n).map_err(|_| "repeat: negative count".to_string())?;
            ev.charge(s.len().saturating_mul(n))?;
            Value::Str(s.repeat(n))
        }
        "indexOf" => Value::Int(text(0)?.find(text(1)?).map_or(-1, |i| i as i64)),
        "lastIndexOf" => Value::Int(text(0)?.rfind(text(1)?).map_or(-1, |i| i as i64)),
        "split" | "splitAfter" => {
            let (s, sep) = (text(0)?, text(1)?);
            let n = if vals.len() > 2 {
                int(name, arg(2))?
            } else {
                -1
            };
            ev.charge(s.len())?;
            Value::Array(split(s, sep, n, name == "splitAfter"))
        }
        "join" => {
            let sep = if vals.len() > 1 { text(1)? } else { "" };
            let parts = array(name, a)?
                .iter()
                .map(|v| string(name, v))
                .collect::<Result<Vec<_>, _>>()?;
            Value::Str(parts.join(sep))
        }
        "int" => Value::Int(match a {
            Value::Int(i) => *i,
            Value::Float(f) => *f as i64,
            Value::Str(s) => s
                .parse()
                .map_err(|_| format!("int(): cannot parse {s:?} as an integer"))?,
            other => return Err(type_error(name, other)),
        }),
        "float" => Value::Float(match a {
            Value::Int(i) => *i as f64,
            Value::Float(f) => *f,
            Value::Str(s) => s
                .parse()
                .map_err(|_| format!("float(): cannot parse {s:?} as a number"))?,
            other => return Err(type_error(name, other)),
        }),
        "string" => Value::Str(go_string(a)),
        "keys" | "values" => {
            let Value::Map(m) = a else {
                return Err(type_error(name, a));
            };
            Value::Array(if name == "keys" {
                m.keys().map(|k| Value::Str(k.clone())).collect()
            } else {
                m.values().cloned().collect()
            })
        }
        "abs" => match a {
            Value::Int(i) => Value::Int(i.wrapping_abs()),
            Value::Float(f) => Value::Float(f.abs()),
            other => return Err(type_error(name, other)),
        },
        "ceil" | "floor" | "round" => {
            let f = a.as_f64().ok_or_else(|| type_error(name, a))?;
            Value::Float(match name {
                "ceil" => f.ceil(),
                "floor" => f.floor(),
                _ => f.round(),
            })
        }
        "max" | "min" => {
            let items = numbers(name, vals)?;
            let mut best: Option<Value> = None;
            for item in items {
                let better = match &best {
                    None => true,
                    Some(b) => {
                        let o = order(&item, b, name)?;
                        if name == "max" { o.is_gt() } else { o.is_lt() }
                    }
                };
                if better {
                    best = Some(item);
                }
            }
            best.unwrap_or(Value::Nil)
        }
        "mean" | "median" => {
            let mut fs: Vec<f64> = numbers(name, vals)?
                .iter()
                .filter_map(Value::as_f64)
                .collect();
            if fs.is_empty() {
                return Ok(Value::Float(0.0));
            }
            if name == "mean" {
                Value::Float(fs.iter().sum::<f64>() / fs.len() as f64)
            } else {
                fs.sort_by(f64::total_cmp);
                let mid = fs.len() / 2;
                Value::Float(if fs.len().is_multiple_of(2) {
                    (fs[mid - 1] + fs[mid]) / 2.0
                } else {
                    fs[mid]
                })
            }
        }
        "type" => Value::Str(a.type_name().into()),
        "take" => {
            let items = array(name, a)?;
            let n = usize::try_from(int(name, arg(1))?).unwrap_or(0);
            Value::Array(items[..n.min(items.len())].to_vec())
        }
        "toPairs" => {
            let Value::Map(m) = a else {
                return Err(type_error(name, a));
            };
            ev.charge(m.len())?;
            Value::Array(
                m.iter()
                    .map(|(k, v)| Value::Array(vec![Value::Str(k.clone()), v.clone()]))
                    .collect(),
            )
        }
        "fromPairs" => {
            let mut out = std::collections::BTreeMap::new();
            for pair in array(name, a)? {
                match pair {
                    Value::Array(kv) if kv.len() == 2 => {
                        let key = string(name, &kv[0])?;
                        out.insert(key.to_string(), kv[1].clone());
                    }
                    other => return Err(type_error(name, other)),
                }
            }
            Value::Map(out)
        }
        "bitnot" => Value::Int(!int(name, a)?),
        "bitand" | "bitor" | "bitxor" | "bitnand" | "bitshl" | "bitshr" | "bitushr" => {
            Value::Int(bits(name, int(name, a)?, int(name, arg(1))?)?)
        }
        "reverse" => Value::Array(array(name, a)?.iter().rev().cloned().collect()),
        "sort" => {
            let mut items = array(name, a)?.to_vec();
            let desc = match vals.get(1) {
                Some(v) => descending(v)?,
                None => false,
            };
            ev.charge(items.len())?;
            sort_checked(&mut items, |v| v, desc)?;
            Value::Array(items)
        }
        "uniq" => {
            let items = array(name, a)?;
            ev.charge(items.len().saturating_mul(items.len()))?;
            let mut out: Vec<Value> = Vec::new();
            for item in items {
                if !out.iter().any(|seen| equal(seen, item)) {
                    out.push(item.clone());
                }
            }
            Value::Array(out)
        }
        "concat" => {
            let mut out = Vec::new();
            for v in vals {
                let items = array(name, v)?;
                ev.charge(items.len())?;
                out.extend(items.iter().cloned());
            }
            Value::Array(out)
        }
        "flatten" => {
            let mut out = Vec::new();
            flatten(ev, array(name, a)?, &mut out)?;
            Value::Array(out)
        }
        other => return Err(format!("unknown function `{other}()`")),
    })
}

/// Go's integer bit operations; shifts of 64 or more give 0 (or -1 for `>>` of a negative).
fn bits(name: &str, a: i64, b: i64) -> Result<i64, String> {
    let shift = || u32::try_from(b).map_err(|_| format!("`{name}()`: negative shift count {b}"));
    Ok(match name {
        "bitand" => a & b,
        "bitor" => a | b,
        "bitxor" => a ^ b,
        "bitnand" => a & !b,
        "bitshl" => a.checked_shl(shift()?).unwrap_or(0),
        "bitshr" => a
            .checked_shr(shift()?)
            .unwrap_or(if a < 0 { -1 } else { 0 }),
        _ => (a as u64).checked_shr(shift()?).unwrap_or(0) as i64,
    })
}

fn flatten(ev: &mut Eval, items: &[Value], out: &mut Vec<Value>) -> Result<(), String> {
    ev.charge(items.len())?;
    for item in items {
        match item {
            Value::Array(inner) => flatten(ev, inner, out)?,
            other => out.push(other.clone()),
        }
    }
    Ok(())
}

/// Go's `strings.SplitN` / `SplitAfterN`: `n < 0` splits everywhere, `n == 0` gives nothing,
/// an empty separator splits into characters.
fn split(s: &str, sep: &str, n: i64, after: bool) -> Vec<Value> {
    if n == 0 {
        return Vec::new();
    }
    let limit = if n < 0 { usize::MAX } else { n as usize };
    let parts: Vec<String> = if sep.is_empty() {
        let chars: Vec<char> = s.chars().collect();
        let mut parts: Vec<String> = Vec::new();
        for (i, c) in chars.iter().enumerate() {
            if parts.len() + 1 == limit {
                parts.push(chars[i..].iter().collect());
                break;
            }
            parts.push(c.to_string());
        }
        parts
    } else if after {
        let mut parts = Vec::new();
        let mut rest = s;
        while parts.len() + 1 < limit {
            let Some(at) = rest.find(sep) else { break };
            parts.push(rest[..at + sep.len()].to_string());
            rest = &rest[at + sep.len()..];
        }
        parts.push(rest.to_string());
        parts
    } else {
        s.splitn(limit, sep).map(str::to_string).collect()
    };
    parts.into_iter().map(Value::Str).collect()
}
