//! `sandy why`: resolves the launch asked about with the same code as `sandy run`, and
//! explains one decision. The narrowest flag that would change a refusal is found the same
//! way: the launch is resolved again with that flag, and the question asked again.

use sandy_policy::text::Shown;
use std::path::Path;

use sandy_policy::why::{decide, Decision, Question, Rule};
use sandy_policy::{resolve, ResolvedPolicy, RunRequest};
use serde::Serialize;

use crate::args::WhyArgs;
use crate::error::SandyError;
use sandy::host;
use sandy::hostfs::HostFs;

/// The layout version of `sandy why --json`.
pub const WHY_SCHEMA_VERSION: u32 = 1;
/// Exit status when the access asked about is refused.
const EXIT_REFUSED: u8 = 1;

#[derive(Serialize)]
struct Document<'a> {
    why_schema_version: u32,
    question: Question,
    path: String,
    profile: &'a str,
    #[serde(flatten)]
    decision: &'a Decision,
    /// The narrowest flag that allows it, when a flag can.
    flag: Option<String>,
    /// Asked inside a sandbox, about that sandbox's own policy.
    inside: bool,
}

pub fn why(args: WhyArgs) -> Result<u8, SandyError> {
    if let Some(document) = inside::own_policy() {
        if args.connect {
            return Err(SandyError::Usage(
                "sandy why --connect inside a sandbox: ask outside, with the run's network \
                 flags",
            ));
        }
        return inside::why(&args, &document);
    }
    let host = host::gather(&args.read_write)?;
    let question = question(&args);
    let path = if args.path.is_absolute() {
        args.path.clone()
    } else {
        host.cwd.join(&args.path)
    };
    let command = if args.command.is_empty() {
        vec!["true".into()]
    } else {
        args.command.clone()
    };
    // The user's configuration applies as it does to `sandy run`.
    let loaded = sandy::policyfiles::load(
        &sandy::policyfiles::Asked {
            profile: args.profile.as_deref(),
            profile_file: args.profile_file.as_deref(),
            policy_file: args.policy_file.as_deref(),
            argv0: command
                .first()
                .map_or(std::ffi::OsStr::new(""), |a| a.as_os_str()),
        },
        &host,
    )?;
    let request = RunRequest {
        command,
        read: args.read.clone(),
        read_write: args.read_write.clone(),
        execute: args.execute.clone(),
        private_tmp: sandy::rundir::unmade_private_tmp(&host),
        block_net: args.block_net,
        allow_local_ports: args.allow_local_port.clone(),
        numbat_collector: None,
        numbat: false,
        profile: loaded.profile.clone(),
        pass_env: Vec::new(),
        ceilings: Default::default(),
        tier: Default::default(),
        egress: sandy_policy::EgressRequest {
            allow: args.allow_domain.clone(),
            deny: args.deny_domain.clone(),
            agent: args.net == Some(crate::args::NetMode::Agent),
            ..Default::default()
        },
        files: loaded.rules.clone(),
    };
    let policy = resolve(&request, &host, &HostFs)?;
    loaded.refuse_writable(&policy)?;
    if args.connect {
        return connect::why(&args, &policy);
    }
    let decision = decide(&policy, question, &path, &HostFs);
    let mut decision = decision;
    // Below every layer of Sandy's, the host's own permissions still apply.
    if (decision.allowed || decision.unchangeable.is_none())
        && !host_permits(question, &decision.resolved)
    {
        decision.allowed = false;
        decision.unchangeable = Some(
            if question != Question::Write && decision.resolved.symlink_metadata().is_err() {
                "it does not exist"
            } else {
                "the path's own permissions (or a read-only filesystem) refuse it to you, \
                 inside the sandbox and outside it"
            }
            .to_owned(),
        );
    }
    let flag = if decision.allowed || decision.unchangeable.is_some() {
        None
    } else {
        match narrowest_flag(&request, question, &path, &decision) {
            Ok(flag) => Some(flag),
            Err(reason) => {
                decision.unchangeable = Some(reason);
                None
            }
        }
    };
    answer(&args, question, &path, &policy, decision, flag, false)
}

