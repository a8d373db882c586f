//! The docker backend: every step runs in a container of its `image`, on the Docker Engine
//! API (the unix socket, or wherever `DOCKER_HOST` points), through bollard.
//!
//! Per workflow the backend takes a bridge **network** of its own and creates a **volume**
//! named `wl_<workflow>_<random>`; both are labelled with the runner's owner key
//! ([`LABEL_OWNER`]), the volume also with the workflow ([`LABEL_WORKFLOW`]):
//! - creating and removing a bridge network costs the engine ~300 ms (iptables, a bridge
//!   device), as much as the whole `docker run` of a small step, so networks come from a small
//!   pool ([`LABEL_POOL`]): a workflow takes an idle one (or creates one), and once every
//!   container of the workflow is removed an empty network goes back to the pool, up to
//!   [`IDLE_NETWORKS`]; a network is never shared by two workflows at once;
//! - the volume is the workspace, mounted at [`WORKSPACE`] in every step; the clone step is
//!   a container too, of the operator's clone image ([`Settings::clone_image`], by default
//!   the small git image `.ci/clone-image` builds), speaking upstream's clone-plugin protocol
//!   (`CI_REPO_CLONE_URL`, `CI_COMMIT_SHA`, `CI_NETRC_*`, `PLUGIN_*`) and given nothing else:
//!   nothing a pipeline's author or a person starting a run controls runs on the host;
//! - steps and services are containers named `<key>_<step>` on the network, reachable by their
//!   step name (a network alias); `commands` become a shell script (`/bin/sh -c`), plugin
//!   steps run the image's own entrypoint with `settings:` as `PLUGIN_*` variables;
//! - images are pulled when missing (always with `pull: true`), with the step's registry
//!   login as `X-Registry-Auth`;
//! - every container (steps, services, the clone) runs under the operator's [`Limits`]
//!   (memory without extra swap, processes, CPUs); a hardened step (any step of a repository
//!   not trusted for security, and the clone) also runs with `no-new-privileges` and without
//!   [`DROPPED_CAPABILITIES`];
//! - output is the container's log stream, consumed by the runtime as a stream of chunks;
//!   the runner cuts and masks it as it does a host process's ([`crate::lines`]).
//!
//! Everything a workflow created is removed when it ends (success, failure, cancel, error),
//! and after a crash of the server or agent [`Backend::sweep`] removes whatever carries this
//! runner's owner label before new work starts: nothing of ours can still be running then.
//! Both go through one removal by labels ([`Docker::remove_labelled`]).
//!
//! Calls that create or remove an object run in a task of their own ([`Docker::settled`]):
//! a stopping runner aborts its workflows mid-call, and a request the engine already took
//! would otherwise finish after the sweep that was meant to remove what it makes (a network
//! created, or a container still attached while its network was removed). The sweep first
//! waits for those calls.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use base64::Engine;
use bollard::auth::DockerCredentials;
use bollard::models::{
    ContainerCreateBody, DeviceMapping, EndpointSettings, HostConfig, Mount, MountType,
    NetworkCreateRequest, NetworkingConfig, VolumeCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, ListContainersOptions, ListNetworksOptions,
    ListVolumesOptions, LogsOptions, RemoveContainerOptions, RemoveVolumeOptions,
};
use futures_util::StreamExt;

use crate::backend::{
    Backend, BackendError, BackendKind, CloneSource, Exit, Started, StepHandle, Swept, Workflow,
    WorkflowSetup,
};
use crate::process;
use woodlark_pipeline::registry::{normalize, registry_of};
use woodlark_pipeline::types::{CompiledStep, StepKind};

/// Label naming the runner that created an object (what [`Docker::sweep`] removes).
pub const LABEL_OWNER: &str = "io.woodlark.owner";
/// Label marking a network of the runner's pool (not tied to one workflow).
pub const LABEL_POOL: &str = "io.woodlark.pool";
/// How many empty networks a runner keeps for the next workflows.
pub const IDLE_NETWORKS: usize = 2;
/// Label naming the workflow an object belongs to.
pub const LABEL_WORKFLOW: &str = "io.woodlark.workflow";
/// Label naming the run of a workflow an object belongs to (its key, `wl_<workflow>_<random>`):
/// what removing one run's objects goes by, so a second run of the workflow keeps its own.
pub const LABEL_RUN: &str = "io.woodlark.run";
/// Where the workspace volume is mounted in every step (`CI_WORKSPACE`).
pub const WORKSPACE: &str = "/woodpecker/src";
/// The clone image `.ci/clone-image` builds. `localhost/` keeps the engine from ever pulling a
/// look-alike from a public registry when the image is missing.
pub const DEFAULT_CLONE_IMAGE: &str = "localhost/woodlark/clone:1";
/// Capabilities of Docker's default set a hardened step does without: raw sockets (forged
/// packets on the host's bridges), device nodes, audit records, file capabilities and
/// capability changes. `CHOWN`, `SETUID`/`SETGID` and friends stay: package managers need them.
pub const DROPPED_CAPABILITIES: &[&str] =
    &["NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP", "SETPCAP"];

