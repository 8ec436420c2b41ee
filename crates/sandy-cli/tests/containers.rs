//! Sandy inside real containers: rootful Podman (runc, cgroupfs), whose root is this
//! machine's own `/` as a copy-on-write overlay (`--rootfs /:O`: no image registry is
//! needed), run as root and as the unprivileged account inside. The world (home, project,
//! TMPDIR) is bind-mounted at the same path, so everything is judged from outside the
//! container too.
//!
//! - With the runtime's default security profile, `sandy doctor` (text and `--json`)
//!   names the container's masked `/proc` as the cause and `--tier landlock` as
//!   available, and `sandy run` refuses with that cause, the fix and the weaker tier, in
//!   one line, exit 125, the target never started.
//! - There, `sandy run --tier landlock` runs: real agent CLIs' `--version` and a small
//!   build (Python and git), with its tier line; a write outside the project is refused,
//!   a hidden SSH key is unreadable, a planted git hook is gone after the run.
//! - With Docker's default seccomp profile, the cause is the seccomp profile, and the fix
//!   names Sandy's (`packaging/containers/sandy-seccomp.json`).
//! - With Sandy's profile and the masked paths unmasked, the full tier runs: a write in the
//!   project lands, a write outside it is refused.
//!
//! Each test starts one container per user, which runs every step (a `sandy` command)
//! and records its output and exit status in the world ([`Container::run`]). Podman
//! needs root; without it, or without Podman (`.ci/run` installs it), the tests are a
//! reported skip (a failure under `CI=true`).

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output};

use common::*;

/// Docker's default seccomp profile (moby's `profiles/seccomp/default.json`), taken by
/// `.ci/run` from Debian's golang-github-docker-docker-dev package.
const DOCKER_DEFAULT_SECCOMP: &str = "/usr/local/share/sandy-ci/docker-default-seccomp.json";

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// Sandy's container seccomp profile, as shipped.
fn sandy_profile() -> PathBuf {
    repo_file("packaging/containers/sandy-seccomp.json")
}

/// Whether rootful Podman can be used here; reports a skip (a failure in CI) if not.
fn podman_ready() -> bool {
    if !is_root() {
        skip("the container tests use rootful Podman, which needs root");
        return false;
    }
    if !kernel_ready() {
        return false;
    }
    match Command::new("podman").arg("--version").output() {
        Ok(o) if o.status.success() => true,
        _ => {
            skip("podman is not installed (.ci/run installs it and runc)");
            false
        }
    }
}

fn docker_default_ready() -> bool {
    if Path::new(DOCKER_DEFAULT_SECCOMP).is_file() {
        true
    } else {
        skip(&format!(
            "Docker's default seccomp profile is not at {DOCKER_DEFAULT_SECCOMP} (.ci/run \
             extracts it from golang-github-docker-docker-dev)"
        ));
        false
    }
}

/// One container, started once for a list of steps.
struct Container<'w> {
    world: &'w World,
    /// `--security-opt` values.
    security: Vec<String>,
    /// Variables that replace the world's ([`World::base_env`]) in every step.
    env: Vec<(String, String)>,
    name: String,
}

/// Removes the container if it is still there (a timed-out test), and the record.
impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = podman()
            .args(["rm", "--force", "--ignore", &self.name])
            .output();
    }
}

/// `podman` with the settings this machine needs: runc (crun refuses cgroups in hybrid
/// mode) and the cgroupfs manager.
fn podman() -> Command {
    let mut cmd = Command::new("podman");
    cmd.args(["--runtime", "runc", "--cgroup-manager=cgroupfs"]);
    cmd
}

