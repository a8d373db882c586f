//! `when: evaluate:` filters, in expr-lang's language (<https://expr-lang.org>).
//!
//! Woodpecker evaluates `evaluate:` with expr-lang over the run's environment: `CI_*`, matrix
//! values and pipeline variables, all strings; an undefined name is `nil`. The result must be a
//! boolean. We follow expr-lang's language definition:
//! - values: `nil`, booleans, ints and floats (kept apart as in Go: `7 % 3` is an int, `1 / 2`
//!   is `0.5`), strings (`"…"`, `'…'`, raw `` `…` ``), arrays `[1, 2]`, maps `{"a": 1, b: 2}`;
//! - operators, loosest first: `?:`, `|` (pipe: `x | f(y)` is `f(x, y)`), `||`/`or`,
//!   `&&`/`and`, comparisons (`<` chains: `1 < x < 9`), `in` (array element or map key, never a
//!   substring), `contains`, `startsWith`, `endsWith`, `matches` (Rust `regex`, close to Go's
//!   RE2), each negatable with `not`; `..` (int range), `+ -`, `* / %`, `!`/`not`, unary `- +`,
//!   `**`/`^`, `??` (nil coalescing; `a ?? b == c` needs parentheses, as upstream says);
//! - `a.b`, `a?.b` (nil instead of an error when `a` is nil), `a[i]` (negative counts from the
//!   end; out of range is an error), `a[i:j]`; a missing map key is `nil`;
//! - builtins: strings, arrays, maps, numbers, JSON, base64 and bit operations; predicates
//!   (`any(list, # > 1)`, `all(list, {.x == 1})`) bind `#`, `#index` and `.field`;
//! - `let x = …; …` and `if c { a } else { b }`.
//!
//! Not supported, each an error naming it: dates and durations (`now`, `date`, `duration`),
//! `reduce`, `groupBy`, method calls, indexing a string (slice it instead). Hostile input is
//! bounded by length, nesting depth and an evaluation budget, so it fails instead of hanging.

mod builtins;
mod eval;
mod lex;
mod parse;
mod value;

use std::collections::BTreeMap;

use value::Value;

/// Longest expression we accept.
const MAX_LEN: usize = 4096;
/// Deepest nesting of parentheses, brackets, calls and unary operators.
const MAX_DEPTH: usize = 32;

