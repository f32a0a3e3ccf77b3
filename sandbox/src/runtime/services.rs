//! Services under the process runtime: the endpoints controller and kube-proxy in one loop.
//! ClusterIPs are loopback addresses in `127.B.192.0/18` (above the pods' addresses, see
//! `addresses.rs`), so a client on this machine or in any pod connects to them directly.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Every sync period the loop reads the Services and pods
//! and (1) writes each selector Service's Endpoints: ready pods in `addresses`, the others in
//! `notReadyAddresses`, each port's `targetPort` resolved (a number, or a container port's
//! name); (2) listens on `ClusterIP:port` only while the Service has a ready endpoint and
//! forwards each connection's bytes to one of them (round robin). With no ready endpoint
//! nothing listens, so a connection is refused, as kube-proxy's REJECT rule answers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::random::Xorshift;
use crate::store::Store;
use crate::sync::lock;
use crate::timefmt;

/// One Service port's ready backends, shared with its listener.
type Backends = Arc<Mutex<Vec<SocketAddr>>>;

/// A listening `ClusterIP:port` and how to stop it.
struct Listener {
    backends: Backends,
    stop: CancellationToken,
}

/// The loop: until `shutdown`, keep Endpoints and listeners in step with Services and pods.
pub(crate) async fn run(
    store: Arc<Store>,
    block: u8,
    period: Duration,
    shutdown: CancellationToken,
) {
    let mut listeners: HashMap<SocketAddr, Listener> = HashMap::new();
    // (namespace, name) of Services whose Endpoints this loop wrote: removed with the Service.
    let mut managed: BTreeSet<(String, String)> = BTreeSet::new();
    let mut random = Xorshift::from_entropy();
    loop {
        let wanted = sync(&store, block, &mut managed, &mut random);
        for (address, listener) in listeners.iter() {
            if !wanted.contains_key(address) {
                listener.stop.cancel();
            }
        }
        listeners.retain(|address, _| wanted.contains_key(address));
        for (address, backends) in wanted {
            match listeners.get(&address) {
                Some(listener) => *lock(&listener.backends) = backends,
                None => {
                    let Ok(socket) = bind(address) else {
                        // Taken (another sandbox's Service on the same address): retry next time.
                        continue;
                    };
                    let shared = Arc::new(Mutex::new(backends));
                    let stop = shutdown.child_token();
                    tokio::spawn(proxy(socket, shared.clone(), stop.clone()));
                    listeners.insert(
                        address,
                        Listener {
                            backends: shared,
                            stop,
                        },
                    );
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
    }
}

fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(128)
}

/// Accept on `socket` until `stop`, piping each connection to the next backend.
async fn proxy(socket: TcpListener, backends: Backends, stop: CancellationToken) {
    let turn = AtomicUsize::new(0);
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = socket.accept() => accepted,
        };
        let Ok((mut client, _)) = accepted else {
            continue;
        };
        let backend = {
            let backends = lock(&backends);
            match backends.len() {
                0 => None,
                n => Some(backends[turn.fetch_add(1, Ordering::Relaxed) % n]),
            }
        };
        let Some(backend) = backend else {
            continue;
        };
        let stop = stop.clone();
        tokio::spawn(async move {
            let Ok(mut upstream) = TcpStream::connect(backend).await else {
                return;
            };
            // Connections already open outlive a Service's last endpoint (as conntrack keeps
            // established flows), but not the sandbox.
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
            }
        });
    }
}

