//! Support: skip it on first read — part of `/metrics`, which nothing the operator decides depends
//! on.
//!
//! The figures themselves: a counter, a counter per label values, a histogram. Each
//! turns itself into a [`Family`] of the text format when `/metrics` is read.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::text::{Buckets, Family, Kind, Sample, Value};

/// Counts up from 0.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        // Relaxed: a count read a moment late is still a count; nothing is ordered by it.
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    pub fn family(&self, name: &'static str, help: &'static str) -> Family {
        Family::new(name, help, Kind::Counter).sample(Vec::new(), self.get() as f64)
    }
}

/// One count per combination of label values (`method="GET",code="200"`). The label names are
/// fixed; the values are whatever was counted, so keep them few (verbs, codes, reasons).
#[derive(Debug)]
pub struct CounterVec {
    labels: &'static [&'static str],
    counts: Mutex<BTreeMap<Vec<String>, u64>>,
}

impl CounterVec {
    pub fn new(labels: &'static [&'static str]) -> CounterVec {
        CounterVec {
            labels,
            counts: Mutex::new(BTreeMap::new()),
        }
    }

    /// Count one for these values, given in the order of the label names.
    pub fn inc(&self, values: &[&str]) {
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        *lock(&self.counts).entry(key).or_insert(0) += 1;
    }

    pub fn family(&self, name: &'static str, help: &'static str) -> Family {
        let mut family = Family::new(name, help, Kind::Counter);
        for (values, count) in lock(&self.counts).iter() {
            let labels = self.labels.iter().copied().zip(values.clone()).collect();
            family = family.sample(labels, *count as f64);
        }
        family
    }
}

/// Observations counted into fixed buckets, with their sum. One lock for all three, so a
/// scrape never sees a count that disagrees with the buckets.
#[derive(Debug)]
pub struct Histogram(Mutex<Buckets>);

impl Histogram {
    /// `bounds`: the buckets' upper bounds, ascending.
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram(Mutex::new(Buckets {
            bounds,
            // One more than the bounds: what lies above the last one.
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }))
    }

    pub fn observe(&self, value: f64) {
        let mut state = lock(&self.0);
        let bounds = state.bounds;
        let bucket = bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(bounds.len());
        state.counts[bucket] += 1;
        state.sum += value;
        state.count += 1;
    }

    pub fn family(&self, name: &'static str, help: &'static str) -> Family {
        let mut family = Family::new(name, help, Kind::Histogram);
        family.samples.push(Sample {
            labels: Vec::new(),
            value: Value::Histogram(lock(&self.0).clone()),
        });
        family
    }
}

/// A panic while counting leaves whole numbers behind: the figures stay readable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An observation lands in the first bucket whose bound it does not exceed.
    #[test]
    fn observations_land_in_their_bucket() {
        let histogram = Histogram::new(&[0.1, 1.0]);
        for value in [0.05, 0.1, 0.5, 7.0] {
            histogram.observe(value);
        }
        let family = histogram.family("h", "h");
        let Value::Histogram(buckets) = &family.samples[0].value else {
            panic!("a histogram sample");
        };
        assert_eq!(buckets.counts, [2, 1, 1]);
        assert_eq!(buckets.count, 4);
        assert!((buckets.sum - 7.65).abs() < 1e-9);
    }

    /// A labelled counter keeps one count per combination of values, in label order.
    #[test]
    fn labelled_counts_are_kept_apart() {
        let requests = CounterVec::new(&["method", "code"]);
        requests.inc(&["GET", "200"]);
        requests.inc(&["GET", "200"]);
        requests.inc(&["PUT", "409"]);
        let family = requests.family("r_total", "r");
        assert_eq!(family.samples.len(), 2);
        assert_eq!(family.samples[0].value, Value::Number(2.0));
        assert_eq!(
            family.samples[1].labels,
            [("method", "PUT".to_string()), ("code", "409".to_string())]
        );
    }
}
