//! `sandy doctor --selftest`: canary escapes inside a real `sandy run`.
//!
//! The doctor builds a throw-away world (a fake home with `~/.ssh/id_canary`, a project
//! with `.git/hooks` and `.git/config`, a directory outside the project), starts outside
//! targets (two idle processes, abstract and pathname Unix listeners, TCP and UDP
//! sockets on 127.0.0.1), then runs `sandy run [--block-net] -- SANDY __escape ...` in
//! that world. The escape helper ([`escape`]) only attempts and reports the kernel's
//! answers; every check is judged from the host side where it can be (the canary's text
//! in the output, the file on disk, the process's state, a connection or datagram
//! received). Everything is removed and every helper killed when the self-test returns,
//! pass or fail.

// The self-test builds its world in a fresh directory of its own (`sandy-selftest-*`) and
// reads back only what it made there; the canaries' writable project is a directory below
// it, never its files. The world is removed by `tempfile` (std's `remove_dir_all`, which
// follows no link).
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::errno::Errno;
use sandy_linux::diagnose;
use serde_json::{json, Value};

use crate::args::EscapeArgs;
use crate::doctor::{describe_status, wait_deadline};
use crate::error::SandyError;

/// How long one sandboxed run of the escape helper may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(15);

/// Where the world may be made: not under /tmp, /run or /dev/shm, which the sandbox
/// replaces (a home there would be out of sight rather than protected).
const HIDDEN_INSIDE: [&str; 4] = ["/tmp", "/var/tmp", "/run", "/dev/shm"];

/// A check's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Blocked,
    Escaped,
    Untestable,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Blocked => "blocked",
            Status::Escaped => "ESCAPED",
            Status::Untestable => "untestable",
        }
    }
}

/// One canary escape and its verdict.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub description: String,
    /// The `sandy run` flags it ran under (`default` or `block-net`).
    pub run: &'static str,
    pub status: Status,
    pub detail: String,
}

/// Runs every check. `block_net` is `Err(reason)` when `--block-net` cannot be enforced
/// here. Fails only when the world itself cannot be built.
pub fn selftest(
    exe: &Path,
    unprotected_canary: bool,
    block_net: Result<(), String>,
    tier: sandy_policy::Tier,
) -> Result<Vec<Check>, SandyError> {
    let world = World::create(unprotected_canary)?;
    let targets = Targets::start(&world);
    let mut checks = Vec::new();

    // The default sandbox: files, processes, Unix sockets, the terminal.
    let mut args: Vec<OsString> = vec![
        "--read-secret".into(),
        world.secret.clone().into(),
        "--write-outside".into(),
        world.outside_target.clone().into(),
        "--plant-hook".into(),
        world.hook.clone().into(),
        "--truncate".into(),
        world.config.clone().into(),
        "--tiocsti".into(),
    ];
    if let Ok(h) = &targets.signal_target {
        args.extend(["--signal-pid".into(), h.pid().to_string().into()]);
    }
    if let Ok(h) = &targets.ptrace_target {
        args.extend(["--ptrace-pid".into(), h.pid().to_string().into()]);
    }
    if let Ok((_, name)) = &targets.abstract_socket {
        args.extend(["--abstract-socket".into(), name.into()]);
    }
    if let Ok((_, path, _)) = &targets.path_socket {
        args.extend(["--path-socket".into(), path.clone().into()]);
    }
    let run = sandbox_run(exe, &world, false, tier, &args, "default");
    judge_default(&world, &targets, &run, unprotected_canary, &mut checks);
    // The weaker tier keeps protected paths by putting them back after the run.
    if tier == sandy_policy::Tier::Landlock {
        for c in checks.iter_mut().filter(|c| {
            c.status == Status::Blocked
                && matches!(c.name, "plant_git_hook" | "truncate_git_config")
                && c.detail.starts_with("it succeeded inside")
        }) {
            c.detail = "it succeeded inside, and Sandy restored it after the run \
                        (--tier landlock has no read-only mount)"
                .to_owned();
        }
    }

    // --block-net: the host's loopback services and MPTCP.
    match block_net {
        Ok(()) => {
            let mut args: Vec<OsString> = vec!["--mptcp".into()];
            if let Ok((_, port)) = &targets.tcp {
                args.extend(["--tcp-port".into(), port.to_string().into()]);
            }
            if let Ok((_, port)) = &targets.udp {
                args.extend([
                    "--udp-port".into(),
                    port.to_string().into(),
                    "--udp-payload".into(),
                    world.token.clone().into(),
                ]);
            }
            let run = sandbox_run(exe, &world, true, tier, &args, "block-net");
            judge_block_net(&targets, &run, &mut checks);
        }
        Err(reason) => {
            for (name, description) in BLOCK_NET_CHECKS {
                checks.push(Check {
                    name,
                    description: description.to_owned(),
                    run: "block-net",
                    status: Status::Untestable,
                    detail: format!("--block-net is unavailable here: {reason}"),
                });
            }
        }
    }
    drop(targets);
    drop(world);
    Ok(checks)
}

