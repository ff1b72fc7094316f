//! The `stepline` binary.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use stepline::config::Config;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

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
    // Logging starts before the config loads, so its warnings (e.g. an unset variable) show;
    // the config's level applies once it is read, unless RUST_LOG says otherwise.
    let from_env = std::env::var("RUST_LOG").ok();
    let (filter, level) = tracing_subscriber::reload::Layer::new(EnvFilter::new(
        from_env.clone().unwrap_or_else(|| "info".into()),
    ));
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .init();
    let config = match Config::load(&cli.config)
        .and_then(|config| stepline::exporter::check_tls(&config).map(|()| config))
    {
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
    let (Some(Command::Serve) | None) = cli.command;
    if let (None, Some(configured)) = (from_env, &config.log_level) {
        let _ = level.modify(|f| *f = EnvFilter::new(configured));
    }
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
