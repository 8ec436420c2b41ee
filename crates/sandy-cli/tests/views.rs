//! Files the sandbox sees as a prepared copy: the user's shell start-up files are readable
//! inside without their credential assignments, never writable, and the host files never
//! change. Judged from the host as well as inside.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

const SECRET: &str = "sk-CANARY-5e1d-do-not-leak";

#[test]
fn shell_startup_files_are_read_only_and_filtered() {
    if !kernel_ready() {
        return;
    }
    for_each_user(|w| {
        let original = format!(
            "alias ll='ls -l'\nexport OPENAI_API_KEY={SECRET}\nexport EDITOR=vim\n\
             GITHUB_TOKEN={SECRET} # inline\n"
        );
        let bashrc = w.write("home/.bashrc", &original);
        let profile = w.write("home/.profile", "PATH=\"$HOME/bin:$PATH\"\n");
        // The allowed thing: an interactive bash inside reads the file (the alias and the
        // harmless export apply) without a permission error.
        let o = w
            .sandy([
                "run",
                "--",
                "bash",
                "-ic",
                "alias ll; echo \"editor=$EDITOR key=${OPENAI_API_KEY:-unset}\"",
            ])
            .output()
            .unwrap();
        assert_code(&o, 0, "interactive bash reading ~/.bashrc");
        let out = stdout(&o);
        assert!(out.contains("alias ll='ls -l'"), "{out}");
        assert!(out.contains("editor=vim key=unset"), "{out}");
        assert!(!stderr(&o).contains("Permission denied"), "{}", stderr(&o));
        // The neighbouring forbidden things: the secret is not visible, the files cannot
        // be changed, replaced or removed.
        let o = w.sh(
            &[],
            "cat ~/.bashrc ~/.profile; echo evil >> ~/.bashrc || echo append-refused; \
             rm -f ~/.bashrc 2>/dev/null || echo rm-refused; \
             mv ~/.profile ~/.p 2>/dev/null || echo mv-refused",
        );
        let out = stdout(&o);
        assert!(!out.contains(SECRET), "the secret leaked: {out}");
        assert!(out.contains("credential line removed"), "{out}");
        assert!(out.contains("append-refused"), "{out}");
        assert!(out.contains("rm-refused"), "{out}");
        assert!(out.contains("mv-refused"), "{out}");
        assert_eq!(std::fs::read_to_string(&bashrc).unwrap(), original);
        assert_eq!(
            std::fs::read_to_string(&profile).unwrap(),
            "PATH=\"$HOME/bin:$PATH\"\n"
        );
        // The dry run says so.
        let o = w
            .sandy(["run", "--dry-run", "--", "true"])
            .output()
            .unwrap();
        let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let views = doc["views"].as_array().unwrap();
        for file in [&bashrc, &profile] {
            assert!(
                views
                    .iter()
                    .any(|v| v["target"] == file.display().to_string() && v["kind"] == "filtered"),
                "{views:?}"
            );
        }
        // Nothing is left behind next to the private /tmp.
        let left: Vec<_> = std::fs::read_dir(&w.tmp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    });
}

/// A small filtered copy never touches the host: it travels in the launch manifest and
/// the bootstrap writes it into the sandbox's private `/run`. A large one (over 64 KiB) is
/// a file in a per-run directory next to the private `/tmp`, removed as soon as the target
/// has started. Either way the sandbox reads it long after that (its mount holds it),
/// without the secret.
#[test]
fn a_filtered_copy_is_held_by_the_sandbox_not_left_on_the_host() {
    if !kernel_ready() {
        return;
    }
    for_each_user(|w| {
        for padding in [0usize, 70 * 1024] {
            let filler = "# filler line of a long start-up file\n".repeat(padding / 38);
            let original = format!("alias ll='ls -l'\n{filler}export OPENAI_API_KEY={SECRET}\n");
            w.write("home/.bashrc", &original);
            let mut child = w
                .sandy([
                    "run",
                    "--",
                    "/bin/sh",
                    "-c",
                    "read go; cat ~/.bashrc; echo done",
                ])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdin = child.stdin.take().unwrap();
            let collector = Collector::start(&mut child);
            // The target waits on its input, started: by now no copy is on the host.
            let views_dirs = || -> Vec<std::ffi::OsString> {
                std::fs::read_dir(&w.tmp)
                    .unwrap()
                    .flatten()
                    .map(|e| e.file_name())
                    .filter(|n| n.to_string_lossy().starts_with("sandy-views-"))
                    .collect()
            };
            assert!(
                wait_for(10, || views_dirs().is_empty()),
                "left during the run: {:?}",
                views_dirs()
            );
            use std::io::Write;
            writeln!(stdin, "go").unwrap();
            drop(stdin);
            let status = child.wait().unwrap();
            let o = collector.finish(status);
            assert_code(&o, 0, "reading the view late in the run");
            let out = stdout(&o);
            assert!(out.starts_with("alias ll='ls -l'\n"), "{padding}");
            assert!(out.contains("credential line removed"), "{padding}");
            assert!(!out.contains(SECRET), "the secret leaked ({padding})");
            assert!(out.ends_with("done\n"), "{padding}");
            assert_eq!(
                out.len(),
                original.len() - original.lines().last().unwrap().len()
                    + "true # sandy: credential line removed".len()
                    + "done\n".len()
            );
        }
    });
}

/// A start-up file that is not UTF-8 (a Latin-1 comment) is filtered like any other, its
/// bytes kept as they are; it takes the per-run directory's way (its JSON form would be
/// an array of numbers), which is gone by the end of the run.
#[test]
fn a_start_up_file_that_is_not_utf8_is_filtered_and_kept_byte_for_byte() {
    if !kernel_ready() {
        return;
    }
    for_each_user(|w| {
        let mut original = b"alias ll='ls -l'\n# caf\xe9 au lait\n".to_vec();
        original.extend_from_slice(format!("export OPENAI_API_KEY={SECRET}\n").as_bytes());
        std::fs::write(w.home.join(".bashrc"), &original).unwrap();
        w.chown_all();
        let o = w.sh(&[], "cat ~/.bashrc");
        assert_code(&o, 0, "reading a start-up file that is not UTF-8");
        let expected =
            b"alias ll='ls -l'\n# caf\xe9 au lait\ntrue # sandy: credential line removed\n";
        assert_eq!(o.stdout, expected.to_vec(), "{}", stdout(&o));
        assert_eq!(std::fs::read(w.home.join(".bashrc")).unwrap(), original);
        let left: Vec<_> = std::fs::read_dir(&w.tmp).unwrap().flatten().collect();
        assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    });
}

/// A small filtered copy is never a file on the host, not even while the bootstrap sets
/// the sandbox up: the only per-run directory Sandy makes next to the private `/tmp` is
/// that `/tmp` itself (watched from the host throughout a run with inotify).
#[test]
fn a_small_filtered_copy_is_never_a_file_on_the_host() {
    use rustix::fs::inotify;
    if !kernel_ready() {
        return;
    }
    for_each_user(|w| {
        w.write(
            "home/.bashrc",
            &format!("export OPENAI_API_KEY={SECRET}\nalias ll='ls -l'\n"),
        );
        w.write("home/.profile", "PATH=\"$HOME/bin:$PATH\"\n");
        let watch =
            inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).unwrap();
        inotify::add_watch(&watch, &w.tmp, inotify::WatchFlags::CREATE).unwrap();
        let o = w.sh(&[], "cat ~/.bashrc ~/.profile; echo ok");
        assert_code(&o, 0, "a run with two filtered copies");
        assert!(!stdout(&o).contains(SECRET), "the secret leaked");
        assert!(stdout(&o).contains("alias ll='ls -l'"), "{}", stdout(&o));
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
        let mut reader = inotify::Reader::new(&watch, &mut buf);
        let mut made = Vec::new();
        while let Ok(event) = reader.next() {
            if let Some(name) = event.file_name() {
                made.push(name.to_string_lossy().into_owned());
            }
        }
        assert!(
            made.iter().all(|n| !n.starts_with("sandy-views-")),
            "created next to the private /tmp: {made:?}"
        );
        assert_eq!(made.len(), 1, "only the private /tmp: {made:?}");
    });
}

