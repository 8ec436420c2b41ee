//! Kontext's preflight, on the host before launch (RUNTIME_CONTROLS.md, "Kontext").
//!
//! The evidence, as upstream Sandy takes it: Kontext's own hook registration in the
//! agent's settings (recognised during resolution, service `Kontext`), a bounded
//! `kontext doctor --json` (a cleared environment with only `HOME` and a fixed `PATH`, a
//! 5 s timeout, at most 64 KiB of output, under a file-size limit), and the daemon's
//! socket `/tmp/kontext-managed-observe-UID/kontext.sock` (UID: the home directory's
//! owner), which must be a Unix socket owned by that user, in a directory of that user's
//! that nobody else can write, named without symlinks. What passes is added to the
//! policy ([`sandy_policy::attach_kontext`]); nothing is installed or repaired here.

use std::io::{Read, Seek};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandy_policy::{HostContext, KontextControl, KontextReport, ResolvedPolicy, KONTEXT};

use crate::error::SandyError;

const DOCTOR_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_DOCTOR_OUTPUT: u64 = 64 * 1024;
/// The same limit in the 512-byte blocks of POSIX `ulimit -f` (dash counts so; bash
/// counts 1 KiB blocks, a looser limit still enforced by the size check).
const DOCTOR_OUTPUT_BLOCKS: u64 = MAX_DOCTOR_OUTPUT / 512;
const POLL: Duration = Duration::from_millis(10);

/// The one line `--kontext` exits with when no Kontext hook is registered.
pub const NOT_INSTALLED: &str =
    "--kontext requires installed hooks; install Kontext and run kontext setup, or omit --kontext";

/// Whether Kontext is required (`--kontext`, `doctor --kontext`) or only kept working
/// when it verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Required,
    Optional,
}

/// Verifies the Kontext installation the policy's hooks name and attaches it. Required:
/// any failure is an error (exit 125, one line). Optional: no registration is silence, a
/// failing one is one warning line and contributes nothing (its hook stays an ordinary
/// granted, protected hook).
pub fn attach(
    policy: &mut ResolvedPolicy,
    host: &HostContext,
    mode: Mode,
) -> Result<(), SandyError> {
    match verify(policy, host) {
        Ok(None) if mode == Mode::Required => Err(SandyError::RuntimeControl(NOT_INSTALLED.into())),
        Ok(None) => Ok(()),
        Ok(Some((control, files, root))) => {
            match sandy_policy::attach_kontext(
                policy,
                control,
                &files,
                &root,
                &crate::hostfs::HostFs,
            ) {
                Ok(()) => Ok(()),
                Err(reason) => fail(mode, &reason),
            }
        }
        Err(reason) => fail(mode, &reason),
    }
}

fn fail(mode: Mode, reason: &str) -> Result<(), SandyError> {
    match mode {
        Mode::Required => Err(SandyError::RuntimeControl(format!(
            "{KONTEXT} runtime control failed: {reason}; set it up outside Sandy with \
             `sandy integrations setup kontext --agent claude|codex`"
        ))),
        Mode::Optional => {
            say!("optional {KONTEXT} runtime control unavailable; continuing without it: {reason}");
            Ok(())
        }
    }
}

type Verified = (KontextControl, Vec<PathBuf>, PathBuf);

