//! The client keeps connections alive and shares one pool between clones: a hundred sequential
//! requests over TLS cost one TCP connection and one handshake. Prints the mean request time.

use std::time::Instant;

use postgres_operator::client::Client;
use postgres_operator::config::{Config, ConfigArgs, Environment, SecretString};
use serde_json::{json, Value};
use test_support::scripted_server::{json, ready, ScriptedServer, TestPki};

/// 100 GETs through clones of one client over HTTPS use a single connection.
#[tokio::test]
async fn sequential_requests_reuse_one_tls_connection() {
    let pki = TestPki::generate();
    let server = ScriptedServer::https(pki.server_config(false), |_, _| {
        ready(json(200, json!({"kind": "PodList", "items": []})))
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.crt"), &pki.ca_pem).unwrap();
    let args = ConfigArgs {
        server: Some(server.url.clone()),
        certificate_authority: Some(dir.path().join("ca.crt")),
        token: Some(SecretString::new("t")),
        ..ConfigArgs::default()
    };
    let client = Client::new(Config::infer_from(&args, &Environment::default()).unwrap()).unwrap();

    let started = Instant::now();
    for _ in 0..100 {
        let clone = client.clone();
        let list: Value = clone.get("/api/v1/namespaces/default/pods").await.unwrap();
        assert_eq!(list["kind"], "PodList");
    }
    let elapsed = started.elapsed();
    eprintln!(
        "100 sequential GETs over TLS: {elapsed:?} total, {:?} each",
        elapsed / 100
    );
    assert_eq!(server.requests().len(), 100);
    assert_eq!(
        server.connections(),
        1,
        "keep-alive: one connection for all requests"
    );
}
