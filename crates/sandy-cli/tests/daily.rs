//! A day of ordinary work through the real `sandy` binary: package managers install with
//! their default settings, each workflow's result inside matches the same command run
//! bare, the host's caches and configuration files stay byte-identical (hashed before and
//! after), credentials in package-manager configuration are never visible inside while
//! the other settings apply, and what the sandbox plants in a cache never reaches a later
//! bare run. As root and as the unprivileged user; the unprivileged user's caches are the
//! test world's, populated by running the bare command as that user first.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

const CANARY: &str = "CANARY-daily-7f3a-do-not-leak";

/// A stable digest of a tree: every entry's relative name, type, mode, size, content and
/// symlink target. Absent is its own value.
fn tree_hash(root: &Path) -> String {
    fn walk(root: &Path, path: &Path, h: &mut DefaultHasher, n: &mut usize) {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            "absent".hash(h);
            return;
        };
        *n += 1;
        path.strip_prefix(root).unwrap().hash(h);
        meta.mode().hash(h);
        meta.uid().hash(h);
        if meta.file_type().is_symlink() {
            std::fs::read_link(path).unwrap().hash(h);
        } else if meta.is_file() {
            std::fs::read(path).unwrap().hash(h);
        } else if meta.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .collect();
            entries.sort();
            for e in entries {
                walk(root, &e, h, n);
            }
        }
    }
    let mut h = DefaultHasher::new();
    let mut n = 0;
    walk(root, root, &mut h, &mut n);
    format!("{:016x} ({n} entries)", h.finish())
}

/// `sh -c SCRIPT` bare, as the test user, in `dir` under the world, with extra variables.
fn bare(w: &World, dir: &Path, env: &[(&str, String)], script: &str) -> Output {
    std::fs::create_dir_all(dir).unwrap();
    w.chown_all();
    let mut cmd = w.host("/bin/sh");
    cmd.args(["-c", script]).current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_timeout(cmd, 300)
}

/// `sandy run -- sh -c SCRIPT` as the test user, in `dir`, with extra variables.
fn inside(w: &World, dir: &Path, env: &[(&str, String)], script: &str) -> Output {
    std::fs::create_dir_all(dir).unwrap();
    w.chown_all();
    let mut cmd = w.sandy(["run", "--", "/bin/sh", "-c", script]);
    cmd.current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_timeout(cmd, 300)
}