/// `Ok(None)`: no Kontext hook registered. `Err`: registered but not usable.
fn verify(policy: &ResolvedPolicy, host: &HostContext) -> Result<Option<Verified>, String> {
    let hooks = sandy_policy::kontext_executables(policy);
    let Some(first) = hooks.first() else {
        return Ok(None);
    };
    if hooks.len() > 1 {
        return Err(
            "configured hooks resolve to different Kontext executables; rerun kontext setup".into(),
        );
    }
    let home = host
        .home
        .as_deref()
        .ok_or("cannot resolve the home directory for Kontext resources")?;
    // The preflight runs this executable on the host, outside any sandbox: never one a
    // sandboxed run could have written.
    let canonical = std::fs::canonicalize(&first.path)
        .map_err(|e| format!("cannot resolve the Kontext executable: {e}"))?;
    let writable = policy.grants.iter().any(|g| {
        g.access == sandy_policy::Access::ReadWrite
            && (g.path == canonical
                || (g.scope == sandy_policy::Scope::Subtree && canonical.starts_with(&g.path)))
    });
    if writable {
        return Err(format!(
            "the Kontext executable {} lies where a sandboxed run can write; install \
             Kontext outside the project and the agent's state",
            first.path.display()
        ));
    }
    let report = doctor(&first.path, home)?;
    let root = sandy_policy::kontext_root(home, host.var("XDG_CONFIG_HOME").map(Path::new));
    let files = sandy_policy::check_kontext_report(&report, &root)?;
    let uid = std::fs::metadata(home)
        .map_err(|e| format!("cannot inspect the home directory's owner: {e}"))?
        .uid();
    let socket = sandy_policy::kontext_socket(uid);
    verify_socket(&socket, uid)?;
    Ok(Some((
        KontextControl {
            version: report.installed_version,
            executable: first.path.clone(),
            configuration: first.configuration.clone(),
            socket,
        },
        files,
        root,
    )))
}

/// The daemon's endpoint: a Unix socket owned by `uid` (a final symlink is refused, not
/// followed), in a real directory owned by `uid` that no one else can write (so no
/// other user can swap the socket between this check and the launch).
fn verify_socket(socket: &Path, uid: u32) -> Result<(), String> {
    let dir = socket
        .parent()
        .ok_or("the Kontext socket has no directory")?;
    let not_same_user = "the Kontext daemon endpoint is not a same-user Unix socket";
    let d = std::fs::symlink_metadata(dir)
        .map_err(|e| format!("cannot inspect the Kontext daemon socket's directory: {e}"))?;
    if !d.file_type().is_dir() || d.uid() != uid || d.mode() & 0o022 != 0 {
        return Err(format!(
            "{not_same_user}: {} is not a directory of that user only",
            dir.display()
        ));
    }
    let s = std::fs::symlink_metadata(socket)
        .map_err(|e| format!("cannot inspect the Kontext daemon socket: {e}"))?;
    if !s.file_type().is_socket() || s.uid() != uid {
        return Err(not_same_user.into());
    }
    Ok(())
}

/// `kontext doctor --json`, bounded: cleared environment, 5 s, 64 KiB.
pub fn doctor(binary: &Path, home: &Path) -> Result<KontextReport, String> {
    let mut output =
        tempfile::tempfile().map_err(|e| format!("cannot create the doctor's output: {e}"))?;
    let child_output = output
        .try_clone()
        .map_err(|e| format!("cannot prepare the doctor's output: {e}"))?;
    // A fixed script: the executable is an opaque positional argument.
    let script = format!(
        "ulimit -S -f {DOCTOR_OUTPUT_BLOCKS} && ulimit -H -f {DOCTOR_OUTPUT_BLOCKS} && exec \"$1\" doctor --json"
    );
    let mut child = Command::new("/bin/sh")
        .args(["-c", &script, "sandy-kontext-doctor"])
        .arg(binary)
        .env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .stdin(Stdio::null())
        .stdout(Stdio::from(child_output))
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run kontext doctor --json: {e}"))?;
    let deadline = Instant::now() + DOCTOR_TIMEOUT;
    let status = loop {
        let size = match output.metadata() {
            Ok(m) => m.len(),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("cannot inspect kontext doctor --json output: {e}"));
            }
        };
        if size > MAX_DOCTOR_OUTPUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err("kontext doctor --json output exceeded the limit".into());
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("cannot wait for kontext doctor --json: {e}"));
            }
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("kontext doctor --json timed out".into());
        }
        std::thread::sleep(POLL);
    };
    output
        .rewind()
        .map_err(|e| format!("cannot read kontext doctor --json output: {e}"))?;
    let mut bytes = Vec::new();
    output
        .take(MAX_DOCTOR_OUTPUT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read kontext doctor --json output: {e}"))?;
    if bytes.len() as u64 > MAX_DOCTOR_OUTPUT {
        return Err("kontext doctor --json output exceeded the limit".into());
    }
    if !status.success() {
        return Err("kontext doctor --json failed; update Kontext or run kontext doctor".into());
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| format!("kontext doctor --json returned malformed output: {e}"))
}

