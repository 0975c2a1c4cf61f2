//! The `map-gateway` command.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use map_config::Config;
use map_core::Gateway;
use map_gateway::transport;
use map_plugin_host::{oci, signing};

mod health;
mod install;
mod scaffold;

/// `--version`: the release, the commit it was built from (recorded by
/// `scripts/release.sh` in `MAP_GATEWAY_COMMIT`) and the plugin contract.
fn version() -> &'static str {
    let commit = option_env!("MAP_GATEWAY_COMMIT").unwrap_or("unrecorded");
    let contract = scaffold::contract_version().unwrap_or_default();
    let text = format!("{} (commit {commit}, plugin contract map-gateway:plugin@{contract})", env!("CARGO_PKG_VERSION"));
    Box::leak(text.into_boxed_str())
}

// Frames are allocated on one thread and freed on another; glibc's arenas
// contend on that (measured: ~30% of CPU under load), mimalloc does not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "map-gateway", version = version(), about = "A WebAssembly-extensible gateway for multi-agent protocols (MAP over WebSocket, HTTP/SSE and stdio)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway. Without --config it runs on the embedded defaults:
    /// 127.0.0.1:4700, data under ./data, one tenant "default" open to local peers.
    Serve {
        /// TOML configuration file (see `map-gateway config` for every field);
        /// `MAP_GATEWAY__SECTION__KEY` variables set fields over it.
        #[arg(short, long, value_name = "FILE", env = "MAP_GATEWAY_CONFIG")]
        config: Option<PathBuf>,
        /// Listen on this address instead of the configured one (port 0 picks a free port).
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        /// Keep data here instead of the configured directory.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Speak NDJSON JSON-RPC on stdin/stdout instead of listening.
        #[arg(long)]
        stdio: bool,
    },
    /// Check a configuration without serving: tenants, credentials, and every
    /// plugin it names compiled and bound to its tenants. Exits non-zero with
    /// the reason when something is wrong; writes nothing to the data directory.
    Check {
        #[arg(short, long, value_name = "FILE", env = "MAP_GATEWAY_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Print the effective configuration (defaults merged with FILE) as TOML, secrets redacted.
    Config {
        #[arg(short, long, value_name = "FILE", env = "MAP_GATEWAY_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Bridge an editor speaking ACP on stdin/stdout to a MAP agent of the
    /// gateway at --url (launch it as the editor's agent command).
    Acp {
        /// The MAP agent: its id, or a role (the first agent with it).
        #[arg(long)]
        agent: String,
        /// The gateway's MAP WebSocket.
        #[arg(long, default_value = "ws://127.0.0.1:4700/map")]
        url: String,
        /// An API key of the tenant (else MAP_GATEWAY_API_KEY; none: the anonymous tenant).
        #[arg(long, env = "MAP_GATEWAY_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
        /// A bearer token or JWT instead of an API key (else MAP_GATEWAY_TOKEN).
        #[arg(long, env = "MAP_GATEWAY_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// How long the agent's requests to the editor may stay unanswered.
        #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
        client_request_timeout_ms: u64,
        /// How long the editor's requests may wait while the agent sends nothing on their session.
        #[arg(long, default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
        agent_request_timeout_ms: u64,
        /// The largest message of the editor (and the gateway's server.max_message_bytes).
        #[arg(long, default_value_t = 8 << 20, value_parser = clap::value_parser!(u64).range(1024..))]
        max_message_bytes: u64,
    },
    /// Ask a gateway's `/readyz` (`/healthz` with --live) and exit 0 when it
    /// answers 200: a container's or a service manager's health check.
    Health {
        /// The configuration whose `server.listen` to ask (TLS: https).
        #[arg(short, long, value_name = "FILE", env = "MAP_GATEWAY_CONFIG")]
        config: Option<PathBuf>,
        /// Ask this address instead (e.g. 127.0.0.1:4700).
        #[arg(long, value_name = "ADDR")]
        addr: Option<SocketAddr>,
        /// Liveness only (`/healthz`): the process answers.
        #[arg(long)]
        live: bool,
    },
    /// Plugin development.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Create a plugin project (Rust on the plugin SDK, Python or JavaScript)
    /// that builds with one command and loads as is (two example methods, a
    /// README with the build and the [plugins.NAME] stanza).
    New {
        /// The plugin's name: its [plugins.NAME] key, crate name and method namespace.
        name: String,
        /// Create the project here instead of ./NAME (must be absent or empty).
        #[arg(long, value_name = "PATH")]
        dir: Option<PathBuf>,
        /// The SDK: plugins/sdk of a map-gateway checkout (a path dependency), or a
        /// folder of packages from scripts/package-sdks.sh; default: the checkout
        /// this binary was built from if it is there, else the language's registry.
        #[arg(long, value_name = "PATH")]
        sdk: Option<PathBuf>,
        /// The plugin's language.
        #[arg(long, value_enum, default_value = "rust")]
        lang: scaffold::Lang,
    },
    /// Make an Ed25519 key pair for signing plugins: PATH.key (secret, mode
    /// 0600) and PATH.pub (the `ed25519:…` line for `plugin_signers`).
    Keygen {
        /// Where to write the two files (without extension).
        #[arg(long, value_name = "PATH")]
        out: PathBuf,
    },
    /// Sign components and their defaults (NAME.toml beside each): writes
    /// NAME.wasm.sig beside each. A folder signs every component in it, e.g.
    /// plugins/dist, the standard plugins, for a gateway with plugin_signers.
    Sign {
        /// Components (.wasm) or folders of them.
        #[arg(required = true, value_name = "FILE|DIR")]
        paths: Vec<PathBuf>,
        /// The secret key file from `plugin keygen`.
        #[arg(long, value_name = "PATH")]
        key: PathBuf,
    },
    /// Check a component's signature against public keys (as `plugin_signers` would).
    Verify {
        /// The component (.wasm).
        file: PathBuf,
        /// A trusted key: `ed25519:…` or a .pub file (repeatable).
        #[arg(long, value_name = "KEY", required = true)]
        signer: Vec<String>,
    },
    /// Publish a component as an OCI artifact, with its defaults (NAME.toml)
    /// and signature (NAME.wasm.sig) when they are beside it.
    Push {
        /// The component (.wasm).
        file: PathBuf,
        /// Where: oci://HOST[:PORT]/REPO:TAG.
        target: String,
        /// The configuration whose [oci] section says how to reach the registry.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Speak plain HTTP to the registry (one on loopback, say).
        #[arg(long)]
        insecure: bool,
    },
    /// Copy a built component into the plugin folder (`server.plugin_dir`) as
    /// NAME.wasm; a running gateway loads it on `POST /admin/reload`.
    Install {
        /// The component (.wasm).
        file: PathBuf,
        /// The plugin's name (default: the file's name, `_` as `-`).
        #[arg(long)]
        name: Option<String>,
        /// The gateway's configuration file (default: the embedded defaults, plugin_dir plugins/dist).
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// The plugin folder, instead of the configuration's `plugin_dir`.
        #[arg(long, value_name = "DIR")]
        plugin_dir: Option<PathBuf>,
    },
}

/// `map-gateway plugin …`: make, install, sign and publish plugins.
fn plugin(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::New { name, dir, sdk, lang } => {
            let project = scaffold::create(&name, dir, sdk, lang)?;
            println!(
                "created {} in {} (extension x-{}, error codes {}–{})",
                project.name,
                project.dir.display(),
                project.name,
                project.error_base(),
                project.error_base() + 999
            );
            println!("build it:  (cd {} && {})", project.dir.display(), project.build_command());
            println!(
                "load it:   map-gateway plugin install {} --plugin-dir {}   (then POST /admin/reload?wait=true)",
                project.wasm().display(),
                project.dist().display()
            );
            Ok(())
        }
        PluginCommand::Install { file, name, config, plugin_dir } => {
            let mut config = load(config.as_ref())?;
            if let Some(dir) = plugin_dir {
                config.server.plugin_dir = dir;
            }
            let dest = install::install(&file, name, &config)?;
            println!("installed {}", dest.display());
            println!("a running gateway loads it with: {}", install::reload_command(&config));
            Ok(())
        }
        PluginCommand::Push { file, target, config, insecure } => {
            let mut oci = load(config.as_ref())?.oci;
            if insecure {
                oci.insecure.push(oci::reference(&target)?.registry().to_string());
            }
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let digest = runtime.block_on(oci::push(&oci, &file, &target))?;
            let r = oci::reference(&target)?;
            println!("pushed {target} ({digest})");
            println!("pin it with:  source = \"oci://{}/{}@{digest}\"", r.registry(), r.repository());
            Ok(())
        }
        PluginCommand::Keygen { out } => {
            let (secret, public) = signing::keygen(&out)?;
            println!("wrote {} (keep it secret) and {}", secret.display(), public.display());
            println!("trust it with:  plugin_signers = [\"{}\"]", std::fs::read_to_string(&public)?.trim());
            Ok(())
        }
        PluginCommand::Sign { paths, key } => {
            let secret = std::fs::read_to_string(&key).map_err(|e| anyhow::anyhow!("reading {}: {e}", key.display()))?;
            for sig in signing::sign_all(&paths, &secret)? {
                println!("wrote {}", sig.display());
            }
            Ok(())
        }
        PluginCommand::Verify { file, signer } => {
            let (key, digest) = signing::verify_file(&file, &signer)?;
            println!("{}: signed by key {key} (sha256 {digest})", file.display());
            Ok(())
        }
    }
}

