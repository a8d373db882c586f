//! `woodlark backup --to DIR` and `woodlark restore --from DIR` (`crate::backup`): the data
//! dir of the config (with the `WOODLARK_*` overrides, as `user add` reads it), the server
//! running or stopped for a backup, stopped and its data dir empty for a restore.

use std::path::PathBuf;

use crate::backup;
use crate::logging::{LogControl, LogLevel};

#[derive(clap::Args)]
pub struct BackupArgs {
    /// The directory to write: new, or empty. Written beside it first and renamed at the end.
    #[arg(long)]
    to: PathBuf,
    /// Configuration file of the server whose data dir is backed up (it may be running).
    #[arg(long, default_value = "config.toml")]
    config: PathBuf,
    /// Put the sealing key file in the backup too (then the backup alone opens every secret
    /// and signs tokens: keep it as safe as the key). Without it, keep the key apart.
    #[arg(long)]
    with_key: bool,
}

#[derive(clap::Args)]
pub struct RestoreArgs {
    /// A directory `woodlark backup` wrote.
    #[arg(long)]
    from: PathBuf,
    /// Configuration file of the server to restore: its data dir must be empty or missing
    /// (stop the server first).
    #[arg(long, default_value = "config.toml")]
    config: PathBuf,
}

pub fn run_backup(args: BackupArgs) -> anyhow::Result<()> {
    let config = super::load(&args.config)?;
    LogControl::install(LogLevel::Warn);
    let taken = backup::take(&config, &args.to, args.with_key, &backup::Pace::default())?;
    let manifest = &taken.manifest;
    for (file, copied) in &taken.copies {
        println!(
            "{}: {} pages in {} steps, {:.0} ms (longest step {:.1} ms)",
            taken.dir.join(file).display(),
            copied.pages,
            copied.steps,
            copied.elapsed.as_secs_f64() * 1000.0,
            copied.longest_step.as_secs_f64() * 1000.0,
        );
    }
    print_tables(manifest);
    if taken.trimmed_lines > 0 {
        println!(
            "left out {} log lines of steps newer than the main database's snapshot",
            taken.trimmed_lines
        );
    }
    println!(
        "{}: manifest, key fingerprint {}",
        taken
            .dir
            .join(crate::store::backup::MANIFEST_FILE)
            .display(),
        manifest.key_fingerprint
    );
    match &manifest.key_file {
        Some(file) => println!(
            "{}: the sealing key. The backup directory is private (0700): whoever reads it \
             can open every secret and sign tokens.",
            taken.dir.join(file).display()
        ),
        None => println!(
            "the sealing key ({}) is not in the backup: keep a copy of it apart; a restore \
             needs it",
            config.secret_key_path().display()
        ),
    }
    println!(
        "backed up {} rows into {}",
        manifest.rows(),
        taken.dir.display()
    );
    Ok(())
}

pub fn run_restore(args: RestoreArgs) -> anyhow::Result<()> {
    let config = super::load(&args.config)?;
    LogControl::install(LogLevel::Warn);
    let restored = backup::restore(&config, &args.from)?;
    print_tables(&restored.manifest);
    let key = if restored.key_from_backup {
        "the backup's key, put there"
    } else {
        "the key already there"
    };
    println!(
        "restored {} rows into {}; counts and checksums match the manifest. The sealing key is \
         {} ({}). Start the server.",
        restored.manifest.rows(),
        restored.data_dir.display(),
        restored.key_path.display(),
        key
    );
    Ok(())
}

fn print_tables(manifest: &crate::store::backup::Manifest) {
    let width = manifest
        .databases
        .iter()
        .flat_map(|d| &d.tables)
        .map(|t| t.name.len())
        .max()
        .unwrap_or(5);
    for db in &manifest.databases {
        println!("{} (schema version {})", db.file, db.schema_version);
        for t in &db.tables {
            println!("  {:width$}  {:>9}  {}", t.name, t.rows, t.checksum);
        }
    }
}