/// Prints the answer (text or JSON) and returns the exit status.
fn answer(
    args: &WhyArgs,
    question: Question,
    path: &Path,
    policy: &ResolvedPolicy,
    decision: Decision,
    flag: Option<String>,
    inside: bool,
) -> Result<u8, SandyError> {
    let text = if args.json {
        let doc = Document {
            why_schema_version: WHY_SCHEMA_VERSION,
            question,
            path: Shown(path).to_string(),
            profile: &policy.profile.name,
            decision: &decision,
            flag,
            inside,
        };
        serde_json::to_string_pretty(&doc).map_err(|e| SandyError::Io {
            step: "cannot render the answer",
            source: e.into(),
        })?
    } else {
        let mut text = render(question, path, policy, &decision, flag.as_deref());
        if inside && !decision.allowed && flag.is_some() {
            text.push_str(
                "\n  (asked inside a sandbox: the user can add that flag to the next `sandy run`)",
            );
        }
        text
    };
    print_answer(&text)?;
    Ok(if decision.allowed { 0 } else { EXIT_REFUSED })
}

/// The access asked about: read unless `--write` or `--exec` says otherwise.
fn question(args: &WhyArgs) -> Question {
    if args.write {
        Question::Write
    } else if args.exec {
        Question::Exec
    } else {
        Question::Read
    }
}

/// Prints an answer; a reader that stops early (`| head`) is not an error.
fn print_answer(text: &str) -> Result<(), SandyError> {
    match sandy::say::print_document(text) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(source) => Err(SandyError::Io {
            step: "cannot write the answer",
            source,
        }),
    }
}

/// The least grant flag that makes the decision an allowance, checked by resolving the
/// launch again with it; otherwise why no flag can (the flag itself would be refused, for
/// example because it would expose a secret or the home directory).
fn narrowest_flag(
    request: &RunRequest,
    question: Question,
    path: &Path,
    decision: &Decision,
) -> Result<String, String> {
    // A grant names an existing path: the path itself, or its nearest existing parent.
    let existing = decision
        .resolved
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"))
        .to_path_buf();
    let mut with = request.clone();
    // No flag grants execute alone; --read-write is the narrowest that does.
    let flag = match question {
        Question::Read => {
            with.read.push(existing.clone());
            "--read"
        }
        Question::Write | Question::Exec => {
            with.read_write.push(existing.clone());
            "--read-write"
        }
    };
    let flag = format!("{flag} {}", Shown(&existing));
    // The host facts (git's view of repositories) are gathered again for the wider
    // launch, exactly as `sandy run` with that flag would.
    let wider = host::gather(&with.read_write).map_err(|e| format!("{flag} is refused: {e}"))?;
    let policy = resolve(&with, &wider, &HostFs).map_err(|e| format!("{flag} is refused: {e}"))?;
    if decide(&policy, question, path, &HostFs).allowed {
        Ok(flag)
    } else {
        Err(format!("even {flag} would not allow it"))
    }
}

/// Whether the host's permissions let this user do it (`access(2)` with the effective
/// ids; for a path that does not exist yet, creating it in the nearest existing parent).
fn host_permits(question: Question, path: &Path) -> bool {
    use nix::unistd::{access, AccessFlags};
    let flags = match question {
        Question::Read => AccessFlags::R_OK,
        Question::Write => AccessFlags::W_OK,
        Question::Exec => AccessFlags::X_OK,
    };
    if path.symlink_metadata().is_ok() {
        return access(path, flags).is_ok();
    }
    match path.ancestors().skip(1).find(|p| p.exists()) {
        Some(parent) if question == Question::Write => {
            access(parent, AccessFlags::W_OK | AccessFlags::X_OK).is_ok()
        }
        // Nothing to read or execute.
        _ => false,
    }
}

