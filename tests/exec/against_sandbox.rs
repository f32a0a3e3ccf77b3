//! `exec::exec` against the sandbox over TLS with a bearer token, as the operator runs in a pod:
//! psql in a real PostgreSQL pod, exit codes, stderr, stdin, and the refusals (no such pod, no
//! such command, a simulated pod) as kubectl shows them.
//!
//! WORKSHOP.md, step 05 ("One `pods/exec`, byte by byte"). Needs PostgreSQL and bubblewrap
//! for the process runtime (the test fails, saying what is missing, without them) and kubectl.
//! Run: `cargo test -p postgres-operator --test exec against_sandbox::`.

use std::time::Duration;

use postgres_operator::client::Client;
use postgres_operator::config::Config;
use postgres_operator::exec::{exec, ExecError, ExecLimits};
use postgres_operator::postgres::cluster::psql_in_pod;
use postgres_operator::postgres::manifests::psql_argv;
use sandbox::{ProcessRuntime, Runtime, Sandbox, SandboxOptions};
use serde_json::{json, Value};
use test_support::Kubectl;
use tokio_util::sync::CancellationToken;

/// A sandbox serving HTTPS with a token (files in `dir`), a client configured from those files
/// as in a pod, and kubectl with the same credentials.
async fn start(runtime: Runtime, dir: &tempfile::TempDir) -> (Sandbox, Client, Kubectl) {
    let options = SandboxOptions {
        credentials_dir: Some(dir.path().to_path_buf()),
        ..SandboxOptions::default()
    };
    let sandbox = Sandbox::start_with_runtime(options, runtime, CancellationToken::new())
        .await
        .expect("sandbox starts");
    let port = sandbox.addr().port().to_string();
    let config = Config::incluster_from(dir.path(), "127.0.0.1", &port).expect("in-cluster files");
    let client = Client::new(config).expect("client");
    let token = sandbox.token().expect("a token in TLS mode");
    let kubectl =
        Kubectl::new(&sandbox.url()).with_ca_and_token(&dir.path().join("ca.crt"), &token);
    (sandbox, client, kubectl)
}

/// The process runtime, or a failure that says what to install.
fn process_runtime() -> Runtime {
    let runtime = ProcessRuntime::detect(None).unwrap_or_else(|error| {
        panic!(
            "this test runs a real PostgreSQL pod, which this machine cannot: {error}. \
             Install what it needs with .ci/install-test-deps"
        )
    });
    Runtime::Processes(runtime)
}

/// A one-container `postgres:15` pod with trust authentication, created through the client and
/// waited for until Ready (its tcpSocket probe answers: the postmaster listens).
async fn running_trusting_postgres(client: &Client, name: &str) {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{
            "name": "postgres",
            "image": "postgres:15",
            "env": [{"name": "POSTGRES_HOST_AUTH_METHOD", "value": "trust"}],
            "readinessProbe": {"tcpSocket": {"port": 5432}, "periodSeconds": 1},
        }]},
    });
    let _: Value = client
        .create("/api/v1/namespaces/default/pods", &pod)
        .await
        .expect("pod created");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let pod: Value = client
            .get(&format!("/api/v1/namespaces/default/pods/{name}"))
            .await
            .expect("pod readable");
        if test_support::pod_is_ready(&pod) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pod {name} not Ready within 90 s: {}",
            pod["status"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// psql answers on stdout with exit code 0; a failing shell gives its stderr and exit code 3;
/// stdin reaches `cat` and ends; a command missing from the image fails as kubectl shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_commands_in_a_real_postgres_pod() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_sandbox, client, kubectl) = start(process_runtime(), &dir).await;
    running_trusting_postgres(&client, "pg").await;
    let container = Some("postgres");

    let psql = ["psql", "-U", "postgres", "-Atc", "select 1"];
    let selected = exec(
        &client,
        "default",
        "pg",
        container,
        &psql,
        None,
        ExecLimits::default(),
    )
    .await
    .expect("psql runs");
    assert_eq!(
        (selected.stdout.as_slice(), selected.exit_code),
        (&b"1\n"[..], 0)
    );
    assert_eq!(selected.stdout_text(), "1");
    assert!(selected.stderr.is_empty(), "{selected:?}");

    let failing = ["sh", "-c", "echo out; echo err >&2; exit 3"];
    let failed = exec(
        &client,
        "default",
        "pg",
        container,
        &failing,
        None,
        ExecLimits::default(),
    )
    .await
    .expect("a non-zero exit is an output, not an error");
    assert_eq!(failed.exit_code, 3);
    assert_eq!(
        (failed.stdout_text(), failed.stderr_text()),
        ("out".into(), "err".into())
    );

    // More than one stdin message (32 KiB each), then EOF: cat must end by itself.
    let input: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let cat = exec(
        &client,
        "default",
        "pg",
        container,
        &["cat"],
        Some(&input),
        ExecLimits::default(),
    )
    .await
    .expect("cat runs");
    assert_eq!((cat.stdout == input, cat.exit_code), (true, 0));

    let sql = b"select 40 + 2;\nselect current_user;\n";
    let script = ["psql", "-U", "postgres", "-At", "-v", "ON_ERROR_STOP=1"];
    let piped = exec(
        &client,
        "default",
        "pg",
        container,
        &script,
        Some(sql),
        ExecLimits::default(),
    )
    .await
    .expect("psql reads stdin");
    assert_eq!(piped.stdout_text(), "42\npostgres");

    // Whatever kubectl makes of a command that is not in the image, we make the same.
    let missing = ["no-such-command", "--flag"];
    let ours = exec(
        &client,
        "default",
        "pg",
        None,
        &missing,
        None,
        ExecLimits::default(),
    )
    .await;
    let theirs = kubectl
        .run(&["exec", "pg", "--", "no-such-command", "--flag"])
        .await;
    assert!(!theirs.success, "{theirs:?}");
    match ours {
        Ok(output) => {
            assert_eq!(
                Some(output.exit_code),
                theirs.code,
                "{output:?} vs {theirs:?}"
            );
            assert_ne!(output.exit_code, 0);
            // kubectl prints the command's stderr, then its own line about the exit code.
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                !stderr.is_empty() && theirs.stderr.starts_with(stderr.as_ref()),
                "{output:?} vs {theirs:?}"
            );
            let exit_line = format!("command terminated with exit code {}", output.exit_code);
            assert!(theirs.stderr.contains(&exit_line), "{theirs:?}");
        }
        // A runtime that cannot start the command answers with a Failure Status instead
        // (containerd: "OCI runtime exec failed: ... executable file not found in $PATH"),
        // which kubectl prints as its error.
        Err(ExecError::Failed { status, .. }) => {
            assert!(
                theirs.stderr.contains(&status.message),
                "{status:?} vs {theirs:?}"
            );
        }
        Err(error) => panic!("{error:?} vs {theirs:?}"),
    }
}

