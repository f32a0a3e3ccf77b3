#!/usr/bin/env python3
"""What idle clusters cost the machine: WORKSHOP.md, "Measured: What the probes cost an idle machine".

Starts a sandbox (real processes) and OPERATOR on PORT, creates six clusters of three, waits until
every member is ready and 15 s more, then over SECS seconds sums the CPU of the sandbox's and the
operator's process trees (utime+stime of each process, plus cutime+cstime, so children that
ended and were reaped count too) and the machine's busy share from /proc/stat.

  cargo build --bins
  python3 tests/postgres/idle_cost.py target/debug/stage05 target/debug 120 18431

OPERATOR may be another build of stage05 (to compare two manifests); BIN_DIR holds the sandbox
and pg-ready. Not run by `cargo test`: it takes minutes and measures the machine as much as us.
usage: idle_cost.py OPERATOR BIN_DIR SECS PORT"""
import os, subprocess, sys, time, signal, json

op, bindir, secs, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
tls = f"/tmp/idle-cost-{port}"
os.makedirs(tls, exist_ok=True)
env = dict(os.environ)
sandbox = subprocess.Popen([f"{bindir}/sandbox", "--listen", f"127.0.0.1:{port}", "--tls-dir", tls,
                            "--operator-binaries", bindir, "--runtime", "processes"],
                           stdout=subprocess.DEVNULL, stderr=open(f"{tls}/sandbox.log", "w"))
kubeconfig = None
for _ in range(300):
    for f in os.listdir(tls):
        if f == "kubeconfig":
            kubeconfig = f"{tls}/kubeconfig"
    if kubeconfig:
        break
    time.sleep(0.1)
if not kubeconfig:
    cands = [f"/tmp/sandbox-{port}/kubeconfig"]
    kubeconfig = next((c for c in cands if os.path.exists(c)), None)
env["KUBECONFIG"] = kubeconfig
env["KUBECACHEDIR"] = f"{tls}/cache"
time.sleep(1)
operator = subprocess.Popen([op, "--metrics-address", "127.0.0.1:0"], env=env,
                            stdout=open(f"{tls}/operator.log", "w"), stderr=subprocess.STDOUT)
def kubectl(*args, **kw):
    return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, **kw)
try:
    for _ in range(600):
        if kubectl("get", "crd", "postgresclusters.workshop.example.com").returncode == 0:
            break
        time.sleep(0.5)
    for i in range(1, 7):
        doc = {"apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
               "metadata": {"name": f"idle-{i}"}, "spec": {"size": 3, "version": "16"}}
        r = kubectl("create", "-f", "-", input=json.dumps(doc))
        assert r.returncode == 0, r.stderr
    for i in range(1, 7):
        r = kubectl("wait", f"pgc/idle-{i}", "--for=jsonpath={.status.readyInstances}=3", "--timeout=900s")
        assert r.returncode == 0, r.stderr
    time.sleep(15)

    def tree_ticks(roots):
        procs = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            procs[int(pid)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
        keep, frontier = set(), list(roots)
        while frontier:
            p = frontier.pop()
            if p in keep or p not in procs:
                continue
            keep.add(p)
            frontier.extend(c for c, (pp, _) in procs.items() if pp == p)
        return sum(procs[p][1] for p in keep), len(keep)

    def machine():
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        idle = cpu[3] + cpu[4]
        return sum(cpu) - idle, sum(cpu)

    roots = [sandbox.pid, operator.pid]
    t0, n0 = tree_ticks(roots); m0 = machine(); start = time.monotonic()
    time.sleep(secs)
    t1, n1 = tree_ticks(roots); m1 = machine(); elapsed = time.monotonic() - start
    hz = os.sysconf("SC_CLK_TCK"); cores = os.cpu_count()
    stack = (t1 - t0) / hz / elapsed / cores * 100
    busy = (m1[0] - m0[0]) / (m1[1] - m0[1]) * 100
    print(f"{op}: {elapsed:.0f} s, {n1} processes, stack {stack:.1f} % of {cores} cores, machine busy {busy:.1f} %, load {os.getloadavg()[0]:.1f}")
finally:
    operator.send_signal(signal.SIGTERM)
    try:
        operator.wait(timeout=20)
    except subprocess.TimeoutExpired:
        operator.kill()
    sandbox.send_signal(signal.SIGTERM)
    try:
        sandbox.wait(timeout=60)
    except subprocess.TimeoutExpired:
        sandbox.kill()
