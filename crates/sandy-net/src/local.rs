//! The host's own services (design 3.6): which destinations, seen from the host's
//! network, are the host itself or what only the host reaches.
//!
//! With the host's network (no `--block-net`, no allowlist) the sandbox reaches the
//! internet as the user does, but not:
//! - the loopback addresses (127.0.0.0/8, `::1`), and `0.0.0.0` and `::`, which Linux
//!   connects to the local host;
//! - every address of the host's own interfaces (the LAN address too: a service bound to
//!   `0.0.0.0` answers there);
//! - the networks of the host's local bridges (`docker0`, `virbr0`, a Podman or Compose
//!   network): the containers and virtual machines behind them are the host's services;
//! - the cloud instance metadata service (169.254.169.254, `fd00:ec2::254`), whose
//!   credentials are the machine's, not the user's.
//!
//! IPv4-mapped IPv6 (`::ffff:127.0.0.1`) is the IPv4 address it carries; NAT64 and 6to4
//! forms of a closed IPv4 address are closed too. The interface list is read again when
//! older than [`LOCAL_TTL`], so an interface that appears during a run (a new container
//! network) is closed within that time.

use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::addr::{canonical, classify, AddressClass};

/// How long the host's interface list is trusted before it is read again.
pub const LOCAL_TTL: Duration = Duration::from_secs(1);

/// Why a destination is one of the host's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Local {
    /// 127.0.0.0/8 and `::1`.
    Loopback,
    /// `0.0.0.0/8` and `::` (and IPv4-compatible IPv6), which reach the local host.
    Unspecified,
    /// An address of one of the host's interfaces.
    HostAddress,
    /// An address in the network of one of the host's bridges.
    Bridge,
    /// The cloud instance metadata service.
    CloudMetadata,
}

impl Local {
    /// Every kind, in the order the dry run lists them.
    pub const ALL: [Local; 5] = [
        Local::Loopback,
        Local::Unspecified,
        Local::HostAddress,
        Local::Bridge,
        Local::CloudMetadata,
    ];

    pub fn describe(self) -> &'static str {
        match self {
            Local::Loopback => "the host's loopback",
            Local::Unspecified => "the unspecified address (the local host)",
            Local::HostAddress => "an address of the host's own interfaces",
            Local::Bridge => "a network behind one of the host's bridges (containers, VMs)",
            Local::CloudMetadata => "the cloud instance metadata service",
        }
    }
}

/// One reading of the host's interfaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interfaces {
    /// Every address of every interface, canonical, sorted.
    pub addresses: Vec<IpAddr>,
    /// The networks of bridge interfaces: an address of the bridge and its prefix length.
    pub bridges: Vec<(IpAddr, u8)>,
}

impl Interfaces {
    /// Why `ip` is the host's own, or `None` for a destination elsewhere.
    pub fn local(&self, ip: IpAddr) -> Option<Local> {
        let ip = canonical(ip);
        match classify(ip) {
            AddressClass::Loopback => return Some(Local::Loopback),
            AddressClass::Unspecified => return Some(Local::Unspecified),
            AddressClass::CloudMetadata => return Some(Local::CloudMetadata),
            _ => {}
        }
        if self.addresses.binary_search(&ip).is_ok() {
            return Some(Local::HostAddress);
        }
        if self
            .bridges
            .iter()
            .any(|&(net, prefix)| in_network(ip, net, prefix))
        {
            return Some(Local::Bridge);
        }
        None
    }
}

