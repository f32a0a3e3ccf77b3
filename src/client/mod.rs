//! The HTTP client every stage talks to the API server with. One request is what this file
//! opens with: `Outgoing` (a method, a path under the server's URL, a body, any extra headers),
//! which `Client::send` sends with `Accept: application/json`, our `User-Agent`, and
//! `Authorization: Bearer <token>` — what `curl -H` would send. Then the JSON verbs (`get`,
//! `create`, `replace`, `patch`, `delete`). The later steps add their own verb where they teach
//! it: a watch's byte stream (`Client::stream`, step 02's `watch/frame.rs`) and `pods/exec`'s
//! upgraded connection (`Client::upgrade`, step 04's `exec.rs`).
//!
//! WORKSHOP.md, step 01, and "Talking to the API server" and "When the server says no" (Set-up).
//! The handle itself, `Client` (`handle.rs`), is hyper-util's pooled client over a rustls
//! connector (ring provider, `tls.rs`), verifying the server against the CA the
//! [`crate::config::Config`] names and nothing else.
//!
//! What it does for you, because Kubernetes says so (in `answer.rs`, `error.rs` and `token.rs`):
//! - every error body is a `Status`: decoded into [`RequestError::Api`]; a body that is not one (a
//!   proxy's HTML page) still becomes a readable [`RequestError::Http`];
//! - 401: the token file may have been rotated: re-read it and retry once;
//! - 429 and 503: wait for `Retry-After` (or `details.retryAfterSeconds`), bounded, then retry;
//! - a file-backed token is re-read at least every minute (bound tokens expire in about an hour).

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request};
use http_body_util::Full;
use hyper::body::Incoming;
use serde::de::DeserializeOwned;
use serde::Serialize;

mod answer;
mod error;
mod handle;
mod tls;
mod token;

pub use answer::{
    DEFAULT_MAX_RESPONSE_BODY, DEFAULT_RETRY_WAIT, MAX_RETRY_WAIT, MAX_THROTTLE_RETRIES,
};
pub(crate) use error::error_chain;
use error::snippet;
pub use error::{ClientError, RequestError};
pub use handle::{Client, RequestGate, RequestObserver};
pub use token::TOKEN_REREAD_INTERVAL;

/// Sent with every request, so API server audit logs say who called.
pub const USER_AGENT: &str = concat!("postgres-operator/", env!("CARGO_PKG_VERSION"));

/// One request as its caller asks for it: every attempt sends it as it is.
pub(crate) struct Outgoing<'a> {
    pub method: Method,
    /// From `/`, with any `?query`.
    pub path: &'a str,
    /// The bytes and their `Content-Type`.
    pub body: Option<(Bytes, &'static str)>,
    /// Beside the ones every request carries.
    pub headers: HeaderMap,
}

impl Outgoing<'_> {
    pub fn get(path: &str) -> Outgoing<'_> {
        Outgoing {
            method: Method::GET,
            path,
            body: None,
            headers: HeaderMap::new(),
        }
    }
}

impl Client {
    /// Send one request and wait for the response head.
    async fn send(&self, request: &Outgoing<'_>) -> Result<hyper::Response<Incoming>, ClientError> {
        let (method, path) = (&request.method, request.path);
        if !path.starts_with('/') {
            return Err(ClientError::RelativePath {
                path: path.to_string(),
            });
        }
        let mut builder = Request::builder()
            .method(method.clone())
            // A path that makes no valid URI fails at `body` below, as `InvalidPath`.
            .uri(format!("{}{path}", self.inner.base))
            .header(header::ACCEPT, "application/json")
            .header(header::USER_AGENT, &*self.user_agent);
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        if let Some(token) = self.inner.token.current() {
            let mut value =
                HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|source| {
                    ClientError::request(method, path, RequestError::TokenNotAHeader(source))
                })?;
            // Keeps the token out of any header dump hyper or a proxy layer might log.
            value.set_sensitive(true);
            builder = builder.header(header::AUTHORIZATION, value);
        }
        let request = match &request.body {
            Some((bytes, content_type)) => builder
                .header(header::CONTENT_TYPE, *content_type)
                .body(Full::new(bytes.clone())),
            None => builder.body(Full::new(Bytes::new())),
        }
        .map_err(|source| ClientError::InvalidPath {
            path: path.to_string(),
            source,
        })?;

