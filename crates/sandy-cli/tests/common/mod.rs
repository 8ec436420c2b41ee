//! Shared harness for the end-to-end tests: the real `sandy` binary, run in a throw-away
//! home and project, as the current user and (when the tests run as root) also as an
//! unprivileged user, judged from the host side.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The unprivileged account used when the suite runs as root (`nobody` by default;
/// override with `SANDY_TEST_UID`/`SANDY_TEST_GID`).
pub const DEFAULT_UNPRIVILEGED: u32 = 65534;

/// Where throw-away worlds are made: not under /tmp or /var/tmp, which are private inside
/// the sandbox (a home there would be out of sight rather than protected). As root,
/// `/var/lib/sandy-e2e`; otherwise `$HOME/.cache/sandy-e2e`.
pub fn world_base() -> PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let base = if is_root() {
            PathBuf::from("/var/lib/sandy-e2e")
        } else {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/sandy-e2e")
        };
        std::fs::create_dir_all(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        base
    })
    .clone()
}

/// Gives `p` and everything under it (symbolic links themselves, not followed) to a user.
pub fn chown_tree(p: &Path, uid: u32, gid: u32) {
    let _ = std::os::unix::fs::lchown(p, Some(uid), Some(gid));
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p).unwrap().flatten() {
            chown_tree(&e.path(), uid, gid);
        }
    }
}

/// Who runs `sandy` in a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
    pub label: &'static str,
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false")
}

/// A missing capability is a reported skip locally and a failure in CI.
///
/// The test runner cannot mark a test skipped at run time, so each skip is also written to
/// the file `SANDY_TEST_SKIP_LOG` names (one line: the test's name, a tab, the reason);
/// `scripts/test.sh` counts those tests as skipped, not passed.
pub fn skip(reason: &str) {
    if in_ci() {
        panic!("required in CI but unavailable: {reason}");
    }
    eprintln!("SKIP: {reason}");
    if let Some(log) = std::env::var_os("SANDY_TEST_SKIP_LOG") {
        use std::io::Write;
        let test = std::thread::current()
            .name()
            .unwrap_or("unnamed test")
            .to_owned();
        let binary = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_default();
        let binary = binary.split('-').next().unwrap_or_default().to_owned();
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{binary}::{test}\t{reason}");
        }
    }
}

/// The users every enforcement test runs as: the current user, and an unprivileged one
/// when the suite runs as root.
pub fn users() -> Vec<User> {
    let me = User {
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        label: if is_root() { "root" } else { "current user" },
    };
    if !is_root() {
        skip("the unprivileged pass switches users and needs root; ran as the current user only");
        return vec![me];
    }
    let uid = env_u32("SANDY_TEST_UID").unwrap_or(DEFAULT_UNPRIVILEGED);
    let gid = env_u32("SANDY_TEST_GID").unwrap_or(uid);
    vec![
        me,
        User {
            uid,
            gid,
            label: "unprivileged",
        },
    ]
}

/// A `setpriv` prefix that makes the rest of a shell command line run as `uid` and `gid`,
/// or nothing when this process already runs as `uid`.
pub fn setpriv_prefix(uid: u32, gid: u32) -> String {
    if uid == nix::unistd::getuid().as_raw() {
        String::new()
    } else {
        format!("setpriv --reuid={uid} --regid={gid} --clear-groups ")
    }
}

/// `s` single-quoted for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// For tests that build their own network (addresses, servers, `/etc/hosts`): whether this
/// run can, which needs root and a kernel Sandy runs on; reports a skip (a failure in CI)
/// naming `suite` otherwise.
pub fn own_network_ready(suite: &str) -> bool {
    if !is_root() {
        skip(&format!(
            "the {suite} tests make their own network namespace, which needs root"
        ));
        return false;
    }
    kernel_ready()
}

/// `sh -c SCRIPT`, as root, in a network and a mount namespace of its own (mount
/// propagation private): the script sets up the test's network there, and nothing it
/// does reaches the host's.
pub fn in_own_network(script: &str) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args([
        "-n",
        "-m",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        script,
    ]);
    cmd
}