impl<'w> Container<'w> {
    fn new(world: &'w World, security: &[&str]) -> Container<'w> {
        Container {
            world,
            security: security.iter().map(|s| (*s).to_owned()).collect(),
            env: Vec::new(),
            name: unique("ctr"),
        }
    }

    /// Sets `key` to `value` in every step's environment instead of the world's.
    fn env(mut self, key: &str, value: &str) -> Container<'w> {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Starts the container as the world's user, runs each step (`name`, `sandy` arguments)
    /// in the project in order, and returns each step's output by name. `None`, a
    /// reported skip (a failure in CI), when the container cannot start.
    fn run(&self, steps: &[(&str, &[&str])]) -> Option<BTreeMap<String, Output>> {
        let w = self.world;
        let record = w.root.join("ctr-record");
        std::fs::create_dir_all(&record).unwrap();
        w.chown_all();
        let sandy = sandy_bin();
        let env: Vec<String> = w
            .base_env()
            .into_iter()
            .filter(|(k, _)| !self.env.iter().any(|(set, _)| set == k))
            .chain(self.env.iter().cloned())
            .map(|(k, v)| shell_quote(&format!("{k}={v}")))
            .collect();
        let mut script = format!(
            "cd {} || exit 97\nstep() {{ n=$1; shift; env -i {} {} \"$@\" >{rec}/$n.out \
             2>{rec}/$n.err </dev/null; echo $? >{rec}/$n.rc; }}\n",
            shell_quote(&w.project.display().to_string()),
            env.join(" "),
            shell_quote(&sandy.display().to_string()),
            rec = shell_quote(&record.display().to_string()),
        );
        for (name, args) in steps {
            let args: Vec<String> = args.iter().map(|a| shell_quote(a)).collect();
            script.push_str(&format!("step {name} {}\n", args.join(" ")));
        }
        script.push_str("exit 0\n");

        let bin_dir = sandy.parent().unwrap().display().to_string();
        let root = w.root.display().to_string();
        let mut cmd = podman();
        cmd.args(["run", "--rm", "--name", &self.name, "--network", "none"])
            .args(["--user", &format!("{}:{}", w.user.uid, w.user.gid)])
            .args(["--volume", &format!("{bin_dir}:{bin_dir}:ro")])
            .args(["--volume", &format!("{root}:{root}")]);
        for opt in &self.security {
            cmd.args(["--security-opt", opt]);
        }
        cmd.args(["--rootfs", "/:O", "/bin/sh", "-c", &script]);
        let o = run_timeout(cmd, 180);
        // The script itself always exits 0; 125 to 127 are Podman's own failures.
        if !o.status.success() {
            assert!(
                matches!(o.status.code(), Some(125..=127)),
                "the script in the container failed: {o:?}"
            );
            skip(&format!(
                "podman cannot start a container here (exit {:?}): {}",
                o.status.code(),
                stderr(&o).trim()
            ));
            return None;
        }
        let gone = podman()
            .args(["container", "exists", &self.name])
            .status()
            .unwrap();
        assert_eq!(gone.code(), Some(1), "container {} was left", self.name);

        let mut outputs = BTreeMap::new();
        for (name, _) in steps {
            let read = |ext: &str| std::fs::read(record.join(format!("{name}.{ext}")));
            let code: i32 = String::from_utf8(read("rc").unwrap())
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            outputs.insert(
                (*name).to_owned(),
                Output {
                    status: ExitStatus::from_raw(code << 8),
                    stdout: read("out").unwrap(),
                    stderr: read("err").unwrap(),
                },
            );
        }
        std::fs::remove_dir_all(&record).unwrap();
        Some(outputs)
    }
}

/// Runs `f` once per test user with a world of its own, when Podman is ready.
fn in_containers(mut f: impl FnMut(&World)) {
    if !podman_ready() {
        return;
    }
    for user in users() {
        eprintln!(
            "-- as {} (uid {}) inside the container",
            user.label, user.uid
        );
        f(&World::new(user));
    }
}

fn doctor_json(o: &Output, who: &str) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("as {who}: doctor --json is not JSON ({e}): {}", stdout(o)))
}