/// What the docker backend takes of a runner's [`crate::BackendOptions`]: what applies to
/// every container.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The image the clone step runs.
    pub clone_image: String,
    pub limits: Limits,
}

impl From<&crate::BackendOptions> for Settings {
    fn from(options: &crate::BackendOptions) -> Settings {
        Settings {
            clone_image: options.clone_image.clone(),
            limits: options.limits,
        }
    }
}

pub use crate::backend::Limits;

/// A connection to a Docker engine, for one runner.
#[derive(Clone)]
pub struct Docker {
    client: bollard::Docker,
    /// The runner's owner key: stable across restarts of the same server or agent.
    owner: String,
    /// The clone image and limits, with the CPU limit resolved against the engine.
    settings: Arc<Settings>,
    /// Empty networks ready for the next workflow (names).
    idle_networks: Arc<std::sync::Mutex<Vec<String>>>,
    /// Held (shared) by every create or remove call in flight; the sweep takes it
    /// exclusively to wait for them.
    in_flight: Arc<tokio::sync::RwLock<()>>,
}

impl std::fmt::Debug for Docker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Docker")
            .field("owner", &self.owner)
            .finish()
    }
}

/// The network and volume of one workflow.
#[derive(Debug, Clone)]
pub struct WorkflowResources {
    /// `wl_<workflow>_<random>`: the name of the volume and the prefix of container names.
    pub key: String,
    /// The workflow's network (from the pool), where steps reach each other by name.
    pub network: String,
    pub workflow_id: i64,
    /// A host directory mounted as the workspace instead of the volume (`woodlark exec`).
    pub host_workspace: Option<String>,
}

/// Eight lowercase alphanumerics: keeps names of two runs of one workflow apart.
fn random_suffix() -> String {
    woodlark_stdx::random_secret()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(8)
        .collect::<String>()
        .to_lowercase()
}

impl Docker {
    /// Connects to the engine (`DOCKER_HOST`, else the local socket), agrees on an API
    /// version and checks that it answers; a zero CPU limit becomes the engine's CPUs but one.
    pub async fn connect(options: &crate::BackendOptions) -> Result<Docker, BackendError> {
        let client = bollard::Docker::connect_with_defaults()
            .map_err(BackendError::docker("cannot connect"))?;
        let client = client
            .with_timeout(std::time::Duration::from_secs(600))
            .negotiate_version()
            .await
            .map_err(BackendError::docker("the engine does not answer"))?;
        client
            .ping()
            .await
            .map_err(BackendError::docker("the engine does not answer"))?;
        let mut settings = Settings::from(options);
        if settings.limits.cpus <= 0.0 {
            let cpus = client.info().await.ok().and_then(|i| i.ncpu).unwrap_or(1);
            settings.limits.cpus = default_cpus(cpus);
        }
        Ok(Docker {
            client,
            owner: options.owner.clone(),
            settings: Arc::new(settings),
            idle_networks: Arc::default(),
            in_flight: Arc::default(),
        })
    }