/// Shell lines (for a script run by [`in_own_network`]) that give the test network an
/// "internet": a second network namespace (its holder's pid in `$INET`) joined to the
/// test's by a veth pair, the test's side 192.0.2.1, the other 192.0.2.2, with
/// `addresses` on the other side's loopback and routed there. Servers for those addresses
/// run under `nsenter -t $INET -n`. The addresses are not the (test) host's own, which
/// Sandy's proxy refuses like loopback; 192.0.2.1 is.
pub fn internet_namespace(addresses: &[&str]) -> String {
    let list = addresses.join(" ");
    format!(
        "unshare -n sleep 600 </dev/null >/dev/null 2>&1 & INET=$!
while [ \"$(readlink /proc/$INET/ns/net)\" = \"$(readlink /proc/self/ns/net)\" ]; do sleep 0.01; done
ip link add sandy-h type veth peer name sandy-i netns $INET
ip addr add 192.0.2.1/24 dev sandy-h
ip link set sandy-h up
nsenter -t $INET -n sh -c 'ip link set lo up; ip addr add 192.0.2.2/24 dev sandy-i; ip link set sandy-i up; ip route add default via 192.0.2.1; for a in {list}; do ip addr add $a/32 dev lo; done'
for a in {list}; do ip route add $a/32 via 192.0.2.2; done
"
    )
}

fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok()?.parse().ok()
}

/// Whether this kernel has what Sandy needs; reports a skip (a failure in CI) if not.
pub fn kernel_ready() -> bool {
    let support = sandy_linux::probe();
    match support.landlock_abi {
        Ok(abi) if abi >= sandy_linux::MIN_LANDLOCK_ABI => {}
        Ok(abi) => {
            skip(&format!("Landlock ABI {abi} is below the ABI Sandy needs"));
            return false;
        }
        Err(errno) => {
            skip(&format!("Landlock is unavailable (errno {errno})"));
            return false;
        }
    }
    if !support.seccomp_filter {
        skip("seccomp filters are unavailable");
        return false;
    }
    true
}

/// A copy of the `sandy` binary in a world-readable place, so an unprivileged user can run
/// it whatever the permissions of the checkout. One copy per build, shared by every test
/// binary, under the world base; copies of earlier builds are removed.
pub fn sandy_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        use std::hash::{Hash, Hasher};
        let source = Path::new(env!("CARGO_BIN_EXE_sandy"));
        let meta = std::fs::metadata(source).unwrap();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        source.hash(&mut hasher);
        meta.len().hash(&mut hasher);
        meta.modified().unwrap().hash(&mut hasher);
        let key = format!("{:016x}", hasher.finish());
        let bins = world_base().join("bin");
        std::fs::create_dir_all(&bins).unwrap();
        std::fs::set_permissions(&bins, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Earlier builds' copies are removed once they are a day old: a younger one may
        // belong to another checkout's test run going on at this moment.
        for old in std::fs::read_dir(&bins).unwrap().flatten() {
            let stale = old
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > Duration::from_secs(24 * 3600));
            if old.file_name() != key.as_str() && stale {
                let _ = std::fs::remove_dir_all(old.path());
            }
        }
        let dir = bins.join(&key);
        let dest = dir.join("sandy");
        if std::fs::metadata(&dest).is_ok_and(|m| m.len() == meta.len()) {
            return dest;
        }
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Copied by a separate `cp`, never through a descriptor of this process: a test
        // thread forking at that moment would carry the open-for-write descriptor until
        // its exec, and executing the copy would then fail with ETXTBSY. The copy is
        // renamed into place, so a concurrent test binary never runs a partial file.
        let staging = dir.join(format!("sandy.partial.{}", std::process::id()));
        let copied = Command::new("cp")
            .arg(source)
            .arg(&staging)
            .status()
            .unwrap();
        assert!(copied.success(), "cannot copy the sandy binary");
        std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&staging, &dest).unwrap();
        dest
    })
}

/// A throw-away world: `root/home` (HOME), `root/home/project` (the current directory),
/// `root/tmp` (the caller's TMPDIR), all owned by the user the test runs as. Removed on
/// drop.
pub struct World {
    pub user: User,
    pub root: PathBuf,
    pub home: PathBuf,
    pub project: PathBuf,
    pub tmp: PathBuf,
    _guard: tempfile::TempDir,
}

impl World {
    pub fn new(user: User) -> World {
        let guard = tempfile::Builder::new()
            .prefix("sandy-e2e-")
            // Not /tmp: inside the sandbox /tmp is the private per-run directory, so a home
            // under /tmp would be out of sight rather than protected.
            .tempdir_in(world_base())
            .unwrap();
        let root = guard.path().to_path_buf();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let home = root.join("home");
        let project = home.join("project");
        let tmp = root.join("tmp");
        for d in [&home, &project, &tmp] {
            std::fs::create_dir_all(d).unwrap();
        }
        let w = World {
            user,
            root,
            home,
            project,
            tmp,
            _guard: guard,
        };
        w.chown_all();
        w
    }

