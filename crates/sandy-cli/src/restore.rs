//! `sandy restore [RUN]`: the text of the library's list of kept pre-run copies
//! ([`sandy::verify::saved_runs`]) and of putting one run's paths back
//! ([`sandy::verify::restore`]).

use std::path::Path;

use sandy::verify::Restored;
use sandy_policy::text::{Shown, Tilde};

use crate::error::SandyError;

/// Without a run, lists the runs whose pre-run copies are kept; with one, puts its paths
/// back, one line each (a failure on standard error). Exit 1 when a path was not put
/// back.
pub fn command(run: Option<&str>) -> Result<u8, SandyError> {
    let Some(run) = run else {
        let runs = sandy::verify::saved_runs()?;
        let mut lines = Vec::new();
        for saved in &runs {
            lines.push(format!("{}:", Shown(Path::new(&saved.id))));
            for (path, undo) in &saved.paths {
                lines.push(format!("  {}: {undo}", Tilde(path)));
            }
        }
        lines.push(if runs.is_empty() {
            "no saved pre-run copies".to_owned()
        } else {
            "put a run's paths back with: sandy restore RUN".to_owned()
        });
        for line in lines {
            let _ = sandy::say::print_line(&line);
        }
        return Ok(0);
    };
    sandy::verify::restore(run, &mut |restored| match restored {
        Restored::Put { path, at, what } => {
            let _ = sandy::say::print_line(&format!(
                "restored {} ({what})",
                sandy::verify::shown_at(&path, &at)
            ));
        }
        Restored::Failed { path, error } => say!("cannot restore {}: {error}", Tilde(&path)),
        Restored::Damaged => say!(
            "a saved entry of run {} is damaged; skipped",
            Shown(Path::new(run))
        ),
        Restored::NotRemoved => say!(
            "the copies of run {} could not be removed; it stays listed",
            Shown(Path::new(run))
        ),
    })
}
