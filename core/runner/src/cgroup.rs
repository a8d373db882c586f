//! Resource limits for the local backend's steps, through the kernel's control groups.
//!
//! A step of the local backend is a host process: without a bound, one fork bomb or one
//! allocation loop takes the process table or the memory of the whole machine, and every
//! other workflow (another tenant's clone, the server itself) fails with it. The docker
//! backend gives each container `runner.memory_mb`, `runner.pids` and `runner.cpus`; here each
//! step gets a control group of its own with the same limits:
//!
//! - **cgroup v1** (a hierarchy per controller, as on hybrid hosts): a group per step in the
//!   `memory`, `pids` and `cpu` hierarchies, below the server's own group in each;
//! - **cgroup v2** (one unified hierarchy): a group per step below the server's own group,
//!   which must delegate the `memory`, `pids` and `cpu` controllers to its children (systemd's
//!   `Delegate=yes`); a group with processes of its own cannot, by the kernel's rules, so a
//!   server whose group does not delegate them runs steps without limits.
//!
//! The step's first process enters its groups between `fork` and `exec`
//! ([`StepGroup::enter`]), so nothing it starts is ever outside them. Where no writable
//! hierarchy exists, [`Limiter::detect`] says why, and the runner says at start-up (in the log
//! and in the agent's `woodlark_limits` in `/api/agents`) that local steps run without limits.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::backend::Limits;

/// The CFS period the CPU limit is expressed in (the kernel's default, 100 ms).
const CPU_PERIOD_US: i64 = 100_000;

/// Where the step groups go and which limits they get.
#[derive(Debug, Clone, PartialEq)]
pub struct Limiter {
    layout: Layout,
    memory_bytes: Option<i64>,
    pids: Option<i64>,
    /// CFS quota per [`CPU_PERIOD_US`].
    cpu_quota_us: Option<i64>,
}

/// The parent directories this runner's step groups are made in.
#[derive(Debug, Clone, PartialEq)]
enum Layout {
    /// One parent per controller hierarchy.
    V1 {
        memory: Option<PathBuf>,
        pids: Option<PathBuf>,
        cpu: Option<PathBuf>,
    },
    /// One parent in the unified hierarchy.
    V2(PathBuf),
}

/// One step's groups; the step's process enters them before it runs anything.
#[derive(Debug)]
pub struct StepGroup {
    dirs: Vec<PathBuf>,
    /// `<dir>/cgroup.procs` of each, ready for [`StepGroup::enter`] (which may not allocate).
    procs: Vec<CString>,
}