fn dry_run(w: &World, env: &[(&str, String)]) -> serde_json::Value {
    let mut cmd = w.sandy(["run", "--dry-run", "--", "true"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    assert_code(&o, 0, "dry run");
    parse_dry_run(&o.stdout, "daily dry run")
}

fn cache_entry<'a>(doc: &'a serde_json::Value, tool: &str) -> &'a serde_json::Value {
    doc["caches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["tool"] == tool)
        .unwrap_or_else(|| panic!("no {tool} cache in {}", doc["caches"]))
}

/// Whether `program` is present and runnable by the world's user.
fn runnable(w: &World, program: &str, env: &[(&str, String)]) -> bool {
    let mut cmd = w.host("/bin/sh");
    cmd.args([
        "-c",
        &format!("command -v {program} >/dev/null && {program} --version"),
    ]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().is_ok_and(|o| o.status.success())
}

#[test]
fn npm_install_and_npx_work_on_a_copy_on_write_cache() {
    for_each_user(|w| {
        if !runnable(w, "npm", &[]) {
            skip("npm is not installed");
            return;
        }
        let npmrc = w.write(
            "home/.npmrc",
            &format!(
                "registry=https://registry.npmjs.org/\n\
                 //registry.npmjs.org/:_authToken={CANARY}\nupdate-notifier=false\nfund=false\n"
            ),
        );
        let npm_cache = w.home.join(".npm");
        let install = "npm install --no-audit is-number@7.0.0 >/dev/null && \
                       cat node_modules/is-number/package.json";
        // Bare first: the user's own cache is populated the ordinary way.
        let o = bare(w, &w.root.join("bare"), &[], install);
        assert_code(&o, 0, "bare npm install");
        let bare_pkg = stdout(&o);
        let before = (tree_hash(&npm_cache), tree_hash(&npmrc));

        // Inside: the same install (from the warm cache), npx fetching a package with a
        // bin, the npmrc's non-secret settings applied and its token invisible.
        let o = inside(
            w,
            &w.project,
            &[],
            &format!(
                "{install} && echo && npx --yes semver@7.6.3 1.2.3 && \
                 echo notifier=$(npm config get update-notifier) && cat ~/.npmrc && \
                 npm config list; env; echo planted > ~/.npm/_cacache/planted && \
                 echo planted-inside"
            ),
        );
        assert_code(&o, 0, "npm install and npx inside");
        let out = stdout(&o);
        assert!(
            out.starts_with(&bare_pkg),
            "inside:\n{out}\nbare:\n{bare_pkg}"
        );
        assert!(out.contains("\n1.2.3\n"), "{out}");
        assert!(out.contains("notifier=false"), "{out}");
        assert!(out.contains("planted-inside"), "{out}");
        assert!(!out.contains(CANARY), "the token leaked: {out}");
        assert!(
            !stderr(&o).contains(CANARY),
            "the token leaked: {}",
            stderr(&o)
        );

        // The host's cache and configuration never changed; the plant is not there.
        assert_eq!((tree_hash(&npm_cache), tree_hash(&npmrc)), before);
        assert!(!npm_cache.join("_cacache/planted").exists());
        // A later sandboxed run keeps its layer (the plant is there, downloads are kept).
        let o = inside(w, &w.project, &[], "cat ~/.npm/_cacache/planted");
        assert_code(&o, 0, "the layer is kept between sandboxed runs");
        // A later bare run does not see it.
        let o = bare(
            w,
            &w.root.join("bare2"),
            &[],
            &format!("{install} >/dev/null && ls ~/.npm/_cacache"),
        );
        assert_code(&o, 0, "bare npm install afterwards");
        assert!(!stdout(&o).contains("planted"), "{}", stdout(&o));

        // The dry run shows the overlay, and `sandy cache` lists and clears its layer.
        let doc = dry_run(w, &[]);
        let npm = cache_entry(&doc, "npm");
        assert_eq!(npm["kind"], "overlay");
        assert_eq!(npm["path"], npm_cache.display().to_string());
        let layer = PathBuf::from(npm["layer"].as_str().unwrap());
        assert!(layer.join("upper/_cacache/planted").exists());
        // Each run leaves its overlay's work directory behind; later runs remove those
        // of finished runs while they run (stopping when they end). Two more left as
        // the kernel leaves them (unreadable directories, the volatile marker), by
        // supervisors that are gone: a run that lasts removes them all, and only its
        // own is left.
        let dead: Vec<u32> = (1..=4_194_303u32)
            .rev()
            .filter(|pid| !Path::new(&format!("/proc/{pid}")).exists())
            .take(2)
            .collect();
        for pid in &dead {
            let work = layer.join(format!("work-{pid}/work"));
            let o = bare(
                w,
                &w.project,
                &[],
                &format!(
                    "mkdir -p {0}/incompat/volatile && : > {0}/incompat/volatile/dirty && \
                     chmod 000 {0}/incompat/volatile {0}/incompat {0}",
                    work.display()
                ),
            );
            assert_code(&o, 0, "a work directory as the kernel leaves it");
        }
        let o = inside(w, &w.project, &[], "sleep 1");
        assert_code(&o, 0, "a run that lasts");
        let work: Vec<String> = std::fs::read_dir(&layer)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("work-"))
            .collect();
        assert_eq!(work.len(), 1, "{work:?}");
        let mode = std::fs::metadata(&layer).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "layer mode {mode:o}");
        let o = w.sandy(["cache"]).output().unwrap();
        assert_code(&o, 0, "sandy cache");
        assert!(
            stdout(&o).contains(&format!("(over {})", npm_cache.display())),
            "{}",
            stdout(&o)
        );
        let o = w.sandy(["cache", "--clear"]).output().unwrap();
        assert_code(&o, 0, "sandy cache --clear");
        assert!(!layer.exists(), "{}", stdout(&o));
    });
}