    /// Gives every file under the world to the test user (call after creating fixtures).
    pub fn chown_all(&self) {
        chown(&self.root, Some(self.user.uid), Some(self.user.gid)).unwrap();
        chown_tree(&self.root, self.user.uid, self.user.gid);
    }

    /// Writes a file (creating parents) and hands it to the test user.
    pub fn write(&self, path: impl AsRef<Path>, contents: &str) -> PathBuf {
        let path = self.root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
        self.chown_all();
        path
    }

    /// Sandy's directory of runs in the world's TMPDIR (`sandy-UID`), where each run's
    /// private `/tmp` and copies directory are made.
    pub fn runs(&self) -> PathBuf {
        self.tmp.join(format!("sandy-{}", self.user.uid))
    }

    /// Removes the directory of runs when it is empty (Sandy keeps it between runs), so
    /// that a check of TMPDIR sees only what a run left.
    pub fn tidy_tmp(&self) {
        let _ = std::fs::remove_dir(self.runs());
    }

    /// The environment a test target sees before Sandy changes it.
    pub fn base_env(&self) -> Vec<(String, String)> {
        vec![
            ("HOME".into(), self.home.display().to_string()),
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("TMPDIR".into(), self.tmp.display().to_string()),
            ("LANG".into(), "C.UTF-8".into()),
            ("USER".into(), "sandy-test".into()),
        ]
    }

    /// A `setpriv` prefix that makes the rest of a shell command line run as the test
    /// user, or nothing when the test already runs as that user.
    pub fn setpriv_prefix(&self) -> String {
        setpriv_prefix(self.user.uid, self.user.gid)
    }

    /// `sandy ARGS...`, as the test user, in the project, with a clean environment.
    pub fn sandy<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        // `SANDY_TEST_TIER=landlock`: every `sandy run` of the suite in that tier, to
        // list the expected differences (docs/tiers.md).
        if let Some(tier) = std::env::var_os("SANDY_TEST_TIER") {
            if args.first().is_some_and(|a| a == "run") {
                args.splice(1..1, ["--tier".into(), tier]);
            }
        }
        let mut cmd = Command::new(sandy_bin());
        cmd.args(args)
            .current_dir(&self.project)
            .env_clear()
            .envs(self.base_env())
            .stdin(Stdio::null());
        if self.user.uid != nix::unistd::getuid().as_raw() {
            cmd.uid(self.user.uid).gid(self.user.gid);
        }
        cmd
    }

    /// `sandy run [FLAGS...] -- sh -c SCRIPT`, collected.
    pub fn sh(&self, flags: &[&str], script: &str) -> Output {
        let mut args: Vec<&str> = vec!["run"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
        self.sandy(args).output().unwrap()
    }

    /// A plain command (no Sandy) as the test user, for host-side set-up and judgement.
    pub fn host(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(&self.project)
            .env_clear()
            .envs(self.base_env());
        if self.user.uid != nix::unistd::getuid().as_raw() {
            cmd.uid(self.user.uid).gid(self.user.gid);
        }
        cmd
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts an exit code with the output in the message.
#[track_caller]
pub fn assert_code(o: &Output, code: i32, what: &str) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "{what}: expected exit {code}\nstdout: {}\nstderr: {}",
        stdout(o),
        stderr(o)
    );
}

/// Runs `f` once per test user, with a fresh world, if the kernel is ready.
pub fn for_each_user(mut f: impl FnMut(&World)) {
    if !kernel_ready() {
        return;
    }
    for user in users() {
        eprintln!("-- as {} (uid {})", user.label, user.uid);
        let world = World::new(user);
        f(&world);
    }
}

/// The published dry-run schema, from the repository root.
pub const DRY_RUN_SCHEMA_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../schemas/dry-run.v7.schema.json"
);

