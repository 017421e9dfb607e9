"""Real clusters for tests, on this machine: started and stopped by the test, by PID.

ray_cluster():   a 2-node Ray cluster on loopback, head on 127.0.0.2, worker on 127.0.0.3
                 (Ray treats 127.0.0.1 as "localhost" and swaps in another interface; the
                 other loopback addresses it takes as they are: see NOTES/distributed.md).
slurm_cluster(): a single-node Slurm (Debian's slurm-wlm + munge), installed with apt if
                 missing; needs root.

Ray binds some ports on every interface: the Ray tests run the cluster, with the
corpusprep command that uses it, inside a network namespace of their own that has only a
loopback interface (loopback_only(), when root), where 0.0.0.0 is loopback and nothing
else. Slurm 22.05 cannot start in such a namespace; its daemons listen on 0.0.0.0 of the
host (Slurm has no bind option) and all its traffic goes to 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from helpers import REPO

RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@contextmanager
def loopback_only():
    """A network namespace with only `lo` (up); yields the prefix that runs a command in it."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        yield []
        return
    name = f"cp{os.getpid()}x{int(time.monotonic() * 1000) % 100000}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True)
    if r.returncode != 0:
        yield []
        return
    try:
        wrap = ["ip", "netns", "exec", name]
        subprocess.run([*wrap, "ip", "link", "set", "lo", "up"], check=True)
        yield wrap
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (ray start --block spawns the raylet, GCS, agents...)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def stop(procs: list[subprocess.Popen], grace: float = 15) -> None:
    """SIGTERM each process we started (and, after a grace period, SIGKILL it and anything
    it left below it), newest first."""
    for proc in reversed(procs):
        below = descendants(proc.pid)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=grace)
        for pid in below:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextmanager
def ray_cluster(env: dict[str, str], wrap: list[str]):
    pytest.importorskip("ray")
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:
        pytest.skip("the ray command is not installed")
    temp = tempfile.mkdtemp(prefix="cpr", dir="/tmp")  # short: Ray's unix sockets
    port = 6390 if wrap else free_port("127.0.0.2")  # a namespace of its own: nothing else there
    full = {**os.environ, **RAY_ENV, **env}
    common = ["--block", "--num-cpus=1", "--disable-usage-stats"]
    procs = [subprocess.Popen(
        [*wrap, ray, "start", "--head", "--node-ip-address=127.0.0.2", f"--port={port}",
         f"--temp-dir={temp}", "--include-dashboard=false", *common],
        env=full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]  # fmt: skip
    address = f"127.0.0.2:{port}"
    try:
        _wait_for_nodes(address, 1, full, wrap)
        procs.append(subprocess.Popen(
            [*wrap, ray, "start", f"--address={address}", "--node-ip-address=127.0.0.3", *common],
            env=full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        _wait_for_nodes(address, 2, full, wrap)
        yield address, procs
    finally:
        stop(procs)
        shutil.rmtree(temp, ignore_errors=True)


def _wait_for_nodes(address: str, count: int, env: dict[str, str], wrap: list[str],
                    timeout: float = 90) -> None:  # fmt: skip
    probe = (
        "import ray, sys\n"
        f"ray.init(address='{address}', _node_ip_address='127.0.0.2', log_to_driver=False)\n"
        "print(sum(n['Alive'] for n in ray.nodes()))\n"
        "ray.shutdown()\n"
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run([*wrap, sys.executable, "-c", probe], env=env, capture_output=True,
                           text=True, timeout=60)  # fmt: skip
        if r.returncode == 0 and r.stdout.strip().isdigit() and int(r.stdout.strip()) >= count:
            return
        time.sleep(0.5)
    raise AssertionError(f"the Ray cluster at {address} never had {count} live nodes")


SLURM_CONF = """\
ClusterName=ci
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge/munge.socket
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
SchedulerParameters=sched_interval=1
MaxArraySize=10001
NodeName={host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


def _install_slurm() -> None:
    if shutil.which("slurmctld") and shutil.which("munged"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("Slurm is not installed and cannot be (needs root and apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    packages = ["slurm-wlm", "munge", "slurmctld", "slurmd", "slurm-client"]
    subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=300)
    r = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
                       env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    if r.returncode != 0 or not shutil.which("slurmctld"):
        pytest.skip(f"could not install Slurm: {r.stderr.strip()[-300:]}")


@contextmanager
def slurm_cluster(wrap: list[str]):
    if os.geteuid() != 0:
        pytest.skip("a local Slurm needs root")
    _install_slurm()
    host = socket.gethostname().split(".")[0]
    folder = Path(tempfile.mkdtemp(prefix="cps", dir="/tmp"))
    folder.chmod(0o755)  # munged runs as the munge user and must reach its folder
    for sub in ("state", "spool", "munge"):
        (folder / sub).mkdir()
    shutil.chown(folder / "munge", "munge", "munge")
    conf = folder / "slurm.conf"
    conf.write_text(SLURM_CONF.format(host=host, dir=folder, ctld_port=free_port("127.0.0.1"),
                                      slurmd_port=free_port("127.0.0.1")))  # fmt: skip
    env = {**os.environ, "SLURM_CONF": str(conf)}
    m = folder / "munge"
    procs = []
    try:
        procs.append(subprocess.Popen(
            [*wrap, "runuser", "-u", "munge", "--", "munged", "--foreground",
             f"--socket={m}/munge.socket", f"--pid-file={m}/munged.pid",
             f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))  # fmt: skip
        for daemon in (["slurmctld", "-D", "-i"], ["slurmd", "-D"]):
            procs.append(subprocess.Popen([*wrap, *daemon], env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = subprocess.run([*wrap, "sinfo", "-h", "-o", "%t"], env=env, capture_output=True,
                               text=True)  # fmt: skip
            if "idle" in r.stdout:
                break
            time.sleep(0.2)
        else:
            log = (folder / "slurmctld.log").read_text(errors="replace")[-500:] if (
                folder / "slurmctld.log").exists() else ""  # fmt: skip
            raise AssertionError(f"Slurm never became idle: {log}")
        yield {"SLURM_CONF": str(conf)}
    finally:
        stop(procs)
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["REPO", "cmdline", "descendants", "loopback_only", "ray_cluster", "slurm_cluster"]
