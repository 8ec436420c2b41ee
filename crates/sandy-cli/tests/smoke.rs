//! The smallest end-to-end check: a command runs, writes in the project, and cannot write
//! outside it.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use common::*;

#[test]
fn runs_a_command_and_confines_writes_to_the_project() {
    for_each_user(|w| {
        let outside = w.write("home/outside.txt", "original\n");
        let o = w.sh(
            &[],
            &format!(
                "echo inside > made.txt && echo changed > {} ; echo done",
                outside.display()
            ),
        );
        assert_code(&o, 0, "sh");
        assert_eq!(stdout(&o), "done\n");
        assert_eq!(
            std::fs::read_to_string(w.project.join("made.txt")).unwrap(),
            "inside\n"
        );
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "original\n");
    });
}
