//! `sandy doctor`: can this machine enforce Sandy's sandbox?
//!
//! Each layer is probed for real in a sacrificial child, a fresh exec of Sandy
//! (`sandy __probe LAYER`, [`probe`]) that does the irreversible steps (namespaces,
//! Landlock, seccomp) and exits, so the doctor itself stays unconfined and
//! single-purpose. The doctor reads the kernel's knobs itself and turns each child's
//! report into a verdict and the narrowest fix ([`sandy_linux::diagnose::interpret`]).
//! With `--selftest` it then runs canary escapes inside a real `sandy run`
//! ([`crate::selftest`]).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use sandy_linux::diagnose::{self, Finding, Layer, ProbeReport};
use sandy_linux::reach::NsStep;
use serde_json::{json, Value};

use crate::args::DoctorArgs;
use crate::error::SandyError;
use crate::selftest::{self, Check, Status};

/// Version of the `--json` document. Bump on any incompatible change.
pub const DOCTOR_SCHEMA_VERSION: u32 = 1;

pub use crate::error::EXIT_NOT_ENFORCEABLE;

/// How long one probe child may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// `sandy doctor --numbat [--agent AGENT]`: whether `sandy run --numbat` would keep the
/// Numbat hooks registered in the agent's configuration working. The same resolution as
/// a launch; nothing is installed, changed or run.
fn numbat(args: &DoctorArgs) -> Result<u8, SandyError> {
    let agent = &args.agent;
    let (lines, code) = match crate::integrations::numbat_status(agent)? {
        Ok(lines) => (
            lines
                .iter()
                .map(|l| format!("Numbat ({agent}): ok: {l}"))
                .collect::<Vec<_>>(),
            0,
        ),
        Err(reason) => (
            vec![format!("Numbat ({agent}): not usable: {reason}")],
            EXIT_NOT_ENFORCEABLE,
        ),
    };
    sandy::say::print_document(&lines.join("\n")).map_err(|source| SandyError::Io {
        step: "cannot write the doctor report",
        source,
    })?;
    Ok(code)
}

/// `sandy doctor --kontext [--agent claude|codex]`: whether `sandy run --kontext` would
/// keep Kontext working: the same resolution and preflight (the bounded `kontext doctor
/// --json`, the socket check); nothing is installed, changed or launched.
fn kontext(args: &DoctorArgs) -> Result<u8, SandyError> {
    let agent = &args.agent;
    let (line, code) = if agent == "opencode" {
        (
            "Kontext integration: not usable: Kontext supports claude and codex".to_owned(),
            EXIT_NOT_ENFORCEABLE,
        )
    } else {
        match sandy::kontext::status(agent)? {
            Ok(version) => (
                format!(
                    "Kontext integration: available ({})",
                    version.as_deref().unwrap_or("unknown")
                ),
                0,
            ),
            Err(reason) => (
                format!("Kontext integration: not usable: {reason}"),
                EXIT_NOT_ENFORCEABLE,
            ),
        }
    };
    sandy::say::print_line(&line).map_err(|source| SandyError::Io {
        step: "cannot write the doctor report",
        source,
    })?;
    Ok(code)
}

/// `sandy doctor [--json] [--selftest]`.
pub fn doctor(args: DoctorArgs) -> Result<u8, SandyError> {
    if args.numbat {
        return numbat(&args);
    }
    if args.kontext {
        return kontext(&args);
    }
    let exe = std::env::current_exe().map_err(|source| SandyError::Io {
        step: "cannot locate the sandy binary",
        source,
    })?;
    let findings = probe_all(&exe);
    let enforceable = findings.iter().all(|f| f.available);
    let net = findings
        .iter()
        .find(|f| f.layer == Layer::NetworkNamespace)
        .map(|f| (f.available, f.detail.clone()))
        .unwrap_or((false, "not probed".to_owned()));
    let block_net = if net.0 { Ok(()) } else { Err(net.1) };
    let tier = args.tier.map(sandy_policy::Tier::from).unwrap_or_default();

    let checks = if args.selftest {
        // The weaker tier blocks the network without a namespace.
        let tier_block_net = match tier {
            sandy_policy::Tier::Full => block_net.clone(),
            sandy_policy::Tier::Landlock => Ok(()),
        };
        Some(selftest::selftest(
            &exe,
            args.selftest_unprotected_canary,
            tier_block_net,
            tier,
        )?)
    } else {
        None
    };

    let report = Report {
        tier,
        findings,
        enforceable,
        block_net: block_net.is_ok(),
        checks,
        ceilings: Ceilings::probe(),
    };
    let text = if args.json {
        let doc = report.json();
        serde_json::to_string_pretty(&doc).map_err(|e| SandyError::Io {
            step: "cannot render the doctor document",
            source: e.into(),
        })?
    } else {
        report.text()
    };
    sandy::say::print_document(&text).map_err(|source| SandyError::Io {
        step: "cannot write the doctor report",
        source,
    })?;
    Ok(if report.passed() {
        0
    } else {
        EXIT_NOT_ENFORCEABLE
    })
}