const BLOCK_NET_CHECKS: [(&str, &str); 3] = [
    (
        "tcp_loopback",
        "connect to a TCP listener on the host's 127.0.0.1",
    ),
    (
        "udp_loopback",
        "send a UDP datagram to the host's 127.0.0.1",
    ),
    ("mptcp_socket", "create an MPTCP socket"),
];

// ---------------------------------------------------------------------------------------
// The world and the outside targets.

/// The throw-away world, removed when dropped.
struct World {
    dir: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
    tmp: PathBuf,
    /// The canary the read check targets (`~/.ssh/id_canary`, or inside the project).
    secret: PathBuf,
    /// A file outside the project the write check tries to create.
    outside_target: PathBuf,
    hook: PathBuf,
    config: PathBuf,
    config_bytes: Vec<u8>,
    /// Random; the canary's contents and the UDP payload.
    token: String,
}

impl World {
    fn create(unprotected_canary: bool) -> Result<World, SandyError> {
        let io = |step| move |source| SandyError::Io { step, source };
        let dir = make_world_dir()?;
        let root = dir.path().to_path_buf();
        let home = root.join("home");
        let ssh = home.join(".ssh");
        let project = home.join("project");
        let git = project.join(".git");
        let hooks = git.join("hooks");
        let tmp = root.join("tmp");
        let outside = root.join("outside");
        for d in [&home, &ssh, &project, &git, &hooks, &tmp, &outside] {
            std::fs::create_dir_all(d).map_err(io("cannot build the self-test world"))?;
        }
        std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o700))
            .map_err(io("cannot build the self-test world"))?;
        let token = format!("SANDY-CANARY-{}", random_hex());
        let canary = ssh.join("id_canary");
        write_file(&canary, token.as_bytes(), 0o600)?;
        let config_bytes = b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\
                             \tbare = false\n# sandy doctor --selftest\n"
            .to_vec();
        let config = git.join("config");
        write_file(&config, &config_bytes, 0o644)?;
        write_file(&git.join("HEAD"), b"ref: refs/heads/main\n", 0o644)?;
        write_file(&outside.join("notes.txt"), b"outside the project\n", 0o644)?;
        let secret = if unprotected_canary {
            let inside = project.join("id_canary");
            write_file(&inside, token.as_bytes(), 0o600)?;
            inside
        } else {
            canary
        };
        Ok(World {
            home,
            project,
            tmp,
            secret,
            outside_target: outside.join("escaped"),
            hook: hooks.join("pre-commit"),
            config,
            config_bytes,
            token,
            dir,
        })
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }
}

fn write_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), SandyError> {
    let io = |source| SandyError::Io {
        step: "cannot build the self-test world",
        source,
    };
    std::fs::write(path, contents).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)
}

