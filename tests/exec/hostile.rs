//! `exec::exec` against a purpose-built fake API server that answers the upgrade itself and then
//! misbehaves on purpose: endless output, a frame announcing a gigabyte, no exit Status, an
//! unknown stream, a forged handshake. Also what a well-behaved server sees of us: the request
//! line and headers, the stdin bytes, and v4 chosen instead of v5.
//!
//! WORKSHOP.md, step 05 ("One `pods/exec`, byte by byte"). Plain HTTP on 127.0.0.1:0; the
//! server reads the request head off the TCP socket and writes the 101 by hand, so a test can
//! also write raw frame bytes. Run: `cargo test -p postgres-operator --test exec hostile::`.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use postgres_operator::client::Client;
use postgres_operator::config::{Config, SecretString, TokenSource};
use postgres_operator::exec::{exec, ExecError, ExecLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

/// A server for one exec: it reads the request head, records it, and hands the socket to the
/// test's script.
struct FakeExecServer {
    url: String,
    head: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeExecServer {
    async fn start<F, Fut>(script: F) -> FakeExecServer
    where
        F: FnOnce(TcpStream, String) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let head = Arc::new(Mutex::new(None));
        let recorded = head.clone();
        let task = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let request = read_head(&mut socket).await;
            *recorded.lock().unwrap() = Some(request.clone());
            script(socket, request).await;
        });
        FakeExecServer { url, head, task }
    }

    /// A server that upgrades to `protocol`, sends `messages` (then a close frame, if `close`),
    /// and reads until the client leaves.
    async fn sending(
        protocol: &'static str,
        messages: Vec<Message>,
        close: bool,
    ) -> FakeExecServer {
        FakeExecServer::start(move |socket, head| async move {
            let mut ws = accept(socket, &head, protocol).await;
            for message in messages {
                ws.send(message).await.expect("send");
            }
            if close {
                ws.close(None).await.expect("close");
            }
            until_client_leaves(&mut ws).await;
        })
        .await
    }

    /// `true` run through this server, which must fail: the error.
    async fn failed_exec(&self) -> ExecError {
        exec(
            &self.client(),
            "db",
            "pg-0",
            None,
            &["true"],
            None,
            ExecLimits::default(),
        )
        .await
        .expect_err("the exec fails")
    }

    /// The request head the server read (after the exec).
    fn head(&self) -> String {
        self.head.lock().unwrap().clone().expect("a request came")
    }

    /// A client for this server, with a bearer token.
    fn client(&self) -> Client {
        let mut config = Config::from_url(&self.url).expect("config");
        config.auth.token = Some(TokenSource::Inline(SecretString::new("s3cret")));
        Client::new(config).expect("client")
    }
}

/// Bytes up to the blank line that ends an HTTP request head (a GET has no body).
async fn read_head(socket: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert!(head.len() < 16 * 1024, "request head too long");
        if socket.read(&mut byte).await.expect("read head") == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8(head).expect("head is text")
}

/// One header's value from a request head.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// Answer 101 choosing `protocol`, with the accept key `accept` (None: the right one).
async fn switch(socket: &mut TcpStream, head: &str, protocol: &str, accept: Option<&str>) {
    let key = header(head, "Sec-WebSocket-Key").expect("a WebSocket key");
    let right = derive_accept_key(key.as_bytes());
    let answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n",
        accept.unwrap_or(&right)
    );
    socket
        .write_all(answer.as_bytes())
        .await
        .expect("write 101");
}

/// Answer 101 with `protocol`, then speak WebSocket as the server.
async fn accept(mut socket: TcpStream, head: &str, protocol: &str) -> WebSocketStream<TcpStream> {
    switch(&mut socket, head, protocol, None).await;
    WebSocketStream::from_raw_socket(socket, Role::Server, None).await
}

fn binary(bytes: &[u8]) -> Message {
    Message::binary(bytes.to_vec())
}

/// The stream-3 Status of a command that exited with `code`, as the kubelet writes it.
fn exit_status(code: u8) -> Message {
    let status = if code == 0 {
        r#"{"metadata":{},"status":"Success"}"#.to_string()
    } else {
        format!(
            r#"{{"metadata":{{}},"status":"Failure","message":"command terminated with non-zero exit code: exit status {code}","reason":"NonZeroExitCode","details":{{"causes":[{{"reason":"ExitCode","message":"{code}"}}]}}}}"#
        )
    };
    binary(&[&[3u8][..], status.as_bytes()].concat())
}

/// Read until the client goes away.
async fn until_client_leaves(socket: &mut WebSocketStream<TcpStream>) {
    while let Some(Ok(_)) = socket.next().await {}
}

fn limits(timeout: Duration, max_output: usize) -> ExecLimits {
    ExecLimits {
        timeout,
        max_output,
    }
}

