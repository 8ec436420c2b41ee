//! `sandy-bench`: measures what Sandy costs, side by side with the same work done bare.
//!
//! Run from the repository root:
//!
//! ```text
//! cargo build --release && cargo run --release -p sandy-bench
//! ```
//!
//! It times, alternating bare and sandboxed runs so that drift hits both alike:
//! start-up (`sandy run -- true` against `true`, against `bwrap` with a comparable policy
//! when it is installed, and against `unshare` creating the same namespaces and nothing
//! else, the kernel's floor), a file-heavy workload on a generated tree of 20,000 files,
//! git on a generated repository of 5,000 files and 500 commits, and the supervisor's peak
//! resident memory. It prints a markdown table of medians, overheads, ratios and goals.
//! Everything it generates lives in one temporary directory (under `/var/tmp` unless told
//! otherwise), removed at the end.
//!
//! With root it also measures the egress proxy (`net.rs`: a large download, connection
//! latency, 200 concurrent connections, the supervisor's RSS meanwhile) in a network
//! namespace of its own; `--no-net` skips that, `--net-only` measures only that.
//!
//! Options: `--sandy PATH` (default: `sandy` beside this executable, i.e.
//! `target/<host triple>/release/sandy`; or `$SANDY_BIN`), `--dir DIR` (where the
//! scratch directory goes; or `$SANDY_BENCH_DIR`; default `/var/tmp`), `--quick` (few
//! runs: a smoke test of the benchmark itself, not a measurement), `--rounds N` (measured
//! rounds per comparison). `--sizes-only`: the launch in projects of three sizes.
//! `--opens`: `rg -c` over the file tree, bare, under `bwrap`, under Sandy (and each
//! `--also PATH` build: experimental variants), side by side (issue 38, goal 4).

use std::collections::BTreeMap;
use std::error::Error;
use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod net;

type Res<T> = Result<T, Box<dyn Error>>;

/// Goals, from the tracker.
const GOAL_STARTUP_OVERHEAD_MS: f64 = 1.5;
const GOAL_RATIO: f64 = 1.03;
/// Package managers on a warm copy-on-write cache (issue 12).
const GOAL_CACHE_RATIO: f64 = 1.05;
/// How much the cache support may add to a start-up where no cache is in play.
const GOAL_NO_CACHE_GROWTH_MS: f64 = 0.2;
/// Open-heavy work, `rg -c` over the file tree (issue 38, goal 4).
const GOAL_OPENS_RATIO: f64 = 1.05;
const GOAL_SUPERVISOR_RSS_KIB: u64 = 4 * 1024;

/// Sizes of the generated workloads.
const TREE_FILES: usize = 20_000;
const TREE_DIRS: usize = 200;
const NEEDLE_EVERY: usize = 97;
const REPO_FILES: usize = 5_000;
const REPO_COMMITS: usize = 500;
const FILES_PER_COMMIT: usize = 10;
const LINES_PER_FILE: usize = 12;

/// How many runs each measurement makes.
struct Counts {
    startup_warmup: usize,
    startup_runs: usize,
    work_warmup: usize,
    work_runs: usize,
    heavy_runs: usize,
    rss_runs: usize,
}

const FULL: Counts = Counts {
    startup_warmup: 20,
    startup_runs: 301,
    work_warmup: 2,
    work_runs: 31,
    heavy_runs: 31,
    rss_runs: 3,
};

const QUICK: Counts = Counts {
    startup_warmup: 2,
    startup_runs: 11,
    work_warmup: 1,
    work_runs: 3,
    heavy_runs: 3,
    rss_runs: 1,
};