/// The overlays of the layers earlier runs made are mounted while the policy is
/// resolved, and the policy still decides: the second run writes to the same layer, a
/// run refused by its policy leaves no work directory of its own, and a cache that a
/// `--read-write` grant covers is the host's own, written directly. Judged from outside.
#[test]
fn cache_overlays_mounted_ahead_follow_the_resolved_policy() {
    for_each_user(|w| {
        w.write("home/.npm/_cacache/index", "host");
        w.chown_all();
        let npm_cache = w.home.join(".npm");
        let before = tree_hash(&npm_cache);
        let works = |layer: &Path| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(layer)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("work-"))
                .collect();
            names.sort();
            names
        };

        // The first run makes the layer (no overlay is expected before it).
        let o = inside(w, &w.project, &[], "echo first > ~/.npm/_cacache/first");
        assert_code(&o, 0, "the first run");
        let doc = dry_run(w, &[]);
        let npm = cache_entry(&doc, "npm");
        assert_eq!(npm["kind"], "overlay");
        let layer = PathBuf::from(npm["layer"].as_str().unwrap());
        assert!(layer.join("upper/_cacache/first").exists());

        // The second run's overlay is the one mounted ahead: same layer, same view.
        let o = inside(
            w,
            &w.project,
            &[],
            "cat ~/.npm/_cacache/first ~/.npm/_cacache/index && \
             echo second > ~/.npm/_cacache/second",
        );
        assert_code(&o, 0, "the second run");
        assert_eq!(stdout(&o), "first\nhost");
        assert!(layer.join("upper/_cacache/second").exists());
        assert_eq!(tree_hash(&npm_cache), before, "the host cache changed");

        // Refused by its policy after the overlay was mounted ahead: nothing of it stays.
        let listed = works(&layer);
        let missing = w.home.join("no-such-path").display().to_string();
        let o = w
            .sandy(["run", "--read", &missing, "--", "true"])
            .output()
            .unwrap();
        assert_code(&o, 125, "a refused run");
        assert_eq!(
            works(&layer),
            listed,
            "the refused run left a work directory"
        );

        // A grant that covers the cache: the policy does not overlay it, and the overlay
        // mounted ahead is not used.
        let o = w
            .sandy([
                "run",
                "--read-write",
                &npm_cache.display().to_string(),
                "--",
                "/bin/sh",
                "-c",
                "echo direct > ~/.npm/_cacache/direct && cat ~/.npm/_cacache/index",
            ])
            .output()
            .unwrap();
        assert_code(&o, 0, "a run with the cache granted");
        assert_eq!(stdout(&o), "host");
        assert_eq!(
            std::fs::read_to_string(npm_cache.join("_cacache/direct")).unwrap(),
            "direct\n"
        );
        assert!(!layer.join("upper/_cacache/direct").exists());
    });
}

#[test]
fn an_absent_cache_is_redirected_into_the_private_tmp_and_nothing_is_created_in_the_home() {
    for_each_user(|w| {
        if !runnable(w, "npm", &[]) {
            skip("npm is not installed");
            return;
        }
        let doc = dry_run(w, &[]);
        let npm = cache_entry(&doc, "npm");
        assert_eq!(npm["kind"], "redirected");
        assert_eq!(npm["variable"], "npm_config_cache");
        assert_eq!(npm["layer"], "/tmp/.sandy-caches/npm");
        let o = inside(
            w,
            &w.project,
            &[],
            "npm install --no-audit --no-fund is-number@7.0.0 >/dev/null && \
             node -e 'console.log(require(\"is-number\")(5))' && \
             echo \"cache=$npm_config_cache\" && ls \"$npm_config_cache\"",
        );
        assert_code(&o, 0, "npm install without a host cache");
        let out = stdout(&o);
        assert!(
            out.starts_with("true\ncache=/tmp/.sandy-caches/npm\n"),
            "{out}"
        );
        assert!(out.contains("_cacache"), "the cache went elsewhere: {out}");
        // Nothing in the home: no ~/.npm, and no layer in Sandy's cache either.
        let left: Vec<_> = std::fs::read_dir(&w.home)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n != "project")
            .collect();
        assert!(left.is_empty(), "created in the home: {left:?}");
    });
}

