//! Resource ceilings (design section 3.8): how many processes and threads a run may
//! have, how much memory it may use, the largest file one of its processes may write,
//! the size of each of its private temporary directories, and optionally its share of
//! the CPUs. Every run has them: the defaults below, or a flag's value.
//!
//! This module only parses and decides. Which kernel mechanism holds each ceiling (a
//! cgroup, an rlimit, a tmpfs size) depends on the host; the supervisor finds out and
//! records it here (`enforcement`) before the manifest and the dry-run
//! document are made.

use serde::{Deserialize, Serialize};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// Processes and threads of a run (every task counts, as in the kernel's `pids`
/// controller). A `cargo build -j` on a large machine runs a few hundred (each rustc
/// has its own threads); a Claude Code session well under a hundred.
pub const DEFAULT_MAX_PROCS: u64 = 4096;
/// The largest file one process may write. Debug binaries and incremental caches stay
/// well below; a runaway log does not reach the disk's end.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 16 * GIB;
/// The memory ceiling when the machine's memory is not known.
pub const FALLBACK_MAX_MEMORY: u64 = 8 * GIB;
/// The size of each private temporary directory when the machine's memory is not known.
pub const FALLBACK_MAX_TMP: u64 = 4 * GIB;
/// The memory ceiling's share of the machine's memory, in quarters: three quarters, so
/// that a quarter stays for everything outside the run.
const MEMORY_QUARTERS: u64 = 3;
/// The smallest values accepted: below them the sandbox itself cannot start.
pub const MIN_MAX_PROCS: u64 = 8;
pub const MIN_MAX_MEMORY: u64 = 16 * MIB;
pub const MIN_MAX_FILE_SIZE: u64 = KIB;
pub const MIN_MAX_TMP: u64 = 64 * KIB;
/// How much the OOM killer prefers a process of the run (added to its score, which is
/// its share of memory in thousandths): a sandboxed process is chosen before any host
/// process that holds less than half of the memory. Only ever raised: an inherited
/// higher value is kept.
pub const OOM_SCORE_ADJ: i32 = 500;

/// The ceilings the user asked for (`None`: the default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CeilingRequest {
    pub max_procs: Option<u64>,
    pub max_memory: Option<u64>,
    pub max_file_size: Option<u64>,
    pub max_tmp: Option<u64>,
    /// Thousandths of a CPU.
    pub cpu: Option<u64>,
    /// The machine's memory in bytes (`MemTotal`), gathered by the supervisor; the
    /// defaults of the memory and temporary-directory ceilings follow it.
    pub memory_total: Option<u64>,
}

/// Where a ceiling's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CeilingOrigin {
    Default,
    Flag,
    /// The user configuration's `[ceilings]`.
    Config,
    /// The policy file's `[ceilings]`.
    PolicyFile,
}

/// The kernel mechanism that holds a ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// A cgroup v2 of the run's own (`pids.max`, `memory.max`, `cpu.max`).
    CgroupV2,
    /// Cgroups v1 of the run's own (`pids.max`, `memory.limit_in_bytes`,
    /// `cpu.cfs_quota_us`).
    CgroupV1,
    /// A resource limit of every process of the run (`RLIMIT_NPROC`, counted per user
    /// namespace; `RLIMIT_FSIZE`).
    Rlimit,
    /// The size option of the run's private tmpfs mounts.
    Tmpfs,
    /// Nothing holds the value itself: for memory, only the OOM killer's preference
    /// for the run's processes (`oom_score_adj`).
    OomScoreOnly,
    /// Nothing on this machine holds it (a default; an explicit ceiling is refused).
    None,
}

impl Mechanism {
    /// Whether the mechanism holds the ceiling's value.
    pub fn holds(self) -> bool {
        !matches!(self, Mechanism::OomScoreOnly | Mechanism::None)
    }
}

/// One ceiling: its value, where it comes from, what holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ceiling {
    pub value: u64,
    pub origin: CeilingOrigin,
    pub mechanism: Mechanism,
}