fn main() -> Res<()> {
    let started = Instant::now();
    // The network rows' helpers: the measurement inside its own network namespace, and
    // the client it runs bare and sandboxed.
    let argv: Vec<String> = std::env::args().collect();
    match argv.get(1).map(String::as_str) {
        Some("__net-rows") => {
            let (Some(sandy), Some(dir)) = (argv.get(2), argv.get(3)) else {
                return Err("usage: __net-rows SANDY DIR".into());
            };
            return net::rows_child(Path::new(sandy), Path::new(dir));
        }
        Some("__net-client") => return net::client(&argv[2..]),
        Some("__net-serve") => return net::serve_child(),
        Some("__ceilings") => {
            return ceilings_child(argv.get(2).map(String::as_str) == Some("with"))
        }
        _ => {}
    }
    let opts = Options::parse()?;
    let mut counts = if opts.quick { QUICK } else { FULL };
    if let Some(rounds) = opts.rounds {
        counts.work_runs = rounds;
        counts.heavy_runs = rounds;
        counts.startup_runs = rounds;
    }
    let counts = &counts;
    let sandy = opts.sandy.clone();
    if !sandy.is_file() {
        return Err(format!(
            "no sandy binary at {}: run `cargo build --release` first (or pass --sandy PATH)",
            sandy.display()
        )
        .into());
    }

    let scratch = tempfile::Builder::new()
        .prefix("sandy-bench-")
        .tempdir_in(&opts.dir)
        .map_err(|e| {
            format!(
                "cannot create a scratch directory in {}: {e}",
                opts.dir.display()
            )
        })?;
    let root = std::fs::canonicalize(scratch.path())?;
    let env = ChildEnv::new();

    println!("# Sandy benchmark\n");
    print!("{}", machine_description(&sandy)?);
    println!("- projects under: {}\n", root.display());
    let load_before = load_average();
    if opts.quick {
        println!("**--quick: a smoke test with few runs, not a measurement.**\n");
    }

    let mut rows = Vec::new();
    let mut details = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    // The resource ceilings' start-up cost: the kernel's part, the run's cgroup.
    if !opts.net_only && !opts.opens_only {
        progress("resource ceilings");
        let label = "ceilings: the run's cgroup made, limited, entered and removed, vs none";
        match ceilings_variants(&root) {
            Ok(pair) => {
                let s = measure(
                    &pair,
                    &env,
                    counts.startup_warmup,
                    counts.startup_runs,
                    false,
                )?;
                rows.push(Row::new(label, &s[0], &s[1], Goal::Reference));
                details.extend(
                    pair.iter()
                        .zip(&s)
                        .map(|(v, s)| (v.label.clone(), s.clone())),
                );
            }
            Err(why) => rows.push(Row::missing(label, &why.to_string())),
        }
    }
    if opts.ceilings_only {
        println!("{}", render_table(&rows));
        println!("{}", render_details(&details));
        return Ok(());
    }
    if opts.opens_only {
        opens(
            &sandy,
            opts.baseline.as_deref(),
            &opts.also,
            &root,
            &env,
            counts,
            &mut rows,
            &mut notes,
            &mut details,
        )?;
        println!("{}", render_table(&rows));
        println!("{}", render_details(&details));
        for note in &notes {
            println!("- {note}");
        }
        println!("- load average after: {}", load_average());
        return Ok(());
    }
    if opts.sizes_only {
        sizes(
            &sandy,
            opts.baseline.as_deref(),
            &root,
            &env,
            counts,
            &mut rows,
            &mut notes,
            &mut details,
        )?;
        println!("{}", render_table(&rows));
        println!("{}", render_details(&details));
        for note in &notes {
            println!("- {note}");
        }
        return Ok(());
    }
    if opts.net_only {
        progress("egress proxy");
        match net::rows(&sandy, &root) {
            Ok(raw) => rows.extend(
                raw.into_iter()
                    .map(|(workload, cells)| Row { workload, cells }),
            ),
            Err(why) => rows.push(Row::missing("egress proxy", &why)),
        }
        println!("{}", render_table(&rows));
        return Ok(());
    }

    // 1. Start-up.
    progress("start-up");
    let empty = project_dir(&root, "startup")?;
    let true_bin = which("true").ok_or("`true` is not on PATH")?;
    let mut variants = vec![
        Variant::bare("true", &empty, [true_bin.as_os_str()]),
        Variant::sandy("sandy run -- true", &sandy, &empty, ["true"]),
        Variant::sandy_args(
            "sandy run --dry-run -- true",
            &sandy,
            &empty,
            &["--dry-run"],
            ["true"],
        ),
    ];
    let bwrap = which("bwrap")
        .map(|bin| Variant::bwrap(&bin, &empty, [true_bin.as_os_str()]))
        .transpose()?;
    let bwrap = usable_reference("bwrap", bwrap, &env, &mut notes);
    let has_bwrap = bwrap.is_some();
    variants.extend(bwrap);
    // The kernel's own price for the namespaces Sandy needs (user, mount, IPC), paid by a
    // small C program that does nothing else: a floor no launcher that uses them can go
    // below on this machine.
    let floor = which("unshare").map(|bin| Variant::unshare(&bin, &empty, &true_bin));
    let floor = usable_reference("unshare (util-linux)", floor, &env, &mut notes);
    let floor_at = floor.is_some().then_some(variants.len());
    variants.extend(floor);
    let s = measure(
        &variants,
        &env,
        counts.startup_warmup,
        counts.startup_runs,
        false,
    )?;
    let startup_overhead = s[1].median - s[0].median;
    let net = |name: &str, bare: &Stats, sandy: &Stats| {
        let extra = sandy.median - bare.median - startup_overhead;
        format!(
            "`{name}`: overhead net of the start-up overhead {extra:+.2} ms ({:+.1}% of bare)",
            100.0 * extra / bare.median
        )
    };
    // One workload's row, its net-overhead note and its two detail rows.
    let record = |rows: &mut Vec<Row>,
                  notes: &mut Vec<String>,
                  details: &mut Vec<(String, Stats)>,
                  label: String,
                  name: &str,
                  s: &[Stats]| {
        rows.push(Row::new(&label, &s[0], &s[1], Goal::Ratio(GOAL_RATIO)));
        notes.push(net(name, &s[0], &s[1]));
        details.push((format!("bare {name}"), s[0].clone()));
        details.push((format!("sandy {name}"), s[1].clone()));
    };
    rows.push(Row::new(
        "start-up: `sandy run -- true` vs `true`",
        &s[0],
        &s[1],
        Goal::OverheadMs(GOAL_STARTUP_OVERHEAD_MS),
    ));
    if has_bwrap {
        rows.push(Row::new(
            "start-up: `sandy run -- true` vs `bwrap … true`",
            &s[3],
            &s[1],
            Goal::Reference,
        ));
    } else {
        rows.push(Row::missing(
            "start-up: `sandy run -- true` vs `bwrap … true`",
            "bwrap: not installed",
        ));
    }
    rows.push(Row::new(
        "resolution only: `sandy run --dry-run -- true` vs `true`",
        &s[0],
        &s[2],
        Goal::Reference,
    ));
    match floor_at {
        Some(i) => rows.push(Row::new(
            "kernel floor: `unshare --user --mount --ipc true` vs `true`",
            &s[0],
            &s[i],
            Goal::Reference,
        )),
        None => rows.push(Row::missing(
            "kernel floor: `unshare --user --mount --ipc true` vs `true`",
            "unshare: not available",
        )),
    }
    details.extend(
        variants
            .iter()
            .zip(&s)
            .map(|(v, s)| (v.label.clone(), s.clone())),
    );

    // 1b. Launch cost by project size (issue 38).
    sizes(
        &sandy,
        opts.baseline.as_deref(),
        &root,
        &env,
        counts,
        &mut rows,
        &mut notes,
        &mut details,
    )?;

    // 2. File-heavy workload.
    progress("generating the file tree");
    let tree = project_dir(&root, "files")?;
    let needles = generate_tree(&tree)?;
    progress("file-heavy workload");
    for (name, script) in [
        ("find . -type f | wc -l", "find . -type f | wc -l"),
        // Piped: GNU grep stops at the first match when its output is /dev/null.
        ("grep -r needle . | wc -l", "grep -r needle . | wc -l"),
    ] {
        let pair = [
            Variant::bare(name, &tree, ["sh", "-c", script]),
            Variant::sandy(name, &sandy, &tree, ["sh", "-c", script]),
        ];
        let s = measure(&pair, &env, counts.work_warmup, counts.work_runs, true)?;
        record(
            &mut rows,
            &mut notes,
            &mut details,
            format!("files: `{name}` (20,000 files)"),
            name,
            &s,
        );
    }
    notes.push(format!(
        "file tree: {TREE_FILES} files in {TREE_DIRS} directories, {needles} containing the needle"
    ));

    // 2b. The refusal observer (`--explain`, on by default): the same workloads under
    // `sandy run` with it and with `--explain=off`, side by side. Reads never reach it;
    // each write-intent call costs one round trip to the supervisor.
    progress("refusal observer");
    let writes = "mkdir w && cd w && i=0; while [ $i -lt 5000 ]; do : > f$i; i=$((i+1)); done; \
                  ls | wc -l; cd .. && rm -r w";
    for (name, script, label, goal) in [
        (
            "grep -r needle . | wc -l",
            "grep -r needle . | wc -l",
            "observer: `grep -r needle . | wc -l`, `sandy run` vs `--explain=off`",
            Goal::Ratio(GOAL_RATIO),
        ),
        (
            "create 5,000 files",
            writes,
            "observer: creating and removing 5,000 files, `sandy run` vs `--explain=off`",
            Goal::Reference,
        ),
    ] {
        let trio = [
            Variant::sandy_args(
                &format!("sandy --explain=off {name}"),
                &sandy,
                &tree,
                &["--explain=off"],
                ["sh", "-c", script],
            ),
            Variant::sandy(name, &sandy, &tree, ["sh", "-c", script]),
        ];
        let s = measure(&trio, &env, counts.work_warmup, counts.work_runs, true)?;
        rows.push(Row::new(label, &s[0], &s[1], goal));
        notes.push(format!(
            "observer, `{name}`: {:+.2} ms per run with it ({:+.1}%)",
            s[1].median - s[0].median,
            100.0 * (s[1].median - s[0].median) / s[0].median
        ));
        details.push((trio[0].label.clone(), s[0].clone()));
        details.push((format!("sandy {name} (observer on)"), s[1].clone()));
    }

    // 3. Build-like workload: git.
    progress("generating the git repository");
    let repo = project_dir(&root, "repo")?;
    let log_bytes = generate_repo(&repo, &env)?;
    progress("git workload");
    for (name, argv, runs) in [
        ("git status", vec!["git", "status"], counts.work_runs),
        (
            "git log -p | wc -c",
            vec!["sh", "-c", "git log -p | wc -c"],
            counts.heavy_runs,
        ),
    ] {
        let pair = [
            Variant::bare(name, &repo, argv.iter().copied()),
            Variant::sandy(name, &sandy, &repo, argv.iter().copied()),
        ];
        let s = measure(&pair, &env, counts.work_warmup, runs, true)?;
        record(
            &mut rows,
            &mut notes,
            &mut details,
            format!("git: `{name}` (5,000 files, 500 commits)"),
            name,
            &s,
        );
    }
    notes.push(format!(
        "git repository: {REPO_FILES} files, {REPO_COMMITS} commits, `git log -p` prints {log_bytes} bytes"
    ));

    // 4. Package managers on a warm copy-on-write cache, and start-up where no cache is
    // in play.
    package_managers(
        &sandy,
        opts.baseline.as_deref(),
        &root,
        &env,
        counts,
        &mut rows,
        &mut notes,
        &mut details,
    )?;

    // 5. Supervisor memory.
    progress("supervisor peak RSS");
    let (bare_kib, sandy_kib, target_kib) = measure_rss(&sandy, &empty, &env, counts.rss_runs)?;
    rows.push(Row::rss(bare_kib, sandy_kib));
    if let Some(kib) = target_kib {
        notes.push(format!(
            "the sandboxed `sleep` itself (the target, a different pid): VmHWM {}",
            kib_text(kib)
        ));
    }

    // 5. The egress proxy.
    if opts.net {
        progress("egress proxy");
        match net::rows(&sandy, &root) {
            Ok(raw) => rows.extend(
                raw.into_iter()
                    .map(|(workload, cells)| Row { workload, cells }),
            ),
            Err(why) => rows.push(Row::missing("egress proxy", &why)),
        }
    }

    println!("{}", render_table(&rows));
    println!("{}", render_details(&details));
    notes.push(format!(
        "load average (1 min) before: {load_before}, after: {} (anything else running skews the figures)",
        load_average()
    ));
    for note in &notes {
        println!("- {note}");
    }
    let elapsed = started.elapsed();
    println!("\nTotal benchmark time: {:.0} s.", elapsed.as_secs_f64());

    scratch
        .close()
        .map_err(|e| format!("cannot remove the scratch directory: {e}"))?;
    Ok(())
}

