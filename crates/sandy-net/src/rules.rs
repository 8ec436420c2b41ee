//! Rules and decisions. A pattern is an exact host (`api.example.com`), every subdomain of
//! a name (`*.example.com`, not the name itself), an IP address or a CIDR network, with an
//! optional `:PORT`; without one, an allow rule means ports 80 and 443 and a deny rule
//! every port. Deny rules win over allow rules. A name is decided before any DNS lookup;
//! the addresses it resolves to are then checked again ([`EgressPolicy::admit_address`])
//! so that rebinding reaches nothing new, neither a refused address class nor one of the
//! host's own addresses.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Serialize, Serializer};

use crate::addr::{canonical, classify, AddressClass};
use crate::host::{parse_host, Host, NameError};

/// Where a refusal of a local, private or metadata address sends the reader instead of
/// suggesting the flag that would open it (a prompt-injected agent could pass a
/// suggestion on to the user as advice).
pub const LOCAL_ADDRESSES_DOC: &str =
    "see \"Local, private and metadata addresses\" in Sandy's docs/network.md";

/// The ports an allow pattern without `:PORT` means (a deny pattern without one means
/// every port).
pub const WEB_PORTS: [u16; 2] = [80, 443];

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// Exactly this name.
    Exact(String),
    /// Every name below this one (`*.example.com` matches `a.example.com` and
    /// `a.b.example.com`, not `example.com`).
    Subdomains(String),
    /// Exactly this address.
    Address(IpAddr),
    /// Every address in this network.
    Network { base: IpAddr, prefix: u8 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpec {
    /// 80 and 443.
    Web,
    One(u16),
}

impl PortSpec {
    pub fn matches(self, port: u16) -> bool {
        match self {
            PortSpec::Web => WEB_PORTS.contains(&port),
            PortSpec::One(p) => p == port,
        }
    }
}

/// A host pattern and its ports, normalised like the hosts it is compared with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pattern {
    pub host: HostPattern,
    pub port: PortSpec,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("{0}")]
    Host(#[from] NameError),
    #[error("'{0}' is not a port (1-65535)")]
    Port(String),
    #[error("a wildcard is only accepted as the first label ('*.example.com')")]
    Wildcard,
    #[error("'{0}' is not a network in CIDR form (address/prefix)")]
    Network(String),
}

impl FromStr for Pattern {
    type Err = PatternError;

    fn from_str(text: &str) -> Result<Self, PatternError> {
        let (host, port) = split_port(text)?;
        let port = match port {
            None => PortSpec::Web,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => PortSpec::One(n),
                _ => return Err(PatternError::Port(p.to_owned())),
            },
        };
        let host = if let Some(rest) = host.strip_prefix("*.") {
            match parse_host(rest)? {
                Host::Name(n) if !n.contains('*') => HostPattern::Subdomains(n),
                _ => return Err(PatternError::Wildcard),
            }
        } else if host.contains('*') {
            return Err(PatternError::Wildcard);
        } else if let Some((addr, prefix)) = host.split_once('/') {
            let bad = || PatternError::Network(host.to_owned());
            let addr = match parse_host(addr).map_err(|_| bad())? {
                Host::Ip(a) => canonical(a),
                Host::Name(_) => return Err(bad()),
            };
            let prefix: u8 = prefix.parse().map_err(|_| bad())?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            if prefix > max {
                return Err(bad());
            }
            HostPattern::Network {
                base: mask(addr, prefix),
                prefix,
            }
        } else {
            match parse_host(host)? {
                Host::Name(n) => HostPattern::Exact(n),
                Host::Ip(a) => HostPattern::Address(canonical(a)),
            }
        };
        Ok(Pattern { host, port })
    }
}