fn render(
    question: Question,
    path: &Path,
    policy: &ResolvedPolicy,
    d: &Decision,
    flag: Option<&str>,
) -> String {
    let verb = match question {
        Question::Read => "read",
        Question::Write => "write",
        Question::Exec => "execute",
    };
    let verdict = if d.allowed { "allowed" } else { "refused" };
    let mut out = format!(
        "{verb} {}: {verdict} (profile '{}')",
        Shown(path),
        policy.profile.name
    );
    if d.resolved != path {
        out.push_str(&format!("\n  resolves to {}", Shown(&d.resolved)));
    }
    let rule = match &d.rule {
        Rule::Mask { path, .. } => {
            let own = policy.protections.iter().any(|p| {
                &p.path == path && p.reason.as_deref() == Some(sandy_policy::OWN_MASK_REASON)
            });
            let what = if own {
                "one of Sandy's own directories"
            } else {
                "a sensitive path"
            };
            format!("masked: {} is {what}", Shown(path))
        }
        Rule::Private { directory } => format!(
            "{} is the sandbox's own private directory inside (the host's is never reached)",
            Shown(directory)
        ),
        Rule::View { target, view } => format!(
            "the sandbox sees a {} of {}",
            match view {
                sandy_policy::ViewKind::Filtered => "credential-filtered, read-only copy",
                sandy_policy::ViewKind::PrivateCopy => "private copy",
            },
            Shown(target)
        ),
        Rule::Protection { path, origin } => format!(
            "protected read-only: {} (origin {})",
            Shown(path),
            dry_run_name(origin)
        ),
        Rule::Grant {
            path,
            access,
            scope,
            origin,
        } => format!(
            "granted {} on {} ({}, origin {})",
            dry_run_name(access),
            Shown(path),
            dry_run_name(scope),
            dry_run_name(origin)
        ),
        Rule::NoGrant => "nothing grants it (Landlock refuses)".to_owned(),
    };
    out.push_str(&format!("\n  rule: {rule}"));
    if !d.allowed {
        match (&d.unchangeable, flag) {
            (Some(reason), _) => out.push_str(&format!("\n  no flag changes this: {reason}")),
            (None, Some(flag)) => out.push_str(&format!("\n  {flag} would allow it")),
            (None, None) => {}
        }
    }
    out
}

/// The name the dry run gives a value (`read_write`, `subtree`, `profile_file`): the
/// paths around it keep their case.
fn dry_run_name<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// `sandy why` inside a sandbox answers for that sandbox: from the policy document Sandy
/// wrote read-only at [`sandy_policy::POLICY_DOCUMENT_PATH`], not from a new resolution
/// (inside, the host is not visible enough to resolve one).
mod inside {
    use std::path::{Path, PathBuf};

    use sandy_policy::why::{decide, Question};
    use sandy_policy::{
        Access, FileView, Grant, Network, Origin, Placeholder, ProfileInfo, Protection,
        ProtectionKind, RealFs, ResolvedPolicy, Scope, ViewKind, POLICY_DOCUMENT_PATH,
    };
    use serde::Deserialize;

    use crate::args::WhyArgs;
    use crate::error::SandyError;

    #[derive(Deserialize)]
    pub struct Document {
        command: PathBuf,
        working_directory: PathBuf,
        profile: ProfileInfo,
        file_grants: Vec<DocGrant>,
        protections: Vec<DocProtection>,
        views: Vec<DocView>,
    }

    #[derive(Deserialize)]
    struct DocGrant {
        path: PathBuf,
        access: Access,
        scope: Scope,
        origin: Origin,
    }

    #[derive(Deserialize)]
    struct DocProtection {
        path: PathBuf,
        kind: ProtectionKind,
        origin: Origin,
        exists: bool,
        placeholder: Option<Placeholder>,
        #[serde(default)]
        reason: Option<String>,
    }

    #[derive(Deserialize)]
    struct DocView {
        target: PathBuf,
        #[serde(default)]
        link: Option<PathBuf>,
        kind: ViewKind,
        origin: Origin,
        reason: String,
    }

    /// The sandbox's own policy, when this process runs inside one: the document exists
    /// and `no_new_privs` is set (Sandy sets it for everything inside).
    // Inside the sandbox: the document in the sandbox's private `/run`, which the
    // bootstrap wrote read-only for the run.
    #[allow(clippy::disallowed_methods)]
    pub fn own_policy() -> Option<Document> {
        if !sandy::host::no_new_privs() {
            return None;
        }
        let text = std::fs::read_to_string(POLICY_DOCUMENT_PATH).ok()?;
        serde_json::from_str(&text).ok()
    }

