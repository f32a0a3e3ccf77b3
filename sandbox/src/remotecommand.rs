//! `kubectl exec` and `kubectl port-forward`: the WebSocket upgrade, the `channel.k8s.io`
//! streams, and the exit status.
//!
//! WORKSHOP.md, "Set-up: the sandbox". kubectl 1.30 and later open
//! `GET .../pods/NAME/exec?command=...` with `Upgrade: websocket` and
//! `Sec-WebSocket-Protocol: v5.channel.k8s.io`; only if that upgrade fails do they retry with a
//! SPDY POST, which the sandbox does not speak. Over the WebSocket, every binary message is one
//! stream's: its first byte says which (0 stdin, 1 stdout, 2 stderr, 3 the exit Status, 4 a
//! terminal resize), the rest is data. v5 adds `[255, stream]`: "this stream is closed", which
//! kubectl sends when its stdin ends. The process itself runs in `runtime/exec.rs`.
//!
//! Where it simplifies: stdin is buffered without bound between the WebSocket and the
//! process (a client can only send what it types or pipes); a resize after the start is
//! ignored. `port-forward` tunnels SPDY/3.1 inside the WebSocket; no well-kept crate frames
//! SPDY, so it is refused with a message that says to use the pod's or the Service's own
//! address, which the loopback addresses make reachable from this machine.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{header, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

use crate::body::ResponseBody;
use crate::errors::ApiError;
use crate::runtime::{ExecRequest, Node};

/// The subprotocols spoken, best first. v4 is v5 without the close signal (kubectl before 1.30
/// offers it, but over SPDY only; other clients may offer it over a WebSocket).
const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// The v5 "close this stream" message starts with this byte, then the stream's.
const CLOSE_SIGNAL: u8 = 255;

/// How long a TTY exec waits for kubectl's first resize message before it starts the command
/// with the pty's default size (kubectl sends the terminal's size as soon as it connects).
const FIRST_RESIZE_WAIT: Duration = Duration::from_secs(1);

/// How much of the process's output one message carries at most.
const CHUNK: usize = 32 * 1024;

/// The streams of the channel protocol, numbered as on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Stream {
    Stdin = 0,
    Stdout = 1,
    Stderr = 2,
    Error = 3,
    Resize = 4,
}

/// One message from the client, decoded.
#[derive(Debug, PartialEq, Eq)]
enum FromClient {
    Stdin(Bytes),
    CloseStdin,
    /// The terminal's size, from `{"Width":120,"Height":40}`.
    Resize {
        columns: u16,
        rows: u16,
    },
    /// Empty, for a stream we do not read, or malformed: nothing to do.
    Ignored,
}

/// Bytes → message: the first byte names the stream.
fn decode(message: &[u8]) -> FromClient {
    const STDIN: u8 = Stream::Stdin as u8;
    const RESIZE: u8 = Stream::Resize as u8;
    match message {
        [STDIN, data @ ..] => FromClient::Stdin(Bytes::copy_from_slice(data)),
        [CLOSE_SIGNAL, STDIN] => FromClient::CloseStdin,
        [RESIZE, size @ ..] => {
            let size: Value = serde_json::from_slice(size).unwrap_or(Value::Null);
            let dimension = |field: &str| size[field].as_u64().and_then(|v| u16::try_from(v).ok());
            match (dimension("Width"), dimension("Height")) {
                (Some(columns), Some(rows)) => FromClient::Resize { columns, rows },
                _ => FromClient::Ignored,
            }
        }
        _ => FromClient::Ignored,
    }
}

/// Message → bytes: the stream's number, then the data.
fn encode(stream: Stream, data: &[u8]) -> Vec<u8> {
    let mut message = Vec::with_capacity(data.len() + 1);
    message.push(stream as u8);
    message.extend_from_slice(data);
    message
}

/// What goes on the error stream when the command has ended: a `Status`, as the kubelet writes
/// it. kubectl turns `NonZeroExitCode`'s `ExitCode` cause into its own exit code.
fn exit_status(exit_code: i32, command: &[String]) -> Value {
    if exit_code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command [{}], exit code {exit_code}",
            command.join(" ")
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": exit_code.to_string()}]}
    })
}

/// A Failure on the error stream that is not an exit code (kubectl prints it, exits 1).
fn failure_status(message: &str) -> Value {
    json!({"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError", "code": 500})
}

/// The subprotocol to answer with, from the client's `Sec-WebSocket-Protocol` offers.
fn negotiate(offered: &str) -> Option<&'static str> {
    let offers: Vec<&str> = offered.split(',').map(str::trim).collect();
    PROTOCOLS.into_iter().find(|p| offers.contains(p))
}

