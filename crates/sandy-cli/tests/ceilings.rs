//! Resource ceilings (issue 40, design section 3.8), end to end through the real binary:
//! a fork bomb, a memory hog, a large file and a full /tmp, each with a small explicit
//! ceiling, each bounded in time and run inside a test cgroup that caps the whole test
//! (Sandy, its supervisor and everything it starts), so that a failure of Sandy's own
//! ceiling cannot hurt the machine. Each is judged from outside: the test cgroup's
//! counters (the peak number of processes, of memory), the line Sandy printed, the
//! status. Where no test cgroup can be made (not root, no pids/memory controller), the
//! tests that need one are reported as skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

const MIB: u64 = 1024 * 1024;

/// A cgroup capping one test: `pids` and `memory`, cgroup v2 when it offers both, else
/// the v1 hierarchies. Delegated to the test user (its directories and process files
/// are theirs), so that Sandy, run as that user inside it, can make the run's cgroup
/// below it, as under a service manager's `Delegate=yes`. Removed on drop (what is
/// left in it killed first).
struct TestCgroup {
    /// v2: `[T]`, Sandy's supervisor in `T/leaf`; v1: `T` in each hierarchy.
    dirs: Vec<PathBuf>,
    v2: bool,
}

fn own_path(controller: Option<&str>) -> Option<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = match controller {
            None => list.is_empty(),
            Some(c) => list.split(',').any(|x| x == c),
        };
        hit.then(|| path.trim_start_matches('/').to_owned())
    })
}

impl TestCgroup {
    /// `None` (a reported skip) when no test cgroup can be made.
    fn new(user: &User, max_procs: u64, max_memory: u64) -> Option<TestCgroup> {
        if !is_root() {
            skip("the ceilings tests cap themselves with a cgroup of their own, which needs root");
            return None;
        }
        let name = unique("sandy-test-ceilings");
        let give = |p: &Path| {
            std::os::unix::fs::chown(p, Some(user.uid), Some(user.gid)).unwrap();
        };
        let v2_root = Path::new("/sys/fs/cgroup");
        let v2_offers = std::fs::read_to_string(v2_root.join("cgroup.subtree_control"))
            .is_ok_and(|c| c.contains("pids") && c.contains("memory"));
        if v2_offers {
            let t = v2_root.join(&name);
            std::fs::create_dir(&t).unwrap();
            std::fs::write(t.join("pids.max"), (max_procs + 64).to_string()).unwrap();
            std::fs::write(t.join("memory.max"), max_memory.to_string()).unwrap();
            let _ = std::fs::write(t.join("memory.swap.max"), "0");
            std::fs::write(t.join("cgroup.subtree_control"), "+pids +memory").unwrap();
            std::fs::create_dir(t.join("leaf")).unwrap();
            for p in [
                t.clone(),
                t.join("cgroup.procs"),
                t.join("cgroup.subtree_control"),
                t.join("leaf"),
                t.join("leaf/cgroup.procs"),
            ] {
                give(&p);
            }
            return Some(TestCgroup {
                dirs: vec![t],
                v2: true,
            });
        }
        let mut dirs = Vec::new();
        for controller in ["pids", "memory"] {
            let path = own_path(Some(controller));
            let mount = ["pids", "memory"]
                .iter()
                .map(|c| v2_root.join(c))
                .find(|m| m.ends_with(controller) && m.join("cgroup.procs").exists());
            let (Some(path), Some(mount)) = (path, mount) else {
                for d in &dirs {
                    let _ = std::fs::remove_dir(d);
                }
                skip(&format!(
                    "no cgroup with the {controller} controller on this machine"
                ));
                return None;
            };
            let t = mount.join(path).join(&name);
            std::fs::create_dir(&t).unwrap();
            if controller == "pids" {
                std::fs::write(t.join("pids.max"), (max_procs + 64).to_string()).unwrap();
            } else {
                std::fs::write(t.join("memory.limit_in_bytes"), max_memory.to_string()).unwrap();
                let _ = std::fs::write(
                    t.join("memory.memsw.limit_in_bytes"),
                    max_memory.to_string(),
                );
            }
            for p in [t.clone(), t.join("cgroup.procs"), t.join("tasks")] {
                give(&p);
            }
            dirs.push(t);
        }
        Some(TestCgroup { dirs, v2: false })
    }

