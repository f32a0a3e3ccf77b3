//! What the metrics tests share: a plain HTTP GET of the operator's endpoints, and `/metrics`
//! read by a strict Prometheus text parser.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use openmetrics_parser::{MetricNumber, PrometheusValue};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` on `address` as curl would: the status code and the body.
pub async fn get(address: SocketAddr, path: &str) -> (u16, String) {
    try_get(address, path)
        .await
        .unwrap_or_else(|| panic!("GET {path} on {address} answered nothing readable"))
}

/// [`get`], or `None` when no readable answer came within 20 s.
pub async fn try_get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        let answer = String::from_utf8(answer).ok()?;
        let (head, body) = answer.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_string()))
    };
    tokio::time::timeout(Duration::from_secs(20), exchange)
        .await
        .ok()
        .flatten()
}

/// One sample: its labels and value (a histogram's: its count).
#[derive(Clone, Debug)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// `/metrics` as the parser read it: family name → samples.
#[derive(Debug)]
pub struct Scrape {
    pub families: BTreeMap<String, Vec<Sample>>,
}

impl Scrape {
    /// Parse `text`; panics, with the parser's reason, on anything Prometheus would refuse.
    pub fn parse(text: &str) -> Scrape {
        let exposition = openmetrics_parser::prometheus::parse_prometheus(text)
            .unwrap_or_else(|error| panic!("not the Prometheus text format: {error:?}\n{text}"));
        let mut families = BTreeMap::new();
        for (name, family) in exposition.families {
            let samples = family
                .iter_samples()
                .map(|sample| {
                    let labels = sample
                        .get_labelset()
                        .map(|set| set.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                        .unwrap_or_default();
                    let value = match &sample.value {
                        PrometheusValue::Unknown(n) | PrometheusValue::Gauge(n) => number(n),
                        PrometheusValue::Counter(c) => number(&c.value),
                        PrometheusValue::Histogram(h) => h.count.unwrap_or(0) as f64,
                        PrometheusValue::Summary(s) => s.count.unwrap_or(0) as f64,
                    };
                    Sample { labels, value }
                })
                .collect();
            families.insert(name, samples);
        }
        Scrape { families }
    }

    /// The samples of `name` (a counter with or without its `_total`).
    pub fn samples(&self, name: &str) -> Vec<Sample> {
        let bare = name.strip_suffix("_total").unwrap_or(name);
        self.families
            .get(name)
            .or_else(|| self.families.get(bare))
            .cloned()
            .unwrap_or_default()
    }

    /// The value of `name` whose labels include `labels`; summed over every match.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let matching: Vec<f64> = self
            .samples(name)
            .into_iter()
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .collect();
        (!matching.is_empty()).then(|| matching.iter().sum())
    }
}

fn number(n: &MetricNumber) -> f64 {
    n.as_f64()
}
