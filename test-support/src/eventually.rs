//! Waiting for a condition with a deadline instead of a sleep.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How long [`eventually`] waits between two checks.
///
/// 100 ms: a condition is seen within a tenth of a second of holding, which no test's run time
/// notices, while a check that starts kubectl (a process start and tens of milliseconds of CPU)
/// still leaves most of a 2-core machine to the sandbox and operator under test. The sandbox's
/// tests used to poll every 10 ms and the operator's every 200 ms; neither needed its extreme.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Run `check` every [`POLL_INTERVAL`] until it returns `Some`, and return that value; panic
/// naming `what` once `deadline` has passed without it.
pub async fn eventually<T, F, Fut>(deadline: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match within(deadline, check).await {
        Some(value) => value,
        None => panic!("timed out after {deadline:?} waiting for {what}"),
    }
}

/// [`eventually`] that returns None once `deadline` has passed, for a caller that has more to
/// say when it fails (a pod's log and container statuses, say) before it panics.
pub async fn within<T, F, Fut>(deadline: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let end = Instant::now() + deadline;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
