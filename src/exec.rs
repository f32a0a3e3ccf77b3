//! Support: skip it on first read — how a command reaches a pod; the round only asks `psql` a
//! question and reads the answer.
//!
//! `pods/exec`: run a command in a pod's container and collect its output and exit code, as
//! `kubectl exec` does. Step 04's operator asks Postgres questions this way
//! (`psql -Atc 'select pg_is_in_recovery()'` in the pod), and promotes a replica the same way.
//!
//! WORKSHOP.md, step 05 ("One `pods/exec`, byte by byte"). One GET with an HTTP/1.1
//! `Upgrade: websocket` ([`Client::upgrade`]: the client's TLS and bearer token), offering the
//! `v5.channel.k8s.io` subprotocol and `v4.channel.k8s.io` after it. From then on every binary
//! WebSocket message belongs to one stream of the process, named by the message's first byte:
//!
//! ```text
//! operator                                                     API server -> kubelet -> container
//!    |  GET /api/v1/namespaces/NS/pods/P/exec?command=psql&command=-Atc&command=select+1
//!    |      &container=postgres&stdout=true&stderr=true
//!    |  Upgrade: websocket   Sec-WebSocket-Protocol: v5.channel.k8s.io, v4.channel.k8s.io
//!    | --------------------------------------------------------------------------------> |
//!    | <------------ 101 Switching Protocols   Sec-WebSocket-Protocol: v5.channel.k8s.io |
//!    | -- 00 "..."      stdin (only when asked for: stdin=true) -----------------------> |
//!    | -- ff 00         v5 only: stdin is closed (EOF) --------------------------------> |
//!    | <----------------------------------------------- 01 31 0a   stdout: "1\n"         |
//!    | <----------------------------------------------- 02 "..."   stderr                |
//!    | <---------------- 03 {"metadata":{},"status":"Success"}     the exit Status       |
//!    | <----------------------------------------------- Close 1000 (normal)              |
//! ```
//!
//! The WebSocket framing (masking, fragments, pings, the close handshake, size limits) is
//! tungstenite's; the stream bytes and the exit Status are this file's. Stream 3 carries a
//! `metav1.Status`: `Success` is exit code 0; `Failure` with reason `NonZeroExitCode` carries the
//! code in `details.causes[{reason: ExitCode, message: "N"}]`; any other `Failure` (the command
//! could not start, the container went away) is an [`ExecError::Failed`].
//!
//! Limits, because nothing a server sends may exhaust the operator: output past
//! [`ExecLimits::max_output`] (4 MiB by default) ends the exec with an error, one WebSocket
//! message may not exceed [`MAX_MESSAGE_BYTES`], and the whole exec has a deadline
//! ([`ExecLimits::timeout`], 30 s by default: the queries the operator runs take milliseconds).
//!
//! Where it simplifies: stdin is sent whole before any output is read. That suits the few lines
//! of SQL an operator sends; a command that writes more than the socket buffers hold before it
//! has read all its input would stall until the deadline. No terminal (`tty`), so no resize.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::handshake::client::generate_key;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

use crate::client::{Client, ClientError, Outgoing};
use crate::status::Status;

/// The largest WebSocket message (and frame) accepted, whatever [`ExecLimits::max_output`]
/// says: the kubelet sends output in pieces of at most 32 KiB, and tungstenite refuses a bigger
/// frame from its header, before reading (or allocating for) its payload.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// The most stdin bytes one message carries.
const STDIN_CHUNK: usize = 32 * 1024;

/// The streams of the channel protocol: a message's first byte.
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
/// The exit Status (called the "error" stream in client-go).
const STATUS: u8 = 3;
/// Terminal size changes (client to server, with a tty only).
const RESIZE: u8 = 4;
/// v5 only: `[255, stream]` says "this stream is closed"; `[255, 0]` is EOF on stdin.
const CLOSE_STREAM: u8 = 255;

/// The subprotocols of `channel.k8s.io` this file speaks. v5 (Kubernetes 1.30+) is v4 plus the
/// close signal; v1–v3 put plain text, not a Status, on stream 3, and are not offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChannelProtocol {
    V5,
    V4,
}

