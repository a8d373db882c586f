//! The workspace's structural invariants, checked on the sources (ARCHITECTURE.md lists them).
//!
//! The import graph is read from `crate::…` and `super::…` paths (in `use` trees and inline),
//! each resolved to the file of the longest module it names; code after a file's first
//! `#[cfg(test)]` and comment lines are left out, as tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's files and the files each imports (relative paths under `src/`).
struct Graph {
    edges: BTreeMap<String, BTreeSet<String>>,
}

/// The code of a file that counts: no test section, no comment lines.
fn production_code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// `a/b.rs` and `a/b/mod.rs` → `["a", "b"]`; `lib.rs`/`main.rs` → `[]`.
fn module_path(rel: &str) -> Vec<String> {
    let rel = rel.trim_end_matches(".rs");
    let mut parts: Vec<String> = rel.split('/').map(str::to_string).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The paths one `use` tree (or inline path) names, starting at `text[start..]`, which begins
/// right after `crate::` / `super::…::`. `prefix` is what the path is relative to.
fn paths_at(text: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut path = prefix;
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'{' {
            i += 1;
            loop {
                // A glob (`*`) or anything else that names no module is stepped over.
                i += paths_at(&text[i..], path.clone(), out).max(1);
                while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b',') {
                    i += 1;
                }
                if i >= bytes.len() || bytes[i] == b'}' {
                    return i + 1;
                }
            }
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        if start == i {
            out.push(path);
            return i;
        }
        path.push(text[start..i].to_string());
        if text[i..].starts_with("::") {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

/// Every `crate::` and `super::` path in `code`, made absolute for a file at `module`.
fn referenced_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(pos) = code[at..]
        .find("crate::")
        .map(|p| (p, "crate::"))
        .into_iter()
        .chain(code[at..].find("super::").map(|p| (p, "super::")))
        .min_by_key(|(p, _)| *p)
    {
        let (offset, word) = pos;
        let start = at + offset;
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            at = start + word.len();
            continue;
        }
        let mut rest = start + word.len();
        let prefix = if word == "crate::" {
            Vec::new()
        } else {
            // `super` is the parent of the file's module (`a/b.rs` and `a/b/mod.rs` are `a::b`).
            let mut base: Vec<String> = module.to_vec();
            let mut ups = 1;
            while code[rest..].starts_with("super::") {
                ups += 1;
                rest += "super::".len();
            }
            for _ in 0..ups {
                base.pop();
            }
            base
        };
        rest += paths_at(&code[rest..], prefix, &mut out);
        at = rest.min(code.len());
    }
    out
}

impl Graph {
    fn of_crate(src: &Path) -> Graph {
        let files: Vec<(String, Vec<String>)> = rust_files(src)
            .into_iter()
            .map(|p| {
                let rel = p
                    .strip_prefix(src)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .into_owned();
                let module = module_path(&rel);
                (rel, module)
            })
            .collect();
        let by_module: BTreeMap<&[String], &str> = files
            .iter()
            .filter(|(rel, _)| !rel.ends_with("main.rs") || rel == "main.rs")
            .map(|(rel, m)| (m.as_slice(), rel.as_str()))
            .collect();
        let mut edges = BTreeMap::new();
        for (rel, module) in &files {
            let code = production_code(&src.join(rel));
            let mut targets = BTreeSet::new();
            for path in referenced_paths(&code, module) {
                let target = (0..=path.len())
                    .rev()
                    .find_map(|n| by_module.get(&path[..n]).copied());
                if let Some(target) = target.filter(|t| *t != rel && *t != "lib.rs") {
                    targets.insert(target.to_string());
                }
            }
            edges.insert(rel.clone(), targets);
        }
        Graph { edges }
    }

    /// Strongly connected components with more than one file (Tarjan).
    fn circles(&self) -> Vec<Vec<String>> {
        struct Walk<'a> {
            graph: &'a Graph,
            index: BTreeMap<&'a str, usize>,
            low: BTreeMap<&'a str, usize>,
            stack: Vec<&'a str>,
            on_stack: BTreeSet<&'a str>,
            found: Vec<Vec<String>>,
        }
        impl<'a> Walk<'a> {
            fn visit(&mut self, v: &'a str) {
                let n = self.index.len();
                self.index.insert(v, n);
                self.low.insert(v, n);
                self.stack.push(v);
                self.on_stack.insert(v);
                for w in self.graph.edges.get(v).into_iter().flatten() {
                    let w = w.as_str();
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let low = self.low[v].min(self.low[w]);
                        self.low.insert(v, low);
                    } else if self.on_stack.contains(w) {
                        let low = self.low[v].min(self.index[w]);
                        self.low.insert(v, low);
                    }
                }
                if self.low[v] == self.index[v] {
                    let mut circle = Vec::new();
                    while let Some(w) = self.stack.pop() {
                        self.on_stack.remove(w);
                        circle.push(w.to_string());
                        if w == v {
                            break;
                        }
                    }
                    if circle.len() > 1 {
                        circle.sort();
                        self.found.push(circle);
                    }
                }
            }
        }
        let mut walk = Walk {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            found: Vec::new(),
        };
        for v in self.edges.keys() {
            if !walk.index.contains_key(v.as_str()) {
                walk.visit(v);
            }
        }
        walk.found
    }
}