/// What the API server sees: `GET .../exec?command=...` with our token and the WebSocket
/// handshake offering v5 then v4; a server that picks v4 (and opens each stream with a message
/// of its number alone) still gives us stdout and the exit code.
#[tokio::test]
async fn the_request_offers_v5_then_v4_and_v4_works() {
    // Each stream opened with its number alone, then stdout and the Status.
    let mut messages: Vec<Message> = (0..4u8).map(|stream| binary(&[stream])).collect();
    messages.extend([binary(b"\x011\n"), exit_status(0)]);
    let server = FakeExecServer::sending("v4.channel.k8s.io", messages, true).await;
    let command = ["psql", "-Atc", "select 1"];
    let output = exec(
        &server.client(),
        "db",
        "pg-0",
        Some("postgres"),
        &command,
        None,
        ExecLimits::default(),
    )
    .await
    .expect("exec over v4");
    assert_eq!((output.stdout_text(), output.exit_code), ("1".into(), 0));

    let head = server.head();
    assert!(
        head.starts_with("GET /api/v1/namespaces/db/pods/pg-0/exec?command=psql&command=-Atc&command=select+1&container=postgres&stdout=true&stderr=true HTTP/1.1\r\n"),
        "{head}"
    );
    assert_eq!(header(&head, "authorization"), Some("Bearer s3cret"));
    assert_eq!(header(&head, "upgrade"), Some("websocket"));
    assert_eq!(header(&head, "connection"), Some("Upgrade"));
    assert_eq!(header(&head, "sec-websocket-version"), Some("13"));
    assert_eq!(
        header(&head, "sec-websocket-protocol"),
        Some("v5.channel.k8s.io, v4.channel.k8s.io")
    );
}

/// On v5, stdin goes out on stream 0 and ends with `[255, 0]`; the exit code comes back from
/// the `NonZeroExitCode` Status.
#[tokio::test]
async fn stdin_is_sent_on_stream_0_then_closed() {
    let (seen_tx, seen_rx) = tokio::sync::oneshot::channel::<Vec<Vec<u8>>>();
    let server = FakeExecServer::start(|socket, head| async move {
        let mut ws = accept(socket, &head, "v5.channel.k8s.io").await;
        let mut seen = Vec::new();
        while let Some(Ok(Message::Binary(data))) = ws.next().await {
            let closed = data[..] == [255, 0];
            seen.push(data.to_vec());
            if closed {
                break;
            }
        }
        let echoed: Vec<u8> = seen
            .iter()
            .filter(|m| m[0] == 0)
            .flat_map(|m| m[1..].to_vec())
            .collect();
        ws.send(binary(&[&[1u8][..], &echoed].concat()))
            .await
            .expect("stdout");
        ws.send(binary(&[255, 1])).await.expect("close stdout");
        ws.send(exit_status(7)).await.expect("status");
        ws.close(None).await.expect("close");
        until_client_leaves(&mut ws).await;
        let _ = seen_tx.send(seen);
    })
    .await;
    let output = exec(
        &server.client(),
        "db",
        "pg-0",
        None,
        &["cat"],
        Some(b"hello"),
        ExecLimits::default(),
    )
    .await
    .expect("exec with stdin");
    assert_eq!(
        (output.stdout_text(), output.exit_code),
        ("hello".into(), 7)
    );
    assert_eq!(
        seen_rx.await.expect("the server saw"),
        [b"\x00hello".to_vec(), vec![255, 0]]
    );
    assert!(server.head().contains("&stdin=true&"), "{}", server.head());
}

/// v4 cannot close stdin, so input on v4 is refused instead of hanging until the deadline.
#[tokio::test]
async fn stdin_on_v4_is_refused() {
    let server = FakeExecServer::sending("v4.channel.k8s.io", vec![], false).await;
    let error = exec(
        &server.client(),
        "db",
        "pg-0",
        None,
        &["cat"],
        Some(b"x"),
        ExecLimits::default(),
    )
    .await
    .expect_err("v4 with stdin");
    assert!(matches!(error, ExecError::StdinNeedsV5 { .. }), "{error:?}");
}

/// Output that never ends: the exec stops at the cap with an error, and drops the connection
/// (the server's endless loop ends), instead of buffering until the operator is killed.
#[tokio::test]
async fn a_flood_of_output_past_the_cap_is_an_error() {
    let (sent_tx, sent_rx) = tokio::sync::oneshot::channel::<usize>();
    let server = FakeExecServer::start(|socket, head| async move {
        let mut ws = accept(socket, &head, "v5.channel.k8s.io").await;
        let piece = [&[1u8][..], &[b'x'; 32 * 1024]].concat();
        let mut sent = 0;
        while ws.send(binary(&piece)).await.is_ok() {
            sent += piece.len();
        }
        let _ = sent_tx.send(sent);
    })
    .await;
    let cap = 1024 * 1024;
    let error = exec(
        &server.client(),
        "db",
        "pg-0",
        None,
        &["yes"],
        None,
        limits(Duration::from_secs(60), cap),
    )
    .await
    .expect_err("endless output");
    assert!(
        matches!(error, ExecError::OutputTooLarge { limit, .. } if limit == cap),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "exec in pod db/pg-0: the output is larger than the cap of 1048576 bytes; print less (psql -At with a LIMIT), or raise ExecLimits::max_output"
    );
    let sent = sent_rx.await.expect("the server's loop ended");
    assert!(
        sent >= cap,
        "the server sent {sent} bytes before the client left"
    );
}