/// Splits `host[:port]`, `[v6]:port`, `[v6/len]:port`; a bare IPv6 address has no port.
fn split_port(text: &str) -> Result<(&str, Option<&str>), PatternError> {
    if let Some(rest) = text.strip_prefix('[') {
        let (inner, after) = rest
            .split_once(']')
            .ok_or_else(|| NameError::Invalid(text.to_owned()))?;
        return match after {
            "" => Ok((inner, None)),
            a => match a.strip_prefix(':') {
                Some(p) => Ok((inner, Some(p))),
                None => Err(NameError::Invalid(text.to_owned()).into()),
            },
        };
    }
    match text.matches(':').count() {
        0 => Ok((text, None)),
        1 => Ok(text
            .split_once(':')
            .map_or((text, None), |(h, p)| (h, Some(p)))),
        _ => Ok((text, None)),
    }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

impl Pattern {
    /// Whether this pattern names the host name (names only; addresses never match a
    /// name pattern).
    pub fn matches_name(&self, name: &str, port: u16) -> bool {
        self.port.matches(port) && self.names_name(name)
    }

    /// Whether this pattern names the address explicitly (an address or network rule).
    pub fn matches_address(&self, ip: IpAddr, port: u16) -> bool {
        self.port.matches(port) && self.names_address(ip)
    }

    /// Whether the host part names this name, whatever the port.
    fn names_name(&self, name: &str) -> bool {
        match &self.host {
            HostPattern::Exact(n) => n == name,
            HostPattern::Subdomains(n) => name
                .strip_suffix(n.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            _ => false,
        }
    }

    /// Whether the host part names this address, whatever the port.
    fn names_address(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        match self.host {
            HostPattern::Address(a) => a == ip,
            HostPattern::Network { base, prefix } => {
                base.is_ipv4() == ip.is_ipv4() && mask(ip, prefix) == base
            }
            _ => false,
        }
    }

    /// Whether a rule with this pattern and `action` covers `port`: as written, except
    /// that a deny pattern without `:PORT` covers every port (`--deny-domain evil.example`
    /// must beat `--allow-domain '*.example:8443'`).
    fn covers_port(&self, action: Action, port: u16) -> bool {
        match (action, self.port) {
            (Action::Deny, PortSpec::Web) => true,
            (_, spec) => spec.matches(port),
        }
    }

    pub fn is_address(&self) -> bool {
        matches!(
            self.host,
            HostPattern::Address(_) | HostPattern::Network { .. }
        )
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bracket = |ip: &IpAddr| matches!(ip, IpAddr::V6(_)) && self.port != PortSpec::Web;
        match &self.host {
            HostPattern::Exact(n) => f.write_str(n)?,
            HostPattern::Subdomains(n) => write!(f, "*.{n}")?,
            HostPattern::Address(a) if bracket(a) => write!(f, "[{a}]")?,
            HostPattern::Address(a) => write!(f, "{a}")?,
            HostPattern::Network { base, prefix } if bracket(base) => {
                write!(f, "[{base}/{prefix}]")?
            }
            HostPattern::Network { base, prefix } => write!(f, "{base}/{prefix}")?,
        }
        match self.port {
            PortSpec::Web => Ok(()),
            PortSpec::One(p) => write!(f, ":{p}"),
        }
    }
}

impl Serialize for Pattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Allow,
    Deny,
}

/// Where a rule comes from, for the dry run and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleOrigin {
    /// `--allow-domain` or `--deny-domain`.
    Flag,
    /// The agent profile's endpoints (`--net agent`).
    Profile,
    /// A base URL variable that replaced a profile endpoint (`ANTHROPIC_BASE_URL`, ...).
    BaseUrl,
    /// The user configuration's `network.allow` or `network.deny`.
    Config,
    /// A user profile's `network.allow` or `network.deny`.
    ProfileFile,
    /// The policy file's `network.allow` or `network.deny`.
    PolicyFile,
    /// The project policy's `network.allow` (`sandy.toml`, trusted with `sandy trust`).
    ProjectFile,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Rule {
    pub action: Action,
    pub pattern: Pattern,
    pub origin: RuleOrigin,
    /// What the rule is for (the endpoint's role, the variable that set it).
    pub note: Option<String>,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flag = match self.action {
            Action::Allow => "allow",
            Action::Deny => "deny",
        };
        match self.origin {
            RuleOrigin::Flag => write!(f, "--{flag}-domain {}", self.pattern),
            RuleOrigin::Profile => write!(f, "profile endpoint {}", self.pattern),
            RuleOrigin::BaseUrl => write!(
                f,
                "base URL {} ({})",
                self.pattern,
                self.note.as_deref().unwrap_or("a base URL variable")
            ),
            RuleOrigin::Config => write!(f, "{flag} {} (configuration file)", self.pattern),
            RuleOrigin::ProfileFile => write!(f, "{flag} {} (profile file)", self.pattern),
            RuleOrigin::PolicyFile => write!(f, "{flag} {} (policy file)", self.pattern),
            RuleOrigin::ProjectFile => write!(f, "{flag} {} (project policy)", self.pattern),
        }
    }
}