fn layer(doc: &serde_json::Value, name: &str) -> serde_json::Value {
    doc["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("no layer {name}: {doc}"))
        .clone()
}

/// The target of a run that must not start: it would leave `marker` in the project.
const MARKER_TARGET: &[&str] = &[
    "run",
    "--",
    "/bin/sh",
    "-c",
    "touch marker; echo target-ran",
];

/// Asserts a refused run: exit 125, one line on stderr naming `cause` and `fix`, and,
/// judged from outside the container, no marker in the project.
#[track_caller]
fn assert_refused(w: &World, o: &Output, cause: &str, fix: &str) {
    let who = w.user.label;
    assert_code(o, 125, &format!("sandy run in the container, as {who}"));
    assert!(
        !stdout(o).contains("target-ran"),
        "as {who}: the target ran"
    );
    assert!(
        !w.project.join("marker").exists(),
        "as {who}: the target ran (its marker is in the project)"
    );
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "as {who}: one line: {err}");
    let line = lines[0];
    assert!(line.starts_with("sandy: "), "as {who}: {line}");
    assert!(line.contains("Operation not permitted"), "as {who}: {line}");
    assert!(line.contains(cause), "as {who}: {line}");
    assert!(line.contains(&format!("; fix: {fix}")), "as {who}: {line}");
}

const MASKED_PROC: &str = "this is a Podman container whose masked /proc and /sys entries \
                           forbid a fresh /proc or /sys in a new user namespace";
const UNMASK_FIX: &str = "start the container with `podman run --security-opt unmask=ALL ...`";
/// How doctor and a refusal name the weaker tier (docs/tiers.md).
const LANDLOCK_TIER_PATH: &str = "`sandy run --tier landlock`";

#[test]
fn default_profile_doctor_names_the_masked_proc_and_run_refuses() {
    in_containers(|w| {
        let who = w.user.label;
        let Some(out) = Container::new(w, &[]).run(&[
            ("doctor", &["doctor"]),
            ("json", &["doctor", "--json"]),
            ("run", MARKER_TARGET),
        ]) else {
            return;
        };

        let text = &out["doctor"];
        assert_code(text, 1, &format!("doctor in the container, as {who}"));
        let report = stdout(text);
        assert!(
            report.contains(&format!("cause: {MASKED_PROC}")),
            "as {who}: {report}"
        );
        assert!(
            report.contains(&format!("fix: {UNMASK_FIX}")),
            "as {who}: {report}"
        );
        assert!(
            report.contains("verdict: NOT enforceable"),
            "as {who}: {report}"
        );
        // The weaker tier is named as the other way on: Landlock and seccomp work here.
        assert!(report.contains(LANDLOCK_TIER_PATH), "as {who}: {report}");

        let json = &out["json"];
        assert_code(
            json,
            1,
            &format!("doctor --json in the container, as {who}"),
        );
        let doc = doctor_json(json, who);
        assert_eq!(doc["enforceable"], false, "as {who}: {doc}");
        assert_eq!(
            doc["cause"]["id"], "container_masked_proc",
            "as {who}: {doc}"
        );
        assert_eq!(doc["cause"]["line"], MASKED_PROC, "as {who}: {doc}");
        assert_eq!(doc["cause"]["fix"], UNMASK_FIX, "as {who}: {doc}");
        assert_eq!(doc["landlock_tier_available"], true, "as {who}: {doc}");
        assert!(
            doc["verdict"]
                .as_str()
                .unwrap()
                .contains(LANDLOCK_TIER_PATH),
            "as {who}: {doc}"
        );
        let mount = layer(&doc, "mount_namespace");
        assert_eq!(mount["available"], false, "as {who}: {mount}");
        assert_eq!(mount["failed_step"], "mount_proc", "as {who}: {mount}");
        assert_eq!(mount["cause"], "container_masked_proc", "as {who}: {mount}");
        // The runtime's default seccomp profile lets the user namespace be made: the
        // masked /proc is the one barrier.
        for name in ["user_namespace", "landlock", "seccomp", "no_new_privs"] {
            assert_eq!(
                layer(&doc, name)["available"],
                true,
                "as {who}: {name}: {doc}"
            );
        }

        assert_refused(w, &out["run"], MASKED_PROC, UNMASK_FIX);
        let refusal = stderr(&out["run"]);
        assert!(refusal.contains(LANDLOCK_TIER_PATH), "as {who}: {refusal}");
    });
}

