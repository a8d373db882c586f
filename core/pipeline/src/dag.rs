//! Step dependencies: every compiled step gets its full `depends_on` list.
//!
//! The runner has one rule — start a step when the steps it depends on are done (a detached
//! step counts as done once started) — so the compiler spells out what Woodpecker leaves
//! implicit:
//! - **roots** are the clone step (unless `skip_clone`) and the services; services depend on
//!   the clone step only;
//! - **sequential** (no step has `depends_on`): each step depends on the previous one, the
//!   first on the roots;
//! - **DAG** (some step has `depends_on`, even `[]`): a step depends on what it lists, or on
//!   the roots when it lists nothing. A dependency on a step that is filtered out by its
//!   `when` is an error unless marked `{name: …, optional: true}` (then dropped), as upstream;
//!   a dependency on a name that exists nowhere is an error; so is a cycle.

use super::diag::{Issue, field};
use super::workflow::Dep;

/// One included step (or service), in workflow order.
pub struct Item<'a> {
    pub name: &'a str,
    /// Its place in the document, for errors (`steps.build`).
    pub field: &'a str,
    pub declared: Option<&'a [Dep]>,
    pub service: bool,
}

/// The dependency list of each item (same order), or the problems found.
///
/// `defined`: every step name in the document, filtered or not. `clone`: the clone step's
/// name when there is one.
pub fn resolve(
    items: &[Item<'_>],
    defined: &[&str],
    clone: Option<&str>,
) -> Result<Vec<Vec<String>>, Vec<Issue>> {
    let mut roots: Vec<String> = clone.map(str::to_string).into_iter().collect();
    roots.extend(
        items
            .iter()
            .filter(|i| i.service)
            .map(|i| i.name.to_string()),
    );
    let dag = items.iter().any(|i| !i.service && i.declared.is_some());
    let present = |name: &str| items.iter().any(|i| i.name == name);

    let mut issues = Vec::new();
    let mut out = Vec::with_capacity(items.len());
    let mut previous: Option<&str> = None;
    for item in items {
        let deps: Vec<String> = if item.service {
            clone.map(str::to_string).into_iter().collect()
        } else if !dag {
            let deps = match previous {
                Some(p) => vec![p.to_string()],
                None => roots.clone(),
            };
            previous = Some(item.name);
            deps
        } else {
            let mut deps: Vec<String> = Vec::new();
            for dep in item.declared.unwrap_or(&[]) {
                let at = field(item.field, "depends_on");
                if present(&dep.name) || Some(dep.name.as_str()) == clone {
                    if !deps.contains(&dep.name) {
                        deps.push(dep.name.clone());
                    }
                } else if dep.optional {
                    continue;
                } else if defined.contains(&dep.name.as_str()) {
                    issues.push(Issue::compiler(
                        at,
                        format!(
                            "step `{}` depends on `{}`, which does not run for this event (its `when` filtered it out); \
                             write `{{name: {}, optional: true}}` to make the dependency optional",
                            item.name, dep.name, dep.name
                        ),
                    ));
                } else {
                    issues.push(Issue::compiler(
                        at,
                        format!(
                            "step `{}` depends on unknown step `{}`",
                            item.name, dep.name
                        ),
                    ));
                }
            }
            if deps.is_empty() { roots.clone() } else { deps }
        };
        out.push(deps);
    }
    if issues.is_empty()
        && let Some(cycle) = find_cycle(items, &out)
    {
        let first = items
            .iter()
            .find(|i| i.name == cycle[0])
            .map_or("", |i| i.field);
        issues.push(Issue::compiler(
            field(first, "depends_on"),
            format!("dependency cycle: {}", cycle.join(" -> ")),
        ));
    }
    if issues.is_empty() {
        Ok(out)
    } else {
        Err(issues)
    }
}

/// A cycle among the items as names `[a, b, …, a]`, if any.
pub fn find_cycle(items: &[Item<'_>], deps: &[Vec<String>]) -> Option<Vec<String>> {
    let pos = |name: &str| items.iter().position(|i| i.name == name);
    // Iterative DFS with colours: 0 new, 1 on the stack, 2 done.
    let mut colour = vec![0u8; items.len()];
    for start in 0..items.len() {
        if colour[start] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        colour[start] = 1;
        while let Some(top) = stack.last_mut() {
            let node = top.0;
            if let Some(dep) = deps[node].get(top.1) {
                top.1 += 1;
                let Some(d) = pos(dep) else { continue };
                match colour[d] {
                    0 => {
                        colour[d] = 1;
                        stack.push((d, 0));
                    }
                    1 => {
                        let from = stack.iter().position(|&(n, _)| n == d).unwrap_or(0);
                        let mut cycle: Vec<String> = stack[from..]
                            .iter()
                            .map(|&(n, _)| items[n].name.to_string())
                            .collect();
                        cycle.push(items[d].name.to_string());
                        return Some(cycle);
                    }
                    _ => {}
                }
            } else {
                colour[node] = 2;
                stack.pop();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dep(name: &str, optional: bool) -> Dep {
        Dep {
            name: name.into(),
            optional,
        }
    }

    fn item<'a>(name: &'a str, declared: Option<&'a [Dep]>) -> Item<'a> {
        Item {
            name,
            field: name,
            declared,
            service: false,
        }
    }

    fn names(v: &[Vec<String>]) -> Vec<Vec<&str>> {
        v.iter()
            .map(|d| d.iter().map(String::as_str).collect())
            .collect()
    }

    #[test]
    fn sequential_with_clone_and_services() {
        let mut db = item("db", None);
        db.service = true;
        let items = [db, item("a", None), item("b", None)];
        let out = resolve(&items, &["db", "a", "b"], Some("clone")).unwrap();
        assert_eq!(names(&out), [vec!["clone"], vec!["clone", "db"], vec!["a"]]);
        let out = resolve(&items[1..], &["a", "b"], None).unwrap();
        assert_eq!(names(&out), [Vec::<&str>::new(), vec!["a"]]);
    }

    #[test]
    fn dag() {
        let empty: [Dep; 0] = [];
        let a_dep = [dep("a", false)];
        let both = [dep("a", false), dep("b", false), dep("a", false)];
        let opt = [dep("gone", true), dep("a", false)];
        let items = [
            item("a", Some(&empty)),
            item("b", None),
            item("c", Some(&both)),
            item("d", Some(&a_dep)),
            item("e", Some(&opt)),
        ];
        let out = resolve(&items, &["a", "b", "c", "d", "e"], Some("clone")).unwrap();
        assert_eq!(
            names(&out),
            [
                vec!["clone"],
                vec!["clone"],
                vec!["a", "b"],
                vec!["a"],
                vec!["a"]
            ]
        );
    }

    #[test]
    fn errors() {
        let x = [dep("x", false)];
        let filtered = [dep("f", false)];
        let out = resolve(
            &[item("a", Some(&x)), item("b", Some(&filtered))],
            &["a", "b", "f"],
            None,
        )
        .unwrap_err();
        assert_eq!(out.len(), 2);
        assert!(out[0].message.contains("unknown step `x`"));
        assert!(out[1].message.contains("optional"));
        assert_eq!(out[1].field, "b.depends_on");

        let to_b = [dep("b", false)];
        let to_c = [dep("c", false)];
        let to_a = [dep("a", false)];
        let out = resolve(
            &[
                item("a", Some(&to_b)),
                item("b", Some(&to_c)),
                item("c", Some(&to_a)),
            ],
            &["a", "b", "c"],
            Some("clone"),
        )
        .unwrap_err();
        assert_eq!(out[0].message, "dependency cycle: a -> b -> c -> a");
        let self_dep = [dep("a", false)];
        let out = resolve(&[item("a", Some(&self_dep))], &["a"], None).unwrap_err();
        assert_eq!(out[0].message, "dependency cycle: a -> a");
    }
}