impl ChannelProtocol {
    fn name(self) -> &'static str {
        match self {
            ChannelProtocol::V5 => "v5.channel.k8s.io",
            ChannelProtocol::V4 => "v4.channel.k8s.io",
        }
    }
}

/// What a command left behind: everything it wrote, and how it ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// 0 for success; a command killed by a signal reports 128 + the signal, as a shell does.
    pub exit_code: i32,
}

impl ExecOutput {
    /// Stdout as text, without its final newline: `psql -Atc 'select 1'` gives `"1"`.
    pub fn stdout_text(&self) -> String {
        text(&self.stdout)
    }

    /// Stderr as text, without its final newline.
    pub fn stderr_text(&self) -> String {
        text(&self.stderr)
    }
}

fn text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.strip_suffix('\n').unwrap_or(&text).to_string()
}

/// How long one exec may take and how much it may print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecLimits {
    /// The whole exec, upgrade to exit status: 30 s by default.
    pub timeout: Duration,
    /// The most stdout + stderr (+ the Status) one exec collects: 4 MiB by default. A psql
    /// answer the operator reads is a few bytes; a command that prints more is not one it runs.
    pub max_output: usize,
}

impl Default for ExecLimits {
    fn default() -> Self {
        ExecLimits {
            timeout: Duration::from_secs(30),
            max_output: 4 * 1024 * 1024,
        }
    }
}

/// Why an exec has no [`ExecOutput`]. A command that ran and exited non-zero is not an error:
/// its exit code is in the output. Each variant names the pod (`namespace/name`), never the
/// command, which may carry SQL the operator would rather not print.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The API server did not switch protocols: it refused (403 without RBAC `get`, and since
    /// Kubernetes 1.35 `create`, on `pods/exec`; 404 for a pod that is gone; 400 for a container
    /// that is not running), could not be reached, or answered 101 but the connection could not
    /// be taken over ([`UpgradeError`]). [`ExecError::status_code`] gives the HTTP status of a
    /// refusal.
    #[error("exec in pod {pod}: {source}")]
    Upgrade {
        pod: String,
        // Boxed: it carries a ClientError, which is large, and every exec result would carry
        // its size.
        #[source]
        source: Box<UpgradeError>,
    },
    /// The 101 answer is not the WebSocket handshake we asked for.
    #[error("exec in pod {pod}: the WebSocket handshake is wrong: {problem}")]
    Handshake { pod: String, problem: String },
    /// The server chose v4, which has no way to close stdin: a command reading its input to
    /// the end would never finish.
    #[error("exec in pod {pod}: the API server speaks only v4.channel.k8s.io, which cannot close stdin (v5 needs Kubernetes 1.30 or later); put the input in the command instead")]
    StdinNeedsV5 { pod: String },
    /// The WebSocket failed mid-exec: a frame was malformed, a message was larger than
    /// [`MAX_MESSAGE_BYTES`], or sending stdin failed. (A connection that ends while the output
    /// is read is [`ExecError::NoStatus`].)
    #[error("exec in pod {pod}: the WebSocket failed: {source}")]
    WebSocket {
        pod: String,
        #[source]
        source: Box<tungstenite::Error>,
    },
    /// A message the channel protocol does not allow: an unknown stream, a text message, a
    /// stream 3 that is not a Status.
    #[error("exec in pod {pod}: the server broke the channel.k8s.io protocol: {problem}")]
    Protocol { pod: String, problem: String },
    /// The server's Failure Status: the command could not be run (not in the image, the
    /// container gone), as `kubectl exec` prints it.
    #[error("exec in pod {pod}: {reason}: {message}", reason = .status.reason, message = .status.message)]
    Failed { pod: String, status: Box<Status> },
    /// The connection ended before an exit Status came: the API server or the kubelet went away
    /// mid-command, so whether it ran to its end is unknown.
    #[error("exec in pod {pod}: the connection ended without an exit status; the command may or may not have finished")]
    NoStatus { pod: String },
    /// The command printed more than [`ExecLimits::max_output`].
    #[error("exec in pod {pod}: the output is larger than the cap of {limit} bytes; print less (psql -At with a LIMIT), or raise ExecLimits::max_output")]
    OutputTooLarge { pod: String, limit: usize },
    /// No exit Status within [`ExecLimits::timeout`].
    #[error("exec in pod {pod}: no exit status within {}s", .after.as_secs_f64())]
    Timeout { pod: String, after: Duration },
}