/// With only `/proc` unmasked, a run works but `--block-net`'s private sysfs is refused
/// (`/sys/firmware` and `/sys/dev/block` stay masked): doctor's network probe mounts that
/// sysfs too, so it does not call `--block-net` available.
#[test]
fn only_proc_unmasked_doctor_finds_block_net_refused_as_it_is() {
    in_containers(|w| {
        let who = w.user.label;
        let Some(out) = Container::new(w, &["unmask=/proc/*"]).run(&[
            ("json", &["doctor", "--json"]),
            ("run", &["run", "--", "/bin/echo", "ran"]),
            (
                "block_net",
                &[
                    "run",
                    "--block-net",
                    "--",
                    "/bin/sh",
                    "-c",
                    "touch marker; echo target-ran",
                ],
            ),
        ]) else {
            return;
        };
        let doc = doctor_json(&out["json"], who);
        assert_eq!(doc["block_net_available"], false, "as {who}: {doc}");
        assert_eq!(
            doc["cause"]["id"], "container_masked_proc",
            "as {who}: {doc}"
        );
        let net = layer(&doc, "network_namespace");
        assert_eq!(net["available"], false, "as {who}: {net}");
        assert_eq!(net["failed_step"], "mount_proc", "as {who}: {net}");
        let detail = net["detail"].as_str().unwrap();
        assert!(
            detail.contains("mounting a private sysfs on /sys failed: EPERM"),
            "{detail}"
        );
        assert_eq!(
            layer(&doc, "mount_namespace")["available"],
            true,
            "as {who}: {doc}"
        );

        assert_code(
            &out["run"],
            0,
            &format!("run with /proc unmasked, as {who}"),
        );
        assert_eq!(stdout(&out["run"]).trim(), "ran", "as {who}");
        assert_refused(w, &out["block_net"], MASKED_PROC, UNMASK_FIX);
    });
}

const SECCOMP: &str = "this is a Podman container whose seccomp profile refuses new user \
                       namespaces";

#[test]
fn dockers_default_seccomp_profile_is_named_with_sandys_profile_as_the_fix() {
    if !podman_ready() || !docker_default_ready() {
        return;
    }
    let seccomp = format!("seccomp={DOCKER_DEFAULT_SECCOMP}");
    in_containers(|w| {
        let who = w.user.label;
        // Unmasked, so that the seccomp profile is the one barrier.
        let Some(out) = Container::new(w, &[&seccomp, "unmask=ALL"])
            .run(&[("json", &["doctor", "--json"]), ("run", MARKER_TARGET)])
        else {
            return;
        };
        let doc = doctor_json(&out["json"], who);
        assert_code(&out["json"], 1, &format!("doctor --json, as {who}"));
        assert_eq!(doc["enforceable"], false, "as {who}: {doc}");
        assert_eq!(doc["cause"]["id"], "container_seccomp", "as {who}: {doc}");
        assert_eq!(doc["cause"]["line"], SECCOMP, "as {who}: {doc}");
        let fix = doc["cause"]["fix"].as_str().unwrap();
        assert!(
            fix.contains("`podman run --security-opt seccomp=sandy-seccomp.json ...`"),
            "as {who}: {fix}"
        );
        let userns = layer(&doc, "user_namespace");
        assert_eq!(userns["available"], false, "as {who}: {userns}");
        assert_eq!(userns["failed_step"], "create_user_namespace", "{userns}");
        // Docker's default profile allows Landlock and seccomp filters: the weaker tier.
        assert_eq!(doc["landlock_tier_available"], true, "as {who}: {doc}");

        assert_refused(w, &out["run"], SECCOMP, fix);
    });
}

/// A run that writes in the project, outside it (the home) and in a package cache (a
/// copy-on-write overlay inside), each write's status printed.
const WRITES: &[&str] = &[
    "run",
    "--",
    "/bin/sh",
    "-c",
    "echo inside > written-inside; echo in=$?; echo outside > ../written-outside; \
     echo out=$?; echo cache=$(cat ~/.npm/cached); echo new > ~/.npm/new; echo overlay=$?",
];