/// `sandy __probe LAYER`: runs in the sacrificial child; prints the report as one JSON
/// line.
pub fn probe(layer: Layer) -> Result<u8, SandyError> {
    let r = diagnose::probe_layer(layer);
    let line = json!({
        "ok": r.ok,
        "detail": r.detail,
        "errno": r.errno,
        "abi": r.abi,
        "userns_failed": r.userns_failed,
        "step": r.step.map(NsStep::name),
    });
    sandy::say::print_line(&line.to_string()).map_err(|source| SandyError::Io {
        step: "cannot write the probe report",
        source,
    })?;
    Ok(0)
}

/// Probes every layer, each in its own fresh child, all at once.
fn probe_all(exe: &Path) -> Vec<Finding> {
    let facts = sandy_linux::host_facts();
    let children: Vec<(Layer, std::io::Result<Child>)> = Layer::ALL
        .into_iter()
        .map(|layer| {
            let child = Command::new("/proc/self/exe")
                .arg0("sandy")
                .arg("__probe")
                .arg(layer.name())
                // Sandy's own code runs here: nothing from the caller's environment.
                .env_clear()
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn();
            (layer, child)
        })
        .collect();
    children
        .into_iter()
        .map(|(layer, child)| {
            let report = match child {
                Ok(child) => collect_probe(child),
                Err(e) => failed_probe(format!("cannot start the probe: {e}")),
            };
            diagnose::interpret(layer, &report, &facts, exe)
        })
        .collect()
}

fn failed_probe(detail: String) -> ProbeReport {
    ProbeReport {
        ok: false,
        detail,
        errno: None,
        abi: None,
        userns_failed: false,
        step: None,
    }
}

/// Waits for a probe child and parses its one-line report. The report is far smaller
/// than a pipe buffer, so waiting before reading cannot deadlock.
fn collect_probe(mut child: Child) -> ProbeReport {
    let status = match wait_deadline(&mut child, PROBE_TIMEOUT) {
        Ok(Some(status)) => status,
        Ok(None) => return failed_probe("the probe did not finish in time".to_owned()),
        Err(e) => return failed_probe(format!("cannot wait for the probe: {e}")),
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut stdout);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut stderr);
    }
    let parsed = stdout
        .lines()
        .next()
        .and_then(|l| serde_json::from_str::<Value>(l).ok());
    match parsed {
        Some(v) if status.success() => ProbeReport {
            ok: v["ok"].as_bool().unwrap_or(false),
            detail: v["detail"].as_str().unwrap_or("no detail").to_owned(),
            errno: v["errno"].as_i64().and_then(|e| i32::try_from(e).ok()),
            abi: v["abi"].as_u64().and_then(|a| u32::try_from(a).ok()),
            userns_failed: v["userns_failed"].as_bool().unwrap_or(false),
            step: v["step"].as_str().and_then(NsStep::from_name),
        },
        _ => failed_probe(format!(
            "the probe failed ({}){}",
            describe_status(status),
            stderr
                .lines()
                .next()
                .map(|l| format!(": {l}"))
                .unwrap_or_default()
        )),
    }
}

/// `exit 3`, `killed by signal 31`.
pub(crate) fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "unknown status".to_owned(),
    }
}

/// Waits for `child` until `timeout`; on timeout kills and reaps it and returns `None`.
pub(crate) fn wait_deadline(
    child: &mut Child,
    timeout: Duration,
) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Everything the doctor found.
struct Report {
    /// The tier the self-test ran in (`--tier`).
    tier: sandy_policy::Tier,
    findings: Vec<Finding>,
    enforceable: bool,
    block_net: bool,
    checks: Option<Vec<Check>>,
    ceilings: Ceilings,
}