/// The big project of the size rows: `BIG_PACKAGES` installed packages of
/// `BIG_PACKAGE_DIRS` directories each (a `node_modules` of that shape).
const BIG_PACKAGES: usize = 1_700;
const BIG_PACKAGE_DIRS: usize = 30;

/// `sandy run -- true` in projects of three sizes, against `bwrap` with the same set-up
/// in each (and the `--baseline` build), measured side by side; the first launch in a
/// project (nothing kept from an earlier one); and the mechanism's floor, one `lstat` per
/// directory of the big project, timed in this process.
#[allow(clippy::too_many_arguments)]
fn sizes(
    sandy: &Path,
    baseline: Option<&Path>,
    root: &Path,
    env: &ChildEnv,
    counts: &Counts,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
    details: &mut Vec<(String, Stats)>,
) -> Res<()> {
    progress("generating the projects of three sizes");
    let true_bin = which("true").ok_or("`true` is not on PATH")?;
    let empty = project_dir(root, "size-empty")?;
    let files = project_dir(root, "size-git-20k")?;
    generate_tree(&files)?;
    git(&files, env, &["init", "-q"])?;
    git(&files, env, &["add", "-A"])?;
    git(
        &files,
        env,
        &[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@e",
            "commit",
            "-qm",
            "tree",
        ],
    )?;
    let big = project_dir(root, "size-51k")?;
    let dirs = generate_big(root, &big, env)?;
    // Old enough for a kept record to take every directory on trust, as a project is
    // whose last change was more than a second before the launch.
    std::thread::sleep(Duration::from_millis(1200));
    let bwrap = which("bwrap");
    let runs = counts.work_runs;
    let mut medians = Vec::new();
    for (name, dir) in [
        ("empty project", &empty),
        ("git repository, 20,000 files", &files),
        (
            "51,000 directories, 3 nested repositories and a submodule",
            &big,
        ),
    ] {
        progress(&format!("start-up by size: {name}"));
        let mut vs = vec![
            Variant::bare("true", dir, [true_bin.as_os_str()]),
            Variant::sandy("sandy run -- true", sandy, dir, ["true"]),
        ];
        let base_at = baseline.map(|b| {
            vs.push(Variant::sandy(
                "baseline sandy run -- true",
                b,
                dir,
                ["true"],
            ));
            vs.len() - 1
        });
        let bwrap_at = match &bwrap {
            Some(bin) => {
                vs.push(Variant::bwrap(bin, dir, [true_bin.as_os_str()])?);
                Some(vs.len() - 1)
            }
            None => None,
        };
        // The first launch in a project reads every directory: nothing kept (a state
        // directory that cannot be made).
        let mut cold = Variant::sandy("sandy run -- true, nothing kept", sandy, dir, ["true"]);
        cold.env
            .push(("XDG_STATE_HOME".into(), "/dev/null/nothing-kept".into()));
        vs.push(cold);
        let cold_at = vs.len() - 1;
        let s = measure(&vs, env, counts.work_warmup.max(2), runs, false)?;
        match bwrap_at {
            Some(i) => rows.push(Row::new(
                &format!("size, {name}: `sandy run -- true` vs `bwrap … true`"),
                &s[i],
                &s[1],
                Goal::Ratio(1.0),
            )),
            None => rows.push(Row::missing(
                &format!("size, {name}: `sandy run -- true` vs `bwrap … true`"),
                "bwrap: not installed",
            )),
        }
        if let Some(i) = base_at {
            rows.push(Row::new(
                &format!("size, {name}: this build vs the baseline build"),
                &s[i],
                &s[1],
                Goal::Reference,
            ));
        }
        rows.push(Row::new(
            &format!("size, {name}: first launch (nothing kept) vs `true`"),
            &s[0],
            &s[cold_at],
            Goal::Reference,
        ));
        details.extend(
            vs.iter()
                .zip(&s)
                .map(|(v, st)| (format!("{} ({name})", v.label), st.clone())),
        );
        medians.push(s[1].clone());
    }
    if let (Some(small), Some(large)) = (medians.first(), medians.last()) {
        rows.push(Row::new(
            "size: `sandy run -- true`, 51,000 directories vs the empty project",
            small,
            large,
            Goal::OverheadMs(1.0),
        ));
    }
    // The floor of a walk that looks at every directory once, as the walk before a
    // launch and the one after a run each do.
    let mut floor = Vec::new();
    for _ in 0..runs.max(3) {
        let start = Instant::now();
        for d in &dirs {
            std::fs::symlink_metadata(d)?;
        }
        floor.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    floor.sort_by(f64::total_cmp);
    let floor_ms = floor.get(floor.len() / 2).copied().unwrap_or(f64::NAN);
    notes.push(format!(
        "size rows: one `lstat` of each of the big project's {} directories by path, in \
         this process, takes {floor_ms:.1} ms (median of {}): the floor of one walk, and \
         a launch makes two (before and after the run)",
        dirs.len(),
        floor.len()
    ));
    Ok(())
}

/// The open-heavy row (issue 38, goal 4): `rg -c needle .` over the 20,000-file tree,
/// bare, under `bwrap` with the comparable set-up, under this `sandy` (and with `--tier
/// landlock`, no namespaces), under the `--baseline` build and under every `--also`
/// build, side by side in one run. ripgrep searches on every core and prints its counts
/// in the order it finishes the files, so the output is compared sorted.
#[allow(clippy::too_many_arguments)]
fn opens(
    sandy: &Path,
    baseline: Option<&Path>,
    also: &[PathBuf],
    root: &Path,
    env: &ChildEnv,
    counts: &Counts,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
    details: &mut Vec<(String, Stats)>,
) -> Res<()> {
    const LABEL: &str = "opens: `rg -c needle .` over 20,000 files";
    let Some(rg) = which("rg") else {
        rows.push(Row::missing(
            LABEL,
            "rg: not installed (apt-get install -y ripgrep)",
        ));
        return Ok(());
    };
    progress("generating the file tree");
    let files = project_dir(root, "opens")?;
    let needles = generate_tree(&files)?;
    let argv = [
        rg.as_os_str(),
        "-c".as_ref(),
        "needle".as_ref(),
        ".".as_ref(),
    ];
    let mut vs = vec![
        Variant::bare("rg -c", &files, argv),
        Variant::sandy("sandy run -- rg -c", sandy, &files, argv),
        Variant::sandy_args(
            "sandy run --tier landlock -- rg -c",
            sandy,
            &files,
            &["--tier", "landlock"],
            argv,
        ),
    ];
    if let Some(b) = baseline {
        vs.push(Variant::sandy(
            "baseline sandy run -- rg -c",
            b,
            &files,
            argv,
        ));
    }
    for (i, path) in also.iter().enumerate() {
        let name = path
            .file_name()
            .unwrap_or(path.as_os_str())
            .to_string_lossy();
        vs.push(Variant::sandy(
            &format!("sandy (also {}: {name}) run -- rg -c", i + 1),
            path,
            &files,
            argv,
        ));
    }
    if let Some(bin) = which("bwrap") {
        let mut v = Variant::bwrap(&bin, &files, argv)?;
        v.label = "bwrap rg -c".to_owned();
        vs.push(v);
    } else {
        notes.push("opens: bwrap not installed".to_owned());
    }
    // The same work: every variant counts the same needles in the same files.
    let sorted = |out: Vec<u8>| {
        let mut lines: Vec<Vec<u8>> = out.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
        lines.sort();
        lines
    };
    let want = sorted(run_once(&vs[0], env)?.1);
    let found = want.iter().filter(|l| !l.is_empty()).count();
    if found != needles {
        return Err(format!("bare rg found needles in {found} files, not {needles}").into());
    }
    for v in &vs[1..] {
        if sorted(run_once(v, env)?.1) != want {
            return Err(format!("`{}` did not count what bare `rg` counted", v.label).into());
        }
    }
    // Start-up in the same project, in the same rounds, so that the per-open cost can
    // be told from the launch's.
    let true_bin = which("true").ok_or("`true` is not on PATH")?;
    let startups = vs.len();
    vs.push(Variant::bare("true", &files, [true_bin.as_os_str()]));
    vs.push(Variant::sandy("sandy run -- true", sandy, &files, ["true"]));
    progress("opens: rg -c over 20,000 files");
    let s = measure(&vs, env, counts.work_warmup, counts.work_runs, false)?;
    notes.push(format!(
        "opens: start-up in the same project and rounds, `sandy run -- true` {} ms, bare \
         `true` {} ms",
        ms_text(s[startups + 1].median),
        ms_text(s[startups].median)
    ));
    let vs_rg = &vs[..startups];
    for (v, st) in vs_rg.iter().zip(&s).skip(1) {
        let goal = if v.label == "sandy run -- rg -c" {
            Goal::Ratio(GOAL_OPENS_RATIO)
        } else {
            Goal::Reference
        };
        rows.push(Row::new(
            &format!("{LABEL}: `{}` vs bare", v.label),
            &s[0],
            st,
            goal,
        ));
    }
    details.extend(
        vs.iter()
            .zip(&s)
            .map(|(v, st)| (v.label.clone(), st.clone())),
    );
    Ok(())
}

/// Writes the big project: a repository whose `node_modules` holds [`BIG_PACKAGES`]
/// packages of [`BIG_PACKAGE_DIRS`] directories, with three nested repositories and a
/// submodule. Returns every directory's path.
fn generate_big(root: &Path, big: &Path, env: &ChildEnv) -> Res<Vec<PathBuf>> {
    git(big, env, &["init", "-q"])?;
    for p in 0..BIG_PACKAGES {
        let lib = big.join(format!("node_modules/pkg{p:04}/lib"));
        for d in 0..BIG_PACKAGE_DIRS - 2 {
            let dir = lib.join(format!("d{d:02}"));
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("index.js"), "module.exports = 1;\n")?;
        }
    }
    for nested in ["packages/a", "packages/b/c", "tools/d/e"] {
        let dir = big.join(nested);
        std::fs::create_dir_all(&dir)?;
        git(&dir, env, &["init", "-q"])?;
    }
    let origin = project_dir(root, "size-submodule-origin")?;
    git(&origin, env, &["init", "-q"])?;
    std::fs::write(origin.join("README"), "sub\n")?;
    git(&origin, env, &["add", "README"])?;
    let who = ["-c", "user.name=b", "-c", "user.email=b@e"];
    git(
        &origin,
        env,
        &[&who[..], &["commit", "-qm", "sub"]].concat(),
    )?;
    let origin_text = origin.to_string_lossy().into_owned();
    git(
        big,
        env,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &origin_text,
            "libs/sub",
        ],
    )?;
    let mut dirs = Vec::new();
    let mut stack = vec![big.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            }
        }
        dirs.push(d);
    }
    Ok(dirs)
}

