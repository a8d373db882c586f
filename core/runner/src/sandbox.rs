//! Running a step inside bubblewrap (`runner.sandbox = "bwrap"`).
//!
//! The local backend runs steps as host processes, as the server's own user. Without a
//! sandbox a step could read everything that user can: the server's databases (with the
//! users' token-signing secrets), the secrets key, the configuration. bubblewrap (`bwrap`,
//! Debian package `bubblewrap`) gives each step its own mount and PID namespaces:
//!
//! - the host's file system read-only (`--ro-bind / /`), with a fresh `/dev` and `/proc`;
//! - a fresh, empty, writable `/tmp` per step (the host's `/tmp` holds other users' files and
//!   sockets, e.g. tmux's or ssh-agent's, which a read-only view would still let one connect to);
//! - the sensitive paths ([`Sandbox::hidden`]) covered: directories by an empty read-only
//!   tmpfs, files by `/dev/null` (reading them fails);
//! - the parent of the workspaces covered too, so one workflow cannot read another's
//!   workspace (its `.netrc` or registry logins);
//! - no Unix socket under `/run` and `/var/run`: a read-only view of a socket still lets one
//!   connect, and the Docker engine's socket alone is root on the host (start a container with
//!   `/` mounted); D-Bus, containerd and systemd listen there too. Such a directory is covered
//!   by an empty tmpfs on which everything else in it is shown again (`--ro-bind-try`, so an
//!   entry that vanished meanwhile is skipped, never a failed step); a socket created later
//!   does not show either;
//! - the workflow's own directory (workspace and home) read-write, and for the clone step the
//!   local repository it clones from (a `file://` URL) read-only;
//! - no capabilities (`--cap-drop ALL`): even a step running as root cannot unmount the
//!   covers; its own PID namespace (`--unshare-pid`), so it sees neither the server's process
//!   nor its open files under `/proc`; a new session (`--new-session`), so it cannot push
//!   input into the server's terminal.
//!
//! The network (and with it abstract Unix sockets) stays shared, and the rest of the file
//! system stays readable: the sandbox keeps the server's secrets from trusted code gone
//! wrong, it is no container.
//!
//! Killing the step's process group kills the outer `bwrap`; `--die-with-parent` then kills
//! the namespace's init, and the kernel every process in the namespace, even those that left
//! the process group (`setsid`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The program, looked up on `PATH` (Debian installs it as `/usr/bin/bwrap`).
pub const BWRAP: &str = "bwrap";

/// Options that hold for every step, in front of the mounts.
const BASE_ARGS: &[&str] = &[
    "--die-with-parent",
    "--unshare-pid",
    "--new-session",
    "--cap-drop",
    "ALL",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
];

/// The sandbox setting (`runner.sandbox`, `woodlark agent --sandbox`): whether the local
/// backend's steps run under bubblewrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SandboxMode {
    /// Each step in a bubblewrap [`Sandbox`].
    Bwrap,
    /// Steps straight on the host ([`UNSANDBOXED_WARNING`]).
    None,
}

impl SandboxMode {
    pub const ALL: [SandboxMode; 2] = [SandboxMode::Bwrap, SandboxMode::None];

    /// The setting's value.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Bwrap => "bwrap",
            SandboxMode::None => "none",
        }
    }
}

crate::setting::named_setting!(SandboxMode);

/// What the runner logs at start-up when steps run without a sandbox.
pub const UNSANDBOXED_WARNING: &str = "steps are NOT sandboxed: they run as host processes of this user and can read everything it can (a server's data dir with its token-signing keys, the secrets key, the configuration); run trusted code only";

/// A sandbox hiding `hidden` that was seen to work here, or a one-line error saying how to
/// fix it: install bubblewrap, make it work, or `opt_out` (how to run without one).
pub fn checked(
    hidden: impl IntoIterator<Item = PathBuf>,
    opt_out: &str,
) -> Result<Sandbox, String> {
    let sandbox = Sandbox::new(hidden).map_err(|err| {
        format!(
            "{err}; install the `bubblewrap` package (apt-get install bubblewrap), or {opt_out}"
        )
    })?;
    sandbox.probe().map_err(|err| {
        format!(
            "{err}; bwrap needs unprivileged user namespaces unless it runs as root, or {opt_out}"
        )
    })?;
    Ok(sandbox)
}

