//! expr-lang's grammar, parsed by precedence climbing with expr-lang's own table, so
//! `!a == b` is `(!a) == b` and `-2 ** 2` is `-(2 ** 2)` exactly as upstream reads them.

use super::MAX_DEPTH;
use super::builtins;
use super::lex::{Tok, show};
use super::value::Value;

#[derive(Debug, Clone)]
pub(super) enum Node {
    Lit(Value),
    Var(String),
    /// `$env`: every variable as a map.
    Env,
    /// `#` (empty) or `#index`: the element or index a predicate is looking at.
    Pointer(String),
    Unary(&'static str, Box<Node>),
    Binary(&'static str, Box<Node>, Box<Node>),
    Ternary(Box<Node>, Box<Node>, Box<Node>),
    /// `obj.key`, `obj[key]`; `optional` for `?.`, which makes the whole chain nil on nil.
    Member {
        obj: Box<Node>,
        key: Box<Node>,
        optional: bool,
    },
    Slice {
        obj: Box<Node>,
        from: Option<Box<Node>>,
        to: Option<Box<Node>>,
    },
    /// A postfix chain containing `?.`: where the short-circuit to nil stops.
    Chain(Box<Node>),
    Call(String, Vec<Node>),
    Array(Vec<Node>),
    Map(Vec<(Node, Node)>),
    Let(String, Box<Node>, Box<Node>),
}

/// Binary operators: precedence and right-associativity, from expr-lang's operator table.
fn binary(op: &str) -> Option<(u16, bool)> {
    Some(match op {
        "|" => (0, false),
        "or" | "||" => (10, false),
        "and" | "&&" => (15, false),
        "==" | "!=" | "<" | ">" | "<=" | ">=" | "in" | "matches" | "contains" | "startsWith"
        | "endsWith" => (20, false),
        ".." => (25, false),
        "+" | "-" => (30, false),
        "*" | "/" | "%" => (60, false),
        "**" | "^" => (100, true),
        "??" => (500, false),
        _ => return None,
    })
}

const WORD_OPS: [&str; 8] = [
    "or",
    "and",
    "in",
    "matches",
    "contains",
    "startsWith",
    "endsWith",
    "not",
];

/// Canonical spelling, so evaluation only knows one name per operator.
fn canonical(op: &'static str) -> &'static str {
    match op {
        "or" => "||",
        "and" => "&&",
        "^" => "**",
        "not" => "!",
        other => other,
    }
}

pub(super) fn parse(tokens: Vec<Tok>) -> Result<Node, String> {
    let mut p = Parser {
        tokens,
        pos: 0,
        depth: 0,
    };
    let node = p.expr(0)?;
    match p.peek() {
        None => Ok(node),
        Some(t) => Err(format!("unexpected `{}`", show(t))),
    }
}

struct Parser {
    tokens: Vec<Tok>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos)
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Some(Tok::Op(o)) if *o == op)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        let yes = self.is_op(op);
        if yes {
            self.pos += 1;
        }
        yes
    }

    fn expect(&mut self, op: &str, what: &str) -> Result<(), String> {
        if self.eat_op(op) {
            return Ok(());
        }
        Err(match self.peek() {
            Some(t) => format!("expected `{op}` {what}, found `{}`", show(t)),
            None => format!("expected `{op}` {what}, found the end"),
        })
    }

    fn ident(&mut self, what: &str) -> Result<String, String> {
        match self.peek().cloned() {
            Some(Tok::Ident(name)) => {
                self.pos += 1;
                Ok(name)
            }
            Some(t) => Err(format!("expected {what}, found `{}`", show(&t))),
            None => Err(format!("expected {what}, found the end")),
        }
    }