#[test]
fn pip_installs_into_a_venv_and_the_host_cache_and_config_stay_unchanged() {
    for_each_user(|w| {
        let pip_conf = w.write(
            "home/.config/pip/pip.conf",
            &format!("[global]\ntimeout = 42\ndisable-pip-version-check = true\nupload-token = {CANARY}\n"),
        );
        let pypirc = w.write(
            "home/.pypirc",
            &format!(
                "[distutils]\nindex-servers = pypi\n[pypi]\nrepository = https://upload.pypi.org/legacy/\n\
                 username = __token__\npassword = {CANARY}\n"
            ),
        );
        let pip_cache = w.home.join(".cache/pip");
        let install = format!(
            "{PYTHON} -m venv v && v/bin/pip install -q six==1.16.0 && \
             v/bin/python -c 'import six; print(six.__version__)'"
        );
        let o = bare(w, &w.root.join("bare"), &[], &install);
        if o.status.code() != Some(0) && stderr(&o).contains("ensurepip") {
            skip("python3 -m venv has no ensurepip here");
            return;
        }
        assert_code(&o, 0, "bare pip install into a venv");
        // pip stores only what the index lets it cache; behind a proxy that forbids it,
        // the bare run leaves no cache, so one is made for the overlay to cover.
        if !pip_cache.is_dir() {
            w.write("home/.cache/pip/http-v2/seed", "seed\n");
        }
        let before = (
            tree_hash(&pip_cache),
            tree_hash(&pip_conf),
            tree_hash(&pypirc),
        );
        let o = inside(
            w,
            &w.project,
            &[],
            &format!(
                "{install} && v/bin/pip config list && cat ~/.pypirc && \
                 v/bin/pip cache dir && touch ~/.cache/pip/planted && echo planted-inside"
            ),
        );
        assert_code(&o, 0, "pip install into a venv inside");
        let out = stdout(&o);
        assert!(out.starts_with("1.16.0\n"), "{out}");
        assert!(out.contains("global.timeout='42'"), "{out}");
        assert!(
            out.contains("repository = https://upload.pypi.org/legacy/"),
            "{out}"
        );
        assert!(out.contains("planted-inside"), "{out}");
        assert!(out.contains(&format!("{}\n", pip_cache.display())), "{out}");
        assert!(!out.contains(CANARY), "the token leaked: {out}");
        assert_eq!(
            (
                tree_hash(&pip_cache),
                tree_hash(&pip_conf),
                tree_hash(&pypirc)
            ),
            before
        );
        assert!(!pip_cache.join("planted").exists());
    });
}

/// The Rust toolchain (rustc and cargo), from the `RUSTUP_TOOLCHAIN`-independent
/// toolchain directory of the user running the tests, if the test user can run it.
fn rust_toolchain(w: &World) -> Option<String> {
    let rustc = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = String::from_utf8(rustc.stdout).ok()?.trim().to_owned();
    let bin = format!("{sysroot}/bin");
    let path = format!("{bin}:/usr/local/bin:/usr/bin:/bin");
    runnable(w, "cargo", &[("PATH", path.clone())]).then_some(path)
}

