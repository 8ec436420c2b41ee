//! Host names and addresses as a client names them, normalised the way the rules compare
//! them: lower case, no trailing dot, IDNA (UTS #46) to ASCII, IP literals in every form a
//! resolver would accept (`0x7f.1` and `2130706433` are 127.0.0.1) recognised as
//! addresses, never looked up as names. User information (`user@host`) is refused.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// Longest host name DNS can carry.
const MAX_NAME: usize = 253;
/// Longest DNS label.
const MAX_LABEL: usize = 63;

/// A normalised destination host.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Host {
    /// A DNS name: ASCII, lower case, no trailing dot, labels of letters, digits, `-`, `_`.
    Name(String),
    /// An IP literal (IPv4-mapped IPv6 addresses are kept as written; see
    /// [`crate::addr::canonical`]).
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
        }
    }
}

/// Why a host could not be normalised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("the host is empty")]
    Empty,
    #[error("user information (user@host) is not accepted in a host")]
    UserInfo,
    #[error("'{0}' is not a valid host name or address")]
    Invalid(String),
    #[error("'{0}' is longer than a host name can be")]
    TooLong(String),
}

/// Normalises a host as it appears in a request, a SOCKS request or a rule: `[v6]`
/// brackets are optional for IPv6 literals; no port.
pub fn parse_host(input: &str) -> Result<Host, NameError> {
    if input.is_empty() {
        return Err(NameError::Empty);
    }
    if input.contains('@') {
        return Err(NameError::UserInfo);
    }
    let invalid = || NameError::Invalid(input.chars().take(80).collect());
    if let Some(inner) = input.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or_else(invalid)?;
        return inner
            .parse::<Ipv6Addr>()
            .map(|a| Host::Ip(IpAddr::V6(a)))
            .map_err(|_| invalid());
    }
    if let Ok(a) = input.parse::<Ipv6Addr>() {
        return Ok(Host::Ip(IpAddr::V6(a)));
    }
    // One trailing dot names the same host (the DNS root); more is not a name.
    let trimmed = input.strip_suffix('.').unwrap_or(input);
    if trimmed.is_empty() || trimmed.ends_with('.') {
        return Err(invalid());
    }
    // The WHATWG host parser: percent-decoding, IDNA mapping (case folding, width
    // folding, punycode) and every IPv4 notation a resolver accepts.
    match url::Host::parse(trimmed).map_err(|_| invalid())? {
        url::Host::Ipv4(a) => Ok(Host::Ip(IpAddr::V4(a))),
        url::Host::Ipv6(a) => Ok(Host::Ip(IpAddr::V6(a))),
        url::Host::Domain(d) => {
            let d = d.strip_suffix('.').unwrap_or(&d).to_owned();
            if d.len() > MAX_NAME {
                return Err(NameError::TooLong(input.chars().take(80).collect()));
            }
            let label_ok = |l: &str| {
                !l.is_empty()
                    && l.len() <= MAX_LABEL
                    && l.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
                    })
            };
            if d.split('.').all(label_ok) {
                Ok(Host::Name(d))
            } else {
                Err(invalid())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn name(s: &str) -> Host {
        Host::Name(s.to_owned())
    }

    #[test]
    fn names_are_normalised_before_any_comparison() {
        assert_eq!(parse_host("API.Example.COM"), Ok(name("api.example.com")));
        assert_eq!(parse_host("api.example.com."), Ok(name("api.example.com")));
        assert_eq!(
            parse_host("BÜCHER.example"),
            Ok(name("xn--bcher-kva.example"))
        );
        assert_eq!(
            parse_host("xn--bcher-kva.example"),
            Ok(name("xn--bcher-kva.example"))
        );
        // Full-width letters fold to ASCII.
        assert_eq!(parse_host("ｅｘａｍｐｌｅ.com"), Ok(name("example.com")));
        assert_eq!(parse_host("ex%61mple.com"), Ok(name("example.com")));
    }

    #[test]
    fn every_ipv4_notation_is_an_address_not_a_name() {
        let lo = Ok(Host::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        for s in [
            "127.0.0.1",
            "2130706433",
            "0x7f.1",
            "0177.0.0.1",
            "127.1",
            "127.0.0.1.",
        ] {
            assert_eq!(parse_host(s), lo, "{s}");
        }
        assert_eq!(
            parse_host("[::ffff:169.254.169.254]"),
            Ok(Host::Ip("::ffff:169.254.169.254".parse().unwrap()))
        );
        assert_eq!(
            parse_host("fd00:ec2::254"),
            Ok(Host::Ip("fd00:ec2::254".parse().unwrap()))
        );
    }

    #[test]
    fn malformed_hosts_and_userinfo_are_refused() {
        for s in [
            "",
            "user@example.com",
            "a b.com",
            "example..com",
            "example.com..",
            ".",
            "[::1",
            "exa/mple.com",
            "exa:mple.com",
            "*.example.com",
            "1.2.3.4.5",
        ] {
            assert!(parse_host(s).is_err(), "{s:?} accepted");
        }
        assert!(parse_host(&"a".repeat(64)).is_err());
        assert!(parse_host(&format!("{}.com", ["a"; 130].join("."))).is_err());
    }
}
