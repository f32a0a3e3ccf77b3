//! Support: skip it on first read — part of `/metrics`, which nothing the operator decides depends
//! on.
//!
//! The Prometheus text exposition format (version 0.0.4), what `/metrics` answers: for each
//! metric family a `# HELP` line, a `# TYPE` line, then its samples, one a line:
//!
//! ```text
//! # HELP postgres_operator_reconciles_total Reconcile rounds the cluster tasks ended.
//! # TYPE postgres_operator_reconciles_total counter
//! postgres_operator_reconciles_total 42
//! # HELP postgres_cluster_members_ready Member pods that are ready (status.readyInstances).
//! # TYPE postgres_cluster_members_ready gauge
//! postgres_cluster_members_ready{namespace="default",cluster="db"} 3
//! ```
//!
//! Bytes only: what the figures are and where they come from is `mod.rs`'s business.

use std::fmt::Write;

/// What `/metrics` says its body is. Prometheus picks its parser by this header: 0.0.4 is the
/// plain text format every Prometheus since 2014 reads.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The three metric types this operator exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (resets to 0 when the process restarts, which `rate()` allows for).
    Counter,
    /// Any value, read as it is now.
    Gauge,
    /// Observations counted into buckets, with their sum and count.
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric family: a name, its help, its type and every sample of it. A family's samples
/// must sit together under one HELP and TYPE: Prometheus refuses a name seen twice.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// `[a-zA-Z_:][a-zA-Z0-9_:]*`; a counter's ends in `_total`.
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub samples: Vec<Sample>,
}

/// One sample: its labels (names are constants of this crate, values anything) and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub labels: Vec<(&'static str, String)>,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Number(f64),
    Histogram(Buckets),
}

/// A histogram as observed so far: `counts[i]` observations fell at or below `bounds[i]` and
/// above `bounds[i - 1]` (not cumulative: the format's cumulative counts are made here).
#[derive(Clone, Debug, PartialEq)]
pub struct Buckets {
    pub bounds: &'static [f64],
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Family {
    pub const fn new(name: &'static str, help: &'static str, kind: Kind) -> Family {
        Family {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    /// Add one sample with these labels.
    pub fn sample(mut self, labels: Vec<(&'static str, String)>, value: f64) -> Family {
        self.samples.push(Sample {
            labels,
            value: Value::Number(value),
        });
        self
    }
}

/// Every family in the text format, in the order given.
pub fn render(families: &[Family]) -> String {
    let mut out = String::new();
    for family in families {
        let (name, help, kind) = (family.name, escape(family.help, false), family.kind.name());
        // Writing to a String cannot fail.
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for sample in &family.samples {
            match &sample.value {
                Value::Number(value) => line(&mut out, name, "", &sample.labels, *value),
                Value::Histogram(buckets) => histogram(&mut out, name, sample, buckets),
            }
        }
    }
    out
}

/// `name_bucket{le=...}` per bound, cumulative, then `le="+Inf"`, `name_sum` and `name_count`.
/// Prometheus requires the `+Inf` bucket, and that it equal the count.
fn histogram(out: &mut String, name: &str, sample: &Sample, buckets: &Buckets) {
    let with_le = |le: String| {
        let mut labels = sample.labels.clone();
        labels.push(("le", le));
        labels
    };
    let mut cumulative = 0;
    for (bound, count) in buckets.bounds.iter().zip(&buckets.counts) {
        cumulative += count;
        let labels = with_le(format_number(*bound));
        line(out, name, "_bucket", &labels, cumulative as f64);
    }
    let count = buckets.count as f64;
    line(out, name, "_bucket", &with_le("+Inf".into()), count);
    line(out, name, "_sum", &sample.labels, buckets.sum);
    line(out, name, "_count", &sample.labels, count);
}

/// `name{a="x",b="y"} value`.
fn line(out: &mut String, name: &str, suffix: &str, labels: &[(&str, String)], value: f64) {
    let labels: Vec<String> = labels
        .iter()
        .map(|(label, value)| format!("{label}=\"{}\"", escape(value, true)))
        .collect();
    let labels = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", labels.join(","))
    };
    let _ = writeln!(out, "{name}{suffix}{labels} {}", format_number(value));
}

/// The format escapes `\` and newline; a label value, between double quotes, `"` too (HELP
/// text runs to the end of the line, where a `"` is itself).
fn escape(text: &str, in_quotes: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if in_quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// A value as Go's `strconv.ParseFloat` reads it, which is what Prometheus parses with: Rust's
/// `{}` is such a number, except for the infinities and NaN, spelled `+Inf`, `-Inf`, `NaN`.
fn format_number(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value == f64::INFINITY {
        "+Inf".into()
    } else if value == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// HELP and TYPE open each family; a counter's samples follow with their labels.
    #[test]
    fn a_family_is_help_type_then_samples() {
        let family = Family::new(
            "postgres_operator_api_requests_total",
            "API requests.",
            Kind::Counter,
        )
        .sample(vec![("method", "GET".into()), ("code", "200".into())], 7.0)
        .sample(vec![("method", "PUT".into()), ("code", "409".into())], 1.0);
        assert_eq!(
            render(&[family]),
            "# HELP postgres_operator_api_requests_total API requests.\n\
             # TYPE postgres_operator_api_requests_total counter\n\
             postgres_operator_api_requests_total{method=\"GET\",code=\"200\"} 7\n\
             postgres_operator_api_requests_total{method=\"PUT\",code=\"409\"} 1\n"
        );
    }

    /// Label values escape `\`, `"` and newline; HELP escapes `\` and newline but not `"`.
    #[test]
    fn label_values_and_help_are_escaped() {
        let family = Family::new("x", "say \"hi\"\\n\nnext", Kind::Gauge)
            .sample(vec![("pod", "a\\b\"c\nd".into())], 1.5);
        assert_eq!(
            render(&[family]),
            "# HELP x say \"hi\"\\\\n\\nnext\n\
             # TYPE x gauge\n\
             x{pod=\"a\\\\b\\\"c\\nd\"} 1.5\n"
        );
    }

    /// Buckets are cumulative, `+Inf` equals the count, then `_sum` and `_count`.
    #[test]
    fn a_histogram_has_cumulative_buckets_sum_and_count() {
        let mut family = Family::new("d_seconds", "Durations.", Kind::Histogram);
        family.samples.push(Sample {
            labels: Vec::new(),
            value: Value::Histogram(Buckets {
                bounds: &[0.1, 1.0],
                counts: vec![2, 1, 1],
                sum: 3.25,
                count: 4,
            }),
        });
        assert_eq!(
            render(&[family]),
            "# HELP d_seconds Durations.\n\
             # TYPE d_seconds histogram\n\
             d_seconds_bucket{le=\"0.1\"} 2\n\
             d_seconds_bucket{le=\"1\"} 3\n\
             d_seconds_bucket{le=\"+Inf\"} 4\n\
             d_seconds_sum 3.25\n\
             d_seconds_count 4\n"
        );
    }

    /// Numbers are Go-parsable: whole numbers without a point, infinities and NaN spelled out.
    #[test]
    fn numbers_are_spelled_as_prometheus_reads_them() {
        assert_eq!(format_number(3.0), "3");
        assert_eq!(format_number(0.005), "0.005");
        assert_eq!(format_number(f64::INFINITY), "+Inf");
        assert_eq!(format_number(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_number(f64::NAN), "NaN");
    }
}