/// A temporary directory outside what the sandbox replaces, in the first place that works:
/// `TMPDIR`; Sandy's own per-user cache (`$XDG_CACHE_HOME/sandy`, else `~/.cache/sandy`),
/// created (0700) when absent, since the user owns it; `/var/lib` (as root). The error
/// names every place tried and why it did not work.
fn make_world_dir() -> Result<tempfile::TempDir, SandyError> {
    use std::os::unix::fs::DirBuilderExt;
    let visible = |p: &Path| p.is_absolute() && !HIDDEN_INSIDE.iter().any(|h| p.starts_with(h));
    // (place, created by Sandy when absent)
    let mut candidates: Vec<(PathBuf, bool)> = Vec::new();
    let mut tried: Vec<String> = Vec::new();
    match std::env::var_os("TMPDIR").map(PathBuf::from) {
        Some(t) => candidates.push((t, false)),
        None => tried.push("TMPDIR (not set)".to_owned()),
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    match cache {
        Some(c) => candidates.push((c.join("sandy"), true)),
        None => tried.push("Sandy's cache (neither XDG_CACHE_HOME nor HOME is set)".to_owned()),
    }
    candidates.push((PathBuf::from("/var/lib"), false));
    for (base, create) in candidates {
        let base = std::fs::canonicalize(&base).unwrap_or(base);
        if !visible(&base) {
            tried.push(format!(
                "{} (private inside the sandbox, or not absolute)",
                sandy_policy::text::Tilde(&base)
            ));
            continue;
        }
        if create {
            if let Err(e) = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&base)
            {
                tried.push(format!("{} ({e})", sandy_policy::text::Tilde(&base)));
                continue;
            }
        }
        match tempfile::Builder::new()
            .prefix("sandy-selftest-")
            .tempdir_in(&base)
        {
            Ok(dir) => return Ok(dir),
            Err(e) => tried.push(format!("{} ({e})", sandy_policy::text::Tilde(&base))),
        }
    }
    Err(SandyError::NoPlace {
        what: "the self-test world",
        tried: tried.join(", "),
    })
}

