//! Sandy's egress policy (design 3.6).
//!
//! A sandbox with a network policy has a private network namespace with only loopback;
//! it reaches the outside only through Sandy's proxy, which runs in the supervisor,
//! outside the sandbox, on a listener that exists only inside the sandbox's namespace.
//!
//! - [`host`]: host names and addresses normalised (case, trailing dot, IDNA, every IP
//!   notation), user information refused.
//! - [`addr`]: address classes refused unless a rule names them (loopback, private,
//!   link-local, CGNAT, unique-local, multicast, cloud metadata).
//! - [`rules`]: patterns, rules and decisions, made before any DNS lookup; resolved
//!   addresses checked again (rebinding).
//! - `proxy` (feature `proxy`): HTTP CONNECT, plain HTTP forwarding and SOCKS5, with
//!   immediate, explained refusals, a JSON-lines log and a summary.
//! - `relay` (feature `proxy`): the local-port relay of `--allow-local-port`.
//! - `local` (feature `proxy`): the host's own services, closed to the host's network.
//! - `dns` (feature `proxy`): the name-resolution relay of a sandbox on the host's
//!   network (its only UDP).
//!
//! # The pure part and the `proxy` feature
//!
//! `host`, `addr` and `rules` are pure (no I/O, no runtime; `serde`, `thiserror` and
//! `url` only): `sandy-policy` parses, explains and shows the rules with them, and the
//! proxy decides every connection with the same code. Everything that does I/O is behind
//! the `proxy` feature, which the policy crate never turns on, so the pure crate never
//! depends on tokio. `tests/pure.rs` keeps the pure modules free of the others and of the
//! runtime crates, and `sandy-policy`'s `tests/dependencies.rs` keeps both manifests so.
#![forbid(unsafe_code)]

pub mod addr;
#[cfg(feature = "proxy")]
pub mod dns;
pub mod host;
#[cfg(feature = "proxy")]
pub mod local;
#[cfg(feature = "proxy")]
pub mod proxy;
#[cfg(feature = "proxy")]
pub mod relay;
pub mod rules;

pub use addr::{classify, AddressClass};
pub use host::{parse_host, Host, NameError};
pub use rules::{
    Action, Decision, Denial, EgressPolicy, HostPattern, LeftOut, Mode, Pattern, PatternError,
    PortSpec, Rule, RuleOrigin, TlsRefusal,
};

/// The values `NO_PROXY` and `no_proxy` get inside: loopback stays direct (local-port
/// grants, servers the command starts itself).
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// The variables that point a sandboxed process at the proxy on `127.0.0.1:port`, upper
/// and lower case: `HTTP_PROXY`, `HTTPS_PROXY` (HTTP CONNECT), `ALL_PROXY` (SOCKS5 with
/// names resolved by the proxy), `NO_PROXY`.
pub fn proxy_environment(port: u16) -> Vec<(String, String)> {
    let http = format!("http://127.0.0.1:{port}");
    let socks = format!("socks5h://127.0.0.1:{port}");
    let mut vars = Vec::new();
    for (name, value) in [
        ("HTTP_PROXY", http.as_str()),
        ("HTTPS_PROXY", http.as_str()),
        ("ALL_PROXY", socks.as_str()),
        ("NO_PROXY", NO_PROXY),
    ] {
        vars.push((name.to_owned(), value.to_owned()));
        vars.push((name.to_ascii_lowercase(), value.to_owned()));
    }
    vars
}