/// How to run steps under bubblewrap: the program and the paths steps must not see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    program: PathBuf,
    hidden: Vec<PathBuf>,
    /// Directories whose Unix sockets are covered ([`SOCKET_DIRS`]), looked at anew for
    /// every step: a service started later is covered too.
    socket_dirs: Vec<PathBuf>,
}

/// One mount of a step's sandbox, below `--ro-bind / /`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mount {
    /// A fresh writable tmpfs (`/tmp`).
    Scratch(PathBuf),
    /// Covered: an empty read-only tmpfs over a directory, `/dev/null` over anything else.
    Hide { path: PathBuf, dir: bool },
    /// Visible read-write (the workflow's directory).
    Bind(PathBuf),
    /// Visible read-only although below a covered path (the clone step's local repository).
    ReadOnly(PathBuf),
    /// Shown again, read-only, on a covered socket directory; skipped if it is gone by then.
    Shown(PathBuf),
    /// An empty directory on a covered socket directory, for the entries shown inside it.
    Dir(PathBuf),
    /// A symbolic link on a covered socket directory, as it is on the host.
    Link { path: PathBuf, target: PathBuf },
}

impl Mount {
    fn path(&self) -> &Path {
        match self {
            Mount::Scratch(p)
            | Mount::Bind(p)
            | Mount::ReadOnly(p)
            | Mount::Shown(p)
            | Mount::Dir(p) => p,
            Mount::Hide { path, .. } | Mount::Link { path, .. } => path,
        }
    }

    /// Mounts are made shallowest first, so a deeper mount shows through a shallower one (the
    /// workspace inside a covered data dir stays visible; a secret file inside the
    /// workspace's parent stays covered). On the same path, covering comes last and wins.
    fn order(&self) -> (usize, u8) {
        let rank = match self {
            Mount::Scratch(_) => 0,
            Mount::Bind(_)
            | Mount::ReadOnly(_)
            | Mount::Shown(_)
            | Mount::Dir(_)
            | Mount::Link { .. } => 1,
            Mount::Hide { .. } => 2,
        };
        (self.path().components().count(), rank)
    }
}

/// `path` made absolute (relative to the current directory), symlinks resolved where it
/// exists: a mount on the real path covers every name that leads to it.
fn resolve(path: &Path) -> PathBuf {
    std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// Whether glibc or the dynamic loader act on variable `name` when a program starts (or
/// write files it names): such a variable must not reach bwrap, which runs on the host.
fn acts_on_start_up(name: &str) -> bool {
    name.starts_with("LD_")
        || name.starts_with("MALLOC_")
        || matches!(
            name,
            "GCONV_PATH"
                | "GLIBC_TUNABLES"
                | "LOCPATH"
                | "NLSPATH"
                | "HOSTALIASES"
                | "RES_OPTIONS"
                | "LOCALDOMAIN"
                | "TZDIR"
                | "TMPDIR"
        )
}

/// Where services keep their Unix sockets.
const SOCKET_DIRS: &[&str] = &["/run", "/var/run"];
/// How deep and how far [`without_sockets`] looks: `/run` holds a few hundred entries on a
/// busy host; past the bounds a directory is shown empty rather than unexamined.
const SOCKET_SCAN_DEPTH: usize = 8;
const SOCKET_SCAN_ENTRIES: usize = 20_000;

/// How directory `dir` is shown without its Unix sockets and without `covered` (paths the
/// sandbox covers for other reasons): `None` when nothing in it needs hiding (it can be
/// shown whole), else the mounts that rebuild its other entries on a cover.
fn without_sockets(
    dir: &Path,
    depth: usize,
    budget: &mut usize,
    covered: &[PathBuf],
) -> Option<Vec<Mount>> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Some(Vec::new());
    };
    let mut rebuilt = Vec::new();
    let mut hides_something = false;
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            hides_something = true;
            continue;
        };
        if *budget == 0 || covered.contains(&path) || kind.is_socket() {
            hides_something = true;
            continue;
        }
        *budget -= 1;
        if kind.is_symlink() {
            if let Ok(target) = std::fs::read_link(&path) {
                rebuilt.push(Mount::Link { path, target });
            }
        } else if kind.is_dir() {
            // A directory holding a covered path is rebuilt too (its entry is left out below),
            // so that showing the directory whole cannot uncover it.
            let inside = if depth >= SOCKET_SCAN_DEPTH {
                Some(Vec::new())
            } else {
                without_sockets(&path, depth + 1, budget, covered)
            };
            match inside {
                None => rebuilt.push(Mount::Shown(path)),
                Some(mounts) => {
                    hides_something = true;
                    rebuilt.push(Mount::Dir(path));
                    rebuilt.extend(mounts);
                }
            }
        } else {
            rebuilt.push(Mount::Shown(path));
        }
    }
    hides_something.then_some(rebuilt)
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

