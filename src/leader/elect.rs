//! Support: skip it on first read — part of leader election, which one replica never needs.
//!
//! The election loop: acquire the Lease, run the work while renewing it, hold the work's writes
//! back while a renewal is late, stop it when another holds the Lease, and release the Lease
//! after the work has stopped on shutdown.

use std::future::Future;
use std::time::SystemTime;

use tokio::time::{sleep, sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::gate::LeaseGate;
use super::lease::{judge, lease_path, leases_path, released, renewed, taken, Lease, LeaseSpec};
use super::stamp::stamp_pods;
use super::{LeaderElection, LeaderError, Verdict};
use crate::client::{Client, ClientError, USER_AGENT};
use crate::story::Reporter;

/// Wait until this process holds the Lease, then run `work` with a client and a token that is
/// cancelled on `shutdown`, renewing the Lease meanwhile. Until then nothing but the Lease is
/// read or written. The work's client sends a request that may change something only while
/// the Lease is ours by the clock ([`LeaseGate`]): from the renew deadline after the last
/// renewal on, it holds them back, and the work, its watches and caches run on; once the Lease
/// is read again and still names us, it is renewed and the writes go out again.
///
/// - `Ok(None)`: `shutdown` came before we led; `work` never ran.
/// - `Ok(Some(output))`: `work` ended (on `shutdown`, or on its own); *then* the Lease was
///   released, so our last write precedes the next leader's first.
/// - `Err(Lost)`: another holder is in the Lease. `work` was dropped at once, without waiting
///   for it, because from now on a standby may act; a binary exits non-zero, and the kubelet
///   restarts it as a standby (client-go's `OnStoppedLeading`).
pub async fn run_when_leading<F, Fut, T>(
    client: Client,
    election: LeaderElection,
    reporter: Reporter,
    shutdown: CancellationToken,
    work: F,
) -> Result<Option<T>, LeaderError>
where
    F: FnOnce(Client, CancellationToken) -> Fut,
    Fut: Future<Output = T>,
{
    election.validate()?;
    // Two copies of the operator are two users of one service account: an audit log tells them
    // apart by this.
    let client = client.with_user_agent(&format!("{USER_AGENT} ({})", election.identity));
    let mut candidate = Candidate::new(client, election, reporter);
    let Some(mut lease) = candidate.acquire(&shutdown).await? else {
        return Ok(None);
    };
    let acting = CancellationToken::new();
    let gated = candidate.client.clone();
    // Fixed for this leadership: a rejoin after a frozen server finds the same Lease.
    let term = super::term::term(&lease);
    let gated = gated
        .gated_by(candidate.gate.request_gate())
        .with_term(term);
    let (namespace, acts) = (candidate.election.namespace.clone(), acting.clone());
    let work = async move {
        // Our term on every pod before we act: from then on the API server refuses a label or
        // a deletion our paused predecessor may still send (`stamp.rs`).
        let (stamped, failed) = stamp_pods(&gated, &namespace).await;
        tracing::info!(term, stamped, "stamped our leader term on the pods");
        for failure in failed {
            tracing::warn!(term, %failure, "not stamped: the gate alone fences this pod until we write it");
        }
        work(gated, acts).await
    };
    tokio::pin!(work);
    let deadline = candidate.election.renew_deadline;
    let mut next_renewal = Instant::now() + candidate.election.retry_period;
    let mut holding_back = false;
    let output = loop {
        // The renewal that keeps us leader must have been *sent* within the deadline: the
        // standby's clock starts when it sees that write, which is after we sent it.
        let closes_at = candidate.gate.closes_at().unwrap_or_else(Instant::now);
        tokio::select! {
            biased;
            () = sleep_until(closes_at), if !holding_back => {
                holding_back = true;
                candidate.reporter.report_operator(holding_back_line(&candidate.key, deadline));
            }
            output = &mut work => break output,
            () = shutdown.cancelled(), if !acting.is_cancelled() => acting.cancel(),
            () = sleep_until(next_renewal) => {
                // Late already (a pause, a server that did not answer): read the Lease before
                // writing it. Bounded: a request hanging must not hold up the next try.
                let renewal = if Instant::now() >= closes_at {
                    tokio::time::timeout(deadline, candidate.rejoin()).await
                } else {
                    tokio::time::timeout_at(closes_at, candidate.renew(&lease)).await
                };
                match renewal {
                    Ok(Ok(ours)) => {
                        lease = ours;
                        // Open again only once a write of the Lease succeeded (not a 409 read).
                        if candidate.gate.check().is_ok() && std::mem::take(&mut holding_back) {
                            candidate.reporter.report_operator(renewed_again_line(&candidate.key));
                        }
                    }
                    Ok(Err(Renewal::Failed(error))) => {
                        tracing::warn!(lease = %candidate.key, %error, "renewing the lease failed; retrying");
                    }
                    Ok(Err(Renewal::Taken(holder))) => {
                        return Err(candidate.lose(&acting, format!("held by {holder} now")));
                    }
                    // The gate closed by the clock meanwhile: read the Lease at once, so that a
                    // server answering again finds that read waiting.
                    Err(_elapsed) => {
                        next_renewal = Instant::now();
                        continue;
                    }
                }
                next_renewal = Instant::now() + candidate.election.retry_period;
            }
        }
    };
    // The work has stopped (every request of its answered or abandoned): now the next leader
    // may start.
    candidate.release(&lease).await;
    Ok(Some(output))
}

/// A renewal that did not succeed.
enum Renewal {
    /// Worth retrying until the deadline (a 500, a timeout, a broken connection).
    Failed(ClientError),
    /// The Lease names someone else: we are not leader any more, whatever the deadline says.
    Taken(String),
}

/// One candidate: the Lease it reads and writes, and what it last observed of it.
struct Candidate {
    client: Client,
    election: LeaderElection,
    reporter: Reporter,
    /// `namespace/name`, for the story lines.
    key: String,
    path: String,
    /// The record last read and the local instant it was first seen in that state: the clock
    /// that judges expiry ([`judge`]).
    observed: Option<(LeaseSpec, Instant)>,
    /// The holder we last announced waiting for, so the line comes once per holder.
    announced: Option<String>,
    /// When our last successful write of the Lease was sent: what the work's writes pass.
    gate: LeaseGate,
}

impl Candidate {
    fn new(client: Client, election: LeaderElection, reporter: Reporter) -> Candidate {
        Candidate {
            key: election.lease_key(),
            path: lease_path(&election.namespace, &election.lease_name),
            gate: LeaseGate::new(&election.lease_key(), election.renew_deadline),
            client,
            election,
            reporter,
            observed: None,
            announced: None,
        }
    }

    /// Try every retry period until we hold the Lease; `None` if `shutdown` comes first.
    async fn acquire(
        &mut self,
        shutdown: &CancellationToken,
    ) -> Result<Option<Lease>, LeaderError> {
        loop {
            let attempt = tokio::select! {
                attempt = self.try_acquire() => attempt,
                () = shutdown.cancelled() => return Ok(None),
            };
            match attempt {
                Ok(Some(lease)) => return Ok(Some(lease)),
                Ok(None) => {}
                Err((step, error)) if is_transient(&error) => {
                    tracing::warn!(lease = %self.key, step, %error, "reading the lease failed; retrying");
                }
                Err((step, source)) => {
                    return Err(LeaderError::Refused {
                        step,
                        lease: self.key.clone(),
                        source: Box::new(source),
                    })
                }
            }
            tokio::select! {
                () = sleep(self.election.retry_period) => {}
                () = shutdown.cancelled() => return Ok(None),
            }
        }
    }

    /// One round of client-go's `tryAcquireOrRenew` before we lead: `Some` when we now hold it.
    async fn try_acquire(&mut self) -> Result<Option<Lease>, (&'static str, ClientError)> {
        let current = match self.client.get::<Lease>(&self.path).await {
            Ok(lease) => lease,
            Err(error) if error.status_code() == Some(404) => return self.create().await,
            Err(error) => return Err(("reading", error)),
        };
        let now = Instant::now();
        self.observe(&current.spec, now);
        let observed_at = self.observed.as_ref().map_or(now, |(_, at)| *at);
        let how = match judge(&current.spec, observed_at, now, &self.election.identity) {
            Verdict::Held { holder, .. } => {
                if self.announced.as_ref() != Some(&holder) {
                    self.reporter
                        .report_operator(waiting_line(&self.key, &holder));
                    self.announced = Some(holder);
                }
                return Ok(None);
            }
            Verdict::Released => Takeover::Released {
                previous: self.announced.clone(),
            },
            Verdict::Expired { holder } => Takeover::Expired { previous: holder },
            Verdict::Ours => Takeover::Kept,
        };
        let sent_at = Instant::now();
        let ours = taken(Some(&current), &self.election, SystemTime::now());
        match self.client.replace::<_, Lease>(&self.path, &ours).await {
            Ok(written) => Ok(Some(self.lead(written, sent_at, &how))),
            // Optimistic concurrency: another candidate wrote first, with the same
            // resourceVersion. It leads; we read again next round.
            Err(error) if error.status_code() == Some(409) => Ok(None),
            Err(error) => Err(("taking", error)),
        }
    }

    /// No Lease yet: create it naming us. 409 AlreadyExists: another candidate was first.
    async fn create(&mut self) -> Result<Option<Lease>, (&'static str, ClientError)> {
        let sent_at = Instant::now();
        let ours = taken(None, &self.election, SystemTime::now());
        match self
            .client
            .create::<_, Lease>(&leases_path(&self.election.namespace), &ours)
            .await
        {
            Ok(written) => Ok(Some(self.lead(written, sent_at, &Takeover::Created))),
            Err(error) if error.status_code() == Some(409) => Ok(None),
            Err(error) => Err(("creating", error)),
        }
    }

    /// We hold it: note when, and say so.
    fn lead(&mut self, written: Lease, sent_at: Instant, how: &Takeover) -> Lease {
        self.gate.renewed(sent_at);
        self.observe(&written.spec, Instant::now());
        self.reporter
            .report_operator(leading_line(&self.election.identity, &self.key, how));
        written
    }

    /// Start the expiry clock again when the record changed since we last read it.
    fn observe(&mut self, spec: &LeaseSpec, now: Instant) {
        if self.observed.as_ref().map(|(seen, _)| seen) != Some(spec) {
            self.observed = Some((spec.clone(), now));
        }
    }

    /// One renewal: PUT our Lease with a new renewTime and the resourceVersion of our last
    /// write. 409 means someone wrote it since: read it to see whether it still names us, and if
    /// so PUT once more from what it holds (a write of ours the server held while frozen, then
    /// answered, makes exactly that 409). The gate opens only on a write that succeeded.
    async fn renew(&mut self, ours: &Lease) -> Result<Lease, Renewal> {
        let mut ours = ours.clone();
        for _attempt in 0..2 {
            let sent_at = Instant::now();
            let renewal = renewed(&ours, SystemTime::now());
            match self.client.replace::<_, Lease>(&self.path, &renewal).await {
                Ok(written) => {
                    self.gate.renewed(sent_at);
                    return Ok(written);
                }
                Err(error) if error.status_code() == Some(409) => {}
                Err(error) => return Err(Renewal::Failed(error)),
            }
            let current = self
                .client
                .get::<Lease>(&self.path)
                .await
                .map_err(Renewal::Failed)?;
            match current.spec.holder() {
                // Still ours (someone edited a label, say): renew from this version.
                Some(holder) if holder == self.election.identity => ours = current,
                Some(holder) => return Err(Renewal::Taken(holder.to_string())),
                None => return Err(Renewal::Taken("nobody (released by someone else)".into())),
            }
        }
        // Still ours but not written: the next round renews from this version.
        Ok(ours)
    }

    /// After the renew deadline: read the Lease before writing it. Our name still in it (no
    /// other candidate wrote it since, or it would name them): renew it from what we read, a
    /// PUT the server refuses if anyone wrote in between. Another name: taken.
    async fn rejoin(&mut self) -> Result<Lease, Renewal> {
        let current = self.client.get::<Lease>(&self.path).await;
        let current = current.map_err(Renewal::Failed)?;
        match current.spec.holder() {
            Some(holder) if holder == self.election.identity => self.renew(&current).await,
            Some(holder) => Err(Renewal::Taken(holder.to_string())),
            None => Err(Renewal::Taken("nobody (released by someone else)".into())),
        }
    }

    /// Stop acting: cancel the work's token (it is dropped by the caller) and say why.
    fn lose(&self, acting: &CancellationToken, why: String) -> LeaderError {
        acting.cancel();
        self.reporter.report_operator(lost_line(&self.key, &why));
        LeaderError::Lost {
            lease: self.key.clone(),
            why,
        }
    }

    /// client-go's `ReleaseOnCancel`: holder `""`, so a standby takes over at its next read
    /// instead of waiting out the lease duration. A failure only costs the standby that wait.
    async fn release(&self, ours: &Lease) {
        let release = released(ours, SystemTime::now());
        match self.client.replace::<_, Lease>(&self.path, &release).await {
            Ok(_) => self.reporter.report_operator(released_line(&self.key)),
            Err(error) => {
                tracing::warn!(lease = %self.key, %error, "releasing the lease failed; a standby will take over once it expires");
            }
        }
    }
}

/// Errors worth another try at the next retry period: no answer, or the server's own trouble.
/// A 4xx other than 409/429 (403 from RBAC, 404 for a missing namespace, 422) will not change
/// by waiting; the operator stops and says which verb and resource it was refused.
fn is_transient(error: &ClientError) -> bool {
    match error.status_code() {
        None => true,
        Some(code) => code >= 500 || code == 409 || code == 429,
    }
}

/// How a candidate came to lead, for [`leading_line`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Takeover {
    /// There was no Lease: we created it.
    Created,
    /// Its holder let it go on shutdown (`previous`: the holder we last saw, if we saw one).
    Released { previous: Option<String> },
    /// Its holder stopped renewing for longer than the lease duration.
    Expired { previous: String },
    /// It already named us (only with a fixed identity: see `Verdict::Ours`).
    Kept,
}

