"""The SDK under mutual TLS, a cluster secret and a job token
(docs/security.md): a JobClient with the CA and the token and a Python
worker with its certificate and the secret train a job; a client without
TLS, without the token or with a wrong one, and a worker without the secret
are refused with their codes."""

import os
import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import paramserver as ps  # noqa: E402
from workers import common  # noqa: E402


def make_certificates(d):
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
          "-nodes"]

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True,
                       capture_output=True)
    (d / "leaf.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("req", "-x509", *ec, "-days", "2", "-subj", "/CN=ca", "-keyout",
        "ca.key", "-out", "ca.pem")
    run("req", *ec, "-subj", "/CN=node", "-keyout", "node.key", "-out",
        "node.csr")
    run("x509", "-req", "-days", "2", "-in", "node.csr", "-CA", "ca.pem",
        "-CAkey", "ca.key", "-CAcreateserial", "-extfile", "leaf.ext", "-out",
        "node.pem")


def test_tls_secret_and_token(cluster, tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl")
    d = tmp_path / "tls"
    d.mkdir()
    make_certificates(d)
    (d / "secret").write_text("python-sdk-secret-0123456789\n")
    (d / "token").write_text("# rotated tokens\npython-sdk-token-0123456789\n")
    for f in ("secret", "token", "ca.key", "node.key"):
        os.chmod(d / f, 0o600)
    tls = [f"--tls_cert={d}/node.pem", f"--tls_key={d}/node.key",
           f"--tls_ca={d}/ca.pem", f"--cluster_secret_file={d}/secret"]
    cluster.coordinator_args = tls + [f"--auth_token_file={d}/token"]
    coordinator = cluster.start_coordinator()
    cluster.start_server(durable=False,
                         extra=tls + ["--tls_require_client_cert"])

    torch.manual_seed(0)
    module = common.Small()
    spec = {"name": "secure", "model": ps.torch.model_spec(module),
            "epochs": 1, "batch_size": 10, "seed": 1,
            "optimizer": {"adam": {"learning_rate": 0.01}},
            "num_workers": 1, "num_servers": 1, "durability": "MEMORY"}
    # Refused clients, each with its code.
    with ps.JobClient(coordinator, timeout=5,
                      token_file=str(d / "token")) as plaintext:
        with pytest.raises(ps.UnavailableError):
            plaintext.list()
    with ps.JobClient(coordinator, tls_ca=str(d / "ca.pem")) as anonymous:
        with pytest.raises(ps.UnauthenticatedError):
            anonymous.submit(spec)
    with ps.JobClient(coordinator, tls_ca=str(d / "ca.pem"),
                      token="not-the-token-0123456789") as wrong:
        with pytest.raises(ps.UnauthenticatedError):
            wrong.list()
    with pytest.raises(ps.InvalidArgumentError) as e:
        ps.JobClient(coordinator, token="short")
    assert e.value.field == "token"

    client = ps.JobClient(coordinator, tls_ca=str(d / "ca.pem"),
                          token_file=str(d / "token"))
    job = client.submit(spec)
    # A member without the secret cannot join.
    with ps.torch.Worker(coordinator, common.Small(),
                         tls_ca=str(d / "ca.pem"),
                         tls_cert=str(d / "node.pem"),
                         tls_key=str(d / "node.key")) as outsider:
        with pytest.raises(ps.UnauthenticatedError):
            outsider.wait_for_job(timeout=30)
    x, y = common.synthetic(200)
    with ps.torch.Worker(coordinator, module, job=job,
                         tls_ca=str(d / "ca.pem"),
                         tls_cert=str(d / "node.pem"),
                         tls_key=str(d / "node.key"),
                         cluster_secret_file=str(d / "secret")) as worker:
        for _, batches in worker.epochs((x, y)):
            for xb, yb in batches:
                F.cross_entropy(module(xb), yb).backward()
                worker.step()
            worker.report(test_accuracy=common.accuracy(module, x, y))
    final = client.wait(job, timeout=60)
    assert final.state == ps.v1.SUCCEEDED, final.message
    assert set(client.export(job)) == {n for n, _ in module.named_parameters()}
    client.close()
    for log in os.listdir(cluster.run_dir):
        if log.endswith(".log"):
            text = open(os.path.join(cluster.run_dir, log)).read()
            assert "python-sdk-secret" not in text
            assert "python-sdk-token" not in text