fn load(path: Option<&PathBuf>) -> anyhow::Result<Config> {
    match path {
        Some(p) => Config::load(p),
        None => Config::from_env(),
    }
}

fn main() -> std::process::ExitCode {
    // An error of the user's (a missing file, a refused plugin) is one line;
    // a backtrace is for bugs (a panic, with RUST_BACKTRACE) or asked for with
    // RUST_LIB_BACKTRACE=1. Unset, errors capture none: RUST_BACKTRACE alone
    // would make every error the gateway builds while serving take one.
    let debug = std::env::var_os("RUST_LIB_BACKTRACE").is_some_and(|v| v != "0");
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if debug => {
            eprintln!("error: {e:?}");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Check { config } => {
            let config = load(config.as_ref())?;
            // Its result is what it prints: warnings only (the scratch store it
            // loads plugins on would log its migrations), unless asked for.
            if std::env::var_os("MAP_GATEWAY_LOG").is_none() {
                std::env::set_var("MAP_GATEWAY_LOG", "warn");
            }
            // Its log format; no traces for a check.
            let logs = map_config::TelemetryConfig { otlp_endpoint: String::new(), ..config.telemetry.clone() };
            let _logs = map_gateway::telemetry::init(&logs)?;
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            println!("{}", runtime.block_on(map_gateway::app::check(config))?);
            Ok(())
        }
        Command::Config { config } => {
            print!("{}", load(config.as_ref())?.to_redacted_toml()?);
            Ok(())
        }
        Command::Acp { agent, url, api_key, token, client_request_timeout_ms, agent_request_timeout_ms, max_message_bytes } => {
            // stdout carries the protocol: logs go to stderr only (warnings by default).
            let logs = map_config::TelemetryConfig::default();
            if std::env::var_os("MAP_GATEWAY_LOG").is_none() {
                std::env::set_var("MAP_GATEWAY_LOG", "warn");
            }
            let _logs = map_gateway::telemetry::init(&logs)?;
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let opts = map_gateway::acp::bridge::Options {
                agent,
                client_request_timeout: Duration::from_millis(client_request_timeout_ms),
                agent_request_timeout: Duration::from_millis(agent_request_timeout_ms),
                max_message_bytes: usize::try_from(max_message_bytes).unwrap_or(usize::MAX),
            };
            let served = runtime.block_on(map_gateway::acp::serve_stdio(&url, opts, api_key, token));
            runtime.shutdown_timeout(Duration::from_secs(1));
            served
        }
        Command::Plugin { command } => plugin(command),
        Command::Health { config, addr, live } => {
            let config = load(config.as_ref())?;
            let addr = addr.unwrap_or(config.server.listen);
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            println!("{}", runtime.block_on(health::probe(addr, config.tls.enabled(), live))?);
            Ok(())
        }
        Command::Serve { config: config_path, listen, data_dir, stdio } => {
            let mut config = load(config_path.as_ref())?;
            if let Some(l) = listen {
                config.server.listen = l;
            }
            if let Some(d) = data_dir {
                config.server.data_dir = d;
            }
            // Before the runtime: the trace exporter runs on a thread of its own.
            let telemetry = map_gateway::telemetry::init(&config.telemetry)?;
            let runtime = map_gateway::memory::release_when_idle(tokio::runtime::Builder::new_multi_thread().enable_all()).build()?;
            let served = runtime.block_on(serve(config, config_path, stdio));
            // Tasks still running (a stdin read, say) do not hold the exit up.
            runtime.shutdown_timeout(Duration::from_secs(1));
            telemetry.shutdown();
            served
        }
    }
}