impl Sandbox {
    /// A sandbox hiding `hidden` (made absolute; empty paths and `/` are ignored), using the
    /// `bwrap` found on `PATH`.
    pub fn new(hidden: impl IntoIterator<Item = PathBuf>) -> Result<Sandbox, String> {
        let program = which(BWRAP)
            .ok_or_else(|| "bwrap (bubblewrap) is not installed (not found on PATH)".to_string())?;
        Ok(Sandbox::with_program(program, hidden))
    }

    /// As [`Sandbox::new`], with the given `bwrap` executable.
    pub fn with_program(program: PathBuf, hidden: impl IntoIterator<Item = PathBuf>) -> Sandbox {
        let mut paths: Vec<PathBuf> = Vec::new();
        for path in hidden {
            if path.as_os_str().is_empty() {
                continue;
            }
            let path = resolve(&path);
            if path.parent().is_some() && !paths.contains(&path) {
                paths.push(path);
            }
        }
        Sandbox {
            program,
            hidden: paths,
            socket_dirs: SOCKET_DIRS.iter().map(PathBuf::from).collect(),
        }
    }

    /// The same sandbox covering the sockets under `dirs` instead of [`SOCKET_DIRS`].
    pub fn with_socket_dirs(mut self, dirs: Vec<PathBuf>) -> Sandbox {
        self.socket_dirs = dirs;
        self
    }

