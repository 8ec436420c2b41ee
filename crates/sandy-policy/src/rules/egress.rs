//! The network policy of a run (design 3.6): which destinations the sandbox may reach
//! through Sandy's egress proxy, each rule with its origin. Any network policy gives the
//! sandbox a private network namespace with only loopback; the proxy's listener is the
//! only way out.

use sandy_net::{
    Action, EgressPolicy, Host, HostPattern, LeftOut, Mode, Pattern, PortSpec, Rule, RuleOrigin,
};

use crate::host::context::HostContext;
use crate::model::egress::Egress;
use crate::rules::error::ResolveError;
use crate::rules::profile::Profile;

/// The loopback port the proxy listens on inside the sandbox (the next free one when a
/// local-port grant takes it).
pub const DEFAULT_PROXY_PORT: u16 = 3128;

/// What the user asked of the network, after argument parsing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressRequest {
    /// `--allow-domain` patterns.
    pub allow: Vec<Pattern>,
    /// `--deny-domain` patterns.
    pub deny: Vec<Pattern>,
    /// `--net agent`: the profile's endpoints.
    pub agent: bool,
    /// Allow and deny rules of the user's files, each with its origin (after the flags').
    pub from_files: Vec<(Action, Pattern, RuleOrigin)>,
}

impl EgressRequest {
    /// Whether an allowlist is asked for.
    pub fn any(&self) -> bool {
        !self.allow.is_empty() || !self.deny.is_empty() || self.agent || !self.from_files.is_empty()
    }

    /// Whether any rule allows something (a deny rule alone allows nothing).
    fn allows(&self) -> bool {
        !self.allow.is_empty()
            || self.agent
            || self.from_files.iter().any(|(a, _, _)| *a == Action::Allow)
    }
}

/// The egress policy for a run, or `None` when the network is left open.
pub(crate) fn resolve_egress(
    request: &EgressRequest,
    block_net: bool,
    profile: &Profile,
    host: &HostContext,
    local_ports: &[u16],
) -> Result<Option<Egress>, ResolveError> {
    let mode = if block_net {
        if request.any() {
            return Err(ResolveError::NetworkConflict);
        }
        Mode::Blocked
    } else if request.any() {
        if !request.allows() {
            return Err(ResolveError::DenyWithoutAllow);
        }
        Mode::Allowlist
    } else {
        return Ok(None);
    };
    let flag = |action, pattern: &Pattern| Rule {
        action,
        pattern: pattern.clone(),
        origin: RuleOrigin::Flag,
        note: None,
    };
    // Deny rules first: they win, and the dry run lists them first.
    let filed = |wanted: Action| {
        request
            .from_files
            .iter()
            .filter(move |(a, _, _)| *a == wanted)
            .map(|(action, pattern, origin)| Rule {
                action: *action,
                pattern: pattern.clone(),
                origin: *origin,
                note: None,
            })
    };
    let mut rules: Vec<Rule> = request.deny.iter().map(|p| flag(Action::Deny, p)).collect();
    rules.extend(filed(Action::Deny));
    rules.extend(request.allow.iter().map(|p| flag(Action::Allow, p)));
    rules.extend(filed(Action::Allow));
    let mut left_out = Vec::new();
    if request.agent {
        let (endpoints, known) = agent_rules(profile, host)?;
        if endpoints.is_empty() {
            return Err(ResolveError::NoAgentEndpoints {
                profile: profile.name.clone(),
            });
        }
        rules.extend(endpoints);
        left_out = known;
    }
    let mut unique: Vec<Rule> = Vec::with_capacity(rules.len());
    for r in rules {
        if !unique
            .iter()
            .any(|u| u.action == r.action && u.pattern == r.pattern)
        {
            unique.push(r);
        }
    }
    let proxy_port = (DEFAULT_PROXY_PORT..=u16::MAX)
        .find(|p| !local_ports.contains(p))
        .unwrap_or(DEFAULT_PROXY_PORT);
    Ok(Some(Egress {
        policy: EgressPolicy {
            mode,
            rules: unique,
            left_out,
        },
        proxy_port,
    }))
}

/// The profile's endpoints that `--net agent` allows, each replaced by the host of its
/// base URL variable when the caller set one; and the known ones it leaves out (kinds it
/// does not allow, and default hosts a base URL replaced), for the refusals to name.
fn agent_rules(
    profile: &Profile,
    host: &HostContext,
) -> Result<(Vec<Rule>, Vec<LeftOut>), ResolveError> {
    let mut rules = Vec::new();
    let mut left_out = Vec::new();
    for endpoint in &profile.network.endpoints {
        let pattern: Pattern = endpoint.host.parse().map_err(|_| ResolveError::BaseUrl {
            variable: format!("profile endpoint {}", endpoint.host),
        })?;
        let agent = &profile.name;
        if !endpoint.kind.allowed_by_agent() {
            left_out.push(LeftOut {
                pattern,
                note: format!(
                    "{agent} {}: {}; --net agent leaves it out",
                    endpoint.kind.name(),
                    endpoint.role
                ),
            });
            continue;
        }
        let configured = endpoint
            .base_url_env
            .iter()
            .find_map(|name| host.var(name).filter(|v| !v.is_empty()).map(|v| (name, v)));
        if let Some((name, value)) = configured {
            let value = value.to_string_lossy();
            let replacement = base_url_pattern(&value).ok_or_else(|| ResolveError::BaseUrl {
                variable: name.clone(),
            })?;
            rules.push(Rule {
                action: Action::Allow,
                pattern: replacement,
                origin: RuleOrigin::BaseUrl,
                note: Some(format!("{name}, in place of {}", endpoint.host)),
            });
            left_out.push(LeftOut {
                pattern,
                note: format!("{agent} {}, replaced by {name}", endpoint.kind.name()),
            });
            continue;
        }
        rules.push(Rule {
            action: Action::Allow,
            pattern,
            origin: RuleOrigin::Profile,
            note: Some(endpoint.role.clone()),
        });
    }
    Ok((rules, left_out))
}