/// `cargo build` of a small crate with one dependency and `npm install` of one package,
/// each from a warm cache (the user's own caches, so the sandboxed runs see them through
/// their overlays), bare and inside; and the start-up of `sandy run -- true` in a home
/// without any cache and with no package manager on `PATH`, against an earlier build
/// when `--baseline` names one.
#[allow(clippy::too_many_arguments)]
fn package_managers(
    sandy: &Path,
    baseline: Option<&Path>,
    root: &Path,
    env: &ChildEnv,
    counts: &Counts,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
    details: &mut Vec<(String, Stats)>,
) -> Res<()> {
    let pair_row = |rows: &mut Vec<Row>,
                    details: &mut Vec<(String, Stats)>,
                    label: &str,
                    name: &str,
                    cwd: &Path,
                    script: &str|
     -> Res<()> {
        let pair = [
            Variant::bare(name, cwd, ["sh", "-c", script]),
            Variant::sandy(name, sandy, cwd, ["sh", "-c", script]),
        ];
        // Warm the caches (bare and inside) before timing.
        for v in &pair {
            run_once(v, env)?;
        }
        let s = measure(&pair, env, counts.work_warmup, counts.heavy_runs, true)?;
        rows.push(Row::new(label, &s[0], &s[1], Goal::Ratio(GOAL_CACHE_RATIO)));
        details.push((format!("bare {name}"), s[0].clone()));
        details.push((format!("sandy {name}"), s[1].clone()));
        Ok(())
    };
    if which("cargo").is_some() {
        progress("cargo build, warm cache");
        let dir = project_dir(root, "cargo-build")?;
        std::fs::write(
            dir.join("Cargo.toml"),
            "[package]\nname = \"bench-app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\ncfg-if = \"1\"\n\n[workspace]\n",
        )?;
        std::fs::create_dir(dir.join("src"))?;
        std::fs::write(
            dir.join("src/main.rs"),
            "cfg_if::cfg_if! { if #[cfg(unix)] { fn os() -> &'static str { \"unix\" } } \
             else { fn os() -> &'static str { \"other\" } } }\nfn main() { println!(\"{}\", os()); }\n",
        )?;
        pair_row(
            rows,
            details,
            "cargo: `cargo build` of a crate with one dependency, warm cache",
            "cargo clean + build",
            &dir,
            "cargo clean -q && cargo build -q && ./target/debug/bench-app",
        )?;
    } else {
        rows.push(Row::missing(
            "cargo: `cargo build`, warm cache",
            "cargo: not installed",
        ));
    }
    if which("npm").is_some() {
        progress("npm install, warm cache");
        let dir = project_dir(root, "npm-install")?;
        std::fs::write(
            dir.join("package.json"),
            "{ \"name\": \"bench-app\", \"version\": \"1.0.0\", \"private\": true,\n  \
             \"dependencies\": { \"is-number\": \"7.0.0\" } }\n",
        )?;
        pair_row(
            rows,
            details,
            "npm: `npm install` of one package, warm cache",
            "npm install",
            &dir,
            "rm -rf node_modules package-lock.json && \
             npm install --prefer-offline --no-audit --no-fund --silent && \
             cat node_modules/is-number/package.json | wc -c",
        )?;
    } else {
        rows.push(Row::missing(
            "npm: `npm install`, warm cache",
            "npm: not installed",
        ));
    }

    // Start-up with no cache in play: an empty home, and a PATH holding only `true`.
    progress("start-up without caches");
    let home = project_dir(root, "empty-home")?;
    let bin = project_dir(root, "only-true")?;
    let true_bin = which("true").ok_or("`true` is not on PATH")?;
    std::os::unix::fs::symlink(&true_bin, bin.join("true"))?;
    let project = home.join("project");
    std::fs::create_dir(&project)?;
    let vars: [(&str, &OsStr); 3] = [
        ("HOME", home.as_os_str()),
        ("PATH", bin.as_os_str()),
        ("XDG_CACHE_HOME", home.as_os_str()),
    ];
    let mut variants = vec![
        Variant::bare("true (empty home)", &project, [true_bin.as_os_str()]).with_env(&vars),
        Variant::sandy("sandy run -- true (empty home)", sandy, &project, ["true"]).with_env(&vars),
    ];
    if let Some(base) = baseline {
        variants.push(
            Variant::sandy(
                "baseline sandy run -- true (empty home)",
                base,
                &project,
                ["true"],
            )
            .with_env(&vars),
        );
    }
    let s = measure(
        &variants,
        env,
        counts.startup_warmup,
        counts.startup_runs,
        false,
    )?;
    match baseline {
        Some(base) => {
            rows.push(Row::new(
                "start-up, no cache in play: this build vs the baseline build",
                &s[2],
                &s[1],
                Goal::OverheadMs(GOAL_NO_CACHE_GROWTH_MS),
            ));
            notes.push(format!("baseline build: {}", base.display()));
        }
        None => rows.push(Row::new(
            "start-up, no cache in play: `sandy run -- true` vs `true` (no --baseline)",
            &s[0],
            &s[1],
            Goal::Reference,
        )),
    }
    details.extend(
        variants
            .iter()
            .zip(&s)
            .map(|(v, s)| (v.label.clone(), s.clone())),
    );
    notes.push(
        "the first start-up rows run in the caller's home, where every cache that exists is \
         mounted as an overlay; the no-cache row runs in an empty home with only `true` on PATH"
            .to_owned(),
    );
    Ok(())
}

