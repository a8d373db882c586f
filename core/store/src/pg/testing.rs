//! A throwaway PostgreSQL server for tests: a cluster made with Debian's `initdb` in a
//! temporary directory, listening on a free port of 127.0.0.1 with `trust` auth, stopped and
//! deleted on drop. PostgreSQL refuses to run as root, so as root the cluster belongs to the
//! `postgres` system user (the package creates it) and its tools run through `runuser`.
//! Missing binaries are a failure with the fix, never a skip.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A running test cluster.
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// The user its tools run as, when that is not us.
    user: Option<&'static str>,
}

/// The user every database is reached as.
pub const USER: &str = "woodlark";

impl Cluster {
    /// Makes and starts a cluster (about a second: no fsync anywhere, it is thrown away).
    pub fn start() -> Cluster {
        let bin = binaries();
        let dir = tempfile::Builder::new()
            .prefix("woodlark-pg-")
            .tempdir()
            .expect("temp dir");
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let user = root.then_some("postgres");
        if root {
            chown_to_postgres(dir.path());
        }
        let data = dir.path().join("data");
        let mut cluster = Cluster {
            dir,
            bin,
            port: 0,
            user,
        };
        cluster.tool(
            "initdb",
            &[
                "-D",
                &data.display().to_string(),
                "-U",
                USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        );
        cluster.port = free_port();
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=1000",
            cluster.port,
            cluster.dir.path().display()
        );
        cluster.tool(
            "pg_ctl",
            &[
                "-D",
                &data.display().to_string(),
                "-l",
                &cluster.dir.path().join("server.log").display().to_string(),
                "-o",
                &options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        cluster
    }

    /// Creates database `name` and returns its URL.
    pub fn database(&self, name: &str) -> String {
        let mut admin = crate::pg::connect(&self.url("postgres")).expect("connect as admin");
        admin
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .expect("create database");
        self.url(name)
    }

    /// The URL of database `name`.
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgres://{USER}@127.0.0.1:{}/{name}?sslmode=disable",
            self.port
        )
    }

    /// Runs one of the server's tools (as the cluster's owner); panics with its output.
    fn tool(&self, name: &str, args: &[&str]) {
        let program = self.bin.join(name);
        let out = match self.user {
            Some(user) => Command::new("runuser")
                .args(["-u", user, "--"])
                .arg(&program)
                .args(args)
                .current_dir(self.dir.path())
                .output(),
            None => Command::new(&program).args(args).output(),
        }
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        assert!(
            out.status.success(),
            "{name} failed: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
        );
    }
}

static SHARED: std::sync::OnceLock<Cluster> = std::sync::OnceLock::new();

impl Cluster {
    /// One cluster for the whole test process, started on first use and stopped (its
    /// directory removed) when the process exits.
    pub fn shared() -> &'static Cluster {
        SHARED.get_or_init(|| {
            extern "C" fn stop_shared() {
                if let Some(cluster) = SHARED.get() {
                    cluster.stop();
                    let _ = std::fs::remove_dir_all(cluster.dir.path());
                }
            }
            // SAFETY: registers a plain function; it runs once, at exit.
            unsafe { libc::atexit(stop_shared) };
            Cluster::start()
        })
    }

    /// A new, empty database with a name of its own; returns its URL.
    pub fn fresh_database(&self) -> String {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // On a plain thread: the blocking client cannot run on a runtime's (async tests).
        std::thread::scope(|s| s.spawn(|| self.database(&format!("t{n}"))).join())
            .expect("create a database")
    }

    fn stop(&self) {
        let data = self.dir.path().join("data").display().to_string();
        let program = self.bin.join("pg_ctl");
        let args = ["-D", data.as_str(), "-m", "immediate", "-w", "stop"];
        let _ = match self.user {
            Some(user) => Command::new("runuser")
                .args(["-u", user, "--"])
                .arg(&program)
                .args(args)
                .output(),
            None => Command::new(&program).args(args).output(),
        };
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The newest installed server's `bin` directory (`/usr/lib/postgresql/<major>/bin`).
fn binaries() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((major, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).expect(
        "no PostgreSQL server in /usr/lib/postgresql (bash .ci/test installs Debian's postgresql)",
    )
}

fn chown_to_postgres(dir: &Path) {
    let status = Command::new("chown")
        .args(["postgres:postgres"])
        .arg(dir)
        .status()
        .expect("chown");
    assert!(
        status.success(),
        "cannot give {} to postgres",
        dir.display()
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
