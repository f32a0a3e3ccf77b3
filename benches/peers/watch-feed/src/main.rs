//! watch-feed: a fake Kubernetes API server that serves one watch stream of PostgresClusters as
//! fast as a client reads it. Plain HTTP/1.1 (hyper 1 on tokio's current-thread runtime), and
//! just enough of the API for a list-then-watch client of `postgresclusters.workshop.example.com/v1`
//! in namespace `default`: discovery, the CRD, an empty list, the watch.
//!
//! ```text
//! watch-feed [--listen 127.0.0.1:0] [--events N] [--objects M] [--chunk BYTES] [--log]
//!     prints `stream events=… bytes=… avg_event_bytes=… chunk=…`, then `ready http://ADDR`
//! watch-feed --events-file PATH [--events N] [--objects M]
//!     writes the same stream to PATH (one event per line) and exits: the decode baseline's input
//! ```

mod events;
mod routes;

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use events::Stream;

const USAGE: &str = "\
usage: watch-feed [--listen ADDR] [--events N] [--objects M] [--chunk BYTES] [--log]
       watch-feed --events-file PATH [--events N] [--objects M]
defaults: --listen 127.0.0.1:8080 --events 200000 --objects 1000 --chunk 16384";

struct Options {
    listen: SocketAddr,
    events: usize,
    objects: usize,
    chunk: usize,
    events_file: Option<String>,
    log: bool,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
        events: 200_000,
        objects: 1000,
        chunk: 16384,
        events_file: None,
        log: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--log" {
            options.log = true;
            continue;
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |_| format!("{flag}: cannot use {value:?}");
        match flag.as_str() {
            "--listen" => options.listen = value.parse().map_err(|_| bad(()))?,
            "--events" => options.events = value.parse().map_err(|_| bad(()))?,
            "--objects" => options.objects = value.parse().map_err(|_| bad(()))?,
            "--chunk" => options.chunk = value.parse().map_err(|_| bad(()))?,
            "--events-file" => options.events_file = Some(value),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if options.events == 0 || options.objects == 0 || options.chunk == 0 {
        return Err("--events, --objects and --chunk must be at least 1".into());
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("watch-feed: {error}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let stream = Stream::generate(options.events, options.objects);
    let summary = format!(
        "events={} bytes={} avg_event_bytes={} gen_seconds={:.2}",
        stream.len(),
        stream.bytes.len(),
        stream.bytes.len() / stream.len(),
        started.elapsed().as_secs_f64()
    );

    if let Some(path) = &options.events_file {
        if let Err(error) = std::fs::write(path, &stream.bytes) {
            eprintln!("watch-feed: cannot write {path}: {error}");
            return ExitCode::FAILURE;
        }
        println!("wrote {path} {summary}");
        return ExitCode::SUCCESS;
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(serve(options, stream, summary))
}

async fn serve(options: Options, stream: Stream, summary: String) -> ExitCode {
    let listener = match TcpListener::bind(options.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("watch-feed: cannot listen on {}: {error}", options.listen);
            return ExitCode::FAILURE;
        }
    };
    let addr = listener.local_addr().expect("a bound address");
    let feed = Arc::new(routes::Feed {
        stream,
        chunk: options.chunk,
        log: options.log,
    });
    // The bench script waits for the `ready` line, so flush it at once.
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "stream {summary} chunk={}", options.chunk);
    let _ = writeln!(stdout, "ready http://{addr}");
    let _ = stdout.flush();
    drop(stdout);

    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                eprintln!("watch-feed: accept: {error}");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let feed = feed.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let feed = feed.clone();
                async move { Ok::<_, std::convert::Infallible>(feed.answer(request)) }
            });
            // writev off: hyper copies the frames into one buffer, so even `--chunk 1` leaves in
            // large socket writes and the client, not the server's syscalls, sets the pace.
            let _ = http1::Builder::new()
                .writev(false)
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}