/// Whether `ip` lies in `net/prefix` (same family only).
pub fn in_network(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (canonical(ip), canonical(net)) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// The host's interfaces, read when first asked and again when older than [`LOCAL_TTL`].
pub struct HostInterfaces {
    read: Mutex<(Instant, Arc<Interfaces>)>,
}

impl HostInterfaces {
    /// Reads them now: from the network namespace of the calling thread (the host's).
    pub fn new() -> std::io::Result<HostInterfaces> {
        Ok(HostInterfaces {
            read: Mutex::new((Instant::now(), Arc::new(read_interfaces()?))),
        })
    }

    /// The interfaces, read again when older than [`LOCAL_TTL`]; if reading fails, the
    /// last ones read.
    pub fn current(&self) -> Arc<Interfaces> {
        let mut read = lock(&self.read);
        if read.0.elapsed() > LOCAL_TTL {
            if let Ok(fresh) = read_interfaces() {
                *read = (Instant::now(), Arc::new(fresh));
            }
        }
        Arc::clone(&read.1)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every address of every interface of this network namespace (`getifaddrs`, netlink),
/// and the networks of those that are bridges (`/sys/class/net/NAME/bridge`).
fn read_interfaces() -> std::io::Result<Interfaces> {
    let mut out = Interfaces::default();
    let mut bridge_names: Vec<(String, bool)> = Vec::new();
    for interface in nix::ifaddrs::getifaddrs().map_err(std::io::Error::from)? {
        let ip = |a: &nix::sys::socket::SockaddrStorage| {
            a.as_sockaddr_in()
                .map(|s| IpAddr::V4(s.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())))
        };
        let Some(address) = interface.address.as_ref().and_then(ip) else {
            continue;
        };
        let address = canonical(address);
        out.addresses.push(address);
        let is_bridge = match bridge_names
            .iter()
            .find(|(n, _)| *n == interface.interface_name)
        {
            Some((_, b)) => *b,
            None => {
                let b = Path::new("/sys/class/net")
                    .join(&interface.interface_name)
                    .join("bridge")
                    .is_dir();
                bridge_names.push((interface.interface_name.clone(), b));
                b
            }
        };
        if is_bridge {
            let prefix = interface
                .netmask
                .as_ref()
                .and_then(ip)
                .map(|m| match m {
                    IpAddr::V4(m) => u32::from(m).leading_ones() as u8,
                    IpAddr::V6(m) => u128::from(m).leading_ones() as u8,
                })
                .unwrap_or(match address {
                    IpAddr::V4(_) => 32,
                    IpAddr::V6(_) => 128,
                });
            out.bridges.push((address, prefix));
        }
    }
    out.addresses.sort();
    out.addresses.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_unspecified_host_bridge_and_metadata_are_local_in_every_notation() {
        let interfaces = Interfaces {
            addresses: vec![ip("192.0.2.2"), ip("fd00::2")],
            bridges: vec![(ip("172.17.0.1"), 16)],
        };
        for (dst, want) in [
            ("127.0.0.1", Some(Local::Loopback)),
            ("127.1.2.3", Some(Local::Loopback)),
            ("::1", Some(Local::Loopback)),
            ("::ffff:127.0.0.1", Some(Local::Loopback)),
            ("0.0.0.0", Some(Local::Unspecified)),
            ("::", Some(Local::Unspecified)),
            ("::ffff:0.0.0.0", Some(Local::Unspecified)),
            ("192.0.2.2", Some(Local::HostAddress)),
            ("::ffff:192.0.2.2", Some(Local::HostAddress)),
            ("fd00::2", Some(Local::HostAddress)),
            ("172.17.0.1", Some(Local::Bridge)),
            ("172.17.5.9", Some(Local::Bridge)),
            ("169.254.169.254", Some(Local::CloudMetadata)),
            ("192.0.2.3", None),
            ("172.18.0.1", None),
            ("93.184.216.34", None),
            ("2606:4700::1", None),
        ] {
            assert_eq!(interfaces.local(ip(dst)), want, "{dst}");
        }
    }

    #[test]
    fn networks_compare_by_prefix_and_family() {
        assert!(in_network(ip("10.1.2.3"), ip("10.1.0.1"), 16));
        assert!(!in_network(ip("10.2.0.1"), ip("10.1.0.1"), 16));
        assert!(in_network(ip("10.2.0.1"), ip("10.1.0.1"), 0));
        assert!(in_network(ip("fd00::1:5"), ip("fd00::1"), 64));
        assert!(!in_network(ip("10.1.0.1"), ip("fd00::1"), 0));
    }

    #[test]
    fn this_hosts_interfaces_include_loopback() {
        let read = read_interfaces().unwrap();
        assert!(read.addresses.contains(&ip("127.0.0.1")), "{read:?}");
    }
}
