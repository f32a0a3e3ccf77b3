//! Support: skip it on first read — a request's happy path is `mod.rs`'s `send`; this file is every
//! way an answer can go wrong, and what Kubernetes asks a client to do about each.
//!
//! Everything after a request goes out, as Kubernetes asks of a client: retries after 401 (a
//! rotated token), 429 and 503 (`Retry-After`, bounded); a refusal turned into a typed error (the
//! `Status` body, or the code and a snippet); and a body read within its cap and its time.
//! WORKSHOP.md, "When the server says no" (Set-up).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, Method, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body as _, Incoming};
use tokio::time::Instant;

use super::error::snippet;
use super::{Client, ClientError, Outgoing, RequestError};
use crate::status::Status;

impl Client {
    /// Send until the answer is 2xx or 101 (returned with its body still unread, so a watch can
    /// stream it, or `pods/exec` take the connection over) or an error not worth retrying. Each
    /// attempt's wait for the response head is bounded by the request timeout.
    pub(crate) async fn send_with_retries(
        &self,
        request: &Outgoing<'_>,
    ) -> Result<hyper::Response<Incoming>, ClientError> {
        let (method, path) = (&request.method, request.path);
        let mut retries = Retries::default();
        loop {
            let started = Instant::now();
            self.pass_gate(request)?;
            // Every attempt sends the request as its caller asked for it (with the token of the
            // moment).
            let sent = self.send(request);
            let response = tokio::time::timeout(self.inner.request_timeout, sent)
                .await
                .map_err(|_| self.timeout_error(method, path))
                .and_then(|sent| sent);
            if let Some(observer) = &self.observer {
                observer(method, response.as_ref().ok().map(|r| r.status()));
            }
            let response = response?;
            let status = response.status();
            // Method, path, status and time; never headers (they carry the token).
            tracing::debug!(
                method = %method,
                path,
                status = status.as_u16(),
                ms = started.elapsed().as_millis() as u64,
                "request"
            );
            // 101: the server took up our `Upgrade` (pods/exec); it sends one only when asked.
            if status.is_success() || status == StatusCode::SWITCHING_PROTOCOLS {
                return Ok(response);
            }
            let headers = response.headers().clone();
            let answer = Answer {
                status,
                headers,
                body: self.read_body_in_time(method, path, response).await?,
            };
            match self.retry_wait(&answer, &mut retries) {
                Some(wait) => {
                    tracing::info!(
                        method = %method,
                        path,
                        code = status.as_u16(),
                        wait_ms = wait.as_millis() as u64,
                        "retrying request"
                    );
                    tokio::time::sleep(wait).await;
                }
                None => return Err(error_from_answer(method, path, &answer)),
            }
        }
    }

    /// Ask the gate ([`Client::gated_by`]) about a request that may change something, at each
    /// attempt and just before it: a pause since the last attempt may have cost the Lease.
    fn pass_gate(&self, request: &Outgoing<'_>) -> Result<(), ClientError> {
        let reads = matches!(request.method, Method::GET | Method::HEAD)
            && !request.headers.contains_key(header::UPGRADE);
        match &self.gate {
            Some(gate) if !reads => gate().map_err(|why| {
                ClientError::request(
                    &request.method,
                    request.path,
                    RequestError::HeldBack { why },
                )
            }),
            _ => Ok(()),
        }
    }

    /// The whole body of a (non-watch) response, bounded by the request timeout.
    pub(super) async fn read_body_in_time(
        &self,
        method: &Method,
        path: &str,
        response: hyper::Response<Incoming>,
    ) -> Result<Bytes, ClientError> {
        tokio::time::timeout(
            self.inner.request_timeout,
            read_body(method, path, response.into_body(), self.max_response_body),
        )
        .await
        .map_err(|_| self.timeout_error(method, path))?
    }

    /// Whether (and after how long) to retry after this error answer.
    fn retry_wait(&self, answer: &Answer, retries: &mut Retries) -> Option<Duration> {
        match answer.status {
            // 401: a bound token expired and the kubelet wrote a new one; try it, once.
            StatusCode::UNAUTHORIZED if !retries.reloaded_token => {
                retries.reloaded_token = true;
                self.inner.token.reload().then_some(Duration::ZERO)
            }
            // 429 (API priority and fairness) and 503 (apiserver starting, or overloaded): the
            // server says how long to wait; respect it, within bounds.
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
                if retries.throttled < MAX_THROTTLE_RETRIES =>
            {
                retries.throttled += 1;
                Some(retry_after(answer).min(MAX_RETRY_WAIT))
            }
            _ => None,
        }
    }

