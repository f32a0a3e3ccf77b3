//! Services under the process runtime: the endpoints controller and kube-proxy in one loop.
//! ClusterIPs are loopback addresses in `127.B.192.0/18` (above the pods' addresses, see
//! `addresses.rs`), so a client on this machine or in any pod connects to them directly.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Every sync period the loop reads the Services and pods
//! and (1) writes each selector Service's Endpoints: ready pods in `addresses`, the others in
//! `notReadyAddresses`, each port's `targetPort` resolved (a number, or a container port's
//! name), and the same as EndpointSlices; (2) listens on `ClusterIP:port` only while the Service has a ready endpoint and
//! forwards each connection's bytes to one of them (round robin). With no ready endpoint
//! nothing listens, so a connection is refused, as kube-proxy's REJECT rule answers; the
//! connections already open stay open (conntrack), so a terminating pod keeps its clients.
//!
//! Cluster DNS has no server here: [`host_names`] gives the lines each pod's /etc/hosts carries
//! for the Services (kept current by the pod's worker), and [`service_links`] the
//! `<SVC>_SERVICE_HOST` variables the kubelet puts in a container's environment.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::random::Xorshift;
use crate::store::{Store, StoreState};
use crate::sync::lock;
use crate::timefmt;

/// One Service port's ready backends, shared with its listener.
type Backends = Arc<Mutex<Vec<SocketAddr>>>;

/// A listening `ClusterIP:port` and how to stop it.
struct Listener {
    backends: Backends,
    stop: CancellationToken,
}

/// The loop: until `shutdown`, keep Endpoints and listeners in step with Services and pods, and
/// the `kubernetes` Service pointing at `api_server`.
pub(crate) async fn run(
    store: Arc<Store>,
    block: u8,
    api_server: Option<SocketAddr>,
    period: Duration,
    shutdown: CancellationToken,
) {
    let mut listeners: HashMap<SocketAddr, Listener> = HashMap::new();
    // (namespace, name) of Services whose Endpoints this loop wrote: removed with the Service.
    let mut managed: BTreeSet<(String, String)> = BTreeSet::new();
    let mut random = Xorshift::from_entropy();
    // The store's revision at the last pass (None: a listener could not be bound then).
    let mut synced: Option<u64> = None;
    let mut changes = store.subscribe();
    loop {
        // Every input of a pass (Services, pods, Endpoints) is in the store: a pass follows
        // each change at once (a failover's relabelled pods reach the primary Service's
        // endpoints without waiting for a poll), and while the revision stands still there is
        // nothing to redo (passes that listed every pod and Service five times a second were
        // the sandbox's largest idle cost after the probes).
        let revision = store.revision();
        if synced == Some(revision) {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                Ok(()) = changes.changed() => {}
                _ = tokio::time::sleep(period) => {}
            }
            continue;
        }
        synced = Some(revision);
        if let Some(api_server) = api_server {
            ensure_kubernetes_service(&mut store.lock(), block, api_server, &mut random);
        }
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
                        // Taken (another sandbox's Service on the same address): retry after
                        // a resync period, changes or not.
                        synced = None;
                        continue;
                    };
                    let shared = Arc::new(Mutex::new(backends));
                    let stop = shutdown.child_token();
                    tokio::spawn(proxy(
                        socket,
                        shared.clone(),
                        stop.clone(),
                        shutdown.clone(),
                    ));
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
        // At most twenty passes a second, however fast the store changes.
        let spacing = if synced.is_none() {
            period
        } else {
            MIN_PASS_SPACING
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(spacing) => {}
        }
    }
}

/// The least time between two passes of [`run`]'s loop.
const MIN_PASS_SPACING: Duration = Duration::from_millis(50);

fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(128)
}

