use std::path::{Path, PathBuf};

/// Paths below `$HOME` that hold credentials or keys. No grant may expose them: until the
/// mount layer can mask them inside a broader grant, a grant covering one is refused.
pub const SENSITIVE_HOME_PATHS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".config/git/credentials",
    ".config/op",
    ".config/rclone",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".local/share/keyrings",
    ".local/share/password-store",
    ".password-store",
    ".mozilla",
    ".pki",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    // npm's and twine's configuration, and cargo's `config.toml`, are seen inside as a
    // filtered view without their credentials (resolve/views.rs); the masks only apply
    // where no view replaces them.
    ".npmrc",
    ".pypirc",
    ".gem/credentials",
    ".composer/auth.json",
    ".config/composer/auth.json",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
];

/// The sensitive set for a given home directory, as absolute paths.
pub fn sensitive_paths(home: &Path) -> Vec<PathBuf> {
    SENSITIVE_HOME_PATHS
        .iter()
        .map(|rel| home.join(rel))
        .collect()
}