/// What the proxy does with requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// `--block-net`: every request is refused at once with that reason.
    Blocked,
    /// Only what an allow rule names, minus what a deny rule names.
    Allowlist,
}

/// A destination the agent is known to contact that the policy leaves out (`--net agent`
/// allows only an agent's model API, login and service endpoints; its telemetry, update
/// checks and the like stay refused, as does a default host a base URL replaced). It
/// allows nothing: a refusal of it names what it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct LeftOut {
    pub pattern: Pattern,
    /// What the agent uses it for, and why it is left out.
    pub note: String,
}

/// The complete egress policy of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EgressPolicy {
    pub mode: Mode,
    pub rules: Vec<Rule>,
    /// Known destinations left out; only refusals read them.
    pub left_out: Vec<LeftOut>,
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// `--block-net`.
    Blocked,
    /// A deny rule (its index) names the destination.
    DeniedByRule(usize),
    /// No allow rule names this host and port.
    NotAllowed,
    /// An IP literal no rule names, and its class ([`AddressClass::Host`] when the proxy
    /// knows it for one of the host's own addresses).
    UnnamedAddress(IpAddr, AddressClass),
    /// An address of a refused class (or one of the host's own addresses) no rule names:
    /// what an allowed name (allowed by the rule at `rule`) resolved to.
    RefusedAddress {
        ip: IpAddr,
        class: AddressClass,
        rule: Option<usize>,
    },
    /// The tunnel's first bytes did not pass the TLS check (see [`TlsRefusal`]).
    Tls(TlsRefusal),
    /// The run already has this many connections through the proxy, its limit. Not a
    /// policy decision: the same request succeeds once others end.
    Busy(usize),
    /// The host is not a valid name.
    Invalid(NameError),
}

/// Why a tunnel's first bytes were refused. A tunnel whose client starts with a TLS
/// handshake must name the tunnel's own host in its ClientHello (SNI); on port 443 the
/// client must start with one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsRefusal {
    /// The ClientHello names another host.
    OtherName(String),
    /// The ClientHello names no host, and the tunnel was not allowed by an address rule.
    NoName,
    /// Port 443, and the first bytes are not a TLS handshake.
    NotTls,
    /// Port 443, and the client sent nothing within the wait.
    Silent,
    /// A TLS handshake record that is not a readable ClientHello within the bound.
    Malformed,
}

impl fmt::Display for TlsRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsRefusal::OtherName(n) => {
                write!(f, "the TLS ClientHello names {n}, not the tunnel's host")
            }
            TlsRefusal::NoName => f.write_str(
                "the TLS ClientHello names no host (SNI), and only a tunnel to an address \
                 allowed by an address rule may omit it",
            ),
            TlsRefusal::NotTls => f.write_str(
                "port 443 carries only TLS through the proxy, and the first bytes were not a \
                 TLS handshake",
            ),
            TlsRefusal::Silent => {
                f.write_str("the client sent no TLS ClientHello in time on port 443")
            }
            TlsRefusal::Malformed => {
                f.write_str("the TLS ClientHello could not be read within its bound")
            }
        }
    }
}

/// A decision about one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed by the rule at this index.
    Allow(usize),
    Deny(Denial),
}

/// How a host and port are written in messages and the log.
pub fn display_target(host: &Host, port: u16) -> String {
    format!("{host}:{port}")
}

/// The smallest pattern naming this destination.
fn suggest(host: &str, port: u16) -> String {
    if WEB_PORTS.contains(&port) {
        host.to_owned()
    } else {
        format!("{host}:{port}")
    }
}