/// What holds the resource ceilings on this machine (not a layer: a run without a
/// cgroup still gets the ceilings an rlimit or a tmpfs size holds).
struct Ceilings {
    available: sandy_policy::ceilings::Available,
    detail: String,
}

impl Ceilings {
    fn probe() -> Ceilings {
        let offer = sandy::ceilings::Offer::probe();
        let uid = nix::unistd::getuid().as_raw();
        Ceilings {
            available: offer.available(uid),
            detail: offer.describe(uid),
        }
    }

    /// The mechanism of the process, memory and CPU ceilings, as the dry run names it.
    fn mechanisms(&self) -> [(&'static str, sandy_policy::Mechanism); 3] {
        use sandy_policy::Mechanism;
        let a = &self.available;
        [
            (
                "max_procs",
                a.pids.unwrap_or(if a.nproc_rlimit {
                    Mechanism::Rlimit
                } else {
                    Mechanism::None
                }),
            ),
            ("max_memory", a.memory.unwrap_or(Mechanism::OomScoreOnly)),
            ("cpu", a.cpu.unwrap_or(Mechanism::None)),
        ]
    }
}

impl Report {
    fn selftest_passed(&self) -> Option<bool> {
        self.checks
            .as_ref()
            .map(|c| c.iter().all(|c| c.status == Status::Blocked))
    }

    fn passed(&self) -> bool {
        let runs = match self.tier {
            sandy_policy::Tier::Full => self.enforceable,
            sandy_policy::Tier::Landlock => self.landlock_tier_available(),
        };
        runs && self.selftest_passed().unwrap_or(true)
    }

    /// The first cause found for a missing namespace layer: `(id, line, fix)`.
    fn cause(&self) -> Option<(&'static str, String, String)> {
        self.findings.iter().find_map(|f| {
            let c = f.cause.as_ref()?;
            Some((c.id(), c.line(), f.fix.clone().unwrap_or_default()))
        })
    }

    /// Whether `sandy run --tier landlock` can run here: it needs Landlock and seccomp
    /// only.
    fn landlock_tier_available(&self) -> bool {
        self.findings
            .iter()
            .filter(|f| matches!(f.layer, Layer::Landlock | Layer::Seccomp))
            .all(|f| f.available)
    }

    fn verdict(&self) -> String {
        if self.enforceable {
            "enforceable: `sandy run` can enforce its default sandbox, and --block-net".to_owned()
        } else {
            let missing: Vec<&str> = self
                .findings
                .iter()
                .filter(|f| !f.available)
                .map(|f| f.layer.label())
                .collect();
            let because = self
                .cause()
                .map(|(_, line, _)| format!("; cause: {line}"))
                .unwrap_or_default();
            let weaker = if self.landlock_tier_available() {
                format!("; {}", sandy_linux::reach::WEAKER_TIER)
            } else {
                String::new()
            };
            format!(
                "NOT enforceable: `sandy run` refuses to run (exit 125) on this machine; \
                 missing: {}{because}{weaker}",
                missing.join(", ")
            )
        }
    }

    fn text(&self) -> String {
        let release = kernel_release();
        let mut s = format!(
            "Sandy {} doctor: Linux {release} ({})\n",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::ARCH
        );
        let width = Layer::ALL
            .iter()
            .map(|l| l.label().len())
            .max()
            .unwrap_or(0);
        let mut last_fix: Option<&String> = None;
        for f in &self.findings {
            let state = if f.available { "available" } else { "missing" };
            s.push_str(&format!(
                "  {:width$}  {state:9}  {}\n",
                f.layer.label(),
                f.detail
            ));
            if let Some(fix) = &f.fix {
                let fix = if last_fix == Some(fix) {
                    "the same as above"
                } else {
                    fix
                };
                s.push_str(&format!("  {:width$}  fix: {fix}\n", ""));
                last_fix = f.fix.as_ref();
            }
        }
        s.push_str(&format!(
            "  {:width$}  {}\n",
            "ceilings", self.ceilings.detail
        ));
        s.push_str(&format!("verdict: {}", self.verdict()));
        if let Some(checks) = &self.checks {
            s.push_str("\n\n");
            s.push_str(&selftest::render_text(checks, self.tier));
        }
        s
    }