impl ExecError {
    /// The HTTP status of a refused upgrade (403, 404...), or of the server's Failure Status.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            ExecError::Upgrade { source, .. } => match source.as_ref() {
                UpgradeError::Request(error) => error.status_code(),
                _ => None,
            },
            ExecError::Failed { status, .. } => (status.code != 0).then_some(status.code),
            _ => None,
        }
    }
}

/// Run `command` in `pod` (in `container`, or the pod's first one) within `limits`; `stdin`, if
/// given, is the command's whole input.
pub async fn exec(
    client: &Client,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    command: &[&str],
    stdin: Option<&[u8]>,
    limits: ExecLimits,
) -> Result<ExecOutput, ExecError> {
    let target = format!("{namespace}/{pod}");
    let path = exec_path(namespace, pod, container, command, stdin.is_some());
    let session = run_session(client, &target, &path, stdin, limits.max_output);
    tokio::time::timeout(limits.timeout, session)
        .await
        .map_err(|_| ExecError::Timeout {
            pod: target.clone(),
            after: limits.timeout,
        })?
}

/// `/api/v1/namespaces/NS/pods/P/exec?command=...`: `command` repeats, once per argument, in
/// order. stdout and stderr are always asked for; stdin only when there is input, or the
/// process would wait for an EOF that never comes. The URL is in the API server's audit log
/// (and in our debug log): a password goes on stdin, never in the command.
fn exec_path(
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    command: &[&str],
    stdin: bool,
) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for argument in command {
        query.append_pair("command", argument);
    }
    if let Some(container) = container {
        query.append_pair("container", container);
    }
    if stdin {
        query.append_pair("stdin", "true");
    }
    query.append_pair("stdout", "true");
    query.append_pair("stderr", "true");
    format!(
        "/api/v1/namespaces/{namespace}/pods/{pod}/exec?{}",
        query.finish()
    )
}

/// The client's half of the WebSocket handshake (RFC 6455 §4.1), and the subprotocols offered,
/// best first.
fn handshake_headers(key: &str) -> HeaderMap {
    // The key is base64 we generated: always a valid header value.
    let key = HeaderValue::from_str(key).expect("a base64 key is a valid header value");
    // ANCHOR: exec_headers
    let protocols = HeaderValue::from_static("v5.channel.k8s.io, v4.channel.k8s.io");
    HeaderMap::from_iter([
        (header::CONNECTION, HeaderValue::from_static("Upgrade")),
        (header::UPGRADE, HeaderValue::from_static("websocket")),
        (
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        ),
        (header::SEC_WEBSOCKET_KEY, key),
        (header::SEC_WEBSOCKET_PROTOCOL, protocols),
    ])
    // ANCHOR_END: exec_headers
}

/// Check the server's half of the handshake; the subprotocol it chose.
fn check_handshake(headers: &HeaderMap, key: &str) -> Result<ChannelProtocol, String> {
    let text = |name| headers.get(name).and_then(|value| value.to_str().ok());
    if !text(header::UPGRADE).is_some_and(|value| value.eq_ignore_ascii_case("websocket")) {
        return Err(format!(
            "the 101 answer upgrades to {:?}, not to websocket",
            text(header::UPGRADE).unwrap_or("nothing")
        ));
    }
    // Proof that the answer is to this request, not a cached or replayed one.
    let expected = derive_accept_key(key.as_bytes());
    if text(header::SEC_WEBSOCKET_ACCEPT) != Some(expected.as_str()) {
        return Err(format!(
            "Sec-WebSocket-Accept is {:?}, not {expected:?}, the answer to our key",
            text(header::SEC_WEBSOCKET_ACCEPT).unwrap_or("missing")
        ));
    }
    match text(header::SEC_WEBSOCKET_PROTOCOL) {
        Some("v5.channel.k8s.io") => Ok(ChannelProtocol::V5),
        Some("v4.channel.k8s.io") => Ok(ChannelProtocol::V4),
        Some(other) => Err(format!(
            "the server chose the subprotocol {other:?}, which we did not offer"
        )),
        // An API server that chose none would speak v1, whose stream 3 is not a Status.
        None => {
            Err("the server chose no subprotocol (v5.channel.k8s.io or v4.channel.k8s.io)".into())
        }
    }
}

