//! A minimal HTTP client for tests that speak to the sandbox below the operator's `Client`: exact
//! requests (any method, content type, headers or body), answers with status, headers and body
//! as they came, streams read line by line; and the object bodies those tests send.
//!
//! WORKSHOP.md, "Set-up: the sandbox" (how the tests drive it).
//!
//! ```text
//! let (sandbox, http) = test_support::http_client::sandbox_with_crd().await;  // CRD Established
//! let created = http.post(PATH, &http_client::cluster("db1", 3)).await;   // Answer {status, headers, body}
//! let mut watch = http.stream("...?watch=true").await;      // Stream: next_event / next_line
//! let out = test_support::Kubectl::new(&sandbox.url()).ok(&["get", "pgc"]).await;
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::eventually;
use bytes::Bytes;
use http::request::Builder as RequestBuilder;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::time::Instant;

/// A sandbox on 127.0.0.1:0 with default options, and a client for it.
pub async fn sandbox_and_http() -> (sandbox::Sandbox, Http) {
    let sandbox = crate::start_sandbox().await;
    let http = Http::new(&sandbox.url());
    (sandbox, http)
}

/// A sandbox on 127.0.0.1:0 with the default options as `adjust` changes them
/// (`|options| options.kubelet_delay = ...`), and a client for it.
pub async fn sandbox_and_http_with(
    adjust: impl FnOnce(&mut sandbox::SandboxOptions),
) -> (sandbox::Sandbox, Http) {
    let mut options = sandbox::SandboxOptions::default();
    adjust(&mut options);
    let sandbox = crate::start_sandbox_with(options).await;
    let http = Http::new(&sandbox.url());
    (sandbox, http)
}

/// The same with the PostgresCluster CRD installed and Established.
pub async fn sandbox_with_crd() -> (sandbox::Sandbox, Http) {
    let (sandbox, http) = sandbox_and_http().await;
    http.install_crd().await;
    (sandbox, http)
}

// ---------------------------------------------------------------------------------------------
// A minimal HTTP client (hyper's client connection, one request per connection unless reused).
// ---------------------------------------------------------------------------------------------

/// An answer: status, headers and the whole body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    /// The whole answer to a request whose headers are in.
    async fn read(response: hyper::Response<Incoming>) -> Answer {
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Assert a refusal: status `code`, and a Status whose message is exactly `message`.
    pub fn assert_refused(&self, code: u16, message: &str) {
        assert_eq!(self.status, code, "{}", self.text());
        assert_eq!(self.json()["message"], message);
    }

    /// Assert a refusal: status `code`, and a Status whose reason is `reason` (`BadRequest`,
    /// `Invalid`, ...).
    pub fn assert_reason(&self, code: u16, reason: &str) {
        assert_eq!(self.status, code, "{}", self.text());
        assert_eq!(self.json()["reason"], reason, "{}", self.text());
    }

    /// Assert status `code` and a body that says `part` (the body shows when it does not).
    pub fn assert_says(&self, code: u16, part: &str) {
        assert_eq!(self.status, code, "{}", self.text());
        assert!(self.text().contains(part), "{}", self.text());
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    }
}

#[derive(Clone)]
pub struct Http {
    /// `http://127.0.0.1:PORT` or `https://...`
    pub base: String,
    pub token: Option<String>,
    tls: Option<Arc<rustls::ClientConfig>>,
}

/// One open HTTP/1.1 connection, for many requests in a row (bulk tests).
pub struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    http: Http,
}

impl Http {
    pub fn new(base: &str) -> Http {
        Http {
            base: base.trim_end_matches('/').to_string(),
            token: None,
            tls: None,
        }
    }

    /// HTTPS trusting `ca_pem` only, sending `token` as a bearer token.
    pub fn with_tls(base: &str, ca_pem: &[u8], token: Option<String>) -> Http {
        use rustls_pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem) {
            roots.add(cert.expect("PEM certificate")).expect("CA added");
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        Http {
            base: base.trim_end_matches('/').to_string(),
            token,
            tls: Some(Arc::new(config)),
        }
    }

    fn authority(&self) -> String {
        self.base
            .split("://")
            .nth(1)
            .unwrap_or_default()
            .to_string()
    }

    pub async fn connect(&self) -> Connection {
        let authority = self.authority();
        let tcp = tokio::net::TcpStream::connect(&authority)
            .await
            .expect("connect to sandbox");
        tcp.set_nodelay(true).ok();
        let sender = match &self.tls {
            None => {
                let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                    .await
                    .expect("http handshake");
                tokio::spawn(conn);
                sender
            }
            Some(config) => {
                let connector = tokio_rustls::TlsConnector::from(config.clone());
                let host = authority
                    .rsplit_once(':')
                    .map(|(h, _)| h)
                    .unwrap_or("127.0.0.1");
                let name = rustls_pki_types::ServerName::try_from(host.to_string()).expect("name");
                let tls = connector.connect(name, tcp).await.expect("TLS handshake");
                let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                    .await
                    .expect("http handshake");
                tokio::spawn(conn);
                sender
            }
        };
        Connection {
            sender,
            http: self.clone(),
        }
    }