impl Limiter {
    /// The limiter for `limits` on this host, its groups named after `owner`; `Err` says why
    /// steps cannot be limited here (or that no limit is set at all).
    pub fn detect(owner: &str, limits: Limits) -> Result<Limiter, String> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let limiter = Limiter::plan(&mountinfo, &own, owner, limits, cpus)?;
        limiter.prepare()?;
        Ok(limiter)
    }

    /// The limiter the host's mount table and the process's own groups allow, without
    /// touching anything.
    fn plan(
        mountinfo: &str,
        own: &str,
        owner: &str,
        limits: Limits,
        host_cpus: usize,
    ) -> Result<Limiter, String> {
        let cpus = if limits.cpus > 0.0 {
            limits.cpus
        } else {
            host_cpus.saturating_sub(1).max(1) as f64
        };
        let memory_bytes = (limits.memory_bytes > 0).then_some(limits.memory_bytes);
        let pids = (limits.pids > 0).then_some(limits.pids);
        let cpu_quota_us = Some(((cpus * CPU_PERIOD_US as f64) as i64).max(1000));
        let name = format!("woodlark-{}", sanitize(owner));
        let mounts = parse_mounts(mountinfo);
        let groups = parse_own_groups(own);
        let v1 = |controller: &str| -> Option<PathBuf> {
            let mount = mounts
                .iter()
                .find(|m| !m.v2 && m.controllers.iter().any(|c| c == controller))?;
            let path = groups
                .iter()
                .find(|(list, _)| list.split(',').any(|c| c == controller))?
                .1
                .as_str();
            Some(mount.join(path).join(&name))
        };
        let (memory, pids_dir, cpu) = (v1("memory"), v1("pids"), v1("cpu"));
        let layout = if memory.is_some() || pids_dir.is_some() || cpu.is_some() {
            Layout::V1 {
                memory: memory.filter(|_| memory_bytes.is_some()),
                pids: pids_dir.filter(|_| pids.is_some()),
                cpu,
            }
        } else {
            let mount = mounts
                .iter()
                .find(|m| m.v2)
                .ok_or("no cgroup hierarchy is mounted")?;
            let path = groups
                .iter()
                .find(|(list, _)| list.is_empty())
                .ok_or("this process is in no cgroup v2 group")?
                .1
                .as_str();
            Layout::V2(mount.join(path).join(&name))
        };
        Ok(Limiter {
            layout,
            memory_bytes,
            pids,
            cpu_quota_us,
        })
    }

    /// Creates the parent groups and checks that a step group can be made in them.
    fn prepare(&self) -> Result<(), String> {
        match &self.layout {
            Layout::V1 { .. } => {
                for dir in self.parents() {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                }
            }
            Layout::V2(parent) => {
                let own = parent.parent().unwrap_or(parent.as_path());
                let wanted = ["memory", "pids", "cpu"];
                let delegated =
                    std::fs::read_to_string(own.join("cgroup.subtree_control")).unwrap_or_default();
                let missing: Vec<&str> = wanted
                    .iter()
                    .copied()
                    .filter(|c| !delegated.split_whitespace().any(|d| d == *c))
                    .collect();
                if !missing.is_empty() {
                    return Err(format!(
                        "the server's cgroup {} does not delegate the {} controller(s) to its children (run it where they are delegated, e.g. a systemd unit with Delegate=yes whose process sits in a leaf group)",
                        own.display(),
                        missing.join(", ")
                    ));
                }
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
                let control = wanted.map(|c| format!("+{c}")).join(" ");
                std::fs::write(parent.join("cgroup.subtree_control"), control).map_err(|e| {
                    format!("cannot enable controllers in {}: {e}", parent.display())
                })?;
            }
        }
        // A probe: a group made and removed proves the hierarchy is writable.
        let probe = self
            .create("probe")
            .map_err(|e| format!("cannot create a step cgroup: {e}"))?;
        probe.remove_now();
        Ok(())
    }

    fn parents(&self) -> Vec<&Path> {
        match &self.layout {
            Layout::V1 { memory, pids, cpu } => [memory, pids, cpu]
                .into_iter()
                .flatten()
                .map(PathBuf::as_path)
                .collect(),
            Layout::V2(parent) => vec![parent.as_path()],
        }
    }

    /// What steps get, for the log and the agent's record.
    pub fn describe(&self) -> String {
        let version = match self.layout {
            Layout::V1 { .. } => "cgroup v1",
            Layout::V2(_) => "cgroup v2",
        };
        let limits = Limits {
            memory_bytes: self.memory_bytes.unwrap_or(0),
            pids: self.pids.unwrap_or(0),
            cpus: self.cpu_quota_us.unwrap_or(0) as f64 / CPU_PERIOD_US as f64,
        };
        format!("{version}: {}", limits.describe())
    }

    /// Makes the groups of one step (`name` unique among this runner's running steps), with
    /// the limits written. Blocking: call it off the async runtime.
    pub fn create(&self, name: &str) -> io::Result<StepGroup> {
        let mut group = StepGroup {
            dirs: Vec::new(),
            procs: Vec::new(),
        };
        let leaf = sanitize(name);
        let made = (|| -> io::Result<()> {
            match &self.layout {
                Layout::V1 { memory, pids, cpu } => {
                    if let (Some(dir), Some(bytes)) = (memory, self.memory_bytes) {
                        let dir = group.make(dir.join(&leaf))?;
                        write(&dir, "memory.limit_in_bytes", bytes)?;
                        // No swap on top, where the kernel accounts it.
                        if dir.join("memory.memsw.limit_in_bytes").exists() {
                            write(&dir, "memory.memsw.limit_in_bytes", bytes)?;
                        }
                    }
                    if let (Some(dir), Some(n)) = (pids, self.pids) {
                        let dir = group.make(dir.join(&leaf))?;
                        write(&dir, "pids.max", n)?;
                    }
                    if let (Some(dir), Some(quota)) = (cpu, self.cpu_quota_us) {
                        let dir = group.make(dir.join(&leaf))?;
                        write(&dir, "cpu.cfs_period_us", CPU_PERIOD_US)?;
                        write(&dir, "cpu.cfs_quota_us", quota)?;
                    }
                }
                Layout::V2(parent) => {
                    let dir = group.make(parent.join(&leaf))?;
                    if let Some(bytes) = self.memory_bytes {
                        write(&dir, "memory.max", bytes)?;
                        if dir.join("memory.swap.max").exists() {
                            write(&dir, "memory.swap.max", 0)?;
                        }
                    }
                    if let Some(n) = self.pids {
                        write(&dir, "pids.max", n)?;
                    }
                    if let Some(quota) = self.cpu_quota_us {
                        std::fs::write(dir.join("cpu.max"), format!("{quota} {CPU_PERIOD_US}"))?;
                    }
                }
            }
            Ok(())
        })();
        match made {
            Ok(()) => Ok(group),
            Err(e) => {
                group.remove_now();
                Err(e)
            }
        }
    }

    /// Removes step groups an earlier run of this runner left (their processes are gone);
    /// returns how many.
    pub fn sweep(&self) -> usize {
        let mut removed = 0;
        for parent in self.parents() {
            let Ok(entries) = std::fs::read_dir(parent) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir())
                    && std::fs::remove_dir(entry.path()).is_ok()
                {
                    removed += 1;
                }
            }
        }
        removed
    }
}