impl Client {
    /// GET with `headers` asking to switch protocols (`Connection: Upgrade`, `Upgrade: websocket`
    /// and the WebSocket handshake), and the connection once the server answers `101 Switching
    /// Protocols`: the one verb step 04 adds to the client (`src/client/`). The request goes out
    /// as every other does: the same TLS configuration and token, the same retries after
    /// 401/429/503, the same typed error for a refusal (403 without RBAC `get`, and since
    /// Kubernetes 1.35 `create`, on `pods/exec`; 404 for a pod that is gone). Checking the
    /// handshake is `check_handshake`'s.
    pub async fn upgrade(
        &self,
        path_and_query: &str,
        headers: HeaderMap,
    ) -> Result<UpgradedConnection, UpgradeError> {
        let request = Outgoing {
            headers,
            ..Outgoing::get(path_and_query)
        };
        let response = self.send_with_retries(&request).await?;
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            let code = response.status().as_u16();
            return Err(UpgradeError::NotUpgraded { code });
        }
        let headers = response.headers().clone();
        // hyper's connection task hands the socket (with any bytes it read past the 101 head)
        // over once it has seen the 101; the pool never gets this connection back.
        let io = tokio::time::timeout(self.request_timeout(), hyper::upgrade::on(response))
            .await
            .map_err(|_| self.timeout_error(&Method::GET, path_and_query))?
            .map_err(UpgradeError::TakeOver)?;
        Ok(UpgradedConnection { headers, io })
    }
}

/// Why [`Client::upgrade`] has no connection.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    /// The request failed or was refused, as any request can be.
    #[error(transparent)]
    Request(#[from] ClientError),
    /// A 2xx answer instead of `101 Switching Protocols`: something between us and the API
    /// server does not pass upgrades on.
    #[error("asked to upgrade the connection, got HTTP {code} instead of 101 Switching Protocols (a proxy in the way that does not pass upgrades on?)")]
    NotUpgraded { code: u16 },
    /// The server said `101 Switching Protocols`, but hyper could not hand over the connection.
    #[error("the connection could not be taken over after 101 Switching Protocols: {0}")]
    TakeOver(#[source] hyper::Error),
}

/// A connection the API server switched to another protocol with `101 Switching Protocols`
/// ([`Client::upgrade`]): the answer's headers, to check the handshake, and the raw connection
/// (TLS already inside) to speak that protocol on.
#[derive(Debug)]
pub struct UpgradedConnection {
    pub headers: HeaderMap,
    pub io: hyper::upgrade::Upgraded,
}

type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Upgrade, send stdin, collect the streams until the server closes, read the exit Status.
async fn run_session(
    client: &Client,
    pod: &str,
    path: &str,
    stdin: Option<&[u8]>,
    max_output: usize,
) -> Result<ExecOutput, ExecError> {
    let key = generate_key();
    let upgraded = client
        .upgrade(path, handshake_headers(&key))
        .await
        .map_err(|source| ExecError::Upgrade {
            pod: pod.to_string(),
            source: Box::new(source),
        })?;
    let protocol =
        check_handshake(&upgraded.headers, &key).map_err(|problem| ExecError::Handshake {
            pod: pod.to_string(),
            problem,
        })?;
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES))
        // Allocated up front for each connection; a psql answer fits many times over.
        .read_buffer_size(16 * 1024);
    let mut socket =
        WebSocketStream::from_raw_socket(TokioIo::new(upgraded.io), Role::Client, Some(config))
            .await;
    if let Some(input) = stdin {
        if protocol == ChannelProtocol::V4 {
            return Err(ExecError::StdinNeedsV5 {
                pod: pod.to_string(),
            });
        }
        send_stdin(&mut socket, input)
            .await
            .map_err(|source| websocket_error(pod, source))?;
    }
    let received = receive(&mut socket, protocol, pod, max_output).await?;
    if received.status.is_empty() {
        return Err(ExecError::NoStatus {
            pod: pod.to_string(),
        });
    }
    Ok(ExecOutput {
        exit_code: exit_code(pod, &received.status)?,
        stdout: received.stdout,
        stderr: received.stderr,
    })
}