/// Accept on `socket` until `stop`, piping each connection to the next backend until the
/// connection ends or the sandbox `shutdown`s.
async fn proxy(
    socket: TcpListener,
    backends: Backends,
    stop: CancellationToken,
    shutdown: CancellationToken,
) {
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
        // Connections already open outlive a Service's last ready endpoint, and so the listener
        // (`stop`), but not the sandbox. kube-proxy removes a terminating endpoint from the
        // Service's rules, but established flows keep going by their conntrack entries (only
        // UDP entries are flushed), so the pod can finish its shutdown over them: a primary
        // deleted for a switchover keeps its standbys' replication connections (made through
        // `<cluster>-primary`), ships them its last WAL, and lets a synchronous commit that
        // waits for a standby complete. Cutting them left such a commit waiting for a standby
        // that could no longer reconnect (nothing listens), and the pod Terminating.
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let Ok(mut upstream) = TcpStream::connect(backend).await else {
                return;
            };
            tokio::select! {
                _ = shutdown.cancelled() => {}
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
        let groups = group_by_ports(&selected, &ports);
        let subsets = endpoint_subsets(&groups);
        let slices = slice_contents(&groups);
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
        write_endpoint_slices(&mut state, service, slices, random);
        managed.insert((namespace.to_string(), name.to_string()));
    }
    // A Service gone (or its selector removed): its Endpoints go too.
    for (namespace, name) in managed.difference(&seen).cloned().collect::<Vec<_>>() {
        if state.get("/endpoints", &namespace, &name).is_some() {
            state.commit_deleted("/endpoints", &namespace, &name);
        }
        for slice in slices_of(&state, &namespace, &name) {
            delete_slice(&mut state, &slice);
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

/// Pods with an IP grouped by their resolved ports (a named `targetPort` may be a different
/// number in each pod); pods that resolve none of the ports are no endpoint at all.
fn group_by_ports<'a>(
    pods: &[&'a Value],
    ports: &[&Value],
) -> BTreeMap<Vec<ResolvedPort>, Vec<&'a Value>> {
    let mut groups: BTreeMap<Vec<ResolvedPort>, Vec<&Value>> = BTreeMap::new();
    for pod in pods {
        if pod["status"]["podIP"]
            .as_str()
            .is_none_or(|ip| ip.is_empty())
        {
            continue;
        }
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
        if !resolved.is_empty() {
            groups.entry(resolved).or_default().push(pod);
        }
    }
    groups
}

/// What Endpoints and EndpointSlices say about the pod behind an address.
fn target_ref(pod: &Value) -> Value {
    json!({"kind": "Pod", "namespace": pod["metadata"]["namespace"],
           "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]})
}

/// The `subsets` of an Endpoints object: one per distinct set of resolved ports, as the
/// endpoints controller repacks them, ready pods in `addresses`, the others in
/// `notReadyAddresses`.
fn endpoint_subsets(groups: &BTreeMap<Vec<ResolvedPort>, Vec<&Value>>) -> Value {
    let subsets: Vec<Value> = groups
        .iter()
        .map(|(ports, pods)| {
            let (mut ready, mut not_ready) = (Vec::new(), Vec::new());
            for pod in pods {
                let address = json!({
                    "ip": pod["status"]["podIP"],
                    "nodeName": pod["spec"]["nodeName"],
                    "targetRef": target_ref(pod),
                });
                if is_ready(pod) {
                    ready.push(address);
                } else {
                    not_ready.push(address);
                }
            }
            let ports: Vec<Value> = ports
                .iter()
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

/// The `(endpoints, ports)` of each EndpointSlice the EndpointSlice controller would write: one
/// per distinct set of resolved ports (it also splits at 100 endpoints, which a sandbox never
/// reaches), or one empty slice when no pod is an endpoint. `ready` is Ready and not
/// terminating, `serving` is Ready, `terminating` has a deletionTimestamp.
fn slice_contents(groups: &BTreeMap<Vec<ResolvedPort>, Vec<&Value>>) -> Vec<(Value, Value)> {
    let mut slices: Vec<(Value, Value)> = groups
        .iter()
        .map(|(ports, pods)| {
            let endpoints: Vec<Value> = pods
                .iter()
                .map(|pod| {
                    let terminating = !pod["metadata"]["deletionTimestamp"].is_null();
                    let serving = pod["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    });
                    json!({
                        "addresses": [pod["status"]["podIP"]],
                        "conditions": {"ready": serving && !terminating, "serving": serving,
                                       "terminating": terminating},
                        "nodeName": pod["spec"]["nodeName"],
                        "targetRef": target_ref(pod),
                    })
                })
                .collect();
            let ports: Vec<Value> = ports
                .iter()
                .map(|(name, port, protocol)| {
                    json!({"name": name, "port": port, "protocol": protocol})
                })
                .collect();
            (json!(endpoints), json!(ports))
        })
        .collect();
    if slices.is_empty() {
        slices.push((json!([]), json!([])));
    }
    slices
}

/// The label that ties an EndpointSlice to its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Who wrote an EndpointSlice: the controller leaves alone those it did not.
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
const MANAGED_BY: &str = "endpointslice-controller.k8s.io";

/// The Service's EndpointSlices that the controller wrote (by label), in name order.
fn slices_of(state: &StoreState, namespace: &str, service: &str) -> Vec<Arc<Value>> {
    state
        .list(ENDPOINT_SLICES, Some(namespace))
        .into_iter()
        .filter(|s| {
            let labels = &s["metadata"]["labels"];
            labels[SERVICE_NAME_LABEL] == service && labels[MANAGED_BY_LABEL] == MANAGED_BY
        })
        .collect()
}

/// The store key of EndpointSlices (group `discovery.k8s.io`).
const ENDPOINT_SLICES: &str = "discovery.k8s.io/endpointslices";

/// Bring the Service's EndpointSlices to `wanted`: update those that differ, create the
/// missing ones (`<service>-<random>`, as the controller's generateName), delete the rest.
fn write_endpoint_slices(
    state: &mut StoreState,
    service: &Value,
    wanted: Vec<(Value, Value)>,
    random: &mut Xorshift,
) {
    let namespace = service["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let name = service["metadata"]["name"].as_str().unwrap_or_default();
    let mut existing = slices_of(state, namespace, name).into_iter();
    for (endpoints, ports) in wanted {
        match existing.next() {
            Some(slice) if slice["endpoints"] == endpoints && slice["ports"] == ports => {}
            Some(slice) => {
                let mut next = (*slice).clone();
                next["endpoints"] = endpoints;
                next["ports"] = ports;
                state.commit_modified(ENDPOINT_SLICES, next);
            }
            None => {
                let mut labels = service["metadata"]["labels"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                labels.insert(SERVICE_NAME_LABEL.into(), json!(name));
                labels.insert(MANAGED_BY_LABEL.into(), json!(MANAGED_BY));
                let slice = json!({
                    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {
                        "name": format!("{name}-{}", random.name_suffix()),
                        "generateName": format!("{name}-"),
                        "namespace": namespace, "uid": random.uuid(),
                        "creationTimestamp": timefmt::now_rfc3339(),
                        "labels": labels,
                        // Owned by the Service: deleting it deletes its slices.
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name,
                                             "uid": service["metadata"]["uid"],
                                             "controller": true, "blockOwnerDeletion": true}],
                    },
                    "addressType": "IPv4",
                    "endpoints": endpoints,
                    "ports": ports,
                });
                state.commit_added(ENDPOINT_SLICES, slice);
            }
        }
    }
    for extra in existing {
        delete_slice(state, &extra);
    }
}

fn delete_slice(state: &mut StoreState, slice: &Value) {
    let namespace = slice["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = slice["metadata"]["name"].as_str().unwrap_or_default();
    state.commit_deleted(ENDPOINT_SLICES, namespace, name);
}

/// Create or update the Service's Endpoints when its subsets changed.
fn write_endpoints(state: &mut StoreState, service: &Value, subsets: Value, random: &mut Xorshift) {
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

/// The cluster's DNS domain: `<svc>.<ns>.svc.cluster.local`.
const CLUSTER_DOMAIN: &str = "cluster.local";

/// The /etc/hosts lines that stand in for cluster DNS in a pod of `namespace`: each Service's
/// address with `<svc>.<ns>`, `<svc>.<ns>.svc` and `<svc>.<ns>.svc.cluster.local`, plus bare
/// `<svc>` for the pod's own namespace (what the pod's DNS search path
/// `<ns>.svc.cluster.local svc.cluster.local cluster.local` makes of a short name). A Service
/// with a ClusterIP resolves to it; a headless one (`clusterIP: None`) to its ready endpoints'
/// addresses, one line each, as cluster DNS answers with an A record per ready pod.
/// ExternalName Services (a CNAME in cluster DNS) have no line: a hosts file has no aliases.
pub(crate) fn host_names(state: &StoreState, namespace: &str) -> Vec<(IpAddr, Vec<String>)> {
    let mut lines = Vec::new();
    for service in state.list("/services", None) {
        let service_namespace = service["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default();
        let name = service["metadata"]["name"].as_str().unwrap_or_default();
        let mut names = Vec::with_capacity(4);
        if service_namespace == namespace {
            names.push(name.to_string());
        }
        names.push(format!("{name}.{service_namespace}"));
        names.push(format!("{name}.{service_namespace}.svc"));
        names.push(format!("{name}.{service_namespace}.svc.{CLUSTER_DOMAIN}"));
        let addresses: Vec<IpAddr> = match service["spec"]["clusterIP"].as_str() {
            Some("None") => state
                .get("/endpoints", service_namespace, name)
                .map(|endpoints| ready_addresses(&endpoints))
                .unwrap_or_default(),
            Some(ip) => ip.parse().ok().into_iter().collect(),
            None => Vec::new(),
        };
        for address in addresses {
            lines.push((address, names.clone()));
        }
    }
    lines
}

/// The distinct ready addresses of an Endpoints object, in order.
fn ready_addresses(endpoints: &Value) -> Vec<IpAddr> {
    let mut seen = Vec::new();
    for subset in endpoints["subsets"].as_array().into_iter().flatten() {
        for address in subset["addresses"].as_array().into_iter().flatten() {
            if let Some(ip) = address["ip"].as_str().and_then(|ip| ip.parse().ok()) {
                if !seen.contains(&ip) {
                    seen.push(ip);
                }
            }
        }
    }
    seen
}

/// The variables the kubelet sets for each Service of the pod's namespace that exists when a
/// container starts (`enableServiceLinks`, true unless the pod says false): `<SVC>_SERVICE_HOST`,
/// `<SVC>_SERVICE_PORT` (the first port), `<SVC>_SERVICE_PORT_<PORTNAME>` for named ports, and
/// the Docker-link style `<SVC>_PORT`, `<SVC>_PORT_<port>_<PROTO>{,_PROTO,_PORT,_ADDR}`. The
/// name is upper-cased with `-` as `_`. Services without a ClusterIP (headless, ExternalName)
/// get none, as in the kubelet's `envvars.FromServices`.
pub(crate) fn service_links(services: &[std::sync::Arc<Value>]) -> Vec<(String, String)> {
    let variable = |name: &str| name.to_uppercase().replace('-', "_");
    let mut environment = Vec::new();
    for service in services {
        // The API server's variables come from `kubernetes_service_env`, in every namespace.
        if is_kubernetes_service(service) {
            continue;
        }
        let Some(ip) = service["spec"]["clusterIP"]
            .as_str()
            .filter(|ip| !ip.is_empty() && *ip != "None")
        else {
            continue;
        };
        let prefix = variable(service["metadata"]["name"].as_str().unwrap_or_default());
        let ports: Vec<&Value> = service["spec"]["ports"]
            .as_array()
            .map(|p| p.iter().collect())
            .unwrap_or_default();
        let Some(first) = ports.first() else {
            continue;
        };
        environment.push((format!("{prefix}_SERVICE_HOST"), ip.to_string()));
        environment.push((format!("{prefix}_SERVICE_PORT"), first["port"].to_string()));
        for port in &ports {
            if let Some(port_name) = port["name"].as_str().filter(|n| !n.is_empty()) {
                environment.push((
                    format!("{prefix}_SERVICE_PORT_{}", variable(port_name)),
                    port["port"].to_string(),
                ));
            }
        }
        for (index, port) in ports.iter().enumerate() {
            let protocol = port["protocol"].as_str().unwrap_or("TCP");
            let number = port["port"].to_string();
            let url = format!("{}://{ip}:{number}", protocol.to_lowercase());
            if index == 0 {
                environment.push((format!("{prefix}_PORT"), url.clone()));
            }
            let port_prefix = format!("{prefix}_PORT_{number}_{}", protocol.to_uppercase());
            environment.push((port_prefix.clone(), url));
            environment.push((format!("{port_prefix}_PROTO"), protocol.to_lowercase()));
            environment.push((format!("{port_prefix}_PORT"), number));
            environment.push((format!("{port_prefix}_ADDR"), ip.to_string()));
        }
    }
    environment
}

/// The Service kube-apiserver keeps in `default` for itself.
const KUBERNETES_SERVICE: (&str, &str) = ("default", "kubernetes");

fn is_kubernetes_service(service: &Value) -> bool {
    service["metadata"]["namespace"] == KUBERNETES_SERVICE.0
        && service["metadata"]["name"] == KUBERNETES_SERVICE.1
}

/// The variables the kubelet sets in every pod, whatever its namespace and `enableServiceLinks`,
/// for the API server: `KUBERNETES_SERVICE_HOST`/`_PORT` (what an in-cluster client reads),
/// `KUBERNETES_SERVICE_PORT_HTTPS`, `KUBERNETES_PORT` and `KUBERNETES_PORT_<port>_TCP{,_PROTO,_PORT,_ADDR}`.
///
/// In a cluster they name the `kubernetes` Service's ClusterIP and port 443. Here they name the
/// sandbox's own address and port, which pods reach directly (they share the machine's network):
/// nothing listens on the Service's ClusterIP, since port 443 cannot be bound without privilege,
/// and the sandbox's serving certificate names its own address, which a client verifies. So the
/// port in the names is the sandbox's port, agreeing with the values.
pub(crate) fn kubernetes_service_env(api_server: SocketAddr) -> Vec<(String, String)> {
    let as_a_service = json!({
        "metadata": {"name": "kubernetes"},
        "spec": {"clusterIP": api_server.ip().to_string(),
                 "ports": [{"name": "https", "port": api_server.port(), "protocol": "TCP"}]},
    });
    service_links(&[Arc::new(as_a_service)])
}

/// The `kubernetes` Service in `default` with its Endpoints and EndpointSlice, as kube-apiserver's
/// reconciler keeps them: created if missing (so deleting it brings it back), the endpoint
/// rewritten if it changed. Its ClusterIP is the first address of the Service range
/// (`127.B.192.1`), which kube-apiserver reserves for it; port 443 (`https`) targets the sandbox's
/// port. It has no selector: the endpoints controller leaves it alone, and no proxy listens on
/// its ClusterIP (see [`kubernetes_service_env`] for how pods reach the API).
/// The address block of the stored `kubernetes` Service (`127.B.192.1`), if there is one: a
/// sandbox restarted on its data directory keeps the block its Services' addresses are in.
pub(crate) fn stored_block(state: &StoreState) -> Option<u8> {
    let (namespace, name) = KUBERNETES_SERVICE;
    let service = state.get("/services", namespace, name)?;
    let ip: std::net::Ipv4Addr = service["spec"]["clusterIP"].as_str()?.parse().ok()?;
    let [127, block, 192, 1] = ip.octets() else {
        return None;
    };
    Some(block)
}

pub(crate) fn ensure_kubernetes_service(
    state: &mut StoreState,
    block: u8,
    api_server: SocketAddr,
    random: &mut Xorshift,
) {
    let (namespace, name) = KUBERNETES_SERVICE;
    let ip = api_server.ip().to_string();
    let port = api_server.port();
    let labels = json!({"component": "apiserver", "provider": "kubernetes"});
    let metadata = |random: &mut Xorshift| {
        json!({"name": name, "namespace": namespace, "uid": random.uuid(),
               "creationTimestamp": timefmt::now_rfc3339(), "labels": labels})
    };
    if state.get("/services", namespace, name).is_none() {
        let cluster_ip = format!("127.{block}.192.1");
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": metadata(random),
            "spec": {
                "type": "ClusterIP", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
                "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
            },
            "status": {"loadBalancer": {}},
        });
        state.commit_added("/services", service);
    }
    let subsets = json!([{"addresses": [{"ip": ip}],
                          "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]);
    match state.get("/endpoints", namespace, name) {
        Some(existing) if existing["subsets"] == subsets => {}
        Some(existing) => {
            let mut next = (*existing).clone();
            next["subsets"] = subsets;
            state.commit_modified("/endpoints", next);
        }
        None => {
            let mut endpoints = json!({"apiVersion": "v1", "kind": "Endpoints",
                                       "metadata": metadata(random), "subsets": subsets});
            // kube-apiserver writes the slice itself: the mirroring controller must not.
            endpoints["metadata"]["labels"]["endpointslice.kubernetes.io/skip-mirror"] =
                json!("true");
            state.commit_added("/endpoints", endpoints);
        }
    }
    let endpoints = json!([{"addresses": [ip], "conditions": {"ready": true}}]);
    let ports = json!([{"name": "https", "port": port, "protocol": "TCP"}]);
    match state.get(ENDPOINT_SLICES, namespace, name) {
        Some(slice) if slice["endpoints"] == endpoints && slice["ports"] == ports => {}
        Some(slice) => {
            let mut next = (*slice).clone();
            next["endpoints"] = endpoints;
            next["ports"] = ports;
            state.commit_modified(ENDPOINT_SLICES, next);
        }
        None => {
            let mut slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                                   "metadata": metadata(random), "addressType": "IPv4",
                                   "endpoints": endpoints, "ports": ports});
            slice["metadata"]["labels"] = json!({SERVICE_NAME_LABEL: name});
            state.commit_added(ENDPOINT_SLICES, slice);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Send `byte` on `stream` and read what comes back; None if the connection is closed.
    async fn round_trip(stream: &mut TcpStream, byte: u8) -> Option<u8> {
        stream.write_all(&[byte]).await.ok()?;
        let mut answer = [0u8; 1];
        match stream.read(&mut answer).await {
            Ok(1) => Some(answer[0]),
            _ => None,
        }
    }

    /// The Service loses its last ready endpoint (its pod is terminating): the listener stops,
    /// so a new connection is refused, but the one already open goes on carrying bytes both
    /// ways (as conntrack keeps an established flow) until the sandbox shuts down.
    #[tokio::test]
    async fn an_open_connection_outlives_the_listener_but_not_the_sandbox() {
        let backend = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("backend bound");
        let backend_address = backend.local_addr().expect("backend address");
        let echo = tokio::spawn(async move {
            let (mut stream, _) = backend.accept().await.expect("accepted");
            let mut byte = [0u8; 1];
            while let Ok(1) = stream.read(&mut byte).await {
                if stream.write_all(&byte).await.is_err() {
                    break;
                }
            }
        });
        let socket = bind("127.0.0.1:0".parse().expect("address")).expect("service bound");
        let service_address = socket.local_addr().expect("service address");
        let (stop, shutdown) = (CancellationToken::new(), CancellationToken::new());
        let listener = tokio::spawn(proxy(
            socket,
            Arc::new(Mutex::new(vec![backend_address])),
            stop.clone(),
            shutdown.clone(),
        ));
        let mut client = TcpStream::connect(service_address)
            .await
            .expect("connected through the service");
        assert_eq!(round_trip(&mut client, 1).await, Some(1));

        stop.cancel();
        listener.await.expect("the listener stops");
        assert!(
            TcpStream::connect(service_address).await.is_err(),
            "nothing listens without a ready endpoint"
        );
        assert_eq!(
            round_trip(&mut client, 2).await,
            Some(2),
            "the open connection is cut with the listener"
        );

        shutdown.cancel();
        assert_eq!(round_trip(&mut client, 3).await, None);
        echo.await.expect("the backend's connection ends");
    }

    #[test]
    fn service_links_name_each_cluster_ip_service_and_skip_headless_ones() {
        let services = vec![
            Arc::new(
                json!({"metadata": {"name": "pg-primary"}, "spec": {"clusterIP": "127.9.192.4",
                "ports": [{"name": "postgres", "port": 5432, "protocol": "TCP"}]}}),
            ),
            Arc::new(
                json!({"metadata": {"name": "pg-pods"}, "spec": {"clusterIP": "None",
                "ports": [{"port": 5432}]}}),
            ),
        ];
        let environment = service_links(&services);
        let get = |name: &str| {
            environment
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("PG_PRIMARY_SERVICE_HOST"), Some("127.9.192.4"));
        assert_eq!(get("PG_PRIMARY_SERVICE_PORT"), Some("5432"));
        assert_eq!(get("PG_PRIMARY_SERVICE_PORT_POSTGRES"), Some("5432"));
        assert_eq!(get("PG_PRIMARY_PORT"), Some("tcp://127.9.192.4:5432"));
        assert_eq!(get("PG_PRIMARY_PORT_5432_TCP_ADDR"), Some("127.9.192.4"));
        assert!(!environment.iter().any(|(n, _)| n.starts_with("PG_PODS")));
    }

    #[test]
    fn hosts_name_services_everywhere_bare_in_their_own_namespace_headless_by_ready_pods() {
        let store = Store::new(10, 10);
        let mut state = store.lock();
        let service = |namespace: &str, name: &str, ip: &str| {
            json!({"metadata": {"namespace": namespace, "name": name},
                   "spec": {"clusterIP": ip, "ports": [{"port": 5432}]}})
        };
        state.commit_added("/services", service("db", "pg-primary", "127.9.192.4"));
        state.commit_added("/services", service("other", "cache", "127.9.192.5"));
        state.commit_added("/services", service("db", "pg-pods", "None"));
        state.commit_added(
            "/endpoints",
            json!({"metadata": {"namespace": "db", "name": "pg-pods"}, "subsets": [{
                "addresses": [{"ip": "127.9.0.2"}, {"ip": "127.9.0.3"}],
                "notReadyAddresses": [{"ip": "127.9.0.4"}]}]}),
        );
        let lines = host_names(&state, "db");
        let names_of = |ip: &str| -> Vec<Vec<String>> {
            let ip: IpAddr = ip.parse().expect("an address");
            lines
                .iter()
                .filter(|(a, _)| *a == ip)
                .map(|(_, n)| n.clone())
                .collect()
        };
        assert_eq!(
            names_of("127.9.192.4"),
            vec![vec![
                "pg-primary".to_string(),
                "pg-primary.db".into(),
                "pg-primary.db.svc".into(),
                "pg-primary.db.svc.cluster.local".into()
            ]]
        );
        assert_eq!(names_of("127.9.192.5")[0][0], "cache.other");
        assert_eq!(names_of("127.9.0.2")[0][0], "pg-pods");
        assert_eq!(names_of("127.9.0.3").len(), 1);
        assert!(
            names_of("127.9.0.4").is_empty(),
            "not-ready pods are not named"
        );
    }

    #[test]
    fn every_pod_is_told_the_api_servers_address_and_the_kubernetes_service_gives_no_link() {
        let api: SocketAddr = "127.0.0.1:8001".parse().expect("address");
        let environment = kubernetes_service_env(api);
        let get = |name: &str| {
            environment
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("127.0.0.1"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT"), Some("8001"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT_HTTPS"), Some("8001"));
        assert_eq!(get("KUBERNETES_PORT"), Some("tcp://127.0.0.1:8001"));
        assert_eq!(
            get("KUBERNETES_PORT_8001_TCP"),
            Some("tcp://127.0.0.1:8001")
        );
        assert_eq!(get("KUBERNETES_PORT_8001_TCP_PROTO"), Some("tcp"));
        assert_eq!(get("KUBERNETES_PORT_8001_TCP_ADDR"), Some("127.0.0.1"));
        assert_eq!(get("KUBERNETES_PORT_8001_TCP_PORT"), Some("8001"));

        let store = Store::new(10, 10);
        let mut state = store.lock();
        let mut random = Xorshift::from_entropy();
        ensure_kubernetes_service(&mut state, 9, api, &mut random);
        let in_default = state.list("/services", Some("default"));
        assert!(
            service_links(&in_default).is_empty(),
            "the kubernetes Service's ClusterIP is not linked: {:?}",
            service_links(&in_default)
        );
    }

    #[test]
    fn the_kubernetes_service_takes_the_first_address_and_comes_back_when_deleted() {
        let api: SocketAddr = "127.0.0.1:8001".parse().expect("address");
        let store = Store::new(10, 10);
        let mut state = store.lock();
        let mut random = Xorshift::from_entropy();
        ensure_kubernetes_service(&mut state, 9, api, &mut random);
        let service = state
            .get("/services", "default", "kubernetes")
            .expect("created");
        assert_eq!(service["spec"]["clusterIP"], "127.9.192.1");
        assert_eq!(service["spec"]["ports"][0]["port"], 443);
        assert_eq!(service["spec"]["ports"][0]["targetPort"], 8001);
        let endpoints = state
            .get("/endpoints", "default", "kubernetes")
            .expect("endpoints");
        assert_eq!(endpoints["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");
        assert_eq!(endpoints["subsets"][0]["ports"][0]["port"], 8001);
        let slice = state
            .get(ENDPOINT_SLICES, "default", "kubernetes")
            .expect("slice");
        assert_eq!(slice["endpoints"][0]["addresses"][0], "127.0.0.1");
        assert_eq!(
            slice["metadata"]["labels"][SERVICE_NAME_LABEL],
            "kubernetes"
        );

        let revision = state.revision();
        ensure_kubernetes_service(&mut state, 9, api, &mut random);
        assert_eq!(state.revision(), revision, "nothing to change");
        state.commit_deleted("/services", "default", "kubernetes");
        ensure_kubernetes_service(&mut state, 9, api, &mut random);
        assert!(state.get("/services", "default", "kubernetes").is_some());
    }
}