    pub fn why(args: &WhyArgs, doc: &Document) -> Result<u8, SandyError> {
        let policy = ResolvedPolicy {
            program: doc.command.clone(),
            argv: Vec::new(),
            working_directory: doc.working_directory.clone(),
            environment: Vec::new(),
            removed_env: Vec::new(),
            withheld_env: Vec::new(),
            set_env: Vec::new(),
            grants: doc
                .file_grants
                .iter()
                .map(|g| Grant {
                    path: g.path.clone(),
                    access: g.access,
                    scope: g.scope,
                    origin: g.origin,
                })
                .collect(),
            network: Network::AllowAll,
            local_ports: Vec::new(),
            resolvers: Vec::new(),
            profile: doc.profile.clone(),
            protections: doc
                .protections
                .iter()
                .map(|p| Protection {
                    at_launch: false,
                    path: p.path.clone(),
                    kind: p.kind,
                    origin: p.origin,
                    exists: p.exists,
                    placeholder: p.placeholder,
                    reason: p.reason.clone(),
                })
                .collect(),
            private_tmp: PathBuf::from("/tmp"),
            runtime_dir: None,
            ceilings: sandy_policy::Ceilings::resolve(&Default::default()),
            notices: Vec::new(),
            views: doc
                .views
                .iter()
                .map(|v| FileView {
                    target: v.target.clone(),
                    link: v.link.clone(),
                    kind: v.kind,
                    origin: v.origin,
                    reason: v.reason.clone(),
                    rule: sandy_policy::FilterRule::ByName,
                })
                .collect(),
            created_at_launch: Vec::new(),
            state_files: Vec::new(),
            egress: None,
            caches: Vec::new(),
            hooks: Vec::new(),
            kontext: None,
            agent_home_files: Vec::new(),
            agent_state: Vec::new(),
            watched: Vec::new(),
            files: Default::default(),
            reopened: Vec::new(),
            tier: Default::default(),
            history: None,
        };
        let question = super::question(args);
        let cwd = std::env::current_dir().unwrap_or_else(|_| doc.working_directory.clone());
        let path = if args.path.is_absolute() {
            args.path.clone()
        } else {
            cwd.join(&args.path)
        };
        let decision = decide(&policy, question, &path, &RealFs);
        // A flag cannot be tried from inside; name the one the user would add.
        let flag = (!decision.allowed && decision.unchangeable.is_none()).then(|| {
            let existing = decision
                .resolved
                .ancestors()
                .find(|p| p.exists())
                .unwrap_or(Path::new("/"))
                .to_path_buf();
            let name = if question == Question::Read {
                "--read"
            } else {
                "--read-write"
            };
            format!("{name} {}", sandy_policy::text::Shown(&existing))
        });
        super::answer(args, question, &path, &policy, decision, flag, true)
    }
}

/// `sandy why --connect HOST[:PORT]`: the egress rules of the launch decide, as the proxy
/// does, before any DNS lookup.
mod connect {
    use serde::Serialize;

    use sandy_net::{parse_host, Decision};
    use sandy_policy::ResolvedPolicy;

    use crate::args::WhyArgs;
    use crate::error::SandyError;

    #[derive(Serialize)]
    struct Document {
        why_schema_version: u32,
        question: &'static str,
        target: String,
        allowed: bool,
        rule: String,
        flag: Option<String>,
    }

