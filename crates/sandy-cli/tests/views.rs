//! Files the sandbox sees as a prepared copy: the user's shell start-up files are readable
//! inside without their credential assignments, never writable, and the host files never
//! change. Judged from the host as well as inside.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::os::unix::fs::PermissionsExt;

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
        let doc = dry_run_of_true(w, "dry run");
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
        w.tidy_tmp();
        let left: Vec<_> = std::fs::read_dir(&w.tmp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    });
}

/// Fedora's default `~/.bashrc` sources every file of `~/.bashrc.d` in a loop: each is a
/// filtered start-up file like the `.bashrc` itself, so an interactive shell inside
/// starts without a permission error, gets the aliases, and not the token.
#[test]
fn files_a_start_up_loop_sources_are_filtered_start_up_files() {
    for_each_user(|w| {
        let token = "ghp_0123456789abcdefghijklmnopqrstuv";
        w.write(
            "home/.bashrc",
            "if [ -d ~/.bashrc.d ]; then\n  for rc in ~/.bashrc.d/*; do\n    \
             if [ -f \"$rc\" ]; then\n      . \"$rc\"\n    fi\n  done\nfi\nunset rc\n",
        );
        w.write("home/.bashrc.d/aliases.sh", "alias gs='git status'\n");
        let secrets = format!("export GITHUB_TOKEN={token}\nexport PAGER=less\n");
        let secret_file = w.write("home/.bashrc.d/secrets.sh", &secrets);
        // A file the pattern does not match: its name is listable, its content is not.
        w.write("home/.bashrc.d/.private", "private-content\n");
        let o = w
            .sandy([
                "run",
                "--",
                "bash",
                "-ic",
                "alias gs; echo \"pager=$PAGER token=${GITHUB_TOKEN:-unset}\"; \
                 cat ~/.bashrc.d/secrets.sh; cat ~/.bashrc.d/.private || echo private-refused",
            ])
            .output()
            .unwrap();
        let (out, err) = (stdout(&o), stderr(&o));
        assert_code(&o, 0, &format!("interactive bash\n{out}\n{err}"));
        assert!(out.contains("alias gs='git status'"), "{out}\n{err}");
        assert!(out.contains("pager=less token=unset"), "{out}\n{err}");
        assert!(
            !out.contains(token) && !err.contains(token),
            "leaked: {out}{err}"
        );
        assert!(out.contains("private-refused"), "{out}\n{err}");
        assert!(!out.contains("private-content"), "{out}");
        // The only refusal is the unmatched file's, asked for by name.
        assert_eq!(err.matches("Permission denied").count(), 1, "{err}");
        assert_eq!(std::fs::read_to_string(&secret_file).unwrap(), secrets);
    });
}

