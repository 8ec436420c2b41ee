//! The network policy of a run, as the policy holds it (resolved by `rules::egress`).

use serde::Deserialize;

use sandy_net::EgressPolicy;

/// What an agent's endpoint carries (`kind` in a profile's `[network] endpoints`).
/// `--net agent` allows what the agent needs to work for the user (`model`, `login`,
/// `service`) and leaves out what only reports on the user or changes the agent
/// (`telemetry`, `update`, `plugins`, `notices`): those stay refused like any other host,
/// and a refusal names them, so one `--allow-domain HOST` brings one back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndpointKind {
    /// The model API.
    Model,
    /// Signing in and refreshing the sign-in.
    Login,
    /// Something else the agent needs to do its work (a model catalogue).
    #[default]
    Service,
    /// Usage statistics, metrics, event logging, error reports.
    Telemetry,
    /// Checking for or downloading a newer version of the agent.
    Update,
    /// Plugin, skill and extension marketplaces synced in the background.
    Plugins,
    /// Release notes, announcements and tips.
    Notices,
}

impl EndpointKind {
    /// Whether `--net agent` allows endpoints of this kind.
    pub fn allowed_by_agent(self) -> bool {
        matches!(self, Self::Model | Self::Login | Self::Service)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Model => "model API",
            Self::Login => "login",
            Self::Service => "service",
            Self::Telemetry => "telemetry",
            Self::Update => "update check",
            Self::Plugins => "plugins",
            Self::Notices => "notices",
        }
    }
}

/// The resolved network policy: what the proxy enforces, and where it listens inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    pub policy: EgressPolicy,
    /// The proxy's port on `127.0.0.1` inside the sandbox.
    pub proxy_port: u16,
}