impl EgressPolicy {
    /// Decides a destination as named, before any lookup.
    pub fn decide(&self, host: &Host, port: u16) -> Decision {
        if self.mode == Mode::Blocked {
            return Decision::Deny(Denial::Blocked);
        }
        let names = |p: &Pattern| match host {
            Host::Name(n) => p.names_name(n),
            Host::Ip(a) => p.names_address(*a),
        };
        if let Some(i) = self.find(Action::Deny, port, &names) {
            return Decision::Deny(Denial::DeniedByRule(i));
        }
        match (self.find(Action::Allow, port, &names), host) {
            (Some(i), _) => Decision::Allow(i),
            (None, Host::Ip(a)) => {
                let a = canonical(*a);
                Decision::Deny(Denial::UnnamedAddress(a, classify(a)))
            }
            (None, Host::Name(_)) => Decision::Deny(Denial::NotAllowed),
        }
    }

    /// After a lookup: whether an address that a name allowed by the rule at `rule`
    /// resolved to may be reached. Deny rules naming the address win; an address of a
    /// refused class, or one of `host_addresses` (the addresses of the host's own
    /// interfaces), needs an allow rule that names it.
    pub fn admit_address(
        &self,
        ip: IpAddr,
        port: u16,
        rule: Option<usize>,
        host_addresses: &[IpAddr],
    ) -> Result<(), Denial> {
        let ip = canonical(ip);
        let m = |p: &Pattern| p.names_address(ip);
        if let Some(i) = self.find(Action::Deny, port, &m) {
            return Err(Denial::DeniedByRule(i));
        }
        let class = match classify(ip) {
            AddressClass::Public if is_host_address(ip, host_addresses) => AddressClass::Host,
            class => class,
        };
        match class {
            AddressClass::Public => Ok(()),
            _ if self.find(Action::Allow, port, &m).is_some() => Ok(()),
            class => Err(Denial::RefusedAddress { ip, class, rule }),
        }
    }

    fn find(&self, action: Action, port: u16, m: &dyn Fn(&Pattern) -> bool) -> Option<usize> {
        self.rules.iter().position(|r| {
            r.action == action && r.pattern.covers_port(action, port) && m(&r.pattern)
        })
    }

    /// Whether the rule at `index` names an address or a network (not a name).
    pub fn is_address_rule(&self, index: usize) -> bool {
        self.rules
            .get(index)
            .is_some_and(|r| r.pattern.is_address())
    }

    /// What a refused name is when it is a known destination the policy leaves out.
    pub fn left_out(&self, host: &str, port: u16) -> Option<&LeftOut> {
        self.left_out
            .iter()
            .find(|l| l.pattern.matches_name(host, port))
    }

    /// One sentence for the user: why, and the flag that would allow it. A local,
    /// private or metadata address (or one of the host's own) is never answered with the
    /// flag that would open it: the sentence names the rule and where that is documented.
    pub fn explain(&self, denial: &Denial, host: &str, port: u16) -> String {
        if let (Denial::NotAllowed, Some(known)) = (denial, self.left_out(host, port)) {
            return format!(
                "{host}:{port} is not allowed ({}); allow it with --allow-domain {}",
                known.note,
                suggest(host, port)
            );
        }
        match denial {
            Denial::Blocked => "network blocked by --block-net".to_owned(),
            Denial::DeniedByRule(i) => match self.rules.get(*i) {
                Some(r) => format!("{host}:{port} is denied by {r}"),
                None => format!("{host}:{port} is denied"),
            },
            Denial::NotAllowed if names_loopback(host) => format!(
                "{host}:{port} is not allowed: it names this machine ({LOCAL_ADDRESSES_DOC})"
            ),
            Denial::NotAllowed | Denial::UnnamedAddress(_, AddressClass::Public) => format!(
                "{host}:{port} is not allowed; allow it with --allow-domain {}",
                suggest(host, port)
            ),
            Denial::UnnamedAddress(ip, class) => format!(
                "{}:{port} is {}, refused unless a rule names it ({LOCAL_ADDRESSES_DOC})",
                Host::Ip(*ip),
                an_address(*class)
            ),
            Denial::RefusedAddress { ip, class, rule } => {
                let allowed = match rule.and_then(|i| self.rules.get(i)) {
                    Some(r) => format!("; {r} allows the name, not the address"),
                    None => String::new(),
                };
                format!(
                    "{host} resolves to {}, {}, refused unless a rule names the \
                     address{allowed} ({LOCAL_ADDRESSES_DOC})",
                    Host::Ip(*ip),
                    an_address(*class)
                )
            }
            Denial::Tls(t) => format!("{host}:{port}: {t}"),
            Denial::Busy(n) => format!(
                "{host}:{port}: the run already has {n} connections open through the proxy \
                 (its limit); try again when some have ended"
            ),
            Denial::Invalid(e) => format!("refused: {e}"),
        }
    }