/// A dotfiles project: `~/.bashrc` and `~/.bashrc.d` are links into it, and the loop
/// sources every file there. A run in the project can neither change those files nor
/// add one to the directory (which the user's next shell would run); their token stays
/// out; the project's other files stay writable. fish's `conf.d` is listable too, and
/// named as such in the dry run.
#[test]
fn a_directory_a_start_up_loop_sources_in_the_project_takes_no_new_file() {
    for_each_user(|w| {
        let token = "ghp_0123456789abcdefghijklmnopqrstuv";
        w.write(
            "home/project/bashrc",
            "for rc in ~/.bashrc.d/*; do . \"$rc\"; done\n",
        );
        let secrets = format!("export GITHUB_TOKEN={token}\n");
        let secret_file = w.write("home/project/bashrc.d/secrets.sh", &secrets);
        w.write("home/.config/fish/conf.d/env.fish", "set -gx EDITOR vim\n");
        std::os::unix::fs::symlink("project/bashrc", w.home.join(".bashrc")).unwrap();
        std::os::unix::fs::symlink("project/bashrc.d", w.home.join(".bashrc.d")).unwrap();
        w.chown_all();
        let o = w.sh(
            &[],
            "echo 'touch /tmp/x' > bashrc.d/evil.sh || echo add-refused; \
             mkdir bashrc.d/sub 2>/dev/null || echo mkdir-refused; \
             echo more >> bashrc.d/secrets.sh 2>/dev/null || echo append-refused; \
             cat ~/.bashrc.d/secrets.sh; ls ~/.bashrc.d ~/.config/fish/conf.d; \
             echo fine > notes.txt && echo other-written",
        );
        let (out, err) = (stdout(&o), stderr(&o));
        assert_code(&o, 0, &format!("{out}\n{err}"));
        for said in [
            "add-refused",
            "mkdir-refused",
            "append-refused",
            "credential line removed",
            "secrets.sh",
            "env.fish",
            "other-written",
        ] {
            assert!(out.contains(said), "{said:?} not said:\n{out}\n{err}");
        }
        assert!(
            !out.contains(token) && !err.contains(token),
            "leaked: {out}{err}"
        );
        assert!(
            err.contains("a file added there runs in your next shell"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&secret_file).unwrap(), secrets);
        let names: Vec<_> = std::fs::read_dir(w.project.join("bashrc.d"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, ["secrets.sh"], "{names:?}");
        let doc = dry_run_of_true(w, "dry run");
        let conf_d = std::fs::canonicalize(w.home.join(".config/fish/conf.d")).unwrap();
        assert!(
            doc["file_grants"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["path"] == conf_d.display().to_string() && g["access"] == "list"),
            "{doc}"
        );
    });
}

/// The user's git configuration (`~/.gitconfig`, and `~/.gitconfig.local` it includes) is
/// seen inside without its credentials (a token in a URL rewrite's section, an extra
/// header, `github.token`) and with every other setting: git inside reads it whole (the
/// user name, an alias, the include), and the host files never change.
#[test]
fn git_configuration_is_seen_without_its_credentials() {
    for_each_user(|w| {
        let token = "ghp_0123456789abcdefghijklmnopqrstuv";
        let main = format!(
            "[user]\n\tname = Sandy Tester\n[alias]\n\tst = status\n\
             [url \"https://x-user:{token}@github.com/\"]\n\tinsteadOf = https://github.com/\n\
             [http]\n\textraHeader = AUTHORIZATION: bearer {token}\n\
             [include]\n\tpath = ~/.gitconfig.local\n\tpath = ~/work.inc\n"
        );
        let local = format!("[github]\n\ttoken = {token}\n[core]\n\tabbrev = 12\n");
        // An included file whose name says nothing of git: git's own list of what it
        // reads decides, and git's rule filters it.
        let work = format!("[user]\n\temail = t@example.com\n[github]\n\toauth-token = {token}\n");
        let gitconfig = w.write("home/.gitconfig", &main);
        let included = w.write("home/.gitconfig.local", &local);
        let work_inc = w.write("home/work.inc", &work);
        let o = w.sh(
            &[],
            "cat ~/.gitconfig ~/.gitconfig.local ~/work.inc; git config --global --list; \
             git config --get github.token || echo no-token; \
             echo abbrev=$(git config --get core.abbrev) email=$(git config --get user.email); \
             echo evil >> ~/.gitconfig.local 2>/dev/null || echo append-refused; \
             echo evil >> ~/work.inc 2>/dev/null || echo work-append-refused",
        );
        let (out, err) = (stdout(&o), stderr(&o));
        assert_code(&o, 0, &format!("git inside\n{out}\n{err}"));
        assert!(
            !out.contains(token) && !err.contains(token),
            "leaked: {out}{err}"
        );
        assert!(!err.contains("bad config"), "{err}");
        for said in [
            "user.name=Sandy Tester",
            "alias.st=status",
            "include.path=~/.gitconfig.local",
            "no-token",
            "abbrev=12 email=t@example.com",
            "append-refused",
            "work-append-refused",
        ] {
            assert!(out.contains(said), "{said:?} not said:\n{out}\n{err}");
        }
        assert_eq!(std::fs::read_to_string(&gitconfig).unwrap(), main);
        assert_eq!(std::fs::read_to_string(&included).unwrap(), local);
        assert_eq!(std::fs::read_to_string(&work_inc).unwrap(), work);
        // The dry run says which files are filtered copies.
        let doc = dry_run_of_true(w, "dry run");
        let views = doc["views"].as_array().unwrap();
        for file in [&gitconfig, &included, &work_inc] {
            let canonical = std::fs::canonicalize(file).unwrap();
            assert!(
                views
                    .iter()
                    .any(|v| v["target"] == canonical.display().to_string()
                        && v["kind"] == "filtered"),
                "{}: {views:?}",
                file.display()
            );
        }
    });
}

/// fish reads every `~/.config/fish/conf.d/*.fish` at start-up: each is a filtered,
/// read-only copy like `config.fish`, its settings kept and its token gone; a file there
/// that is not fish's (`notes.txt`) is neither.
#[test]
fn fish_conf_d_files_are_filtered_start_up_files() {
    for_each_user(|w| {
        let secret = "ghp_0123456789abcdefghijklmnop";
        let original = format!("set -gx EDITOR vim\nset -xg GITHUB_TOKEN {secret}\n");
        let file = w.write("home/.config/fish/conf.d/env.fish", &original);
        w.write("home/.config/fish/conf.d/notes.txt", "plain\n");
        let o = w.sh(
            &[],
            &format!(
                "cat '{}'; echo evil >> '{}' 2>/dev/null || echo append-refused",
                file.display(),
                file.display()
            ),
        );
        assert_code(&o, 0, "read fish's conf.d");
        let out = stdout(&o);
        assert!(out.contains("set -gx EDITOR vim"), "{out}");
        assert!(!out.contains(secret), "the secret leaked: {out}");
        assert!(out.contains("append-refused"), "{out}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), original);
        let doc = dry_run_of_true(w, "dry run");
        let targets: Vec<String> = doc["views"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["target"].as_str().unwrap().to_owned())
            .collect();
        assert!(
            targets.iter().any(|t| t.ends_with("conf.d/env.fish")),
            "{targets:?}"
        );
        assert!(
            !targets.iter().any(|t| t.ends_with("notes.txt")),
            "{targets:?}"
        );
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
                std::fs::read_dir(w.runs())
                    .into_iter()
                    .flatten()
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
        w.tidy_tmp();
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
        // Sandy's directory of runs, made ahead for the watch: each per-run directory is
        // made under a first name (`.sandy-new-*`) and renamed into place.
        std::fs::create_dir(w.runs()).unwrap();
        std::fs::set_permissions(w.runs(), std::fs::Permissions::from_mode(0o700)).unwrap();
        w.chown_all();
        inotify::add_watch(
            &watch,
            w.runs(),
            inotify::WatchFlags::CREATE | inotify::WatchFlags::MOVED_TO,
        )
        .unwrap();
        let o = w.sh(&[], "cat ~/.bashrc ~/.profile; echo ok");
        assert_code(&o, 0, "a run with two filtered copies");
        assert!(!stdout(&o).contains(SECRET), "the secret leaked");
        assert!(stdout(&o).contains("alias ll='ls -l'"), "{}", stdout(&o));
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
        let mut reader = inotify::Reader::new(&watch, &mut buf);
        let mut made = Vec::new();
        while let Ok(event) = reader.next() {
            if let Some(name) = event.file_name() {
                let name = name.to_string_lossy().into_owned();
                if !name.starts_with(".sandy-new-") {
                    made.push(name);
                }
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
        let doc = dry_run_of_true(w, "views dry run");
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

/// What the host knows of a file, judged from outside: its bytes, inode and times.
fn fingerprint(path: &std::path::Path) -> (Vec<u8>, u64, i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).unwrap();
    (
        std::fs::read(path).unwrap(),
        meta.ino(),
        meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
        meta.ctime_nsec() + meta.ctime() * 1_000_000_000,
    )
}

fn symlink(target: &str, link: &std::path::Path, w: &World) {
    std::os::unix::fs::symlink(target, link).unwrap();
    w.chown_all();
}

/// Start-up files that are symbolic links (GNU stow, chezmoi, Home Manager): a relative
/// and an absolute link, a chain of two, a sourced file that is a link, and a dangling
/// link. Sandy starts (it refused with exit 125 before), the shell reads the filtered
/// copy of the file each link leads to, nothing can be written through the link or the
/// file, and the dry run names the link each view is for.
#[test]
fn startup_files_that_are_symbolic_links_are_filtered_views_of_their_files() {
    for_each_user(|w| {
        let bashrc = w.write(
            "home/dot/bashrc",
            &format!(
                "alias ll='ls -l'\nexport OPENAI_API_KEY={SECRET}\n\
                 [ -f ~/.env.sh ] && . ~/.env.sh\n"
            ),
        );
        let env_sh = w.write(
            "home/dot/env.sh",
            &format!("export EDITOR=nano\nexport GH_TOKEN={SECRET}\ngreet() {{ echo hi-env; }}\n"),
        );
        let profile = w.write(
            "home/dot/profile",
            &format!("export PAGER=less\nexport ANTHROPIC_API_KEY={SECRET}\n"),
        );
        let zshrc = w.write(
            "home/dot/zshrc",
            &format!("alias gs='git status'\nexport HF_TOKEN={SECRET}\n"),
        );
        symlink("dot/bashrc", &w.home.join(".bashrc"), w);
        symlink(&profile.display().to_string(), &w.home.join(".profile"), w);
        symlink(".zshrc2", &w.home.join(".zshrc"), w);
        symlink("dot/zshrc", &w.home.join(".zshrc2"), w);
        symlink("dot/env.sh", &w.home.join(".env.sh"), w);
        symlink("dot/absent", &w.home.join(".bash_aliases"), w);
        let files = [&bashrc, &env_sh, &profile, &zshrc];
        let before: Vec<_> = files.iter().map(|f| fingerprint(f)).collect();
        let o = w
            .sandy([
                "run",
                "--",
                "bash",
                "-c",
                "shopt -s expand_aliases; source ~/.bashrc; alias ll; greet; \
                 echo \"editor=$EDITOR key=${OPENAI_API_KEY:-unset} gh=${GH_TOKEN:-unset}\"; \
                 cat ~/.profile ~/.zshrc ~/.env.sh; \
                 [ -e ~/.bash_aliases ] || echo aliases-absent; \
                 for f in ~/.bashrc ~/.profile ~/.zshrc ~/.env.sh ~/dot/bashrc ~/dot/zshrc; do \
                   echo evil >> $f 2>/dev/null && echo \"appended $f\"; \
                 done; \
                 echo evil > ~/dot/absent 2>/dev/null && echo created-dangling; \
                 rm -f ~/.bashrc 2>/dev/null || echo rm-refused; echo done",
            ])
            .output()
            .unwrap();
        assert_code(&o, 0, "a shell reading start-up files that are links");
        let out = stdout(&o);
        assert!(out.contains("alias ll='ls -l'"), "{out}");
        assert!(out.contains("hi-env"), "{out}");
        assert!(out.contains("editor=nano key=unset gh=unset"), "{out}");
        assert!(out.contains("export PAGER=less"), "{out}");
        assert!(out.contains("alias gs='git status'"), "{out}");
        assert!(out.contains("aliases-absent"), "{out}");
        assert!(out.contains("rm-refused"), "{out}");
        assert!(out.ends_with("done\n"), "{out}");
        assert!(!out.contains("appended"), "{out}");
        assert!(!out.contains("created-dangling"), "{out}");
        assert!(!out.contains(SECRET), "the secret leaked: {out}");
        let after: Vec<_> = files.iter().map(|f| fingerprint(f)).collect();
        assert_eq!(before, after, "a host file changed");
        assert!(!w.home.join("dot/absent").exists());
        for (link, target) in [
            (".bashrc", "dot/bashrc"),
            (".zshrc", ".zshrc2"),
            (".bash_aliases", "dot/absent"),
        ] {
            assert_eq!(
                std::fs::read_link(w.home.join(link)).unwrap(),
                std::path::PathBuf::from(target)
            );
        }
        // The dry run names the file each view covers and the link it is for.
        let doc = dry_run_of_true(w, "views of links");
        let views = doc["views"].as_array().unwrap();
        for (file, link) in [
            (&bashrc, ".bashrc"),
            (&profile, ".profile"),
            (&zshrc, ".zshrc"),
            (&env_sh, ".env.sh"),
        ] {
            assert!(
                views
                    .iter()
                    .any(|v| v["target"] == file.display().to_string()
                        && v["link"] == w.home.join(link).display().to_string()
                        && v["kind"] == "filtered"),
                "{link} missing from {views:?}"
            );
        }
        assert!(
            !views
                .iter()
                .any(|v| v["link"] == w.home.join(".bash_aliases").display().to_string()),
            "{views:?}"
        );
    });
}

/// The project is the user's dotfiles repository: `~/.bashrc` leads into it, through a
/// link inside it (`current -> bash`), and `~/.profile` leads to a file in it directly.
/// The start-up files stay read-only whatever the way in (their names, their paths in the
/// project), and their names are pinned: renaming, removing or replacing a directory or
/// link on the way fails, so the host's next shell reads what it read before. A normal
/// project file stays writable. A dangling link into the project is no refusal; a file
/// the run creates there is named after the run.
#[test]
fn a_startup_file_inside_the_project_is_never_writable_and_its_names_are_pinned() {
    for_each_user(|w| {
        let rc = w.write(
            "home/project/bash/rc",
            &format!("alias ll='ls -l'\nexport OPENAI_API_KEY={SECRET}\n"),
        );
        let profile = w.write("home/project/profile", "export PAGER=less\n");
        let notes = w.write("home/project/notes.txt", "notes\n");
        symlink("bash", &w.project.join("current"), w);
        symlink("project/current/rc", &w.home.join(".bashrc"), w);
        symlink("project/profile", &w.home.join(".profile"), w);
        symlink("project/login", &w.home.join(".bash_login"), w);
        let before = [fingerprint(&rc), fingerprint(&profile)];
        let attempts = [
            ("append-name", "echo evil >> ~/.bashrc"),
            ("append-path", "echo evil >> bash/rc"),
            ("append-link-path", "echo evil >> current/rc"),
            ("append-profile", "echo evil >> profile"),
            ("append-profile-name", "echo evil >> ~/.profile"),
            ("truncate", "truncate -s 0 bash/rc"),
            ("chmod", "chmod 666 bash/rc"),
            ("rename-file", "mv bash/rc bash/rc2"),
            ("remove-file", "rm -f bash/rc"),
            ("rename-parent", "mv bash bash2"),
            ("remove-parent", "rm -rf bash"),
            (
                "replace-parent",
                "mkdir -p evil && echo 'echo pwned' > evil/rc && mv -T evil bash",
            ),
            ("rename-link", "mv current current2"),
            ("remove-link", "rm current"),
            ("repoint-link", "mkdir -p evil2 && ln -sfn evil2 current"),
            ("replace-profile", "echo 'echo pwned' > p2 && mv p2 profile"),
        ];
        let mut script = String::new();
        for (key, cmd) in attempts {
            script.push_str(&format!("( {cmd} ) 2>/dev/null; echo {key}=$?\n"));
        }
        script.push_str(
            "echo more >> notes.txt; echo notes=$?\nmkdir -p newdir && echo new > newdir/f; \
             echo newdir=$?\ncat ~/.bashrc ~/.profile\necho made > login; echo login=$?\n",
        );
        let o = w.sh(&[], &script);
        assert_code(&o, 0, "attempts on start-up files inside the project");
        let out = stdout(&o);
        for (key, _) in attempts {
            assert_failed(&out, key);
        }
        assert_field(&out, "notes", "0");
        assert_field(&out, "newdir", "0");
        assert_field(&out, "login", "0");
        assert!(out.contains("alias ll='ls -l'"), "{out}");
        assert!(out.contains("export PAGER=less"), "{out}");
        assert!(!out.contains(SECRET), "the secret leaked: {out}");
        // From outside: the start-up files and the way to them are as before.
        assert_eq!([fingerprint(&rc), fingerprint(&profile)], before);
        assert_eq!(
            std::fs::read_link(w.project.join("current")).unwrap(),
            std::path::PathBuf::from("bash")
        );
        assert_eq!(
            std::fs::read_to_string(w.home.join(".bashrc")).unwrap(),
            std::fs::read_to_string(&rc).unwrap()
        );
        assert!(!w.project.join("bash2").exists() && !w.project.join("current2").exists());
        assert_eq!(std::fs::read_to_string(&notes).unwrap(), "notes\nmore\n");
        // The file a dangling start-up link leads to, made by the run, is named after it.
        assert!(
            stderr(&o).contains(&format!(
                "{} did not exist at launch",
                w.project.join("login").display()
            )),
            "{}",
            stderr(&o)
        );
        // The dry run lists the names and files as read-only protections.
        let doc = dry_run_of_true(w, "start-up files in the project");
        let protections = doc["protections"].as_array().unwrap();
        for path in [w.home.join(".bashrc"), rc, w.home.join(".profile")] {
            assert!(
                protections
                    .iter()
                    .any(|p| p["path"] == path.display().to_string() && p["kind"] == "read_only"),
                "{} missing from {protections:?}",
                path.display()
            );
        }
    });
}

/// Lines that passed the credential filter before: several assignments on a line, fish's
/// `set` with any flags, names like `GH_PAT`, `OPENAI_KEY` and `SLACK_WEBHOOK_URL`,
/// tokens by their prefix, DSNs, aliases carrying a token; Gradle, Maven, TOML, YAML and
/// npm shapes; npm's global configuration in a toolchain prefix on `PATH`. None of the
/// secrets is readable inside, the settings around them are, and the host files do not
/// change.
#[test]
fn credentials_in_every_shape_stay_outside() {
    for_each_user(|w| {
        let s = SECRET;
        let files = [
            (
                "home/.bashrc",
                format!(
                    "export EDITOR=vim; export OPENAI_API_KEY={s}\n\
                     export PATH=\"$HOME/bin:$PATH\" ANTHROPIC_API_KEY={s}\n\
                     export FOO=1 && export GITHUB_TOKEN={s}\ndeclare -x A=1 B=2 HF_TOKEN={s}\n\
                     A=1 TOKEN={s}\nexport GH_PAT={s}\nexport OPENROUTER_KEY={s}\n\
                     export SLACK_WEBHOOK_URL=https://hooks.slack.com/services/{s}\n\
                     export SOMETHING=ghp_abcdefghijklmnopqrstuvwxyz0123456789\n\
                     export MYSQL_DSN='app:{s}@tcp(db:3306)/app'\n\
                     alias gh2='GH_TOKEN={s} gh'\n\
                     alias api='curl -H \"Authorization: Bearer {s}\" https://api.example'\n\
                     export KEYTIMEOUT=1\nexport SSH_KEY_PATH=$HOME/.ssh/id_ed25519\nalias ll='ls -l'\n"
                ),
            ),
            (
                "home/.config/fish/config.fish",
                format!(
                    "set -xg OPENAI_API_KEY {s}\nset -x -g GH_TOKEN {s}\n\
                     set --global --export HF_TOKEN {s}\nset -Ux NPM_TOKEN {s}\n\
                     set -gx EDITOR vim; set -gx ANTHROPIC_API_KEY {s}\nset -gx PAGER less\n"
                ),
            ),
            (
                "home/.gradle/gradle.properties",
                format!(
                    "org.gradle.jvmargs=-Xmx2g\ngpr.key={s}\nsigningInMemoryKey={s}\n\
                     signing.password={s}\nsonar.login={s}\n"
                ),
            ),
            (
                "home/.m2/settings.xml",
                format!(
                    "<settings><servers><server><id>a</id>\n<password><![CDATA[{s}]]></password>\n\
                     <password >{s}</password >\n<username>me</username></server></servers></settings>\n"
                ),
            ),
            (
                "home/.cargo/config.toml",
                format!(
                    "[registry]\ntoken = \"\"\"\n{s}\n\"\"\"\n\"registries\".mine.token = \"{s}\"\n\
                     [net]\ngit-fetch-with-cli = true\n"
                ),
            ),
            (
                "home/.yarnrc.yml",
                format!("npmAuthToken: >-\n  {s}\nenableTelemetry: false\n"),
            ),
            (
                "home/.npmrc",
                format!("registry=https://r.example/\notp={s}\n"),
            ),
            (
                "home/.npm-global/etc/npmrc",
                format!("//registry.npmjs.org/:_authToken={s}\nfund=false\n"),
            ),
        ];
        let mut paths = Vec::new();
        for (path, text) in &files {
            paths.push(w.write(path, text));
        }
        std::fs::create_dir_all(w.home.join(".npm-global/bin")).unwrap();
        w.chown_all();
        let before: Vec<_> = paths.iter().map(|p| fingerprint(p)).collect();
        let cat: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        let path_var = format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            w.home.join(".npm-global/bin").display()
        );
        let o = w
            .sandy(
                ["run", "--", "cat"]
                    .into_iter()
                    .map(String::from)
                    .chain(cat.iter().cloned()),
            )
            .env("PATH", &path_var)
            .output()
            .unwrap();
        assert_code(&o, 0, "reading every configuration file");
        let out = stdout(&o);
        assert!(!out.contains(SECRET), "a secret leaked:\n{out}");
        assert!(!out.contains("ghp_"), "a token leaked:\n{out}");
        for kept in [
            "alias ll='ls -l'",
            "export KEYTIMEOUT=1",
            "export SSH_KEY_PATH=$HOME/.ssh/id_ed25519",
            "set -gx PAGER less",
            "org.gradle.jvmargs=-Xmx2g",
            "<username>me</username>",
            "git-fetch-with-cli = true",
            "enableTelemetry: false",
            "registry=https://r.example/",
            "fund=false",
        ] {
            assert!(out.contains(kept), "{kept} missing:\n{out}");
        }
        let after: Vec<_> = paths.iter().map(|p| fingerprint(p)).collect();
        assert_eq!(before, after, "a host file changed");
    });
}