    /// A request to this server: its Host, the Content-Type when given, the bearer token when
    /// there is one.
    fn request(&self, method: Method, path: &str, content_type: Option<&str>) -> RequestBuilder {
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.authority());
        if let Some(kind) = content_type {
            builder = builder.header("content-type", kind);
        }
        if let Some(token) = &self.token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        builder
    }

    /// One request on a fresh connection; `content_type` None sends no Content-Type header.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let mut builder = self.request(method, path, content_type);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder.body(Full::new(Bytes::from(body))).expect("request");
        Answer::read(self.connect().await.raw(request).await).await
    }

    /// `method` to `path` with these bytes as an `application/json` body, well-formed or not.
    pub async fn send_json_bytes(&self, method: Method, path: &str, body: &[u8]) -> Answer {
        let json = Some("application/json");
        self.send(method, path, json, body.to_vec(), &[]).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send(Method::GET, path, None, Vec::new(), &[]).await
    }

    pub async fn get_accept(&self, path: &str, accept: &str) -> Answer {
        self.get_with_headers(path, &[("accept", accept)]).await
    }

    /// A GET with these extra headers (`Impersonate-User`, a forged `host`, ...).
    pub async fn get_with_headers(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        self.send(Method::GET, path, None, Vec::new(), headers)
            .await
    }

    /// The writes go on a fresh connection each, as [`Http::send`] does.
    pub async fn post(&self, path: &str, body: &Value) -> Answer {
        self.connect().await.post(path, body).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Answer {
        self.connect().await.put(path, body).await
    }

    /// POST `body` to the collection `path` and require 201 Created.
    pub async fn create(&self, path: &str, body: &Value) -> Answer {
        let created = self.post(path, body).await;
        assert_eq!(created.status, 201, "{}", created.text());
        created
    }

    /// POST `{"metadata":{"name":NAME}}` to the collection `path` and require 201 Created.
    pub async fn create_named(&self, path: &str, name: &str) -> Answer {
        let body = serde_json::json!({"metadata": {"name": name}});
        self.create(path, &body).await
    }

    pub async fn merge_patch(&self, path: &str, body: &Value) -> Answer {
        self.connect().await.merge_patch(path, body).await
    }

    /// PATCH `body` to `path` as `content_type`: `application/json-patch+json`,
    /// `application/strategic-merge-patch+json`, `application/apply-patch+yaml`, ...
    pub async fn patch(&self, path: &str, content_type: &str, body: &[u8]) -> Answer {
        self.send(Method::PATCH, path, Some(content_type), body.to_vec(), &[])
            .await
    }

    /// Merge-patch away the finalizers of the object at `path`, which must succeed.
    pub async fn clear_finalizers(&self, path: &str) -> Answer {
        let cleared = serde_json::json!({"metadata": {"finalizers": null}});
        let answer = self.merge_patch(path, &cleared).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        answer
    }

    /// DELETE `path` with these DeleteOptions (JSON) as the body.
    pub async fn delete_with(&self, path: &str, options: &[u8]) -> Answer {
        self.send(
            Method::DELETE,
            path,
            Some("application/json"),
            options.to_vec(),
            &[],
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        self.delete_with(path, br#"{"propagationPolicy":"Background"}"#)
            .await
    }

    /// Start a streaming GET (a watch) and return once the headers are in.
    pub async fn stream(&self, path: &str) -> Stream {
        self.stream_accept(path, "application/json").await
    }

    pub async fn stream_accept(&self, path: &str, accept: &str) -> Stream {
        let request = self
            .request(Method::GET, path, None)
            .header("accept", accept)
            .body(Full::new(Bytes::new()))
            .expect("request");
        let response = self.connect().await.raw(request).await;
        let (parts, body) = response.into_parts();
        Stream {
            status: parts.status,
            body,
            buffer: Vec::new(),
            start: 0,
            ended: false,
            frames: 0,
        }
    }

    /// Create the PostgresCluster CRD from the fixture (as JSON) and wait until it is Established.
    pub async fn install_crd(&self) {
        let answer = self
            .post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                &crd_json(),
            )
            .await;
        assert_eq!(answer.status, 201, "{}", answer.text());
        let http = self.clone();
        eventually(Duration::from_secs(5), "CRD Established", || {
            let http = http.clone();
            async move {
                let crd = http
                    .get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/postgresclusters.workshop.example.com")
                    .await
                    .json();
                let established = crd["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True");
                established.then_some(())
            }
        })
        .await;
    }
}

impl Connection {
    /// Send `request` on this connection once it is ready for one; the answer's headers.
    async fn raw(&mut self, request: Request<Full<Bytes>>) -> hyper::Response<Incoming> {
        self.sender.ready().await.expect("connection ready");
        self.sender.send_request(request).await.expect("response")
    }

    /// A JSON body with its Content-Type: what every write below sends.
    async fn send_json(
        &mut self,
        method: Method,
        path: &str,
        content_type: &str,
        body: &Value,
    ) -> Answer {
        let request = self
            .http
            .request(method, path, Some(content_type))
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        Answer::read(self.raw(request).await).await
    }

    pub async fn post(&mut self, path: &str, body: &Value) -> Answer {
        self.send_json(Method::POST, path, "application/json", body)
            .await
    }

    pub async fn put(&mut self, path: &str, body: &Value) -> Answer {
        self.send_json(Method::PUT, path, "application/json", body)
            .await
    }

    pub async fn merge_patch(&mut self, path: &str, body: &Value) -> Answer {
        self.send_json(Method::PATCH, path, "application/merge-patch+json", body)
            .await
    }
}

/// A streaming response read line by line (one watch event per line).
pub struct Stream {
    pub status: StatusCode,
    body: Incoming,
    buffer: Vec<u8>,
    /// Bytes before this offset were already returned as lines.
    start: usize,
    ended: bool,
    /// How many body frames (HTTP chunks) arrived so far.
    pub frames: usize,
}

impl Stream {
    /// The next complete line, None at a clean end of stream; panics after `within`.
    pub async fn next_line(&mut self, within: Duration) -> Option<String> {
        let end = Instant::now() + within;
        loop {
            if let Some(pos) = self.buffer[self.start..].iter().position(|b| *b == b'\n') {
                let line = self.buffer[self.start..self.start + pos].to_vec();
                self.start += pos + 1;
                if self.start > 64 * 1024 {
                    self.buffer.drain(..self.start);
                    self.start = 0;
                }
                return Some(String::from_utf8(line).expect("UTF-8 line"));
            }
            if self.ended {
                assert_eq!(self.start, self.buffer.len(), "stream ended inside a line");
                return None;
            }
            match tokio::time::timeout_at(end, self.body.frame()).await {
                Err(_) => panic!("no complete line within {within:?}"),
                Ok(None) => self.ended = true,
                Ok(Some(frame)) => {
                    let frame = frame.expect("body frame");
                    if let Ok(data) = frame.into_data() {
                        self.frames += 1;
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next event as JSON (`{"type":..,"object":..}`), None at end of stream.
    pub async fn next_event(&mut self, within: Duration) -> Option<Value> {
        let line = self.next_line(within).await?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad event {line:?}: {e}")))
    }

    /// The next event, which must come within `within` and be of type `kind` (`ADDED`, ...).
    pub async fn next_event_of(&mut self, kind: &str, within: Duration) -> Value {
        let event = self
            .next_event(within)
            .await
            .unwrap_or_else(|| panic!("no {kind} event within {within:?}"));
        assert_eq!(event["type"], kind, "{event}");
        event
    }

    /// Read until the stream ends, cleanly or not (a dropped connection is an error frame);
    /// true if that happens within `within`.
    pub async fn ends_within(&mut self, within: Duration) -> bool {
        let end = Instant::now() + within;
        loop {
            match tokio::time::timeout_at(end, self.body.frame()).await {
                Err(_) => return false,
                Ok(None) | Ok(Some(Err(_))) => return true,
                Ok(Some(Ok(_))) => {}
            }
        }
    }

    /// True if nothing at all arrives for `quiet` (the stream stays open and silent).
    pub async fn is_silent_for(&mut self, quiet: Duration) -> bool {
        tokio::time::timeout(quiet, self.body.frame())
            .await
            .is_err()
    }
}

/// The PostgresCluster CRD as JSON, exactly as the operator registers it (`src/crd/mod.rs`).
pub fn crd_json() -> Value {
    postgres_operator::crd::postgres_cluster_crd()
}

/// A PostgresCluster object body.
pub fn cluster(name: &str, size: i64) -> Value {
    serde_json::json!({
        "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
        "metadata": {"name": name},
        "spec": {"size": size, "version": "16.4"}
    })
}

/// A minimal pod body.
pub fn pod(name: &str, labels: Value) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "postgres", "image": "postgres:16.4"}]}
    })
}