    fn json(&self) -> Value {
        let layers: Vec<Value> = self
            .findings
            .iter()
            .map(|f| {
                json!({
                    "name": f.layer.name(),
                    "available": f.available,
                    // Every layer: the network namespace too, since every run gets one (with
                    // the host's network, the socket broker).
                    "required": true,
                    "detail": f.detail,
                    "fix": f.fix,
                    "failed_step": f.step.map(NsStep::name),
                    "cause": f.cause.as_ref().map(|c| c.id()),
                })
            })
            .collect();
        let mut doc = json!({
            "doctor_schema_version": DOCTOR_SCHEMA_VERSION,
            "sandy_version": env!("CARGO_PKG_VERSION"),
            "kernel": { "release": kernel_release(), "arch": std::env::consts::ARCH },
            "layers": layers,
            "enforceable": self.enforceable,
            "block_net_available": self.block_net,
            "verdict": self.verdict(),
            // `sandy run --tier landlock` (docs/tiers.md): Landlock and seccomp suffice.
            "landlock_tier_available": self.landlock_tier_available(),
            "cause": self.cause().map(|(id, line, fix)| json!({
                "id": id, "line": line, "fix": fix,
            })),
            "passed": self.passed(),
            "ceilings": {
                "mechanisms": self
                    .ceilings
                    .mechanisms()
                    .iter()
                    .map(|(k, m)| (k.to_string(), json!(m)))
                    .collect::<serde_json::Map<String, Value>>(),
                "detail": self.ceilings.detail,
            },
        });
        if let (Some(checks), Some(obj)) = (&self.checks, doc.as_object_mut()) {
            obj.insert(
                "selftest".to_owned(),
                selftest::render_json(checks, self.tier),
            );
        }
        doc
    }
}

#[allow(clippy::disallowed_methods)] // procfs, which no run writes
fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// Whether this machine can make a run's user and mount namespaces: the mount probe of
/// `sandy doctor`, in a child of its own (this binary's hidden `__probe`).
pub fn namespaces_work() -> bool {
    use std::os::unix::process::CommandExt;
    std::process::Command::new("/proc/self/exe")
        .arg0("sandy")
        .arg("__probe")
        .arg(sandy_linux::diagnose::Layer::MountNamespace.name())
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
        .and_then(|v| v["ok"].as_bool())
        .unwrap_or(false)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests {
    use super::*;

    fn finding(layer: Layer, available: bool) -> Finding {
        Finding {
            layer,
            available,
            detail: format!("{} detail", layer.name()),
            fix: (!available).then(|| "do this".to_owned()),
            cause: None,
            step: None,
        }
    }

    fn report(missing: &[Layer]) -> Report {
        let findings: Vec<Finding> = Layer::ALL
            .into_iter()
            .map(|l| finding(l, !missing.contains(&l)))
            .collect();
        let enforceable = findings.iter().all(|f| f.available);
        Report {
            tier: Default::default(),
            block_net: !missing.contains(&Layer::NetworkNamespace),
            findings,
            enforceable,
            checks: None,
            ceilings: Ceilings {
                available: sandy_policy::ceilings::Available {
                    pids: None,
                    memory: None,
                    cpu: None,
                    nproc_rlimit: true,
                },
                detail: "ceilings detail".to_owned(),
            },
        }
    }

    #[test]
    fn a_missing_network_namespace_is_as_fatal_as_any_layer() {
        // Every run gets a network namespace (the socket broker for the host's network).
        let r = report(&[Layer::NetworkNamespace]);
        assert!(!r.passed());
        assert!(
            r.verdict().contains("missing: network namespace"),
            "{}",
            r.verdict()
        );
        assert!(report(&[]).verdict().starts_with("enforceable"));
        let r = report(&[Layer::MountNamespace]);
        assert!(!r.passed());
        assert!(
            r.verdict().contains("missing: mount namespace"),
            "{}",
            r.verdict()
        );
        assert!(r.text().contains("fix: do this"));
    }

    #[test]
    fn json_has_the_documented_keys() {
        let doc = report(&[]).json();
        assert_eq!(doc["doctor_schema_version"], 1);
        assert_eq!(doc["enforceable"], true);
        let layers = doc["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 6);
        for key in ["name", "available", "detail", "fix"] {
            assert!(layers[0].get(key).is_some(), "{key}");
        }
        assert!(doc.get("selftest").is_none());
        assert_eq!(doc["ceilings"]["mechanisms"]["max_procs"], "rlimit");
        assert_eq!(
            doc["ceilings"]["mechanisms"]["max_memory"],
            "oom_score_only"
        );
    }
}