struct Options {
    sandy: PathBuf,
    /// An earlier `sandy` build, for the start-up row without any cache in play.
    baseline: Option<PathBuf>,
    quick: bool,
    /// Only the egress proxy's rows are wanted with `--net-only`; `net` is false with
    /// `--no-net`.
    net: bool,
    net_only: bool,
    /// Only the resource ceilings' row (`--ceilings-only`).
    ceilings_only: bool,
    /// Only the launch cost by project size (`--sizes-only`).
    sizes_only: bool,
    /// Only the open-heavy row, `rg -c` over the file tree (`--opens`).
    opens_only: bool,
    /// Further `sandy` builds measured beside this one in the `--opens` row (`--also
    /// PATH`, repeatable): experimental variants.
    also: Vec<PathBuf>,
    /// Where the scratch directory (and so every project) goes.
    dir: PathBuf,
    /// How many measured rounds each comparison makes (`--rounds N`), instead of the
    /// defaults: more on a noisy machine.
    rounds: Option<usize>,
}

impl Options {
    fn parse() -> Res<Options> {
        let mut sandy = std::env::var_os("SANDY_BIN").map(PathBuf::from);
        let mut quick = false;
        let mut net = true;
        let mut net_only = false;
        let mut ceilings_only = false;
        let mut sizes_only = false;
        let mut opens_only = false;
        let mut also = Vec::new();
        let mut rounds = None;
        let mut baseline = std::env::var_os("SANDY_BASELINE_BIN").map(PathBuf::from);
        let mut dir = std::env::var_os("SANDY_BENCH_DIR").map(PathBuf::from);
        let mut args = std::env::args_os().skip(1);
        while let Some(arg) = args.next() {
            match arg.to_str() {
                Some("--quick") => quick = true,
                Some("--no-net") => net = false,
                Some("--net-only") => net_only = true,
                Some("--ceilings-only") => ceilings_only = true,
                Some("--sizes-only") => sizes_only = true,
                Some("--opens") => opens_only = true,
                Some("--rounds") => {
                    let n = args.next().ok_or("--rounds needs a number")?;
                    rounds = Some(
                        n.to_str()
                            .and_then(|n| n.parse::<usize>().ok())
                            .filter(|n| *n > 0)
                            .ok_or("--rounds needs a positive number")?,
                    );
                }
                Some("--also") => {
                    also.push(PathBuf::from(args.next().ok_or("--also needs a path")?));
                }
                Some("--sandy") => {
                    sandy = Some(PathBuf::from(args.next().ok_or("--sandy needs a path")?));
                }
                Some("--baseline") => {
                    baseline = Some(PathBuf::from(args.next().ok_or("--baseline needs a path")?));
                }
                Some("--dir") => {
                    dir = Some(PathBuf::from(args.next().ok_or("--dir needs a path")?));
                }
                Some("-h" | "--help") => {
                    println!(
                        "usage: cargo run --release -p sandy-bench -- \
                         [--quick] [--no-net | --net-only | --ceilings-only | --sizes-only | --opens]\n\
                         [--sandy PATH] [--baseline PATH] [--also PATH]... [--rounds N]\n\
                         [--dir DIR]\n\
                         Run `cargo build --release` first; see BENCHMARKS.md."
                    );
                    std::process::exit(0);
                }
                _ => return Err(format!("unknown argument {arg:?} (try --help)").into()),
            }
        }
        let sandy = match sandy {
            Some(p) => p,
            None => std::env::current_exe()?
                .parent()
                .ok_or("the benchmark executable has no directory")?
                .join("sandy"),
        };
        // Not /tmp by default: a project under /tmp is a special case for Sandy (its
        // private /tmp has to be given the project's path), and costs more than a project
        // in a home directory would.
        let dir = match dir {
            Some(d) => d,
            None if Path::new("/var/tmp").is_dir() => PathBuf::from("/var/tmp"),
            None => std::env::temp_dir(),
        };
        Ok(Options {
            sandy: std::path::absolute(sandy)?,
            baseline: baseline.map(std::path::absolute).transpose()?,
            quick,
            sizes_only,
            opens_only,
            also: also
                .into_iter()
                .map(std::path::absolute)
                .collect::<Result<_, _>>()?,
            net,
            net_only,
            ceilings_only,
            dir,
            rounds,
        })
    }
}