/// Write every Endpoints object that changed; return the listeners wanted, with their backends.
fn sync(
    store: &Store,
    block: u8,
    managed: &mut BTreeSet<(String, String)>,
    random: &mut Xorshift,
) -> HashMap<SocketAddr, Vec<SocketAddr>> {
    let mut wanted = HashMap::new();
    let mut state = store.lock();
    let services = state.list("/services", None);
    let pods = state.list("/pods", None);
    let mut seen = BTreeSet::new();
    for service in &services {
        let namespace = service["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default();
        let name = service["metadata"]["name"].as_str().unwrap_or_default();
        // Only Services with a selector get Endpoints from the controller; the others' are
        // written by hand.
        let Some(selector) = service["spec"]["selector"]
            .as_object()
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        seen.insert((namespace.to_string(), name.to_string()));
        let selected: Vec<&Value> = pods
            .iter()
            .map(|p| &**p)
            .filter(|p| p["metadata"]["namespace"] == namespace)
            .filter(|p| {
                selector
                    .iter()
                    .all(|(k, v)| p["metadata"]["labels"][k.as_str()] == *v)
            })
            .collect();
        let ports: Vec<&Value> = service["spec"]["ports"]
            .as_array()
            .map(|p| p.iter().collect())
            .unwrap_or_default();
        let subsets = endpoint_subsets(&selected, &ports);
        let cluster_ip = service["spec"]["clusterIP"]
            .as_str()
            .and_then(|ip| ip.parse::<IpAddr>().ok())
            .filter(|ip| matches!(ip, IpAddr::V4(v4) if v4.octets()[..2] == [127, block]));
        if let Some(cluster_ip) = cluster_ip {
            for (index, port) in ports.iter().enumerate() {
                let protocol = port["protocol"].as_str().unwrap_or("TCP");
                let Some(number) = port["port"].as_u64().and_then(|p| u16::try_from(p).ok()) else {
                    continue;
                };
                if protocol != "TCP" {
                    continue;
                }
                let backends: Vec<SocketAddr> = selected
                    .iter()
                    .filter(|p| is_ready(p))
                    .filter_map(|p| {
                        let ip = p["status"]["podIP"].as_str()?.parse::<IpAddr>().ok()?;
                        Some(SocketAddr::new(ip, target_port(p, ports[index])?))
                    })
                    .collect();
                if !backends.is_empty() {
                    wanted.insert(SocketAddr::new(cluster_ip, number), backends);
                }
            }
        }
        write_endpoints(&mut state, service, subsets, random);
        managed.insert((namespace.to_string(), name.to_string()));
    }
    // A Service gone (or its selector removed): its Endpoints go too.
    for (namespace, name) in managed.difference(&seen).cloned().collect::<Vec<_>>() {
        if state.get("/endpoints", &namespace, &name).is_some() {
            state.commit_deleted("/endpoints", &namespace, &name);
        }
        managed.remove(&(namespace, name));
    }
    wanted
}

/// Ready as the endpoints controller reads it: the Ready condition True and not terminating.
fn is_ready(pod: &Value) -> bool {
    pod["metadata"]["deletionTimestamp"].is_null()
        && pod["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// A Service port's `targetPort` in `pod`: a number as is, a name looked up among the pod's
/// container ports (None: this pod is no endpoint for that port).
fn target_port(pod: &Value, port: &Value) -> Option<u16> {
    let target = &port["targetPort"];
    if let Some(number) = target.as_u64() {
        return u16::try_from(number).ok();
    }
    let name = target.as_str()?;
    if let Ok(number) = name.parse::<u16>() {
        return Some(number);
    }
    pod["spec"]["containers"]
        .as_array()?
        .iter()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
}

/// An Endpoints port: (name, number, protocol).
type ResolvedPort = (String, u16, String);

/// The `subsets` of an Endpoints object: pods grouped by their resolved ports (one subset per
/// distinct set, as the endpoints controller repacks them), ready ones in `addresses`.
fn endpoint_subsets(pods: &[&Value], ports: &[&Value]) -> Value {
    let mut groups: BTreeMap<Vec<ResolvedPort>, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
    for pod in pods {
        let Some(ip) = pod["status"]["podIP"].as_str().filter(|ip| !ip.is_empty()) else {
            continue;
        };
        let resolved: Vec<ResolvedPort> = ports
            .iter()
            .filter_map(|port| {
                Some((
                    port["name"].as_str().unwrap_or_default().to_string(),
                    target_port(pod, port)?,
                    port["protocol"].as_str().unwrap_or("TCP").to_string(),
                ))
            })
            .collect();
        if resolved.is_empty() {
            continue;
        }
        let address = json!({
            "ip": ip,
            "nodeName": pod["spec"]["nodeName"],
            "targetRef": {"kind": "Pod", "namespace": pod["metadata"]["namespace"],
                          "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]},
        });
        let group = groups.entry(resolved).or_default();
        if is_ready(pod) {
            group.0.push(address);
        } else {
            group.1.push(address);
        }
    }
    let subsets: Vec<Value> = groups
        .into_iter()
        .map(|(ports, (ready, not_ready))| {
            let ports: Vec<Value> = ports
                .into_iter()
                .map(|(name, port, protocol)| {
                    let mut port = json!({"port": port, "protocol": protocol});
                    if !name.is_empty() {
                        port["name"] = json!(name);
                    }
                    port
                })
                .collect();
            let mut subset = json!({"ports": ports});
            if !ready.is_empty() {
                subset["addresses"] = json!(ready);
            }
            if !not_ready.is_empty() {
                subset["notReadyAddresses"] = json!(not_ready);
            }
            subset
        })
        .collect();
    json!(subsets)
}

/// Create or update the Service's Endpoints when its subsets changed.
fn write_endpoints(
    state: &mut crate::store::StoreState,
    service: &Value,
    subsets: Value,
    random: &mut Xorshift,
) {
    let namespace = service["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let name = service["metadata"]["name"].as_str().unwrap_or_default();
    match state.get("/endpoints", namespace, name) {
        Some(existing) if existing["subsets"] == subsets => {}
        Some(existing) => {
            let mut next = (*existing).clone();
            next["subsets"] = subsets;
            state.commit_modified("/endpoints", next);
        }
        None => {
            let mut endpoints = json!({
                "apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": name, "namespace": namespace, "uid": random.uuid(),
                             "creationTimestamp": timefmt::now_rfc3339()},
                "subsets": subsets,
            });
            // The endpoints controller copies the Service's labels.
            if service["metadata"]["labels"].is_object() {
                endpoints["metadata"]["labels"] = service["metadata"]["labels"].clone();
            }
            state.commit_added("/endpoints", endpoints);
        }
    }
}
