//! Support: skip it on first read — the errors name what failed; the lesson is the request that
//! could fail.
//!
//! The client's errors: which step of a request failed (set-up, connecting, the answer), with
//! the method and path, and the cause underneath. WORKSHOP.md, "When the server says no".

use std::path::PathBuf;
use std::time::Duration;

use http::StatusCode;

use crate::status::Status;

/// What went wrong with building the client, or with one request. A request's error names its
/// method and path once, and which step failed in its [`RequestError`]; each error with a cause
/// underneath wraps it as its `source()`, and its message carries that cause's text too, so
/// printing the error alone tells the whole story.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// rustls refused a part of the TLS set-up, named by `what`: the protocol versions (never,
    /// with the ring provider's defaults), a configured CA that is not a usable CA certificate, or
    /// a client certificate and key that do not belong together (or an unsupported key type).
    #[error("setting up TLS: {what}: {source}")]
    Tls {
        what: &'static str,
        #[source]
        source: rustls::Error,
    },
    /// The configuration names a token file we cannot read.
    #[error("cannot read token file {}: {source}", path.display())]
    ReadTokenFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Paths are absolute (`/api/v1/...`): they are appended to the server URL.
    #[error("invalid request path {path:?}: must start with /")]
    RelativePath { path: String },
    /// The path does not make a valid URL once joined to the server URL.
    #[error("invalid request path {path:?}: {source}")]
    InvalidPath {
        path: String,
        #[source]
        source: http::Error,
    },
    /// One request failed: `GET /api/v1/pods: <which step, and why>`.
    #[error("{method} {path}: {kind}")]
    Request {
        method: String,
        path: String,
        #[source]
        kind: RequestError,
    },
}

/// Which step of one request failed, and why.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The API server said no, with a `Status` body: code, reason, message, causes.
    #[error("{0}")]
    Api(Box<Status>),
    /// A non-2xx response whose body is not a `Status` (an HTML page from a proxy or load balancer).
    #[error(
        "HTTP {code} {} and the body is not a Kubernetes Status (a proxy in the way?): {body}",
        canonical_reason(.code)
    )]
    Http { code: u16, body: String },
    /// A 2xx response whose body is not the JSON we expected.
    #[error("HTTP {code} but the body is not the JSON expected: {source}; body starts: {snippet}")]
    Decode {
        code: u16,
        snippet: String,
        #[source]
        source: serde_json::Error,
    },
    /// No connection: refused, DNS, TLS handshake (wrong CA?).
    #[error("cannot connect to the API server: {} (server {server})", error_chain(.source))]
    Connect {
        server: String,
        // Boxed: it carries connection details that would make every ClientError large.
        #[source]
        source: Box<hyper_util::client::legacy::Error>,
    },
    /// The connection broke after it was made, before the response head arrived.
    #[error("connection failed mid-request: {}", error_chain(.0))]
    Transport(#[source] Box<hyper_util::client::legacy::Error>),
    /// The connection broke while the response body (or a watch stream) was arriving.
    #[error("connection failed while reading the response body: {}", error_chain(.0))]
    ReadBody(#[source] hyper::Error),
    /// The response body grew past the client's cap ([`Client::with_max_response_body`]): a
    /// misbehaving server (or something posing as one) must not make us buffer without end.
    ///
    /// [`Client::with_max_response_body`]: super::Client::with_max_response_body
    #[error("the response body is larger than the cap of {limit} bytes; page a big list with limit/continue, or raise the cap (Client::with_max_response_body)")]
    BodyTooLarge { limit: usize },
    /// No complete response within the request timeout.
    #[error("no complete response within {}s", .after.as_secs_f64())]
    Timeout { after: Duration },
    /// The bearer token holds bytes an HTTP header may not carry (a newline inside the token?).
    #[error("the bearer token contains characters not allowed in an HTTP header; check the token or token file")]
    TokenNotAHeader(#[source] http::header::InvalidHeaderValue),
    /// The request body could not be serialized.
    #[error("cannot encode the request body: {0}")]
    Encode(#[source] serde_json::Error),
    /// Not sent: the client's gate ([`Client::gated_by`]) held back a request that may change
    /// something, and said why (a leader whose Lease is not known to be its own any more).
    ///
    /// [`Client::gated_by`]: super::Client::gated_by
    #[error("not sent: {why}")]
    HeldBack { why: String },
}

impl ClientError {
    /// `kind` went wrong in the request `method path`.
    pub fn request(method: &http::Method, path: &str, kind: RequestError) -> ClientError {
        ClientError::Request {
            method: method.to_string(),
            path: path.to_string(),
            kind,
        }
    }

    /// Which step of a request failed; `None` for building the client or a bad path.
    pub fn kind(&self) -> Option<&RequestError> {
        match self {
            ClientError::Request { kind, .. } => Some(kind),
            _ => None,
        }
    }

    /// The HTTP status code, when the server answered.
    pub fn status_code(&self) -> Option<u16> {
        match self.kind()? {
            RequestError::Api(status) => Some(status.code),
            RequestError::Http { code, .. } | RequestError::Decode { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The server's `Status`, when it sent one.
    pub fn api_status(&self) -> Option<&Status> {
        match self.kind()? {
            RequestError::Api(status) => Some(status),
            _ => None,
        }
    }

    /// The `Status` reason (`AlreadyExists`, `NotFound`, `Forbidden`...), when there is one.
    pub fn reason(&self) -> Option<&str> {
        self.api_status().map(|status| status.reason.as_str())
    }
}

/// `Bad Gateway` for 502: the words after the code in an HTTP status line.
fn canonical_reason(code: &u16) -> &'static str {
    StatusCode::from_u16(*code)
        .ok()
        .and_then(|code| code.canonical_reason())
        .unwrap_or("")
}

/// How much of a non-Status error body goes into an error message.
const SNIPPET_CHARS: usize = 200;

/// The start of a body, whitespace collapsed, for error messages.
pub(super) fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.is_empty() {
        return "(empty body)".into();
    }
    let mut cut: String = collapsed.chars().take(SNIPPET_CHARS).collect();
    if collapsed.chars().count() > SNIPPET_CHARS {
        cut.push_str("...");
    }
    cut
}

/// An error and its sources, so "connection refused" is not hidden behind "client error (Connect)".
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    for cause in std::iter::successors(error.source(), |&cause| cause.source()) {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
    }
    text
}