/// `sandy doctor --kontext` and `sandy integrations setup kontext`: the same resolution
/// and preflight as `sandy run --kontext` for `agent`. `Ok(Ok(version))` when usable,
/// `Ok(Err(reason))` when not.
pub fn status(agent: &str) -> Result<Result<Option<String>, String>, SandyError> {
    let host = crate::host::gather(&[])?;
    let request = crate::host::status_request(&host, agent, false);
    let mut policy = sandy_policy::resolve(&request, &host, &crate::hostfs::HostFs)?;
    match attach(&mut policy, &host, Mode::Required) {
        Ok(()) => Ok(Ok(policy.kontext.and_then(|k| k.version))),
        Err(SandyError::RuntimeControl(reason)) => Ok(Err(reason)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make their own fixtures
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const HEALTHY: &str = r#"{"healthy":true,"configured":true,"self_serve":true,"daemon_running":true,"active_profile":"t","legacy_install":false,"mode":"observe"}"#;

    fn stand_in(dir: &Path, body: &str) -> PathBuf {
        let binary = dir.join("kontext");
        std::fs::write(&binary, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        binary
    }

    #[test]
    fn the_doctor_is_read_when_it_succeeds_and_refused_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        // Only HOME and the fixed PATH reach it.
        let binary = stand_in(
            dir.path(),
            &format!("[ \"$PATH\" = /usr/bin:/bin:/usr/sbin:/sbin ] && printf '%s' '{HEALTHY}'"),
        );
        assert!(doctor(&binary, dir.path()).unwrap().healthy);
        let binary = stand_in(dir.path(), "exit 1");
        assert!(doctor(&binary, dir.path()).is_err());
        let binary = stand_in(dir.path(), "echo '{not json'");
        assert!(doctor(&binary, dir.path()).is_err());
    }

    #[test]
    fn the_doctor_is_bounded_in_time_and_output() {
        let dir = tempfile::tempdir().unwrap();
        let binary = stand_in(dir.path(), "exec /usr/bin/yes x");
        let started = Instant::now();
        assert!(doctor(&binary, dir.path()).is_err());
        assert!(started.elapsed() < Duration::from_secs(4));
        let binary = stand_in(dir.path(), "sleep 30");
        let started = Instant::now();
        assert!(doctor(&binary, dir.path()).is_err());
        assert!(started.elapsed() < Duration::from_secs(8));
        // Large but within the limit: accepted.
        let binary = stand_in(
            dir.path(),
            &format!("printf '%s' '{HEALTHY}'; printf '%40000s' ''"),
        );
        assert!(doctor(&binary, dir.path()).unwrap().healthy);
    }

    #[test]
    fn only_a_same_user_socket_in_a_private_directory_passes() {
        let dir = tempfile::tempdir().unwrap();
        let uid = nix::unistd::getuid().as_raw();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = dir.path().join("kontext.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert!(verify_socket(&socket, uid).is_ok());
        assert!(verify_socket(&socket, uid + 1).is_err());
        let link = dir.path().join("link.sock");
        std::os::unix::fs::symlink(&socket, &link).unwrap();
        assert!(verify_socket(&link, uid).is_err());
        let file = dir.path().join("file.sock");
        std::fs::write(&file, "").unwrap();
        assert!(verify_socket(&file, uid).is_err());
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(verify_socket(&socket, uid).is_err());
    }
}