        self.inner.http.request(request).await.map_err(|source| {
            tracing::debug!(method = %method, path, error = %error_chain(&source), "request failed");
            let (is_connect, source) = (source.is_connect(), Box::new(source));
            let kind = if is_connect {
                let server = self.inner.base.clone();
                RequestError::Connect { server, source }
            } else {
                RequestError::Transport(source)
            };
            ClientError::request(method, path, kind)
        })
    }
}

impl Client {
    /// GET a JSON object. `path` may carry a `?query`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.json(Method::GET, path, None).await
    }

    /// POST a new object to a collection.
    pub async fn create<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.json_body(Method::POST, path, body, "application/json")
            .await
    }

    /// PUT a whole object. The body's `metadata.resourceVersion` makes it conditional: a stale
    /// one gets 409 Conflict.
    pub async fn replace<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.json_body(Method::PUT, path, body, "application/json")
            .await
    }

    /// PATCH an object; the [`Patch`] variant says which kind.
    pub async fn patch<T: DeserializeOwned>(
        &self,
        path: &str,
        patch: &Patch,
    ) -> Result<T, ClientError> {
        self.json_body(Method::PATCH, path, patch.value(), patch.content_type())
            .await
    }

    /// DELETE an object. The answer is the object (with a deletionTimestamp) or a Success Status.
    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.json(Method::DELETE, path, None).await
    }

    /// [`Client::json`] with `body` encoded as JSON and sent as `content_type`.
    async fn json_body<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &B,
        content_type: &'static str,
    ) -> Result<T, ClientError> {
        let body = serde_json::to_vec(body)
            .map_err(|source| ClientError::request(&method, path, RequestError::Encode(source)))?;
        self.json(method, path, Some((body.into(), content_type)))
            .await
    }

    /// One JSON request with the retries Kubernetes asks for; decodes a 2xx body into `T`.
    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<(Bytes, &'static str)>,
    ) -> Result<T, ClientError> {
        let request = Outgoing {
            method,
            body,
            ..Outgoing::get(path)
        };
        let response = self.send_with_retries(&request).await?;
        let method = request.method;
        let code = response.status().as_u16();
        let body = self.read_body_in_time(&method, path, response).await?;
        serde_json::from_slice(&body).map_err(|source| {
            let snippet = snippet(&body);
            ClientError::request(
                &method,
                path,
                RequestError::Decode {
                    code,
                    snippet,
                    source,
                },
            )
        })
    }
}

/// The body of a JSON patch request; the variant picks the `Content-Type`, which is how the API
/// server knows which patch semantics to apply.
#[derive(Clone, Debug)]
pub enum Patch {
    /// RFC 7386 JSON merge patch: `{"spec":{"size":5}}`; `null` deletes a field.
    Merge(serde_json::Value),
    /// RFC 6902 JSON patch: `[{"op":"replace","path":"/spec/size","value":5}]`.
    Json(serde_json::Value),
    /// Kubernetes' strategic merge patch: built-in types only (not custom resources).
    Strategic(serde_json::Value),
}

impl Patch {
    pub fn content_type(&self) -> &'static str {
        match self {
            Patch::Merge(_) => "application/merge-patch+json",
            Patch::Json(_) => "application/json-patch+json",
            Patch::Strategic(_) => "application/strategic-merge-patch+json",
        }
    }

    fn value(&self) -> &serde_json::Value {
        match self {
            Patch::Merge(value) | Patch::Json(value) | Patch::Strategic(value) => value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_are_short_and_single_line() {
        let html = format!("<html>\n  <body>{}</body></html>", "x".repeat(500));
        let text = snippet(html.as_bytes());
        assert!(text.starts_with("<html> <body>xxx"), "{text}");
        assert!(text.ends_with("..."));
        assert_eq!(snippet(b""), "(empty body)");
    }
}
