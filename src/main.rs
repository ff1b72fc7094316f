//! The `stepline` binary: the pipeline (`stepline`, `stepline serve`) and the command line over
//! a running stepline's query API (`stepline runs`, `run`, `events`, ... in `cli`).

mod cli;

use std::ffi::{c_int, c_long};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use stepline::config::{Config, SelfTracesConfig};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// stepline: durable, resumable run state from the OpenTelemetry traces AI agents emit.
///
/// With no command (or `serve`) it runs the pipeline on --config; the other commands talk to a
/// running stepline's query API (--url / STEPLINE_URL, --token / STEPLINE_TOKEN).
#[derive(Parser)]
#[command(version, about, after_help = cli::EXIT_CODES)]
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

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the pipeline (the default).
    Serve,
    #[command(flatten)]
    Api(cli::ApiCommand),
}

fn fmt_layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer().with_writer(std::io::stderr)
}

/// mimalloc's `mi_option_purge_delay`: milliseconds before freed memory goes back to the OS
/// (1000 by default in mimalloc 3, 10 in mimalloc 2; 15 in the option enum of both).
const MI_OPTION_PURGE_DELAY: c_int = 15;
/// The defaults of that option in the mimalloc versions the `mimalloc` crate builds.
const MI_PURGE_DELAY_DEFAULTS: [c_long; 2] = [1000, 10];

extern "C" {
    fn mi_option_get(option: c_int) -> c_long;
    fn mi_option_set(option: c_int, value: c_long);
}

/// Milliseconds mimalloc waits before giving freed pages back to the OS.
const PURGE_DELAY_MS: c_long = 100;

/// Lets mimalloc give freed pages back to the OS after [`PURGE_DELAY_MS`] rather than a second
/// later: between bursts of ingest (each request builds and drops megabytes of JSON values) the
/// pages freed otherwise stay resident. Measured with `benches/peer_bench.py matrix` (idle
/// machine, one run each): peak RSS under 500-span plain requests 215 MB at mimalloc's 1000 ms,
/// 196 MB at 100 ms, 147 MB at 0 ms; plain spans per CPU-second 48.5k, 47.2k and 31.4k (purging
/// at once pays a page fault on every reuse). Left alone when `MIMALLOC_PURGE_DELAY` is set, and
/// unless the option holds a known default (so that another option layout is not written to).
fn purge_freed_memory_soon() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: both functions only read or write mimalloc's option table, which is initialised
    // before main; the index is checked against the option's known defaults first.
    unsafe {
        if MI_PURGE_DELAY_DEFAULTS.contains(&mi_option_get(MI_OPTION_PURGE_DELAY)) {
            mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
        }
    }
}

/// glibc's `mallopt` parameter for the number of malloc arenas.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const M_ARENA_MAX: c_int = -8;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" {
    fn mallopt(param: c_int, value: c_int) -> c_int;
}

/// Keeps RocksDB's C++ allocations (glibc malloc; Rust's go to mimalloc) in one malloc arena
/// instead of one per thread that allocated: memtable blocks are allocated by writers and freed
/// by flush threads, and each arena kept its own freed memory. About 30 MB less resident under
/// the agent-span load, same throughput. Left alone when `MALLOC_ARENA_MAX` or
/// `GLIBC_TUNABLES` is set.
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none()
        && std::env::var_os("GLIBC_TUNABLES").is_none()
    {
        // SAFETY: mallopt only changes a malloc setting; it is called before any other thread
        // starts. A refusal (0) leaves the default, which is fine.
        unsafe {
            mallopt(M_ARENA_MAX, 1);
        }
    }
}

/// glibc's `mallopt` parameter for the size from which an allocation gets its own mapping.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const M_MMAP_THRESHOLD: c_int = -3;