    /// The flag that would allow a refused destination, if one would and it is safe to
    /// suggest: never for a local, private or metadata address, a name of this machine
    /// (`localhost`), or a TLS or capacity refusal.
    pub fn hint(&self, denial: &Denial, host: &str, port: u16) -> Option<String> {
        let local = names_loopback(host)
            || matches!(parse_host(host), Ok(Host::Ip(ip)) if classify(ip) != AddressClass::Public);
        match denial {
            _ if local => None,
            Denial::NotAllowed | Denial::UnnamedAddress(_, AddressClass::Public) => {
                Some(format!("--allow-domain {}", suggest(host, port)))
            }
            Denial::Blocked => Some(format!(
                "--allow-domain {} instead of --block-net",
                suggest(host, port)
            )),
            Denial::UnnamedAddress(..)
            | Denial::RefusedAddress { .. }
            | Denial::DeniedByRule(_)
            | Denial::Tls(_)
            | Denial::Busy(_)
            | Denial::Invalid(_) => None,
        }
    }
}

/// "a loopback address", "an unspecified address", "one of this host's own addresses".
fn an_address(class: AddressClass) -> String {
    if class == AddressClass::Host {
        return "one of this host's own addresses".to_owned();
    }
    let d = class.describe();
    let an = d.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {d} address", if an { "an" } else { "a" })
}

/// Whether `ip` is one of the host's own addresses (IPv4-mapped forms included).
fn is_host_address(ip: IpAddr, host_addresses: &[IpAddr]) -> bool {
    let ip = canonical(ip);
    host_addresses.iter().any(|a| canonical(*a) == ip)
}

