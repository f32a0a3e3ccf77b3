//! A pod sees its image, not the machine: from inside a real PostgreSQL pod (`kubectl exec`),
//! files planted on the host are not there, and `/` holds only what the image's root holds.
//!
//! WORKSHOP.md, "Set-up". Run: `cargo test -p sandbox --test runtime image_root::`.

use std::path::PathBuf;

use test_support::runtime::{create, psql_in, start, wait_ready, TRUSTING_POSTGRES};

/// Files planted for one test, removed when it ends (pass or fail).
struct Planted(Vec<PathBuf>);

impl Drop for Planted {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
            if let Some(dir) = path.parent().filter(|d| d.ends_with(PLANTED_HOME)) {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

const PLANTED_HOME: &str = "sandbox-planted-home";

/// Plant a world-readable file in each of `dirs` this test may write to.
fn plant(dirs: &[PathBuf]) -> Planted {
    let name = format!("sandbox-planted-{}", std::process::id());
    let mut planted = Vec::new();
    for dir in dirs {
        let _ = std::fs::create_dir_all(dir);
        let path = dir.join(&name);
        if std::fs::write(&path, "secret of the host\n").is_ok() {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644));
            planted.push(path);
        }
    }
    Planted(planted)
}

/// A world-readable file in /var/tmp, /opt, /srv, a home directory and the directory the
/// sandbox was started from is readable by no process of the pod, and `ls /` lists the image's
/// top-level entries only; the pod's own files are there (its passwd names its user).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_sees_its_image_not_the_host() {
    let here = std::env::current_dir().expect("the current directory");
    let planted = plant(&[
        PathBuf::from("/var/tmp"),
        PathBuf::from("/opt"),
        PathBuf::from("/srv"),
        PathBuf::from("/home").join(PLANTED_HOME),
        here,
    ]);
    // /var/tmp and the current directory are writable wherever tests run; the others as root.
    assert!(planted.0.len() >= 2, "planted only {:?}", planted.0);

    let (_sandbox, kubectl, _) = start().await;
    create(&kubectl, TRUSTING_POSTGRES).await;
    wait_ready(&kubectl, "pg").await;

    let mut readable = Vec::new();
    for path in &planted.0 {
        let path = path.to_str().expect("a UTF-8 path");
        let read = kubectl.run(&["exec", "pg", "--", "cat", path]).await;
        if read.success || read.stdout.contains("secret") {
            readable.push(path.to_string());
        }
    }
    assert_eq!(
        readable,
        Vec::<String>::new(),
        "readable from inside the pod"
    );

    let root = kubectl.ok(&["exec", "pg", "--", "ls", "/"]).await;
    let image_root = [
        "bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "tmp",
        "usr", "var",
    ];
    let foreign: Vec<&str> = root
        .lines()
        .filter(|entry| !image_root.contains(entry))
        .collect();
    assert!(
        foreign.is_empty(),
        "not of the image: {foreign:?} in\n{root}"
    );

    let passwd = kubectl
        .ok(&["exec", "pg", "--", "cat", "/etc/passwd"])
        .await;
    assert_eq!(passwd.lines().count(), 3, "{passwd}");
    assert!(passwd.contains("postgres:x:"), "{passwd}");
    let version = kubectl
        .ok(&psql_in("pg", "select current_setting('TimeZone')"))
        .await;
    assert_eq!(version.trim(), "Etc/UTC");
}

/// A program that exists on the host but not in the pod's root (this test's own binary, under
/// the directory the sandbox started in) cannot start: a StartError naming it, as for a program
/// the image lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_program_outside_the_root_cannot_start() {
    let program = std::env::current_exe().expect("this test's binary");
    let program = program.to_str().expect("a UTF-8 path");
    let (_sandbox, kubectl, _) = start().await;
    create(
        &kubectl,
        &test_support::runtime::pod_manifest(
            "host-program",
            &format!(
                "  restartPolicy: Never\n  containers:\n  - name: main\n    image: busybox\n    command: [\"{program}\"]\n"
            ),
        ),
    )
    .await;
    let pod =
        test_support::eventually(std::time::Duration::from_secs(30), "StartError", || async {
            let pod = test_support::runtime::pod_json(&kubectl, "host-program").await?;
            (pod["status"]["phase"] == "Failed").then_some(pod)
        })
        .await;
    let terminated = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["reason"], "StartError", "{terminated}");
    assert!(
        terminated["message"]
            .as_str()
            .is_some_and(|m| m.contains(program)),
        "{terminated}"
    );
}