/// `waiting for lease ops/postgres-operator, held by operator-7d4b9-x2x5k_3912` — said once per
/// holder, not at every retry.
pub fn waiting_line(lease: &str, holder: &str) -> String {
    format!("waiting for lease {lease}, held by {holder}")
}

/// `leading as operator-7d4b9-x2x5k_3912 (lease ops/postgres-operator, took over from
/// operator-7d4b9-abcde_77 after it expired)`.
pub fn leading_line(identity: &str, lease: &str, how: &Takeover) -> String {
    let how = match how {
        Takeover::Created => "new".to_string(),
        Takeover::Released {
            previous: Some(previous),
        } => format!("took over from {previous} after it was released"),
        Takeover::Released { previous: None } => "free after a release".to_string(),
        Takeover::Expired { previous } => format!("took over from {previous} after it expired"),
        Takeover::Kept => "already ours".to_string(),
    };
    format!("leading as {identity} (lease {lease}, {how})")
}

/// `lost lease ops/postgres-operator: not renewed within 10s: stopping`.
pub fn lost_line(lease: &str, why: &str) -> String {
    format!("lost lease {lease}: {why}: stopping")
}

/// `lease ops/postgres-operator not renewed within 10s: holding writes back until it is`.
pub fn holding_back_line(lease: &str, deadline: std::time::Duration) -> String {
    format!("lease {lease} not renewed within {deadline:?}: holding writes back until it is")
}