/// Stdin in pieces on stream 0, then `[255, 0]`: the process reads EOF.
async fn send_stdin(socket: &mut Socket, input: &[u8]) -> Result<(), tungstenite::Error> {
    for piece in input.chunks(STDIN_CHUNK) {
        // The stream's number, then the data.
        socket
            .feed(Message::binary([&[STDIN], piece].concat()))
            .await?;
    }
    socket
        .feed(Message::binary(vec![CLOSE_STREAM, STDIN]))
        .await?;
    socket.flush().await
}

/// One binary message from the server, by its first byte.
#[derive(Debug, PartialEq, Eq)]
enum FromServer<'a> {
    Stdout(&'a [u8]),
    Stderr(&'a [u8]),
    Status(&'a [u8]),
    /// An empty message, a stream's number with no data (a server may send one as a stream
    /// opens), or a stream closed (`[255, n]`, v5): nothing to collect.
    Nothing,
}

/// Bytes → message. Anything else than the streams above is the server breaking the protocol.
// ANCHOR: exec_decode
fn decode(protocol: ChannelProtocol, message: &[u8]) -> Result<FromServer<'_>, String> {
    match message {
        [] | [STDIN | RESIZE] => Ok(FromServer::Nothing),
        [STDOUT, data @ ..] => Ok(FromServer::Stdout(data)),
        [STDERR, data @ ..] => Ok(FromServer::Stderr(data)),
        [STATUS, data @ ..] => Ok(FromServer::Status(data)),
        [CLOSE_STREAM, STDOUT | STDERR | STATUS] if protocol == ChannelProtocol::V5 => {
            Ok(FromServer::Nothing)
        }
        [stream, ..] => Err(format!(
            "a message of {} bytes on stream {stream}, which {} does not have for a server to write",
            message.len(),
            protocol.name()
        )),
    }
}
// ANCHOR_END: exec_decode

/// What the streams carried, bounded by a cap on the total.
#[derive(Debug, Default)]
struct Received {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    status: Vec<u8>,
    limit: usize,
}

impl Received {
    /// Keep one message's data; `Err` when the total would pass the limit.
    fn keep(&mut self, message: FromServer<'_>) -> Result<(), usize> {
        let total = self.stdout.len() + self.stderr.len() + self.status.len();
        let (buffer, data) = match message {
            FromServer::Stdout(data) => (&mut self.stdout, data),
            FromServer::Stderr(data) => (&mut self.stderr, data),
            // client-go reads stream 3 to its end before decoding: a Status may come in pieces.
            FromServer::Status(data) => (&mut self.status, data),
            FromServer::Nothing => return Ok(()),
        };
        if data.len() > self.limit - total {
            return Err(self.limit);
        }
        buffer.extend_from_slice(data);
        Ok(())
    }
}

/// Read messages until the server ends the WebSocket (the kubelet closes it after the Status).
async fn receive(
    socket: &mut Socket,
    protocol: ChannelProtocol,
    pod: &str,
    limit: usize,
) -> Result<Received, ExecError> {
    let mut received = Received {
        limit,
        ..Received::default()
    };
    while let Some(message) = socket.next().await {
        let message = match message {
            Ok(message) => message,
            // However the connection ended, whether the Status came first decides the rest.
            Err(error) if is_connection_end(&error) => break,
            Err(source) => return Err(websocket_error(pod, source)),
        };
        let protocol_error = |problem| ExecError::Protocol {
            pod: pod.to_string(),
            problem,
        };
        match message {
            Message::Binary(data) => {
                let part = decode(protocol, &data).map_err(protocol_error)?;
                received
                    .keep(part)
                    .map_err(|limit| ExecError::OutputTooLarge {
                        pod: pod.to_string(),
                        limit,
                    })?;
            }
            Message::Text(_) => {
                return Err(protocol_error(
                    "a text message; channel.k8s.io sends binary ones (text is base64.channel.k8s.io, not offered)".into(),
                ))
            }
            // tungstenite answers pings, and the server's Close, itself; after the Close the
            // stream ends.
            Message::Ping(_) | Message::Pong(_) | Message::Close(_) | Message::Frame(_) => {}
        }
    }
    Ok(received)
}

/// The connection ended, cleanly or not. After its Close frame a server may drop TCP without
/// TLS's close_notify (the sandbox does), which rustls reports as an `UnexpectedEof` I/O error.
fn is_connection_end(error: &tungstenite::Error) -> bool {
    matches!(
        error,
        tungstenite::Error::ConnectionClosed
            | tungstenite::Error::AlreadyClosed
            | tungstenite::Error::Io(_)
            | tungstenite::Error::Protocol(ProtocolError::ResetWithoutClosingHandshake)
    )
}

fn websocket_error(pod: &str, source: tungstenite::Error) -> ExecError {
    ExecError::WebSocket {
        pod: pod.to_string(),
        source: Box::new(source),
    }
}

/// The exit code the Status on stream 3 reports, as client-go reads it: `Success` is 0,
/// `NonZeroExitCode` names the code in its `ExitCode` cause, any other Failure is an error.
fn exit_code(pod: &str, status: &[u8]) -> Result<i32, ExecError> {
    let protocol_error = |problem: String| ExecError::Protocol {
        pod: pod.to_string(),
        problem,
    };
    // The kubelet's Status has no `kind`; only `status` says what it is.
    let status: Status = serde_json::from_slice(status).map_err(|error| {
        protocol_error(format!(
            "stream 3 is not a Status ({error}): {}",
            String::from_utf8_lossy(&status[..status.len().min(200)])
        ))
    })?;
    // ANCHOR: exec_exit_code
    match status.status.as_str() {
        "Success" => Ok(0),
        "Failure" if status.reason == "NonZeroExitCode" => {
            let causes = status.details.iter().flat_map(|details| &details.causes);
            let code = causes
                .filter(|cause| cause.reason == "ExitCode")
                .find_map(|cause| cause.message.parse::<u8>().ok());
            code.map(i32::from).ok_or_else(|| {
                protocol_error(format!(
                    "a NonZeroExitCode Status without an ExitCode cause of 0-255: {}",
                    status.message
                ))
            })
        }
        "Failure" => Err(ExecError::Failed {
            pod: pod.to_string(),
            status: Box::new(status),
        }),
        // ANCHOR_END: exec_exit_code
        other => Err(protocol_error(format!(
            "a Status on stream 3 whose status is {other:?}, neither Success nor Failure"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_repeats_command_once_per_argument_in_order() {
        let path = exec_path(
            "db",
            "pg-0",
            Some("postgres"),
            &["psql", "-Atc", "select 1 & 2"],
            false,
        );
        assert_eq!(
            path,
            "/api/v1/namespaces/db/pods/pg-0/exec?command=psql&command=-Atc&command=select+1+%26+2&container=postgres&stdout=true&stderr=true"
        );
        let with_stdin = exec_path("db", "pg-0", None, &["cat"], true);
        assert_eq!(
            with_stdin,
            "/api/v1/namespaces/db/pods/pg-0/exec?command=cat&stdin=true&stdout=true&stderr=true"
        );
    }

    #[test]
    fn the_exit_code_comes_from_the_status_on_stream_3() {
        assert_eq!(
            exit_code("ns/p", br#"{"metadata":{},"status":"Success"}"#).unwrap(),
            0
        );
        let failed = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: exit status 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        assert_eq!(exit_code("ns/p", failed).unwrap(), 3);
    }

    #[test]
    fn a_failure_that_is_not_an_exit_code_is_an_error_with_its_message() {
        let internal = br#"{"metadata":{},"status":"Failure","message":"error executing command in container: not found","reason":"InternalError","code":500}"#;
        let error = exit_code("ns/p", internal).unwrap_err();
        assert!(matches!(error, ExecError::Failed { .. }), "{error:?}");
        assert_eq!(error.status_code(), Some(500));
        assert_eq!(
            error.to_string(),
            "exec in pod ns/p: InternalError: error executing command in container: not found"
        );
        let no_cause = br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"-1"}]}}"#;
        assert!(matches!(
            exit_code("ns/p", no_cause),
            Err(ExecError::Protocol { .. })
        ));
        assert!(matches!(
            exit_code("ns/p", b"exit 3"),
            Err(ExecError::Protocol { .. })
        ));
        assert!(matches!(
            exit_code("ns/p", br#"{"status":"Pending"}"#),
            Err(ExecError::Protocol { .. })
        ));
    }

    #[test]
    fn messages_are_told_apart_by_their_first_byte() {
        let v5 = ChannelProtocol::V5;
        assert_eq!(decode(v5, b"\x011\n"), Ok(FromServer::Stdout(b"1\n")));
        assert_eq!(decode(v5, b"\x02oops"), Ok(FromServer::Stderr(b"oops")));
        assert_eq!(decode(v5, b"\x03{}"), Ok(FromServer::Status(b"{}")));
        // Each stream opens with its number alone; v5 closes them with [255, n].
        assert_eq!(decode(v5, &[0]), Ok(FromServer::Nothing));
        assert_eq!(decode(v5, &[]), Ok(FromServer::Nothing));
        assert_eq!(decode(v5, &[255, 1]), Ok(FromServer::Nothing));
        assert!(decode(ChannelProtocol::V4, &[255, 1]).is_err());
        assert!(decode(v5, b"\x00data for stdin?").is_err());
        let unknown = decode(v5, b"\x07x").unwrap_err();
        assert!(unknown.contains("stream 7"), "{unknown}");
    }

    #[test]
    fn output_past_the_cap_is_refused_not_kept() {
        let mut received = Received {
            limit: 4,
            ..Received::default()
        };
        assert_eq!(received.keep(FromServer::Stdout(b"12")), Ok(()));
        assert_eq!(received.keep(FromServer::Stderr(b"3")), Ok(()));
        assert_eq!(received.keep(FromServer::Status(b"45")), Err(4));
        assert_eq!(received.keep(FromServer::Stdout(b"4")), Ok(()));
        assert_eq!(received.keep(FromServer::Stdout(b"5")), Err(4));
        assert_eq!(
            (received.stdout, received.stderr),
            (b"124".to_vec(), b"3".to_vec())
        );
    }

    #[test]
    fn the_handshake_must_answer_our_key_with_a_protocol_we_offered() {
        let key = "dGhlIHNhbXBsZSBub25jZQ==";
        let answer = |protocol: Option<&'static str>, accept: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
            headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept.parse().unwrap());
            if let Some(protocol) = protocol {
                headers.insert(header::SEC_WEBSOCKET_PROTOCOL, protocol.parse().unwrap());
            }
            headers
        };
        // RFC 6455's own example key and answer.
        let accept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";
        let v5 = answer(Some("v5.channel.k8s.io"), accept);
        assert_eq!(check_handshake(&v5, key), Ok(ChannelProtocol::V5));
        let v4 = answer(Some("v4.channel.k8s.io"), accept);
        assert_eq!(check_handshake(&v4, key), Ok(ChannelProtocol::V4));
        assert!(check_handshake(&answer(Some("v5.channel.k8s.io"), "bad="), key).is_err());
        assert!(check_handshake(&answer(Some("channel.k8s.io"), accept), key).is_err());
        assert!(check_handshake(&answer(None, accept), key).is_err());
        let offered = handshake_headers(key);
        assert_eq!(
            offered[header::SEC_WEBSOCKET_PROTOCOL],
            "v5.channel.k8s.io, v4.channel.k8s.io"
        );
    }

    #[test]
    fn text_drops_one_final_newline() {
        let output = ExecOutput {
            stdout: b"1\n".to_vec(),
            stderr: b"a\n\n".to_vec(),
            exit_code: 0,
        };
        assert_eq!(output.stdout_text(), "1");
        assert_eq!(output.stderr_text(), "a\n");
    }
}
