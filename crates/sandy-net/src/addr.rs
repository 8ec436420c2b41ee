//! Address classes a destination may fall in. Anything but [`AddressClass::Public`] is
//! refused unless a rule names the address (or a network containing it) explicitly, also
//! when an allowed name resolves to it (DNS rebinding). So are the addresses of the host's
//! own interfaces ([`AddressClass::Host`]), which the proxy reads from the host.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AddressClass {
    /// Reachable on the internet (documentation ranges included: they route nowhere).
    Public,
    /// 0.0.0.0/8, `::`, and IPv4-compatible IPv6 (`::a.b.c.d`).
    Unspecified,
    /// 127.0.0.0/8, `::1`.
    Loopback,
    /// 10/8, 172.16/12, 192.168/16, 192.0.0.0/24, and IPv6 site-local fec0::/10.
    Private,
    /// 100.64.0.0/10, carrier-grade NAT.
    SharedCgnat,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// fc00::/7.
    UniqueLocal,
    /// 224/4, ff00::/8.
    Multicast,
    /// 240/4 and 255.255.255.255.
    Reserved,
    /// Cloud instance metadata: 169.254.169.254, fd00:ec2::254.
    CloudMetadata,
    /// An address of one of the host's own interfaces. [`classify`] never answers it (it
    /// knows only the address); the proxy does, from the host's interface list.
    Host,
}

impl AddressClass {
    pub fn describe(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private network",
            AddressClass::SharedCgnat => "carrier-grade NAT",
            AddressClass::LinkLocal => "link-local",
            AddressClass::UniqueLocal => "unique-local",
            AddressClass::Multicast => "multicast",
            AddressClass::Reserved => "reserved",
            AddressClass::CloudMetadata => "cloud metadata",
            AddressClass::Host => "this host's own",
        }
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// The address a connection really reaches: an IPv4 address written in IPv6 form
/// (mapped `::ffff:a.b.c.d`) is that IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

pub fn classify(ip: IpAddr) -> AddressClass {
    match canonical(ip) {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(a: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    u32::from(a) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn classify_v4(a: Ipv4Addr) -> AddressClass {
    use AddressClass::*;
    const TABLE: &[([u8; 4], u32, AddressClass)] = &[
        ([169, 254, 169, 254], 32, CloudMetadata),
        ([0, 0, 0, 0], 8, Unspecified),
        ([127, 0, 0, 0], 8, Loopback),
        ([10, 0, 0, 0], 8, Private),
        ([172, 16, 0, 0], 12, Private),
        ([192, 168, 0, 0], 16, Private),
        ([192, 0, 0, 0], 24, Private),
        ([100, 64, 0, 0], 10, SharedCgnat),
        ([169, 254, 0, 0], 16, LinkLocal),
        ([224, 0, 0, 0], 4, Multicast),
        ([240, 0, 0, 0], 4, Reserved),
    ];
    TABLE
        .iter()
        .find(|(net, prefix, _)| in_v4(a, *net, *prefix))
        .map_or(Public, |(_, _, class)| *class)
}

fn classify_v6(a: Ipv6Addr) -> AddressClass {
    use AddressClass::*;
    let s = a.segments();
    if a == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        return CloudMetadata;
    }
    if a.is_unspecified() {
        return Unspecified;
    }
    if a.is_loopback() {
        return Loopback;
    }
    // Addresses that carry an IPv4 address the network may route to: NAT64 (64:ff9b::/96)
    // and 6to4 (2002::/16) reach the embedded address.
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return classify_v4(embedded(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return classify_v4(embedded(s[1], s[2]));
    }
    // IPv4-compatible (::a.b.c.d, deprecated) and the rest of ::/96.
    if s[0..6] == [0, 0, 0, 0, 0, 0] {
        return Unspecified;
    }
    match s[0] {
        x if x & 0xffc0 == 0xfe80 => LinkLocal,
        x if x & 0xffc0 == 0xfec0 => Private,
        x if x & 0xfe00 == 0xfc00 => UniqueLocal,
        x if x & 0xff00 == 0xff00 => Multicast,
        _ => Public,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AddressClass::*;

    fn c(s: &str) -> AddressClass {
        classify(s.parse().unwrap())
    }

    #[test]
    fn every_refused_class_is_recognised_in_both_families() {
        for (s, want) in [
            ("169.254.169.254", CloudMetadata),
            ("fd00:ec2::254", CloudMetadata),
            ("::ffff:169.254.169.254", CloudMetadata),
            ("0.0.0.0", Unspecified),
            ("::", Unspecified),
            ("::127.0.0.1", Unspecified),
            ("127.0.0.1", Loopback),
            ("127.255.1.2", Loopback),
            ("::1", Loopback),
            ("::ffff:127.0.0.1", Loopback),
            ("10.0.0.5", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("fec0::1", Private),
            ("100.64.0.1", SharedCgnat),
            ("100.127.255.255", SharedCgnat),
            ("169.254.1.1", LinkLocal),
            ("fe80::1", LinkLocal),
            ("fd12::1", UniqueLocal),
            ("fc00::1", UniqueLocal),
            ("224.0.0.1", Multicast),
            ("ff02::1", Multicast),
            ("255.255.255.255", Reserved),
            ("64:ff9b::a9fe:a9fe", CloudMetadata),
            ("64:ff9b::7f00:1", Loopback),
            ("2002:7f00:1::", Loopback),
            ("2002:a00:5::", Private),
        ] {
            assert_eq!(c(s), want, "{s}");
        }
    }

    #[test]
    fn neighbours_of_refused_ranges_are_public() {
        for s in [
            "1.2.3.4",
            "198.51.100.7",
            "172.15.255.255",
            "172.32.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "11.0.0.0",
            "169.253.255.255",
            "2606:4700::1111",
            "::ffff:1.2.3.4",
            "64:ff9b::102:304",
        ] {
            assert_eq!(c(s), Public, "{s}");
        }
    }
}