/// Parses a dry-run document and asserts that it matches the published schema: every
/// dry-run the suite produces goes through here.
#[track_caller]
/// The `egress.left_out` entries of a dry-run document: (pattern, note) each.
pub fn dry_run_left_out(doc: &serde_json::Value) -> Vec<(String, String)> {
    doc["egress"]["left_out"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["pattern"].as_str().unwrap().to_owned(),
                l["note"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The dry-run document of `sandy run --dry-run -- true` in `w`'s project, checked
/// against the published schema.
pub fn dry_run_of_true(w: &World, what: &str) -> serde_json::Value {
    let o = w
        .sandy(["run", "--dry-run", "--", "true"])
        .output()
        .unwrap();
    parse_dry_run(&o.stdout, what)
}

pub fn parse_dry_run(stdout: &[u8], what: &str) -> serde_json::Value {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    let validator = VALIDATOR.get_or_init(|| {
        let text = std::fs::read_to_string(DRY_RUN_SCHEMA_PATH).unwrap();
        let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
        jsonschema::draft202012::new(&schema).unwrap()
    });
    let doc: serde_json::Value = serde_json::from_slice(stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: the dry run is not JSON ({e}):\n{}",
            String::from_utf8_lossy(stdout)
        )
    });
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what}: the dry-run document does not match {DRY_RUN_SCHEMA_PATH}:\n{}",
        errors.join("\n")
    );
    doc
}

// Process helpers shared by the end-to-end tests.

/// Reads a child's stdout and stderr on threads; `finish` collects them.
pub struct Collector(mpsc::Receiver<(usize, Vec<u8>)>);

impl Collector {
    pub fn start(child: &mut Child) -> Collector {
        let (tx, rx) = mpsc::channel();
        let pipes: Vec<Box<dyn Read + Send>> = vec![
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for (i, mut pipe) in pipes.into_iter().enumerate() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = pipe.read_to_end(&mut buf);
                let _ = tx.send((i, buf));
            });
        }
        Collector(rx)
    }

    pub fn finish(self, status: std::process::ExitStatus) -> Output {
        self.collect(status, Duration::from_secs(5), true)
    }

    /// Like [`Collector::finish`], but a stream still open after `wait` (held by a
    /// detached grandchild, which is confined but must not hang the test) is left empty.
    pub fn finish_allowing_open(self, status: std::process::ExitStatus, wait: Duration) -> Output {
        self.collect(status, wait, false)
    }

    fn collect(self, status: std::process::ExitStatus, wait: Duration, must_close: bool) -> Output {
        let mut out = Output {
            status,
            stdout: Vec::new(),
            stderr: Vec::new(),
        };
        for _ in 0..2 {
            let (i, buf) = match self.0.recv_timeout(wait) {
                Ok(got) => got,
                Err(_) if !must_close => break,
                Err(e) => panic!("the command exited but its output stayed open: {e}"),
            };
            if i == 0 {
                out.stdout = buf;
            } else {
                out.stderr = buf;
            }
        }
        out
    }
}

/// Waits for a child up to `secs` seconds; kills it and fails the test if it is still
/// running.
pub fn wait_timeout(child: &mut Child, secs: u64, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a command to completion with its output collected, within `secs` seconds.
pub fn run_timeout(mut cmd: Command, secs: u64) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let what = format!("{cmd:?}");
    let mut child = cmd.spawn().unwrap();
    let collector = Collector::start(&mut child);
    let status = wait_timeout(&mut child, secs, &what);
    collector.finish(status)
}

/// The text of a helper script in `tests/helpers`.
pub fn helper_text(name: &str) -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/helpers")
        .join(name);
    std::fs::read_to_string(&src).unwrap()
}

/// Copies a helper script into the world (readable by the test user) and returns its path.
pub fn helper(w: &World, name: &str) -> String {
    w.write(format!("helpers/{name}"), &helper_text(name))
        .display()
        .to_string()
}

/// Polls until `cond` holds or `secs` seconds pass; returns whether it held.
pub fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The one-letter state from /proc/PID/stat, if the process exists.
pub fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.trim_start().chars().next()
}

pub fn process_gone(pid: i32) -> bool {
    matches!(proc_state(pid), None | Some('Z') | Some('X'))
}

/// Host pids of the processes with `arg` among their arguments (from `/proc/*/cmdline`).
/// Inside the sandbox's PID namespace a process has another pid; a unique argument finds
/// it from the host.
pub fn host_pids_with_arg(arg: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == arg.as_bytes()))
        })
        .filter(|pid| !process_gone(*pid))
        .collect()
}

pub fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("sandy-e2e-{tag}-{}-{nanos}", std::process::id())
}

/// The system Python, readable by every test user.
pub const PYTHON: &str = "/usr/bin/python3";