/// The kernel's part of the resource ceilings' start-up cost, without the rest of a
/// launch: this program (`__ceilings without`) starting `true` and waiting for it, as
/// Sandy's supervisor does its bootstrap (the reference), and the same (`__ceilings
/// with`) with what Sandy does around it for the ceilings: the run's cgroup made in each
/// hierarchy Sandy would use (cgroup v2, or the v1 `pids` and `memory` ones), its limits
/// written (`pids.max`, the memory limit), the process moved into it before it starts
/// `true`, and, after `true` has ended, the cgroup removed. Needs root.
fn ceilings_variants(root: &Path) -> Res<Vec<Variant>> {
    if !is_root() {
        return Err("needs root (the cgroup is made where only root may)".into());
    }
    ceiling_places()?;
    let me = std::env::current_exe()?;
    Ok(vec![
        Variant::bare(
            "start `true`",
            root,
            [me.as_os_str(), "__ceilings".as_ref(), "without".as_ref()],
        ),
        Variant::bare(
            "start `true` in a cgroup of its own",
            root,
            [me.as_os_str(), "__ceilings".as_ref(), "with".as_ref()],
        ),
    ])
}

/// Each hierarchy's directory where the benchmark's cgroup is made (this process's own
/// cgroup there), with the limits written.
type Places = Vec<(PathBuf, Vec<(&'static str, &'static str)>)>;

fn ceiling_places() -> Res<Places> {
    let own = std::fs::read_to_string("/proc/self/cgroup")?;
    let own_path = |controller: &str| {
        own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
            let hit = if controller.is_empty() {
                list.is_empty()
            } else {
                list.split(',').any(|x| x == controller)
            };
            hit.then(|| path.trim_start_matches('/').to_owned())
        })
    };
    let v2 = Path::new("/sys/fs/cgroup");
    let v2_has = std::fs::read_to_string(v2.join("cgroup.subtree_control"))
        .is_ok_and(|c| c.contains("pids") && c.contains("memory"));
    Ok(if v2_has {
        vec![(
            v2.to_path_buf(),
            vec![("pids.max", "4096"), ("memory.max", "8589934592")],
        )]
    } else {
        let pids = own_path("pids").ok_or("no pids cgroup")?;
        let memory = own_path("memory").ok_or("no memory cgroup")?;
        vec![
            (v2.join("pids").join(pids), vec![("pids.max", "4096")]),
            (
                v2.join("memory").join(memory),
                vec![("memory.limit_in_bytes", "8589934592")],
            ),
        ]
    })
}

/// `__ceilings with|without`: one measured run of [`ceilings_variants`].
fn ceilings_child(with: bool) -> Res<()> {
    let places = if with { ceiling_places()? } else { Vec::new() };
    let name = format!("sandy-bench-{}", std::process::id());
    for (dir, limits) in &places {
        let d = dir.join(&name);
        std::fs::create_dir(&d)?;
        for (file, value) in limits {
            std::fs::write(d.join(file), value)?;
        }
        std::fs::write(d.join("cgroup.procs"), std::process::id().to_string())?;
    }
    let status = Command::new("true").status()?;
    for (dir, _) in &places {
        // Out again (into the cgroup it came from), then the cgroup removed.
        std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string())?;
        std::fs::remove_dir(dir.join(&name))?;
    }
    if !status.success() {
        return Err("`true` failed".into());
    }
    Ok(())
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0")
    })
}

fn progress(what: &str) {
    eprintln!("sandy-bench: {what}…");
}

/// The environment every measured command gets: this process's, less what `cargo run`
/// adds (its library search path and `CARGO_*` variables), the same for bare and sandboxed.
struct ChildEnv {
    removed: Vec<OsString>,
}

impl ChildEnv {
    fn new() -> ChildEnv {
        let removed = std::env::vars_os()
            .map(|(k, _)| k)
            .filter(|k| {
                let k = k.to_string_lossy();
                k.starts_with("CARGO") || k == "LD_LIBRARY_PATH" || k == "RUST_RECURSION_COUNT"
            })
            .collect();
        ChildEnv { removed }
    }

    fn apply(&self, cmd: &mut Command) {
        for k in &self.removed {
            cmd.env_remove(k);
        }
    }
}

/// A directory to use as a Sandy project: never `/` nor `$HOME`.
fn project_dir(root: &Path, name: &str) -> Res<PathBuf> {
    let dir = root.join(name);
    std::fs::create_dir(&dir)?;
    let dir = std::fs::canonicalize(&dir)?;
    let home = std::env::var_os("HOME").and_then(|h| std::fs::canonicalize(h).ok());
    if dir == Path::new("/") || Some(&dir) == home.as_ref() {
        return Err(format!("refusing {} as a project directory", dir.display()).into());
    }
    Ok(dir)
}

fn which(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// One command line to time.
#[derive(Clone)]
struct Variant {
    label: String,
    argv: Vec<OsString>,
    cwd: PathBuf,
    /// Variables set on top of the common environment.
    env: Vec<(OsString, OsString)>,
}

impl Variant {
    fn bare<I, S>(label: &str, cwd: &Path, argv: I) -> Variant
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Variant {
            label: format!("bare {label}"),
            argv: argv.into_iter().map(|a| a.as_ref().to_owned()).collect(),
            cwd: cwd.to_owned(),
            env: Vec::new(),
        }
    }

    fn sandy<I, S>(label: &str, sandy: &Path, cwd: &Path, argv: I) -> Variant
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Variant::sandy_args(label, sandy, cwd, &[], argv)
    }

    fn sandy_args<I, S>(label: &str, sandy: &Path, cwd: &Path, opts: &[&str], argv: I) -> Variant
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut full: Vec<OsString> = vec![sandy.into(), "run".into()];
        full.extend(opts.iter().map(OsString::from));
        full.push("--".into());
        full.extend(argv.into_iter().map(|a| a.as_ref().to_owned()));
        let label = if label.starts_with("sandy") {
            label.to_owned()
        } else {
            format!("sandy {label}")
        };
        Variant {
            label,
            argv: full,
            cwd: cwd.to_owned(),
            env: Vec::new(),
        }
    }

    /// `bwrap` with a policy comparable to Sandy's default: the system read-only, the
    /// project read-write, a private /tmp, every namespace but the network's, and death
    /// with the parent. No `--new-session`: Sandy keeps the terminal usable, so that would
    /// not compare.
    fn bwrap<I, S>(bwrap: &Path, project: &Path, argv: I) -> Res<Variant>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut a: Vec<OsString> = vec![bwrap.into()];
        let mut push = |items: &[&OsStr]| a.extend(items.iter().map(|s| s.to_os_string()));
        let ro = OsStr::new("--ro-bind");
        push(&[ro, "/usr".as_ref(), "/usr".as_ref()]);
        for dir in ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"] {
            let p = Path::new(dir);
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.file_type().is_symlink() => {
                    let target = std::fs::read_link(p)?;
                    push(&["--symlink".as_ref(), target.as_os_str(), dir.as_ref()]);
                }
                Ok(m) if m.is_dir() => push(&[ro, dir.as_ref(), dir.as_ref()]),
                _ => {}
            }
        }
        for dir in ["/etc", "/opt", "/sys"] {
            if Path::new(dir).is_dir() {
                push(&[ro, dir.as_ref(), dir.as_ref()]);
            }
        }
        push(&[
            "--proc".as_ref(),
            "/proc".as_ref(),
            "--dev".as_ref(),
            "/dev".as_ref(),
            "--tmpfs".as_ref(),
            "/tmp".as_ref(),
            "--bind".as_ref(),
            project.as_os_str(),
            project.as_os_str(),
            "--chdir".as_ref(),
            project.as_os_str(),
            "--unshare-all".as_ref(),
            "--share-net".as_ref(),
            "--die-with-parent".as_ref(),
            "--".as_ref(),
        ]);
        a.extend(argv.into_iter().map(|s| s.as_ref().to_owned()));
        Ok(Variant {
            label: "bwrap true".to_owned(),
            argv: a,
            cwd: project.to_owned(),
            env: Vec::new(),
        })
    }

    /// `unshare` creating the namespaces Sandy needs, and nothing else, around `true`.
    fn unshare(unshare: &Path, cwd: &Path, true_bin: &Path) -> Variant {
        let mut argv: Vec<OsString> = vec![unshare.into()];
        argv.extend(["--user", "--map-current-user", "--mount", "--ipc"].map(OsString::from));
        argv.push(true_bin.into());
        Variant {
            label: "unshare --user --map-current-user --mount --ipc true".to_owned(),
            argv,
            cwd: cwd.to_owned(),
            env: Vec::new(),
        }
    }

    /// The same command line with extra variables.
    fn with_env(mut self, vars: &[(&str, &OsStr)]) -> Variant {
        self.env.extend(
            vars.iter()
                .map(|(k, v)| (OsString::from(k), v.to_os_string())),
        );
        self
    }

    fn command(&self, env: &ChildEnv) -> Res<Command> {
        let (program, args) = self.argv.split_first().ok_or("empty command line")?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        env.apply(&mut cmd);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        Ok(cmd)
    }
}