fn random_hex() -> String {
    let mut bytes = [0u8; 12];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    if !filled {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for (i, b) in nanos
            .to_le_bytes()
            .iter()
            .chain(std::process::id().to_le_bytes().iter())
            .enumerate()
            .take(bytes.len())
        {
            bytes[i] = *b;
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A helper process, killed and reaped when dropped.
struct Helper(Child);

impl Helper {
    fn pid(&self) -> i32 {
        i32::try_from(self.0.id()).unwrap_or(i32::MAX)
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_idle() -> Result<Helper, String> {
    Command::new("/proc/self/exe")
        .arg0("sandy")
        .arg("__idle")
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Helper)
        .map_err(|e| format!("cannot start an outside process: {e}"))
}

/// Everything outside the sandbox the checks aim at. A target that could not be set up
/// makes its check untestable, with the reason.
struct Targets {
    signal_target: Result<Helper, String>,
    ptrace_target: Result<Helper, String>,
    abstract_socket: Result<(UnixListener, String), String>,
    /// The listener, its path in the host's /tmp, and the directory holding it.
    path_socket: Result<(UnixListener, PathBuf, tempfile::TempDir), String>,
    tcp: Result<(TcpListener, u16), String>,
    udp: Result<(UdpSocket, u16), String>,
}

impl Targets {
    fn start(world: &World) -> Targets {
        let abstract_socket = (|| {
            let name = format!("sandy-selftest-{}-{}", std::process::id(), world.token);
            let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
            let l = UnixListener::bind_addr(&addr)?;
            l.set_nonblocking(true)?;
            Ok((l, name))
        })()
        .map_err(|e: std::io::Error| format!("cannot listen on an abstract socket: {e}"));
        let path_socket = (|| {
            let dir = tempfile::Builder::new()
                .prefix("sandy-selftest-")
                .tempdir_in("/tmp")?;
            let path = dir.path().join("socket");
            let l = UnixListener::bind(&path)?;
            l.set_nonblocking(true)?;
            Ok((l, path, dir))
        })()
        .map_err(|e: std::io::Error| format!("cannot listen on a socket in /tmp: {e}"));
        let tcp = (|| {
            let l = TcpListener::bind(("127.0.0.1", 0))?;
            l.set_nonblocking(true)?;
            let port = l.local_addr()?.port();
            Ok((l, port))
        })()
        .map_err(|e: std::io::Error| format!("cannot listen on 127.0.0.1: {e}"));
        let udp = (|| {
            let s = UdpSocket::bind(("127.0.0.1", 0))?;
            s.set_nonblocking(true)?;
            let port = s.local_addr()?.port();
            Ok((s, port))
        })()
        .map_err(|e: std::io::Error| format!("cannot bind a UDP socket on 127.0.0.1: {e}"));
        Targets {
            signal_target: spawn_idle(),
            ptrace_target: spawn_idle(),
            abstract_socket,
            path_socket,
            tcp,
            udp,
        }
    }
}

// ---------------------------------------------------------------------------------------
// The sandboxed run.

/// What the escape helper reported.
#[derive(Debug, Clone)]
struct Attempt {
    ok: bool,
    errno: Option<String>,
    answer: String,
}

/// One `sandy run` of the escape helper.
struct RunOutcome {
    /// `None` when the helper started; else why the run tells nothing.
    failure: Option<String>,
    attempts: BTreeMap<String, Attempt>,
    /// stdout and stderr, raw, for canary text.
    output: Vec<u8>,
}

fn sandbox_run(
    exe: &Path,
    world: &World,
    block_net: bool,
    tier: sandy_policy::Tier,
    escape_args: &[OsString],
    tag: &str,
) -> RunOutcome {
    let failed = |failure: String| RunOutcome {
        failure: Some(failure),
        attempts: BTreeMap::new(),
        output: Vec::new(),
    };
    let out_path = world.root().join(format!("{tag}.stdout"));
    let err_path = world.root().join(format!("{tag}.stderr"));
    let files = std::fs::File::create(&out_path)
        .and_then(|o| std::fs::File::create(&err_path).map(|e| (o, e)));
    let (out, err) = match files {
        Ok(f) => f,
        Err(e) => return failed(format!("cannot create the output files: {e}")),
    };
    let mut cmd = Command::new(exe);
    cmd.arg0("sandy").arg("run");
    if block_net {
        cmd.arg("--block-net");
    }
    if tier == sandy_policy::Tier::Landlock {
        cmd.args(["--tier", "landlock"]);
    }
    cmd.arg("--")
        .arg(exe)
        .arg("__escape")
        .args(escape_args)
        .current_dir(&world.project)
        .env_clear()
        .env("HOME", &world.home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("TMPDIR", &world.tmp)
        .env("LANG", "C.UTF-8")
        // Never the caller's terminal: an unfiltered TIOCSTI must not type into it.
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    let status = match cmd.spawn() {
        Ok(mut child) => wait_deadline(&mut child, RUN_TIMEOUT),
        Err(e) => return failed(format!("cannot start `sandy run`: {e}")),
    };
    let stdout = std::fs::read(&out_path).unwrap_or_default();
    let stderr = std::fs::read(&err_path).unwrap_or_default();
    let mut attempts = BTreeMap::new();
    let mut ready = false;
    for line in String::from_utf8_lossy(&stdout).lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["ready"] == Value::Bool(true) {
            ready = true;
        } else if let Some(name) = v["attempt"].as_str() {
            attempts.insert(
                name.to_owned(),
                Attempt {
                    ok: v["ok"].as_bool().unwrap_or(false),
                    errno: v["errno"].as_str().map(str::to_owned),
                    answer: v["answer"].as_str().unwrap_or("").to_owned(),
                },
            );
        }
    }
    let flags = if block_net { "run --block-net" } else { "run" };
    let failure = match status {
        Ok(Some(_)) if ready => None,
        Ok(Some(status)) => Some(format!(
            "`sandy {flags}` did not start the escape helper ({}){}",
            describe_status(status),
            String::from_utf8_lossy(&stderr)
                .lines()
                .next()
                .map(|l| format!(": {l}"))
                .unwrap_or_default()
        )),
        Ok(None) => Some(format!(
            "`sandy {flags}` did not finish within {} s",
            RUN_TIMEOUT.as_secs()
        )),
        Err(e) => Some(format!("cannot wait for `sandy {flags}`: {e}")),
    };
    let mut output = stdout;
    output.extend_from_slice(&stderr);
    RunOutcome {
        failure,
        attempts,
        output,
    }
}

// ---------------------------------------------------------------------------------------
// Judgement, from the host side where possible.

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// A process's one-letter state and tracer, `None` when it is gone.
fn process_state(pid: i32) -> Option<(char, i64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let state = rest.trim_start().chars().next()?;
    if matches!(state, 'Z' | 'X') {
        return None;
    }
    let tracer = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Some((state, tracer))
}

/// What the host sees of an outside process: `Some(reason)` if it was disturbed.
fn disturbed(helper: &Helper) -> Option<String> {
    match process_state(helper.pid()) {
        None => Some("the outside process is gone".to_owned()),
        Some((state @ ('T' | 't'), _)) => Some(format!("the outside process is stopped ({state})")),
        Some((_, tracer)) if tracer != 0 => {
            Some(format!("the outside process is traced by {tracer}"))
        }
        Some(_) => None,
    }
}

/// Whether a non-blocking listener has a pending connection.
fn accepted(result: std::io::Result<()>) -> Result<bool, String> {
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(format!("cannot check the host side: {e}")),
    }
}

fn answer(a: &Attempt) -> String {
    if a.ok {
        "it succeeded inside, but nothing reached the host".to_owned()
    } else {
        a.answer.clone()
    }
}

struct Judge<'a> {
    run: &'a RunOutcome,
    run_name: &'static str,
    checks: &'a mut Vec<Check>,
}

impl Judge<'_> {
    fn push(&mut self, name: &'static str, description: &str, status: Status, detail: String) {
        self.checks.push(Check {
            name,
            description: description.to_owned(),
            run: self.run_name,
            status,
            detail,
        });
    }

    /// Judges one check: `host` is the host-side verdict given the helper's attempts
    /// (`Ok(Some(reason))` escaped, `Ok(None)` nothing seen, `Err` cannot tell).
    fn check(
        &mut self,
        name: &'static str,
        description: &str,
        attempts: &[&str],
        host: impl FnOnce(&[&Attempt]) -> Result<Option<String>, String>,
    ) {
        if let Some(failure) = &self.run.failure {
            let detail = failure.clone();
            return self.push(name, description, Status::Untestable, detail);
        }
        let found: Vec<&Attempt> = attempts
            .iter()
            .filter_map(|a| self.run.attempts.get(*a))
            .collect();
        if found.len() != attempts.len() {
            let detail = "the escape helper did not report this attempt".to_owned();
            return self.push(name, description, Status::Untestable, detail);
        }
        let (status, detail) = match host(&found) {
            Ok(Some(reason)) => (Status::Escaped, reason),
            Ok(None) => (
                Status::Blocked,
                found
                    .iter()
                    .map(|a| answer(a))
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            Err(reason) => (Status::Untestable, reason),
        };
        self.push(name, description, status, detail);
    }

    /// A check whose target could not be set up.
    fn untestable(&mut self, name: &'static str, description: &str, reason: &str) {
        self.push(name, description, Status::Untestable, reason.to_owned());
    }
}

/// An attempt that only the helper can observe, judged by the errno the seccomp floor
/// returns (`EPERM`); any other answer means the call was not filtered.
fn seccomp_answer(a: &Attempt, unfiltered: &str) -> Result<Option<String>, String> {
    match (a.ok, a.errno.as_deref()) {
        (true, _) => Ok(Some("the call succeeded inside the sandbox".to_owned())),
        (false, Some("EPERM")) => Ok(None),
        (false, Some(errno)) if errno == unfiltered || unfiltered.is_empty() => Ok(Some(format!(
            "{}: the seccomp floor did not filter the call",
            a.answer
        ))),
        (false, _) => Err(format!("inconclusive answer: {}", a.answer)),
    }
}

fn judge_default(
    world: &World,
    targets: &Targets,
    run: &RunOutcome,
    unprotected_canary: bool,
    checks: &mut Vec<Check>,
) {
    let mut j = Judge {
        run,
        run_name: "default",
        checks,
    };
    let token = world.token.as_bytes();
    let description = if unprotected_canary {
        "read a canary placed inside the project (--selftest-unprotected-canary: must escape)"
    } else {
        "read a secret outside the project (~/.ssh/id_canary)"
    };
    j.check("read_secret", description, &["read_secret"], |_| {
        Ok(contains(&run.output, token)
            .then(|| "the canary's contents came out of the sandbox".to_owned()))
    });
    j.check(
        "write_outside",
        "create a file outside the project",
        &["write_outside"],
        |_| {
            Ok(std::fs::symlink_metadata(&world.outside_target)
                .is_ok()
                .then(|| format!("{} was created", world.outside_target.display())))
        },
    );
    j.check(
        "plant_git_hook",
        "plant a git hook (.git/hooks/pre-commit)",
        &["plant_hook"],
        |_| {
            Ok(std::fs::symlink_metadata(&world.hook)
                .is_ok()
                .then(|| format!("{} was created", world.hook.display())))
        },
    );
    j.check(
        "truncate_git_config",
        "truncate the protected .git/config",
        &["truncate"],
        |_| match std::fs::read(&world.config) {
            Ok(bytes) if bytes == world.config_bytes => Ok(None),
            Ok(_) => Ok(Some(".git/config was changed".to_owned())),
            Err(e) => Ok(Some(format!(".git/config cannot be read any more: {e}"))),
        },
    );
    j.check(
        "tiocsti",
        "inject keystrokes with ioctl(TIOCSTI)",
        &["tiocsti"],
        |a| seccomp_answer(a[0], "ENOTTY"),
    );
    match &targets.signal_target {
        Ok(helper) => j.check(
            "signal_outside",
            "stop an outside process with kill(SIGSTOP)",
            &["signal_outside"],
            |a| {
                Ok(disturbed(helper)
                    .or_else(|| a[0].ok.then(|| "kill() succeeded inside".to_owned())))
            },
        ),
        Err(reason) => j.untestable(
            "signal_outside",
            "stop an outside process with kill(SIGSTOP)",
            reason,
        ),
    }
    let ptrace = "ptrace an outside process (PTRACE_ATTACH, /proc/PID/mem)";
    match &targets.ptrace_target {
        Ok(helper) => j.check(
            "ptrace_outside",
            ptrace,
            &["ptrace_attach", "proc_mem"],
            |a| {
                Ok(disturbed(helper).or_else(|| {
                    if a[0].ok {
                        Some("PTRACE_ATTACH succeeded inside".to_owned())
                    } else if a[1].ok {
                        Some("/proc/PID/mem was opened inside".to_owned())
                    } else {
                        None
                    }
                }))
            },
        ),
        Err(reason) => j.untestable("ptrace_outside", ptrace, reason),
    }
    let abs = "connect to an abstract Unix socket outside";
    match &targets.abstract_socket {
        Ok((listener, _)) => j.check(
            "abstract_unix_socket",
            abs,
            &["abstract_unix_socket"],
            |a| {
                Ok(accepted(listener.accept().map(drop))?
                    .then(|| "the host listener accepted a connection".to_owned())
                    .or_else(|| a[0].ok.then(|| "connect() succeeded inside".to_owned())))
            },
        ),
        Err(reason) => j.untestable("abstract_unix_socket", abs, reason),
    }
    let path = "connect to a Unix socket in the host's /tmp";
    match &targets.path_socket {
        Ok((listener, _, _)) => j.check(
            "pathname_unix_socket",
            path,
            &["pathname_unix_socket"],
            |a| {
                Ok(accepted(listener.accept().map(drop))?
                    .then(|| "the host listener accepted a connection".to_owned())
                    .or_else(|| a[0].ok.then(|| "connect() succeeded inside".to_owned())))
            },
        ),
        Err(reason) => j.untestable("pathname_unix_socket", path, reason),
    }
}

fn judge_block_net(targets: &Targets, run: &RunOutcome, checks: &mut Vec<Check>) {
    let mut j = Judge {
        run,
        run_name: "block-net",
        checks,
    };
    let [(tcp_name, tcp), (udp_name, udp), (mptcp_name, mptcp)] = BLOCK_NET_CHECKS;
    match &targets.tcp {
        Ok((listener, _)) => j.check(tcp_name, tcp, &["tcp_loopback"], |_| {
            Ok(accepted(listener.accept().map(drop))?
                .then(|| "the host listener accepted a connection".to_owned()))
        }),
        Err(reason) => j.untestable(tcp_name, tcp, reason),
    }
    match &targets.udp {
        Ok((socket, _)) => j.check(udp_name, udp, &["udp_loopback"], |_| {
            let mut buf = [0u8; 256];
            Ok(accepted(socket.recv_from(&mut buf).map(drop))?
                .then(|| "the host socket received the datagram".to_owned()))
        }),
        Err(reason) => j.untestable(udp_name, udp, reason),
    }
    j.check(mptcp_name, mptcp, &["mptcp_socket"], |a| {
        seccomp_answer(a[0], "")
    });
}

// ---------------------------------------------------------------------------------------
// Rendering.

pub fn render_text(checks: &[Check], tier: sandy_policy::Tier) -> String {
    let mut s = match tier {
        sandy_policy::Tier::Full => {
            String::from("self-test (canary escapes inside `sandy run`):\n")
        }
        sandy_policy::Tier::Landlock => String::from(
            "self-test (canary escapes inside `sandy run --tier landlock`; docs/tiers.md \
             lists what this tier drops):\n",
        ),
    };
    let mut last: Option<&str> = None;
    for c in checks {
        let run = if c.run == "block-net" {
            " [--block-net]"
        } else {
            ""
        };
        let repeated = c.status == Status::Untestable && last == Some(c.detail.as_str());
        let detail = if repeated {
            "the same reason as above"
        } else {
            &c.detail
        };
        s.push_str(&format!(
            "  {:10}  {}{run}: {detail}\n",
            c.status.as_str(),
            c.description,
        ));
        last = (c.status == Status::Untestable).then_some(c.detail.as_str());
    }
    let count = |st: Status| checks.iter().filter(|c| c.status == st).count();
    let (escaped, untestable) = (count(Status::Escaped), count(Status::Untestable));
    if escaped == 0 && untestable == 0 {
        s.push_str(&format!("self-test: all {} escapes blocked", checks.len()));
    } else {
        s.push_str(&format!(
            "self-test: FAILED: {escaped} escaped, {untestable} untestable, {} blocked",
            count(Status::Blocked)
        ));
    }
    s
}

pub fn render_json(checks: &[Check], tier: sandy_policy::Tier) -> Value {
    let list: Vec<Value> = checks
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "description": c.description,
                "run": c.run,
                "status": c.status.as_str(),
                "detail": c.detail,
            })
        })
        .collect();
    json!({
        "tier": tier,
        "passed": checks.iter().all(|c| c.status == Status::Blocked),
        "checks": list,
    })
}