/// A spawned process that is killed and reaped when the test is done with it.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A pid (not our child) killed at the end of the test unless it is already gone.
pub struct KillOnDrop(pub i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.0 > 0 && !process_gone(self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.0),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The value of `KEY=value` lines the target printed.
pub fn field<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// Asserts the target reported `KEY=status` with a non-zero status.
#[track_caller]
pub fn assert_failed(out: &str, key: &str) {
    match field(out, key) {
        Some(rc) => assert_ne!(rc, "0", "{key} succeeded:\n{out}"),
        None => panic!("no {key}= in output:\n{out}"),
    }
}

#[track_caller]
pub fn assert_field(out: &str, key: &str, want: &str) {
    assert_eq!(field(out, key), Some(want), "{key} in output:\n{out}");
}

/// Starts a helper server that announces itself with one line on stdout once it is
/// ready; returns the guard that kills it and that line (trimmed). Fails the test if the
/// line does not come within 20 s.
pub fn start_announcing_line(mut cmd: Command, what: &str) -> (Reaped, String) {
    use std::io::{BufRead, BufReader};
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = Reaped(cmd.spawn().unwrap());
    let out = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what} did not start within 20 s"));
    (child, line.trim().to_owned())
}

/// [`start_announcing_line`] for servers that announce themselves (their ports and so
/// on) with one JSON line; returns it parsed.
pub fn start_announcing(cmd: Command, what: &str) -> (Reaped, serde_json::Value) {
    let (child, line) = start_announcing_line(cmd, what);
    let info = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("{what} did not start ({e}): {line:?}"));
    (child, info)
}

/// The run Sandy's stderr names for `sandy restore RUN`, if it does.
pub fn restore_hint(err: &str) -> Option<String> {
    err.lines().find_map(|l| {
        l.rsplit_once("sandy restore ")
            .map(|(_, r)| r.trim().to_owned())
    })
}

/// The run Sandy's stderr names for `sandy restore RUN`; fails the test when it names none.
#[track_caller]
pub fn restore_run(err: &str) -> String {
    restore_hint(err).unwrap_or_else(|| panic!("no restore hint:\n{err}"))
}

/// The Codex stand-in directories (`.sandy-codex-home-*`) left in `codex_home`.
pub fn stand_ins_in(codex_home: &Path) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(codex_home)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with(".sandy-codex-home"))
        .collect()
}

/// Where `scripts/install-agents.sh` puts the real agent CLIs' commands.
pub const AGENTS_BIN: &str = "/opt/sandy-test-agents/node_modules/.bin";

/// The directory holding every real agent CLI of `names`: npm's `.bin` under
/// `$SANDY_TEST_AGENTS` when set, else [`AGENTS_BIN`], else the first directory on `PATH`
/// that holds them all (a global `npm install -g`). `None`, a reported skip (a failure
/// under CI) naming where it looked, when none does.
#[allow(dead_code)]
pub fn agents_bin(names: &[&str]) -> Option<PathBuf> {
    let prefix = std::env::var_os("SANDY_TEST_AGENTS")
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(p).join("node_modules/.bin"));
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let chosen = prefix.is_some();
    let looked: Vec<PathBuf> = match prefix {
        Some(dir) => vec![dir],
        None => std::iter::once(PathBuf::from(AGENTS_BIN))
            .chain(on_path)
            .collect(),
    };
    if let Some(dir) = looked
        .iter()
        .find(|d| names.iter().all(|n| d.join(n).exists()))
    {
        return Some(dir.clone());
    }
    let first = looked
        .first()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    skip(&if chosen {
        format!("the agent CLIs {names:?} are not in {first} (SANDY_TEST_AGENTS)")
    } else {
        format!(
            "the agent CLIs {names:?} are neither in {first} nor together on PATH; run \
             scripts/install-agents.sh (or set SANDY_TEST_AGENTS)"
        )
    });
    None
}

/// Whether the real agent CLI `name` is installed ([`agents_bin`]).
#[allow(dead_code)]
pub fn agent_installed(name: &str) -> bool {
    agents_bin(&[name]).is_some()
}

/// `PATH` for a run of agent `name`: its directory first ([`agents_bin`]; assumed found).
#[allow(dead_code)]
pub fn agent_path(name: &str) -> String {
    let dir = agents_bin(&[name]).unwrap_or_else(|| PathBuf::from(AGENTS_BIN));
    format!("{}:/usr/local/bin:/usr/bin:/bin", dir.display())
}