/// A pod that does not exist: the upgrade is refused with 404 and the API server's message;
/// a simulated pod (nothing runs) is refused with 400 saying why.
#[tokio::test]
async fn exec_into_a_missing_or_simulated_pod_is_refused_with_the_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_sandbox, client, _kubectl) = start(Runtime::Simulated, &dir).await;

    let error = exec(
        &client,
        "default",
        "gone",
        None,
        &["true"],
        None,
        ExecLimits::default(),
    )
    .await
    .expect_err("no such pod");
    assert_eq!(error.status_code(), Some(404), "{error:?}");
    assert!(matches!(error, ExecError::Upgrade { .. }), "{error:?}");
    assert!(
        error.to_string().contains(r#"pods "gone" not found"#),
        "{error}"
    );

    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sim"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let _: Value = client
        .create("/api/v1/namespaces/default/pods", &pod)
        .await
        .expect("pod created");
    let error = exec(
        &client,
        "default",
        "sim",
        None,
        &["true"],
        None,
        ExecLimits::default(),
    )
    .await
    .expect_err("nothing runs in a simulated pod");
    assert_eq!(error.status_code(), Some(400), "{error:?}");
    assert!(error.to_string().contains("is simulated"), "{error}");
}

/// The fence a leader's commands pass (`src/leader/term.rs`), in a real PostgreSQL pod: a
/// command of term 7 raises the member's term; one of term 6 arriving after it is refused
/// before psql starts (its CREATE TABLE never runs), and says why; term 7 goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_refuses_a_command_of_an_earlier_leader_term() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_sandbox, client, _kubectl) = start(process_runtime(), &dir).await;
    running_trusting_postgres(&client, "pg").await;
    let (new_leader, old_leader) = (client.clone().with_term(7), client.with_term(6));

    let sql = |sql: &str| psql_argv(sql);
    let answer = psql_in_pod(&new_leader, "default", "pg", &sql("SELECT 1"))
        .await
        .expect("the later term passes");
    assert_eq!(answer.trim(), "1");

    let refused = psql_in_pod(&old_leader, "default", "pg", &sql("CREATE TABLE stale()"))
        .await
        .expect_err("the earlier term is refused");
    assert!(
        refused.contains("refused by pg's fence")
            && refused.contains("seen leader term 7, later than ours (6)"),
        "{refused}"
    );
    let tables = "SELECT count(*) FROM pg_tables WHERE tablename = 'stale'";
    let count = psql_in_pod(&new_leader, "default", "pg", &sql(tables))
        .await
        .expect("term 7 still passes");
    assert_eq!(count.trim(), "0", "the refused command never ran");
}