/// `lease ops/postgres-operator still ours, renewed: writing again`.
pub fn renewed_again_line(lease: &str) -> String {
    format!("lease {lease} still ours, renewed: writing again")
}

/// `released lease ops/postgres-operator`: the next candidate may lead at once.
pub fn released_line(lease: &str) -> String {
    format!("released lease {lease}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Who leads reads in one line: the holder, the lease, and how it changed hands.
    #[test]
    fn leader_lines_name_the_lease_and_the_holders() {
        let lease = "ops/postgres-operator";
        assert_eq!(
            waiting_line(lease, "a_1"),
            "waiting for lease ops/postgres-operator, held by a_1"
        );
        let expired = Takeover::Expired {
            previous: "a_1".into(),
        };
        assert_eq!(
            leading_line("b_2", lease, &expired),
            "leading as b_2 (lease ops/postgres-operator, took over from a_1 after it expired)"
        );
        let released = Takeover::Released {
            previous: Some("a_1".into()),
        };
        assert_eq!(
            leading_line("b_2", lease, &released),
            "leading as b_2 (lease ops/postgres-operator, took over from a_1 after it was released)"
        );
        assert_eq!(
            lost_line(lease, "held by c_3 now"),
            "lost lease ops/postgres-operator: held by c_3 now: stopping"
        );
    }
}