    /// The paths steps do not see (absolute).
    pub fn hidden(&self) -> &[PathBuf] {
        &self.hidden
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The mounts of a step of the workflow directory `root`, with `readonly` paths shown.
    fn mounts(&self, root: Option<&Path>, readonly: &[PathBuf]) -> Vec<Mount> {
        let scratch = Path::new("/tmp");
        let mut mounts = vec![Mount::Scratch(scratch.to_path_buf())];
        let mut hide = |path: &Path| {
            // What does not exist needs no cover (and bwrap could not mount on it).
            if let Ok(meta) = std::fs::metadata(path) {
                mounts.push(Mount::Hide {
                    path: path.to_path_buf(),
                    dir: meta.is_dir(),
                });
            }
        };
        for path in &self.hidden {
            hide(path);
        }
        if let Some(root) = root {
            let root = resolve(root);
            // The other workflows' directories beside this one.
            if let Some(parent) = root.parent().filter(|p| p.parent().is_some()) {
                hide(parent);
            }
            mounts.push(Mount::Bind(root));
        }
        for path in readonly {
            let path = resolve(path);
            if path.exists() {
                mounts.push(Mount::ReadOnly(path));
            }
        }
        let covered: Vec<PathBuf> = mounts.iter().map(|m| m.path().to_path_buf()).collect();
        let mut socket_dirs: Vec<PathBuf> = self
            .socket_dirs
            .iter()
            .filter_map(|d| std::fs::canonicalize(d).ok())
            .collect();
        socket_dirs.sort();
        socket_dirs.dedup();
        for dir in socket_dirs {
            let mut budget = SOCKET_SCAN_ENTRIES;
            if let Some(rebuilt) = without_sockets(&dir, 0, &mut budget, &covered) {
                mounts.push(Mount::Hide {
                    path: dir,
                    dir: true,
                });
                mounts.extend(rebuilt);
            }
        }
        // `/tmp` is a fresh scratch space already; covering it again would make it read-only.
        mounts.retain(|m| !matches!(m, Mount::Hide { path, .. } if path == scratch));
        mounts.sort_by_key(Mount::order);
        mounts
    }

    /// bwrap's arguments for a step of the workflow directory `root` that runs `program
    /// args` in `cwd`, seeing `readonly` too, with `inner_env` set inside the sandbox only.
    pub fn args(
        &self,
        root: Option<&Path>,
        readonly: &[PathBuf],
        cwd: &Path,
        program: &str,
        args: &[String],
        inner_env: &[(String, String)],
    ) -> Vec<String> {
        let mut out: Vec<String> = BASE_ARGS.iter().map(|s| s.to_string()).collect();
        let mounts = self.mounts(root, readonly);
        let text = |p: &Path| p.display().to_string();
        for mount in &mounts {
            match mount {
                Mount::Scratch(p) => out.extend(["--tmpfs".into(), text(p)]),
                Mount::Hide { path, dir: true } => out.extend(["--tmpfs".into(), text(path)]),
                Mount::Hide { path, dir: false } => {
                    out.extend(["--ro-bind".into(), "/dev/null".into(), text(path)])
                }
                Mount::Bind(p) => out.extend(["--bind".into(), text(p), text(p)]),
                Mount::ReadOnly(p) => out.extend(["--ro-bind".into(), text(p), text(p)]),
                Mount::Shown(p) => out.extend(["--ro-bind-try".into(), text(p), text(p)]),
                Mount::Dir(p) => out.extend(["--dir".into(), text(p)]),
                Mount::Link { path, target } => {
                    out.extend(["--symlink".into(), text(target), text(path)])
                }
            }
        }
        // Read-only only now: deeper mounts needed their mount points created first.
        for mount in &mounts {
            if let Mount::Hide { path, dir: true } = mount {
                out.extend(["--remount-ro".into(), text(path)]);
            }
        }
        for (name, value) in inner_env {
            out.extend(["--setenv".into(), name.clone(), value.clone()]);
        }
        out.extend(["--chdir".into(), text(cwd), "--".into(), program.into()]);
        out.extend(args.iter().cloned());
        out
    }

    /// The program and arguments that run `program args` in `cwd` inside the sandbox.
    ///
    /// `env` is what the step is to see; bwrap itself starts with it too, outside any
    /// namespace, as the runner's user. The variables glibc and the dynamic loader act on at
    /// start-up (`LD_PRELOAD`, …: a library written to the workspace would load into bwrap on
    /// the host) are taken out of `env` and set inside the sandbox with `--setenv` instead.
    /// Their values show in the host's process list; a secret belongs under another name.
    pub fn wrap(
        &self,
        root: &Path,
        readonly: &[PathBuf],
        cwd: &Path,
        program: &str,
        args: &[String],
        env: &mut std::collections::BTreeMap<String, String>,
    ) -> (String, Vec<String>) {
        let inner: Vec<(String, String)> = env
            .iter()
            .filter(|(name, _)| acts_on_start_up(name))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        env.retain(|name, _| !acts_on_start_up(name));
        (
            self.program.display().to_string(),
            self.args(Some(root), readonly, cwd, program, args, &inner),
        )
    }

    /// Runs `true` in the sandbox once, so a missing or unusable bwrap (no user namespaces,
    /// a seccomp filter, a path it cannot cover) stops start-up instead of failing every step.
    pub fn probe(&self) -> Result<(), String> {
        let args = self.args(None, &[], Path::new("/"), "true", &[], &[]);
        let out = Command::new(&self.program)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.program.display()))?;
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let reason = stderr
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(String::from)
            .unwrap_or_else(|| format!("exit status {}", out.status));
        Err(format!(
            "{} does not work here: {reason}",
            self.program.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sandbox hiding `hidden`, without the host's sockets (they differ per machine).
    fn sandbox(hidden: &[&Path]) -> Sandbox {
        Sandbox::with_program(
            "/usr/bin/bwrap".into(),
            hidden.iter().map(|p| p.to_path_buf()),
        )
        .with_socket_dirs(Vec::new())
    }

    #[test]
    fn loader_variables_are_set_inside_the_sandbox_not_on_bwrap() {
        let sb = sandbox(&[]);
        let mut env = std::collections::BTreeMap::from([
            ("LD_PRELOAD".to_string(), "/w/evil.so".to_string()),
            ("GLIBC_TUNABLES".to_string(), "x".to_string()),
            ("GREETING".to_string(), "hi".to_string()),
        ]);
        let (_, args) = sb.wrap(Path::new("/w"), &[], Path::new("/w"), "sh", &[], &mut env);
        assert_eq!(env.keys().collect::<Vec<_>>(), ["GREETING"]);
        let end = args.iter().position(|a| a == "--").unwrap();
        let setenv: Vec<&[String]> = args[..end]
            .windows(3)
            .filter(|w| w[0] == "--setenv")
            .collect();
        assert_eq!(
            setenv,
            [
                ["--setenv", "GLIBC_TUNABLES", "x"]
                    .map(String::from)
                    .as_slice(),
                ["--setenv", "LD_PRELOAD", "/w/evil.so"]
                    .map(String::from)
                    .as_slice(),
            ]
        );
    }

    /// The mount arguments alone (between the base options and `--chdir`).
    fn mount_args(args: &[String]) -> Vec<String> {
        let end = args.iter().position(|a| a == "--chdir").unwrap();
        args[BASE_ARGS.len()..end].to_vec()
    }

    fn s(p: &Path) -> String {
        p.display().to_string()
    }

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn socket_dirs_are_covered_and_everything_else_in_them_shown_again() {
        let top = tempfile::tempdir().unwrap();
        let run = top.path().canonicalize().unwrap();
        std::fs::create_dir_all(run.join("user/0")).unwrap();
        std::fs::create_dir_all(run.join("lock")).unwrap();
        let _a = std::os::unix::net::UnixListener::bind(run.join("docker.sock")).unwrap();
        let _b = std::os::unix::net::UnixListener::bind(run.join("user/0/bus")).unwrap();
        std::fs::write(run.join("app.pid"), "1").unwrap();
        std::fs::write(run.join("user/0/notes"), "n").unwrap();
        std::os::unix::fs::symlink("app.pid", run.join("link")).unwrap();
        let sb = sandbox(&[]).with_socket_dirs(vec![run.clone(), run.clone()]);
        let args = sb.args(None, &[], Path::new("/"), "true", &[], &[]);
        let mounts = mount_args(&args);
        let has = |w: &[&str]| {
            mounts
                .windows(w.len())
                .any(|m| m.iter().zip(w).all(|(a, b)| a == b))
        };
        assert!(has(&["--tmpfs", &s(&run)]), "{mounts:?}");
        assert!(has(&["--remount-ro", &s(&run)]), "{mounts:?}");
        for shown in [
            run.join("app.pid"),
            run.join("lock"),
            run.join("user/0/notes"),
        ] {
            assert!(
                has(&["--ro-bind-try", &s(&shown), &s(&shown)]),
                "{shown:?}: {mounts:?}"
            );
        }
        assert!(has(&["--dir", &s(&run.join("user"))]), "{mounts:?}");
        assert!(has(&["--dir", &s(&run.join("user/0"))]), "{mounts:?}");
        assert!(
            has(&["--symlink", "app.pid", &s(&run.join("link"))]),
            "{mounts:?}"
        );
        assert!(
            !mounts
                .iter()
                .any(|m| m.ends_with("docker.sock") || m.ends_with("/bus")),
            "sockets are not shown again: {mounts:?}"
        );
        assert_eq!(
            mounts.iter().filter(|m| *m == "--tmpfs").count(),
            2,
            "/tmp and the socket dir, once: {mounts:?}"
        );
        // A directory without sockets needs no cover.
        let calm = tempfile::tempdir().unwrap();
        std::fs::write(calm.path().join("x.pid"), "1").unwrap();
        let sb = sandbox(&[]).with_socket_dirs(vec![calm.path().to_path_buf()]);
        let args = sb.args(None, &[], Path::new("/"), "true", &[], &[]);
        assert_eq!(mount_args(&args), ["--tmpfs", "/tmp"]);
    }

    #[test]
    fn base_options_then_command() {
        let sb = sandbox(&[]);
        let args = sb.args(
            None,
            &[],
            Path::new("/w"),
            "sh",
            &["-c".into(), "echo hi".into()],
            &[],
        );
        assert_eq!(&args[..BASE_ARGS.len()], BASE_ARGS);
        assert!(args.windows(2).any(|w| w == ["--cap-drop", "ALL"]));
        assert_eq!(mount_args(&args), ["--tmpfs", "/tmp"]);
        assert_eq!(
            &args[args.len() - 6..],
            ["--chdir", "/w", "--", "sh", "-c", "echo hi"]
        );
    }

    #[test]
    fn hidden_paths_are_covered_and_the_workspace_shown() {
        let top = tempfile::tempdir().unwrap();
        let top = top.path().canonicalize().unwrap();
        let data = top.join("data");
        let runs = top.join("runs");
        let root = runs.join("woodlark-1-abc");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(root.join("workspace")).unwrap();
        let key = top.join("secrets.key");
        std::fs::write(&key, "k").unwrap();
        let missing = top.join("missing.pem");
        let sb = sandbox(&[&data, &key, &missing, Path::new("")]);
        assert_eq!(sb.hidden(), [data.clone(), key.clone(), missing.clone()]);
        let cwd = root.join("workspace");
        let args = sb.args(Some(&root), &[], &cwd, "sh", &[], &[]);
        assert_eq!(
            mount_args(&args),
            v(&[
                "--tmpfs",
                "/tmp",
                // Same depth: data dir, key file and the workspaces' parent, covered.
                "--tmpfs",
                &s(&data),
                "--ro-bind",
                "/dev/null",
                &s(&key),
                "--tmpfs",
                &s(&runs),
                // Deeper: this workflow's directory, read-write.
                "--bind",
                &s(&root),
                &s(&root),
                "--remount-ro",
                &s(&data),
                "--remount-ro",
                &s(&runs),
            ])
        );
        let (program, wrapped) = sb.wrap(&root, &[], &cwd, "sh", &[], &mut Default::default());
        assert_eq!(program, "/usr/bin/bwrap");
        assert_eq!(wrapped, args);
    }

    #[test]
    fn workspace_inside_the_data_dir_stays_visible() {
        let top = tempfile::tempdir().unwrap();
        let data = top.path().canonicalize().unwrap().join("data");
        let root = data.join("runs").join("woodlark-2-xyz");
        let repo = data.join("forge").join("alice").join("app.git");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&repo).unwrap();
        let sb = sandbox(&[&data]);
        let args = sb.args(
            Some(&root),
            std::slice::from_ref(&repo),
            &root,
            "git",
            &[],
            &[],
        );
        let mounts = mount_args(&args);
        let at = |flag: &str, path: &Path| {
            mounts
                .windows(2)
                .position(|w| w[0] == flag && w[1] == s(path))
                .unwrap_or_else(|| panic!("no {flag} {}: {mounts:?}", path.display()))
        };
        let cover = at("--tmpfs", &data);
        assert!(cover < at("--tmpfs", &data.join("runs")));
        assert!(at("--tmpfs", &data.join("runs")) < at("--bind", &root));
        assert!(cover < at("--ro-bind", &repo), "{mounts:?}");
        // Read-only covers are remounted after every mount point below them exists.
        assert!(at("--remount-ro", &data) > at("--ro-bind", &repo));
    }

    #[test]
    fn a_cover_on_the_same_path_wins_and_root_is_never_hidden() {
        let top = tempfile::tempdir().unwrap();
        let secret = top.path().canonicalize().unwrap().join("secret");
        std::fs::create_dir_all(&secret).unwrap();
        let sb = sandbox(&[&secret, Path::new("/")]);
        assert_eq!(sb.hidden(), std::slice::from_ref(&secret));
        // A clone URL pointing at a hidden directory does not uncover it.
        let args = sb.args(
            None,
            std::slice::from_ref(&secret),
            Path::new("/"),
            "true",
            &[],
            &[],
        );
        assert_eq!(
            mount_args(&args),
            v(&[
                "--tmpfs",
                "/tmp",
                "--ro-bind",
                &s(&secret),
                &s(&secret),
                "--tmpfs",
                &s(&secret),
                "--remount-ro",
                &s(&secret),
            ])
        );
    }

    #[test]
    fn relative_and_symlinked_paths_are_resolved() {
        let top = tempfile::tempdir().unwrap();
        let real = top.path().canonicalize().unwrap().join("real");
        std::fs::create_dir_all(&real).unwrap();
        let link = top.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let sb = sandbox(&[&link, Path::new("relative/dir")]);
        assert_eq!(sb.hidden()[0], real);
        assert!(sb.hidden()[1].is_absolute());
        assert!(sb.hidden()[1].ends_with("relative/dir"));
    }

    /// The real thing, where bwrap is installed (it is on the CI machines: `.ci/setup`).
    #[test]
    fn bwrap_hides_and_shows_what_it_should() {
        let Ok(sb) = Sandbox::new(Vec::new()) else {
            eprintln!("bwrap not installed; skipped");
            return;
        };
        // Outside /tmp (the target dir), so covering the data dir itself is what hides it.
        let exe = std::env::current_exe().unwrap();
        let top = tempfile::tempdir_in(exe.parent().unwrap()).unwrap();
        let top = top.path().canonicalize().unwrap();
        let data = top.join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("woodlark.db"), "SQLite format 3").unwrap();
        let key = top.join("secrets.key");
        std::fs::write(&key, "the-key").unwrap();
        let root = top.join("runs").join("woodlark-3-q");
        std::fs::create_dir_all(root.join("workspace")).unwrap();
        std::fs::create_dir_all(top.join("runs").join("woodlark-4-other")).unwrap();
        let sb = Sandbox::with_program(sb.program().to_path_buf(), [data.clone(), key.clone()]);
        sb.probe().unwrap();
        let script = format!(
            "ls -A {data}; cat {data}/woodlark.db; cat {key}; ls -A {runs}; \
             umount {data} 2>/dev/null && echo UNMOUNTED; \
             echo carried > carried.txt; echo tmp > /tmp/t && cat /tmp/t; echo done",
            data = data.display(),
            key = key.display(),
            runs = top.join("runs").display(),
        );
        let (program, args) = sb.wrap(
            &root,
            &[],
            &root.join("workspace"),
            "sh",
            &["-c".into(), script],
            &mut Default::default(),
        );
        let out = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        // Only this workflow's directory shows among the workspaces; nothing of the rest.
        assert_eq!(lines, ["woodlark-3-q", "tmp", "done"], "{out:?}");
        assert_eq!(
            std::fs::read_to_string(root.join("workspace/carried.txt")).unwrap(),
            "carried\n"
        );
    }