    /// The settings in force (the CPU limit resolved).
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Warns when the clone image is missing and cannot be pulled by name alone (the
    /// default one is built locally, never pulled).
    pub async fn check_clone_image(&self) {
        let image = &self.settings.clone_image;
        if self.client.inspect_image(image).await.is_err() {
            tracing::warn!(
                image,
                "the clone image is missing: clones will fail until it exists (bash \
                 .ci/clone-image builds the default one; runner.clone_image names another)"
            );
        }
    }

    /// The labels of a run's containers and volume.
    fn labels(&self, res: &WorkflowResources) -> HashMap<String, String> {
        HashMap::from([
            (LABEL_OWNER.to_string(), self.owner.clone()),
            (LABEL_WORKFLOW.to_string(), res.workflow_id.to_string()),
            (LABEL_RUN.to_string(), res.key.clone()),
        ])
    }

    /// A filter for this runner's objects, and of them only one run's if `run` is given.
    fn filter(&self, run: Option<&str>) -> HashMap<String, Vec<String>> {
        let mut labels = vec![format!("{LABEL_OWNER}={}", self.owner)];
        labels.extend(run.map(|key| format!("{LABEL_RUN}={key}")));
        HashMap::from([("label".to_string(), labels)])
    }

    /// Removes the containers, then the networks, then the volumes that match `filter`.
    /// Objects that cannot be removed (yet) are counted in the second value.
    async fn remove_labelled(
        &self,
        filter: HashMap<String, Vec<String>>,
    ) -> Result<(Swept, usize), BackendError> {
        let mut swept = Swept::default();
        let mut left = 0;
        let containers = self
            .client
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filter.clone()),
                ..Default::default()
            }))
            .await
            .map_err(BackendError::docker("cannot list containers"))?;
        for id in containers.into_iter().filter_map(|c| c.id) {
            match self.remove_container(&id).await {
                true => swept.count("containers"),
                false => left += 1,
            }
        }
        let networks = self
            .client
            .list_networks(Some(ListNetworksOptions {
                filters: Some(filter.clone()),
            }))
            .await
            .map_err(BackendError::docker("cannot list networks"))?;
        for name in networks.into_iter().filter_map(|n| n.name) {
            match self.remove_network(name).await {
                true => swept.count("networks"),
                false => left += 1,
            }
        }
        let volumes = self
            .client
            .list_volumes(Some(ListVolumesOptions {
                filters: Some(filter),
            }))
            .await
            .map_err(BackendError::docker("cannot list volumes"))?;
        for v in volumes.volumes.unwrap_or_default() {
            let removed = self
                .settled(move |client| async move {
                    client
                        .remove_volume(&v.name, Some(RemoveVolumeOptions { force: true }))
                        .await
                })
                .await;
            match gone(removed) {
                true => swept.count("volumes"),
                false => left += 1,
            }
        }
        Ok((swept, left))
    }

    /// Runs an engine call that creates or removes something to its end in a task of its
    /// own, even if the caller is dropped meanwhile; [`Backend::sweep`] waits for such calls.
    async fn settled<T, F>(&self, call: impl FnOnce(bollard::Docker) -> F) -> T
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let guard = self.in_flight.clone().read_owned().await;
        let call = call(self.client.clone());
        let task = tokio::spawn(async move {
            let out = call.await;
            drop(guard);
            out
        });
        match task.await {
            Ok(out) => out,
            // Nothing aborts the task: only a panic of the engine client ends it early.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// Removes a container, stopping it first; `true` when it is gone.
    async fn remove_container(&self, id: &str) -> bool {
        let id = id.to_string();
        let removed = self
            .settled(move |client| async move {
                let options = RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                };
                client.remove_container(&id, Some(options)).await
            })
            .await;
        gone(removed)
    }

    /// Removes a network; `true` when it is gone.
    async fn remove_network(&self, name: String) -> bool {
        gone(
            self.settled(move |client| async move { client.remove_network(&name).await })
                .await,
        )
    }

    /// Creates the workflow's network and workspace volume (no volume for a workspace on
    /// the host).
    pub async fn create_resources(
        &self,
        workflow_id: i64,
        host_workspace: Option<&std::path::Path>,
    ) -> Result<WorkflowResources, BackendError> {
        let key = format!("wl_{workflow_id}_{}", random_suffix());
        let network = self.take_network().await?;
        let resources = WorkflowResources {
            key,
            network,
            workflow_id,
            host_workspace: host_workspace.map(|p| p.display().to_string()),
        };
        if resources.host_workspace.is_some() {
            return Ok(resources);
        }
        let request = VolumeCreateRequest {
            name: Some(resources.key.clone()),
            labels: Some(self.labels(&resources)),
            ..Default::default()
        };
        let volume = self
            .settled(move |client| async move { client.create_volume(request).await })
            .await;
        if let Err(e) = volume {
            if let Err(left) = self.remove_workflow(&resources).await {
                tracing::warn!(error = %left, key = resources.key, "could not clean a failed workflow up");
            }
            return Err(BackendError::docker("cannot create the workspace volume")(
                e,
            ));
        }
        Ok(resources)
    }

    /// An empty network for a workflow: an idle one of the pool, else a new one.
    async fn take_network(&self) -> Result<String, BackendError> {
        let idle = self
            .idle_networks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        if let Some(name) = idle {
            return Ok(name);
        }
        let name = format!("wl_net_{}", random_suffix());
        let labels = HashMap::from([
            (LABEL_OWNER.to_string(), self.owner.clone()),
            (LABEL_POOL.to_string(), "network".to_string()),
        ]);
        let request = NetworkCreateRequest {
            name: name.clone(),
            driver: Some("bridge".into()),
            labels: Some(labels),
            ..Default::default()
        };
        self.settled(move |client| async move { client.create_network(request).await })
            .await
            .map_err(BackendError::docker("cannot create the workflow's network"))?;
        Ok(name)
    }

    /// Returns a workflow's network to the pool when nothing is attached to it any more and
    /// the pool has room. `false`: the caller removes it.
    async fn give_back_network(&self, name: &str) -> bool {
        let empty = match self.client.inspect_network(name, None).await {
            Ok(n) => n.containers.is_none_or(|c| c.is_empty()),
            Err(_) => false,
        };
        if !empty {
            return false;
        }
        let mut idle = self.idle_networks.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() >= IDLE_NETWORKS {
            return false;
        }
        idle.push(name.to_string());
        true
    }

    /// Removes the run's containers and volume, and gives its network back to the pool
    /// (or removes it). A container being removed concurrently (a killed step) still holds
    /// the network and the volume for a moment: retried briefly before the rest is left to
    /// the sweep.
    pub async fn remove_workflow(&self, res: &WorkflowResources) -> Result<(), BackendError> {
        let filter = self.filter(Some(&res.key));
        let mut labelled = self.remove_labelled(filter.clone()).await;
        let mut network = self.give_back_network(&res.network).await;
        for attempt in 0..10 {
            if !network {
                network = self.remove_network(res.network.clone()).await;
            }
            if !matches!(labelled, Ok((_, 0))) {
                labelled = self.remove_labelled(filter.clone()).await;
            }
            let objects = match &labelled {
                Ok((_, 0)) => None,
                Ok((_, left)) => Some(format!("{left} container(s) or volume(s)")),
                Err(e) => Some(e.to_string()),
            };
            match (network, objects) {
                (true, None) => return Ok(()),
                (network, objects) if attempt == 9 => {
                    let mut what = Vec::new();
                    if !network {
                        what.push(format!("network {}", res.network));
                    }
                    what.extend(objects.map(|o| format!("{o} of {}", res.key)));
                    return Err(BackendError::Leftover(what.join(" and ")));
                }
                _ => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
            }
        }
        Ok(())
    }

    /// Pulls `step`'s image if it is missing, or always with `pull: true`.
    pub async fn ensure_image(&self, step: &CompiledStep) -> Result<(), BackendError> {
        let image = step.image.trim();
        if image.is_empty() {
            return Err(BackendError::NoImage(step.name.clone()));
        }
        if !step.pull && self.client.inspect_image(image).await.is_ok() {
            return Ok(());
        }
        let credentials = pull_credentials(step);
        let mut progress = self.client.create_image(
            Some(CreateImageOptions {
                from_image: Some(image.to_string()),
                tag: if has_tag_or_digest(image) {
                    None
                } else {
                    Some("latest".into())
                },
                ..Default::default()
            }),
            None,
            credentials,
        );
        while let Some(item) = progress.next().await {
            if let Err(e) = item {
                return Err(BackendError::Pull {
                    image: image.to_string(),
                    reason: pull_error(&e),
                    hint: "",
                });
            }
        }
        Ok(())
    }

    /// Creates and starts the container of `step`.
    pub async fn start(
        &self,
        res: &WorkflowResources,
        step: &CompiledStep,
    ) -> Result<Started, BackendError> {
        self.ensure_image(step).await?;
        // The compiler's environment plus the workspace path; image, network and the
        // trusted options are the backend's.
        let body = container_body(
            res,
            step,
            &step.environment,
            self.labels(res),
            &self.settings.limits,
        );
        self.run_container(res, step, body).await
    }

    /// Creates and starts the clone step's container: the clone image with only the clone's
    /// own environment, and the local repository it clones from (a `file://` URL) read-only.
    pub async fn start_clone(
        &self,
        res: &WorkflowResources,
        step: &CompiledStep,
        source: &CloneSource,
    ) -> Result<Started, BackendError> {
        source.checked_commit()?;
        let mut step = step.clone();
        step.image = self.settings.clone_image.clone();
        step.hardened = true;
        self.ensure_image(&step).await.map_err(|e| match e {
            BackendError::Pull { image, reason, .. } if image == DEFAULT_CLONE_IMAGE => {
                BackendError::Pull {
                    image,
                    reason,
                    hint: " (build it on the engine's host with `bash .ci/clone-image`)",
                }
            }
            other => other,
        })?;
        let body = clone_body(res, &step, source, self.labels(res), &self.settings.limits);
        self.run_container(res, &step, body).await
    }

    /// Creates and starts a container; its output is the container's log stream.
    async fn run_container(
        &self,
        res: &WorkflowResources,
        step: &CompiledStep,
        body: ContainerCreateBody,
    ) -> Result<Started, BackendError> {
        let options = CreateContainerOptions {
            name: Some(container_name(res, &step.name)),
            ..Default::default()
        };
        // Created and started in one settled call: a container created by a dropped caller
        // must not start after the sweep looked.
        let started = self
            .settled(move |client| async move {
                let id = client.create_container(Some(options), body).await?.id;
                let start = client.start_container(&id, None).await;
                Ok::<_, bollard::errors::Error>((id, start))
            })
            .await
            .map_err(BackendError::docker(format!(
                "cannot create the container of {:?}",
                step.name
            )))?;
        let id = match started {
            (id, Ok(())) => id,
            (id, Err(e)) => {
                self.remove_container(&id).await;
                return Err(BackendError::docker(format!(
                    "cannot start {:?}",
                    step.name
                ))(e));
            }
        };
        let output = self
            .client
            .logs(
                &id,
                Some(LogsOptions {
                    follow: true,
                    stdout: true,
                    stderr: true,
                    ..Default::default()
                }),
            )
            .take_while(|chunk| std::future::ready(chunk.is_ok()))
            .filter_map(|chunk| std::future::ready(chunk.ok().map(|c| c.into_bytes())))
            .boxed();
        Ok(Started {
            handle: Box::new(Container {
                docker: self.clone(),
                id,
                killed: Arc::new(AtomicBool::new(false)),
            }),
            output,
        })
    }
}

