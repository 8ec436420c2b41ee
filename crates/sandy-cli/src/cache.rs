//! `sandy cache [--clear]`: the text of the library's listing of Sandy's cache layers
//! ([`sandy::cache::layers`]).

use std::path::Path;

use sandy::cache::{Listing, Outcome};
use sandy_policy::text::Shown;

use crate::error::SandyError;

/// Lists the layers per project, or removes them with `clear`, one line each, then a
/// line with the total.
pub fn command(clear: bool) -> Result<u8, SandyError> {
    let listing = sandy::cache::layers(clear)?;
    for line in lines(&listing, clear) {
        sandy::say::print_line(&line).map_err(|source| SandyError::Io {
            step: "cannot write the cache listing",
            source,
        })?;
    }
    Ok(0)
}

/// The listing's lines.
fn lines(listing: &Listing, clear: bool) -> Vec<String> {
    let Some(root) = &listing.root else {
        return vec!["no home directory: Sandy keeps no cache layers".to_owned()];
    };
    if listing.groups.is_empty() {
        return vec![format!("no cache layers in {}", Shown(root))];
    }
    let mut lines = Vec::new();
    for group in &listing.groups {
        lines.push(match &group.project {
            None => format!(
                "shared by every project (from an earlier Sandy, no longer used): {}",
                Shown(Path::new(&group.name))
            ),
            Some(project) => format!(
                "project {}  ({})",
                Shown(Path::new(project)),
                Shown(Path::new(&group.name))
            ),
        });
        for layer in &group.layers {
            let shown = Shown(Path::new(&layer.name));
            let origin = Shown(Path::new(&layer.origin));
            let size = human(layer.size);
            lines.push(match layer.outcome {
                Outcome::Listed => format!("  {shown}  {size}  (over {origin})"),
                Outcome::Removed => format!("  removed {shown}  {size}  (over {origin})"),
                Outcome::InUse => {
                    format!("  kept {shown}  {size}  (over {origin}): a running sandbox uses it")
                }
            });
        }
    }
    lines.push(if clear {
        let kept = if listing.in_use > 0 {
            format!(
                "; {} in use kept (run it again once they end)",
                listing.in_use
            )
        } else {
            String::new()
        };
        format!("cleared {} in {}{kept}", human(listing.total), Shown(root))
    } else {
        format!(
            "{} in {} (sandy cache --clear removes them)",
            human(listing.total),
            Shown(root)
        )
    });
    lines
}

/// A size as people read it: bytes, then KiB, MiB, GiB, TiB with one decimal.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_read_in_binary_units() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(5 * 1024 * 1024), "5.0 MiB");
    }

    #[test]
    fn a_listing_names_each_project_layer_and_the_total() {
        let listing = Listing {
            root: Some("/home/u/.cache/sandy/overlays".into()),
            groups: vec![sandy::cache::Group {
                project: Some("/home/u/p".into()),
                name: "ab12".into(),
                layers: vec![sandy::cache::Layer {
                    name: "npm".into(),
                    size: 2048,
                    origin: "/home/u/.npm".into(),
                    outcome: Outcome::InUse,
                }],
            }],
            total: 0,
            in_use: 1,
        };
        let lines = lines(&listing, true);
        assert_eq!(lines[0], "project /home/u/p  (ab12)");
        assert!(lines[1].contains("kept npm  2.0 KiB"), "{lines:?}");
        assert!(lines[2].contains("1 in use kept"), "{lines:?}");
    }
}