/// Whether a host as written names this machine by name (`localhost`, `*.localhost`,
/// which resolvers answer with loopback).
fn names_loopback(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    h == "localhost" || h.ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Pattern {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn rule(action: Action, s: &str) -> Rule {
        Rule {
            action,
            pattern: p(s),
            origin: RuleOrigin::Flag,
            note: None,
        }
    }

    fn policy(rules: &[(Action, &str)]) -> EgressPolicy {
        EgressPolicy {
            mode: Mode::Allowlist,
            rules: rules.iter().map(|(a, s)| rule(*a, s)).collect(),
            left_out: vec![],
        }
    }

    fn name(s: &str) -> Host {
        parse_host(s).unwrap()
    }

    #[test]
    fn patterns_parse_normalise_and_print_canonically() {
        for (input, printed) in [
            ("API.Example.com.", "api.example.com"),
            ("*.Example.COM", "*.example.com"),
            ("example.com:8443", "example.com:8443"),
            ("10.0.0.5:8080", "10.0.0.5:8080"),
            ("10.1.2.3/8", "10.0.0.0/8"),
            ("10.0.0.0/8:5432", "10.0.0.0/8:5432"),
            ("fd00::1", "fd00::1"),
            ("[fd00::1]:443", "[fd00::1]:443"),
            ("[fd00::/8]:8080", "[fd00::/8]:8080"),
            ("fd00::/8", "fd00::/8"),
            ("bücher.example", "xn--bcher-kva.example"),
            ("::ffff:10.0.0.5", "10.0.0.5"),
        ] {
            assert_eq!(p(input).to_string(), printed, "{input}");
        }
        for bad in [
            "",
            "example.com:0",
            "example.com:65536",
            "example.com:x",
            "a.*.example.com",
            "*example.com",
            "*.10.0.0.1",
            "10.0.0.0/33",
            "name/8",
            "user@example.com",
            "[::1",
            "[::1]x",
        ] {
            assert!(bad.parse::<Pattern>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn names_match_exactly_or_as_subdomains_on_the_named_ports() {
        let pol = policy(&[
            (Action::Allow, "api.example.com"),
            (Action::Allow, "*.cdn.example"),
            (Action::Allow, "git.example.org:8443"),
        ]);
        let allowed = |h: &str, port| matches!(pol.decide(&name(h), port), Decision::Allow(_));
        assert!(allowed("api.example.com", 443));
        assert!(allowed("API.EXAMPLE.COM.", 80));
        assert!(!allowed("api.example.com", 22));
        assert!(!allowed("xapi.example.com", 443));
        assert!(!allowed("api.example.com.evil.net", 443));
        assert!(!allowed("example.com", 443));
        assert!(allowed("a.cdn.example", 443));
        assert!(allowed("a.b.cdn.example", 443));
        assert!(!allowed("cdn.example", 443));
        assert!(!allowed("evilcdn.example", 443));
        assert!(allowed("git.example.org", 8443));
        assert!(!allowed("git.example.org", 443));
        assert_eq!(
            pol.decide(&name("other.net"), 443),
            Decision::Deny(Denial::NotAllowed)
        );
    }

    #[test]
    fn deny_wins_over_allow() {
        let pol = policy(&[
            (Action::Allow, "*.example.com"),
            (Action::Deny, "secret.example.com"),
        ]);
        assert_eq!(
            pol.decide(&name("Secret.Example.com"), 443),
            Decision::Deny(Denial::DeniedByRule(1))
        );
        assert_eq!(
            pol.decide(&name("www.example.com"), 443),
            Decision::Allow(0)
        );
    }

    #[test]
    fn ip_literals_need_a_rule_naming_them_and_names_never_match_addresses() {
        let pol = policy(&[
            (Action::Allow, "example.com"),
            (Action::Allow, "10.0.0.5:8080"),
            (Action::Allow, "192.168.0.0/16:5432"),
        ]);
        let ip = |s: &str| Host::Ip(s.parse().unwrap());
        assert_eq!(
            pol.decide(&ip("1.2.3.4"), 443),
            Decision::Deny(Denial::UnnamedAddress(
                "1.2.3.4".parse().unwrap(),
                AddressClass::Public
            ))
        );
        assert_eq!(pol.decide(&ip("10.0.0.5"), 8080), Decision::Allow(1));
        assert_eq!(pol.decide(&ip("::ffff:10.0.0.5"), 8080), Decision::Allow(1));
        assert!(matches!(
            pol.decide(&ip("10.0.0.5"), 443),
            Decision::Deny(_)
        ));
        assert_eq!(pol.decide(&ip("192.168.3.4"), 5432), Decision::Allow(2));
        assert!(matches!(
            pol.decide(&ip("192.169.0.1"), 5432),
            Decision::Deny(_)
        ));
    }

    #[test]
    fn resolved_addresses_of_refused_classes_are_refused_unless_named() {
        let pol = policy(&[
            (Action::Allow, "api.example.com"),
            (Action::Allow, "10.0.0.5"),
        ]);
        let admit =
            |pol: &EgressPolicy, ip: &str| pol.admit_address(ip.parse().unwrap(), 443, None, &[]);
        assert_eq!(admit(&pol, "1.2.3.4"), Ok(()));
        for bad in [
            "169.254.169.254",
            "fd00:ec2::254",
            "127.0.0.1",
            "::1",
            "10.0.0.6",
            "100.64.1.1",
            "fe80::1",
            "::ffff:169.254.169.254",
            "0.0.0.0",
        ] {
            assert!(
                matches!(admit(&pol, bad), Err(Denial::RefusedAddress { .. })),
                "{bad}"
            );
        }
        assert_eq!(admit(&pol, "10.0.0.5"), Ok(()));
        let deny = policy(&[(Action::Allow, "a.example"), (Action::Deny, "1.2.3.0/24")]);
        assert_eq!(admit(&deny, "1.2.3.4"), Err(Denial::DeniedByRule(1)));
    }

    #[test]
    fn blocked_mode_refuses_everything_and_messages_name_the_flag() {
        let pol = EgressPolicy {
            mode: Mode::Blocked,
            rules: vec![],
            left_out: vec![],
        };
        assert_eq!(
            pol.decide(&name("example.com"), 443),
            Decision::Deny(Denial::Blocked)
        );
        assert_eq!(
            pol.explain(&Denial::Blocked, "example.com", 443),
            "network blocked by --block-net"
        );
        let pol = policy(&[]);
        assert_eq!(
            pol.hint(&Denial::NotAllowed, "example.com", 8443)
                .as_deref(),
            Some("--allow-domain example.com:8443")
        );
        assert_eq!(
            pol.hint(&Denial::NotAllowed, "example.com", 443).as_deref(),
            Some("--allow-domain example.com")
        );
    }

    #[test]
    fn a_known_destination_left_out_is_refused_and_named_in_the_message() {
        let mut pol = policy(&[(Action::Allow, "api.example")]);
        pol.left_out.push(LeftOut {
            pattern: p("metrics.example"),
            note: "telemetry of the agent, left out by --net agent".to_owned(),
        });
        let d = pol.decide(&name("metrics.example"), 443);
        assert_eq!(d, Decision::Deny(Denial::NotAllowed));
        assert_eq!(
            pol.explain(&Denial::NotAllowed, "metrics.example", 443),
            "metrics.example:443 is not allowed (telemetry of the agent, left out by --net \
             agent); allow it with --allow-domain metrics.example"
        );
        // Another port of the same host, and other hosts, get the plain message.
        assert_eq!(
            pol.explain(&Denial::NotAllowed, "metrics.example", 8443),
            "metrics.example:8443 is not allowed; allow it with --allow-domain \
             metrics.example:8443"
        );
        assert_eq!(
            pol.explain(&Denial::NotAllowed, "other.example", 443),
            "other.example:443 is not allowed; allow it with --allow-domain other.example"
        );
        assert_eq!(pol.decide(&name("api.example"), 443), Decision::Allow(0));
    }

    #[test]
    fn the_hosts_own_addresses_are_refused_unless_a_rule_names_them() {
        let pol = policy(&[
            (Action::Allow, "api.example.com"),
            (Action::Allow, "203.0.113.0/24:8080"),
        ]);
        let host: Vec<IpAddr> = ["192.0.2.1", "2001:db8::1", "10.1.1.1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let admit = |ip: &str, port| pol.admit_address(ip.parse().unwrap(), port, Some(0), &host);
        assert_eq!(
            admit("192.0.2.1", 443),
            Err(Denial::RefusedAddress {
                ip: "192.0.2.1".parse().unwrap(),
                class: AddressClass::Host,
                rule: Some(0)
            })
        );
        assert!(matches!(
            admit("::ffff:192.0.2.1", 443),
            Err(Denial::RefusedAddress {
                class: AddressClass::Host,
                ..
            })
        ));
        assert!(matches!(
            admit("2001:db8::1", 443),
            Err(Denial::RefusedAddress {
                class: AddressClass::Host,
                ..
            })
        ));
        // A host address of a refused class keeps that class.
        assert!(matches!(
            admit("10.1.1.1", 443),
            Err(Denial::RefusedAddress {
                class: AddressClass::Private,
                ..
            })
        ));
        assert_eq!(admit("192.0.2.2", 443), Ok(()));
        // A rule naming the address (or its network) opens it, on its port only.
        let host2: Vec<IpAddr> = vec!["203.0.113.9".parse().unwrap()];
        assert_eq!(
            pol.admit_address("203.0.113.9".parse().unwrap(), 8080, Some(1), &host2),
            Ok(())
        );
        assert!(pol
            .admit_address("203.0.113.9".parse().unwrap(), 443, Some(0), &host2)
            .is_err());
    }

    #[test]
    fn a_deny_rule_without_a_port_denies_every_port() {
        let pol = policy(&[
            (Action::Deny, "evil.example"),
            (Action::Deny, "10.9.0.0/16"),
            (Action::Deny, "198.51.100.9"),
            (Action::Deny, "*.bad.example:8443"),
            (Action::Allow, "*.example:8443"),
            (Action::Allow, "evil.example:22"),
            (Action::Allow, "10.9.1.1:5432"),
            (Action::Allow, "198.51.100.9:8080"),
            (Action::Allow, "*.bad.example"),
            (Action::Allow, "*.bad.example:8443"),
        ]);
        for port in [22, 80, 443, 8443, 65535] {
            assert_eq!(
                pol.decide(&name("evil.example"), port),
                Decision::Deny(Denial::DeniedByRule(0)),
                "{port}"
            );
        }
        assert_eq!(
            pol.decide(&Host::Ip("10.9.1.1".parse().unwrap()), 5432),
            Decision::Deny(Denial::DeniedByRule(1))
        );
        assert_eq!(
            pol.decide(&Host::Ip("198.51.100.9".parse().unwrap()), 8080),
            Decision::Deny(Denial::DeniedByRule(2))
        );
        assert_eq!(
            pol.admit_address("10.9.3.3".parse().unwrap(), 8443, Some(4), &[]),
            Err(Denial::DeniedByRule(1))
        );
        // A deny rule with a port denies that port only.
        assert_eq!(
            pol.decide(&name("a.bad.example"), 8443),
            Decision::Deny(Denial::DeniedByRule(3))
        );
        assert_eq!(pol.decide(&name("a.bad.example"), 443), Decision::Allow(8));
        assert_eq!(pol.decide(&name("good.example"), 8443), Decision::Allow(4));
        // Allow rules without a port still mean 80 and 443 only.
        assert_eq!(
            pol.decide(&name("a.bad.example"), 22),
            Decision::Deny(Denial::NotAllowed)
        );
    }

    #[test]
    fn refusals_of_local_addresses_name_the_rule_and_never_suggest_opening_them() {
        let pol = policy(&[(Action::Allow, "*.allowed.test")]);
        let cases = [
            Denial::RefusedAddress {
                ip: "169.254.169.254".parse().unwrap(),
                class: AddressClass::CloudMetadata,
                rule: Some(0),
            },
            Denial::RefusedAddress {
                ip: "127.0.0.1".parse().unwrap(),
                class: AddressClass::Loopback,
                rule: Some(0),
            },
            Denial::RefusedAddress {
                ip: "192.0.2.1".parse().unwrap(),
                class: AddressClass::Host,
                rule: Some(0),
            },
        ];
        for d in &cases {
            let text = pol.explain(d, "x.allowed.test", 80);
            assert!(!text.contains("--allow-domain 1"), "{text}");
            assert!(
                text.contains("--allow-domain *.allowed.test allows the name"),
                "{text}"
            );
            assert!(text.contains(LOCAL_ADDRESSES_DOC), "{text}");
            assert_eq!(pol.hint(d, "x.allowed.test", 80), None, "{d:?}");
        }
        assert_eq!(
            pol.explain(&cases[2], "x.allowed.test", 80),
            "x.allowed.test resolves to 192.0.2.1, one of this host's own addresses, refused \
             unless a rule names the address; --allow-domain *.allowed.test allows the name, \
             not the address (see \"Local, private and metadata addresses\" in Sandy's \
             docs/network.md)"
        );
        // Literals and names of this machine: no suggestion, in every mode.
        for (host, port) in [
            ("169.254.169.254", 80),
            ("127.0.0.1", 8080),
            ("[::1]", 443),
            ("[fd00:ec2::254]", 80),
            ("10.0.0.5", 80),
            ("localhost", 80),
            ("api.localhost", 443),
        ] {
            let Decision::Deny(d) = pol.decide(&parse_host(host).unwrap(), port) else {
                panic!("{host} allowed");
            };
            assert_eq!(pol.hint(&d, host, port), None, "{host}");
            let text = pol.explain(&d, host, port);
            assert!(!text.contains("--allow-domain"), "{text}");
            assert!(text.contains(LOCAL_ADDRESSES_DOC), "{text}");
            assert_eq!(pol.hint(&Denial::Blocked, host, port), None, "{host}");
        }
        // A public literal still gets its suggestion.
        let Decision::Deny(d) = pol.decide(&parse_host("198.51.100.7").unwrap(), 80) else {
            panic!()
        };
        assert_eq!(
            pol.hint(&d, "198.51.100.7", 80).as_deref(),
            Some("--allow-domain 198.51.100.7")
        );
    }
}