// ---------------------------------------------------------------------------------------
// Inside the sandbox.

/// `sandy __escape ...`: attempts each escape given and prints the kernel's answer for
/// each as one JSON line, after a `ready` line. Judges nothing.
pub fn escape(args: EscapeArgs) -> Result<u8, SandyError> {
    let mut out = std::io::stdout().lock();
    let mut emit = |line: Value| {
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|source| SandyError::Io {
                step: "cannot report an escape attempt",
                source,
            })
    };
    let report = |name: &str, r: Result<String, Errno>| match r {
        Ok(answer) => json!({"attempt": name, "ok": true, "errno": null, "answer": answer}),
        Err(e) => json!({
            "attempt": name,
            "ok": false,
            "errno": format!("{e:?}"),
            "answer": diagnose::errno_text(e as i32),
        }),
    };
    let done = |r: Result<(), Errno>| r.map(|()| "succeeded".to_owned());
    emit(json!({"ready": true}))?;
    if let Some(p) = &args.read_secret {
        let r = diagnose::attempt_read(p).map(|b| {
            let text = String::from_utf8_lossy(&b);
            text.chars().take(200).collect::<String>()
        });
        emit(report("read_secret", r))?;
    }
    if let Some(p) = &args.write_outside {
        let r = diagnose::attempt_create(p, b"written from inside the sandbox\n");
        emit(report("write_outside", done(r)))?;
    }
    if let Some(p) = &args.plant_hook {
        let r = diagnose::attempt_create(p, b"#!/bin/sh\necho planted by the sandbox\n");
        emit(report("plant_hook", done(r)))?;
    }
    if let Some(p) = &args.truncate {
        emit(report("truncate", done(diagnose::attempt_truncate(p))))?;
    }
    if args.tiocsti {
        emit(report("tiocsti", done(diagnose::attempt_tiocsti())))?;
    }
    if let Some(pid) = args.signal_pid {
        emit(report("signal_outside", done(diagnose::attempt_stop(pid))))?;
    }
    if let Some(pid) = args.ptrace_pid {
        emit(report("ptrace_attach", done(diagnose::attempt_ptrace(pid))))?;
        emit(report("proc_mem", done(diagnose::attempt_proc_mem(pid))))?;
    }
    if let Some(name) = &args.abstract_socket {
        let r = diagnose::attempt_connect_abstract(name.as_bytes());
        emit(report("abstract_unix_socket", done(r)))?;
    }
    if let Some(p) = &args.path_socket {
        let r = diagnose::attempt_connect_path(p);
        emit(report("pathname_unix_socket", done(r)))?;
    }
    if let Some(port) = args.tcp_port {
        emit(report("tcp_loopback", done(diagnose::attempt_tcp(port))))?;
    }
    if let Some(port) = args.udp_port {
        let r = diagnose::attempt_udp(port, args.udp_payload.as_bytes());
        emit(report("udp_loopback", done(r)))?;
    }
    if args.mptcp {
        emit(report("mptcp_socket", done(diagnose::attempt_mptcp())))?;
    }
    Ok(0)
}

