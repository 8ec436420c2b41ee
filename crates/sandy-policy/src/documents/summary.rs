//! The dry run for people (`sandy run --dry-run --format text`): what the command may
//! write, what it may read beyond the system, what is masked, protected or replaced by a
//! copy, and the network, in a few lines. The JSON document stays the complete record.

use crate::model::text::Shown;
use std::fmt::Write as _;
use std::path::Path;

use crate::model::policy::{
    Access, Network, Origin, ProtectionKind, ResolvedPolicy, Scope, ViewKind,
};

/// How many paths one line lists before it says how many more there are.
const LIST_MAX: usize = 8;

/// The summary, one topic a line (continuation lines indented).
pub fn render(policy: &ResolvedPolicy, home: Option<&Path>) -> String {
    render_with(policy, home, &[])
}

/// [`render`], with how many lines the credential filter drops from each filtered copy
/// (by the copy's name), which only the supervisor can count (it reads the files).
pub fn render_with(
    policy: &ResolvedPolicy,
    home: Option<&Path>,
    dropped: &[(std::path::PathBuf, usize)],
) -> String {
    let show = |p: &Path| -> String {
        match home.and_then(|h| p.strip_prefix(h).ok()) {
            Some(rest) if rest.as_os_str().is_empty() => "~".to_owned(),
            Some(rest) => format!("~/{}", Shown(rest)),
            None => Shown(p).to_string(),
        }
    };
    let list = |items: Vec<String>| -> String {
        if items.is_empty() {
            return "nothing".to_owned();
        }
        let more = items.len().saturating_sub(LIST_MAX);
        let mut out = items
            .into_iter()
            .take(LIST_MAX)
            .collect::<Vec<_>>()
            .join(", ");
        if more > 0 {
            let _ = write!(out, ", and {more} more (see the JSON dry run)");
        }
        out
    };
    let origin = |o: Origin| match o {
        Origin::Baseline => "",
        Origin::Project => " (project)",
        Origin::Path => " (PATH toolchain)",
        Origin::Profile => " (profile)",
        Origin::Flag => " (flag)",
        Origin::Config => " (config)",
        Origin::ProfileFile => " (profile file)",
        Origin::PolicyFile => " (policy file)",
        Origin::ProjectFile => " (project policy)",
    };

    let mut out = String::new();
    let _ = writeln!(
        out,
        "command:    {} (profile '{}'{})",
        Shown(&policy.program),
        policy.profile.name,
        if policy.profile.detected {
            ", detected from the command name"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "project:    {} (read, write, execute)",
        show(&policy.working_directory)
    );

    let writable: Vec<String> = policy
        .grants
        .iter()
        .filter(|g| g.access == Access::ReadWrite && g.origin != Origin::Project)
        .filter(|g| g.scope == Scope::Subtree || g.origin != Origin::Baseline)
        .map(|g| format!("{}{}", show(&g.path), origin(g.origin)))
        .collect();
    let _ = writeln!(
        out,
        "writable:   {} (/tmp, /var/tmp, /dev/shm and the runtime directory are private \
         to this run)",
        list(writable)
    );

    let system = [
        "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/opt", "/etc", "/proc",
        "/sys",
    ];
    let readable: Vec<String> = policy
        .grants
        .iter()
        .filter(|g| g.access != Access::ReadWrite)
        .filter(|g| !system.iter().any(|s| g.path.starts_with(s)))
        .map(|g| {
            let how = match g.access {
                Access::ReadExec => "read, execute",
                Access::List => "list names",
                Access::Execute => "execute only",
                _ => "read",
            };
            format!("{} [{how}]{}", show(&g.path), origin(g.origin))
        })
        .collect();
    let _ = writeln!(out, "readable:   the system, and {}", list(readable));

    let masked: Vec<String> = policy
        .protections
        .iter()
        .filter(|p| p.kind == ProtectionKind::Deny)
        .map(|p| show(&p.path))
        .collect();
    let _ = writeln!(out, "masked:     {} (never readable)", list(masked));

    // Every agent's launch-configuration names are protected in every run; those absent
    // are counted, not listed (the JSON dry run names each with its profile and reason).
    let absent_agent_files = policy
        .protections
        .iter()
        .filter(|p| p.origin == Origin::Profile && !p.exists && p.placeholder.is_none())
        .count();
    let mut protected: Vec<String> = policy
        .protections
        .iter()
        .filter(|p| p.kind == ProtectionKind::ReadOnly)
        .filter(|p| p.origin != Origin::Profile || p.exists || p.placeholder.is_some())
        .map(|p| {
            let absent = if p.exists {
                ""
            } else if p.placeholder.is_some() {
                " [placeholder]"
            } else {
                " [absent: checked after the run]"
            };
            format!("{}{absent}", show(&p.path))
        })
        .collect();
    if absent_agent_files > 0 {
        let at = protected.len().min(LIST_MAX - 1);
        protected.insert(
            at,
            format!(
                "{absent_agent_files} absent agent launch-configuration name{} (checked after the \
             run)",
                if absent_agent_files == 1 { "" } else { "s" }
            ),
        );
    }
    let _ = writeln!(
        out,
        "protected:  {} (read-only, names and targets)",
        list(protected)
    );

    if !policy.views.is_empty() {
        let views: Vec<String> = policy
            .views
            .iter()
            .map(|v| {
                let kind = match v.kind {
                    ViewKind::Filtered => {
                        match dropped
                            .iter()
                            .find(|(t, _)| t == &v.target)
                            .map(|(_, n)| *n)
                        {
                            Some(0) => "filtered copy, nothing dropped".to_owned(),
                            Some(1) => "filtered copy, 1 line dropped".to_owned(),
                            Some(n) => format!("filtered copy, {n} lines dropped"),
                            None => "filtered copy".to_owned(),
                        }
                    }
                    ViewKind::PrivateCopy => "private copy".to_owned(),
                };
                format!("{} [{kind}]", show(&v.target))
            })
            .collect();
        let _ = writeln!(out, "copies:     {}", list(views));
    }

    if let Some(history) = &policy.history {
        let tools: Vec<&str> = history.kept.iter().map(|k| k.tool).collect();
        let _ = writeln!(
            out,
            "history:    {} kept in {} (your own history files are never written or read)",
            tools.join(", "),
            show(&history.directory)
        );
    }

    if !policy.withheld_env.is_empty() {
        let withheld: Vec<String> = policy
            .withheld_env
            .iter()
            .map(|w| format!("{} [{}]", crate::model::text::escape(&w.name), w.why))
            .collect();
        let _ = writeln!(
            out,
            "withheld:   {} (look like credentials; --pass-env NAME passes one)",
            list(withheld)
        );
    }

    if let Some(egress) = policy
        .egress
        .as_ref()
        .filter(|e| e.policy.mode == sandy_net::Mode::Allowlist)
    {
        out.push_str(&allowlist(egress, &policy.local_ports));
        return out;
    }
    let network = match policy.network {
        Network::AllowAll => {
            let mut text = "the internet as the host reaches it; the host's own services \
                 closed (loopback, its own addresses, its bridges' networks, cloud metadata)"
                .to_owned();
            for p in &policy.local_ports {
                let _ = write!(
                    text,
                    "\n            open: port {} on the host ({})",
                    p.port,
                    p.origin.describe()
                );
            }
            if !policy.resolvers.is_empty() {
                let names: Vec<String> = policy.resolvers.iter().map(|r| r.to_string()).collect();
                let _ = write!(
                    text,
                    "\n            name servers: {} (port 53 only); other UDP has no route",
                    names.join(", ")
                );
            }
            text
        }
        Network::BlockAll if policy.local_ports.is_empty() => {
            "blocked (--block-net: only loopback inside)".to_owned()
        }
        Network::BlockAll => format!(
            "blocked (--block-net), except host loopback port{} {}",
            if policy.local_ports.len() == 1 {
                ""
            } else {
                "s"
            },
            policy
                .local_ports
                .iter()
                .map(|p| p.port.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let _ = write!(out, "network:    {network}");
    out
}

/// The network lines of an allowlist (`--allow-domain`, `--net agent`): where the proxy
/// listens, every rule with its origin, the known hosts left out and why, and what is
/// refused whatever the names.
fn allowlist(
    egress: &crate::model::egress::Egress,
    local_ports: &[crate::model::policy::LocalPort],
) -> String {
    use sandy_net::{Action, PortSpec, Rule, RuleOrigin};
    let pad = "            ";
    let escape = |s: &str| crate::model::text::escape(s).into_owned();
    let describe = |r: &Rule| {
        let ports = match (r.action, r.pattern.port) {
            (Action::Allow, PortSpec::Web) => " (ports 80, 443)",
            (Action::Deny, PortSpec::Web) => " (every port)",
            _ => "",
        };
        let origin = match (r.origin, &r.note) {
            (RuleOrigin::Flag, _) => "flag".to_owned(),
            (RuleOrigin::Profile, Some(n)) => format!("profile: {}", escape(n)),
            (RuleOrigin::Profile, None) => "profile".to_owned(),
            (RuleOrigin::BaseUrl, Some(n)) => format!("base URL: {}", escape(n)),
            (RuleOrigin::BaseUrl, None) => "base URL".to_owned(),
            (RuleOrigin::Config, _) => "config".to_owned(),
            (RuleOrigin::ProfileFile, _) => "profile file".to_owned(),
            (RuleOrigin::PolicyFile, _) => "policy file".to_owned(),
            (RuleOrigin::ProjectFile, _) => "project policy".to_owned(),
        };
        format!("{}{ports} [{origin}]", escape(&r.pattern.to_string()))
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "network:    only the allowlist, through Sandy's egress proxy at 127.0.0.1:{} inside \
         (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY); every other host, and traffic that ignores \
         the proxy, is refused",
        egress.proxy_port
    );
    for (action, label) in [(Action::Allow, "allowed:  "), (Action::Deny, "denied:   ")] {
        let rules: Vec<String> = egress
            .policy
            .rules
            .iter()
            .filter(|r| r.action == action)
            .map(describe)
            .collect();
        if let Some((first, rest)) = rules.split_first() {
            let _ = writeln!(out, "{pad}{label}{first}");
            for r in rest {
                let _ = writeln!(out, "{pad}          {r}");
            }
        }
    }
    if let Some((first, rest)) = egress.policy.left_out.split_first() {
        let line = |l: &sandy_net::LeftOut| {
            let anyway = egress
                .policy
                .rules
                .iter()
                .any(|r| r.action == Action::Allow && r.pattern == l.pattern);
            format!(
                "{} ({}){}",
                escape(&l.pattern.to_string()),
                escape(&l.note),
                if anyway {
                    "; allowed anyway by a rule above"
                } else {
                    ""
                }
            )
        };
        let _ = writeln!(out, "{pad}left out: {}", line(first));
        for l in rest {
            let _ = writeln!(out, "{pad}          {}", line(l));
        }
    }
    if !local_ports.is_empty() {
        let ports: Vec<String> = local_ports.iter().map(|p| p.port.to_string()).collect();
        let _ = writeln!(
            out,
            "{pad}host loopback port{} {} relayed (direct, not through the proxy)",
            if ports.len() == 1 { "" } else { "s" },
            ports.join(", ")
        );
    }
    let _ = write!(
        out,
        "{pad}refused whatever the name resolves to, unless a rule names the address: \
         loopback, private, link-local, carrier-grade NAT, unique-local, multicast, cloud \
         metadata, and this host's own addresses\n\
         {pad}TLS tunnels must name their host in the ClientHello (SNI); port 443 carries \
         only TLS"
    );
    out
}