#[async_trait]
impl Backend for Docker {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    async fn create_workflow(
        &self,
        setup: &WorkflowSetup,
    ) -> Result<Box<dyn Workflow>, BackendError> {
        let resources = self
            .create_resources(setup.workflow_id, setup.host_workspace.as_deref())
            .await?;
        Ok(Box::new(DockerWorkflow {
            docker: self.clone(),
            resources,
            clone: setup.clone.clone(),
        }))
    }

    /// Removes every container, network and volume carrying this runner's owner label, the
    /// pool's idle networks included.
    async fn sweep(&self) -> Result<Swept, BackendError> {
        self.idle_networks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        // Calls of aborted workflows end first: what they create is then there to be seen.
        drop(self.in_flight.write().await);
        // A container being removed concurrently holds its network and volume for a moment.
        let mut total = Swept::default();
        for attempt in 0.. {
            let (swept, left) = self.remove_labelled(self.filter(None)).await?;
            total.add(&swept);
            if left == 0 {
                break;
            }
            if attempt == 9 {
                tracing::warn!(
                    left,
                    owner = self.owner,
                    "the sweep could not remove everything"
                );
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        Ok(total)
    }

    fn step_limits(&self) -> Result<String, String> {
        Ok(format!("docker: {}", self.settings.limits.describe()))
    }
}

/// A workflow's network and volume, and what its clone step checks out.
struct DockerWorkflow {
    docker: Docker,
    resources: WorkflowResources,
    clone: CloneSource,
}

#[async_trait]
impl Workflow for DockerWorkflow {
    async fn start(&self, _step_id: i64, step: &CompiledStep) -> Result<Started, BackendError> {
        match step.kind {
            StepKind::Clone => {
                self.docker
                    .start_clone(&self.resources, step, &self.clone)
                    .await
            }
            _ => self.docker.start(&self.resources, step).await,
        }
    }

    async fn remove(&self) -> Result<(), BackendError> {
        self.docker.remove_workflow(&self.resources).await
    }
}

/// A started step container.
pub struct Container {
    docker: Docker,
    id: String,
    killed: Arc<AtomicBool>,
}

#[async_trait]
impl StepHandle for Container {
    /// Stops and removes the container (in the background; `wait` then reports `Killed`).
    fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
        let docker = self.docker.clone();
        let id = self.id.clone();
        tokio::spawn(async move {
            docker.remove_container(&id).await;
        });
    }

    /// Waits for the container to end and removes it.
    async fn wait(&mut self) -> Exit {
        let mut waiting = self.docker.client.wait_container(&self.id, None);
        let exit = match waiting.next().await {
            Some(Ok(response)) => Exit::Code(response.status_code as i32),
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                Exit::Code(code as i32)
            }
            _ if self.killed.load(Ordering::SeqCst) => Exit::Killed,
            Some(Err(e)) => Exit::Lost(BackendError::docker("lost the container")(e)),
            None => Exit::Lost(BackendError::LostContainer),
        };
        let exit = match exit {
            _ if self.killed.load(Ordering::SeqCst) => Exit::Killed,
            other => other,
        };
        self.docker.remove_container(&self.id).await;
        exit
    }