    /// Cancel and timeout kill the step's process group: under bwrap that must still end
    /// every process of the step, including one that left the group with `setsid`.
    #[tokio::test]
    async fn killing_the_group_ends_every_process_in_the_sandbox() {
        use crate::backend::{Exit, StepHandle};
        use crate::process;
        let Ok(sb) = Sandbox::new(Vec::new()) else {
            eprintln!("bwrap not installed; skipped");
            return;
        };
        let top = tempfile::tempdir().unwrap();
        let root = top.path().join("woodlark-5-k");
        std::fs::create_dir_all(&root).unwrap();
        // A duration no other process uses marks this test's sleepers.
        let marker = format!("600.{}", std::process::id());
        let script = format!("sleep {marker} & setsid sleep {marker} & sleep {marker}; wait");
        let (program, args) = sb.wrap(
            &root,
            &[],
            &root,
            "sh",
            &["-c".into(), script],
            &mut Default::default(),
        );
        let (mut run, _output) = process::spawn(
            &program,
            &args,
            &root,
            &std::collections::BTreeMap::new(),
            None,
        )
        .unwrap();
        let sleepers = || {
            std::fs::read_dir("/proc")
                .unwrap()
                .filter_map(|e| {
                    let dir = e.ok()?.path();
                    let cmdline = std::fs::read(dir.join("cmdline")).ok()?;
                    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
                    let state = stat
                        .rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .next()?
                        .to_string();
                    (cmdline == format!("sleep\0{marker}\0").as_bytes() && state != "Z")
                        .then_some(dir)
                })
                .count()
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while sleepers() < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "the sleepers never started"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        run.kill();
        assert!(matches!(run.wait().await, Exit::Killed));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while sleepers() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "{} sleepers survived the kill",
                sleepers()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    #[test]
    fn a_broken_bwrap_fails_the_probe_with_its_reason() {
        let sb = Sandbox::with_program("/bin/false".into(), Vec::new());
        let err = sb.probe().unwrap_err();
        assert!(err.contains("/bin/false does not work here"), "{err}");
        let sb = Sandbox::with_program("/does/not/exist/bwrap".into(), Vec::new());
        let err = sb.probe().unwrap_err();
        assert!(err.contains("cannot run /does/not/exist/bwrap"), "{err}");
    }
}
