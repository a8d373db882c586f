//! `woodlark migrate --to postgres://…`: moves a stopped server's SQLite data dir into an
//! empty PostgreSQL database, checked table by table (`woodlark_store::pg::transfer`).

use std::path::PathBuf;

use crate::app::DB_FILE;
use crate::config::redacted_url;
use crate::logging::{LogControl, LogLevel};
use crate::store::pg::transfer::{self, Source};
use crate::store::{logs, migrations};

#[derive(clap::Args)]
pub struct MigrateArgs {
    /// The empty PostgreSQL database to copy into: postgres://user:password@host:port/db.
    #[arg(long)]
    to: String,
    /// Configuration file of the server whose data dir is copied (stop the server first).
    #[arg(long, default_value = "config.toml")]
    config: PathBuf,
}

pub fn run(args: MigrateArgs) -> anyhow::Result<()> {
    let config = super::load(&args.config)?;
    LogControl::install(LogLevel::Warn);
    let dir = &config.server.data_dir;
    let main = dir.join(DB_FILE);
    if !main.exists() {
        anyhow::bail!(
            "no SQLite database at {}: nothing to move (is server.data_dir right?)",
            main.display()
        );
    }
    let mut sources = vec![Source {
        path: main,
        migrate: migrations::migrate,
    }];
    let logs_file = dir.join(logs::LOGS_FILE);
    if logs_file.exists() {
        sources.push(Source {
            path: logs_file,
            migrate: logs::migrate,
        });
    }
    let copied = transfer::sqlite_to_postgres(&sources, &args.to)?;
    let width = copied.iter().map(|c| c.table.len()).max().unwrap_or(5);
    println!(
        "{:width$}  {:>9}  checksum (sha-256 sum, both engines)",
        "table", "rows"
    );
    for c in &copied {
        println!("{:width$}  {:>9}  {}", c.table, c.rows, c.checksum);
    }
    let rows: u64 = copied.iter().map(|c| c.rows).sum();
    println!(
        "copied {rows} rows in {} tables into {}; counts and checksums match. Set [storage] url \
         (or WOODLARK_STORAGE_URL) to it, keep storage.secret_key_file, and start the server.",
        copied.len(),
        redacted_url(&args.to)
    );
    Ok(())
}
