//! Values of the language and the operations on them that do not need the evaluator:
//! equality and ordering as expr-lang defines them, and Go-compatible printing (`string()`,
//! `toJSON()`), because configs compare those strings.

use std::cmp::Ordering;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub(super) enum Value {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Array(Vec<Value>),
    Map(BTreeMap<String, Value>),
}

impl Value {
    /// expr-lang's (Go's) name for the type, for error messages.
    pub(super) fn type_name(&self) -> &'static str {
        match self {
            Value::Nil => "nil",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
            Value::Array(_) => "array",
            Value::Map(_) => "map",
        }
    }

    pub(super) fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }
}

/// `==`: numbers compare by value across int and float; other kinds compare structurally.
pub(super) fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Nil, Value::Nil) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, va), (kb, vb))| ka == kb && equal(va, vb))
        }
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
    }
}

/// `<` and friends: numbers with numbers, strings with strings; anything else is an error.
pub(super) fn order(a: &Value, b: &Value, op: &str) -> Result<Ordering, String> {
    let ord = match (a, b) {
        (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
        (Value::Str(x), Value::Str(y)) => Some(x.cmp(y)),
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x.partial_cmp(&y),
            _ => None,
        },
    };
    ord.ok_or_else(|| invalid(a, op, b))
}

pub(super) fn invalid(a: &Value, op: &str, b: &Value) -> String {
    format!(
        "invalid operation: {} {op} {}",
        a.type_name(),
        b.type_name()
    )
}

/// Go's `%v` (what expr's `string()` uses).
pub(super) fn go_string(v: &Value) -> String {
    match v {
        Value::Nil => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => go_float_g(*f),
        Value::Str(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(go_string).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Map(m) => {
            let parts: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}:{}", go_string(v)))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// Shortest digits and decimal exponent of a finite, non-zero float: `1234.5` -> ("12345", 3).
fn digits(f: f64) -> (String, i32) {
    let e = format!("{:e}", f.abs());
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    (mantissa.replace('.', ""), exp.parse().unwrap_or(0))
}

/// Go's `%v` of a float (`strconv.FormatFloat(f, 'g', -1, 64)`): exponent form below 1e-4 and
/// from 1e6 on (`1e+06`).
fn go_float_g(f: f64) -> String {
    go_float(f, |exp| !(-4..6).contains(&exp), "e+0")
}

/// Go's float formatting: plain digits unless `use_exp(exponent)`; `pad` prefixes a one-digit
/// positive exponent.
fn go_float(f: f64, use_exp: impl Fn(i32) -> bool, pad: &str) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sign = if f < 0.0 { "-" } else { "" };
    let (d, exp) = digits(f);
    if use_exp(exp) {
        let mantissa = if d.len() > 1 {
            format!("{}.{}", &d[..1], &d[1..])
        } else {
            d.clone()
        };
        let e = if exp < 0 {
            format!("e-{:02}", -exp)
        } else if exp < 10 {
            format!("{pad}{exp}")
        } else {
            format!("e+{exp}")
        };
        return format!("{sign}{mantissa}{e}");
    }
    let n = d.len() as i32;
    let body = if exp < 0 {
        format!("0.{}{d}", "0".repeat((-exp - 1) as usize))
    } else if exp + 1 >= n {
        format!("{d}{}", "0".repeat((exp + 1 - n) as usize))
    } else {
        format!("{}.{}", &d[..(exp + 1) as usize], &d[(exp + 1) as usize..])
    };
    format!("{sign}{body}")
}

/// Go's `json.MarshalIndent(v, "", "  ")` (what expr's `toJSON()` uses).
pub(super) fn to_json(v: &Value) -> Result<String, String> {
    let mut out = String::new();
    write_json(v, 0, &mut out)?;
    Ok(out)
}

fn write_json(v: &Value, indent: usize, out: &mut String) -> Result<(), String> {
    match v {
        Value::Nil => out.push_str("null"),
        Value::Bool(b) => out.push_str(&b.to_string()),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Float(f) => {
            if !f.is_finite() {
                return Err(format!("toJSON: unsupported value {}", go_float_g(*f)));
            }
            let abs = f.abs();
            let s = go_float(*f, |_| abs != 0.0 && !(1e-6..1e21).contains(&abs), "e+");
            // Go writes JSON exponents without padding: 1e-07 -> 1e-7.
            out.push_str(&s.replace("e-0", "e-"));
        }
        Value::Str(s) => json_string(s, out),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                out.push_str(&"  ".repeat(indent + 1));
                write_json(item, indent + 1, out)?;
            }
            out.push('\n');
            out.push_str(&"  ".repeat(indent));
            out.push(']');
        }
        Value::Map(m) => {
            if m.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                out.push_str(&"  ".repeat(indent + 1));
                json_string(k, out);
                out.push_str(": ");
                write_json(item, indent + 1, out)?;
            }
            out.push('\n');
            out.push_str(&"  ".repeat(indent));
            out.push('}');
        }
    }
    Ok(())
}

/// A JSON string with Go's HTML-safe escaping (`<`, `>`, `&`, U+2028, U+2029).
fn json_string(s: &str, out: &mut String) {
    let quoted = serde_json::Value::String(s.to_string()).to_string();
    for c in quoted.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
}

/// `fromJSON()`: Go decodes every JSON number as a float.
pub(super) fn from_json(v: serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(b),
        serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => Value::Str(s),
        serde_json::Value::Array(items) => Value::Array(items.into_iter().map(from_json).collect()),
        serde_json::Value::Object(m) => {
            Value::Map(m.into_iter().map(|(k, v)| (k, from_json(v))).collect())
        }
    }
}