/// The destination a base URL names: its host and its port (the scheme's default when it
/// names none). `None` when it is not an http(s) URL with a host.
pub fn base_url_pattern(url: &str) -> Option<Pattern> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    if authority.contains('@') {
        return None;
    }
    let (host_text, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && (!h.contains(':') || h.ends_with(']')) => {
            (h, p.parse::<u16>().ok().filter(|p| *p > 0)?)
        }
        _ => (authority, default_port),
    };
    let host = match sandy_net::parse_host(host_text).ok()? {
        Host::Name(n) => HostPattern::Exact(n),
        Host::Ip(a) => HostPattern::Address(sandy_net::addr::canonical(a)),
    };
    Some(Pattern {
        host,
        port: PortSpec::One(port),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_name_their_host_and_port() {
        for (url, want) in [
            ("https://api.example.com", "api.example.com:443"),
            ("https://API.Example.com:8443/v1", "api.example.com:8443"),
            ("http://gw.internal/anthropic", "gw.internal:80"),
            ("http://10.0.0.5:8080", "10.0.0.5:8080"),
            ("http://[fd00::5]:8080/x", "[fd00::5]:8080"),
        ] {
            assert_eq!(
                base_url_pattern(url).map(|p| p.to_string()).as_deref(),
                Some(want),
                "{url}"
            );
        }
        for bad in [
            "api.example.com",
            "ftp://x",
            "https://user@x.com",
            "https://:80",
            "",
        ] {
            assert!(base_url_pattern(bad).is_none(), "{bad}");
        }
    }

    fn host_with(env: &[(&str, &str)]) -> HostContext {
        HostContext {
            resolvers: Vec::new(),
            cwd: "/home/u/proj".into(),
            home: Some("/home/u".into()),
            env: env
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            terminals: vec![],
            supervisor_pid: 7,
            uid: 1000,
            git: crate::host::gitfacts::GitFacts::default(),
        }
    }

    #[test]
    fn net_agent_allows_model_login_and_service_hosts_and_names_the_rest() {
        let agent = EgressRequest {
            agent: true,
            ..EgressRequest::default()
        };
        for profile in crate::rules::profile::builtin_profiles().unwrap() {
            if profile.network.endpoints.is_empty() {
                continue;
            }
            let e = resolve_egress(&agent, false, &profile, &host_with(&[]), &[])
                .unwrap()
                .unwrap();
            for endpoint in &profile.network.endpoints {
                let allowed =
                    e.policy.rules.iter().any(|r| {
                        r.action == Action::Allow && r.pattern.to_string() == endpoint.host
                    });
                let named = e
                    .policy
                    .left_out
                    .iter()
                    .find(|l| l.pattern.to_string() == endpoint.host);
                if endpoint.kind.allowed_by_agent() {
                    assert!(allowed, "{} {}", profile.name, endpoint.host);
                } else if !profile
                    .network
                    .endpoints
                    .iter()
                    .any(|o| o.host == endpoint.host && o.kind.allowed_by_agent())
                {
                    // A host no allowed endpoint shares stays refused, with its role.
                    assert!(!allowed, "{} {}", profile.name, endpoint.host);
                    let note = &named.unwrap().note;
                    assert!(note.contains(&endpoint.role), "{note}");
                    assert!(note.contains("--net agent leaves it out"), "{note}");
                }
            }
        }
    }

    #[test]
    fn a_base_url_replaces_its_host_which_is_then_named_as_replaced() {
        let profile = crate::rules::profile::builtin_profiles()
            .unwrap()
            .into_iter()
            .find(|p| p.name == "claude")
            .unwrap();
        let agent = EgressRequest {
            agent: true,
            ..EgressRequest::default()
        };
        let host = host_with(&[("ANTHROPIC_BASE_URL", "http://gw.example:8080/a")]);
        let e = resolve_egress(&agent, false, &profile, &host, &[])
            .unwrap()
            .unwrap();
        let patterns: Vec<String> = e
            .policy
            .rules
            .iter()
            .map(|r| r.pattern.to_string())
            .collect();
        assert!(
            patterns.contains(&"gw.example:8080".to_owned()),
            "{patterns:?}"
        );
        assert!(
            !patterns.contains(&"api.anthropic.com".to_owned()),
            "{patterns:?}"
        );
        let replaced = e
            .policy
            .left_out
            .iter()
            .find(|l| l.pattern.to_string() == "api.anthropic.com")
            .unwrap();
        assert_eq!(
            replaced.note,
            "claude model API, replaced by ANTHROPIC_BASE_URL"
        );
        // Telemetry, update checks and the like never become rules.
        for host in [
            "registry.npmjs.org",
            "raw.githubusercontent.com",
            "downloads.claude.ai",
        ] {
            assert!(!patterns.contains(&host.to_owned()), "{host}: {patterns:?}");
        }
    }
}
