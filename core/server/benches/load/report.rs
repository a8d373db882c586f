//! What every scenario prints: percentiles, the number formats, aligned markdown tables, and
//! the machine banner (CPUs, load average, fsync latency) at the start of a run.

use std::time::{Duration, Instant};

pub fn machine_banner() {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let fsync = fsync_latency();
    println!(
        "machine: {cpus} CPUs ({model}); load average at start: {}; fdatasync of 4 KiB in the temp dir: p50 {} ms",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        ms(fsync)
    );
}

/// Median time of `fdatasync` after a 4 KiB append in the temp dir (where data dirs live):
/// every durable commit pays at least this.
pub fn fsync_latency() -> Duration {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mut f = std::fs::File::create(dir.path().join("probe")).unwrap();
    let mut lat = Vec::new();
    for _ in 0..20 {
        f.write_all(&[0u8; 4096]).unwrap();
        let t = Instant::now();
        f.sync_data().unwrap();
        lat.push(t.elapsed());
    }
    lat.sort();
    pct(&lat, 0.5)
}

pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

pub fn ms(d: Duration) -> String {
    let v = d.as_secs_f64() * 1000.0;
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

pub fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 {
        "-".into()
    } else {
        format!("{:.2}x", a / b)
    }
}

/// KiB as MB with one decimal (the memory tables of `rss` and `flood`).
pub fn mb(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// Prints an aligned table.
pub fn table(title: &str, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.len());
        }
    }
    println!("\n== {title}");
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect();
        println!("| {} |", parts.join(" | "));
    };
    line(header.iter().map(|h| h.to_string()).collect());
    println!(
        "|{}|",
        widths
            .iter()
            .enumerate()
            .map(|(i, w)| if i == 0 {
                format!(":{}", "-".repeat(w + 1))
            } else {
                format!("{}:", "-".repeat(w + 1))
            })
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in rows {
        line(row.clone());
    }
}