fn workspace_crates() -> Vec<PathBuf> {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut crates: Vec<PathBuf> = std::fs::read_dir(&core)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    crates.sort();
    crates
}

fn server_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_reader_sees_use_trees_and_super_paths() {
    let mut out = Vec::new();
    paths_at("{a::b, c::{d, e}};", Vec::new(), &mut out);
    assert_eq!(
        out,
        [vec!["a", "b"], vec!["c", "d"], vec!["c", "e"]]
            .map(|v| v.into_iter().map(String::from).collect::<Vec<_>>())
    );
    let module = vec!["modules".to_string(), "ci".to_string(), "repos".to_string()];
    let paths = referenced_paths(
        "use super::access::{self, repo};\nlet x = crate::ci::queue::Queue::new();\nfoo_crate::x",
        &module,
    );
    let paths: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        paths,
        [
            "modules::ci::access::self",
            "modules::ci::access::repo",
            "ci::queue::Queue::new"
        ]
    );
}

/// No import circle of more than three files in any crate of the workspace: a change to one
/// file can only ripple through the files it sits above.
#[test]
fn no_import_circle_is_larger_than_three_files() {
    let crates = workspace_crates();
    assert!(crates.len() >= 5, "the workspace's crates: {crates:?}");
    let mut too_big = Vec::new();
    for src in crates {
        let graph = Graph::of_crate(&src);
        assert!(!graph.edges.is_empty(), "{} has no files", src.display());
        for circle in graph.circles() {
            if circle.len() > 3 {
                too_big.push(format!("{}: {}", src.display(), circle.join(", ")));
            }
        }
    }
    assert!(too_big.is_empty(), "import circles: {too_big:#?}");
}

/// The service layers left in the server (`participation`, `retention`) sit below the HTTP
/// side: they never import a handler module, the app state or the HTTP core. The CI services
/// are a crate of their own (`woodlark-ci`), which the compiler keeps from importing the
/// server or the HTTP core: it depends on neither.
#[test]
fn the_service_layers_import_no_handler() {
    let graph = Graph::of_crate(&server_src());
    let service = |f: &str| f.starts_with("participation/") || f == "retention.rs";
    let http_side = |f: &str| {
        f.starts_with("modules/")
            || f.starts_with("cli/")
            || f.starts_with("state/")
            || f == "app.rs"
    };
    let mut wrong = Vec::new();
    for (file, targets) in &graph.edges {
        if service(file) {
            for target in targets.iter().filter(|t| http_side(t)) {
                wrong.push(format!("{file} -> {target}"));
            }
            let code = production_code(&server_src().join(file));
            if code.contains("crate::http") || code.contains("woodlark_http") {
                wrong.push(format!("{file} -> the HTTP core"));
            }
        }
    }
    assert!(graph.edges.len() > 40, "{:?}", graph.edges.keys());
    assert!(wrong.is_empty(), "service layer imports: {wrong:#?}");
}

/// The app state (`state/`) sits below the handlers: it imports no module under `modules/`
/// (the modules' own state lives in `state/` for that reason).
#[test]
fn the_app_state_imports_no_handler() {
    let graph = Graph::of_crate(&server_src());
    let state: Vec<_> = graph
        .edges
        .iter()
        .filter(|(file, _)| file.starts_with("state/"))
        .collect();
    assert!(state.len() >= 3, "{state:?}");
    let upward: Vec<String> = state
        .iter()
        .flat_map(|(file, targets)| {
            targets
                .iter()
                .filter(|t| t.starts_with("modules/"))
                .map(move |t| format!("{file} -> {t}"))
        })
        .collect();
    assert!(
        upward.is_empty(),
        "the app state imports handlers: {upward:#?}"
    );
}

