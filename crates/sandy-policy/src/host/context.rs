use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use crate::host::gitfacts::GitFacts;

/// Everything resolution needs to know about the host, gathered once by the supervisor.
///
/// Resolution reads the environment only through this value, so tests can describe any
/// host they like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostContext {
    /// The canonical current directory: the project.
    pub cwd: PathBuf,
    /// The caller's canonical home directory, when `HOME` names an existing directory.
    pub home: Option<PathBuf>,
    /// The caller's environment, in order, byte for byte.
    pub env: Vec<(OsString, OsString)>,
    /// Terminal devices the target inherits on its standard descriptors (`/dev/pts/N`).
    pub terminals: Vec<PathBuf>,
    /// The supervisor's process id; the bootstrap checks its parent against it.
    pub supervisor_pid: u32,
    /// The caller's real user id.
    pub uid: u32,
    /// What the caller's own `git` says about the repositories the run can write.
    pub git: GitFacts,
    /// The name servers the host's `/etc/resolv.conf` names, in order (the sandbox reads
    /// the same file): with the host's network, the sandbox reaches them for DNS only.
    pub resolvers: Vec<std::net::IpAddr>,
}

/// The most name servers the C library uses (`MAXNS`).
pub const MAX_RESOLVERS: usize = 3;

/// The name servers of a `resolv.conf`: its `nameserver` lines that hold an IP address
/// (an IPv6 address may carry a zone, `%eth0`, which is dropped), at most
/// [`MAX_RESOLVERS`], each once. None named: the C library's default, the local host.
pub fn resolvers_of(text: &str) -> Vec<std::net::IpAddr> {
    let mut out: Vec<std::net::IpAddr> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("nameserver") {
            continue;
        }
        let Some(address) = words.next() else {
            continue;
        };
        let address = address.split('%').next().unwrap_or(address);
        if let Ok(ip) = address.parse::<std::net::IpAddr>() {
            if !out.contains(&ip) && out.len() < MAX_RESOLVERS {
                out.push(ip);
            }
        }
    }
    if out.is_empty() {
        out.push(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    }
    out
}

impl HostContext {
    /// The value of an environment variable, if set.
    pub fn var(&self, name: &str) -> Option<&OsStr> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    }
}

#[cfg(test)]
mod resolver_tests {
    use super::*;

    #[test]
    fn name_servers_are_read_as_the_c_library_reads_them() {
        let text =
            "# comment\nsearch example.com\nnameserver 127.0.0.53\nnameserver fe80::1%eth0\n\
                    nameserver 127.0.0.53\nnameserver not-an-address\n  nameserver 10.0.0.2\n\
                    nameserver 10.0.0.3\noptions edns0\n";
        let want: Vec<std::net::IpAddr> = ["127.0.0.53", "fe80::1", "10.0.0.2"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(resolvers_of(text), want);
        assert_eq!(
            resolvers_of("search x\n"),
            vec!["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]
        );
    }
}