/// The full tier in the container: doctor's verdict, and a run whose write in the project
/// lands, whose write outside is refused and whose write to a package cache stays in its
/// overlay, judged from outside the container.
fn assert_full_tier(w: &World, out: &BTreeMap<String, Output>) {
    let who = w.user.label;
    let doc = doctor_json(&out["json"], who);
    assert_code(&out["json"], 0, &format!("doctor --json, as {who}"));
    assert_eq!(doc["enforceable"], true, "as {who}: {doc}");
    assert_eq!(doc["block_net_available"], true, "as {who}: {doc}");
    assert!(doc["cause"].is_null(), "as {who}: {doc}");

    let run = &out["run"];
    let o = stdout(run);
    assert_field(&o, "in", "0");
    assert_failed(&o, "out");
    assert!(
        stderr(run).contains("cannot create ../written-outside: Read-only file system"),
        "as {who}: {}",
        stderr(run)
    );
    assert_eq!(
        std::fs::read_to_string(w.project.join("written-inside")).unwrap(),
        "inside\n",
        "as {who}: the write in the project"
    );
    assert!(
        !w.home.join("written-outside").exists(),
        "as {who}: the write outside the project landed"
    );
    // The package cache: read through the overlay, written to its upper layer only.
    assert_field(&o, "cache", "old");
    assert_field(&o, "overlay", "0");
    assert!(
        !w.home.join(".npm/new").exists(),
        "as {who}: the write to the cache reached the real cache"
    );
    // --block-net: its private sysfs and network namespace work here too.
    let blocked = &out["block_net"];
    assert_code(blocked, 0, &format!("run --block-net, as {who}"));
    assert_eq!(stdout(blocked).trim(), "ok", "as {who}");
}

const FULL_TIER_STEPS: &[(&str, &[&str])] = &[
    ("json", &["doctor", "--json"]),
    ("run", WRITES),
    (
        "block_net",
        &["run", "--block-net", "--", "/bin/echo", "ok"],
    ),
];

#[test]
fn sandys_seccomp_profile_with_unmasked_paths_runs_the_full_tier() {
    if !podman_ready() || !docker_default_ready() {
        return;
    }
    let seccomp = format!("seccomp={}", sandy_profile().display());
    in_containers(|w| {
        w.write("home/.npm/cached", "old\n");
        if let Some(out) = Container::new(w, &[&seccomp, "unmask=ALL"]).run(FULL_TIER_STEPS) {
            assert_full_tier(w, &out);
        }
    });
}

/// Podman's own default seccomp profile (containers-common) already allows what Sandy
/// needs: unmasking the paths is enough there.
#[test]
fn podmans_default_profile_with_unmasked_paths_runs_the_full_tier() {
    in_containers(|w| {
        w.write("home/.npm/cached", "old\n");
        if let Some(out) = Container::new(w, &["unmask=ALL"]).run(FULL_TIER_STEPS) {
            assert_full_tier(w, &out);
        }
    });
}

/// The shipped profile is Docker's default one plus Sandy's rules, as
/// `packaging/containers/derive-seccomp.py` makes it.
#[test]
fn the_shipped_profile_is_derived_from_dockers_default() {
    if !docker_default_ready() {
        return;
    }
    let o = Command::new(PYTHON)
        .arg(repo_file("packaging/containers/derive-seccomp.py"))
        .arg(DOCKER_DEFAULT_SECCOMP)
        .output()
        .unwrap();
    assert_code(&o, 0, "derive-seccomp.py");
    let shipped = std::fs::read_to_string(sandy_profile()).unwrap();
    assert!(
        stdout(&o) == shipped,
        "packaging/containers/sandy-seccomp.json is not what derive-seccomp.py makes from \
         {DOCKER_DEFAULT_SECCOMP}: regenerate it"
    );
    // What it adds: only allow rules, each named as Sandy's.
    let profile: serde_json::Value = serde_json::from_str(&shipped).unwrap();
    let docker: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(DOCKER_DEFAULT_SECCOMP).unwrap()).unwrap();
    let rules = profile["syscalls"].as_array().unwrap();
    let base = docker["syscalls"].as_array().unwrap();
    assert_eq!(&rules[..base.len()], &base[..]);
    let added: Vec<&str> = rules[base.len()..]
        .iter()
        .inspect(|r| assert_eq!(r["action"], "SCMP_ACT_ALLOW", "{r}"))
        .flat_map(|r| r["names"].as_array().unwrap().iter())
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(
        added,
        [
            "unshare",
            "fsconfig",
            "fsmount",
            "fsopen",
            "mount",
            "mount_setattr",
            "move_mount",
            "open_tree",
            "pidfd_getfd",
            "process_vm_readv",
            "kcmp"
        ]
    );
}