/// `pods/NAME/exec`: check that the command can run, upgrade the connection to a WebSocket, and
/// carry the process's streams over it.
pub(crate) fn exec(
    node: Option<&Arc<Node>>,
    shutdown: CancellationToken,
    pod: &Value,
    mut request: Request<Incoming>,
) -> Result<Response<ResponseBody>, ApiError> {
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let Some(node) = node else {
        return Err(ApiError::bad_request(format!(
            "pod {pod_name} is simulated: no process runs, so there is nothing to exec into. Start the sandbox with --runtime processes (needs PostgreSQL and bubblewrap) to run pods for real"
        )));
    };
    let exec = ExecRequest::from_query(request.uri().query().unwrap_or_default());
    let prepared = node.prepare_exec(pod, &exec)?;
    let (protocol, accept) = websocket_handshake(request.headers())?;
    let upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let upgraded = match upgrade.await {
            Ok(upgraded) => upgraded,
            Err(error) => {
                tracing::debug!(%error, "exec: the WebSocket upgrade did not complete");
                return;
            }
        };
        let socket =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        run_session(socket, prepared, exec, shutdown).await;
    });
    Ok(switching_protocols(protocol, &accept))
}

/// `pods/NAME/portforward`: refused, with what to do instead.
pub(crate) fn port_forward(pod: &Value) -> ApiError {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let ip = pod["status"]["podIP"].as_str().unwrap_or("its pod IP");
    ApiError::bad_request(format!(
        "port-forward is not supported by the sandbox (kubectl tunnels SPDY/3.1 inside a WebSocket, which it does not speak). Pod addresses are reachable from this machine: connect to pod {name} at {ip} directly, or to a Service's ClusterIP (kubectl get svc)"
    ))
}

/// Check the upgrade request; the subprotocol chosen and the `Sec-WebSocket-Accept` value.
fn websocket_handshake(headers: &http::HeaderMap) -> Result<(&'static str, String), ApiError> {
    let text = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    if !text(header::UPGRADE).eq_ignore_ascii_case("websocket") {
        // kubectl's fallback after a failed WebSocket upgrade, or a kubectl older than 1.30.
        return Err(ApiError::bad_request(
            "exec needs a WebSocket upgrade (v5.channel.k8s.io); the sandbox does not speak SPDY, so use kubectl 1.30 or newer",
        ));
    }
    let key = text(header::SEC_WEBSOCKET_KEY);
    if key.is_empty() {
        return Err(ApiError::bad_request("missing Sec-WebSocket-Key"));
    }
    let protocol = negotiate(text(header::SEC_WEBSOCKET_PROTOCOL)).ok_or_else(|| {
        ApiError::bad_request(format!(
            "none of the offered subprotocols is spoken here; offer one of {}",
            PROTOCOLS.join(", ")
        ))
    })?;
    Ok((protocol, derive_accept_key(key.as_bytes())))
}

fn switching_protocols(protocol: &str, accept: &str) -> Response<ResponseBody> {
    Response::builder()
        .status(http::StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, accept)
        .header(header::SEC_WEBSOCKET_PROTOCOL, protocol)
        .body(ResponseBody::empty())
        .unwrap_or_else(|_| Response::new(ResponseBody::empty()))
}

type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Start the process, relay its streams until it has exited and its output is all sent, then
/// send its exit Status and close.
async fn run_session(
    mut socket: Socket,
    prepared: crate::runtime::PreparedExec,
    exec: ExecRequest,
    shutdown: CancellationToken,
) {
    let mut early_stdin = Vec::new();
    let mut size = None;
    if exec.tty {
        // Messages before the first resize (stdin typed ahead) are kept for the process.
        let first_resize = async {
            while let Some(Ok(message)) = socket.next().await {
                match decode(message_bytes(&message)) {
                    FromClient::Resize { columns, rows } => return Some((columns, rows)),
                    other => early_stdin.push(other),
                }
            }
            None
        };
        size = tokio::time::timeout(FIRST_RESIZE_WAIT, first_resize)
            .await
            .ok()
            .flatten();
    }
    let mut child = match prepared.spawn(size) {
        Ok(child) => child,
        Err(error) => {
            let status = failure_status(&format!("cannot start {:?}: {error}", exec.command));
            finish(&mut socket, &status).await;
            return;
        }
    };
    let status = relay(&mut socket, &mut child, early_stdin, &shutdown).await;
    match status {
        Some(code) => finish(&mut socket, &exit_status(code, &exec.command)).await,
        // The client left or the sandbox is stopping: end the process (kill_on_drop) and go.
        None => {
            let _ = child.start_kill();
        }
    }
}

fn message_bytes(message: &Message) -> &[u8] {
    match message {
        Message::Binary(data) => data,
        _ => &[],
    }
}