async fn serve(config: Config, config_path: Option<PathBuf>, stdio: bool) -> anyhow::Result<()> {
    let listen = config.server.listen;
    let tls = match config.tls.enabled() {
        true => Some(transport::tls::Tls::new(&config.tls)?),
        false => None,
    };
    let gateway = map_gateway::app::start(config, config_path).await?;
    map_gateway::memory::spawn_purge_ticks();
    spawn_reload_on_hangup(gateway.clone(), tls.clone());
    if stdio {
        transport::stdio::serve(gateway).await?;
        return Ok(());
    }
    // Listening for SIGTERM before the first connection is served: a signal
    // sent right after an answer is a graceful stop, not the default kill.
    let stop = shutdown_signal()?;
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(%addr, tls = tls.is_some(), tenants = gateway.config.tenants.len(), "gateway ready");
    // Tests and scripts wait for this line.
    println!("map-gateway listening on {scheme}://{addr}");
    if let Some(tls) = &tls {
        tls.watch();
    }
    std::io::stdout().flush()?;
    tokio::select! {
        r = transport::serve(gateway.clone(), listener, tls) => r?,
        _ = stop => {}
    }
    // The listener is closed. Connections answer what is in flight and close.
    let drain = Duration::from_secs(gateway.config.server.drain_secs);
    tracing::info!(drain_secs = drain.as_secs(), "shutting down: no new connections or requests; calls in flight finish");
    gateway.drain.begin();
    match gateway.drain.closed(drain).await {
        0 => tracing::info!("every connection closed; exiting"),
        left => tracing::warn!(left, "drain time over with connections still open; exiting"),
    }
    gateway.stopped();
    Ok(())
}

/// SIGHUP re-reads the configuration and swaps plugins in the background,
/// like `POST /admin/reload`, and reads the TLS certificate and key again.
fn spawn_reload_on_hangup(gateway: std::sync::Arc<Gateway>, tls: Option<std::sync::Arc<transport::tls::Tls>>) {
    #[cfg(unix)]
    tokio::spawn(async move {
        let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else { return };
        while hup.recv().await.is_some() {
            if let Some(Err(e)) = tls.as_ref().map(|t| t.reload()) {
                tracing::error!(error = %format!("{e:#}"), "TLS reload failed; the previous certificate stays");
            }
            // In the background, as `POST /admin/reload`; the reload logs how it ended.
            let job = gateway.start_reload();
            tracing::info!(reload = %job.id, "SIGHUP: reloading the configuration");
        }
    });
}

/// Resolves at Ctrl-C or SIGTERM; the handlers are installed by the time it returns.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        Ok(async move {
            tokio::select! {
                _ = int.recv() => {},
                _ = term.recv() => {},
            }
        })
    }
    #[cfg(not(unix))]
    Ok(async move {
        let _ = tokio::signal::ctrl_c().await;
    })
}
