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