    /// Operator at the cursor (symbol or word), if any.
    fn operator_here(&self) -> Option<&'static str> {
        match self.peek()? {
            Tok::Op(o) => Some(o),
            Tok::Ident(w) => WORD_OPS.iter().find(|op| **op == w).copied(),
            _ => None,
        }
    }

    fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err("expression nested too deeply".into());
        }
        Ok(())
    }

    fn expr(&mut self, min: u16) -> Result<Node, String> {
        self.enter()?;
        let node = self.expr_inner(min)?;
        self.depth -= 1;
        Ok(node)
    }

    fn expr_inner(&mut self, min: u16) -> Result<Node, String> {
        if min == 0 && matches!(self.peek(), Some(Tok::Ident(w)) if w == "let") {
            return self.let_binding();
        }
        if min == 0 && matches!(self.peek(), Some(Tok::Ident(w)) if w == "if") {
            return self.if_else();
        }
        let mut left = self.unary()?;
        let mut previous = "";
        while let Some(mut op) = self.operator_here() {
            let start = self.pos;
            let negate = op == "not";
            if negate {
                // `not in`, `not contains`, ...: a negated binary operator.
                self.pos += 1;
                match self.operator_here() {
                    Some(o @ ("in" | "matches" | "contains" | "startsWith" | "endsWith")) => op = o,
                    _ => return Err("`not` here must be followed by `in`, `matches`, `contains`, `startsWith` or `endsWith`".into()),
                }
            }
            let Some((prec, right_assoc)) = binary(op) else {
                self.pos = start;
                break;
            };
            if prec < min {
                self.pos = start;
                break;
            }
            self.pos += 1;
            if previous == "??" && op != "??" {
                return Err(format!(
                    "`{op}` and `??` cannot be mixed; wrap either in parentheses"
                ));
            }
            previous = op;
            if op == "|" {
                let name = self.ident("a function name after `|`")?;
                left = self.call(name, vec![left])?;
                continue;
            }
            if matches!(op, "<" | ">" | "<=" | ">=") {
                left = self.comparison_chain(left, op, prec)?;
                continue;
            }
            let right = self.expr(if right_assoc { prec } else { prec + 1 })?;
            left = Node::Binary(canonical(op), Box::new(left), Box::new(right));
            if negate {
                left = Node::Unary("!", Box::new(left));
            }
        }
        if min == 0 {
            while self.eat_op("?") {
                let (then, otherwise) = if self.eat_op(":") {
                    (left.clone(), self.expr(0)?)
                } else {
                    let then = self.expr(0)?;
                    self.expect(":", "in `?:`")?;
                    (then, self.expr(0)?)
                };
                left = Node::Ternary(Box::new(left), Box::new(then), Box::new(otherwise));
            }
        }
        Ok(left)
    }

    /// `a < b <= c` means `a < b && b <= c`, as in expr-lang.
    fn comparison_chain(
        &mut self,
        left: Node,
        op: &'static str,
        prec: u16,
    ) -> Result<Node, String> {
        let right = self.expr(prec + 1)?;
        let mut root = Node::Binary(op, Box::new(left), Box::new(right.clone()));
        let mut left = right;
        while let Some(Tok::Op(op @ ("<" | ">" | "<=" | ">="))) = self.peek() {
            let op: &'static str = op;
            self.pos += 1;
            let right = self.expr(prec + 1)?;
            let cmp = Node::Binary(op, Box::new(left), Box::new(right.clone()));
            root = Node::Binary("&&", Box::new(root), Box::new(cmp));
            left = right;
        }
        Ok(root)
    }

    fn let_binding(&mut self) -> Result<Node, String> {
        self.pos += 1;
        let name = self.ident("a variable name after `let`")?;
        self.expect("=", "after `let name`")?;
        let value = self.expr(0)?;
        self.expect(";", "after a `let` value")?;
        let body = self.expr(0)?;
        Ok(Node::Let(name, Box::new(value), Box::new(body)))
    }

    /// `if cond { a } else if … { b } else { c }`.
    fn if_else(&mut self) -> Result<Node, String> {
        self.pos += 1;
        let cond = self.expr(0)?;
        self.expect("{", "after an `if` condition")?;
        let then = self.expr(0)?;
        self.expect("}", "to close an `if` branch")?;
        if !matches!(self.peek(), Some(Tok::Ident(w)) if w == "else") {
            return Err("`if` needs an `else` branch".into());
        }
        self.pos += 1;
        let otherwise = if matches!(self.peek(), Some(Tok::Ident(w)) if w == "if") {
            self.enter()?;
            let nested = self.if_else()?;
            self.depth -= 1;
            nested
        } else {
            self.expect("{", "after `else`")?;
            let e = self.expr(0)?;
            self.expect("}", "to close an `else` branch")?;
            e
        };
        Ok(Node::Ternary(
            Box::new(cond),
            Box::new(then),
            Box::new(otherwise),
        ))
    }

    fn unary(&mut self) -> Result<Node, String> {
        let op = match self.peek() {
            Some(Tok::Op(o @ ("!" | "-" | "+"))) => Some(*o),
            Some(Tok::Ident(w)) if w == "not" => Some("not"),
            _ => None,
        };
        if let Some(op) = op {
            self.pos += 1;
            let prec = if matches!(op, "!" | "not") { 50 } else { 90 };
            let operand = self.expr(prec)?;
            return self.postfix(Node::Unary(canonical(op), Box::new(operand)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Node, String> {
        let Some(tok) = self.peek().cloned() else {
            return Err("unexpected end of expression".into());
        };
        self.pos += 1;
        let node = match tok {
            Tok::Str(s) => Node::Lit(Value::Str(s)),
            Tok::Int(n) => Node::Lit(Value::Int(n)),
            Tok::Float(n) => Node::Lit(Value::Float(n)),
            Tok::Pointer(name) => Node::Pointer(name),
            Tok::Op("(") => {
                let inner = self.expr(0)?;
                self.expect(")", "to close `(`")?;
                inner
            }
            Tok::Op("[") => Node::Array(self.list("]", |p| p.expr(0))?),
            Tok::Op("{") => Node::Map(self.list("}", Self::map_entry)?),
            Tok::Op(".") => {
                // `.field` inside a predicate: a field of the current element.
                let name = self.ident("a field name after `.`")?;
                Node::Member {
                    obj: Box::new(Node::Pointer(String::new())),
                    key: Box::new(Node::Lit(Value::Str(name))),
                    optional: false,
                }
            }
            Tok::Ident(name) => match name.as_str() {
                "true" => Node::Lit(Value::Bool(true)),
                "false" => Node::Lit(Value::Bool(false)),
                "nil" => Node::Lit(Value::Nil),
                "$env" => Node::Env,
                _ if self.is_op("(") => self.call(name, Vec::new())?,
                _ => Node::Var(name),
            },
            Tok::Op(o) => return Err(format!("unexpected `{o}`")),
        };
        self.postfix(node)
    }

    /// Comma-separated items up to `close` (a trailing comma is allowed).
    fn list<T>(
        &mut self,
        close: &str,
        mut item: impl FnMut(&mut Self) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        self.enter()?;
        let mut items = Vec::new();
        while !self.eat_op(close) {
            items.push(item(self)?);
            if !self.eat_op(",") {
                self.expect(close, "after a list item")?;
                break;
            }
        }
        self.depth -= 1;
        Ok(items)
    }

    fn map_entry(&mut self) -> Result<(Node, Node), String> {
        let key = match self.peek().cloned() {
            Some(Tok::Ident(k) | Tok::Str(k)) => {
                self.pos += 1;
                Node::Lit(Value::Str(k))
            }
            Some(Tok::Int(n)) => {
                self.pos += 1;
                Node::Lit(Value::Str(n.to_string()))
            }
            Some(Tok::Op("(")) => self.primary()?,
            Some(t) => return Err(format!("unexpected `{}` as a map key", show(&t))),
            None => return Err("unexpected end of expression in a map".into()),
        };
        self.expect(":", "after a map key")?;
        Ok((key, self.expr(0)?))
    }

    fn postfix(&mut self, mut node: Node) -> Result<Node, String> {
        let mut optional_chain = false;
        loop {
            let optional = self.is_op("?.");
            if optional || self.is_op(".") {
                self.pos += 1;
                optional_chain |= optional;
                if optional && self.eat_op("[") {
                    node = self.index(node, true)?;
                    continue;
                }
                let name = match self.peek().cloned() {
                    Some(Tok::Ident(name)) => name,
                    Some(t) => return Err(format!("expected a field name, found `{}`", show(&t))),
                    None => return Err("expected a field name, found the end".into()),
                };
                self.pos += 1;
                if self.is_op("(") {
                    return Err(format!("method calls like `.{name}()` are not supported"));
                }
                node = Node::Member {
                    obj: Box::new(node),
                    key: Box::new(Node::Lit(Value::Str(name))),
                    optional,
                };
            } else if self.eat_op("[") {
                node = self.index(node, false)?;
            } else {
                break;
            }
        }
        Ok(if optional_chain {
            Node::Chain(Box::new(node))
        } else {
            node
        })
    }

    /// After `[`: an index `a[i]` or a slice `a[i:j]`.
    fn index(&mut self, obj: Node, optional: bool) -> Result<Node, String> {
        self.enter()?;
        let from = if self.is_op(":") {
            None
        } else {
            Some(Box::new(self.expr(0)?))
        };
        let node = if self.eat_op(":") {
            let to = if self.is_op("]") {
                None
            } else {
                Some(Box::new(self.expr(0)?))
            };
            Node::Slice {
                obj: Box::new(obj),
                from,
                to,
            }
        } else {
            Node::Member {
                obj: Box::new(obj),
                key: from.ok_or("empty index `[]`")?,
                optional,
            }
        };
        self.expect("]", "to close `[`")?;
        self.depth -= 1;
        Ok(node)
    }

    /// A builtin call; `args` holds a piped-in first argument. The second argument of a
    /// predicate builtin is a closure: `{ … }` braces there delimit an expression, not a map.
    fn call(&mut self, name: String, mut args: Vec<Node>) -> Result<Node, String> {
        let spec = builtins::spec(&name)?;
        self.expect("(", &format!("after `{name}`"))?;
        self.enter()?;
        while !self.eat_op(")") {
            let closure = spec.predicate && args.len() == 1;
            let arg = if closure && self.eat_op("{") {
                let body = self.expr(0)?;
                self.expect("}", "to close a predicate")?;
                body
            } else {
                self.expr(0)?
            };
            args.push(arg);
            if !self.eat_op(",") {
                self.expect(")", &format!("after the arguments of `{name}`"))?;
                break;
            }
        }
        self.depth -= 1;
        if args.len() < spec.min || args.len() > spec.max {
            let want = if spec.min == spec.max {
                spec.min.to_string()
            } else if spec.max == usize::MAX {
                format!("at least {}", spec.min)
            } else {
                format!("{} to {}", spec.min, spec.max)
            };
            return Err(format!(
                "`{name}` takes {want} argument(s), got {}",
                args.len()
            ));
        }
        Ok(Node::Call(name, args))
    }
}
