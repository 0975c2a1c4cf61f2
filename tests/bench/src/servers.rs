//! The three servers under test: start one on a loopback port, wait for its
//! ready line, read its resident memory and CPU time, stop it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    Reference,
    Gateway,
    Ceiling,
}

impl Target {
    pub const ALL: [Target; 3] = [Target::Reference, Target::Gateway, Target::Ceiling];

    pub fn name(self) -> &'static str {
        match self {
            Target::Reference => "reference",
            Target::Gateway => "gateway",
            Target::Ceiling => "ceiling",
        }
    }

    pub fn parse(s: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == s || (s == "ref" && *t == Target::Reference) || (s == "gw" && *t == Target::Gateway))
    }
}

/// Where the pieces are.
#[derive(Clone, Debug)]
pub struct Paths {
    pub workspace: PathBuf,
    pub gateway_bin: PathBuf,
    pub ceiling_bin: PathBuf,
    pub plugin_dir: PathBuf,
    pub reference_dir: PathBuf,
    /// Scratch space of this run: configs, gateway data, logs.
    pub scratch: PathBuf,
}

/// A server we started, or one given by URL.
pub struct Server {
    pub target: Target,
    child: Option<Child>,
    pub pid: Option<u32>,
    pub port: u16,
    /// From spawn to the ready line.
    pub ready_after: Duration,
    /// The server's stderr.
    pub log: PathBuf,
}

impl Server {
    /// Endpoint for agents.
    pub fn agent_url(&self) -> String {
        match self.target {
            Target::Reference => format!("ws://127.0.0.1:{}/agent", self.port),
            Target::Gateway => format!("ws://127.0.0.1:{}/map", self.port),
            Target::Ceiling => format!("ws://127.0.0.1:{}/map", self.port),
        }
    }

    /// Endpoint for clients (the subscriber).
    pub fn client_url(&self) -> String {
        match self.target {
            Target::Reference => format!("ws://127.0.0.1:{}/client", self.port),
            _ => self.agent_url(),
        }
    }

    /// A server somebody else started (for profiling): `ws://127.0.0.1:PORT/…`.
    pub fn external(target: Target, url: &str, pid: Option<u32>) -> Result<Server, String> {
        let port = port_in(url).ok_or_else(|| format!("no port in {url}"))?;
        Ok(Server { target, child: None, pid, port, ready_after: Duration::ZERO, log: PathBuf::new() })
    }

    pub fn start(target: Target, paths: &Paths, tag: &str) -> Result<Server, String> {
        Server::start_with(target, paths, tag, "", "")
    }

