//! The `Client` handle itself: the connection pool, the TLS configuration and the token, built
//! once from a `Config` and shared by every clone. Support: a learner may skip it on first read —
//! what a request carries is `mod.rs`'s `Client::send`; this file is how the pool behind it is
//! built and tuned.
//!
//! WORKSHOP.md, "Talking to the API server" (Set-up).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::answer::DEFAULT_MAX_RESPONSE_BODY;
use super::tls::tls_client_config;
use super::token::TokenState;
use super::{ClientError, USER_AGENT};
use crate::config::Config;

type HyperClient = hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

pub(super) struct Inner {
    pub(super) http: HyperClient,
    /// The server URL without a trailing slash; paths start with `/`.
    pub(super) base: String,
    pub(super) namespace: String,
    pub(super) token: TokenState,
    pub(super) request_timeout: Duration,
}

/// A cheap-to-clone handle to one API server (the connection pool is shared).
#[derive(Clone)]
pub struct Client {
    pub(super) inner: Arc<Inner>,
    /// Per handle, so one caller can allow a bigger body without changing the others.
    pub(super) max_response_body: usize,
    /// Told of every attempt's answer; see [`Client::observed_by`].
    pub(super) observer: Option<RequestObserver>,
    /// Asked before every attempt that may change something; see [`Client::gated_by`].
    pub(super) gate: Option<RequestGate>,
    /// Sent as `User-Agent`: [`USER_AGENT`], or what [`Client::with_user_agent`] says.
    pub(super) user_agent: Arc<str>,
    /// The leader's term, which every command run in a member passes; see [`Client::with_term`].
    pub(super) term: Option<u64>,
}

/// Called once per attempt with its method and the answer's status, `None` when none came (a
/// refused connection, a timeout): what `/metrics` counts requests by (`src/metrics/`).
pub type RequestObserver = Arc<dyn Fn(&Method, Option<StatusCode>) + Send + Sync>;

/// Asked just before each attempt of a request that may change something (every method but
/// GET and HEAD, and every connection upgrade: `pods/exec`): `Err(why)` and it is not sent,
/// [`super::RequestError::HeldBack`]. What keeps a leader that lost its Lease from writing
/// (`src/leader/gate.rs`).
pub type RequestGate = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.inner.base)
            .field("namespace", &self.inner.namespace)
            .field("token", &self.inner.token)
            .field("request_timeout", &self.inner.request_timeout)
            .field("max_response_body", &self.max_response_body)
            .field("observed", &self.observer.is_some())
            .field("gated", &self.gate.is_some())
            .field("user_agent", &self.user_agent)
            .field("term", &self.term)
            .finish()
    }
}

impl Client {
    /// Build the TLS configuration and the connection pool. No request is sent yet.
    pub fn new(config: Config) -> Result<Client, ClientError> {
        let tls = tls_client_config(&config)?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            // hyper's read buffer grows up to this (default ~400 KB) per connection; bodies stream
            // through it in pieces whatever its size, so a smaller cap only bounds memory (a
            // watch of many small events kept it near the maximum). 64 KiB still holds any
            // response head an API server sends.
            .http1_max_buf_size(64 * 1024)
            .build(connector);
        let token = TokenState::new(config.auth.token.as_ref())?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                base: config.server.as_str().trim_end_matches('/').to_string(),
                namespace: config.namespace,
                token,
                request_timeout: config.request_timeout,
            }),
            max_response_body: DEFAULT_MAX_RESPONSE_BODY,
            observer: None,
            gate: None,
            user_agent: USER_AGENT.into(),
            term: None,
        })
    }

    /// The same client (same connection pool) telling `observer` of every attempt it makes;
    /// clones made from it afterwards tell it too. Replaces an earlier observer.
    pub fn observed_by(mut self, observer: RequestObserver) -> Client {
        self.observer = Some(observer);
        self
    }

    /// The same client (same connection pool) asking `gate` before every attempt that may
    /// change something; clones made from it afterwards ask it too. Replaces an earlier gate.
    pub fn gated_by(mut self, gate: RequestGate) -> Client {
        self.gate = Some(gate);
        self
    }

    /// The same client sending `agent` as its `User-Agent`, so that an audit log tells two
    /// copies of one program apart (client-go's `rest.Config.UserAgent`).
    pub fn with_user_agent(mut self, agent: &str) -> Client {
        self.user_agent = agent.into();
        self
    }

    /// The same client, for a leader of term `term`: a command it runs in a member passes the
    /// member's fence (`src/leader/term.rs`), which refuses it once a later term has been there.
    pub fn with_term(mut self, term: u64) -> Client {
        self.term = Some(term);
        self
    }

    /// The leader's term this client acts in, `None` when not elected.
    pub fn term(&self) -> Option<u64> {
        self.term
    }

    /// The same client (same connection pool) with another cap on response bodies, in bytes.
    /// Watch streams are not capped as a whole: each event is, by the watch's line framer.
    pub fn with_max_response_body(mut self, bytes: usize) -> Client {
        self.max_response_body = bytes;
        self
    }

    /// The namespace from the configuration (flag, in-cluster file, kubeconfig, or `default`).
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// The server URL requests go to.
    pub fn server(&self) -> &str {
        &self.inner.base
    }

    /// How long one attempt may wait for its answer.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.inner.request_timeout
    }

    /// DELETE an object with a `DeleteOptions` body: `preconditions` (the API server deletes
    /// only the version named), `propagationPolicy`, `gracePeriodSeconds`. `mod.rs`'s `delete`
    /// is the same without a body.
    pub async fn delete_with<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        options: &B,
    ) -> Result<T, ClientError> {
        self.json_body(Method::DELETE, path, options, "application/json")
            .await
    }
}
