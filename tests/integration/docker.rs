//! The docker backend on a real Docker engine (`.ci/test` installs and starts Debian's
//! `docker.io`; nothing is skipped when it is missing: these tests fail with the reason).
//!
//! Images are built here from the machine's static busybox (`docker import`), never pulled
//! from the internet; the private-registry tests run Debian's `docker-registry` on
//! 127.0.0.1 with htpasswd auth. Containers use only the networks the runner creates.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

use crate::pipelines::{finished, log_text, push_files, run_manually, step_of, wait_for};
use crate::util::{BIN, Http, Process, TestServer, cli_user_add, git, woodlark_in, write_config};

/// A busybox image with every applet, `/etc/passwd` and `/tmp` (tests/docker/images.sh).
pub const BUSYBOX: &str = "woodlark-test/busybox:latest";
/// A plugin image: its entrypoint prints the `greeting` setting.
const PLUGIN: &str = "woodlark-test/plugin:latest";

static IMAGES: Mutex<bool> = Mutex::new(false);

/// Runs `docker args…`; panics with its output when it fails.
pub fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run docker: {e} (bash .ci/test installs docker.io)"));
    assert!(
        out.status.success(),
        "docker {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The host's address on Docker's default bridge: where a container reaches a server the
/// test runs on the host. Docker names it in the network's IPAM config, but not always
/// (docker.io 28 freshly started by `.ci/docker-engine` gave the subnet alone); then it is
/// the subnet's first address, the one Docker's IPAM gives the bridge.
pub fn bridge_gateway() -> std::net::IpAddr {
    let config = docker(&[
        "network",
        "inspect",
        "bridge",
        "-f",
        "{{json .IPAM.Config}}",
    ]);
    let config: serde_json::Value = serde_json::from_str(config.trim())
        .unwrap_or_else(|e| panic!("docker's bridge IPAM config {config:?}: {e}"));
    let first = &config[0];
    if let Some(gateway) = first["Gateway"].as_str().filter(|g| !g.is_empty()) {
        return gateway.parse().unwrap();
    }
    let subnet = first["Subnet"]
        .as_str()
        .unwrap_or_else(|| panic!("docker's bridge has neither a gateway nor a subnet: {config}"));
    let base: std::net::Ipv4Addr = subnet.split('/').next().unwrap().parse().unwrap();
    std::net::Ipv4Addr::from(u32::from(base) + 1).into()
}

/// Builds the test images once per run (idempotent across runs).
pub fn ensure_images() {
    let mut built = IMAGES.lock().unwrap_or_else(|e| e.into_inner());
    if *built {
        return;
    }
    let info = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output();
    match info {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "the Docker engine does not answer (bash .ci/test starts dockerd): {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("docker is not installed (bash .ci/test installs docker.io): {e}"),
    }
    // The step images, and the clone image the runner uses (idempotent, as `.ci/test` runs
    // it too).
    for script in ["tests/docker/images.sh", ".ci/clone-image"] {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(script);
        let out = Command::new("bash").arg(&script).output().unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    *built = true;
}

/// `[runner]` for the docker backend, workspaces in the data dir.
pub(crate) fn docker_runner(data_dir: &Path) -> String {
    format!(
        "#runner\n[runner]\nenabled = true\nbackend = \"docker\"\ncapacity = 2\nworkdir = {:?}\n",
        data_dir.join("runs").display().to_string()
    )
}

/// The owner label of the server using `data_dir` (what its containers carry).
pub(crate) fn owner_of(data_dir: &Path) -> String {
    format!(
        "server-{}",
        &woodlark::store::agents::token_hash(&data_dir.display().to_string())[..16]
    )
}

/// Containers, networks and volumes carrying `owner`'s label, without the empty networks the
/// runner keeps for its next workflows (at most `IDLE_NETWORKS`; more would be a leak).
fn objects_of(owner: &str) -> (usize, usize, usize) {
    let ids = owned(owner);
    let idle_pool = ids
        .networks
        .iter()
        .filter(|id| {
            docker(&[
                "network",
                "inspect",
                "-f",
                &format!(
                    "{{{{len .Containers}}}} {{{{index .Labels \"{}\"}}}}",
                    woodlark::runner::docker::LABEL_POOL
                ),
                id,
            ])
            .trim()
                == "0 network"
        })
        .count();
    let kept = idle_pool.min(woodlark::runner::docker::IDLE_NETWORKS);
    (
        ids.containers.len(),
        ids.networks.len() - kept,
        ids.volumes.len(),
    )
}

/// The ids of everything carrying `owner`'s label.
#[derive(Debug)]
struct Owned {
    containers: BTreeSet<String>,
    networks: BTreeSet<String>,
    volumes: BTreeSet<String>,
}

fn owned(owner: &str) -> Owned {
    let filter = format!("label=io.woodlark.owner={owner}");
    let list = |args: &[&str]| -> BTreeSet<String> {
        docker(args)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    };
    Owned {
        containers: list(&["ps", "-aq", "--no-trunc", "--filter", &filter]),
        networks: list(&["network", "ls", "-q", "--no-trunc", "--filter", &filter]),
        volumes: list(&["volume", "ls", "-q", "--filter", &filter]),
    }
}

/// A test server on the docker backend; everything its runner left in the engine (the
/// pool's idle networks among them) is removed when it drops.
struct DockerServer {
    server: TestServer,
    _cleanup: EngineCleanup,
}

impl std::ops::Deref for DockerServer {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.server
    }
}

async fn docker_server() -> DockerServer {
    ensure_images();
    let dir = tempfile::tempdir().unwrap();
    let tables = docker_runner(dir.path());
    let cleanup = EngineCleanup(owner_of(dir.path()));
    DockerServer {
        server: TestServer::start_in_with_tables(dir, "", &tables).await,
        _cleanup: cleanup,
    }
}

/// Removes every object of an owner on drop: test servers are not stopped gracefully, and
/// their owners (derived from temporary data dirs) never start again to sweep.
pub(crate) struct EngineCleanup(pub(crate) String);

impl Drop for EngineCleanup {
    fn drop(&mut self) {
        let ids = owned(&self.0);
        let run = |args: Vec<&str>| {
            let _ = Command::new("docker")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        if !ids.containers.is_empty() {
            run(["rm", "-f", "-v"]
                .into_iter()
                .chain(ids.containers.iter().map(String::as_str))
                .collect());
        }
        if !ids.networks.is_empty() {
            run(["network", "rm"]
                .into_iter()
                .chain(ids.networks.iter().map(String::as_str))
                .collect());
        }
        if !ids.volumes.is_empty() {
            run(["volume", "rm", "-f"]
                .into_iter()
                .chain(ids.volumes.iter().map(String::as_str))
                .collect());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_run_in_their_images_with_a_shared_workspace_services_and_plugins() {
    let s = docker_server().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let config = format!(
        r#"services:
  cache:
    image: {BUSYBOX}
    commands:
      - while true; do echo pong-from-cache | nc -l -p 7000; done
steps:
  isolated:
    image: {BUSYBOX}
    commands:
      - test ! -e /etc/os-release
      - test ! -e /usr/bin/git
      - test "$$CI_WORKSPACE" = /woodpecker/src
      - cat README.md
      - echo made-in-step-one > artifact.txt
  reads:
    image: {BUSYBOX}
    commands:
      - cat artifact.txt
  talk:
    image: {BUSYBOX}
    commands:
      - for i in $(seq 1 40); do nc cache 7000 </dev/null && exit 0; sleep 0.25; done; exit 1
  publish:
    image: {PLUGIN}
    settings:
      greeting: hello-plugin
  nobody:
    image: {BUSYBOX}
    backend_options:
      docker:
        user: "65534"
    commands:
      - id -u
"#
    );
    push_files(&s, "alice/app", &[(".woodpecker.yaml", &config)], "ci").await;
    let done = wait_for(&s.http, &p.alice, id, 1, 120, finished).await;
    let log = |name: &str| {
        let step_id = step_of(&done, name)["id"].as_i64().unwrap();
        let http = &s.http;
        let token = p.alice.clone();
        async move { log_text(http, &token, id, 1, step_id).await }
    };
    assert_eq!(
        done["status"],
        "success",
        "{done:#}\n{:?}",
        log("isolated").await
    );
    assert!(log("isolated").await.contains(&"hello".to_string()));
    assert!(log("reads").await.contains(&"made-in-step-one".to_string()));
    assert!(log("talk").await.contains(&"pong-from-cache".to_string()));
    assert!(
        log("publish")
            .await
            .contains(&"plugin sees hello-plugin in /woodpecker/src".to_string())
    );
    assert!(log("nobody").await.contains(&"65534".to_string()));
    // Everything of the workflow is gone once it ended.
    assert_none_left(&owner_of(s.dir.path())).await;
}

/// Waits (briefly) until no container, network or volume of `owner` is left.
async fn assert_none_left(owner: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while objects_of(owner) != (0, 0, 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "left behind: {:?}",
            objects_of(owner)
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_repositories_cannot_ask_for_privileges_or_host_volumes() {
    let s = docker_server().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let config = format!(
        "steps:\n  root:\n    image: {BUSYBOX}\n    privileged: true\n    commands: [id]\n  host:\n    image: {BUSYBOX}\n    volumes: [\"/etc:/host-etc\"]\n    commands: [cat /host-etc/hostname]\n"
    );
    push_files(&s, "alice/app", &[(".woodpecker.yaml", &config)], "ci").await;
    let done = wait_for(&s.http, &p.alice, id, 1, 60, finished).await;
    assert_eq!(done["status"], "error", "{done:#}");
    let errors = done["errors"].to_string();
    assert!(
        errors.contains("`privileged` needs a repository trusted for security"),
        "{errors}"
    );
    assert!(
        errors.contains("`volumes` needs a repository trusted for volumes"),
        "{errors}"
    );
    assert_eq!(objects_of(&owner_of(s.dir.path())), (0, 0, 0));

    // Once an instance admin trusts the repository for volumes, the host volume is mounted.
    // (`privileged` compiles then too, see the compiler's tests; this machine's engine runs
    // inside a container that cannot grant it, so it is not run here.)
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.admin),
            r#"{"trusted": {"volumes": true}}"#,
        )
        .await
        .expect(200);
    let host_only = format!(
        "steps:\n  host:\n    image: {BUSYBOX}\n    volumes: [\"/etc:/host-etc:ro\"]\n    commands: [test -s /host-etc/hostname]\n"
    );
    push_files(&s, "alice/app", &[(".woodpecker.yaml", &host_only)], "host").await;
    let done = wait_for(&s.http, &p.alice, id, 2, 120, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_removes_the_running_container() {
    let s = docker_server().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let config = format!(
        "steps:\n  slow:\n    image: {BUSYBOX}\n    commands:\n      - echo started\n      - sleep 600\n"
    );
    push_files(&s, "alice/app", &[(".woodpecker.yaml", &config)], "slow").await;
    let running = wait_for(&s.http, &p.alice, id, 1, 60, |p| {
        p["workflows"]
            .as_array()
            .is_some_and(|w| !w.is_empty() && step_of(p, "slow")["state"] == "running")
    })
    .await;
    let step_id = step_of(&running, "slow")["id"].as_i64().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !log_text(&s.http, &p.alice, id, 1, step_id)
        .await
        .contains(&"started".to_string())
    {
        assert!(std::time::Instant::now() < deadline, "no output");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let owner = owner_of(s.dir.path());
    assert_eq!(objects_of(&owner).0, 1, "the step's container runs");
    let t0 = std::time::Instant::now();
    s.http
        .post(
            &format!("/api/repos/{id}/pipelines/1/cancel"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(204);
    let done = wait_for(&s.http, &p.alice, id, 1, 30, finished).await;
    assert_eq!(done["status"], "killed", "{done:#}");
    assert!(
        t0.elapsed().as_secs() < 15,
        "cancel took {:?}",
        t0.elapsed()
    );
    assert_none_left(&owner).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_pipeline_leaves_nothing_after_the_next_start() {
    ensure_images();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &docker_runner(dir.path()));
    let token = |login: &str, admin: bool| {
        String::from_utf8(cli_user_add(&config, login, admin).stdout)
            .unwrap()
            .trim()
            .to_string()
    };
    let (admin, alice) = (token("root", true), token("alice", false));
    let server = Process::start(&config);
    let http = Http::new(server.addr);
    let forge_dir = dir.path().join("forge");
    std::fs::create_dir_all(forge_dir.join("alice")).unwrap();
    let body = serde_json::json!({"type": "git", "url": format!("file://{}", forge_dir.display())})
        .to_string();
    let forge = http
        .post("/api/forges", Some(&admin), &body)
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    let bare = forge_dir.join("alice/app.git");
    git(
        &forge_dir,
        &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
    );
    let work = dir.path().join("w");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(
        work.join(".woodpecker.yaml"),
        format!(
            "services:\n  db:\n    image: {BUSYBOX}\n    commands: [sleep 600]\nsteps:\n  slow:\n    image: {BUSYBOX}\n    commands: [echo started, sleep 600]\n"
        ),
    )
    .unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "slow"]);
    git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
    let id = http
        .post(
            &format!("/api/repos?forge_remote_id=alice/app&forge_id={forge}"),
            Some(&alice),
            "",
        )
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    http.post(&format!("/api/repos/{id}/pipelines"), Some(&alice), "{}")
        .await
        .expect(200);
    let owner = owner_of(dir.path());
    let _cleanup = EngineCleanup(owner.clone());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (containers, networks, volumes) = objects_of(&owner);
        if containers >= 2 && networks == 1 && volumes == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pipeline never got its containers: {:?}",
            objects_of(&owner)
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let before = owned(&owner);
    drop(server); // SIGKILL: the containers outlive the server
    assert!(objects_of(&owner).0 >= 2);

    // The next start sweeps them (the pool's networks too) before taking work.
    let server = Process::start(&config);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        // The re-queued workflow may run again; what must not remain is the old run's.
        let now = owned(&owner);
        let remaining: Vec<&String> = now
            .containers
            .intersection(&before.containers)
            .chain(now.networks.intersection(&before.networks))
            .chain(now.volumes.intersection(&before.volumes))
            .collect();
        if remaining.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "objects of the killed run remain: {remaining:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // Cancel the re-run and stop: nothing is left at all.
    let http = Http::new(server.addr);
    let _ = http
        .post(
            &format!("/api/repos/{id}/pipelines/1/cancel"),
            Some(&alice),
            "",
        )
        .await;
    wait_for(&http, &alice, id, 1, 60, finished).await;
    assert_none_left(&owner).await;
    // A graceful stop removes the rest, the pool's idle networks included.
    let mut server = server;
    server.terminate(std::time::Duration::from_secs(30));
    let left = owned(&owner);
    assert!(
        left.containers.is_empty() && left.networks.is_empty() && left.volumes.is_empty(),
        "after SIGTERM: {left:?}\n{}",
        server.stderr()
    );
}

/// Debian's `docker-registry` on a free port with htpasswd auth (user `ci`, `ci-pass-1`),
/// holding `<addr>/private/busybox:1`. Killed on drop.
struct Registry {
    child: std::process::Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn private_registry() -> Registry {
    ensure_images();
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("localhost:{port}");
    let htpasswd = dir.path().join("htpasswd");
    let out = Command::new("htpasswd")
        .args(["-Bbn", "ci", "ci-pass-1"])
        .output()
        .expect("htpasswd (bash .ci/test installs apache2-utils)");
    std::fs::write(&htpasswd, &out.stdout).unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\nauth:\n  htpasswd:\n    realm: woodlark-test\n    path: {}\n",
            dir.path().join("data").display(),
            htpasswd.display()
        ),
    )
    .unwrap();
    let binary = ["/usr/bin/docker-registry", "/usr/bin/registry"]
        .into_iter()
        .find(|b| Path::new(b).exists())
        .expect("docker-registry is not installed (bash .ci/test installs it)");
    let child = Command::new(binary)
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the registry did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let registry = Registry {
        child,
        addr: addr.clone(),
        _dir: dir,
    };
    // Push the image with a throw-away client config, then forget it locally so that the
    // runner has to pull it with the credentials under test.
    let client_config = tempfile::tempdir().unwrap();
    let cfg = client_config.path().to_str().unwrap();
    let image = format!("{addr}/private/busybox:1");
    docker(&["tag", BUSYBOX, &image]);
    let login = Command::new("docker")
        .args([
            "--config",
            cfg,
            "login",
            &addr,
            "-u",
            "ci",
            "--password-stdin",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"ci-pass-1")?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(
        login.status.success(),
        "{}",
        String::from_utf8_lossy(&login.stderr)
    );
    docker(&["--config", cfg, "push", &image]);
    docker(&["rmi", &image]);
    registry
}

fn private_step(addr: &str) -> String {
    format!(
        "steps:\n  private:\n    image: {addr}/private/busybox:1\n    commands: [echo pulled-and-ran]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_images_are_pulled_with_api_registries_and_wrong_ones_fail_clearly() {
    let registry = private_registry();
    let s = docker_server().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();

    // Wrong password first: the step fails and says why.
    s.http
        .post(
            &format!("/api/repos/{id}/registries"),
            Some(&p.alice),
            &serde_json::json!({"address": registry.addr, "username": "ci", "password": "wrong"})
                .to_string(),
        )
        .await
        .expect(200);
    push_files(
        &s,
        "alice/app",
        &[(".woodpecker.yaml", &private_step(&registry.addr))],
        "private",
    )
    .await;
    let done = wait_for(&s.http, &p.alice, id, 1, 120, finished).await;
    assert_eq!(done["status"], "failure", "{done:#}");
    let step = step_of(&done, "private");
    let error = step["error"].as_str().unwrap();
    assert!(
        error.contains("cannot pull image") && error.contains("private/busybox"),
        "{error}"
    );
    assert!(
        !done.to_string().contains("wrong\""),
        "no password in the answer"
    );

    // The right password: the image is pulled and the step runs.
    s.http
        .patch(
            &format!(
                "/api/repos/{id}/registries/{}",
                registry.addr.replace(':', "%3A")
            ),
            Some(&p.alice),
            &serde_json::json!({"address": registry.addr, "username": "ci", "password": "ci-pass-1"})
                .to_string(),
        )
        .await
        .expect(200);
    s.http
        .post(&format!("/api/repos/{id}/pipelines"), Some(&p.alice), "{}")
        .await
        .expect(200);
    let done = wait_for(&s.http, &p.alice, id, 2, 120, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
    let lines = log_text(
        &s.http,
        &p.alice,
        id,
        2,
        step_of(&done, "private")["id"].as_i64().unwrap(),
    )
    .await;
    assert!(lines.contains(&"pulled-and-ran".to_string()), "{lines:?}");
    let _ = docker(&["rmi", &format!("{}/private/busybox:1", registry.addr)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_images_are_pulled_with_logins_from_the_registry_static_plugin() {
    let registry = private_registry();
    ensure_images();
    let dist = crate::util::first_party_plugins();
    let dir = tempfile::tempdir().unwrap();
    let host = registry.addr.clone();
    let tables = format!(
        "{}\n#plugins\n[plugins]\ndir = {:?}\nwatch = false\n\n[plugins.instances.regstatic]\nfile = \"registry-static.wasm\"\nconfig = {{ \"registry.{host}\" = \"ci:ci-pass-1\" }}\n\n[pipeline]\nregistry_auth = [\"regstatic\"]\n",
        docker_runner(dir.path()),
        dist.display().to_string()
    );
    let s = TestServer::start_in_with_tables(dir, "", &tables).await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    push_files(
        &s,
        "alice/app",
        &[(".woodpecker.yaml", &private_step(&registry.addr))],
        "private",
    )
    .await;
    let done = wait_for(&s.http, &p.alice, id, 1, 120, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
    let _: Value = done;
    let _ = docker(&["rmi", &format!("{}/private/busybox:1", registry.addr)]);
}

/// A docker-backend server with `runner` lines added to its `[runner]` table.
async fn docker_server_with(runner: &str) -> DockerServer {
    ensure_images();
    let dir = tempfile::tempdir().unwrap();
    let tables = format!("{}{runner}\n", docker_runner(dir.path()));
    let cleanup = EngineCleanup(owner_of(dir.path()));
    DockerServer {
        server: TestServer::start_in_with_tables(dir, "", &tables).await,
        _cleanup: cleanup,
    }
}

/// A command that prints a container's own limits as `memory=`, `pids=` and `cpu=` (the CFS
/// quota per 100 ms period), on cgroup v2 and v1 engines.
const LIMITS: &str = "if [ -f /sys/fs/cgroup/memory.max ]; then echo memory=$(cat /sys/fs/cgroup/memory.max) pids=$(cat /sys/fs/cgroup/pids.max) cpu=$(cut -d' ' -f1 /sys/fs/cgroup/cpu.max); else echo memory=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes) pids=$(cat /sys/fs/cgroup/pids/pids.max) cpu=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us); fi | tr ' ' '\\n'";

/// The capability bits of a `CapBnd:` line of /proc/self/status.
fn bounding_set(status_line: &str) -> u64 {
    let hex = status_line.trim_start_matches("CapBnd:").trim();
    u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("{status_line:?}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clone_runs_in_a_container_and_run_variables_reach_only_command_steps() {
    let s = docker_server_with("memory_mb = 256\npids = 300\ncpus = 0.5").await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let config = format!(
        r#"steps:
  publish:
    image: {PLUGIN}
    settings:
      greeting: hello-plugin
  build:
    image: {BUSYBOX}
    commands:
      - echo "note=$${{DEPLOY_NOTE}} path=$${{PATH}}"
      - test -d .git && cat README.md
      - {LIMITS}
      - grep -E '^(NoNewPrivs|CapBnd)' /proc/self/status
"#
    );
    push_files(&s, "alice/app", &[(".woodpecker.yaml", &config)], "ci").await;
    wait_for(&s.http, &p.alice, id, 1, 120, finished).await;
    let mut variables = crate::sandbox::git_config_attack();
    variables["PLUGIN_GREETING"] = "overridden-by-the-run".into();
    variables["PATH"] = "/workspace-tools".into();
    let body = serde_json::json!({"branch": "main", "variables": variables}).to_string();
    let done = run_manually(&s.http, &p.alice, id, &body, 120).await;
    let n = done["number"].as_i64().unwrap();
    let log = |name: &str| {
        let step_id = step_of(&done, name)["id"].as_i64().unwrap();
        let http = &s.http;
        let token = p.alice.clone();
        async move { log_text(http, &token, id, n, step_id).await }
    };
    assert_eq!(done["status"], "success", "{done:#}");
    let clone = log("clone").await.join("\n");
    for marker in ["FSMONITOR-RAN", "PARAMETERS-RAN", "SSH-RAN"] {
        assert!(
            !clone.contains(marker),
            "the clone obeyed {marker}: {clone}"
        );
    }
    // Nothing was checked out on the runner's host: the clone wrote into the volume.
    let runs = s.dir.path().join("runs");
    let host_checkouts = std::fs::read_dir(&runs)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().join("workspace/.git").exists())
                .count()
        })
        .unwrap_or(0);
    assert_eq!(
        host_checkouts,
        0,
        "a clone landed on the host under {}",
        runs.display()
    );
    // The plugin keeps its own settings and environment.
    let publish = log("publish").await;
    assert!(
        publish.contains(&"plugin sees hello-plugin in /woodpecker/src".to_string()),
        "{publish:?}"
    );
    // The author's own commands get the run's variables, under the limits and hardened.
    let build = log("build").await;
    assert!(
        build.contains(&"note=from-the-run path=/workspace-tools".to_string()),
        "{build:?}"
    );
    assert!(
        build.contains(&"hello".to_string()),
        "the workspace holds the clone: {build:?}"
    );
    for limit in ["memory=268435456", "pids=300", "cpu=50000"] {
        assert!(
            build.contains(&limit.to_string()),
            "{limit} missing: {build:?}"
        );
    }
    assert!(build.contains(&"NoNewPrivs:\t1".to_string()), "{build:?}");
    let caps = bounding_set(build.iter().find(|l| l.starts_with("CapBnd:")).unwrap());
    for (name, bit) in [
        ("NET_RAW", 13),
        ("MKNOD", 27),
        ("AUDIT_WRITE", 29),
        ("SETFCAP", 31),
    ] {
        assert_eq!(caps & (1 << bit), 0, "{name} kept: {caps:x}");
    }
    assert_ne!(
        caps & (1 << 7),
        0,
        "SETUID stays (package managers need it): {caps:x}"
    );

    // A repository trusted for security runs without the hardening.
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.admin),
            r#"{"trusted": {"security": true}}"#,
        )
        .await
        .expect(200);
    let done = run_manually(&s.http, &p.alice, id, r#"{"branch":"main"}"#, 120).await;
    let n = done["number"].as_i64().unwrap();
    let build = log_text(
        &s.http,
        &p.alice,
        id,
        n,
        step_of(&done, "build")["id"].as_i64().unwrap(),
    )
    .await;
    assert!(build.contains(&"NoNewPrivs:\t0".to_string()), "{build:?}");
    assert_none_left(&owner_of(s.dir.path())).await;
}

/// Owner labels of `woodlark exec` runs that still have objects in the engine.
fn exec_leftovers() -> Vec<String> {
    let format = "{{.Label \"io.woodlark.owner\"}}";
    let mut owners: Vec<String> = [
        vec!["ps", "-a", "--format", format],
        vec!["network", "ls", "--format", format],
        vec!["volume", "ls", "--format", format],
    ]
    .iter()
    .flat_map(|args| {
        docker(args)
            .lines()
            .filter(|l| l.starts_with("exec-"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    })
    .collect();
    owners.dedup();
    owners
}

/// `woodlark exec` on Docker: the checkout is the workspace of every container (a file not
/// committed is seen, a file written is kept), a service answers on the workflow's network
/// by its name, secrets are masked; a failing step is exit status 1; Ctrl-C kills a running
/// pipeline; nothing of the runs stays in the engine.
#[test]
fn exec_runs_the_checkout_in_containers_and_stops_on_ctrl_c() {
    ensure_images();
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    let config = format!(
        "services:\n  web:\n    image: {BUSYBOX}\n    commands: [\"mkdir -p /srv && echo pong > /srv/ping && httpd -f -p 8080 -h /srv\"]\nsteps:\n  use:\n    image: {BUSYBOX}\n    environment:\n      TOKEN:\n        from_secret: token\n    commands:\n      - cat notes.txt\n      - echo \"token $TOKEN\"\n      - for i in 1 2 3 4 5 6 7 8 9 10; do wget -qO- http://web:8080/ping && break; sleep 0.5; done\n      - echo written > out.txt\n      - test -z \"$FAIL\"\n"
    );
    std::fs::write(dir.path().join(".woodpecker.yaml"), config).unwrap();
    git(dir.path(), &["add", "."]);
    git(dir.path(), &["commit", "-q", "-m", "ci"]);
    std::fs::write(dir.path().join("notes.txt"), "from the checkout\n").unwrap();
    let exec = |extra: &[&str]| {
        let args = [&["exec", "--secret", "token=t0k-5ecret-42"], extra].concat();
        woodlark_in(dir.path(), &args)
    };
    let out = exec(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for want in [
        "[use:L1:0s] from the checkout",
        "token ********",
        "pong",
        "[use] success (exit code 0)",
        "[web] success",
    ] {
        assert!(stdout.contains(want), "{want:?} not in:\n{stdout}");
    }
    assert!(!stdout.contains("t0k-5ecret-42"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "written\n"
    );
    let out = exec(&["--env", "FAIL=1"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("[use] failure (exit code 1)"));
    assert_eq!(exec_leftovers(), Vec::<String>::new());

    // Ctrl-C while a step and a service run.
    std::fs::write(
        dir.path().join(".woodpecker.yaml"),
        format!(
            "services:\n  db:\n    image: {BUSYBOX}\n    commands: [sleep 600]\nsteps:\n  slow:\n    image: {BUSYBOX}\n    commands: [echo started, sleep 600]\n"
        ),
    )
    .unwrap();
    let log = dir.path().join("exec.log");
    let mut child = Command::new(BIN)
        .arg("exec")
        .current_dir(dir.path())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(&log).unwrap().contains("[slow:L1") {
        assert!(std::time::Instant::now() < deadline, "never started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "exec did not stop");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the pipeline ended: killed"), "{stderr}");
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("[slow] killed")
    );
    assert_eq!(exec_leftovers(), Vec::<String>::new());
}

/// Steps that do not depend on each other run at the same time; a step after them waits for
/// all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_steps_run_at_the_same_time() {
    let s = docker_server().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let mut config = "skip_clone: true\nsteps:\n".to_string();
    for name in ["a", "b", "c"] {
        config.push_str(&format!(
            "  {name}:\n    image: {BUSYBOX}\n    commands: [sleep 3]\n    depends_on: []\n"
        ));
    }
    config.push_str(&format!(
        "  after:\n    image: {BUSYBOX}\n    commands: [echo done]\n    depends_on: [a, b, c]\n"
    ));
    push_files(&s, "alice/app", &[(".woodpecker.yaml", &config)], "ci").await;
    let done = wait_for(&s.http, &p.alice, id, 1, 90, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
    let times = |name: &str| {
        let step = step_of(&done, name);
        (
            step["started"].as_i64().unwrap(),
            step["finished"].as_i64().unwrap(),
        )
    };
    let three = [times("a"), times("b"), times("c")];
    let last_start = three.iter().map(|t| t.0).max().unwrap();
    let first_end = three.iter().map(|t| t.1).min().unwrap();
    // In a row they would take 9 s; together, each started before any ended.
    assert!(last_start < first_end, "not in parallel: {three:?}");
    let last_end = three.iter().map(|t| t.1).max().unwrap();
    assert!(times("after").0 >= last_end, "{done:#}");
}

/// A service's log reaches a client of `/api/stream/logs` while the service runs (not only
/// once the workflow ended), and the stream ends when the workflow stops the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_services_log_streams_live() {
    let s = docker_server().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let config = format!(
        "skip_clone: true\nservices:\n  db:\n    image: {BUSYBOX}\n    commands: [\"for i in 1 2 3 4 5 6 7 8; do echo serving $$i; sleep 1; done; sleep 600\"]\nsteps:\n  work:\n    image: {BUSYBOX}\n    commands: [sleep 12]\n"
    );
    push_files(&s, "alice/app", &[(".woodpecker.yaml", &config)], "ci").await;
    let running = wait_for(&s.http, &p.alice, id, 1, 60, |p| {
        p["workflows"].as_array().is_some_and(|w| !w.is_empty())
            && step_of(p, "db")["state"] == "running"
    })
    .await;
    let step_id = step_of(&running, "db")["id"].as_i64().unwrap();
    let path = format!("/api/stream/logs/{id}/1/{step_id}");
    let (status, _, mut live) =
        crate::streams::Sse::open(s.http.addr, &path, Some(&p.alice), &[]).await;
    assert_eq!(status, 200);
    let mut serving = Vec::new();
    loop {
        let ev = live
            .next(std::time::Duration::from_secs(30))
            .await
            .expect("stream ended early");
        if ev.name == "eof" {
            break;
        }
        let entry: Value = serde_json::from_str(&ev.data).unwrap();
        let text = crate::streams::entry_text(&entry);
        if let Some(n) = text.strip_prefix("serving ") {
            // Seen while the pipeline still runs: live, not replayed after the end.
            let pipeline = format!("/api/repos/{id}/pipelines/1");
            let now = s
                .http
                .get(&pipeline, Some(&p.alice))
                .await
                .expect(200)
                .json();
            let status = now["status"].clone();
            serving.push((n.trim().parse::<i64>().unwrap(), status));
        }
    }
    let numbers: Vec<i64> = serving.iter().map(|(n, _)| *n).collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert!(
        serving.iter().all(|(_, status)| status == "running"),
        "{serving:?}"
    );
    let done = wait_for(&s.http, &p.alice, id, 1, 60, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
}

/// Services and `detach` steps on the engine: running until the workflow ends, their logs
/// kept, a detached step's own failure shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_and_detached_steps_run_beside_the_workflow() {
    let s = docker_server().await;
    crate::pipelines::services_and_detached_steps(&s, BUSYBOX).await;
}