/// `sandy __idle`: an outside process for the self-test to aim at. Dies with the doctor.
pub fn idle() -> Result<u8, SandyError> {
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests {
    use super::*;

    fn attempt(ok: bool, errno: Option<&str>) -> Attempt {
        Attempt {
            ok,
            errno: errno.map(str::to_owned),
            answer: errno.unwrap_or("succeeded").to_owned(),
        }
    }

    #[test]
    fn seccomp_answers_eperm_blocks_and_the_driver_answer_escapes() {
        assert_eq!(
            seccomp_answer(&attempt(false, Some("EPERM")), "ENOTTY"),
            Ok(None)
        );
        assert!(seccomp_answer(&attempt(false, Some("ENOTTY")), "ENOTTY")
            .unwrap()
            .is_some());
        assert!(seccomp_answer(&attempt(true, None), "ENOTTY")
            .unwrap()
            .is_some());
        assert!(seccomp_answer(&attempt(false, Some("EBADF")), "ENOTTY").is_err());
        assert!(seccomp_answer(&attempt(false, Some("EPROTONOSUPPORT")), "")
            .unwrap()
            .is_some());
    }

    #[test]
    fn a_failed_run_makes_every_check_untestable_not_blocked() {
        let run = RunOutcome {
            failure: Some("`sandy run` did not start the escape helper (exit 125)".to_owned()),
            attempts: BTreeMap::new(),
            output: Vec::new(),
        };
        let mut checks = Vec::new();
        let mut j = Judge {
            run: &run,
            run_name: "default",
            checks: &mut checks,
        };
        j.check("x", "x", &["x"], |_| Ok(None));
        assert_eq!(checks[0].status, Status::Untestable);
        assert!(render_text(&checks, Default::default()).contains("FAILED"));
        assert_eq!(render_json(&checks, Default::default())["passed"], false);
    }
}