impl Ceiling {
    fn new(requested: Option<u64>, default: u64, mechanism: Mechanism) -> Ceiling {
        Ceiling {
            value: requested.unwrap_or(default),
            origin: if requested.is_some() {
                CeilingOrigin::Flag
            } else {
                CeilingOrigin::Default
            },
            mechanism,
        }
    }

    /// Whether the user asked for it (a flag or a file), so that nothing holding it
    /// refuses the run.
    pub fn explicit(&self) -> bool {
        self.origin != CeilingOrigin::Default
    }
}

/// The ceilings of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ceilings {
    /// Processes and threads.
    pub max_procs: Ceiling,
    /// Bytes of memory (and swap).
    pub max_memory: Ceiling,
    /// Bytes of the largest file a process may write.
    pub max_file_size: Ceiling,
    /// Bytes of each private temporary directory (`/tmp`, `/var/tmp`, `/dev/shm`, and
    /// the private `/run` and runtime directory).
    pub max_tmp: Ceiling,
    /// Thousandths of a CPU; `None`: no CPU ceiling.
    pub cpu: Option<Ceiling>,
    /// The OOM killer's preference for the run's processes.
    pub oom_score_adj: i32,
    /// The run's cgroup, when one holds ceilings (set by the supervisor once made; in a
    /// dry run, where it would be made).
    pub cgroup: Option<String>,
}

/// What holds the process, memory and CPU ceilings on this host (the supervisor's
/// finding): a cgroup for each controller Sandy can use, or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Available {
    /// A cgroup with the `pids` controller, and its kind.
    pub pids: Option<Mechanism>,
    pub memory: Option<Mechanism>,
    pub cpu: Option<Mechanism>,
    /// `RLIMIT_NPROC` holds: the run's user is not root (the kernel exempts uid 0).
    pub nproc_rlimit: bool,
}

/// A ceiling the user asked for that nothing on this host can hold: the run is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot enforce {flag} on this machine: {why}; run without {flag} (the dry run names \
     what holds each default ceiling)"
)]
pub struct Unenforceable {
    pub flag: &'static str,
    pub why: &'static str,
}

impl Ceilings {
    /// The ceilings for a request, before the host is known (every mechanism `None`
    /// but those that hold everywhere: the file-size rlimit and the tmpfs size).
    pub fn resolve(request: &CeilingRequest) -> Ceilings {
        let (memory, tmp) = match request.memory_total {
            Some(total) if total > 0 => (
                (total / 4 * MEMORY_QUARTERS).max(MIN_MAX_MEMORY),
                (total / 2).max(MIN_MAX_TMP),
            ),
            _ => (FALLBACK_MAX_MEMORY, FALLBACK_MAX_TMP),
        };
        Ceilings {
            max_procs: Ceiling::new(request.max_procs, DEFAULT_MAX_PROCS, Mechanism::None),
            max_memory: Ceiling::new(request.max_memory, memory, Mechanism::None),
            max_file_size: Ceiling::new(
                request.max_file_size,
                DEFAULT_MAX_FILE_SIZE,
                Mechanism::Rlimit,
            ),
            max_tmp: Ceiling::new(request.max_tmp, tmp, Mechanism::Tmpfs),
            cpu: request
                .cpu
                .map(|c| Ceiling::new(Some(c), c, Mechanism::None)),
            oom_score_adj: OOM_SCORE_ADJ,
            cgroup: None,
        }
    }