/// Allocations from this size on get their own mapping from glibc malloc (see
/// [`map_large_blocks`]).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD_BYTES: c_int = 2 * 1024 * 1024;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD_BYTES`]. glibc's default (128 KiB) rises to
/// the size of each mapped block freed, so where it lands depends on what was freed first; fixed,
/// it is the same on every run.
///
/// At 2 MiB, RocksDB's memtable arena blocks (an eighth of a memtable, at most 1 MiB) and
/// commits' write batches up to 2 MiB come from the heap, where a freed block is used again
/// without faulting its pages in afresh; larger write batches (500-span requests) get their own
/// mapping and go back to the OS when freed. At 256 KiB every arena block was a new mapping:
/// page faults were 8.8 % of the server's samples under agent load (1.0 % now). The price is
/// memory: the heap keeps a flushed memtable's blocks until the next memtables take them (the
/// idle task's `malloc_trim` gives them back once writes stop). Measured (examples/README.md,
/// "Memtable arena blocks from the heap"): about 7 % more agent spans per CPU-second in the 20-s
/// matrix and 23 % more in a 10-minute agent soak, whose peak rose from 124.6 to 145.7 MB.
/// Left alone when `MALLOC_MMAP_THRESHOLD_` or `GLIBC_TUNABLES` is set.
fn map_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none()
        && std::env::var_os("GLIBC_TUNABLES").is_none()
    {
        // SAFETY: mallopt only changes a malloc setting; it is called before any other thread
        // starts. A refusal (0) leaves the default, which is fine.
        unsafe {
            mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
        }
    }
}

fn main() -> ExitCode {
    stepline::idle::memory::no_transparent_huge_pages();
    purge_freed_memory_soon();
    one_malloc_arena();
    map_large_blocks();
    stepline::store::open_files::raise_limit();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout and are not errors; a usage error exits 1.
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if let Some(Command::Api(command)) = cli.command {
        return cli::run(command);
    }
    // One TLS crypto provider for the whole process: the exporters name ring explicitly, and
    // this keeps any other rustls user (e.g. the media store's HTTP client) on the same one,
    // whatever rustls features other crates switch on. An error means one is already set.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Logging works while the config loads, so its warnings (e.g. an unset variable) show;
    // the process-wide subscriber (with the config's level, unless RUST_LOG says otherwise,
    // and stepline's own traces when configured) is installed once it is read.
    let from_env = std::env::var("RUST_LOG").ok();
    let loading = tracing_subscriber::registry()
        .with(EnvFilter::new(
            from_env.clone().unwrap_or_else(|| "info".into()),
        ))
        .with(fmt_layer());
    let loaded = tracing::subscriber::with_default(loading, || {
        Config::load(&cli.config)
            .and_then(|config| stepline::exporter::check_tls(&config).map(|()| config))
            .and_then(|config| stepline::receiver::check_tls(&config).map(|()| config))
    });
    let config = match loaded {
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
    // Workers hand their free memory back when the idle task asks (stepline::idle).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(|| {
            let _ = stepline::idle::memory::collect_if_asked();
        })
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("stepline: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let level = from_env
        .or_else(|| config.log_level.clone())
        .unwrap_or_else(|| "info".into());
    // The OTLP exporter's gRPC channel lives on the runtime.
    let self_traces = {
        let _guard = runtime.enter();
        config.self_traces.as_ref().map(self_tracer).transpose()
    };
    let provider = match self_traces {
        Ok(provider) => provider,
        Err(e) => {
            eprintln!("stepline: cannot start its own trace exporter: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Only stepline's own spans go out, never those of the libraries exporting them.
    let otel = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("stepline"))
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("stepline", tracing::Level::INFO),
            )
    });
    tracing_subscriber::registry()
        .with(EnvFilter::new(level))
        .with(fmt_layer())
        .with(otel)
        .init();
    if let Some(traces) = &config.self_traces {
        tracing::info!(endpoint = %traces.endpoint, "exporting stepline's own traces");
    }
    let outcome = runtime.block_on(stepline::service::run(config));
    if let Some(provider) = provider {
        if let Err(e) = provider.shutdown() {
            eprintln!("stepline: flushing its own traces failed: {e}");
        }
    }
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stepline: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The tracer provider for `service.telemetry.traces`: OTLP/gRPC, batched.
fn self_tracer(config: &SelfTracesConfig) -> Result<SdkTracerProvider, String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(config.endpoint.clone())
        .build()
        .map_err(|e| e.to_string())?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("stepline")
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}