    /// `start`, with these lines in the gateway's `[server]` section and these sections after it.
    pub fn start_with(target: Target, paths: &Paths, tag: &str, server_lines: &str, sections: &str) -> Result<Server, String> {
        std::fs::create_dir_all(&paths.scratch).map_err(|e| format!("{}: {e}", paths.scratch.display()))?;
        let log = paths.scratch.join(format!("{}-{tag}.log", target.name()));
        let log_file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut cmd = match target {
            Target::Gateway => {
                let config = paths.scratch.join("gateway.toml");
                // One data_dir per benchmark run: the first start compiles the plugins
                // (cold cache), later starts reuse the compiled artifacts.
                let text = format!(
                    "[server]\ndata_dir = {:?}\nplugin_dir = {:?}\n{server_lines}\n\n[limits]\noutbox_frames = 4096\n\n{sections}\n",
                    paths.scratch.join("gateway-data").display().to_string(),
                    paths.plugin_dir.display().to_string()
                );
                std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
                if !paths.gateway_bin.exists() {
                    return Err(format!("{} is missing (cargo build --release -p map-gateway)", paths.gateway_bin.display()));
                }
                let mut c = Command::new(&paths.gateway_bin);
                c.arg("serve").arg("--config").arg(&config).arg("--listen").arg("127.0.0.1:0");
                c.env("MAP_GATEWAY_LOG", std::env::var("MAP_GATEWAY_LOG").unwrap_or_else(|_| "warn".into()));
                c
            }
            Target::Reference => {
                let mut c = Command::new("node");
                c.arg("serve.mjs").arg("mapserver").arg("0").current_dir(&paths.reference_dir);
                c
            }
            Target::Ceiling => {
                if !paths.ceiling_bin.exists() {
                    return Err(format!("{} is missing (cargo build --release -p map-bench)", paths.ceiling_bin.display()));
                }
                let mut c = Command::new(&paths.ceiling_bin);
                c.arg("--listen").arg("127.0.0.1:0");
                c
            }
        };
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::from(log_file));
        let started = Instant::now();
        let mut child = cmd.spawn().map_err(|e| format!("starting {}: {e}", target.name()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<String>();
        // Keep draining stdout so that the server never blocks on it.
        std::thread::spawn(move || {
            let mut first = true;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if first && line.contains("listening on") {
                    first = false;
                    let _ = tx.send(line);
                }
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(180)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                // The error a failed start ends with (the gateway's one `error: …`
                // line; another server's `Error: …` and its causes, not a backtrace
                // after it); else the last lines.
                let shown = match lines.iter().rposition(|l| l.starts_with("error: ") || l.starts_with("Error: ")) {
                    Some(at) => lines[at..].iter().take_while(|l| !l.starts_with("Stack backtrace:")).take(15).copied().collect::<Vec<_>>(),
                    None => lines[lines.len().saturating_sub(15)..].to_vec(),
                };
                return Err(format!("{} printed no ready line (log {}):\n{}", target.name(), log.display(), shown.join("\n").trim_end()));
            }
        };
        let ready_after = started.elapsed();
        let port = port_in(&line).ok_or_else(|| format!("no port in ready line {line:?}"))?;
        let pid = child.id();
        Ok(Server { target, child: Some(child), pid: Some(pid), port, ready_after, log })
    }

    /// The last lines of the server's stderr (empty for a server given by URL).
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(lines).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    /// VmRSS in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid?)).ok()?;
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok())
    }

    /// User + system CPU time of the server so far.
    pub fn cpu(&self) -> Option<Duration> {
        cpu_of(&format!("/proc/{}/stat", self.pid?))
    }

    /// SIGKILL, as a crash would end it: no graceful stop, nothing released.
    pub fn kill9(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn stop(mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `…127.0.0.1:PORT…` → PORT.
fn port_in(s: &str) -> Option<u16> {
    let at = s.find("127.0.0.1:")? + "127.0.0.1:".len();
    let digits: String = s[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// utime + stime of `/proc/…/stat`.
pub fn cpu_of(stat_path: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(stat_path).ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_micros((utime + stime) * 1_000_000 / hz))
}

/// The generator's own CPU time.
pub fn self_cpu() -> Option<Duration> {
    cpu_of("/proc/self/stat")
}

/// VmRSS of this process, in KiB.
pub fn self_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok())
}

/// CPU of the server and of this process over a stretch of wall time.
pub struct Cpu {
    server: Option<Duration>,
    me: Option<Duration>,
    pub at: Instant,
}

impl Cpu {
    pub fn start(server: &Server) -> Cpu {
        Cpu { server: server.cpu(), me: self_cpu(), at: Instant::now() }
    }

    /// (server, generator) in cores.
    pub fn cores(&self, server: &Server) -> (Option<f64>, Option<f64>) {
        let wall = self.at.elapsed().as_secs_f64();
        let c = |a: Option<Duration>, b: Option<Duration>| Some((b? - a?).as_secs_f64() / wall);
        (c(self.server, server.cpu()), c(self.me, self_cpu()))
    }
}

/// `npm ci` (or `npm install` without a lock file) in the reference folder
/// when its node_modules is missing.
pub fn ensure_reference(dir: &Path) -> Result<(), String> {
    if !dir.join("serve.mjs").exists() {
        return Err(format!("no reference server at {} (set --reference-dir)", dir.display()));
    }
    if dir.join("node_modules/@multi-agent-protocol/sdk").exists() && dir.join("node_modules/ws").exists() {
        return Ok(());
    }
    let verb = if dir.join("package-lock.json").exists() { "ci" } else { "install" };
    eprintln!("# npm {verb} in {} (node_modules missing; takes a minute once)", dir.display());
    let status = Command::new("npm")
        .args([verb, "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("npm: {e}"))?;
    if !status.success() {
        return Err(format!("npm {verb} in {} failed ({status})", dir.display()));
    }
    Ok(())
}

/// Raise the soft limit of open files to the hard limit (10,000 idle sessions need it).
pub fn raise_nofile() -> u64 {
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur = r.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &r);
            return r.rlim_cur;
        }
    }
    0
}

/// Paths for a test that starts the real gateway: its own scratch folder
/// and plugin folder (`plugins`: files copied from plugins/dist). The
/// gateway is `MAP_GATEWAY_BIN`, else the newer of the debug and release
/// builds in the target folder.
#[cfg(test)]
pub fn test_paths(tag: &str, plugins: &[&str]) -> Paths {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace");
    let scratch = std::env::temp_dir().join(format!("map-bench-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let plugin_dir = scratch.join("plugins");
    std::fs::create_dir_all(&plugin_dir).expect("plugin folder");
    for f in plugins {
        let from = workspace.join("plugins/dist").join(f);
        std::fs::copy(&from, plugin_dir.join(f)).unwrap_or_else(|e| panic!("{}: {e} (run scripts/build-plugins.sh)", from.display()));
    }
    // The test binary is <target>/<profile>/deps/…
    let exe = std::env::current_exe().expect("test binary");
    let targets = [exe.ancestors().nth(3).map(Path::to_path_buf), Some(workspace.join("target"))];
    let gateway_bin = std::env::var_os("MAP_GATEWAY_BIN").map(PathBuf::from).unwrap_or_else(|| {
        let built = targets.iter().flatten().flat_map(|t| [t.join("debug/map-gateway"), t.join("release/map-gateway")]);
        built
            .filter_map(|b| Some((std::fs::metadata(&b).ok()?.modified().ok()?, b)))
            .max()
            .map(|(_, b)| b)
            .expect("no map-gateway build in the target folder: cargo build -p map-gateway (or set MAP_GATEWAY_BIN)")
    });
    Paths { gateway_bin, ceiling_bin: PathBuf::new(), plugin_dir, reference_dir: PathBuf::new(), workspace, scratch }
}
