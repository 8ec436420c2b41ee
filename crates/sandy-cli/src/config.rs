//! `sandy config init|check`: the text of the library's starter configuration and of its
//! check ([`sandy::policyfiles::init`], [`sandy::policyfiles::check`]).

use sandy::policyfiles::Checked;
use sandy_policy::text::Shown;

use crate::error::SandyError;

fn print(line: &str) -> Result<(), SandyError> {
    sandy::say::print_line(line).map_err(|source| SandyError::Io {
        step: "cannot write to standard output",
        source,
    })
}

/// `sandy config init`.
pub fn init() -> Result<u8, SandyError> {
    let path = sandy::policyfiles::init()?;
    print(&format!(
        "wrote {}; edit it, then `sandy config check`",
        Shown(&path)
    ))?;
    Ok(0)
}

/// `sandy config check`: one line per file checked, and one for the resolution here.
pub fn check() -> Result<u8, SandyError> {
    for checked in sandy::policyfiles::check()? {
        print(&line(&checked))?;
    }
    Ok(0)
}

fn line(checked: &Checked) -> String {
    match checked {
        Checked::Config(path) => format!("ok: {}", Shown(path)),
        Checked::NoConfig(path) => format!(
            "no configuration at {} (`sandy config init` writes one)",
            Shown(path)
        ),
        Checked::Profile { path, shadowed } => format!(
            "ok: {}{}",
            Shown(path),
            if *shadowed {
                " (a built-in profile has this name: --profile uses the built-in one)"
            } else {
                ""
            }
        ),
        Checked::Resolves(dir) => format!("ok: a run in {} resolves with it", Shown(dir)),
        Checked::NotResolvedHere(reason) => format!(
            "not resolved here ({reason}): run `sandy config check` in a project directory \
             to check the grants too"
        ),
    }
}