/// The files the start-up files source from the home are filtered views too, and the
/// way agents start their shells (Claude Code's `bash -c 'source ~/.bashrc; ...'`, a
/// login shell `bash -lc`) prints no error line.
#[test]
fn sourced_startup_files_are_views_and_agent_shells_start_cleanly() {
    if !kernel_ready() {
        return;
    }
    for_each_user(|w| {
        let bashrc = w.write(
            "home/.bashrc",
            "[ -f ~/.bash_aliases ] && . ~/.bash_aliases\n\
             if [ -d \"$HOME/.config/sh\" ]; then\n  source \"$HOME/.config/sh/env.sh\"\nfi\n",
        );
        let aliases = w.write("home/.bash_aliases", "alias gs='git status'\n");
        let env_sh = w.write(
            "home/.config/sh/env.sh",
            &format!(
                "export EDITOR=nano\nif [ -n \"$HOME\" ]; then\n  export ANTHROPIC_API_KEY={SECRET}\nfi\n\
                 . ~/.config/sh/deeper.sh\n"
            ),
        );
        let deeper = w.write(
            "home/.config/sh/deeper.sh",
            &format!("greet() {{ echo hello-from-deeper; }}\nexport GH_TOKEN={SECRET}\n"),
        );
        let profile = w.write("home/.bash_profile", "[ -f ~/.bashrc ] && . ~/.bashrc\n");
        let originals: Vec<(std::path::PathBuf, String)> =
            [&bashrc, &aliases, &env_sh, &deeper, &profile]
                .iter()
                .map(|p| ((*p).clone(), std::fs::read_to_string(p).unwrap()))
                .collect();
        for argv in [
            vec![
                "bash",
                "-c",
                "shopt -s expand_aliases; source ~/.bashrc; alias gs; greet; \
                 echo \"editor=$EDITOR key=${ANTHROPIC_API_KEY:-unset} gh=${GH_TOKEN:-unset}\"",
            ],
            vec![
                "bash",
                "-lc",
                "alias gs; greet; echo \"editor=$EDITOR key=${ANTHROPIC_API_KEY:-unset}\"",
            ],
        ] {
            let mut args = vec!["run", "--"];
            args.extend(argv.iter().copied());
            let o = w.sandy(&args).output().unwrap();
            assert_code(&o, 0, &format!("{argv:?}"));
            assert_eq!(stderr(&o), "", "{argv:?} printed an error line");
            let out = stdout(&o);
            assert!(out.contains("alias gs='git status'"), "{out}");
            assert!(out.contains("hello-from-deeper"), "{out}");
            assert!(out.contains("editor=nano key=unset"), "{out}");
            assert!(!out.contains(SECRET), "the secret leaked: {out}");
        }
        // Neither the sourced files' secrets nor their contents can be changed.
        let o = w.sh(
            &[],
            "cat ~/.config/sh/env.sh ~/.config/sh/deeper.sh; \
             echo evil >> ~/.config/sh/env.sh || echo append-refused",
        );
        let out = stdout(&o);
        assert!(!out.contains(SECRET), "{out}");
        assert!(out.contains("append-refused"), "{out}");
        for (path, text) in originals {
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                text,
                "{}",
                path.display()
            );
        }
        // The dry run lists each sourced file as a filtered view.
        let o = w
            .sandy(["run", "--dry-run", "--", "true"])
            .output()
            .unwrap();
        let doc = parse_dry_run(&o.stdout, "views dry run");
        let views = doc["views"].as_array().unwrap();
        for file in [&aliases, &env_sh, &deeper] {
            assert!(
                views
                    .iter()
                    .any(|v| v["target"] == file.display().to_string() && v["kind"] == "filtered"),
                "{} missing from {views:?}",
                file.display()
            );
        }
    });
}