    /// Stops and removes the container, waiting until the engine has done it.
    async fn stop(&self) {
        self.killed.store(true, Ordering::SeqCst);
        self.docker.remove_container(&self.id).await;
    }
}

/// Whether a removal left the object gone (removed now, or not there any more).
fn gone<T>(result: Result<T, bollard::errors::Error>) -> bool {
    matches!(
        result,
        Ok(_)
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404,
                ..
            })
    )
}

/// `<key>_<step>` with characters Docker refuses in names replaced.
fn container_name(res: &WorkflowResources, step: &str) -> String {
    let clean: String = step
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{}_{clean}", res.key)
}

fn workspace_mount(res: &WorkflowResources) -> Mount {
    match &res.host_workspace {
        Some(dir) => Mount {
            target: Some(WORKSPACE.into()),
            source: Some(dir.clone()),
            typ: Some(MountType::BIND),
            ..Default::default()
        },
        None => Mount {
            target: Some(WORKSPACE.into()),
            source: Some(res.key.clone()),
            typ: Some(MountType::VOLUME),
            ..Default::default()
        },
    }
}

/// All the engine's CPUs but one (at least one), so a busy step leaves room for the runner
/// and, on the same machine, the server.
fn default_cpus(engine_cpus: i64) -> f64 {
    (engine_cpus - 1).max(1) as f64
}

/// The operator's limits and, for a hardened step, the reduced privileges, on top of `host`.
fn confine(host: &mut HostConfig, step: &CompiledStep, limits: &Limits) {
    if limits.memory_bytes > 0 {
        host.memory = Some(limits.memory_bytes);
        host.memory_swap = Some(limits.memory_bytes);
    }
    if limits.pids > 0 {
        host.pids_limit = Some(limits.pids);
    }
    if limits.cpus > 0.0 {
        host.nano_cpus = Some((limits.cpus * 1e9) as i64);
    }
    if step.hardened && !step.privileged {
        host.security_opt = Some(vec!["no-new-privileges".into()]);
        host.cap_drop = Some(DROPPED_CAPABILITIES.iter().map(|c| c.to_string()).collect());
    }
}