    /// Splits `host[:port]` (`[v6]:port` for IPv6), 443 by default.
    fn split(target: &str) -> Option<(&str, u16)> {
        if let Some(rest) = target.strip_prefix('[') {
            let (host, after) = rest.split_once(']')?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().ok()?,
                None if after.is_empty() => 443,
                None => return None,
            };
            return Some((host, port));
        }
        match target.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => Some((host, port.parse().ok()?)),
            Some(_) => Some((target, 443)),
            None => Some((target, 443)),
        }
    }

    /// The host's network: the internet is open, the host's own services closed
    /// (`sandy::connects`), decided on the address, as the supervisor decides a connect.
    fn host_network(
        policy: &ResolvedPolicy,
        host: &sandy_net::Host,
        port: u16,
    ) -> Result<(bool, String, Option<String>), SandyError> {
        let ip = match host {
            sandy_net::Host::Ip(ip) => *ip,
            sandy_net::Host::Name(name) if name == "localhost" || name.ends_with(".localhost") => {
                std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
            }
            sandy_net::Host::Name(_) => {
                return Ok((
                    true,
                    "the host's network (no --block-net, --allow-domain or --net agent): the \
                     internet is reachable; the address the name resolves to is checked when \
                     connecting, and the host's own addresses are closed"
                        .to_owned(),
                    None,
                ))
            }
        };
        let interfaces =
            sandy_net::local::HostInterfaces::new().map_err(|source| SandyError::Io {
                step: "cannot read the host's interfaces",
                source,
            })?;
        let Some(local) = interfaces.current().local(ip) else {
            return Ok((
                true,
                "the host's network: an address elsewhere than this host is reachable".to_owned(),
                None,
            ));
        };
        if local != sandy_net::local::Local::CloudMetadata {
            if let Some(p) = policy.local_ports.iter().find(|p| p.port == port) {
                return Ok((
                    true,
                    format!(
                        "{} is closed, but port {port} is open there ({})",
                        local.describe(),
                        p.origin.describe()
                    ),
                    None,
                ));
            }
            if port == sandy_net::dns::DNS_PORT
                && policy
                    .resolvers
                    .iter()
                    .any(|r| sandy_net::addr::canonical(*r) == sandy_net::addr::canonical(ip))
            {
                return Ok((
                    true,
                    "a name server of the host (its resolv.conf): port 53 is open for DNS"
                        .to_owned(),
                    None,
                ));
            }
        }
        let (rule, flag) = match local {
            sandy_net::local::Local::CloudMetadata => (
                "the cloud instance metadata service is never reachable from the sandbox"
                    .to_owned(),
                None,
            ),
            _ => (
                format!(
                    "{} is closed: the host's own services are closed by default (a server \
                     the run starts itself is reachable; see docs/network.md)",
                    local.describe()
                ),
                Some(format!("--allow-local-port {port}")),
            ),
        };
        Ok((false, rule, flag))
    }

    pub fn why(args: &WhyArgs, policy: &ResolvedPolicy) -> Result<u8, SandyError> {
        let text = args.path.to_string_lossy().into_owned();
        let (host_text, port) = split(&text).ok_or(SandyError::Usage(
            "--connect takes HOST[:PORT] (a port from 1 to 65535)",
        ))?;
        let host = parse_host(host_text).map_err(|_| {
            SandyError::Usage(
                "--connect takes HOST[:PORT]: the host is not a valid name or address",
            )
        })?;
        let target = format!("{host}:{port}");
        let deny_rule = matches!(
            policy.egress.as_ref().map(|e| e.policy.decide(&host, port)),
            Some(Decision::Deny(sandy_net::Denial::DeniedByRule(_)))
        );
        let (allowed, rule, flag) = match &policy.egress {
            None => host_network(policy, &host, port)?,
            Some(egress) => match egress.policy.decide(&host, port) {
                Decision::Allow(i) => (
                    true,
                    match egress.policy.rules.get(i) {
                        Some(r) => format!(
                            "allowed by {r}; decided before any DNS lookup, and every address \
                             the name resolves to is checked again when connecting"
                        ),
                        None => "allowed".to_owned(),
                    },
                    None,
                ),
                Decision::Deny(denial) => (
                    false,
                    egress.policy.explain(&denial, &host.to_string(), port),
                    egress.policy.hint(&denial, &host.to_string(), port),
                ),
            },
        };
        let out = if args.json {
            serde_json::to_string_pretty(&Document {
                why_schema_version: super::WHY_SCHEMA_VERSION,
                question: "connect",
                target,
                allowed,
                rule,
                flag,
            })
            .map_err(|e| SandyError::Io {
                step: "cannot render the answer",
                source: e.into(),
            })?
        } else {
            let mut out = format!(
                "connect {target}: {}\n  rule: {rule}",
                if allowed { "allowed" } else { "refused" }
            );
            match (&flag, allowed, deny_rule) {
                (Some(flag), false, _) => out.push_str(&format!("\n  {flag} would allow it")),
                (None, false, true) => {
                    out.push_str("\n  no flag changes this: a deny rule names it")
                }
                (None, false, false) => out.push_str("\n  no flag is suggested for this address"),
                _ => {}
            }
            out
        };
        super::print_answer(&out)?;
        Ok(if allowed { 0 } else { super::EXIT_REFUSED })
    }
}
