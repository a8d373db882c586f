//! What the scenarios read about processes, from `/proc` and `getrusage`: resident memory, CPU
//! time (of this process, of its threads by name, of its children), wake-ups; and the
//! open-file limit, which the many-connection scenarios (`sse`, `flood`) raise first.

use std::time::Duration;

/// This process's open-file limit (`rlim_cur` soft, `rlim_max` hard), if it can be read.
pub fn open_file_limit() -> Option<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0).then_some(lim)
}

/// Raises the soft open-file limit to the hard one (at most 65,536) when it is below 8,192:
/// `sse` holds 1,000 client and 1,000 server sockets, `flood` up to 20,000 clients.
pub fn raise_fd_limit() {
    if let Some(mut lim) = open_file_limit()
        && lim.rlim_cur < 8192
    {
        lim.rlim_cur = lim.rlim_max.min(65_536);
        // SAFETY: a plain libc call with a valid, initialised struct.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
}

/// Resident set size of this process, in bytes.
pub fn rss_bytes() -> u64 {
    rss_kib(std::process::id()) * 1024
}

/// User + system CPU time of this process.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time (user + system) of this process's threads by thread name, for the threads alive
/// now (a blocking-pool thread that has exited is no longer counted).
pub fn thread_cpu_times() -> std::collections::BTreeMap<String, Duration> {
    let mut by_name = std::collections::BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Some(stat) = std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|s| ProcStat::parse(&s))
        {
            *by_name.entry(stat.name).or_insert(Duration::ZERO) += stat.cpu;
        }
    }
    by_name
}

/// What the scenarios read from a `/proc/<pid>/stat` (or `…/task/<tid>/stat`) line.
pub struct ProcStat {
    pub name: String,
    pub ppid: i64,
    /// User + system time.
    pub cpu: Duration,
}

impl ProcStat {
    pub fn parse(stat: &str) -> Option<ProcStat> {
        // `pid (name) state ppid … utime(14) stime(15) …`; the name may hold spaces and
        // parentheses, so the fields are counted from the last `)`.
        let (open, close) = (stat.find('(')?, stat.rfind(')')?);
        let fields: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
        let ppid = fields.get(1)?.parse().ok()?;
        let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(ProcStat {
            name: stat.get(open + 1..close)?.to_string(),
            ppid,
            // Clock ticks; USER_HZ is 100 on Linux.
            cpu: Duration::from_millis(ticks * 10),
        })
    }
}

/// CPU time (user + system) of this process's child processes that are still running (the
/// forge's long-lived `git cat-file` sessions; `RUSAGE_CHILDREN` counts only waited-for ones).
pub fn children_cpu_time() -> Duration {
    let me = i64::from(std::process::id());
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|s| ProcStat::parse(&s))
        .filter(|stat| stat.ppid == me)
        .map(|stat| stat.cpu)
        .sum()
}

/// Resident set size of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .unwrap_or(0)
}

/// How often process `pid` has been woken so far (context switches of all its threads) and
/// the CPU time it has used.
pub fn wakeups_and_cpu(pid: u32) -> (u64, Duration) {
    let switches = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| {
                    l.starts_with("voluntary_ctxt_switches:")
                        || l.starts_with("nonvoluntary_ctxt_switches:")
                })
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum();
    let cpu = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| ProcStat::parse(&s))
        .map_or(Duration::ZERO, |stat| stat.cpu);
    (switches, cpu)
}

/// Wake-ups per second and CPU milliseconds per minute of process `pid` over `span`, doing
/// nothing.
pub async fn idle_activity(pid: u32, span: Duration) -> (f64, f64) {
    let (w0, c0) = wakeups_and_cpu(pid);
    tokio::time::sleep(span).await;
    let (w1, c1) = wakeups_and_cpu(pid);
    let secs = span.as_secs_f64();
    (
        (w1 - w0) as f64 / secs,
        (c1 - c0).as_secs_f64() * 1000.0 * 60.0 / secs,
    )
}