/// Relay stdin to the process and its output to the client; the exit code, or None if the
/// client hung up (or the sandbox stopped) first.
async fn relay(
    socket: &mut Socket,
    child: &mut Child,
    early_stdin: Vec<FromClient>,
    shutdown: &CancellationToken,
) -> Option<i32> {
    let (output_tx, mut output_rx) = mpsc::channel::<Vec<u8>>(8);
    if let Some(stdout) = child.stdout.take() {
        tokio::spawn(forward_output(stdout, Stream::Stdout, output_tx.clone()));
    }
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(forward_output(stderr, Stream::Stderr, output_tx.clone()));
    }
    drop(output_tx);
    // Stdin gets a task of its own: a process that is not reading its stdin must not stop
    // its output from being relayed.
    let (stdin_tx, stdin_rx) = mpsc::unbounded_channel::<FromClient>();
    if let Some(stdin) = child.stdin.take() {
        tokio::spawn(forward_stdin(stdin, stdin_rx));
    }
    for message in early_stdin {
        let _ = stdin_tx.send(message);
    }
    let mut stdin_tx = Some(stdin_tx);
    let mut exit_code = None;
    let mut output_open = true;
    while exit_code.is_none() || output_open {
        tokio::select! {
            incoming = socket.next() => match incoming {
                Some(Ok(Message::Binary(data))) => match decode(&data) {
                    FromClient::CloseStdin => stdin_tx = None,
                    message @ FromClient::Stdin(_) => {
                        if let Some(tx) = &stdin_tx {
                            let _ = tx.send(message);
                        }
                    }
                    FromClient::Resize { .. } | FromClient::Ignored => {}
                },
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return None,
                // Pings are answered by tungstenite itself as it reads.
                Some(Ok(_)) => {}
            },
            output = output_rx.recv(), if output_open => match output {
                Some(message) => {
                    if socket.send(Message::Binary(message.into())).await.is_err() {
                        return None;
                    }
                }
                None => output_open = false,
            },
            status = child.wait(), if exit_code.is_none() => {
                exit_code = Some(match status {
                    Ok(status) => exit_code_of(status),
                    Err(_) => 128 + 9,
                });
            },
            _ = shutdown.cancelled() => return None,
        }
    }
    exit_code
}

/// 128 + the signal for a process killed by one, as a shell (and the kubelet) reports it.
fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(128 + 9)
}

/// Read one of the process's outputs to its end, a message per read.
async fn forward_output(
    mut output: impl tokio::io::AsyncRead + Unpin,
    stream: Stream,
    messages: mpsc::Sender<Vec<u8>>,
) {
    let mut buffer = vec![0u8; CHUNK];
    loop {
        match output.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if messages.send(encode(stream, &buffer[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Write what the client sends to the process's stdin; closing the channel closes stdin.
async fn forward_stdin(
    mut stdin: tokio::process::ChildStdin,
    mut messages: mpsc::UnboundedReceiver<FromClient>,
) {
    while let Some(message) = messages.recv().await {
        let written = match message {
            FromClient::Stdin(data) => stdin.write_all(&data).await,
            FromClient::CloseStdin => return,
            _ => Ok(()),
        };
        if written.is_err() {
            return;
        }
    }
}

/// Send `status` on the error stream and close the WebSocket normally: kubectl reads a normal
/// closure as the end of every stream.
async fn finish(socket: &mut Socket, status: &Value) {
    let message = encode(Stream::Error, status.to_string().as_bytes());
    let _ = socket.send(Message::Binary(message.into())).await;
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        })))
        .await;
    // Wait (briefly) for the client's closing frame, so the connection ends cleanly.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(Ok(_)) = socket.next().await {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_messages_are_told_apart_by_their_first_byte() {
        assert_eq!(
            decode(b"\x00select 1;\n"),
            FromClient::Stdin(Bytes::from_static(b"select 1;\n"))
        );
        assert_eq!(decode(&[255, 0]), FromClient::CloseStdin);
        assert_eq!(
            decode(b"\x04{\"Width\":120,\"Height\":40}"),
            FromClient::Resize {
                columns: 120,
                rows: 40
            }
        );
        assert_eq!(decode(b"\x04not json"), FromClient::Ignored);
        assert_eq!(decode(&[]), FromClient::Ignored);
        // Closing stdout is not something a client does; it is ignored, not mistaken for stdin.
        assert_eq!(decode(&[255, 1]), FromClient::Ignored);
    }

    #[test]
    fn output_is_prefixed_with_its_stream_number() {
        assert_eq!(encode(Stream::Stdout, b"1\n"), b"\x011\n");
        assert_eq!(encode(Stream::Stderr, b"oops"), b"\x02oops");
        assert_eq!(encode(Stream::Error, b"{}"), b"\x03{}");
        assert_eq!(Stream::Stdin as u8, 0);
        assert_eq!(Stream::Resize as u8, 4);
    }

    #[test]
    fn a_non_zero_exit_code_travels_as_the_kubelets_status() {
        assert_eq!(
            exit_status(0, &["true".into()]),
            json!({"metadata": {}, "status": "Success"})
        );
        let failed = exit_status(3, &["sh".into(), "-c".into(), "exit 3".into()]);
        assert_eq!(failed["status"], "Failure");
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(
            failed["details"]["causes"],
            json!([{"reason": "ExitCode", "message": "3"}])
        );
        assert_eq!(
            failed["message"],
            "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3"
        );
    }

    #[test]
    fn the_newest_offered_protocol_is_chosen() {
        assert_eq!(
            negotiate("v4.channel.k8s.io, v5.channel.k8s.io"),
            Some("v5.channel.k8s.io")
        );
        assert_eq!(negotiate("v4.channel.k8s.io"), Some("v4.channel.k8s.io"));
        assert_eq!(negotiate("channel.k8s.io, base64.channel.k8s.io"), None);
    }
}