    fn pids_dir(&self) -> &Path {
        &self.dirs[0]
    }

    fn memory_dir(&self) -> &Path {
        self.dirs.last().unwrap()
    }

    /// `sandy ARGS...` as the world's user, in the world's project, started inside the
    /// test cgroup (a root shell moves itself in, then becomes the user and Sandy).
    fn sandy(&self, w: &World, args: &[&str]) -> Command {
        let targets: Vec<String> = if self.v2 {
            vec![self.dirs[0].join("leaf/cgroup.procs").display().to_string()]
        } else {
            self.dirs
                .iter()
                .map(|d| d.join("cgroup.procs").display().to_string())
                .collect()
        };
        let moves: String = targets
            .iter()
            .map(|t| format!("echo $$ > {} && ", shell_quote(t)))
            .collect();
        let script = format!("{moves}exec {}\"$@\"", w.setpriv_prefix());
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", &script, "sh"])
            .arg(sandy_bin())
            .args(args)
            .current_dir(&w.project)
            .env_clear()
            .envs(w.base_env())
            .stdin(Stdio::null());
        cmd
    }

    fn read(&self, dir: &Path, file: &str) -> String {
        std::fs::read_to_string(dir.join(file)).unwrap_or_default()
    }

    fn counter(&self, dir: &Path, file: &str, key: &str) -> u64 {
        self.read(dir, file)
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == key).then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0)
    }

    /// The most processes and threads the test's cgroup held at once.
    fn pids_peak(&self) -> u64 {
        self.read(self.pids_dir(), "pids.peak")
            .trim()
            .parse()
            .unwrap_or(0)
    }

    /// The most memory the test's cgroup held at once.
    fn memory_peak(&self) -> u64 {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        self.read(self.memory_dir(), file)
            .trim()
            .parse()
            .unwrap_or(0)
    }

    /// Whether the test's own cap (not Sandy's) was ever reached.
    fn own_cap_reached(&self) -> bool {
        let pids = self.counter(self.pids_dir(), "pids.events", "max") > 0;
        let memory = if self.v2 {
            self.counter(self.memory_dir(), "memory.events", "oom_kill") > 0
        } else {
            self.counter(self.memory_dir(), "memory.oom_control", "oom_kill") > 0
        };
        pids || memory
    }

    /// The cgroups left under the test's cgroup (Sandy's run cgroups must be gone).
    fn children(&self) -> Vec<String> {
        let mut left = Vec::new();
        for d in &self.dirs {
            for e in std::fs::read_dir(d).unwrap().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if e.path().is_dir() && name != "leaf" {
                    left.push(name);
                }
            }
        }
        left
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // Everything left in it killed (a failed test), then every directory removed,
        // deepest first.
        for d in &self.dirs {
            if self.v2 {
                let _ = std::fs::write(d.join("cgroup.kill"), "1");
            } else {
                for pid in self.read(d, "cgroup.procs").lines() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
        }
        for d in &self.dirs {
            let mut dirs: Vec<PathBuf> = std::fs::read_dir(d)
                .map(|r| {
                    r.flatten()
                        .map(|e| e.path())
                        .filter(|p| p.is_dir())
                        .collect()
                })
                .unwrap_or_default();
            dirs.push(d.clone());
            for dir in dirs {
                for _ in 0..200 {
                    if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}

/// Runs `cmd` to its end within `secs` (the test fails, and the test cgroup is killed,
/// past it).
fn bounded(cmd: Command, secs: u64) -> Output {
    run_timeout(cmd, secs)
}

/// A fork bomb beside a target that sleeps `seconds`, with `flags` (the ceilings asked
/// for), inside a test cgroup capping `ceiling` processes and `memory` bytes: a process
/// of the same user outside still forks meanwhile, the run names the ceiling it reached,
/// the whole test's peak stayed at `ceiling` (Sandy's own processes within 16 of it), and
/// nothing is left.
fn fork_bomb(w: &World, flags: &[&str], ceiling: u64, memory: u64, seconds: u64) {
    let Some(cg) = TestCgroup::new(&w.user, ceiling, memory) else {
        return;
    };
    // The bomb runs beside the target, which ends then: Sandy ends the rest of the run
    // with it.
    let script = format!(
        "sleep {seconds} & S=$!; b() {{ b | b & }}; b 2>/dev/null; wait $S; echo target-done"
    );
    let mut args = vec!["run", "--explain", "off"];
    args.extend_from_slice(flags);
    args.extend(["--", "/bin/sh", "-c", &script]);
    let mut cmd = cg.sandy(w, &args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let collector = Collector::start(&mut child);
    // Meanwhile a process of the same user outside still forks.
    std::thread::sleep(Duration::from_millis(seconds * 1000 / 2));
    let outside = w
        .host("/bin/sh")
        .args([
            "-c",
            "for i in 1 2 3 4 5 6 7 8; do /bin/true & done; wait; echo forked",
        ])
        .output()
        .unwrap();
    assert_code(&outside, 0, "forks outside during the bomb");
    assert!(stdout(&outside).contains("forked"));
    let status = wait_timeout(&mut child, 90, "the fork bomb run");
    let o = collector.finish(status);
    let err = stderr(&o);
    assert!(started.elapsed() < Duration::from_secs(90));
    assert!(
        err.contains(&format!(
            "sandy: the run reached its process ceiling ({ceiling} processes and threads)"
        )) && err.contains("--max-procs"),
        "no ceiling line: {err}"
    );
    // The peak of the whole test (Sandy's supervisor, bootstrap and init included)
    // stayed at the ceiling: the bomb reached it and went no further.
    let peak = cg.pids_peak();
    assert!(
        (ceiling..=ceiling + 16).contains(&peak),
        "peak {peak} processes\n{err}"
    );
    assert!(
        !cg.own_cap_reached(),
        "the test's own cap was reached: {err}"
    );
    assert!(cg.children().is_empty(), "left behind: {:?}", cg.children());
}

#[test]
fn a_fork_bomb_stops_at_the_process_ceiling_and_the_host_can_still_fork() {
    for_each_user(|w| fork_bomb(w, &["--max-procs", "40"], 40, 512 * MIB, 3));
}

/// The same bomb with the default ceilings (no flag): it stops at the default process
/// ceiling.
#[test]
fn with_the_defaults_a_fork_bomb_stops_at_the_default_ceiling_and_the_host_can_still_fork() {
    for_each_user(|w| fork_bomb(w, &[], 4096, 4096 * MIB, 4));
}

#[test]
fn a_memory_hog_is_killed_at_the_memory_ceiling_with_137_and_a_line() {
    for_each_user(|w| {
        let Some(cg) = TestCgroup::new(&w.user, 256, 512 * MIB) else {
            return;
        };
        // 256 MiB, touched page by page, against a 64 MiB ceiling.
        let hog = "exec /usr/bin/python3 -c 'b = bytearray(256 * 1024 * 1024); print(len(b))'";
        let o = bounded(
            cg.sandy(
                w,
                &[
                    "run",
                    "--explain",
                    "off",
                    "--max-memory",
                    "64M",
                    "--",
                    "/bin/sh",
                    "-c",
                    hog,
                ],
            ),
            60,
        );
        assert_code(&o, 137, "the memory hog");
        let err = stderr(&o);
        assert!(
            err.contains("sandy: the run reached its memory ceiling (64 MiB)")
                && err.contains("--max-memory"),
            "no ceiling line: {err}"
        );
        let peak = cg.memory_peak();
        assert!(peak < 64 * MIB + 64 * MIB, "peak {} MiB", peak / MIB);
        assert!(!cg.own_cap_reached(), "the test's own cap was reached");
        // Outside, the same user still allocates.
        let outside = w
            .host(PYTHON)
            .args(["-c", "b = bytearray(128 * 1024 * 1024); print(len(b))"])
            .output()
            .unwrap();
        assert_code(&outside, 0, "an allocation outside");
        assert!(cg.children().is_empty(), "left behind: {:?}", cg.children());
    });
}

#[test]
fn a_file_past_the_file_size_ceiling_gets_sigxfsz_and_a_line() {
    for_each_user(|w| {
        let Some(cg) = TestCgroup::new(&w.user, 256, 512 * MIB) else {
            return;
        };
        let o = bounded(
            cg.sandy(
                w,
                &[
                    "run",
                    "--explain",
                    "off",
                    "--max-file-size",
                    "1M",
                    "--",
                    "/bin/sh",
                    "-c",
                    "exec dd if=/dev/zero of=big bs=64k count=64 2>/dev/null",
                ],
            ),
            60,
        );
        assert_code(&o, 128 + 25, "dd past the file-size ceiling");
        let err = stderr(&o);
        assert!(
            err.contains("a process wrote past the file-size ceiling (1 MiB)")
                && err.contains("--max-file-size"),
            "no ceiling line: {err}"
        );
        let size = std::fs::metadata(w.project.join("big")).unwrap().len();
        assert_eq!(size, MIB, "the file grew to {size} bytes");
        assert!(cg.children().is_empty(), "left behind: {:?}", cg.children());
    });
}

#[test]
fn a_full_private_tmp_gives_enospc_and_a_line_and_the_disk_behind_it_stays_empty() {
    for_each_user(|w| {
        let Some(cg) = TestCgroup::new(&w.user, 256, 512 * MIB) else {
            return;
        };
        let script = "dd if=/dev/zero of=/tmp/fill bs=64k count=64 2>/dev/null; echo dd=$?; \
                      dd if=/dev/zero of=/var/tmp/fill bs=64k count=64 2>/dev/null; echo var=$?; \
                      dd if=/dev/zero of=\"$TMPDIR/more\" bs=64k count=1 2>/dev/null; echo more=$?; \
                      ls -d \"$TMPDIR\" >/dev/null && echo tmpdir-same=$(stat -f -c %T \"$TMPDIR\")";
        let o = bounded(
            cg.sandy(
                w,
                &[
                    "run",
                    "--explain",
                    "off",
                    "--max-tmp",
                    "1M",
                    "--",
                    "/bin/sh",
                    "-c",
                    script,
                ],
            ),
            60,
        );
        assert_code(&o, 0, "filling /tmp");
        let out = stdout(&o);
        assert!(out.contains("dd=1\n"), "dd was not refused: {out}");
        assert!(
            out.contains("var=1\n"),
            "dd into /var/tmp was not refused: {out}"
        );
        // TMPDIR (the per-run directory's own name) is the same tmpfs, full too.
        assert!(
            out.contains("more=1\n"),
            "TMPDIR is not the same tmpfs: {out}"
        );
        assert!(out.contains("tmpdir-same=tmpfs"), "{out}");
        let err = stderr(&o);
        assert!(
            err.contains("sandy: the run filled its private /tmp (1 MiB)")
                && err.contains("sandy: the run filled its private /var/tmp (1 MiB)")
                && err.contains("--max-tmp"),
            "no ceiling line: {err}"
        );
        // Nothing of it landed on the host.
        let runs = w.runs();
        let leftovers: Vec<_> = std::fs::read_dir(&runs)
            .map(|r| r.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(
            leftovers.is_empty(),
            "left in {}: {leftovers:?}",
            runs.display()
        );
        assert!(cg.children().is_empty(), "left behind: {:?}", cg.children());
    });
}

#[test]
fn the_run_cannot_raise_its_own_ceilings() {
    for_each_user(|w| {
        let Some(cg) = TestCgroup::new(&w.user, 256, 512 * MIB) else {
            return;
        };
        // Every limit file of every cgroup the run is in: written to the largest value.
        let script = "for c in $(cut -d: -f3 /proc/self/cgroup | sort -u); do \
                        for f in /sys/fs/cgroup/*$c/pids.max /sys/fs/cgroup/*$c/memory.max \
                                 /sys/fs/cgroup/*$c/memory.limit_in_bytes \
                                 /sys/fs/cgroup/*/*$c/pids.max /sys/fs/cgroup/*$c/cgroup.procs; do \
                          [ -e \"$f\" ] && (echo max > \"$f\") 2>/dev/null && echo \"wrote $f\"; \
                        done; done; echo checked";
        let o = bounded(
            cg.sandy(
                w,
                &[
                    "run",
                    "--explain",
                    "off",
                    "--max-procs",
                    "100",
                    "--",
                    "/bin/sh",
                    "-c",
                    script,
                ],
            ),
            60,
        );
        assert_code(&o, 0, "writes to the run's cgroup");
        let out = stdout(&o);
        assert!(out.contains("checked"), "{out}");
        assert!(!out.contains("wrote"), "the run wrote its cgroup: {out}");
    });
}

#[test]
fn bad_ceiling_values_are_usage_errors_in_one_line() {
    let w = World::new(users()[0]);
    for (flag, value, expect) in [
        ("--max-memory", "lots", "'lots' is not a size"),
        ("--max-procs", "many", "'many' is not a count"),
        ("--max-procs", "2", "below the smallest ceiling"),
        ("--max-file-size", "1.5G", "is not a size"),
        ("--max-tmp", "0", "below the smallest ceiling"),
        ("--cpu", "two", "is not a number of CPUs"),
    ] {
        let o = w
            .sandy(["run", flag, value, "--", "true"])
            .output()
            .unwrap();
        assert_code(&o, 2, &format!("{flag} {value}"));
        let err = stderr(&o);
        let first = err.lines().next().unwrap_or_default();
        assert!(
            first.contains(flag) && first.contains(expect),
            "{flag} {value}: {err}"
        );
    }
}

#[test]
fn the_dry_run_names_each_ceiling_and_what_holds_it() {
    for_each_user(|w| {
        let o = w
            .sandy(["run", "--dry-run", "--max-procs", "123", "--", "true"])
            .output()
            .unwrap();
        assert_code(&o, 0, "dry run");
        let doc = parse_dry_run(&o.stdout, "dry run with ceilings");
        let c = &doc["ceilings"];
        assert_eq!(c["max_procs"]["value"], 123);
        assert_eq!(c["max_procs"]["origin"], "flag");
        assert_eq!(c["max_memory"]["origin"], "default");
        assert_eq!(c["max_file_size"]["mechanism"], "rlimit");
        assert_eq!(c["max_file_size"]["control"], "RLIMIT_FSIZE");
        assert_eq!(c["max_tmp"]["mechanism"], "tmpfs");
        assert_eq!(c["oom_score_adj"], 500);
        let procs = c["max_procs"]["mechanism"].as_str().unwrap();
        assert!(
            ["cgroup_v2", "cgroup_v1", "rlimit"].contains(&procs),
            "an explicit --max-procs held by {procs}"
        );
    });
}

#[test]
fn doctor_names_what_holds_the_ceilings() {
    for_each_user(|w| {
        let o = w.sandy(["doctor", "--json"]).output().unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let c = &doc["ceilings"];
        assert!(c["detail"].is_string(), "{doc}");
        let procs = c["mechanisms"]["max_procs"].as_str().unwrap();
        if w.user.uid == 0 {
            // Root is exempt from RLIMIT_NPROC: a cgroup or nothing.
            assert_ne!(procs, "rlimit", "{doc}");
        }
        let o = w.sandy(["doctor"]).output().unwrap();
        assert!(
            stdout(&o)
                .lines()
                .any(|l| l.trim_start().starts_with("ceilings")),
            "{}",
            stdout(&o)
        );
    });
}

/// The defaults let a real build through: `cargo build -j` of a small crate.
#[test]
fn the_defaults_let_a_cargo_build_through() {
    for_each_user(|w| {
        let Ok(rustc) = Command::new("rustc").args(["--print", "sysroot"]).output() else {
            skip("no Rust toolchain");
            return;
        };
        let sysroot = String::from_utf8_lossy(&rustc.stdout).trim().to_owned();
        let path = format!("{sysroot}/bin:/usr/local/bin:/usr/bin:/bin");
        let runnable = w
            .host(&format!("{sysroot}/bin/cargo"))
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !runnable {
            skip(&format!(
                "no Rust toolchain {} can run (it lives in another user's home)",
                w.user.label
            ));
            return;
        }
        w.write(
            "home/project/app/Cargo.toml",
            "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
        );
        w.write(
            "home/project/app/src/main.rs",
            "fn main() { println!(\"built-{}\", std::thread::available_parallelism().map_or(1, |n| n.get())); }\n",
        );
        let mut cmd = w.sandy([
            "run",
            "--explain",
            "off",
            "--",
            "/bin/sh",
            "-c",
            "cd app && cargo build -q -j 8 --offline && ./target/debug/app",
        ]);
        cmd.env("PATH", &path);
        let o = run_timeout(cmd, 300);
        assert_code(&o, 0, "cargo build with the default ceilings");
        assert!(stdout(&o).contains("built-"), "{}", stdout(&o));
        assert!(!stderr(&o).contains("ceiling"), "{}", stderr(&o));
    });
}