/// A comparison with an optional tool, kept only when the tool is installed and works
/// here; otherwise a note says which of the two it is.
fn usable_reference(
    tool: &str,
    variant: Option<Variant>,
    env: &ChildEnv,
    notes: &mut Vec<String>,
) -> Option<Variant> {
    let Some(v) = variant else {
        notes.push(format!("{tool}: not installed"));
        return None;
    };
    match run_once(&v, env) {
        Ok(_) => Some(v),
        Err(e) => {
            notes.push(format!("{tool}: installed but not usable here: {e}"));
            None
        }
    }
}

/// Runs a variant once; its wall time (spawn to reaped) and standard output.
fn run_once(v: &Variant, env: &ChildEnv) -> Res<(f64, Vec<u8>)> {
    let mut cmd = v.command(env)?;
    let start = Instant::now();
    let out = cmd.output()?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    if !out.status.success() {
        return Err(format!(
            "`{}` failed ({}): {}",
            v.label,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok((ms, out.stdout))
}

#[derive(Clone)]
struct Stats {
    n: usize,
    median: f64,
    p90: f64,
    p99: f64,
    min: f64,
    max: f64,
}

impl Stats {
    fn of(mut samples: Vec<f64>) -> Stats {
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let at = |i: usize| samples.get(i).copied().unwrap_or(f64::NAN);
        let median = if n % 2 == 1 {
            at(n / 2)
        } else {
            (at(n / 2 - 1) + at(n / 2)) / 2.0
        };
        // Nearest rank.
        let p90 = at((n * 9).div_ceil(10).saturating_sub(1));
        let p99 = at((n * 99).div_ceil(100).saturating_sub(1));
        Stats {
            n,
            median,
            p90,
            p99,
            min: at(0),
            max: at(n.saturating_sub(1)),
        }
    }
}

/// Times every variant `runs` times after `warmup` untimed rounds, interleaved: each round
/// runs every variant once, starting with a different one each round. With `same_output`,
/// the warm-up checks that every variant printed the same thing.
fn measure(
    variants: &[Variant],
    env: &ChildEnv,
    warmup: usize,
    runs: usize,
    same_output: bool,
) -> Res<Vec<Stats>> {
    let n = variants.len();
    for _ in 0..warmup {
        let mut outputs = Vec::with_capacity(n);
        for v in variants {
            outputs.push(run_once(v, env)?.1);
        }
        if same_output {
            if let Some((first, rest)) = outputs.split_first() {
                for (v, o) in variants.iter().skip(1).zip(rest) {
                    if o != first {
                        return Err(format!(
                            "`{}` printed {:?} but `{}` printed {:?}: not the same work",
                            variants[0].label,
                            String::from_utf8_lossy(first),
                            v.label,
                            String::from_utf8_lossy(o)
                        )
                        .into());
                    }
                }
            }
        }
    }
    let mut samples = vec![Vec::with_capacity(runs); n];
    for round in 0..runs {
        for j in 0..n {
            let k = (round + j) % n;
            let (ms, _) = run_once(&variants[k], env)?;
            samples[k].push(ms);
        }
    }
    Ok(samples.into_iter().map(Stats::of).collect())
}

/// Writes the file tree: `TREE_FILES` small files over `TREE_DIRS` directories, two
/// levels deep; every `NEEDLE_EVERY`-th file holds the word `needle`. Returns how many do.
fn generate_tree(dir: &Path) -> Res<usize> {
    let per_dir = TREE_FILES / TREE_DIRS;
    let mut needles = 0;
    let mut body = String::new();
    for d in 0..TREE_DIRS {
        let sub = dir
            .join(format!("d{:02}", d / 10))
            .join(format!("s{}", d % 10));
        std::fs::create_dir_all(&sub)?;
        for f in 0..per_dir {
            let i = d * per_dir + f;
            body.clear();
            for line in 0..4 {
                writeln!(body, "file {i} line {line}: lorem ipsum dolor sit amet")?;
            }
            if i.is_multiple_of(NEEDLE_EVERY) {
                body.push_str("here is the needle\n");
                needles += 1;
            }
            std::fs::write(sub.join(format!("f{f:03}.txt")), &body)?;
        }
    }
    Ok(needles)
}

/// A tiny deterministic generator, so every run builds the same repository.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        // The high bits are the good ones; `below` is small.
        ((self.0 >> 33) % below as u64) as usize
    }
}

fn git(repo: &Path, env: &ChildEnv, args: &[&str]) -> Res<Vec<u8>> {
    let mut cmd = Command::new("git");
    cmd.args(args)
        .current_dir(repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null());
    env.apply(&mut cmd);
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(out.stdout)
}

/// Builds the repository with one `git fast-import` stream: a first commit of
/// `REPO_FILES` files, then commits changing `FILES_PER_COMMIT` files each; checks it out.
/// Returns the size of `git log -p`.
fn generate_repo(repo: &Path, env: &ChildEnv) -> Res<usize> {
    git(repo, env, &["init", "-q"])?;
    let path_of = |i: usize| format!("src/m{:02}/p{:02}/f{i:04}.rs", i / 500, (i / 50) % 10);
    let mut files: Vec<Vec<String>> = (0..REPO_FILES)
        .map(|i| {
            (0..LINES_PER_FILE)
                .map(|l| format!("pub const F{i}_L{l}: u32 = {};", i * 31 + l))
                .collect()
        })
        .collect();
    let mut rng = Lcg(0x5A4D_5EED);
    let mut stream: Vec<u8> = Vec::with_capacity(8 << 20);
    let data = |stream: &mut Vec<u8>, bytes: &[u8]| -> std::io::Result<()> {
        writeln!(stream, "data {}", bytes.len())?;
        stream.extend_from_slice(bytes);
        stream.push(b'\n');
        Ok(())
    };
    for c in 0..REPO_COMMITS {
        let when = 1_700_000_000 + c * 600;
        writeln!(stream, "commit refs/heads/main")?;
        writeln!(stream, "mark :{}", c + 1)?;
        writeln!(
            stream,
            "committer Bench <bench@example.invalid> {when} +0000"
        )?;
        data(&mut stream, format!("commit {c}\n").as_bytes())?;
        if c > 0 {
            writeln!(stream, "from :{c}")?;
        }
        let changed: Vec<usize> = if c == 0 {
            (0..REPO_FILES).collect()
        } else {
            (0..FILES_PER_COMMIT)
                .map(|_| {
                    let f = rng.next(REPO_FILES);
                    let l = rng.next(LINES_PER_FILE);
                    if let Some(line) = files.get_mut(f).and_then(|lines| lines.get_mut(l)) {
                        *line = format!("pub const F{f}_L{l}: u32 = {}; // commit {c}", c * 7);
                    }
                    f
                })
                .collect()
        };
        for f in changed {
            let mut body = files.get(f).map(|l| l.join("\n")).unwrap_or_default();
            body.push('\n');
            writeln!(stream, "M 100644 inline {}", path_of(f))?;
            data(&mut stream, body.as_bytes())?;
        }
    }
    writeln!(stream, "done")?;

    let mut cmd = Command::new("git");
    cmd.args(["fast-import", "--quiet", "--done"])
        .current_dir(repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    env.apply(&mut cmd);
    let mut child = cmd.spawn()?;
    child
        .stdin
        .take()
        .ok_or("no stdin for git fast-import")?
        .write_all(&stream)?;
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("git fast-import failed: {status}").into());
    }
    git(repo, env, &["symbolic-ref", "HEAD", "refs/heads/main"])?;
    git(repo, env, &["reset", "-q", "--hard"])?;
    // Files written in the same second as the index are "racily clean" and would be
    // re-read by every `git status`; refresh the index a second later, as a real checkout
    // that has been sitting for a while would be.
    std::thread::sleep(Duration::from_millis(1100));
    git(repo, env, &["update-index", "-q", "--refresh"])?;
    git(repo, env, &["status", "--porcelain"])?;
    let count = git(repo, env, &["rev-list", "--count", "HEAD"])?;
    let count = String::from_utf8_lossy(&count).trim().to_owned();
    if count != REPO_COMMITS.to_string() {
        return Err(format!("the generated repository has {count} commits").into());
    }
    Ok(git(repo, env, &["log", "-p"])?.len())
}

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Spawns `argv` and follows its VmHWM until it exits (the high-water mark only grows, so
/// the last reading before exit is the peak). Also returns the peak of its first child,
/// if it had one while we looked.
fn follow_hwm(argv: &[&OsStr], cwd: &Path, env: &ChildEnv) -> Res<(u64, Option<u64>)> {
    let (program, args) = argv.split_first().ok_or("empty command line")?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    env.apply(&mut cmd);
    let mut child = cmd.spawn()?;
    let pid = child.id();
    let mut own = None;
    let mut target: BTreeMap<u32, u64> = BTreeMap::new();
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                return Err(format!("{argv:?} failed: {status}").into());
            }
            break;
        }
        if let Some(kib) = vm_hwm_kib(pid) {
            own = Some(kib);
        }
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for c in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            if let Some(kib) = vm_hwm_kib(c) {
                target.insert(c, kib);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let own = own.ok_or_else(|| format!("never saw VmHWM of {argv:?}"))?;
    Ok((own, target.values().next().copied()))
}