    /// Records what holds each ceiling on this host; refuses a ceiling the user asked
    /// for that nothing holds (fail closed). A default nothing holds stays, named as
    /// such in the dry run.
    pub fn enforce_with(&mut self, available: &Available) -> Result<(), Unenforceable> {
        self.max_procs.mechanism = match (available.pids, available.nproc_rlimit) {
            (Some(cgroup), _) => cgroup,
            (None, true) => Mechanism::Rlimit,
            (None, false) => Mechanism::None,
        };
        self.max_memory.mechanism = available.memory.unwrap_or(Mechanism::OomScoreOnly);
        if let Some(cpu) = &mut self.cpu {
            cpu.mechanism = available.cpu.unwrap_or(Mechanism::None);
        }
        if self.max_procs.explicit() && !self.max_procs.mechanism.holds() {
            return Err(Unenforceable {
                flag: "--max-procs",
                why: "no cgroup with the pids controller can be made, and the kernel \
                      exempts root from RLIMIT_NPROC",
            });
        }
        if self.max_memory.explicit() && !self.max_memory.mechanism.holds() {
            return Err(Unenforceable {
                flag: "--max-memory",
                why: "no cgroup with the memory controller can be made",
            });
        }
        if self.cpu.is_some_and(|c| !c.mechanism.holds()) {
            return Err(Unenforceable {
                flag: "--cpu",
                why: "no cgroup with the cpu controller can be made",
            });
        }
        Ok(())
    }

    /// The process ceiling as an `RLIMIT_NPROC` the bootstrap sets, when that is what
    /// holds it.
    pub fn nproc_rlimit(&self) -> Option<u64> {
        (self.max_procs.mechanism == Mechanism::Rlimit).then_some(self.max_procs.value)
    }
}

/// The ceilings the bootstrap applies itself (the cgroup is the supervisor's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestCeilings {
    /// `RLIMIT_NPROC` of the target (`None`: a cgroup holds the process ceiling, or
    /// nothing does).
    pub nproc: Option<u64>,
    /// `RLIMIT_FSIZE` of the target, in bytes.
    pub file_size: u64,
    /// The size of each private tmpfs mount, in bytes.
    pub tmp_size: u64,
    /// The target's `oom_score_adj` (raised to it, never lowered).
    pub oom_score_adj: i32,
}

impl From<&Ceilings> for ManifestCeilings {
    fn from(c: &Ceilings) -> Self {
        ManifestCeilings {
            nproc: c.nproc_rlimit(),
            file_size: c.max_file_size.value,
            tmp_size: c.max_tmp.value,
            oom_score_adj: c.oom_score_adj,
        }
    }
}

/// A value that is not a ceiling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CeilingParseError {
    #[error("'{0}' is not a size: use a whole number with an optional unit K, M, G or T (powers of 1024), e.g. 512M or 8G")]
    NotASize(String),
    #[error("'{0}' is not a count: use a whole number, e.g. 4096")]
    NotACount(String),
    #[error("'{0}' is not a number of CPUs: use a number such as 2 or 1.5")]
    NotCpus(String),
    #[error("{value} is below the smallest ceiling Sandy accepts here ({min})")]
    TooSmall { value: String, min: String },
    #[error("'{0}' is too large")]
    TooLarge(String),
}

/// A size: digits, then an optional unit `K`, `M`, `G` or `T` (binary; `KiB`, `KB`
/// and lower case are accepted), e.g. `512M`, `8G`, `1048576`.
pub fn parse_size(text: &str) -> Result<u64, CeilingParseError> {
    let err = || CeilingParseError::NotASize(text.to_owned());
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(err());
    }
    let (number, unit) = t.split_at(digits);
    let number: u64 = number
        .parse()
        .map_err(|_| CeilingParseError::TooLarge(text.to_owned()))?;
    let unit = unit.to_ascii_lowercase();
    let factor = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => MIB,
        "g" | "gb" | "gib" => GIB,
        "t" | "tb" | "tib" => 1024 * GIB,
        _ => return Err(err()),
    };
    number
        .checked_mul(factor)
        .filter(|v| *v <= i64::MAX as u64)
        .ok_or_else(|| CeilingParseError::TooLarge(text.to_owned()))
}

/// A count of processes and threads.
pub fn parse_count(text: &str) -> Result<u64, CeilingParseError> {
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CeilingParseError::NotACount(text.to_owned()));
    }
    t.parse::<u64>()
        .ok()
        .filter(|v| *v <= i32::MAX as u64)
        .ok_or_else(|| CeilingParseError::TooLarge(text.to_owned()))
}

