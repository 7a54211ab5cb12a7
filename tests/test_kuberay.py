"""docker/kuberay/: the manifests docs/deploy.md promises, parsed (yaml.safe_load) and checked field by
field: a RayCluster of the webagent-ray image with its ports and resources, a RayJob whose command is a
``webagent batch --ray`` that webagent's own parser takes, a ConfigMap whose TOML is a webagent config
with a fleet of hosts that name the browser pods, and those pods: headless-shell behind a token proxy
whose token comes from the same Secret the driver reads as the hosts' token secret."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from webagent.cli.parser import build_parser
from webagent.config import load_config

ROOT = Path(__file__).resolve().parent.parent
KUBERAY = ROOT / "docker" / "kuberay"
SECRET = "webagent-browser-token"


def documents(name: str) -> dict[str, dict[str, Any]]:
    """A manifest file's documents by kind."""
    docs = [d for d in yaml.safe_load_all((KUBERAY / name).read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs), f"{name}: one document of each kind"
    return by_kind


@pytest.fixture(scope="module")
def ray() -> dict[str, dict[str, Any]]:
    return documents("raycluster.yaml")


@pytest.fixture(scope="module")
def hosts() -> dict[str, dict[str, Any]]:
    return documents("browser-hosts.yaml")


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def secret_env(c: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """A container's variables read from secrets: name -> (secret, key)."""
    return {
        e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for e in c.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }


def test_the_ray_cluster_runs_the_webagent_ray_image_with_its_ports_and_resources(ray: dict[str, Any]) -> None:
    cluster = ray["RayCluster"]
    assert cluster["apiVersion"] == "ray.io/v1"
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # the driver only
    c = container(head["template"], "ray-head")
    assert c["image"].startswith("webagent-ray")
    assert {p["containerPort"] for p in c["ports"]} >= {6379, 10001}
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/etc/webagent", "/work/out"} <= mounts
    (workers,) = cluster["spec"]["workerGroupSpecs"]
    assert workers["replicas"] >= 2 and workers["minReplicas"] <= workers["replicas"] <= workers["maxReplicas"]
    w = container(workers["template"], "ray-worker")
    assert w["image"] == c["image"]
    assert w["resources"]["requests"]["cpu"] == workers["rayStartParams"]["num-cpus"]
    assert "volumeMounts" not in w  # no shared disk: the runs come back to the driver
    dockerfile = (KUBERAY / "Dockerfile").read_text()
    assert "FROM webagent" in dockerfile and "ray[default]" in dockerfile


def test_the_job_runs_a_webagent_batch_on_the_cluster_that_the_parser_takes(ray: dict[str, Any]) -> None:
    job = ray["RayJob"]
    assert job["spec"]["clusterSelector"]["ray.io/cluster"] == ray["RayCluster"]["metadata"]["name"]
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:2] == ["webagent", "batch"]
    args = build_parser().parse_args(argv[1:])
    assert args.ray == "auto" and args.ray_actors >= 1
    assert args.config == "/etc/webagent/webagent.toml" and args.output.startswith("/work/out/")


def test_the_config_is_a_fleet_of_the_browser_pods_with_the_secrets_token(
    ray: dict[str, Any], hosts: dict[str, Any], tmp_path: Path
) -> None:
    text = ray["ConfigMap"]["data"]["webagent.toml"]
    (tmp_path / "webagent.toml").write_text(text)
    head = container(ray["RayCluster"]["spec"]["headGroupSpec"]["template"], "ray-head")
    env = {name: "token" for name in secret_env(head)}
    config = load_config(tmp_path / "webagent.toml", env=env)  # a webagent config, its secret given
    assert config.browser.provider == "hosts"
    sts, service = hosts["StatefulSet"], hosts["Service"]
    assert service["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == service["metadata"]["name"]
    port = service["spec"]["ports"][0]["port"]
    pods = sts["spec"]["replicas"]
    urls = {f"http://{sts['metadata']['name']}-{i}.{service['metadata']['name']}:{port}" for i in range(pods)}
    assert {h.url for h in config.browser.hosts} == urls  # each host a pod of its own
    for host in config.browser.hosts:
        assert host.token_secret is not None
        assert secret_env(head)[f"WEBAGENT_SECRET_{host.token_secret}"] == (SECRET, "token")
        assert host.token_header == "Authorization" and host.token_prefix == "Bearer "
    assert tomllib.loads(text)["browser"]["hosts"][0]["sessions"] >= 1


def test_the_browser_hosts_are_headless_shell_reached_only_through_the_token_proxy(hosts: dict[str, Any]) -> None:
    pod = hosts["StatefulSet"]["spec"]["template"]
    chromium, proxy = container(pod, "chromium"), container(pod, "token-proxy")
    assert "headless-shell" in chromium["image"]
    assert "--remote-debugging-address=127.0.0.1" in chromium["args"]  # not reachable but through the proxy
    inner = next(a for a in chromium["args"] if a.startswith("--remote-debugging-port="))
    assert "ports" not in chromium
    assert chromium["resources"]["limits"]["cpu"] and chromium["resources"]["limits"]["memory"]
    assert [p["containerPort"] for p in proxy["ports"]] == [hosts["Service"]["spec"]["ports"][0]["targetPort"]]
    assert secret_env(proxy) == {"BROWSER_TOKEN": (SECRET, "token")}
    template = hosts["ConfigMap"]["data"]["default.conf.template"]
    assert 'if ($http_authorization != "Bearer ${BROWSER_TOKEN}") { return 401; }' in template
    assert f"proxy_pass http://127.0.0.1:{inner.partition('=')[2]};" in template
    mount = next(m for m in proxy["volumeMounts"] if m["mountPath"] == "/etc/nginx/templates")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == hosts["ConfigMap"]["metadata"]["name"]


def test_the_docs_name_the_manifests_and_the_secret() -> None:
    text = (ROOT / "docs" / "deploy.md").read_text()
    for needle in ("docker/kuberay/raycluster.yaml", "docker/kuberay/browser-hosts.yaml", SECRET, "--ray auto"):
        assert needle in text, needle