/// Evaluate `source` against `env`; `Err` explains a syntax, type or evaluation problem.
pub fn evaluate(source: &str, env: &BTreeMap<String, String>) -> Result<bool, String> {
    if source.len() > MAX_LEN {
        return Err("expression too long".into());
    }
    let tree = parse::parse(lex::lex(source)?)?;
    let value = match eval::Eval::new(env).eval(&tree) {
        Ok(v) => v,
        Err(eval::Stop::Error(e)) => return Err(e),
        Err(eval::Stop::NilChain) => Value::Nil,
    };
    match value {
        Value::Bool(b) => Ok(b),
        other => Err(format!(
            "expression must be true or false, got {}",
            other.type_name()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> BTreeMap<String, String> {
        [
            ("CI_COMMIT_BRANCH", "main"),
            ("CI_PIPELINE_EVENT", "push"),
            ("CI_COMMIT_MESSAGE", "fix: thing [deploy]"),
            ("CI_PIPELINE_NUMBER", "42"),
            ("CI_PIPELINE_FILES", r#"["docs/a.md","src/b.rs"]"#),
            ("RELEASE_BRANCH", "release/1.2"),
            ("EMPTY", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// `Ok(bool)`, or `Err(part of the message)`.
    fn check(cases: &[(&str, Result<bool, &str>)]) {
        for (src, want) in cases {
            match (evaluate(src, &env()), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{src}"),
                (Err(e), Err(part)) => assert!(e.contains(part), "{src}: {e:?} lacks {part:?}"),
                (got, want) => panic!("{src}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn woodpecker_configs() {
        check(&[
            (r#"CI_COMMIT_BRANCH == "main""#, Ok(true)),
            (r#"CI_COMMIT_BRANCH != 'main'"#, Ok(false)),
            (
                r#"CI_PIPELINE_EVENT == "push" && CI_COMMIT_BRANCH == "dev""#,
                Ok(false),
            ),
            (
                r#"CI_PIPELINE_EVENT == "push" or CI_COMMIT_BRANCH == "dev""#,
                Ok(true),
            ),
            (r#"CI_PIPELINE_EVENT in ["push", "manual"]"#, Ok(true)),
            (r#"CI_COMMIT_BRANCH not in ["main", "dev"]"#, Ok(false)),
            // `in` is exact membership: "docs" is not an element of the file list.
            (r#""docs" in fromJSON(CI_PIPELINE_FILES)"#, Ok(false)),
            (r#""src/b.rs" in fromJSON(CI_PIPELINE_FILES)"#, Ok(true)),
            (
                r#"any(fromJSON(CI_PIPELINE_FILES), {# startsWith "src/"})"#,
                Ok(true),
            ),
            (
                r#"all(fromJSON(CI_PIPELINE_FILES), # endsWith ".md")"#,
                Ok(false),
            ),
            (
                r#"fromJSON(CI_PIPELINE_FILES) | any(hasPrefix(#, "docs/"))"#,
                Ok(true),
            ),
            (
                r#"len(CI_COMMIT_MESSAGE) > 0 && !(CI_COMMIT_MESSAGE contains "[skip]")"#,
                Ok(true),
            ),
            (r#"CI_COMMIT_MESSAGE contains "[deploy]""#, Ok(true)),
            (r#"CI_COMMIT_MESSAGE not contains "[deploy]""#, Ok(false)),
            (r#"not (CI_COMMIT_MESSAGE endsWith "x")"#, Ok(true)),
            (r#"(CI_COMMIT_TAG ?? "none") == "none""#, Ok(true)),
            (r#"(CI_COMMIT_BRANCH ?? "none") == "main""#, Ok(true)),
            (r#"CI_COMMIT_BRANCH matches "^release/""#, Ok(false)),
            (r#"RELEASE_BRANCH matches "^release/\\d+""#, Ok(true)),
            (
                r#"RELEASE_BRANCH not matches `^release/\d+\.\d+$`"#,
                Ok(false),
            ),
            ("int(CI_PIPELINE_NUMBER) % 2 == 0", Ok(true)),
            (r#"!(UNSET == nil)"#, Ok(false)),
            (r#"UNSET == "x""#, Ok(false)),
            (r#"EMPTY == """#, Ok(true)),
            (
                r#"$env["CI_COMMIT_BRANCH"] == "main" && $env.UNSET == nil"#,
                Ok(true),
            ),
        ]);
    }

    #[test]
    fn values_and_operators() {
        check(&[
            ("1 / 2 == 0.5", Ok(true)),
            ("7 % 3 == 1 && string(7 % 3) == \"1\"", Ok(true)),
            (
                "string(1 / 2) == \"0.5\" && string(4 / 2) == \"2\"",
                Ok(true),
            ),
            ("2 ** 3 == 8 && 2 ^ 3 ^ 2 == 512", Ok(true)),
            ("-2 ** 2 == -4", Ok(true)),
            ("1 + 2 * 3 == 7 && (1 + 2) * 3 == 9", Ok(true)),
            (
                "1_000_000 == 1e6 && 0x1F == 31 && 0o17 == 15 && 0b101 == 5",
                Ok(true),
            ),
            ("1.5e3 == 1500 && .5 == 0.5 && 2.5E-1 == 0.25", Ok(true)),
            ("1 == 1.0 && 1 < 1.5", Ok(true)),
            (r#""a" + 'b' + `c\n` == "abc\\n""#, Ok(true)),
            (r#""\u00e9\x41\101\t" == "éAA	""#, Ok(true)),
            ("[1, 2] + [3] == [1, 2, 3]", Ok(true)),
            ("1..3 == [1, 2, 3] && len(3..1) == 0", Ok(true)),
            (r#"{"a": 1, b: 2}.b == 2 && {"a": 1}["a"] == 1"#, Ok(true)),
            (r#"{a: [1, {b: "x"}]}.a[1].b == "x""#, Ok(true)),
            ("[1, 2, 3,][-1] == 3", Ok(true)),
            (
                "[1, 2, 3, 4][1:3] == [2, 3] && [1, 2, 3][:2] == [1, 2]",
                Ok(true),
            ),
            ("[1, 2, 3][-2:] == [2, 3] && [1, 2, 3][5:9] == []", Ok(true)),
            (r#""hello"[1:3] == "el""#, Ok(true)),
            (r#"{a: 1}.missing == nil"#, Ok(true)),
            (
                "UNSET?.field == nil && UNSET?.a.b == nil && UNSET?.[0] == nil",
                Ok(true),
            ),
            ("(UNSET ?? 5) + 1 == 6 && 1 == UNSET ?? 1", Ok(true)),
            (
                r#"CI_COMMIT_TAG ?? "none" == "none""#,
                Err("cannot be mixed"),
            ),
            ("true ? 1 == 1 : false", Ok(true)),
            ("false ? true : 1 > 2 ? true : false", Ok(false)),
            ("1 < 2 < 3 && !(3 > 2 > 2)", Ok(true)),
            ("!true == false && not false", Ok(true)),
            (r#""a" < "b" && "b" >= "b""#, Ok(true)),
            (
                r#""a" in {a: 1} && !("b" in {a: 1}) && !("x" in nil)"#,
                Ok(true),
            ),
            ("let x = 2; let y = x * 3; y == 6", Ok(true)),
            (
                "if 1 > 2 { false } else if 2 > 1 { true } else { false }",
                Ok(true),
            ),
            ("/* comment */ true // trailing", Ok(true)),
            ("[1, [2]] == [1, [2]] && [1] != [2]", Ok(true)),
            ("1 == \"1\"", Ok(false)),
            ("false && UNSET", Ok(false)),
            ("true || 1", Ok(true)),
        ]);
    }

    #[test]
    fn builtins() {
        check(&[
            (
                r#"len("héllo") == 5 && len([1, 2]) == 2 && len({a: 1}) == 1"#,
                Ok(true),
            ),
            (
                "all([1, 2], # > 0) && !any([1, 2], # > 2) && none([1, 2], # > 2)",
                Ok(true),
            ),
            ("one([1, 2, 3], # == 2) && !one([2, 2], # == 2)", Ok(true)),
            ("filter(1..6, # % 2 == 0) == [2, 4, 6]", Ok(true)),
            (
                "map([1, 2], # * 10) == [10, 20] && map([5, 6], #index) == [0, 1]",
                Ok(true),
            ),
            (
                "count([1, 2, 3], # > 1) == 2 && count([true, false, true]) == 2",
                Ok(true),
            ),
            (
                "find([1, 2, 3], # > 1) == 2 && find([1], # > 5) == nil",
                Ok(true),
            ),
            (
                "findIndex([1, 2, 3], # > 1) == 1 && findLastIndex([1, 2, 3], # > 1) == 2",
                Ok(true),
            ),
            ("findLast([1, 2, 3], # < 3) == 2", Ok(true)),
            (
                r#"all([{x: 1}, {x: 1}], {.x == 1}) && map([{n: "a"}], .n) == ["a"]"#,
                Ok(true),
            ),
            (r#"filter(["a", "b"], # in ["a"]) == ["a"]"#, Ok(true)),
            (
                "sum([1, 2, 3]) == 6 && sum([1, 2.5]) == 3.5 && sum([{v: 2}], .v) == 2",
                Ok(true),
            ),
            (
                "first([3, 4]) == 3 && last([3, 4]) == 4 && first([]) == nil",
                Ok(true),
            ),
            (
                r#"toJSON({b: [1, 2.5], a: "<x>"}) == "{\n  \"a\": \"\\u003cx\\u003e\",\n  \"b\": [\n    1,\n    2.5\n  ]\n}""#,
                Ok(true),
            ),
            (r#"fromJSON("{\"a\": [1, null]}").a == [1, nil]"#, Ok(true)),
            (
                r#"split("a,b,c", ",") == ["a", "b", "c"] && split("a,b,c", ",", 2) == ["a", "b,c"]"#,
                Ok(true),
            ),
            (
                r#"splitAfter("a,b", ",") == ["a,", "b"] && join(["a", "b"], "-") == "a-b""#,
                Ok(true),
            ),
            (
                r#"lower("AbC") == "abc" && upper("abc") == "ABC""#,
                Ok(true),
            ),
            (
                r#"trim("  x ") == "x" && trim("__x_", "_") == "x""#,
                Ok(true),
            ),
            (
                r#"trimPrefix("v1.2", "v") == "1.2" && trimSuffix("a.go", ".go") == "a""#,
                Ok(true),
            ),
            (
                r#"hasPrefix("release/1", "release/") && hasSuffix("a.md", ".md")"#,
                Ok(true),
            ),
            (
                r#"replace("a-b-c", "-", "+") == "a+b+c" && repeat("ab", 2) == "abab""#,
                Ok(true),
            ),
            (
                r#"indexOf("hello", "l") == 2 && indexOf("hello", "z") == -1 && lastIndexOf("hello", "l") == 3"#,
                Ok(true),
            ),
            (
                r#"int("42") == 42 && int(3.9) == 3 && float("1.5") == 1.5 && string(12) == "12""#,
                Ok(true),
            ),
            (
                r#"string(1e6) == "1e+06" && string([1, "a"]) == "[1 a]" && string(nil) == "<nil>""#,
                Ok(true),
            ),
            (
                r#"keys({b: 1, a: 2}) == ["a", "b"] && values({b: 1, a: 2}) == [2, 1]"#,
                Ok(true),
            ),
            ("abs(-3) == 3 && abs(-1.5) == 1.5", Ok(true)),
            (
                "max(1, 5, 3) == 5 && min([4, 2.5]) == 2.5 && max(1, [7, [9]]) == 9",
                Ok(true),
            ),
            ("max([]) == nil", Ok(true)),
            (
                r#"reverse([1, 2]) == [2, 1] && sort([3, 1, 2]) == [1, 2, 3] && sort(["b", "a"], "desc") == ["b", "a"]"#,
                Ok(true),
            ),
            ("sortBy([{n: 2}, {n: 1}], .n) == [{n: 1}, {n: 2}]", Ok(true)),
            ("uniq([1, 2, 1, 1.0]) == [1, 2]", Ok(true)),
            (
                "concat([1], [2, 3]) == [1, 2, 3] && flatten([1, [2, [3]]]) == [1, 2, 3]",
                Ok(true),
            ),
            (
                r#"get({a: 1}, "a") == 1 && get([1], 5) == nil && get(nil, "x") == nil"#,
                Ok(true),
            ),
            (
                "ceil(1.2) == 2 && floor(1.8) == 1 && round(2.5) == 3",
                Ok(true),
            ),
            ("mean([1, 2]) == 1.5 && median([3, 1, 2]) == 2", Ok(true)),
            (
                r#"toBase64("hi") == "aGk=" && fromBase64("aGk=") == "hi""#,
                Ok(true),
            ),
            ("[1, 2, 3] | filter(# > 1) | len() == 2", Ok(true)),
            (
                r#""Hello World" | lower() | split(" ") == ["hello", "world"]"#,
                Ok(true),
            ),
            (
                r#"sortBy([{Age: 3}, {Age: 1}], "Age", "desc") == [{Age: 3}, {Age: 1}]"#,
                Ok(true),
            ),
            (
                "take([1, 2, 3, 4], 2) == [1, 2] && take([1], 5) == [1]",
                Ok(true),
            ),
            (
                r#"type(42) == "int" && type("a") == "string" && type(nil) == "nil""#,
                Ok(true),
            ),
            (
                r#"toPairs({a: 1}) == [["a", 1]] && fromPairs([["a", 1]]) == {a: 1}"#,
                Ok(true),
            ),
            (
                "bitand(0b1010, 0b1100) == 0b1000 && bitnot(0b1010) == -0b1011",
                Ok(true),
            ),
            (
                "bitshl(0b101101, 2) == 0b10110100 && bitushr(-0b101, 2) == 4611686018427387902",
                Ok(true),
            ),
            (
                "bitnand(0b1010, 0b1100) == 0b10 && bitshr(-8, 70) == -1",
                Ok(true),
            ),
        ]);
    }

    #[test]
    fn errors_name_the_problem() {
        check(&[
            (r#"CI_COMMIT_BRANCH"#, Err("must be true or false")),
            (r#"CI_COMMIT_TAG ?? "none""#, Err("must be true or false")),
            ("nosuch(1)", Err("unknown function `nosuch()`")),
            ("now() > 1", Err("`now()` is not supported")),
            ("reduce([1], #acc + #)", Err("`reduce()` is not supported")),
            ("len(1, 2) > 0", Err("`len` takes 1 argument(s), got 2")),
            ("any([1])", Err("`any` takes 2 argument(s)")),
            (r#"1 + "a" == 2"#, Err("invalid operation: int + string")),
            ("nil < 1", Err("invalid operation: nil < int")),
            (
                "UNSET contains \"x\"",
                Err("invalid operation: nil contains string"),
            ),
            (
                r#""docs" in "docs/a.md""#,
                Err("operator `in` not defined on string"),
            ),
            ("len(x) > 1", Err("`len()` of nil is not supported")),
            ("[1][3] == 1", Err("index out of range")),
            ("UNSET.field == nil", Err("cannot fetch field from nil")),
            (
                r#""abc"[0] == "a""#,
                Err("indexing a string is not supported"),
            ),
            ("1 % 0 == 0", Err("integer divide by zero")),
            ("int(\"x\") == 1", Err("cannot parse")),
            ("any([1], # + 1)", Err("must give a bool")),
            ("# == 1", Err("only valid inside a predicate")),
            (r#""a" matches "(" "#, Err("bad regular expression")),
            ("1 ! 2", Err("unexpected `!`")),
            ("if true { true }", Err("`if` needs an `else` branch")),
            ("CI_COMMIT_BRANCH.upper() == 1", Err("method calls")),
            (r#"CI_COMMIT_BRANCH == "#, Err("unexpected end")),
            (r#"("a" == "a""#, Err("expected `)`")),
            (r#""unterminated"#, Err("unterminated string")),
            (r#""bad \q escape""#, Err("invalid escape")),
            ("1 2", Err("unexpected `2`")),
            ("@", Err("unexpected character")),
            ("len(1..100000000) > 0", Err("too expensive")),
            ("len(map(1..1000, 1..1000)) > 0", Err("too expensive")),
            (r#"len(repeat("x", 100000000)) > 0"#, Err("too expensive")),
        ]);
    }

    #[test]
    fn hostile_input_is_bounded() {
        let cases = [
            "(".repeat(100) + "true" + &")".repeat(100),
            "!".repeat(100) + "true",
            "[".repeat(100) + &"]".repeat(100) + " == []",
            "len(".repeat(50) + "1" + &")".repeat(50),
            "1".to_string() + &" + 1".repeat(1000) + " > 0",
            "true".to_string() + &" && true".repeat(5000),
            "x".repeat(5000),
        ];
        for src in cases {
            assert!(
                evaluate(&src, &env()).is_err(),
                "{}",
                &src[..40.min(src.len())]
            );
        }
        // A long flat chain of conditions is not nesting: it evaluates.
        let long = "true".to_string() + &" && true".repeat(300) + &" || false".repeat(100);
        assert_eq!(evaluate(&long, &env()), Ok(true));
        // Token soup from a fixed seed: every input must end in Ok or Err, never a panic.
        let words = [
            "1",
            "-1",
            "2.5",
            "0",
            "\"a\"",
            "'src/'",
            "nil",
            "true",
            "[",
            "]",
            "{",
            "}",
            "(",
            ")",
            ",",
            ":",
            "?",
            "?.",
            ".",
            "..",
            "#",
            "#index",
            "+",
            "-",
            "*",
            "/",
            "%",
            "**",
            "==",
            "<",
            "in",
            "not",
            "!",
            "&&",
            "||",
            "??",
            "|",
            "matches",
            "contains",
            "[1:-1]",
            "[-9]",
            "x",
            "CI_PIPELINE_FILES",
            "fromJSON(",
            "len(",
            "any(",
            "map(",
            "sort(",
            "let y = 1;",
            "int(",
            "split(",
            "max(",
            "uniq(",
            "toJSON(",
            "1..5",
            "{a: 1}",
            "EMPTY",
        ];
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            let mut src = String::new();
            for _ in 0..(seed % 12) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                src.push_str(words[(seed % words.len() as u64) as usize]);
                src.push(' ');
            }
            let _ = evaluate(&src, &env());
            seed = seed.wrapping_add(1);
        }
        let too_long = "true".to_string() + &" && true".repeat(5000);
        assert_eq!(
            evaluate(&too_long, &env()),
            Err("expression too long".into())
        );
    }
}
