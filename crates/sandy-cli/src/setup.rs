//! `sandy setup`: installs Sandy's AppArmor profile, which lets the sandy binary create
//! user namespaces where AppArmor restricts them (Ubuntu 23.10 and later), for this
//! binary's real path. `--print` only prints the profile.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use sandy_linux::reach::{apparmor_profile, apparmor_profile_name, shell_word};

use crate::args::SetupArgs;
use crate::error::{SandyError, EXIT_NEEDS_ROOT};

/// Where AppArmor profiles live.
const PROFILE_DIR: &str = "/etc/apparmor.d";
/// The AppArmor ABI whose `userns` rule the profile uses.
const ABI: &str = "abi/4.0";
/// Where `apparmor_parser` may be.
const PARSERS: [&str; 2] = ["/usr/sbin/apparmor_parser", "/sbin/apparmor_parser"];

/// `sandy setup [--print] [--binary PATH]`.
pub fn setup(args: SetupArgs) -> Result<u8, SandyError> {
    let exe = match args.binary {
        Some(path) => path,
        None => this_binary()?,
    };
    let profile = apparmor_profile(&exe).map_err(|e| SandyError::Setup(e.to_string()))?;
    if args.print {
        sandy::say::print_document(profile.trim_end()).map_err(|source| SandyError::Io {
            step: "cannot write the profile",
            source,
        })?;
        return Ok(0);
    }
    let name = apparmor_profile_name(&exe);
    let file = Path::new(PROFILE_DIR).join(&name);
    if !nix::unistd::geteuid().is_root() {
        let me = shell_word(&exe);
        let file = shell_word(&file);
        say!(
            "setup installs an AppArmor profile in {PROFILE_DIR} and needs root; run: sudo \
             {me} setup"
        );
        say!(
            "or by hand: {me} setup --print | sudo tee {file} >/dev/null && sudo \
             apparmor_parser -r {file}"
        );
        return Ok(EXIT_NEEDS_ROOT);
    }
    if !Path::new(PROFILE_DIR).is_dir() {
        sandy::say::print_line(&format!(
            "AppArmor is not installed here ({PROFILE_DIR} does not exist): nothing restricts \
             user namespaces through it, and nothing was changed"
        ))
        .map_err(say_failed)?;
        return Ok(0);
    }
    if !Path::new(PROFILE_DIR).join(ABI).exists() {
        sandy::say::print_line(&format!(
            "this AppArmor predates user-namespace rules ({PROFILE_DIR}/{ABI} does not \
             exist): it does not restrict user namespaces and cannot load the profile; \
             nothing was changed"
        ))
        .map_err(say_failed)?;
        return Ok(0);
    }
    #[allow(clippy::disallowed_methods)] // root's own configuration, outside any run
    let current = std::fs::read_to_string(&file).ok();
    if current.as_deref() == Some(profile.as_str()) {
        sandy::say::print_line(&format!("{} is up to date", file.display())).map_err(say_failed)?;
    } else {
        write_profile(&file, &profile)?;
        sandy::say::print_line(&format!("wrote {} for {}", file.display(), exe.display()))
            .map_err(say_failed)?;
    }
    if !apparmor_active() {
        sandy::say::print_line(
            "AppArmor is not active in this kernel: the profile is not loaded (it will be \
             when AppArmor is)",
        )
        .map_err(say_failed)?;
        return Ok(0);
    }
    let Some(parser) = PARSERS.iter().map(Path::new).find(|p| p.exists()) else {
        return Err(SandyError::Setup(format!(
            "AppArmor is active but apparmor_parser is not installed (install the apparmor \
             package), so {} could not be loaded",
            file.display()
        )));
    };
    let out = Command::new(parser)
        .arg("-r")
        .arg("-W")
        .arg(&file)
        .output()
        .map_err(|source| SandyError::Io {
            step: "cannot run apparmor_parser",
            source,
        })?;
    if !out.status.success() {
        return Err(SandyError::Setup(format!(
            "apparmor_parser -r {} failed ({}): {}",
            file.display(),
            crate::doctor::describe_status(out.status),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .next()
                .unwrap_or("no message")
        )));
    }
    sandy::say::print_line(&format!(
        "loaded AppArmor profile {name}: {} may create user namespaces",
        exe.display()
    ))
    .map_err(say_failed)?;
    Ok(0)
}

fn say_failed(source: std::io::Error) -> SandyError {
    SandyError::Io {
        step: "cannot write the setup report",
        source,
    }
}

/// This binary's real path (links resolved), which the profile attaches to.
fn this_binary() -> Result<PathBuf, SandyError> {
    std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|source| SandyError::Io {
            step: "cannot locate the sandy binary",
            source,
        })
}

/// Whether AppArmor is enabled in the running kernel.
fn apparmor_active() -> bool {
    #[allow(clippy::disallowed_methods)] // sysfs, read-only
    let enabled = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|v| v.trim() == "Y");
    enabled || Path::new("/sys/kernel/security/apparmor").is_dir()
}

/// Writes the profile beside its place and renames it over, so a reader never sees half
/// of it. The directory is root's configuration (root-owned, never granted to a run), and
/// `create_new` refuses a file or link already in the temporary name's place.
#[allow(clippy::disallowed_methods)]
fn write_profile(file: &Path, profile: &str) -> Result<(), SandyError> {
    let tmp = file.with_extension("sandy-new");
    let failed = |step| {
        move |source| SandyError::File {
            step,
            path: file.to_path_buf(),
            source,
        }
    };
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .map_err(failed("cannot write the AppArmor profile"))?;
    f.write_all(profile.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(failed("cannot write the AppArmor profile"))?;
    std::fs::rename(&tmp, file).map_err(failed("cannot install the AppArmor profile"))
}