#[test]
fn cargo_add_and_build_download_into_the_layer_and_a_planted_build_script_never_runs_bare() {
    for_each_user(|w| {
        let Some(path) = rust_toolchain(w) else {
            skip(&format!(
                "no Rust toolchain {} can run (it lives in another user's home)",
                w.user.label
            ));
            return;
        };
        let env = [("PATH", path)];
        let cargo_home = w.home.join(".cargo");
        std::fs::create_dir_all(&cargo_home).unwrap();
        let credentials = w.write(
            "home/.cargo/credentials.toml",
            &format!("[registry]\ntoken = \"{CANARY}\"\n"),
        );
        let config = w.write(
            "home/.cargo/config.toml",
            &format!(
                "[cargo-new]\nvcs = \"none\"\n[registries.private]\n\
                 index = \"sparse+https://registry.invalid/\"\ntoken = \"{CANARY}\"\n"
            ),
        );
        let build = "cargo new -q app && cd app && cargo add -q cfg-if@1.0.0 && \
                     cargo build -q && grep -A1 'name = \"cfg-if\"' Cargo.lock";
        let o = bare(w, &w.root.join("bare"), &env, build);
        assert_code(&o, 0, "bare cargo add + build");
        let bare_lock = stdout(&o);
        let before = (
            tree_hash(&cargo_home),
            tree_hash(&credentials),
            tree_hash(&config),
        );

        // Inside: the same workflow works with the default settings, the config's
        // non-secret setting applies (no .git from `cargo new`), no token is visible.
        let o = inside(
            w,
            &w.project,
            &env,
            &format!("{build} && ls -a && cat ~/.cargo/config.toml ~/.cargo/credentials.toml"),
        );
        assert_code(&o, 0, "cargo add + build inside");
        let out = stdout(&o);
        assert!(
            out.starts_with(&bare_lock),
            "inside:\n{out}\nbare:\n{bare_lock}"
        );
        assert!(
            !out.contains(".git\n"),
            "cargo-new.vcs did not apply: {out}"
        );
        assert!(out.contains("vcs = \"none\""), "{out}");
        assert!(!out.contains(CANARY), "the token leaked: {out}");

        // Plant a build script into the cached crate from inside. A later sandboxed build
        // runs it (the plant took effect in the layer) ...
        let plant = r#"set -e
src=$(ls -d ~/.cargo/registry/src/*/cfg-if-1.*)
printf 'fn main() { if let Ok(p) = std::env::var("PLANT_MARKER") { std::fs::write(p, "x").unwrap(); } }\n' > "$src/build.rs"
if grep -q '^build = ' "$src/Cargo.toml"; then sed -i 's/^build = .*/build = "build.rs"/' "$src/Cargo.toml"
else sed -i 's/^\[package\]/[package]\nbuild = "build.rs"/' "$src/Cargo.toml"; fi
echo planted"#;
        // From the crate's own directory: the project the later builds run in (a run
        // started elsewhere, even in the directory above, has layers of its own).
        let o = inside(w, &w.project.join("app"), &env, plant);
        assert_code(&o, 0, "planting a build script inside");
        let inside_marker = w.project.join("app/marker-inside");
        let o = inside(
            w,
            &w.project.join("app"),
            &[
                env[0].clone(),
                ("PLANT_MARKER", inside_marker.display().to_string()),
            ],
            "cargo clean -q && cargo build -q",
        );
        assert_code(&o, 0, "sandboxed build with the plant");
        assert!(
            inside_marker.exists(),
            "the plant had no effect inside, so the test proves nothing"
        );
        // Another project's sandboxed build of the same crate never runs it: its layer is
        // its own, and it sees the host's pristine copy.
        let other = w.home.join("other");
        let other_marker = other.join("app/marker-other");
        let o = inside(
            w,
            &other,
            &[
                env[0].clone(),
                ("PLANT_MARKER", other_marker.display().to_string()),
            ],
            &format!("{build} && ls ~/.cargo/registry/src/*/cfg-if-1.*"),
        );
        assert_code(&o, 0, "another project's sandboxed build");
        assert!(
            !other_marker.exists(),
            "the build script planted in one project ran in another"
        );
        assert!(!stdout(&o).contains("build.rs"), "{}", stdout(&o));
        // ... but the host cache is byte-identical and a bare build never runs it.
        assert_eq!(
            (
                tree_hash(&cargo_home),
                tree_hash(&credentials),
                tree_hash(&config)
            ),
            before
        );
        let bare_marker = w.root.join("marker-bare");
        let o = bare(
            w,
            &w.root.join("bare").join("app"),
            &[
                env[0].clone(),
                ("PLANT_MARKER", bare_marker.display().to_string()),
            ],
            "cargo clean -q && cargo build -q",
        );
        assert_code(&o, 0, "bare build afterwards");
        assert!(
            !bare_marker.exists(),
            "the planted build script ran outside"
        );
    });
}

/// Each project has its own cache layers: what one project's run changes in a cache is
/// kept for that project's later runs (the warm-cache benefit) and never seen by a run
/// in another project. `sandy cache` lists the layers per project. Judged from the host
/// and from the second project's run.
#[test]
fn cache_layers_are_each_projects_own() {
    for_each_user(|w| {
        w.write("home/.npm/_cacache/index", "host\n");
        let npm_cache = w.home.join(".npm");
        let before = tree_hash(&npm_cache);
        let a = w.project.clone();
        let b = w.home.join("b");
        let o = inside(
            w,
            &a,
            &[],
            "echo planted > ~/.npm/_cacache/planted && echo changed > ~/.npm/_cacache/index",
        );
        assert_code(&o, 0, "project a plants");
        let o = inside(
            w,
            &a,
            &[],
            "cat ~/.npm/_cacache/planted ~/.npm/_cacache/index",
        );
        assert_code(&o, 0, "project a's later run");
        assert_eq!(
            stdout(&o),
            "planted\nchanged\n",
            "project a keeps its layer"
        );
        let o = inside(
            w,
            &b,
            &[],
            "cat ~/.npm/_cacache/index; ls ~/.npm/_cacache; echo mine > ~/.npm/_cacache/b",
        );
        assert_code(&o, 0, "project b's run");
        assert_eq!(
            stdout(&o),
            "host\nindex\n",
            "project b saw project a's layer"
        );
        assert_eq!(tree_hash(&npm_cache), before, "the host cache changed");
        // Two projects, one layer each, listed per project.
        let o = w.sandy(["cache"]).output().unwrap();
        assert_code(&o, 0, "sandy cache");
        let out = stdout(&o);
        for project in [&a, &b] {
            assert!(
                out.contains(&format!("project {}  (", project.display())),
                "{out}"
            );
        }
        assert_eq!(out.matches("(over ").count(), 2, "{out}");
        let o = w.sandy(["cache", "--clear"]).output().unwrap();
        assert_code(&o, 0, "sandy cache --clear");
        let overlays = w.home.join(".cache/sandy/overlays");
        assert_eq!(std::fs::read_dir(&overlays).unwrap().count(), 0);
    });
}

/// The names through which a cache home configures or runs programs never outlive the
/// run that created them: a run writes `~/.cargo/config.toml` (absent on the host) with
/// a `rustc-wrapper`, and `~/.cargo/bin/cargo-x`. Its own build runs the wrapper (the
/// plant took effect, so the test proves something); after the run both are removed from
/// the layer and named, and no later build, in this project or another, runs it.
#[test]
fn cache_configuration_a_run_creates_never_reaches_a_later_build() {
    for_each_user(|w| {
        let Some(path) = rust_toolchain(w) else {
            skip(&format!(
                "no Rust toolchain {} can run (it lives in another user's home)",
                w.user.label
            ));
            return;
        };
        w.write("home/.cargo/registry/.keep", "");
        let cargo_home = w.home.join(".cargo");
        let before = tree_hash(&cargo_home);
        let marker = |dir: &Path| dir.join("wrapped");
        let env = |dir: &Path| {
            [
                ("PATH", path.clone()),
                ("PLANT_MARKER", marker(dir).display().to_string()),
            ]
        };
        let build = "(test -d app || cargo new -q --vcs none app) && cd app && \
                     cargo clean -q && cargo build -q --offline";
        let plant = format!(
            "printf '#!/bin/sh\\ntouch \"$PLANT_MARKER\"\\nexec \"$@\"\\n' > ~/.cargo/wrap.sh && \
             chmod +x ~/.cargo/wrap.sh && \
             printf '[build]\\nrustc-wrapper = \"%s/.cargo/wrap.sh\"\\n' \"$HOME\" > ~/.cargo/config.toml && \
             mkdir -p ~/.cargo/bin && cp ~/.cargo/wrap.sh ~/.cargo/bin/cargo-x && {build}"
        );
        let a = w.project.clone();
        let o = inside(w, &a, &env(&a), &plant);
        assert_code(&o, 0, "the planting run");
        assert!(
            marker(&a).exists(),
            "the wrapper did not run in its own run, so the test proves nothing\n{}",
            stderr(&o)
        );
        let err = stderr(&o);
        for name in ["config.toml", "bin"] {
            let named = format!("removed {}", cargo_home.join(name).display());
            assert!(err.contains(&named), "{name} not named:\n{err}");
        }
        assert_eq!(
            tree_hash(&cargo_home),
            before,
            "the host's CARGO_HOME changed"
        );
        std::fs::remove_file(marker(&a)).unwrap();
        let b = w.home.join("b");
        for dir in [&a, &b] {
            let o = inside(
                w,
                dir,
                &env(dir),
                &format!("test ! -e ~/.cargo/config.toml && test ! -e ~/.cargo/bin && {build}"),
            );
            assert_code(&o, 0, &format!("a later build in {}", dir.display()));
            assert!(
                !marker(dir).exists(),
                "the planted wrapper ran in {}",
                dir.display()
            );
        }
    });
}

#[test]
fn maven_reads_its_filtered_settings_and_its_repository_is_copy_on_write() {
    for_each_user(|w| {
        if !runnable(w, "mvn", &[]) {
            skip("Maven is not installed");
            return;
        }
        // Maven Central is not reachable from every machine: an offline build that needs
        // no plugin (`validate`) still parses settings.xml and resolves the repository.
        let settings = w.write(
            "home/.m2/settings.xml",
            &format!(
                "<settings>\n  <offline>true</offline>\n  <servers>\n    <server>\n      <id>corp</id>\n\
                 <username>me</username>\n      <password>{CANARY}</password>\n    </server>\n\
                 </servers>\n</settings>\n"
            ),
        );
        w.write(
            "home/project/pom.xml",
            "<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>\
             <groupId>x</groupId><artifactId>y</artifactId><version>1</version></project>\n",
        );
        let script = "mvn -o -q validate && echo validated";
        // Java takes the home from the password database (uid 65534's is /nonexistent):
        // the world's home is given to Maven the documented way, and Sandy appends to it.
        let user_home = format!("-Duser.home={}", w.home.display());
        let env = [("MAVEN_OPTS", user_home.clone())];
        let o = bare(w, &w.project, &env, script);
        assert_code(&o, 0, "bare mvn validate");
        let before = tree_hash(&w.home.join(".m2"));
        let o = inside(
            w,
            &w.project,
            &env,
            &format!(
                "{script} && cat ~/.m2/settings.xml && echo \"opts=$MAVEN_OPTS\" && \
                 touch ~/.m2/repository/planted && echo planted-inside"
            ),
        );
        assert_code(&o, 0, "mvn validate inside");
        let out = stdout(&o);
        assert!(out.contains("validated"), "{out}");
        assert!(out.contains("<username>me</username>"), "{out}");
        assert!(!out.contains(CANARY), "the password leaked: {out}");
        assert!(out.contains(&format!("opts={user_home}\n")), "{out}");
        assert!(out.contains("planted-inside"), "{out}");
        // The bare run created the repository: it is an overlay inside.
        let doc = dry_run(w, &env);
        let maven = cache_entry(&doc, "maven");
        assert_eq!(maven["kind"], "overlay");
        assert_eq!(
            maven["path"],
            w.home.join(".m2/repository").display().to_string()
        );
        assert_eq!(tree_hash(&w.home.join(".m2")), before);
        assert!(!w.home.join(".m2/repository/planted").exists());
        assert_eq!(
            std::fs::read_to_string(&settings)
                .unwrap()
                .matches(CANARY)
                .count(),
            1
        );
    });
}

#[test]
fn uv_from_pypi_installs_into_a_venv_on_a_copy_on_write_cache() {
    for_each_user(|w| {
        // uv is installed the way PyPI offers it, into a venv outside the project.
        let tools = w.root.join("tools");
        let o = bare(
            w,
            &w.root,
            &[],
            &format!("{PYTHON} -m venv tools && tools/bin/pip install -q uv"),
        );
        if o.status.code() != Some(0) {
            skip(&format!(
                "uv cannot be installed from PyPI here: {}",
                stderr(&o)
            ));
            return;
        }
        let path = format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            tools.join("bin").display()
        );
        // This machine's TLS goes through a proxy that only the system store trusts.
        let env = [
            ("PATH", path),
            (
                "SSL_CERT_FILE",
                "/etc/ssl/certs/ca-certificates.crt".to_owned(),
            ),
        ];
        let uv_cache = w.home.join(".cache/uv");
        let script = "uv venv -q --python /usr/bin/python3 .venv && \
                      uv pip install -q --python .venv/bin/python six==1.16.0 && \
                      .venv/bin/python -c 'import six; print(six.__version__)'";
        let o = bare(w, &w.root.join("bare"), &env, script);
        assert_code(&o, 0, "bare uv");
        assert!(
            uv_cache.is_dir(),
            "the bare run did not populate ~/.cache/uv"
        );
        let before = tree_hash(&uv_cache);
        let o = inside(
            w,
            &w.project,
            &env,
            &format!("{script} && uv cache dir && touch ~/.cache/uv/planted"),
        );
        assert_code(&o, 0, "uv inside");
        let out = stdout(&o);
        assert!(out.starts_with("1.16.0\n"), "{out}");
        assert!(out.contains(&format!("{}\n", uv_cache.display())), "{out}");
        assert_eq!(tree_hash(&uv_cache), before);
        assert!(!uv_cache.join("planted").exists());
    });
}