impl StepGroup {
    fn make(&mut self, dir: PathBuf) -> io::Result<PathBuf> {
        std::fs::create_dir(&dir)?;
        self.dirs.push(dir.clone());
        let procs = dir.join("cgroup.procs");
        self.procs.push(
            CString::new(procs.into_os_string().into_encoded_bytes())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a cgroup path"))?,
        );
        Ok(dir)
    }

    /// Moves the calling process into the groups. Runs in the child between `fork` and `exec`,
    /// so it only makes system calls on memory prepared before the fork.
    pub fn enter(&self) -> io::Result<()> {
        for path in &self.procs {
            // SAFETY: open/write/close on a NUL-terminated path and a static buffer; all three
            // are async-signal-safe.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                // "0" is the writing process itself.
                let wrote = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = io::Error::last_os_error();
                libc::close(fd);
                if wrote != 1 {
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// Removes the groups once their last process is gone (the kernel refuses while any is
    /// left: a step's processes die with it, but the last exits may lag its end a little).
    pub async fn remove(&self) {
        for _ in 0..50 {
            if self.try_remove() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tracing::warn!(groups = ?self.dirs, "a step's cgroup still has processes; left for the next sweep");
    }

    /// Removes the groups now, if they are empty (a step that never started).
    pub fn remove_now(&self) {
        self.try_remove();
    }

    /// Removes what it can; `true` when every group is gone.
    fn try_remove(&self) -> bool {
        self.dirs.iter().all(|dir| match std::fs::remove_dir(dir) {
            Ok(()) => true,
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        })
    }
}

fn write(dir: &Path, file: &str, value: i64) -> io::Result<()> {
    std::fs::write(dir.join(file), value.to_string())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.join(file).display())))
}

/// Letters, digits, `-` and `_` only: a group name is a directory name.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A cgroup file system mount.
#[derive(Debug)]
struct Mount {
    /// Where it is mounted.
    point: PathBuf,
    /// The group shown at `point` (not `/` inside a container that sees only its own).
    root: String,
    v2: bool,
    /// v1: the controllers of the hierarchy.
    controllers: Vec<String>,
}

impl Mount {
    /// The directory of group `path` (as `/proc/self/cgroup` names it) under this mount.
    fn join(&self, path: &str) -> PathBuf {
        let inside = path.strip_prefix(self.root.as_str()).unwrap_or(path);
        let mut dir = self.point.clone();
        dir.extend(inside.split('/').filter(|p| !p.is_empty()));
        dir
    }
}

/// The cgroup mounts of `/proc/self/mountinfo`.
fn parse_mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split(' ').collect();
            let (root, point) = (*fields.get(3)?, *fields.get(4)?);
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let _source = right.next()?;
            let options = right.next().unwrap_or("");
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            Some(Mount {
                point: PathBuf::from(unescape(point)),
                root: unescape(root),
                v2,
                controllers: options.split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(b) => {
                out.push(b as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `(controllers, path)` of each line of `/proc/self/cgroup`; v2's controllers are empty.
fn parse_own_groups(own: &str) -> Vec<(String, String)> {
    own.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            Some((controllers.to_string(), path.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTS: &str = "\
25 20 0:22 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
26 25 0:23 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
27 25 0:24 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
28 25 0:25 /ctr /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
29 25 0:26 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_GROUPS: &str = "\
8:pids:/ctr/inner
4:memory:/process_api/abc
1:cpu:/
0::/
";

    const LIMITS: Limits = Limits {
        memory_bytes: 64 * 1024 * 1024,
        pids: 100,
        cpus: 0.0,
    };

    #[test]
    fn v1_groups_go_below_the_process_own_group_in_each_hierarchy() {
        let l = Limiter::plan(HYBRID_MOUNTS, HYBRID_GROUPS, "server-1", LIMITS, 4).unwrap();
        assert_eq!(
            l.layout,
            Layout::V1 {
                memory: Some("/sys/fs/cgroup/memory/process_api/abc/woodlark-server-1".into()),
                // The mount shows `/ctr` at its root.
                pids: Some("/sys/fs/cgroup/pids/inner/woodlark-server-1".into()),
                cpu: Some("/sys/fs/cgroup/cpu/woodlark-server-1".into()),
            }
        );
        // cpus = 0: all but one of the host's four.
        assert_eq!(l.cpu_quota_us, Some(300_000));
        assert_eq!(
            l.describe(),
            "cgroup v1: memory 64 MiB, 100 processes, 3 CPUs"
        );
    }

    #[test]
    fn a_limit_of_zero_is_no_limit_and_one_cpu_hosts_keep_one() {
        let none = Limits {
            memory_bytes: 0,
            pids: 0,
            cpus: 0.5,
        };
        let l = Limiter::plan(HYBRID_MOUNTS, HYBRID_GROUPS, "o", none, 1).unwrap();
        let Layout::V1 { memory, pids, cpu } = &l.layout else {
            panic!("{:?}", l.layout)
        };
        assert!(memory.is_none() && pids.is_none() && cpu.is_some());
        assert_eq!(l.cpu_quota_us, Some(50_000));
        let l = Limiter::plan(HYBRID_MOUNTS, HYBRID_GROUPS, "o", LIMITS, 1).unwrap();
        assert_eq!(l.cpu_quota_us, Some(100_000));
    }

    #[test]
    fn a_unified_host_uses_the_process_group_in_the_one_hierarchy() {
        let mounts = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let groups = "0::/system.slice/woodlark.service\n";
        let l = Limiter::plan(mounts, groups, "a b", LIMITS, 2).unwrap();
        assert_eq!(
            l.layout,
            Layout::V2("/sys/fs/cgroup/system.slice/woodlark.service/woodlark-a_b".into())
        );
        assert!(l.describe().starts_with("cgroup v2: "));
        let err = Limiter::plan("", groups, "o", LIMITS, 2).unwrap_err();
        assert_eq!(err, "no cgroup hierarchy is mounted");
    }

    #[test]
    fn mountinfo_escapes_are_read() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/odd\x"), r"/odd\x");
    }
}
