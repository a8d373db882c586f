//! `woodlark`: see `woodlark --help`. All logic lives in the library (`cli`, `app`).

fn main() -> std::process::ExitCode {
    woodlark::cli::main()
}