/// A frame whose header announces 1 GiB is refused from the header, before any payload is read.
#[tokio::test]
async fn a_frame_announcing_a_gigabyte_is_refused_from_its_header() {
    let server = FakeExecServer::start(|mut socket, head| async move {
        switch(&mut socket, &head, "v5.channel.k8s.io", None).await;
        // FIN + binary, no mask, length 127 = "64-bit length follows": 2^30.
        let header = [0x82, 127, 0, 0, 0, 0, 0x40, 0, 0, 0];
        socket.write_all(&header).await.expect("frame header");
        let mut rest = Vec::new();
        let _ = socket.read_to_end(&mut rest).await;
    })
    .await;
    let error = server.failed_exec().await;
    match &error {
        ExecError::WebSocket { source, .. } => assert!(
            matches!(**source, tungstenite::Error::Capacity(_)),
            "{source:?}"
        ),
        other => panic!("{other:?}"),
    }
}

/// A server that upgrades and then says nothing: the deadline ends the exec.
#[tokio::test]
async fn a_server_that_never_sends_a_status_times_out() {
    let server = FakeExecServer::sending("v5.channel.k8s.io", vec![], false).await;
    let timeout = Duration::from_millis(300);
    let error = exec(
        &server.client(),
        "db",
        "pg-0",
        None,
        &["sleep", "infinity"],
        None,
        limits(timeout, 1024),
    )
    .await
    .expect_err("no status");
    assert!(
        matches!(error, ExecError::Timeout { after, .. } if after == timeout),
        "{error:?}"
    );
    // The client dropped the connection: the server's read loop ends.
    server.task.await.expect("server done");
}

/// Output, then a clean close without a Status: we cannot know how the command ended.
#[tokio::test]
async fn a_close_without_a_status_is_an_error() {
    let stdout = binary(b"\x011\n");
    let server = FakeExecServer::sending("v5.channel.k8s.io", vec![stdout], true).await;
    let error = server.failed_exec().await;
    assert!(matches!(error, ExecError::NoStatus { .. }), "{error:?}");
}

/// A message on a stream the protocol does not have, or a text message, is a protocol error.
#[tokio::test]
async fn an_unknown_stream_or_a_text_message_is_a_protocol_error() {
    for (message, expected) in [
        (binary(b"\x07garbage"), "stream 7"),
        (Message::text("hello"), "a text message"),
    ] {
        let server = FakeExecServer::sending("v5.channel.k8s.io", vec![message], false).await;
        let error = server.failed_exec().await;
        assert!(matches!(error, ExecError::Protocol { .. }), "{error:?}");
        assert!(error.to_string().contains(expected), "{error}");
    }
}

/// A 101 whose Sec-WebSocket-Accept does not answer our key is not our WebSocket.
#[tokio::test]
async fn a_forged_accept_key_is_a_handshake_error() {
    let server = FakeExecServer::start(|mut socket, head| async move {
        switch(&mut socket, &head, "v5.channel.k8s.io", Some("Zm9yZ2Vk")).await;
        let mut rest = Vec::new();
        let _ = socket.read_to_end(&mut rest).await;
    })
    .await;
    let error = server.failed_exec().await;
    assert!(matches!(error, ExecError::Handshake { .. }), "{error:?}");
    assert!(error.to_string().contains("Zm9yZ2Vk"), "{error}");
}

/// A refused upgrade keeps the HTTP status and the API server's Status message: 403 is RBAC
/// without `create` on `pods/exec`.
#[tokio::test]
async fn a_refused_upgrade_keeps_the_status() {
    let server = FakeExecServer::start(|mut socket, _head| async move {
        let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"pg-0\" is forbidden: User \"system:serviceaccount:db:operator\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"db\"","reason":"Forbidden","details":{"name":"pg-0","kind":"pods"},"code":403}"#;
        let answer = format!(
            "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(answer.as_bytes()).await.expect("answer");
        let mut rest = Vec::new();
        let _ = socket.read_to_end(&mut rest).await;
    })
    .await;
    let error = server.failed_exec().await;
    assert_eq!(error.status_code(), Some(403));
    assert!(matches!(error, ExecError::Upgrade { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .contains(r#"cannot create resource "pods/exec""#),
        "{error}"
    );
}