/// The real agent CLIs whose `--version` runs in the weaker tier inside the container
/// (`scripts/install-agents.sh`). OpenCode is left out: it writes its own cache
/// directory, which this tier keeps read-only (docs/tiers.md).
const TIER_AGENTS: [&str; 3] = ["claude", "codex", "gemini"];

/// The key planted in the container user's home, which the run must not read.
const TIER_SECRET: &str = "SECRET-CONTAINER-TIER-KEY";

/// A run in the weaker tier that tries the promises, with the home readable around a
/// hidden path: read the SSH key, read an ordinary file beside it, append to that file,
/// plant a pre-commit hook. Each status is printed.
const TIER_PROMISES: &str = "cat ~/.ssh/id_ed25519; echo key=$?; echo notes=$(cat ~/notes.txt); \
     echo appended >> ~/notes.txt; echo append=$?; \
     printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit; \
     echo hook=$?";

/// A small project build with what the container has: Python compiles the sources and
/// writes the product, and git commits the result.
const TIER_BUILD: &str = "python3 build.py && git add -A && \
     git -c user.name=Sandy -c user.email=sandy@example.com commit -qm build && echo built";

/// The lines naming the tier on `o`'s stderr.
fn tier_lines(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("sandy: tier landlock"))
        .map(str::to_owned)
        .collect()
}

/// Asserts a run in the weaker tier that exited 0 and named its tier in one line, as a
/// tier that was chosen where namespaces do not work (no "the full tier would protect
/// more").
#[track_caller]
fn assert_tier_run(o: &Output, what: &str) {
    assert_code(o, 0, what);
    let lines = tier_lines(o);
    assert_eq!(lines.len(), 1, "{what}: one tier line: {}", stderr(o));
    assert!(
        lines[0].contains("(chosen with --tier landlock)"),
        "{what}: {}",
        lines[0]
    );
    assert!(
        !lines[0].contains("namespaces work here"),
        "{what}: the container refuses them: {}",
        lines[0]
    );
}