/// Every way a store writes: a job awaited (`write`), a job queued now and awaited later
/// (`submit`), or a job the calling thread blocks on (`write_now`, start-up code).
const STORE_WRITES: &[&str] = &[".write(", ".submit(", ".write_now("];

/// State changes go through a service: no HTTP handler (`modules/`) and no command of the
/// CLI (`cli/`) writes through a store. Through `ctx.ci` they cannot (its `Reads` has no
/// write); this catches a store reached another way (one the CLI opened).
#[test]
fn handlers_never_write_through_the_store() {
    let src = server_src();
    let handlers: Vec<PathBuf> = ["modules", "cli"]
        .iter()
        .flat_map(|dir| rust_files(&src.join(dir)))
        .collect();
    assert!(handlers.len() > 20, "{handlers:?}");
    let mut writers = Vec::new();
    for path in handlers {
        let code = production_code(&path);
        for (n, line) in code.lines().enumerate() {
            if STORE_WRITES.iter().any(|call| line.contains(call)) {
                writers.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(writers.is_empty(), "handlers that write: {writers:#?}");
}

/// The built-in UI's sources (crate `woodlark-ui`).
fn ui_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ui/src")
}

/// The built-in UI is a crate beside the server's HTTP modules (`woodlark-ui`): it depends on
/// no server crate (Cargo refuses the cycle anyway, the server depending on it; this names
/// the rule), and its pages only read: no store write, the services used only through
/// their reads (`reads`, `log_reads`, settings and the queue's state), and of `woodlark-ci`
/// only the access decisions, the home list read, the scoped records' lists, a forge's pull
/// request and the version. Every change it makes is an API request (`UiHost::api`).
#[test]
fn the_ui_crate_depends_on_no_server_and_only_reads() {
    let manifest = std::fs::read_to_string(ui_src().join("../Cargo.toml")).unwrap();
    let server_deps: Vec<&str> = manifest
        .lines()
        .filter(|l| {
            let name = l.split(['=', '.', ' ']).next().unwrap_or("");
            name == "woodlark" || name == "\"woodlark\""
        })
        .collect();
    assert!(
        server_deps.is_empty(),
        "woodlark-ui depends on the server: {server_deps:?}"
    );

    let reads = [
        ".reads.",
        ".log_reads.",
        ".settings.",
        ".queue.paused()",
        ".queue.free_workers()",
    ];
    let ci_allowed = |path: &str| {
        path == "access"
            || path == "Services"
            || path == "version_string"
            || path == "users::home_list"
            || path == "forge::PullRequest"
            || path.starts_with("access::")
            || ["Registries", "Secrets", "ScopedRecord"]
                .iter()
                .any(|r| path == format!("scoped::{r}"))
    };
    let files = rust_files(&ui_src());
    assert!(files.len() > 15, "{files:?}");
    let mut wrong = Vec::new();
    for path in files {
        let code = production_code(&path);
        let name = path.display();
        if code.contains("woodlark::") {
            wrong.push(format!("{name}: imports the server"));
        }
        for call in STORE_WRITES.iter().filter(|call| code.contains(*call)) {
            wrong.push(format!("{name}: writes through a store ({call})"));
        }
        for (at, _) in code.match_indices("services()") {
            let after: String = code[at + "services()".len()..]
                .chars()
                .filter(|c| !c.is_whitespace())
                .take(24)
                .collect();
            if !reads.iter().any(|r| after.starts_with(r)) {
                wrong.push(format!("{name}: services(){after}… is not a read"));
            }
        }
        for prefix in ["crate::ci::", "woodlark_ci::"] {
            for (at, _) in code.match_indices(prefix) {
                let mut found = Vec::new();
                paths_at(&code[at + prefix.len()..], Vec::new(), &mut found);
                for p in found.iter().map(|p| p.join("::")) {
                    if !ci_allowed(&p) {
                        wrong.push(format!("{name}: uses woodlark-ci's {p}"));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "the UI crate: {wrong:#?}");
}
