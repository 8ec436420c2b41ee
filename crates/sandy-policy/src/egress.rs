//! The network policy of a run (design 3.6): which destinations the sandbox may reach
//! through Sandy's egress proxy, each rule with its origin. Any network policy gives the
//! sandbox a private network namespace with only loopback; the proxy's listener is the
//! only way out.

use sandy_net::{
    Action, EgressPolicy, Host, HostPattern, Mode, Pattern, PortSpec, Rule, RuleOrigin,
};

use crate::error::ResolveError;
use crate::host::HostContext;
use crate::profile::Profile;

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
}

impl EgressRequest {
    /// Whether an allowlist is asked for.
    pub fn any(&self) -> bool {
        !self.allow.is_empty() || !self.deny.is_empty() || self.agent
    }
}

/// The resolved network policy: what the proxy enforces, and where it listens inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    pub policy: EgressPolicy,
    /// The proxy's port on `127.0.0.1` inside the sandbox.
    pub proxy_port: u16,
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
        if request.allow.is_empty() && !request.agent {
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
    let mut rules: Vec<Rule> = request.deny.iter().map(|p| flag(Action::Deny, p)).collect();
    rules.extend(request.allow.iter().map(|p| flag(Action::Allow, p)));
    if request.agent {
        let endpoints = agent_rules(profile, host)?;
        if endpoints.is_empty() {
            return Err(ResolveError::NoAgentEndpoints {
                profile: profile.name.clone(),
            });
        }
        rules.extend(endpoints);
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
        },
        proxy_port,
    }))
}

/// The profile's endpoints, each replaced by the host of its base URL variable when the
/// caller set one.
fn agent_rules(profile: &Profile, host: &HostContext) -> Result<Vec<Rule>, ResolveError> {
    let mut rules = Vec::new();
    for endpoint in &profile.network.endpoints {
        let configured = endpoint
            .base_url_env
            .iter()
            .find_map(|name| host.var(name).filter(|v| !v.is_empty()).map(|v| (name, v)));
        if let Some((name, value)) = configured {
            let value = value.to_string_lossy();
            let pattern = base_url_pattern(&value).ok_or_else(|| ResolveError::BaseUrl {
                variable: name.clone(),
            })?;
            rules.push(Rule {
                action: Action::Allow,
                pattern,
                origin: RuleOrigin::BaseUrl,
                note: Some(format!("{name}, in place of {}", endpoint.host)),
            });
            continue;
        }
        let pattern: Pattern = endpoint.host.parse().map_err(|_| ResolveError::BaseUrl {
            variable: format!("profile endpoint {}", endpoint.host),
        })?;
        rules.push(Rule {
            action: Action::Allow,
            pattern,
            origin: RuleOrigin::Profile,
            note: Some(endpoint.role.clone()),
        });
    }
    Ok(rules)
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
}
