//! Probes as the kubelet runs them: `exec` inside the container, `tcpSocket` and `httpGet`
//! against the pod's IP, every `periodSeconds`, with thresholds and timeouts.
//!
//! WORKSHOP.md, "Set-up: the sandbox". A startup probe holds the other two back until it has
//! succeeded; readiness drives the Ready condition (and so a Service's endpoints); liveness
//! failures restart the container. The defaults are Kubernetes': period 10 s, timeout 1 s,
//! failureThreshold 3, successThreshold 1.
//!
//! Every pod shares the machine's network, so 127.0.0.1 inside a pod is the machine, not the pod
//! (and every pod's port 5432 cannot live there). The pod's /etc/hosts names the pod IP
//! `localhost`, and in `exec` probes the literal `127.0.0.1` is replaced by the pod IP, so a
//! probe written for a cluster (`pg_isready -h 127.0.0.1`) checks this pod's server.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What a probe checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    Exec(Vec<String>),
    Tcp { port: u16 },
    Http { port: u16, path: String },
}

/// One probe of a container spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Probe {
    pub(crate) check: Check,
    pub(crate) initial_delay: Duration,
    pub(crate) period: Duration,
    pub(crate) timeout: Duration,
    pub(crate) success_threshold: u32,
    pub(crate) failure_threshold: u32,
}

impl Probe {
    /// `container[field]` (`readinessProbe`, ...) if present and of a kind the sandbox runs.
    pub(crate) fn from_spec(container: &Value, field: &str) -> Option<Probe> {
        let spec = container.get(field).filter(|p| p.is_object())?;
        let seconds = |name: &str, default: u64| {
            Duration::from_secs(spec[name].as_u64().filter(|s| *s > 0).unwrap_or(default))
        };
        let count = |name: &str, default: u32| {
            spec[name]
                .as_u64()
                .filter(|c| *c > 0)
                .map(|c| c as u32)
                .unwrap_or(default)
        };
        let check = if let Some(command) = spec["exec"]["command"].as_array() {
            Check::Exec(
                command
                    .iter()
                    .map(|a| a.as_str().unwrap_or_default().to_string())
                    .collect(),
            )
        } else if spec["tcpSocket"].is_object() {
            Check::Tcp {
                port: port_of(container, &spec["tcpSocket"]["port"])?,
            }
        } else if spec["httpGet"].is_object() {
            Check::Http {
                port: port_of(container, &spec["httpGet"]["port"])?,
                path: spec["httpGet"]["path"].as_str().unwrap_or("/").to_string(),
            }
        } else {
            return None;
        };
        Some(Probe {
            check,
            initial_delay: Duration::from_secs(spec["initialDelaySeconds"].as_u64().unwrap_or(0)),
            period: seconds("periodSeconds", 10),
            timeout: seconds("timeoutSeconds", 1),
            success_threshold: count("successThreshold", 1),
            failure_threshold: count("failureThreshold", 3),
        })
    }
}

/// A port number, or the name of one of the container's ports.
fn port_of(container: &Value, port: &Value) -> Option<u16> {
    if let Some(number) = port.as_u64() {
        return u16::try_from(number).ok();
    }
    let name = port.as_str()?;
    if let Ok(number) = name.parse() {
        return Some(number);
    }
    container["ports"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
}

/// An exec probe's command with `127.0.0.1` meaning this pod (see the module doc).
pub(crate) fn exec_argv(command: &[String], pod_ip: Ipv4Addr) -> Vec<String> {
    command
        .iter()
        .map(|arg| arg.replace("127.0.0.1", &pod_ip.to_string()))
        .collect()
}

/// Connect to `pod_ip:port` within `timeout`.
pub(crate) async fn tcp(pod_ip: Ipv4Addr, port: u16, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, TcpStream::connect((pod_ip, port))).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("dial tcp {pod_ip}:{port}: connect: {e}")),
        Err(_) => Err(format!("dial tcp {pod_ip}:{port}: i/o timeout")),
    }
}

/// `GET path` on `pod_ip:port`: any status from 200 to 399 is a success, as for the kubelet.
pub(crate) async fn http(
    pod_ip: Ipv4Addr,
    port: u16,
    path: &str,
    timeout: Duration,
) -> Result<(), String> {
    let attempt = async {
        let mut stream = TcpStream::connect((pod_ip, port))
            .await
            .map_err(|e| format!("Get \"http://{pod_ip}:{port}{path}\": {e}"))?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {pod_ip}:{port}\r\nUser-Agent: kube-probe/1.32\r\nConnection: close\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut head = vec![0u8; 64];
        let read = stream.read(&mut head).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&head[..read]);
        let code: u16 = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("malformed HTTP response: {text:?}"))?;
        if (200..400).contains(&code) {
            Ok(())
        } else {
            Err(format!("HTTP probe failed with statuscode: {code}"))
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "Get \"http://{pod_ip}:{port}{path}\": context deadline exceeded"
            ))
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn probes_take_kubernetes_defaults_and_named_ports() {
        let container = json!({
            "ports": [{"name": "postgres", "containerPort": 5432}],
            "readinessProbe": {"tcpSocket": {"port": "postgres"}, "periodSeconds": 2},
            "livenessProbe": {"exec": {"command": ["pg_isready", "-h", "127.0.0.1"]}}
        });
        let readiness = Probe::from_spec(&container, "readinessProbe").expect("a probe");
        assert_eq!(readiness.check, Check::Tcp { port: 5432 });
        assert_eq!(readiness.period, Duration::from_secs(2));
        assert_eq!(readiness.failure_threshold, 3);
        let liveness = Probe::from_spec(&container, "livenessProbe").expect("a probe");
        assert_eq!(liveness.period, Duration::from_secs(10));
        assert_eq!(Probe::from_spec(&container, "startupProbe"), None);
        let Check::Exec(command) = liveness.check else {
            panic!("exec probe")
        };
        assert_eq!(
            exec_argv(&command, Ipv4Addr::new(127, 9, 0, 2)),
            ["pg_isready", "-h", "127.9.0.2"]
        );
    }
}