/// Median VmHWM of bare `sleep 1` and of the supervisor of `sandy run -- sleep 1`, and of
/// the sandboxed target.
fn measure_rss(
    sandy: &Path,
    cwd: &Path,
    env: &ChildEnv,
    runs: usize,
) -> Res<(u64, u64, Option<u64>)> {
    let sleep = which("sleep").ok_or("`sleep` is not on PATH")?;
    let bare: [&OsStr; 2] = [sleep.as_os_str(), "1".as_ref()];
    let boxed: [&OsStr; 5] = [
        sandy.as_os_str(),
        "run".as_ref(),
        "--".as_ref(),
        "sleep".as_ref(),
        "1".as_ref(),
    ];
    let (mut b, mut s, mut t) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        b.push(follow_hwm(&bare, cwd, env)?.0);
        let (own, target) = follow_hwm(&boxed, cwd, env)?;
        s.push(own);
        t.extend(target);
    }
    let median = |mut v: Vec<u64>| {
        v.sort_unstable();
        v.get(v.len() / 2).copied()
    };
    Ok((
        median(b).ok_or("no runs")?,
        median(s).ok_or("no runs")?,
        median(t),
    ))
}

enum Goal {
    OverheadMs(f64),
    Ratio(f64),
    Reference,
}

struct Row {
    workload: String,
    cells: [String; 6],
}

impl Row {
    fn new(workload: &str, bare: &Stats, sandy: &Stats, goal: Goal) -> Row {
        let overhead = sandy.median - bare.median;
        let ratio = sandy.median / bare.median;
        let (goal_text, met) = match goal {
            Goal::OverheadMs(max) => (format!("overhead ≤ {max} ms"), yes_no(overhead <= max)),
            Goal::Ratio(max) => (format!("ratio ≤ {max:.2}"), yes_no(ratio <= max)),
            Goal::Reference => ("— (reference)".to_owned(), "—".to_owned()),
        };
        Row {
            workload: workload.to_owned(),
            cells: [
                format!("{} ms", ms_text(bare.median)),
                format!("{} ms", ms_text(sandy.median)),
                format!("{overhead:+.2} ms"),
                format!("{ratio:.3}"),
                goal_text,
                met,
            ],
        }
    }

    fn missing(workload: &str, why: &str) -> Row {
        Row {
            workload: workload.to_owned(),
            cells: [
                why.to_owned(),
                "—".to_owned(),
                "—".to_owned(),
                "—".to_owned(),
                "— (reference)".to_owned(),
                "—".to_owned(),
            ],
        }
    }

    fn rss(bare_kib: u64, sandy_kib: u64) -> Row {
        let max = GOAL_SUPERVISOR_RSS_KIB;
        let (goal_text, met) = (
            format!("supervisor ≤ {}", kib_text(max)),
            yes_no(sandy_kib <= max),
        );
        let diff = sandy_kib as f64 - bare_kib as f64;
        Row {
            workload: "peak RSS (VmHWM): `sandy` supervisor vs bare `sleep 1`".to_owned(),
            cells: [
                kib_text(bare_kib),
                kib_text(sandy_kib),
                format!("{:+.2} MiB", diff / 1024.0),
                format!("{:.3}", sandy_kib as f64 / bare_kib as f64),
                goal_text,
                met,
            ],
        }
    }
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

fn ms_text(ms: f64) -> String {
    if ms < 100.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.1}")
    }
}

fn kib_text(kib: u64) -> String {
    format!("{:.2} MiB", kib as f64 / 1024.0)
}

/// A table cell: a `|` would end the cell, even inside a code span.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn render_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| workload | bare median | sandy median | overhead | ratio | goal | met |\n\
         | --- | ---: | ---: | ---: | ---: | --- | --- |\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} |",
            cell(&r.workload),
            r.cells
                .iter()
                .map(|c| cell(c))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    out
}

fn render_details(details: &[(String, Stats)]) -> String {
    let mut out = String::from(
        "Wall time of every variant (ms, spawn to reaped):\n\n\
         | variant | runs | median | p90 | min | max |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (label, s) in details {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            cell(label),
            s.n,
            ms_text(s.median),
            ms_text(s.p90),
            ms_text(s.min),
            ms_text(s.max)
        );
    }
    out
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn machine_description(sandy: &Path) -> Res<String> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_owned();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let mut out = String::new();
    writeln!(out, "- kernel: {kernel}")?;
    writeln!(out, "- CPU: {cpu}, {cores} cores")?;
    writeln!(
        out,
        "- memory: {:.1} GiB",
        mem_kib as f64 / (1024.0 * 1024.0)
    )?;
    writeln!(out, "- sandy: {}", sandy.display())?;
    Ok(out)
}
