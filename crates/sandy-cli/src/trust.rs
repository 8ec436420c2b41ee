//! `sandy trust [--yes] [--revoke]`: the text and the question around the library's
//! review and approval of a project's `sandy.toml` ([`sandy::trust`]).

use std::io::{BufRead, IsTerminal, Read};

use sandy_policy::text::Shown;

use crate::error::SandyError;

/// The most of an answer to the question that is read.
const MAX_ANSWER_BYTES: u64 = 256;

fn print(line: &str) -> Result<(), SandyError> {
    sandy::say::print_line(line).map_err(|source| SandyError::Io {
        step: "cannot write to standard output",
        source,
    })
}

/// Shows what the project's `sandy.toml` adds, asks (unless `yes`), and records it; or
/// with `revoke` removes the record. Exit 1 when the user declines.
pub fn command(yes: bool, revoke: bool) -> Result<u8, SandyError> {
    if revoke {
        let revoked = sandy::trust::revoke()?;
        print(&if revoked.removed {
            format!(
                "revoked: {} is no longer trusted; launches here ignore it",
                Shown(&revoked.file)
            )
        } else {
            format!(
                "nothing to revoke: no trusted {} for {}",
                sandy_policy::files::PROJECT_FILE_NAME,
                Shown(&revoked.project)
            )
        })?;
        return Ok(0);
    }
    let review = sandy::trust::review()?;
    let mut lines = vec![format!(
        "{} adds, to every run in {}:",
        Shown(&review.file),
        Shown(&review.project)
    )];
    for (access, path, reason) in &review.grants {
        let how = match access {
            sandy_policy::Access::ReadWrite => "read and write",
            sandy_policy::Access::Execute => "run the programs in",
            _ => "read",
        };
        lines.push(format!("  {how} {} ({reason})", Shown(path)));
    }
    for pattern in &review.allow {
        lines.push(format!(
            "  allow connections to {pattern} (when the run's network is an allowlist: \
             --net agent, --allow-domain)"
        ));
    }
    for port in &review.local_ports {
        lines.push(format!("  open the host's local port {port}"));
    }
    if lines.len() == 1 {
        lines.push("  nothing".to_owned());
    }
    lines.push("As dry-run rules (origin project_file):".to_owned());
    let rendered = serde_json::to_string_pretty(&review.rules).map_err(|e| SandyError::Io {
        step: "cannot render the dry-run rules",
        source: e.into(),
    })?;
    for line in lines {
        print(&line)?;
    }
    sandy::say::print_document(&rendered).map_err(|source| SandyError::Io {
        step: "cannot write to standard output",
        source,
    })?;
    if !yes {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Err(SandyError::Usage(
                "not trusted: standard input is not a terminal to confirm on; review the \
                 above and run `sandy trust --yes`",
            ));
        }
        print(&format!(
            "Trust this content (sha256 {})? [y/N]",
            review.sha256
        ))?;
        let mut answer = String::new();
        stdin
            .lock()
            .take(MAX_ANSWER_BYTES)
            .read_line(&mut answer)
            .map_err(|source| SandyError::Io {
                step: "cannot read the answer",
                source,
            })?;
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "Yes") {
            print("not trusted")?;
            return Ok(1);
        }
    }
    let record = sandy::trust::approve(&review)?;
    print(&format!(
        "trusted: runs in {} apply it while its content stays the same (record: {})",
        Shown(&review.project),
        Shown(&record)
    ))?;
    Ok(0)
}
