//! A throwaway PostgreSQL server for tests: a cluster made with Debian's `initdb` in a
//! temporary directory, listening on a free port of 127.0.0.1 with `trust` auth, stopped and
//! deleted on drop. PostgreSQL refuses to run as root, so as root the cluster belongs to the
//! `postgres` system user (the package creates it) and its tools run through `runuser`.
//! Missing binaries are a failure with the fix, never a skip.
//!
//! The cluster also speaks TLS, with certificates from a test CA of its own ([`Cluster::ca_file`]):
//! the server's names `db.woodlark.test` and `127.0.0.1`, and user [`CERT_USER`] signs in with a
//! client certificate only ([`Cluster::client_cert_files`]). Plain connections stay accepted.

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

/// The user whose only way in is a client certificate over TLS (made by the caller who needs
/// it: `CREATE ROLE`).
pub const CERT_USER: &str = "woodlark_cert";

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
        cluster.make_certificates(&data);
        cluster.port = free_port();
        cluster.start_again();
        cluster
    }

    /// Starts the cluster's server (again, after [`Cluster::stop_for_outage`]) on its port.
    pub fn start_again(&self) {
        let data = self.dir.path().join("data");
        let tls = self.dir.path().join("tls");
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=1000 -c ssl=on \
             -c ssl_cert_file={tls}/server.crt -c ssl_key_file={tls}/server.key \
             -c ssl_ca_file={tls}/ca.pem",
            self.port,
            self.dir.path().display(),
            tls = tls.display(),
        );
        self.tool(
            "pg_ctl",
            &[
                "-D",
                &data.display().to_string(),
                "-l",
                &self.dir.path().join("server.log").display().to_string(),
                "-o",
                &options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
    }

    /// Stops the cluster's server as an outage would (every session cut at once, what was
    /// committed kept): [`Cluster::start_again`] brings it back. Only on a cluster of the
    /// test's own, never [`Cluster::shared`].
    ///
    /// A fast stop, not an immediate one: the test cluster runs with `synchronous_commit =
    /// off`, so a crash would lose the last commits it had already acknowledged, which a
    /// production database (commits durable when acknowledged) never does.
    pub fn stop_for_outage(&self) {
        let data = self.dir.path().join("data").display().to_string();
        self.tool("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"]);
    }

    /// Stops the cluster's server as a crash would (`pg_ctl -m immediate`: no goodbye to the
    /// sessions). On this cluster the last acknowledged commits may be lost with it (see
    /// [`Cluster::stop_for_outage`]): for tests of what sessions see, not of what was stored.
    pub fn crash(&self) {
        let data = self.dir.path().join("data").display().to_string();
        self.tool("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
    }

    /// Creates database `name` and returns its URL.
    pub fn database(&self, name: &str) -> String {
        let mut admin = crate::pg::connect(&self.url("postgres")).expect("connect as admin");
        admin
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .expect("create database");
        self.url(name)
    }

    /// The URL of database `name`: over TLS, the server's certificate checked against the
    /// test CA and the host name, as a careful operator would connect. Every PostgreSQL test
    /// runs over it.
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgres://{USER}@127.0.0.1:{}/{name}?sslmode=verify-full&sslrootcert={}",
            self.port,
            self.ca_file().display()
        )
    }

    /// The URL of database `name` over the cluster's Unix socket, as a server on the
    /// database's own machine would connect: no TCP, and no TLS (PostgreSQL offers none
    /// there; the socket's directory is the cluster's own, not world-readable).
    pub fn socket_url(&self, name: &str) -> String {
        format!(
            "postgres://{USER}@/{name}?host={}&port={}&sslmode=disable",
            self.dir.path().display(),
            self.port
        )
    }

    /// The PEM file of the test CA that signed the server's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("tls/ca.pem")
    }

    /// The certificate and key files of [`CERT_USER`]'s client certificate.
    pub fn client_cert_files(&self) -> (PathBuf, PathBuf) {
        let tls = self.dir.path().join("tls");
        (tls.join("client.crt"), tls.join("client.key"))
    }

    /// The path of PostgreSQL's program `name` (`pgbench`, say) of the cluster's version.
    pub fn program(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// The port the cluster listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A test CA; the server's certificate and the client's; `hostssl … cert` for
    /// [`CERT_USER`] ahead of initdb's `trust` lines.
    fn make_certificates(&self, data: &Path) {
        let tls = self.dir.path().join("tls");
        std::fs::create_dir(&tls).expect("tls dir");
        let (ca, ca_pem) = test_ca("woodlark test CA");
        let (server_crt, server_key) = issue(&ca, &["db.woodlark.test", "127.0.0.1"], "db");
        let (client_crt, client_key) = issue(&ca, &[], CERT_USER);
        for (name, text) in [
            ("ca.pem", ca_pem),
            ("server.crt", server_crt),
            ("server.key", server_key),
            ("client.crt", client_crt),
            ("client.key", client_key),
        ] {
            let path = tls.join(name);
            std::fs::write(&path, text).expect("write a certificate");
            // PostgreSQL refuses a key others can read.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let hba = data.join("pg_hba.conf");
        let trust = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
        std::fs::write(
            &hba,
            format!("hostssl all {CERT_USER} 127.0.0.1/32 cert\n{trust}"),
        )
        .expect("write pg_hba.conf");
        if self.user.is_some() {
            chown_to_postgres(&tls);
            for entry in std::fs::read_dir(&tls).unwrap().flatten() {
                chown_to_postgres(&entry.path());
            }
        }
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

/// A self-signed CA (for TLS tests): its issuer and its certificate as PEM.
pub fn test_ca(name: &str) -> (rcgen::CertifiedIssuer<'static, rcgen::KeyPair>, String) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let issuer =
        rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap();
    let pem = issuer.pem();
    (issuer, pem)
}

/// A certificate signed by `ca` for `names` with common name `cn`: (certificate, key) as PEM.
pub fn issue(
    ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    names: &[&str],
    cn: &str,
) -> (String, String) {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = rcgen::CertificateParams::new(names).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem())
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