/// The clone step's container: the clone image's own entrypoint, the `CI_*` and `PLUGIN_*`
/// values the compiler gave the clone (anything else a payload carries is dropped) with the
/// source's URL, commit and ref over them, and the netrc login as upstream's clone plugins
/// read it.
fn clone_body(
    res: &WorkflowResources,
    step: &CompiledStep,
    source: &CloneSource,
    labels: HashMap<String, String>,
    limits: &Limits,
) -> ContainerCreateBody {
    let mut env: BTreeMap<String, String> = step
        .environment
        .iter()
        .filter(|(k, _)| k.starts_with("CI_") || k.starts_with("PLUGIN_"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.insert("CI_REPO_CLONE_URL".into(), source.url.clone());
    env.insert("CI_COMMIT_SHA".into(), source.commit.clone());
    env.insert("CI_COMMIT_REF".into(), source.git_ref.clone());
    env.insert("CI_WORKSPACE".into(), WORKSPACE.into());
    if let Some(n) = &source.netrc {
        env.insert("CI_NETRC_MACHINE".into(), n.machine.clone());
        env.insert("CI_NETRC_USERNAME".into(), n.login.clone());
        env.insert("CI_NETRC_PASSWORD".into(), n.password.clone());
    }
    let mut mounts = vec![workspace_mount(res)];
    if let Some(repo) = crate::local_repository(&source.url) {
        // A `git` forge's repository: readable by the clone alone. Its owner may differ from
        // the container's root, which git would otherwise refuse as "dubious ownership".
        mounts.push(Mount {
            target: Some(repo.clone()),
            source: Some(repo),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
        env.insert("GIT_CONFIG_COUNT".into(), "1".into());
        env.insert("GIT_CONFIG_KEY_0".into(), "safe.directory".into());
        env.insert("GIT_CONFIG_VALUE_0".into(), "*".into());
    }
    let mut host_config = HostConfig {
        mounts: Some(mounts),
        network_mode: Some(res.network.clone()),
        ..Default::default()
    };
    confine(&mut host_config, step, limits);
    ContainerCreateBody {
        image: Some(step.image.clone()),
        env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        working_dir: Some(WORKSPACE.into()),
        labels: Some(labels),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// The container of a step: image, command, environment, workspace, network, the trusted
/// options the compiler allowed and the operator's limits.
fn container_body(
    res: &WorkflowResources,
    step: &CompiledStep,
    env: &BTreeMap<String, String>,
    labels: HashMap<String, String>,
    limits: &Limits,
) -> ContainerCreateBody {
    let mut env = env.clone();
    env.insert("CI_WORKSPACE".into(), WORKSPACE.into());
    let runs_script = !step.commands.is_empty();
    let script = format!("set -e\n{}", process::script(&step.commands));
    let (entrypoint, cmd) = if !step.entrypoint.is_empty() {
        // A custom entrypoint gets the script as `CI_SCRIPT` (base64), as upstream.
        if runs_script {
            env.insert(
                "CI_SCRIPT".into(),
                base64::engine::general_purpose::STANDARD.encode(&script),
            );
        }
        (Some(step.entrypoint.clone()), None)
    } else if runs_script {
        (
            Some(vec!["/bin/sh".to_string(), "-c".to_string()]),
            Some(vec![script]),
        )
    } else {
        (None, None)
    };
    let working_dir = if step.directory.is_empty() {
        WORKSPACE.to_string()
    } else {
        format!("{WORKSPACE}/{}", step.directory.trim_matches('/'))
    };
    let own_network = step.network_mode.is_empty();
    let mut host_config = HostConfig {
        mounts: Some(vec![workspace_mount(res)]),
        network_mode: Some(if own_network {
            res.network.clone()
        } else {
            step.network_mode.clone()
        }),
        privileged: Some(step.privileged),
        binds: (!step.volumes.is_empty()).then(|| step.volumes.clone()),
        devices: (!step.devices.is_empty())
            .then(|| step.devices.iter().map(|d| device_mapping(d)).collect()),
        extra_hosts: (!step.extra_hosts.is_empty()).then(|| step.extra_hosts.clone()),
        dns: (!step.dns.is_empty()).then(|| step.dns.clone()),
        dns_search: (!step.dns_search.is_empty()).then(|| step.dns_search.clone()),
        tmpfs: (!step.tmpfs.is_empty()).then(|| {
            step.tmpfs
                .iter()
                .map(|t| match t.split_once(':') {
                    Some((path, opts)) => (path.to_string(), opts.to_string()),
                    None => (t.clone(), String::new()),
                })
                .collect()
        }),
        ..Default::default()
    };
    confine(&mut host_config, step, limits);
    let networking_config = own_network.then(|| NetworkingConfig {
        endpoints_config: Some(HashMap::from([(
            res.network.clone(),
            EndpointSettings {
                aliases: Some(vec![step.name.clone()]),
                ..Default::default()
            },
        )])),
    });
    ContainerCreateBody {
        image: Some(step.image.clone()),
        env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        entrypoint,
        cmd,
        working_dir: Some(working_dir),
        user: (!step.user.is_empty()).then(|| step.user.clone()),
        labels: Some(labels),
        host_config: Some(host_config),
        networking_config,
        ..Default::default()
    }
}

/// `/dev/x[:/dev/y[:rwm]]` → a device mapping.
fn device_mapping(spec: &str) -> DeviceMapping {
    let mut parts = spec.splitn(3, ':');
    let host = parts.next().unwrap_or_default().to_string();
    let inside = parts
        .next()
        .map(str::to_string)
        .unwrap_or_else(|| host.clone());
    let perms = parts.next().unwrap_or("rwm").to_string();
    DeviceMapping {
        path_on_host: Some(host),
        path_in_container: Some(inside),
        cgroup_permissions: Some(perms),
    }
}

/// The registry login for `step`'s image, as `X-Registry-Auth`.
fn pull_credentials(step: &CompiledStep) -> Option<DockerCredentials> {
    let host = registry_of(&step.image);
    step.registries
        .iter()
        .find(|r| normalize(&r.address) == host)
        .map(|r| DockerCredentials {
            username: Some(r.username.clone()),
            password: Some(r.password.clone()),
            serveraddress: Some(r.address.clone()),
            ..Default::default()
        })
}

/// Whether an image reference names a tag or digest (`name:tag`, `name@sha256:…`); a `:`
/// in the registry host (`localhost:5000/app`) is not a tag.
fn has_tag_or_digest(image: &str) -> bool {
    let last = image.rsplit('/').next().unwrap_or(image);
    last.contains(':') || last.contains('@')
}

/// The engine's message for a failed pull, without bollard's wrapping.
fn pull_error(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerStreamError { error } => error.clone(),
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res() -> WorkflowResources {
        WorkflowResources {
            host_workspace: None,
            key: "wl_7_abc".into(),
            network: "wl_net_abc".into(),
            workflow_id: 7,
        }
    }

    #[test]
    fn tags_and_registry_ports_are_told_apart() {
        assert!(has_tag_or_digest("alpine:3.20"));
        assert!(has_tag_or_digest("localhost:5000/app:1"));
        assert!(!has_tag_or_digest("localhost:5000/app"));
        assert!(has_tag_or_digest("app@sha256:abc"));
        assert!(!has_tag_or_digest("golang"));
    }

    #[test]
    fn commands_become_a_script_and_plugins_keep_their_entrypoint() {
        let step = CompiledStep {
            name: "build me".into(),
            image: "busybox".into(),
            commands: vec!["echo hi".into()],
            directory: "sub/".into(),
            ..CompiledStep::default()
        };
        let body = container_body(
            &res(),
            &step,
            &BTreeMap::new(),
            HashMap::new(),
            &Limits::default(),
        );
        assert_eq!(
            body.entrypoint.unwrap(),
            ["/bin/sh".to_string(), "-c".to_string()]
        );
        assert_eq!(
            body.cmd.unwrap(),
            ["set -e\necho '+ echo hi'\necho hi\n".to_string()]
        );
        assert_eq!(body.working_dir.unwrap(), "/woodpecker/src/sub");
        assert!(
            body.env
                .unwrap()
                .contains(&"CI_WORKSPACE=/woodpecker/src".to_string())
        );
        let host = body.host_config.unwrap();
        assert_eq!(host.network_mode.unwrap(), "wl_net_abc");
        assert_eq!(host.privileged, Some(false));
        let aliases = body.networking_config.unwrap().endpoints_config.unwrap()["wl_net_abc"]
            .aliases
            .clone()
            .unwrap();
        assert_eq!(aliases, ["build me"]);
        assert_eq!(container_name(&res(), "build me"), "wl_7_abc_build_me");

        let plugin = CompiledStep {
            name: "publish".into(),
            kind: StepKind::Plugin,
            image: "plugins/x".into(),
            ..CompiledStep::default()
        };
        let body = container_body(
            &res(),
            &plugin,
            &BTreeMap::new(),
            HashMap::new(),
            &Limits::default(),
        );
        assert_eq!(body.entrypoint, None);
        assert_eq!(body.cmd, None);
    }

    #[test]
    fn every_container_gets_the_limits_and_untrusted_ones_the_hardening() {
        let limits = Limits {
            memory_bytes: 256 << 20,
            pids: 300,
            cpus: 0.5,
        };
        for kind in [StepKind::Commands, StepKind::Service, StepKind::Plugin] {
            let step = CompiledStep {
                name: "s".into(),
                kind,
                image: "busybox".into(),
                hardened: true,
                ..CompiledStep::default()
            };
            let host = container_body(&res(), &step, &BTreeMap::new(), HashMap::new(), &limits)
                .host_config
                .unwrap();
            assert_eq!(host.memory, Some(256 << 20), "{kind:?}");
            assert_eq!(host.memory_swap, Some(256 << 20), "no swap on top");
            assert_eq!(host.pids_limit, Some(300));
            assert_eq!(host.nano_cpus, Some(500_000_000));
            assert_eq!(host.security_opt.unwrap(), ["no-new-privileges"]);
            assert!(host.cap_drop.unwrap().contains(&"NET_RAW".to_string()));
        }
        // Trusted, or privileged (which a trusted repository or a privileged plugin asked
        // for): limits, but no hardening.
        for (hardened, privileged) in [(false, false), (true, true)] {
            let step = CompiledStep {
                hardened,
                privileged,
                ..CompiledStep::default()
            };
            let host = container_body(&res(), &step, &BTreeMap::new(), HashMap::new(), &limits)
                .host_config
                .unwrap();
            assert_eq!(host.pids_limit, Some(300));
            assert_eq!(host.security_opt, None);
            assert_eq!(host.cap_drop, None);
        }
        // Zero means none.
        let host = container_body(
            &res(),
            &CompiledStep::default(),
            &BTreeMap::new(),
            HashMap::new(),
            &Limits::default(),
        )
        .host_config
        .unwrap();
        assert_eq!(
            (host.memory, host.pids_limit, host.nano_cpus),
            (None, None, None)
        );
        assert_eq!(default_cpus(1), 1.0);
        assert_eq!(default_cpus(8), 7.0);
    }

    #[test]
    fn the_clone_gets_only_its_own_environment() {
        let repo = tempfile::tempdir().unwrap();
        std::fs::write(repo.path().join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let repo_dir = repo.path().display().to_string();
        let step = CompiledStep {
            name: "clone".into(),
            kind: StepKind::Clone,
            image: DEFAULT_CLONE_IMAGE.into(),
            hardened: true,
            // What a payload compiled before variables were kept out of the clone carried.
            environment: BTreeMap::from([
                ("CI_REPO".into(), "alice/app".into()),
                ("PLUGIN_DEPTH".into(), "0".into()),
                ("GIT_CONFIG_COUNT".into(), "1".into()),
                (
                    "GIT_CONFIG_PARAMETERS".into(),
                    "'core.fsmonitor'='id'".into(),
                ),
                ("LD_PRELOAD".into(), "/workspace/x.so".into()),
                ("CI_COMMIT_SHA".into(), "from-the-payload".into()),
            ]),
            ..CompiledStep::default()
        };
        let source = CloneSource {
            url: format!("file://{repo_dir}"),
            commit: "abc123".into(),
            git_ref: "refs/heads/main".into(),
            netrc: Some(crate::protocol::Netrc {
                machine: "forge.example".into(),
                login: "bot".into(),
                password: "pw".into(),
            }),
        };
        let body = clone_body(&res(), &step, &source, HashMap::new(), &Limits::default());
        let env: BTreeMap<String, String> = body
            .env
            .unwrap()
            .iter()
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect();
        let expected: BTreeMap<String, String> = [
            ("CI_COMMIT_REF", "refs/heads/main"),
            ("CI_COMMIT_SHA", "abc123"),
            ("CI_NETRC_MACHINE", "forge.example"),
            ("CI_NETRC_PASSWORD", "pw"),
            ("CI_NETRC_USERNAME", "bot"),
            ("CI_REPO", "alice/app"),
            ("CI_REPO_CLONE_URL", source.url.as_str()),
            ("CI_WORKSPACE", WORKSPACE),
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "safe.directory"),
            ("GIT_CONFIG_VALUE_0", "*"),
            ("PLUGIN_DEPTH", "0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(env, expected);
        assert_eq!(body.entrypoint, None, "the image's own entrypoint");
        let host = body.host_config.unwrap();
        let mounts = host.mounts.unwrap();
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[1].source.as_deref(), Some(repo_dir.as_str()));
        assert_eq!(mounts[1].read_only, Some(true));
        assert_eq!(host.security_opt.unwrap(), ["no-new-privileges"]);
        // A remote repository: no bind, no git configuration of ours.
        let remote = CloneSource {
            url: "https://forge.example/alice/app.git".into(),
            ..source
        };
        let body = clone_body(&res(), &step, &remote, HashMap::new(), &Limits::default());
        assert_eq!(body.host_config.unwrap().mounts.unwrap().len(), 1);
        assert!(!body.env.unwrap().iter().any(|kv| kv.starts_with("GIT_")));
    }

    #[test]
    fn registry_logins_match_the_image_host() {
        let step = CompiledStep {
            image: "localhost:5000/private/app:1".into(),
            registries: vec![
                woodlark_pipeline::types::RegistryCredential {
                    address: "docker.io".into(),
                    username: "hub".into(),
                    password: "x".into(),
                },
                woodlark_pipeline::types::RegistryCredential {
                    address: "http://localhost:5000".into(),
                    username: "me".into(),
                    password: "pw".into(),
                },
            ],
            ..CompiledStep::default()
        };
        assert_eq!(pull_credentials(&step).unwrap().username.unwrap(), "me");
    }

    #[test]
    fn devices() {
        let d = device_mapping("/dev/fuse");
        assert_eq!(d.path_in_container.unwrap(), "/dev/fuse");
        assert_eq!(d.cgroup_permissions.unwrap(), "rwm");
        let d = device_mapping("/dev/a:/dev/b:r");
        assert_eq!(d.path_in_container.unwrap(), "/dev/b");
        assert_eq!(d.cgroup_permissions.unwrap(), "r");
    }
}