/// A number of CPUs (`2`, `0.5`, `1.25`), in thousandths.
pub fn parse_cpus(text: &str) -> Result<u64, CeilingParseError> {
    let err = || CeilingParseError::NotCpus(text.to_owned());
    let t = text.trim();
    let (whole, fraction) = t.split_once('.').unwrap_or((t, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty()
        || !all_digits(whole)
        || !all_digits(fraction)
        || fraction.len() > 3
    {
        return Err(err());
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole
            .parse()
            .map_err(|_| CeilingParseError::TooLarge(text.to_owned()))?
    };
    let mut thousandths = 0u64;
    for (i, d) in fraction.bytes().enumerate() {
        thousandths += u64::from(d - b'0') * [100, 10, 1][i];
    }
    let value = whole
        .checked_mul(1000)
        .and_then(|w| w.checked_add(thousandths))
        .filter(|v| *v <= 1_000_000)
        .ok_or_else(|| CeilingParseError::TooLarge(text.to_owned()))?;
    if value < 10 {
        return Err(CeilingParseError::TooSmall {
            value: text.to_owned(),
            min: "0.01".to_owned(),
        });
    }
    Ok(value)
}

/// A size of at least `min` bytes.
pub fn size_at_least(min: u64, text: &str) -> Result<u64, CeilingParseError> {
    let value = parse_size(text)?;
    if value < min {
        return Err(CeilingParseError::TooSmall {
            value: text.to_owned(),
            min: human_size(min),
        });
    }
    Ok(value)
}

/// A count of at least `min`.
pub fn count_at_least(min: u64, text: &str) -> Result<u64, CeilingParseError> {
    let value = parse_count(text)?;
    if value < min {
        return Err(CeilingParseError::TooSmall {
            value: text.to_owned(),
            min: min.to_string(),
        });
    }
    Ok(value)
}

/// A size for people: the largest binary unit that divides it, else one decimal
/// (`512 MiB`, `8 GiB`, `1.5 GiB`).
pub fn human_size(bytes: u64) -> String {
    for (unit, factor) in [
        ("TiB", 1024 * GIB),
        ("GiB", GIB),
        ("MiB", MIB),
        ("KiB", KIB),
    ] {
        if bytes >= factor {
            if bytes.is_multiple_of(factor) {
                return format!("{} {unit}", bytes / factor);
            }
            let tenths = bytes.saturating_mul(10) / factor;
            return format!("{}.{} {unit}", tenths / 10, tenths % 10);
        }
    }
    format!("{bytes} bytes")
}

/// A number of CPUs from thousandths (`1.5`).
pub fn human_cpus(thousandths: u64) -> String {
    let whole = thousandths / 1000;
    let rest = thousandths % 1000;
    if rest == 0 {
        return whole.to_string();
    }
    let mut s = format!("{whole}.{rest:03}");
    while s.ends_with('0') {
        s.pop();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("512M"), Ok(512 * MIB));
        assert_eq!(parse_size("8g"), Ok(8 * GIB));
        assert_eq!(parse_size("8GiB"), Ok(8 * GIB));
        assert_eq!(parse_size("1048576"), Ok(MIB));
        assert_eq!(parse_size("4k"), Ok(4 * KIB));
        assert!(matches!(
            parse_size("lots"),
            Err(CeilingParseError::NotASize(_))
        ));
        assert!(parse_size("1.5G").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("8X").is_err());
        assert!(matches!(
            parse_size("99999999999T"),
            Err(CeilingParseError::TooLarge(_))
        ));
    }

    #[test]
    fn counts_and_cpus_parse() {
        assert_eq!(parse_count("4096"), Ok(4096));
        assert!(parse_count("4k").is_err());
        assert!(parse_count("").is_err());
        assert_eq!(parse_cpus("2"), Ok(2000));
        assert_eq!(parse_cpus("1.5"), Ok(1500));
        assert_eq!(parse_cpus(".25"), Ok(250));
        assert!(parse_cpus("0").is_err());
        assert!(parse_cpus("1.2345").is_err());
        assert!(parse_cpus("two").is_err());
        assert!(parse_cpus(".").is_err());
    }

    #[test]
    fn lower_bounds_are_named() {
        let e = size_at_least(MIN_MAX_MEMORY, "1M").unwrap_err();
        assert_eq!(
            e.to_string(),
            "1M is below the smallest ceiling Sandy accepts here (16 MiB)"
        );
        let e = count_at_least(MIN_MAX_PROCS, "2").unwrap_err();
        assert!(e.to_string().contains("(8)"), "{e}");
        assert_eq!(count_at_least(MIN_MAX_PROCS, "8"), Ok(8));
    }

    #[test]
    fn defaults_follow_the_machines_memory() {
        let c = Ceilings::resolve(&CeilingRequest {
            memory_total: Some(16 * GIB),
            ..CeilingRequest::default()
        });
        assert_eq!(c.max_memory.value, 12 * GIB);
        assert_eq!(c.max_tmp.value, 8 * GIB);
        assert_eq!(c.max_procs.value, DEFAULT_MAX_PROCS);
        assert_eq!(c.max_procs.origin, CeilingOrigin::Default);
        assert_eq!(c.cpu, None);
        let unknown = Ceilings::resolve(&CeilingRequest::default());
        assert_eq!(unknown.max_memory.value, FALLBACK_MAX_MEMORY);
    }

    #[test]
    fn an_explicit_ceiling_nothing_holds_is_refused_a_default_is_named() {
        let none = Available {
            pids: None,
            memory: None,
            cpu: None,
            nproc_rlimit: false,
        };
        let mut defaults = Ceilings::resolve(&CeilingRequest::default());
        assert!(defaults.enforce_with(&none).is_ok());
        assert_eq!(defaults.max_procs.mechanism, Mechanism::None);
        assert_eq!(defaults.max_memory.mechanism, Mechanism::OomScoreOnly);
        assert_eq!(ManifestCeilings::from(&defaults).nproc, None);

        let mut procs = Ceilings::resolve(&CeilingRequest {
            max_procs: Some(100),
            ..CeilingRequest::default()
        });
        let e = procs.enforce_with(&none).unwrap_err();
        assert_eq!(e.flag, "--max-procs");
        let rlimit = Available {
            nproc_rlimit: true,
            ..none
        };
        assert!(procs.enforce_with(&rlimit).is_ok());
        assert_eq!(ManifestCeilings::from(&procs).nproc, Some(100));

        let mut memory = Ceilings::resolve(&CeilingRequest {
            max_memory: Some(GIB),
            ..CeilingRequest::default()
        });
        assert_eq!(
            memory.enforce_with(&rlimit).unwrap_err().flag,
            "--max-memory"
        );
        let cgroup = Available {
            pids: Some(Mechanism::CgroupV2),
            memory: Some(Mechanism::CgroupV2),
            cpu: None,
            nproc_rlimit: false,
        };
        assert!(memory.enforce_with(&cgroup).is_ok());
        assert_eq!(ManifestCeilings::from(&memory).nproc, None);

        let mut cpu = Ceilings::resolve(&CeilingRequest {
            cpu: Some(1500),
            ..CeilingRequest::default()
        });
        assert_eq!(cpu.enforce_with(&cgroup).unwrap_err().flag, "--cpu");
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_size(512 * MIB), "512 MiB");
        assert_eq!(human_size(8 * GIB), "8 GiB");
        assert_eq!(human_size(GIB + GIB / 2), "1.5 GiB");
        assert_eq!(human_size(100), "100 bytes");
        assert_eq!(human_cpus(1500), "1.5");
        assert_eq!(human_cpus(2000), "2");
        assert_eq!(human_cpus(250), "0.25");
    }
}
