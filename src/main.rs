//! The `stepline` binary.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use stepline::config::Config;

/// stepline: durable, resumable run state from the OpenTelemetry traces AI agents emit.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Collector-layout configuration file.
    #[arg(long, global = true, default_value = "collector.yaml")]
    config: PathBuf,
    /// Check the configuration and exit.
    #[arg(long, global = true)]
    validate_config: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the pipeline (the default).
    Serve,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stepline: invalid configuration:\n{e}");
            return ExitCode::from(2);
        }
    };
    if cli.validate_config {
        println!("{}: configuration is valid", cli.config.display());
        return ExitCode::SUCCESS;
    }
    let Some(Command::Serve) | None = cli.command;
    let filter = std::env::var("RUST_LOG")
        .ok()
        .or_else(|| config.log_level.clone())
        .unwrap_or_else(|| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("stepline: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(stepline::service::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stepline: {e:#}");
            ExitCode::FAILURE
        }
    }
}
