use super::*;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// `openat2` and the step-by-step fallback are both tested; the tests that switch
/// between them take this lock, so that no other test meanwhile sees the fallback.
static MODE: Mutex<()> = Mutex::new(());

fn both(mut f: impl FnMut()) {
    let _guard = MODE.lock().unwrap_or_else(|e| e.into_inner());
    for stepwise in [false, true] {
        force_stepwise(stepwise);
        f();
    }
    force_stepwise(false);
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

#[test]
fn a_link_anywhere_below_a_root_is_never_followed() {
    let t = tempfile::tempdir().unwrap();
    let base = t.path();
    std::fs::create_dir_all(base.join("root/a/b")).unwrap();
    std::fs::create_dir_all(base.join("outside/b")).unwrap();
    std::fs::write(base.join("outside/b/secret"), "s").unwrap();
    symlink(base.join("outside"), base.join("root/link")).unwrap();
    symlink("a", base.join("root/rel")).unwrap();
    symlink("../outside", base.join("root/up")).unwrap();
    both(|| {
        let root = Dir::open(&base.join("root")).unwrap();
        assert!(root.open_dir("a/b").is_ok());
        for way in ["link", "link/b", "rel/b", "up/b", "rel"] {
            let e = root.open_dir(way).unwrap_err();
            assert!(
                [libc_errno::ELOOP, libc_errno::ENOTDIR].contains(&errno(&e)),
                "{way}: {e}"
            );
        }
        for bad in ["", "..", "../outside", "/etc", "a/../a", "./a"] {
            assert_eq!(
                root.open_dir(bad).unwrap_err().kind(),
                io::ErrorKind::InvalidInput,
                "{bad}"
            );
        }
        assert!(root.read("link", 10).unwrap().is_none());
    });
    // A path with no link at all opens exactly; one with a link anywhere does not.
    assert!(Dir::open_exact(&base.join("root/a/b")).is_ok());
    assert!(Dir::open_exact(&base.join("root/link/b")).is_err());
    assert!(Dir::open_exact(Path::new("relative")).is_err());
}

/// errno values, as the tests compare them.
mod libc_errno {
    pub const ELOOP: i32 = 40;
    pub const ENOTDIR: i32 = 20;
    pub const EXDEV: i32 = 18;
}

#[test]
fn reads_are_bounded_and_never_block_or_follow() {
    let t = tempfile::tempdir().unwrap();
    let dir = Dir::open(t.path()).unwrap();
    nix::unistd::mkfifo(
        &t.path().join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    symlink("/dev/zero", t.path().join("zero")).unwrap();
    std::fs::write(t.path().join("file"), "hello").unwrap();
    assert_eq!(dir.read("fifo", 10).unwrap(), None);
    assert_eq!(dir.read("zero", 10).unwrap(), None);
    assert_eq!(dir.read("file", 4).unwrap(), None);
    assert_eq!(dir.read("file", 5).unwrap(), Some(b"hello".to_vec()));
    assert_eq!(
        dir.read("absent", 5).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    let devices = Dir::open(Path::new("/dev")).unwrap();
    assert_eq!(devices.read("null", 10).unwrap(), None);
}

#[test]
fn a_log_is_only_ever_a_regular_file_of_ones_own() {
    let t = tempfile::tempdir().unwrap();
    let dir = Dir::open(t.path()).unwrap();
    // Created 0600 when absent; appended to when it is a plain file.
    let mut log = dir.append_log("net.log").unwrap();
    log.write_all(b"one\n").unwrap();
    drop(log);
    let meta = std::fs::metadata(t.path().join("net.log")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    dir.append_log("net.log")
        .unwrap()
        .write_all(b"two\n")
        .unwrap();
    assert_eq!(
        std::fs::read(t.path().join("net.log")).unwrap(),
        b"one\ntwo\n"
    );
    // A link (to a file that exists, and dangling), a FIFO with and without a reader,
    // a socket, a hard link: each refused at once, the file behind untouched.
    std::fs::write(t.path().join("victim"), "v").unwrap();
    symlink(t.path().join("victim"), t.path().join("link")).unwrap();
    symlink(t.path().join("absent"), t.path().join("dangling")).unwrap();
    std::fs::hard_link(t.path().join("victim"), t.path().join("hard")).unwrap();
    nix::unistd::mkfifo(
        &t.path().join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(t.path().join("socket")).unwrap();
    for name in ["link", "dangling", "hard", "fifo", "socket"] {
        let e = dir.append_log(name).unwrap_err();
        assert!(!e.to_string().is_empty(), "{name}");
    }
    assert!(!t.path().join("absent").exists());
    // A FIFO somebody reads is still not a log (the reader's end opened without
    // waiting, so that nothing here can block).
    let reader = rustix::fs::open(
        t.path().join("fifo"),
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    let e = dir.append_log("fifo").unwrap_err();
    assert!(e.to_string().contains("FIFO"), "{e}");
    drop(reader);
    assert_eq!(std::fs::read(t.path().join("victim")).unwrap(), b"v");
}

#[test]
fn a_log_of_another_user_is_refused() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("theirs"), "").unwrap();
    std::os::unix::fs::chown(t.path().join("theirs"), Some(65534), Some(65534)).unwrap();
    let e = Dir::open(t.path())
        .unwrap()
        .append_log("theirs")
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
}

/// A tree as overlayfs and a run leave it: unreadable and read-only directories, links
/// out of it (to a directory, a file, dangling), a FIFO, and one very deep branch.
fn hostile_tree(base: &Path) -> (PathBuf, PathBuf) {
    let tree = base.join("tree");
    let victim = base.join("victim");
    std::fs::create_dir_all(victim.join("sub")).unwrap();
    for i in 0..20 {
        std::fs::write(victim.join(format!("f{i}")), "keep").unwrap();
    }
    std::fs::create_dir_all(tree.join("work/incompat/volatile")).unwrap();
    std::fs::write(tree.join("work/incompat/volatile/dirty"), "").unwrap();
    symlink(&victim, tree.join("to-victim")).unwrap();
    symlink(victim.join("f0"), tree.join("to-file")).unwrap();
    symlink(base.join("absent"), tree.join("dangling")).unwrap();
    nix::unistd::mkfifo(
        &tree.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let mut deep = tree.join("deep");
    for _ in 0..300 {
        deep.push("d");
    }
    std::fs::create_dir_all(&deep).unwrap();
    symlink(&victim, deep.join("to-victim")).unwrap();
    std::fs::create_dir_all(tree.join("ro/inner")).unwrap();
    std::fs::write(tree.join("ro/inner/f"), "").unwrap();
    for (d, mode) in [
        (tree.join("work/incompat/volatile"), 0o000),
        (tree.join("work/incompat"), 0o000),
        (tree.join("work"), 0o000),
        (tree.join("ro/inner"), 0o500),
        (tree.join("ro"), 0o500),
    ] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    (tree, victim)
}

fn victim_intact(victim: &Path) {
    for i in 0..20 {
        assert_eq!(
            std::fs::read_to_string(victim.join(format!("f{i}"))).unwrap(),
            "keep"
        );
    }
    assert!(victim.join("sub").is_dir());
}

#[test]
fn a_tree_goes_whole_and_nothing_it_points_to_goes_with_it() {
    both(|| {
        let t = tempfile::tempdir().unwrap();
        let (tree, victim) = hostile_tree(t.path());
        let base = Dir::open(t.path()).unwrap();
        assert!(base.disk_usage("tree", MAX_ENTRIES) > 0);
        base.remove_tree("tree", &|| false).unwrap();
        assert!(!tree.exists() && std::fs::symlink_metadata(&tree).is_err());
        victim_intact(&victim);
        // The top of a tree that is a link: the link goes, not what it leads to.
        symlink(&victim, t.path().join("tree")).unwrap();
        base.remove_tree("tree", &|| false).unwrap();
        victim_intact(&victim);
        // Absent: nothing to do.
        base.remove_tree("tree", &|| false).unwrap();
    });
}

#[test]
fn a_stopped_removal_leaves_the_rest() {
    let t = tempfile::tempdir().unwrap();
    let (tree, _) = hostile_tree(t.path());
    let base = Dir::open(t.path()).unwrap();
    let e = base.remove_tree("tree", &|| true).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Interrupted);
    assert!(tree.exists());
}

/// A concurrent adversary swaps a directory of the tree with a link to the victim,
/// again and again, while the tree is removed: the victim never loses a file.
#[test]
fn a_removal_raced_by_link_swaps_never_reaches_outside() {
    for round in 0..30 {
        let t = tempfile::tempdir().unwrap();
        let (tree, victim) = hostile_tree(t.path());
        for i in 0..50 {
            std::fs::create_dir_all(tree.join(format!("swap/{i}"))).unwrap();
        }
        symlink(&victim, tree.join("bait")).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let stop = Arc::clone(&stop);
            let tree = tree.clone();
            std::thread::spawn(move || {
                let Ok(dir) = Dir::open(&tree) else { return };
                while !stop.load(Ordering::Relaxed) {
                    let _ = rustix::fs::renameat_with(
                        &dir,
                        "swap",
                        &dir,
                        "bait",
                        RenameFlags::EXCHANGE,
                    );
                }
            })
        };
        let base = Dir::open(t.path()).unwrap();
        let _ = base.remove_tree("tree", &|| false);
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        victim_intact(&victim);
        let _ = round;
    }
}

#[test]
fn a_removal_never_enters_another_mount() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("tree");
    let mounted = tree.join("mnt");
    std::fs::create_dir_all(&mounted).unwrap();
    let source = t.path().join("source");
    std::fs::create_dir_all(&source).unwrap();
    std::fs::write(source.join("keep"), "k").unwrap();
    let mount = std::process::Command::new("mount")
        .args(["--bind"])
        .arg(&source)
        .arg(&mounted)
        .status();
    if !mount.is_ok_and(|s| s.success()) {
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mounted.clone());
    both(|| {
        let base = Dir::open(t.path()).unwrap();
        let e = base.remove_tree("tree", &|| false).unwrap_err();
        assert_eq!(std::fs::read(source.join("keep")).unwrap(), b"k");
        assert_eq!(errno(&e), libc_errno::EXDEV, "{e}");
        assert!(mounted.exists());
    });
}

#[test]
fn entries_renames_and_replacements_work_on_handles() {
    let t = tempfile::tempdir().unwrap();
    let a = Dir::open(t.path()).unwrap().create_dir("a", 0o700).unwrap();
    let b = Dir::open(t.path()).unwrap().ensure_dir("b", 0o700).unwrap();
    assert_eq!(b.stat().unwrap().mode, 0o700);
    a.write_new("f", b"1", 0o640).unwrap();
    assert_eq!(a.entry("f").unwrap().unwrap().mode, 0o640);
    assert_eq!(
        a.write_new("f", b"2", 0o600).unwrap_err().kind(),
        io::ErrorKind::AlreadyExists
    );
    a.symlink("/etc/passwd", "l").unwrap();
    assert_eq!(a.read_link("l").unwrap(), Path::new("/etc/passwd"));
    let mut names: Vec<_> = a
        .entries(10)
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![("f".into(), Kind::File), ("l".into(), Kind::Symlink)]
    );
    assert!(a.entries(1).is_err());
    assert_eq!(a.entries_prefix(1).unwrap().len(), 1);
    // A link is moved as a link; the file it leads to stays.
    a.rename("l", &b, "l").unwrap();
    assert_eq!(b.read_link("l").unwrap(), Path::new("/etc/passwd"));
    a.rename("f", &b, "f").unwrap();
    assert_eq!(
        a.rename_noreplace("x", &b, "f").unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    b.write_new("g", b"", 0o600).unwrap();
    assert_eq!(
        b.rename_noreplace("g", &b, "f").unwrap_err().kind(),
        io::ErrorKind::AlreadyExists
    );
    // Replacing a link replaces the link, never the file it leads to.
    b.replace("l", b"new", 0o600, None).unwrap();
    assert_eq!(b.entry("l").unwrap().unwrap().kind, Kind::File);
    assert_ne!(std::fs::read("/etc/passwd").unwrap(), b"new");
    b.remove_entry("l").unwrap();
    b.remove_entry("l").unwrap();
    assert!(b.entry("l").unwrap().is_none());
    // A second lock on the same directory is refused while the first is held.
    let other = Dir::open(&t.path().join("b")).unwrap();
    assert!(b.try_lock(true).unwrap());
    assert!(!other.try_lock(true).unwrap());
    assert!(!other.try_lock(false).unwrap());
    drop(b);
    assert!(other.try_lock(false).unwrap());
}