    pub(crate) fn timeout_error(&self, method: &Method, path: &str) -> ClientError {
        let after = self.inner.request_timeout;
        ClientError::request(method, path, RequestError::Timeout { after })
    }
}

/// The response head and the full body of one attempt.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

/// Most times one request is retried after 429/503.
pub const MAX_THROTTLE_RETRIES: u32 = 3;
/// Longest single wait after 429/503, whatever the server asks for: a stage should not hang
/// silently for minutes because a proxy sent `Retry-After: 3600`.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(10);
/// The wait after 429/503 when the server did not say how long.
pub const DEFAULT_RETRY_WAIT: Duration = Duration::from_secs(1);
/// The most bytes of one (non-watch) response body we buffer, unless told otherwise
/// ([`Client::with_max_response_body`]). Large enough for an unpaged list of tens of thousands of
/// custom objects (etcd caps each at 1.5 MiB, typical ones are a few KiB) or thousands of pods
/// with their managedFields; a collection bigger than this should be read in pages
/// (`limit`/`continue`) anyway. Without a cap, a server streaming an endless body (2xx or error)
/// makes us allocate until the process is killed.
pub const DEFAULT_MAX_RESPONSE_BODY: usize = 64 * 1024 * 1024;

#[derive(Default)]
struct Retries {
    reloaded_token: bool,
    throttled: u32,
}

/// The whole body, but never more than `limit` bytes: past that, the request fails with
/// `BodyTooLarge` and the connection is dropped instead of read to its (maybe endless) end.
async fn read_body(
    method: &Method,
    path: &str,
    mut body: Incoming,
    limit: usize,
) -> Result<Bytes, ClientError> {
    let too_large = || ClientError::request(method, path, RequestError::BodyTooLarge { limit });
    // A Content-Length over the cap fails before a byte of the body is read.
    if body.size_hint().lower() > limit as u64 {
        return Err(too_large());
    }
    let mut collected = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|source| ClientError::request(method, path, RequestError::ReadBody(source)))?;
        // Trailers carry no body bytes.
        if let Ok(data) = frame.into_data() {
            if data.len() > limit - collected.len() {
                return Err(too_large());
            }
            collected.extend_from_slice(&data);
        }
    }
    Ok(collected.freeze())
}

/// A non-2xx answer as an error: the `Status` if the body is one, otherwise the code and a snippet.
fn error_from_answer(method: &Method, path: &str, answer: &Answer) -> ClientError {
    let code = answer.status.as_u16();
    let kind = match Status::from_body(&answer.body) {
        Some(mut status) => {
            if status.code == 0 {
                status.code = code;
            }
            RequestError::Api(Box::new(status))
        }
        None => RequestError::Http {
            code,
            body: snippet(&answer.body),
        },
    };
    ClientError::request(method, path, kind)
}

/// `Retry-After: N` (seconds), else the Status's `details.retryAfterSeconds`, else a default.
fn retry_after(answer: &Answer) -> Duration {
    let from_header = answer
        .headers
        .get(header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let from_status = || Status::from_body(&answer.body).and_then(|status| status.retry_after());
    from_header
        .or_else(from_status)
        .unwrap_or(DEFAULT_RETRY_WAIT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn retry_after_prefers_the_header_then_the_status() {
        let mut status = Status::failure(429, "TooManyRequests", "slow down");
        status.details = Some(crate::status::StatusDetails {
            retry_after_seconds: Some(4),
            ..Default::default()
        });
        let body = Bytes::from(serde_json::to_vec(&status).unwrap());
        let mut answer = Answer {
            status: StatusCode::TOO_MANY_REQUESTS,
            headers: HeaderMap::new(),
            body,
        };
        assert_eq!(retry_after(&answer), Duration::from_secs(4));
        answer
            .headers
            .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
        assert_eq!(retry_after(&answer), Duration::from_secs(2));
        answer.body = Bytes::new();
        answer.headers.clear();
        assert_eq!(retry_after(&answer), DEFAULT_RETRY_WAIT);
    }
}