/// The weaker tier inside Podman's default container, where the full tier is refused
/// (issue 39, item 4): `sandy run --tier landlock` runs real agent CLIs' `--version` and a
/// small project build, and keeps its promises, judged from outside the container: the
/// write outside the project is refused (the file is unchanged on the host), the hidden
/// SSH key is unreadable inside a read grant of the home, and the planted git hook is
/// gone after the run.
#[test]
fn landlock_tier_runs_in_the_default_container_and_keeps_its_promises() {
    if !podman_ready() {
        return;
    }
    // Without the agents (scripts/install-agents.sh), a reported skip of their steps only.
    let agents = agents_bin(&TIER_AGENTS);
    in_containers(|w| {
        let who = w.user.label;
        w.write("home/.ssh/id_ed25519", &format!("{TIER_SECRET}\n"));
        w.write("home/notes.txt", "my notes\n");
        w.write(
            "home/project/src/greet.py",
            "def greet(who):\n    return f\"hello from the {who}\"\n",
        );
        w.write(
            "home/project/build.py",
            "import compileall, pathlib, sys\n\
             if not compileall.compile_dir(\"src\", quiet=1):\n    sys.exit(1)\n\
             sys.path.insert(0, \"src\")\n\
             import greet\n\
             pathlib.Path(\"dist\").mkdir(exist_ok=True)\n\
             pathlib.Path(\"dist/out.txt\").write_text(greet.greet(\"container\") + \"\\n\")\n",
        );
        let git = w
            .host("/usr/bin/git")
            .args(["init", "-q", "."])
            .output()
            .unwrap();
        assert_code(&git, 0, "git init");
        let hook = w.project.join(".git/hooks/pre-commit");
        assert!(!hook.exists());
        let home = w.home.display().to_string();

        let promises = [
            "run",
            "--tier",
            "landlock",
            "--read",
            &home,
            "--",
            "/bin/sh",
            "-c",
            TIER_PROMISES,
        ];
        let build = [
            "run", "--tier", "landlock", "--", "/bin/sh", "-c", TIER_BUILD,
        ];
        let version_steps: Vec<(String, [&str; 6])> = TIER_AGENTS
            .iter()
            .map(|a| {
                (
                    format!("version_{a}"),
                    ["run", "--tier", "landlock", "--", a, "--version"],
                )
            })
            .collect();
        let mut steps: Vec<(&str, &[&str])> = Vec::new();
        let mut container = Container::new(w, &[]);
        if let Some(bin) = &agents {
            container = container.env(
                "PATH",
                &format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
            );
            for (name, args) in &version_steps {
                steps.push((name, &args[..]));
            }
        }
        steps.push(("promises", &promises));
        steps.push(("build", &build));
        let Some(out) = container.run(&steps) else {
            return;
        };

        // Real agent CLIs start under their detected profiles and print their versions.
        for (name, args) in &version_steps {
            let Some(o) = out.get(name) else { continue };
            let agent = args[4];
            assert_tier_run(o, &format!("{agent} --version in the container, as {who}"));
            let version = stdout(o);
            assert!(
                version.chars().any(|c| c.is_ascii_digit()) && version.contains('.'),
                "as {who}: {agent} --version printed no version: {version}"
            );
            assert!(
                stderr(o).contains(&format!("sandy: profile '{agent}'")),
                "as {who}: {agent}'s profile is not named: {}",
                stderr(o)
            );
        }

        // The promises, judged from outside the container.
        let o = &out["promises"];
        assert_tier_run(o, &format!("the promises' run in the container, as {who}"));
        let said = stdout(o);
        let err = stderr(o);
        assert!(
            !said.contains(TIER_SECRET),
            "as {who}: the key was read: {said}"
        );
        assert_failed(&said, "key");
        assert!(
            err.contains("id_ed25519: Permission denied"),
            "as {who}: {err}"
        );
        // The read grant of the home works around the hidden path.
        assert_field(&said, "notes", "my notes");
        assert_failed(&said, "append");
        assert_eq!(
            std::fs::read_to_string(w.home.join("notes.txt")).unwrap(),
            "my notes\n",
            "as {who}: the write outside the project landed"
        );
        // The hook was planted inside (the project is writable in this tier) and is gone.
        assert_field(&said, "hook", "0");
        assert!(!hook.exists(), "as {who}: the planted hook stayed: {err}");
        assert!(
            err.lines()
                .any(|l| l.starts_with("sandy: restored") && l.contains("pre-commit")),
            "as {who}: the restore is not reported: {err}"
        );
        // The key is still there, readable to its owner outside.
        let key = w
            .host("/bin/cat")
            .arg(w.home.join(".ssh/id_ed25519"))
            .output()
            .unwrap();
        assert!(stdout(&key).contains(TIER_SECRET), "as {who}");

        // The build: its product and its commit, judged from outside; the hook planted
        // before did not run at the commit.
        let o = &out["build"];
        assert_tier_run(o, &format!("the build in the container, as {who}"));
        assert!(stdout(o).contains("built"), "as {who}: {}", stderr(o));
        assert!(!stdout(o).contains("pwned"), "as {who}: the hook ran");
        assert_eq!(
            std::fs::read_to_string(w.project.join("dist/out.txt")).unwrap(),
            "hello from the container\n",
            "as {who}"
        );
        let compiled = std::fs::read_dir(w.project.join("src/__pycache__"))
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("greet."));
        assert!(compiled, "as {who}: no compiled greet module");
        let log = w
            .host("/usr/bin/git")
            .args(["log", "-1", "--format=%s %an", "--name-only"])
            .output()
            .unwrap();
        assert_code(&log, 0, "git log");
        let log = stdout(&log);
        assert!(log.starts_with("build Sandy\n"), "as {who}: {log}");
        assert!(log.contains("dist/out.txt"), "as {who}: {log}");
    });
}
