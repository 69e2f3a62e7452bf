"""A local cluster of the real executables on loopback, for the Python SDK's
tests: a coordinator, parameter servers and ps-worker processes from the
build tree (PS_BUILD_DIR), and Python workers as subprocesses running a
script. Every process picks free ports (port 0, --port_file) and logs to
the test's directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

BUILD_DIR = os.environ.get(
    "PS_BUILD_DIR",
    os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "build"))
SOURCE_DIR = os.environ.get(
    "PS_SOURCE_DIR", os.path.join(os.path.dirname(__file__), os.pardir,
                                  os.pardir))
FASHION_MNIST = os.environ.get("PS_FASHION_MNIST_DIR",
                               "/usr/share/datasets/fashion-mnist")


def binary(subdir: str, name: str) -> str:
    return os.path.join(BUILD_DIR, subdir, name)


def python_path() -> str:
    return os.path.join(BUILD_DIR, "python")


def read_ports(path: str, timeout: float = 30.0) -> Dict[str, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            ports = {}
            with open(path) as f:
                for line in f:
                    key, _, value = line.strip().partition("=")
                    if value:
                        ports[key] = int(value)
            if "grpc_port" in ports:
                return ports
        time.sleep(0.05)
    raise TimeoutError(f"no port file {path} after {timeout} s")


class Process:
    def __init__(self, name: str, argv: List[str], log: str,
                 env: Optional[Dict[str, str]] = None):
        self.name = name
        self.argv = argv
        self.log_path = log
        self.log = open(log, "ab")
        self.proc = subprocess.Popen(argv, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self, timeout: float = 10.0) -> Optional[int]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def output(self) -> str:
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()


class Cluster:
    """Start with start(servers, cpp_workers); stop() ends every process."""

    def __init__(self, run_dir: str, lease_ms: int = 1500,
                 heartbeat_ms: int = 100, recovery_grace_ms: int = 60000,
                 coordinator_args: Optional[List[str]] = None):
        self.run_dir = str(run_dir)
        os.makedirs(self.run_dir, exist_ok=True)
        self.lease_ms = lease_ms
        self.heartbeat_ms = heartbeat_ms
        self.recovery_grace_ms = recovery_grace_ms
        self.coordinator_args = list(coordinator_args or [])
        self.processes: List[Process] = []
        self.coordinator = ""
        self._count: Dict[str, int] = {}

    def _name(self, kind: str) -> str:
        i = self._count.get(kind, 0)
        self._count[kind] = i + 1
        return f"{kind}{i}"

    def spawn(self, name: str, argv: List[str], ports: bool = True,
              env: Optional[Dict[str, str]] = None) -> Process:
        port_file = os.path.join(self.run_dir, f"{name}.ports")
        if ports:
            argv = argv + [f"--port_file={port_file}"]
        process = Process(name, argv, os.path.join(self.run_dir, f"{name}.log"),
                          env)
        self.processes.append(process)
        if ports:
            process.ports = read_ports(port_file)
        return process

    def start_coordinator(self, port: int = 0) -> str:
        """Starts the coordinator (again, on `port`, after a crash)."""
        p = self.spawn("coordinator", [
            binary("coordinator", "ps-coordinator"),
            f"--listen=127.0.0.1:{port}",
            f"--data_dir={self.run_dir}/coordinator.data",
            f"--heartbeat_interval_ms={self.heartbeat_ms}",
            f"--lease_ms={self.lease_ms}",
            f"--recovery_grace_ms={self.recovery_grace_ms}",
            "--metrics_port=-1"] + self.coordinator_args)
        self.coordinator = f"127.0.0.1:{p.ports['grpc_port']}"
        return self.coordinator

    def process(self, name: str) -> Process:
        return [p for p in self.processes if p.name == name][-1]

    def start_server(self, durable: bool = True,
                     extra: Optional[List[str]] = None) -> Process:
        name = self._name("server")
        argv = [binary("server", "ps-server"),
                f"--coordinator={self.coordinator}", "--metrics_port=-1"]
        if durable:
            argv.append(f"--data_dir={self.run_dir}/{name}.data")
        return self.spawn(name, argv + list(extra or []))

    def start_cpp_worker(self, extra: Optional[List[str]] = None) -> Process:
        name = self._name("cppworker")
        return self.spawn(name, [
            binary("worker", "ps-worker"), f"--coordinator={self.coordinator}",
            "--device=cpu", "--compute_threads=1", "--metrics_port=-1"] +
            list(extra or []))

    def start_python(self, script: str, *args: str,
                     name: Optional[str] = None) -> Process:
        """Runs `script` (a file of tests/python/workers) with /usr/bin/python3
        and the build tree's package on PYTHONPATH."""
        name = name or self._name("pyworker")
        env = dict(os.environ)
        env["PYTHONPATH"] = python_path() + os.pathsep + env.get(
            "PYTHONPATH", "")
        env.setdefault("OMP_NUM_THREADS", "1")
        path = os.path.join(os.path.dirname(__file__), "workers", script)
        return self.spawn(name, [sys.executable, "-u", path,
                                 self.coordinator] + list(args),
                          ports=False, env=env)

    def start(self, servers: int = 1, cpp_workers: int = 0,
              durable: bool = True) -> str:
        self.start_coordinator()
        for _ in range(servers):
            self.start_server(durable=durable)
        for _ in range(cpp_workers):
            self.start_cpp_worker()
        return self.coordinator

    def stop(self) -> None:
        for p in reversed(self.processes):
            p.stop()
        self.processes = []

    def logs(self) -> str:
        parts = []
        for name in sorted(os.listdir(self.run_dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.run_dir, name),
                          errors="replace") as f:
                    text = f.read()
                parts.append(f"==== {name} ====\n{text[-4000:]}")
        return "\n".join(parts)
